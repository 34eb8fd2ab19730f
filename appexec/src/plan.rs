//! The daemon's options (`appexec OPTION... -- PATH ARGV0 ARG...`) read into
//! a [`Plan`]: pure, so the tests below check it.

use std::ffi::CString;

/// What the daemon asked for.
#[derive(Default, Debug)]
pub struct Plan {
    /// `None`: a new PID namespace; `Some((pid, start time))`: join that
    /// process's, if it is still the one that started then.
    pub join: Option<(u32, String)>,
    /// `pid=keep`: the PID namespace this program runs in (the pod's), no
    /// new one.
    pub keep_pid: bool,
    /// `pid=host`: as `keep`, but the child is a host-PID app's template:
    /// no /proc mounted (the node's is bound), parked instead of the exec.
    pub host: bool,
    /// Paths in the app's root of volumes whose mounts propagate both ways
    /// (`shared=`): copied from the pod before the namespace is made, so the
    /// copies stay peers of the host's mounts (the namespace's own are
    /// slaves), and put back on top once in the root.
    pub shared: Vec<CString>,
    pub masks: Vec<CString>,
    pub read_only: Vec<CString>,
    /// Syscall names to deny again, and the errno (`None`: kill).
    pub deny: Vec<String>,
    pub errno: Option<u32>,
    pub caps: Option<u64>,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub no_new_privs: bool,
    /// The AppArmor profile the app's execve enters (`aa=`), as written to
    /// /proc/self/attr/apparmor/exec (`exec PROFILE`).
    pub apparmor: Option<CString>,
    /// `cgwait=NAME:N`: wait, before anything else, until N of this
    /// process's cgroup v1 hierarchies place it in a cgroup named NAME (the
    /// app's, where the daemon moves it): the app then runs under its
    /// limits from its first instruction, as children inherit cgroups.
    /// Kept as `/NAME`, the end of a line of /proc/self/cgroup.
    pub cgroup_wait: Option<(String, usize)>,
    /// The app's root as the pod sees it (`root=`): this program makes the
    /// mount namespace and binds, then pivots into it (required).
    pub root: CString,
    pub binds: Vec<Bind>,
    pub root_read_only: bool,
    pub cwd: Option<CString>,
    pub path: CString,
    pub argv: Vec<CString>,
    /// `restore=PIDFILE`: the program after `--` is `criu restore`, which
    /// writes the restored container's pid (in this PID namespace, the
    /// pod's) to PIDFILE and leaves the container a child of this process
    /// (`--restore-sibling`); no namespace, root or confinement of this
    /// program's own (CRIU restores the container's from its images).
    pub restore: Option<CString>,
    /// `env=PATH`: a file of `NAME=VALUE` entries, each ended by a NUL, put
    /// into the environment before anything else (names systemd refuses in
    /// a unit's `Environment=`, such as `data-1` or `a.b`, which Kubernetes
    /// allows).
    pub env_file: Option<CString>,
    /// `oom=PATH`: once the app has ended, a file made at PATH when this
    /// process's cgroup v2 counted an OOM kill (`memory.events`), before
    /// the cgroup goes with the unit: the daemon reports the container
    /// OOMKilled whichever of its processes the kernel chose.
    pub oom_marker: Option<CString>,
    /// `started=PATH`: a FIFO of the pod's that the daemon reads; once
    /// systemd is told the app started (not in restore mode), a byte
    /// written there tells the daemon too, sooner than systemd's job would
    /// (a reader that is gone, or no FIFO at all, changes nothing: the job
    /// still ends).
    pub started: Option<CString>,
    /// `cgroupfs=ro` or `cgroupfs=rw`: the app's own cgroups at its
    /// /sys/fs/cgroup, each hierarchy's at its place there (`proc::cgroup_view`),
    /// read-only or not (a privileged container's), as runc shows a container
    /// its own limits; with `restore=`, CRIU is told to put them where the
    /// checkpoint had them. `Some(true)` for read-only.
    pub cgroup_view: Option<bool>,
    /// `cgroupviews=DIR`: the pod's cgroup v1 hierarchies, mounted once per
    /// pod by the daemon at `DIR/PLACE` (rooted at the pod's cgroup
    /// namespace): the app's own cgroups are cloned from there rather than
    /// from hierarchies mounted afresh for each app. A hierarchy not there
    /// is mounted as before.
    pub cgroup_views: Option<String>,
}

/// A path of the pod put at one of the app's (`bind=`, `rbind=` with the
/// tree below it, `robind=` and `rrobind=` read-only; a source written
/// `-/path` may be missing; one written `@path` is inside the app's root,
/// resolved there as if it were `/`): `KEY=SOURCE TARGET`, the target the
/// next argument.
#[derive(Debug, PartialEq, Eq)]
pub struct Bind {
    pub source: CString,
    pub in_root: bool,
    pub target: CString,
    pub recursive: bool,
    pub read_only: bool,
    pub optional: bool,
}

fn cstring(s: Vec<u8>) -> Result<CString, String> {
    CString::new(s).map_err(|_| "an argument contains a NUL byte".to_string())
}

fn number<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{key}={v} is not a number"))
}

/// The arguments after the program's name; an error says what is wrong.
pub fn parse(args: impl IntoIterator<Item = Vec<u8>>) -> Result<Plan, String> {
    let mut args = args.into_iter();
    let mut plan = Plan::default();
    while let Some(arg) = args.next() {
        if arg == b"--" {
            break;
        }
        let arg = String::from_utf8(arg).map_err(|_| "an option is not UTF-8")?;
        let (key, value) = arg.split_once('=').unwrap_or((arg.as_str(), ""));
        match key {
            "root" => plan.root = cstring(value.into())?,
            "rootro" => plan.root_read_only = true,
            "cwd" => plan.cwd = Some(cstring(value.into())?),
            "bind" | "rbind" | "robind" | "rrobind" => {
                let target = args.next().ok_or_else(|| format!("no target after {arg}"))?;
                let (optional, source) = match value.strip_prefix('-') {
                    Some(source) => (true, source),
                    None => (false, value),
                };
                let (in_root, source) = match source.strip_prefix('@') {
                    Some(source) => (true, source),
                    None => (false, source),
                };
                plan.binds.push(Bind {
                    source: cstring(source.into())?,
                    in_root,
                    target: cstring(target)?,
                    recursive: matches!(key, "rbind" | "rrobind"),
                    read_only: key.ends_with("robind"),
                    optional,
                });
            }
            "pid" if value == "new" => plan.join = None,
            "pid" if value == "keep" => plan.keep_pid = true,
            "pid" if value == "host" => (plan.keep_pid, plan.host) = (true, true),
            "shared" => plan.shared.push(cstring(value.into())?),
            "pid" => {
                let (pid, start) = value.split_once('@').ok_or("pid= is new or PID@STARTTIME")?;
                plan.join = Some((number(key, pid)?, start.to_string()));
            }
            "mask" => plan.masks.push(cstring(value.into())?),
            "ro" => plan.read_only.push(cstring(value.into())?),
            "deny" => {
                plan.deny = value.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
                // a call without a number would be left allowed: refused, so the daemon's list cannot drift
                if let Some(unknown) = plan.deny.iter().find(|n| !crate::seccomp::knows(n)) {
                    return Err(format!("deny=: no system call number for {unknown}"));
                }
            }
            "errno" => plan.errno = Some(number(key, value)?),
            "caps" => plan.caps = Some(u64::from_str_radix(value, 16).map_err(|_| "caps= is not hex")?),
            "uid" => plan.uid = number(key, value)?,
            "gid" => plan.gid = number(key, value)?,
            "groups" => {
                plan.groups =
                    value.split(',').filter(|s| !s.is_empty()).map(|g| number(key, g)).collect::<Result<_, _>>()?
            }
            "nnp" => plan.no_new_privs = true,
            "aa" => plan.apparmor = Some(cstring(format!("exec {value}").into_bytes())?),
            "cgwait" => {
                let (name, n) = value.rsplit_once(':').ok_or("cgwait= is NAME:COUNT")?;
                plan.cgroup_wait = Some((format!("/{name}"), number(key, n)?));
            }
            "restore" => plan.restore = Some(cstring(value.into())?),
            "env" => plan.env_file = Some(cstring(value.into())?),
            "oom" => plan.oom_marker = Some(cstring(value.into())?),
            "started" => plan.started = Some(cstring(value.into())?),
            "cgroupviews" if value.starts_with('/') => plan.cgroup_views = Some(value.to_string()),
            "cgroupfs" => {
                plan.cgroup_view = Some(match value {
                    "ro" => true,
                    "rw" => false,
                    _ => return Err(format!("cgroupfs={value}: ro or rw")),
                })
            }
            _ => return Err(format!("unknown option {arg:?}")),
        }
    }
    if plan.root.is_empty() && plan.restore.is_none() {
        return Err("no root=".into());
    }
    plan.path = cstring(args.next().ok_or("no program after --")?)?;
    plan.argv = args.map(cstring).collect::<Result<_, _>>()?;
    if plan.argv.is_empty() {
        return Err("no argv[0] after the program".into());
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &[&str]) -> Vec<Vec<u8>> {
        line.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    fn c(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    #[test]
    fn a_restore_needs_no_root() {
        let plan = parse(args(&["restore=/rkt/checkpoint/a/pid", "--", "/usr/sbin/criu", "criu", "restore"])).unwrap();
        assert_eq!(plan.restore, Some(c("/rkt/checkpoint/a/pid")));
        assert_eq!(plan.path, c("/usr/sbin/criu"));
        assert_eq!(plan.argv, [c("criu"), c("restore")]);
        assert!(parse(args(&["pid=new", "--", "/bin/sh", "sh"])).is_err(), "a start still needs root=");
    }

    #[test]
    fn a_full_line_as_the_daemon_writes_one() {
        let plan = parse(args(&[
            "root=/opt/stage2/app/rootfs",
            "rootro",
            "cwd=/work",
            "pid=7@12345",
            "shared=/data",
            "bind=/etc/hosts",
            "/etc/hosts",
            "rrobind=-@/usr/share",
            "/mnt/share",
            "mask=/proc/kcore",
            "ro=/proc/sys",
            "deny=mount,unshare,,setns",
            "errno=1",
            "caps=a80425fb",
            "uid=1000",
            "gid=1000",
            "groups=10,,1000,20",
            "nnp",
            "aa=cri-containerd.apparmor.d",
            "cgwait=app-7:3",
            "env=/rkt/env/app.environ",
            "oom=/rkt/status/app-oom",
            "started=/rkt/execd/app",
            "--",
            "/bin/sh",
            "sh",
            "-c",
            "echo hi",
        ]))
        .unwrap();
        assert_eq!(plan.root, c("/opt/stage2/app/rootfs"));
        assert!(plan.root_read_only);
        assert_eq!(plan.cwd, Some(c("/work")));
        assert_eq!(plan.join, Some((7, "12345".into())));
        assert!(!plan.keep_pid && !plan.host);
        assert_eq!(plan.shared, [c("/data")]);
        assert_eq!(
            plan.binds,
            [
                Bind {
                    source: c("/etc/hosts"),
                    in_root: false,
                    target: c("/etc/hosts"),
                    recursive: false,
                    read_only: false,
                    optional: false,
                },
                Bind {
                    source: c("/usr/share"),
                    in_root: true,
                    target: c("/mnt/share"),
                    recursive: true,
                    read_only: true,
                    optional: true,
                },
            ]
        );
        assert_eq!(plan.masks, [c("/proc/kcore")]);
        assert_eq!(plan.read_only, [c("/proc/sys")]);
        assert_eq!(plan.deny, ["mount", "unshare", "setns"]);
        assert_eq!(plan.env_file, Some(c("/rkt/env/app.environ")));
        assert_eq!(plan.oom_marker, Some(c("/rkt/status/app-oom")));
        assert_eq!(plan.started, Some(c("/rkt/execd/app")));
        assert_eq!(plan.errno, Some(1));
        assert_eq!(plan.caps, Some(0xa804_25fb));
        assert_eq!((plan.uid, plan.gid), (1000, 1000));
        assert_eq!(plan.groups, [10, 1000, 20]);
        assert!(plan.no_new_privs);
        assert_eq!(plan.apparmor, Some(c("exec cri-containerd.apparmor.d")));
        assert_eq!(plan.cgroup_wait, Some(("/app-7".into(), 3)));
        assert_eq!(plan.path, c("/bin/sh"));
        assert_eq!(plan.argv, [c("sh"), c("-c"), c("echo hi")]);
    }

    #[test]
    fn the_pid_modes() {
        let with = |pid: &str| parse(args(&["root=/r", pid, "--", "/p", "p"])).unwrap();
        let new = with("pid=new");
        assert!(new.join.is_none() && !new.keep_pid && !new.host);
        let keep = with("pid=keep");
        assert!(keep.join.is_none() && keep.keep_pid && !keep.host);
        let host = with("pid=host");
        assert!(host.join.is_none() && host.keep_pid && host.host);
        // no pid= at all: a new namespace, and root only by default
        let plain = parse(args(&["root=/r", "--", "/p", "p"])).unwrap();
        assert!(plain.join.is_none() && !plain.keep_pid);
        assert_eq!((plain.uid, plain.gid, plain.caps, plain.errno), (0, 0, None, None));
        assert!(plain.deny.is_empty() && plain.binds.is_empty() && plain.cgroup_wait.is_none());
    }

    #[test]
    fn the_cgroup_view_is_read_only_or_not() {
        let with = |v: &str| parse(args(&["root=/r", v, "--", "/p", "p"]));
        assert_eq!(with("cgroupfs=ro").unwrap().cgroup_view, Some(true));
        assert_eq!(with("cgroupfs=rw").unwrap().cgroup_view, Some(false));
        assert!(with("cgroupfs=yes").is_err());
        assert_eq!(with("nnp").unwrap().cgroup_view, None);
        assert_eq!(with("cgroupviews=/run/v").unwrap().cgroup_views.as_deref(), Some("/run/v"));
        assert!(with("cgroupviews=run/v").is_err(), "a relative directory");
        assert_eq!(with("nnp").unwrap().cgroup_views, None);
    }

    #[test]
    fn a_cgroup_name_may_hold_colons() {
        let plan = parse(args(&["root=/r", "cgwait=a:b:2", "--", "/p", "p"])).unwrap();
        assert_eq!(plan.cgroup_wait, Some(("/a:b".into(), 2)));
    }

    #[test]
    fn what_is_refused_and_why() {
        for (line, why) in [
            (&["--", "/p", "p"][..], "no root="),
            (&["root=/r", "--"], "no program after --"),
            (&["root=/r"], "no program after --"),
            (&["root=/r", "--", "/p"], "no argv[0] after the program"),
            (&["root=/r", "bogus=1", "--", "/p", "p"], "unknown option \"bogus=1\""),
            (&["root=/r", "bind=/a"], "no target after bind=/a"),
            (&["root=/r", "pid=7", "--", "/p", "p"], "pid= is new or PID@STARTTIME"),
            (&["root=/r", "pid=x@1", "--", "/p", "p"], "pid=x is not a number"),
            (&["root=/r", "uid=-1", "--", "/p", "p"], "uid=-1 is not a number"),
            (&["root=/r", "groups=1,x", "--", "/p", "p"], "groups=x is not a number"),
            (&["root=/r", "caps=xyz", "--", "/p", "p"], "caps= is not hex"),
            (&["root=/r", "cgwait=app", "--", "/p", "p"], "cgwait= is NAME:COUNT"),
            (&["root=/r", "deny=mount,bpf", "--", "/p", "p"], "deny=: no system call number for bpf"),
        ] {
            assert_eq!(parse(args(line)).unwrap_err(), why, "{line:?}");
        }
        let nul = vec![b"root=/r".to_vec(), b"--".to_vec(), b"/p".to_vec(), b"a\0b".to_vec()];
        assert_eq!(parse(nul).unwrap_err(), "an argument contains a NUL byte");
        let latin1 = vec![b"root=/r\xff".to_vec()];
        assert_eq!(parse(latin1).unwrap_err(), "an option is not UTF-8");
    }

    #[test]
    fn after_the_separator_nothing_is_an_option() {
        let plan = parse(args(&["root=/r", "--", "/bin/env", "env", "root=/x", "--", "nnp"])).unwrap();
        assert_eq!(plan.argv, [c("env"), c("root=/x"), c("--"), c("nnp")]);
        assert!(!plan.no_new_privs);
        // arguments are bytes: an app's need not be UTF-8
        let plan = parse(vec![b"root=/r".to_vec(), b"--".to_vec(), b"/p".to_vec(), b"\xff".to_vec()]).unwrap();
        assert_eq!(plan.argv, [CString::new(b"\xff".to_vec()).unwrap()]);
    }
}
