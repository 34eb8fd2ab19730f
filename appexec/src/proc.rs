//! What this program reads of /proc, parsed: pure, tested below.

/// Whether `count` lines of a /proc/self/cgroup text (the v1 hierarchies,
/// not the v2 `0::` line) end with `suffix` (`/NAME`, the app's cgroup).
pub fn placed(cgroup: &str, suffix: &str, count: usize) -> bool {
    cgroup.lines().filter(|l| !l.starts_with("0::") && l.ends_with(suffix)).count() >= count
}

/// The entries of an environment file (`NAME=VALUE`, each ended by a NUL;
/// a last one without its NUL counts too), as (name, value); an entry
/// without `=` or with an empty name is skipped.
pub fn env_entries(file: &[u8]) -> Vec<(&[u8], &[u8])> {
    file.split(|b| *b == 0)
        .filter_map(|e| {
            let eq = e.iter().position(|b| *b == b'=')?;
            (eq > 0).then(|| (&e[..eq], &e[eq + 1..]))
        })
        .collect()
}

/// This process's cgroup v2 path (the `0::` line of /proc/self/cgroup).
pub fn v2_cgroup(cgroup: &str) -> Option<&str> {
    cgroup.lines().find_map(|l| l.strip_prefix("0::"))
}

/// Where a container's own cgroups go at its /sys/fs/cgroup, as runc puts
/// them, from its /proc/self/cgroup text read in the pod (whose cgroup
/// namespace the paths are relative to).
#[derive(Debug, PartialEq, Eq)]
pub enum CgroupView {
    /// Pure cgroup v2: the cgroup at `path` below the pod's /sys/fs/cgroup
    /// is the container's /sys/fs/cgroup.
    V2 { path: String },
    /// cgroup v1 hierarchies (the v2 one of a hybrid host is left out, as
    /// runc leaves it): a tmpfs at /sys/fs/cgroup with each hierarchy's
    /// cgroup at its place.
    V1(Vec<Hierarchy>),
}

/// A cgroup v1 hierarchy of the view.
#[derive(Debug, PartialEq, Eq)]
pub struct Hierarchy {
    /// The controllers that make it a hierarchy (mount flags), or its
    /// name (`name=systemd`: `name`).
    pub controllers: Vec<String>,
    pub name: Option<String>,
    /// Its directory below /sys/fs/cgroup: the controllers comma-joined,
    /// or the name.
    pub place: String,
    /// The process's cgroup, relative to the hierarchy's root in this
    /// cgroup namespace (empty: the root).
    pub path: String,
}

/// The view for a /proc/self/cgroup text; None when it names no cgroup
/// this program can show (a path that climbs out of the namespace, `..`).
pub fn cgroup_view(cgroup: &str) -> Option<CgroupView> {
    let lines: Vec<(&str, &str)> = cgroup
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            Some((controllers, path))
        })
        .collect();
    let relative = |path: &str| -> Option<String> {
        let rest = path.strip_prefix('/')?;
        rest.split('/').all(|p| p != ".." && p != ".").then(|| rest.to_string())
    };
    if lines.iter().all(|(c, _)| c.is_empty()) {
        let (_, path) = lines.first()?;
        return Some(CgroupView::V2 { path: relative(path)? });
    }
    let mut hierarchies = Vec::new();
    for (controllers, path) in lines.into_iter().filter(|(c, _)| !c.is_empty()) {
        let (controllers, name) = match controllers.strip_prefix("name=") {
            Some(name) => (Vec::new(), Some(name.to_string())),
            None => (controllers.split(',').map(str::to_string).collect(), None),
        };
        let place = name.clone().unwrap_or_else(|| controllers.join(","));
        if place.is_empty() || place.contains('/') || place.starts_with('.') {
            return None;
        }
        hierarchies.push(Hierarchy { controllers, name, place, path: relative(path)? });
    }
    Some(CgroupView::V1(hierarchies))
}

/// `oom_kill` of a cgroup v2 `memory.events` (its text); 0 without one.
pub fn oom_kills(events: &str) -> u64 {
    events.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

/// Field 22 of a `/proc/<pid>/stat` text: when the process started (clock
/// ticks since boot). The command (field 2, in parentheses) may hold
/// spaces and parentheses itself: the fields are counted after its last `)`.
pub fn start_time(stat: &str) -> Option<&str> {
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)
}

/// How a child ended, from a wait(2) status: `Ok(exit code)` or
/// `Err(signal)`.
pub fn ended(status: i32) -> Result<i32, i32> {
    match status & 0x7f {
        0 => Ok((status >> 8) & 0xff),
        signal => Err(signal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "12:pids:/machine.slice/pod/app-7\n\
                      11:memory:/machine.slice/pod/app-7\n\
                      10:cpu,cpuacct:/machine.slice/pod\n\
                      9:devices:/machine.slice/pod/app-7\n\
                      1:name=systemd:/machine.slice/pod/system.slice/app.service\n\
                      0::/machine.slice/pod/app-7\n";

    #[test]
    fn the_own_cgroups_at_their_hierarchies_places() {
        let Some(CgroupView::V1(got)) = cgroup_view(V1) else { panic!("not v1") };
        let h = |controllers: &[&str], name: Option<&str>, place: &str, path: &str| Hierarchy {
            controllers: controllers.iter().map(|c| c.to_string()).collect(),
            name: name.map(str::to_string),
            place: place.into(),
            path: path.into(),
        };
        let want = [
            h(&["pids"], None, "pids", "machine.slice/pod/app-7"),
            h(&["memory"], None, "memory", "machine.slice/pod/app-7"),
            h(&["cpu", "cpuacct"], None, "cpu,cpuacct", "machine.slice/pod"),
            h(&["devices"], None, "devices", "machine.slice/pod/app-7"),
            h(&[], Some("systemd"), "systemd", "machine.slice/pod/system.slice/app.service"),
        ];
        assert_eq!(got, want);
        // in the pod's cgroup namespace: a hierarchy where the app is at the root
        let Some(CgroupView::V1(got)) = cgroup_view("7:blkio:/\n4:memory:/app-0-a\n0::/system.slice/a.service\n")
        else {
            panic!("not v1")
        };
        assert_eq!(got, [h(&["blkio"], None, "blkio", ""), h(&["memory"], None, "memory", "app-0-a")]);
        // pure v2: the one hierarchy is /sys/fs/cgroup itself
        assert_eq!(
            cgroup_view("0::/system.slice/0-web.service\n"),
            Some(CgroupView::V2 { path: "system.slice/0-web.service".into() })
        );
        // a path that climbs, a place that is no directory name, nothing: no view
        for bad in ["4:memory:/a/../../x\n", "3:a/b:/p\n", "0::/../x\n", "2:name=.:/p\n", ""] {
            assert_eq!(cgroup_view(bad), None, "{bad}");
        }
    }

    #[test]
    fn oom_kills_of_the_own_cgroup() {
        assert_eq!(v2_cgroup("5:devices:/x\n0::/system.slice/a.service\n"), Some("/system.slice/a.service"));
        assert_eq!(v2_cgroup("5:devices:/x\n"), None);
        assert_eq!(oom_kills("low 0\nhigh 0\nmax 4\noom 2\noom_kill 1\noom_group_kill 0\n"), 1);
        assert_eq!(oom_kills(""), 0);
    }

    #[test]
    fn environment_entries_keep_every_byte() {
        let got = env_entries(b"data-1=x\0a.b=\0=no\0noeq\0K=v=w\nline\0LAST=1");
        let want: Vec<(&[u8], &[u8])> = vec![(b"data-1", b"x"), (b"a.b", b""), (b"K", b"v=w\nline"), (b"LAST", b"1")];
        assert_eq!(got, want);
    }

    #[test]
    fn counts_the_v1_hierarchies_that_placed_it() {
        assert!(placed(V1, "/app-7", 3));
        assert!(!placed(V1, "/app-7", 4), "the v2 line does not count");
        assert!(!placed(V1, "/app-8", 1));
        // a name that only ends the same way is not the app's cgroup
        assert!(!placed("11:memory:/pod/xapp-7\n", "/app-7", 1));
        assert!(placed(V1, "/app-7", 0));
        assert!(!placed("", "/app-7", 1));
    }

    #[test]
    fn the_start_time_after_the_command() {
        let stat = "4242 (sleep) S 1 4242 4242 0 -1 4194560 101 0 0 0 0 0 0 0 20 0 1 0 987654 2478080 200";
        assert_eq!(start_time(stat), Some("987654"));
        // a command with a space and a parenthesis in it
        let odd = "4242 (a) b) S 1 4242 4242 0 -1 4194560 101 0 0 0 0 0 0 0 20 0 1 0 1234 2478080 200";
        assert_eq!(start_time(odd), Some("1234"));
        assert_eq!(start_time("4242 (sleep) S 1"), None);
        assert_eq!(start_time(""), None);
    }

    #[test]
    fn exit_codes_and_signals() {
        assert_eq!(ended(0), Ok(0));
        assert_eq!(ended(3 << 8), Ok(3));
        assert_eq!(ended(9), Err(9));
        // killed with a core dump (bit 7)
        assert_eq!(ended(0x80 | 11), Err(11));
    }
}
