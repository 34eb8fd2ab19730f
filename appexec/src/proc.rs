//! What this program reads of /proc, parsed: pure, tested below.

/// Whether `count` lines of a /proc/self/cgroup text (the v1 hierarchies,
/// not the v2 `0::` line) end with `suffix` (`/NAME`, the app's cgroup).
pub fn placed(cgroup: &str, suffix: &str, count: usize) -> bool {
    cgroup.lines().filter(|l| !l.starts_with("0::") && l.ends_with(suffix)).count() >= count
}

/// Field 22 of a `/proc/<pid>/stat` text: when the process started (clock
/// ticks since boot). The command (field 2, in parentheses) may hold
/// spaces and parentheses itself: the fields are counted after its last `)`.
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

/// `oom_kill` of a cgroup v2 `memory.events` (its text); 0 without one.
pub fn oom_kills(events: &str) -> u64 {
    events.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

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
