//! A PID namespace per container (kubelet's default `NamespaceMode
//! CONTAINER`, and `TARGET` for a debug container joining another's): the
//! daemon's side of `appexec` (the `appexec/` crate, built static by build.rs).
//!
//! The pod's systemd (252) cannot give a unit its own PID namespace, and a
//! program it starts has already lost what it would need to make one (root,
//! capabilities, a seccomp filter without `mount`). So for these apps the
//! unit keeps what systemd does well (environment, stdio, cgroup, stop) but
//! runs `appexec` as root, with the app's filter widened by the calls
//! appexec makes; appexec makes the namespaces, the app's mounts and its
//! /proc, denies those calls again, and takes the app's capabilities, ids
//! and no_new_privs itself before it exec's the app.
//!
//! The mount namespace is appexec's too, as in rkt's own stage1: systemd
//! would copy the pod's whole mount table into each unit's namespace and
//! parse it for each bind, and every app's rootfs mounted in the pod later
//! would propagate into every running app's namespace, so a start and a
//! create grew with the number of apps. appexec pivots into the app's rootfs
//! and drops the pod's mounts from its namespace.
//!
//! The program is embedded in the daemon, written once per data directory,
//! and bound read-only into each pod at [`IN_POD`] (in every app's /dev).

use super::bus::ExecCommand;
use super::inject::{self, Attach, Propagation};
use rkt::pod::DataDir;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where apps find the program (the pod's /dev, which every app binds).
pub(crate) const IN_POD: &str = "/dev/.rkt-appexec";
/// What `comm` of its process reads: the file name as exec'd.
pub(crate) const COMM: &str = ".rkt-appexec";
const BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/appexec"));

/// The PID namespace an app asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PidMode {
    /// The pod's (systemd is PID 1): rkt's way, no appexec.
    Pod,
    /// Its own, the app as PID 1.
    Container,
    /// That of the process with this pid in the pod's namespace, started at
    /// this time (`/proc/<pid>/stat` field 22: a reused pid is refused).
    Join(i32, String),
    /// The node's (a host-PID pod): appexec parks as the app's template
    /// and the pod's log writer starts the app as a copy of it.
    Host,
}

/// `appexec-<digest>`: the name of this build's program, and of the marker
/// of a pod that has it bound.
fn name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| super::embedded::name("appexec", BINARY))
}

/// The host copy of the program (`appexec/appexec-<digest>` in the data dir).
fn host_copy(data: &DataDir) -> io::Result<PathBuf> {
    super::embedded::host_copy(data, "appexec", name(), BINARY)
}

/// Binds the program read-only at [`IN_POD`] in the pod, once per build of
/// the daemon (a pod booted by an older one gets this build's on top). Done
/// when the pod has booted (`stage1::boot`), else by the first start
/// needing it.
pub(crate) fn ensure(data: &DataDir, pod_dir: &Path, pod_pid1: i32) -> io::Result<()> {
    super::once_per_pod(pod_dir, name(), || {
        let src = host_copy(data)?;
        // the mount point, in the pod's /dev (its tmpfs), through its PID 1's
        // root: a file of our own, not whatever an app may have put there
        // (move_mount does not follow a symlink at its target)
        let target = format!("/proc/{pod_pid1}/root{IN_POD}");
        match std::fs::symlink_metadata(&target) {
            // an older build's bind: this one goes on top
            Ok(m) if m.is_file() => {}
            Ok(_) => std::fs::remove_file(&target)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if !Path::new(&target).exists() {
            std::fs::OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o555)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&target)?;
        }
        let tree = inject::clone_tree(&src, false, true, Propagation::Private)?;
        inject::attach(pod_pid1, &[Attach::new(tree, Path::new(IN_POD))?])
    })
}

/// The FIFO through which appexec says the app started (`started=`),
/// read while its unit starts (`PodBus::start_transient_service_or_started`):
/// made at [`super::app::AppPaths::started_fifo`] (the pod's
/// `/rkt/execd/<app>`), and removed when dropped.
pub(crate) struct StartedFifo {
    path: PathBuf,
    in_pod: String,
    reader: std::os::fd::OwnedFd,
}

impl StartedFifo {
    /// Makes the app's FIFO (in place of one an interrupted start left)
    /// and opens its read end, non-blocking.
    pub(crate) fn make(paths: &super::app::AppPaths) -> io::Result<StartedFifo> {
        let path = paths.started_fifo();
        if let Some(dir) = path.parent() {
            match std::fs::create_dir(dir) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            }
        }
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).map_err(io::Error::from)?;
        let fifo = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
            .open(&path)
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&path);
            })?;
        let in_pod = paths.started_fifo_in_pod().display().to_string();
        Ok(StartedFifo { path, in_pod, reader: fifo.into() })
    }

    /// Its path in the pod, for appexec's `started=`.
    pub(crate) fn in_pod(&self) -> &str {
        &self.in_pod
    }

    pub(crate) fn reader(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.reader)
    }
}

impl Drop for StartedFifo {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The namespace calls appexec makes after systemd applied the app's
/// seccomp filter: denied again once it is done with them.
fn needs(pid: &PidMode) -> Vec<&'static str> {
    // (setsid and ioctl: the container's own session and terminal)
    let mut calls = vec![
        "mount",
        "mount_setattr",
        "unshare",
        "open_tree",
        "move_mount",
        "pivot_root",
        "umount2",
        // (the app's own cgroup v1 hierarchies, mounted afresh)
        "fsopen",
        "fsconfig",
        "fsmount",
        "setsid",
        "ioctl",
    ];
    // (unshare makes the mount namespace in either case)
    if matches!(pid, PidMode::Join(..)) {
        calls.insert(3, "setns");
    }
    calls
}

/// The other calls appexec makes under the app's filter (besides its
/// start-up) that its child no longer needs once its own filter is in:
/// let through, then denied again like the namespace calls.
const DENIED_AGAIN: [&str; 22] = [
    "waitid",
    "symlink",
    "symlinkat",
    "nanosleep",
    "clock_nanosleep",
    "chdir",
    "mkdir",
    "mkdirat",
    "openat",
    "openat2",
    "socket",
    "sendto",
    "read",
    "close",
    "clone",
    "wait4",
    "kill",
    "getpid",
    "pipe2",
    "newfstatat",
    "statx",
    "rt_sigaction",
];

/// What the child still calls after its filter (dropping privileges, and
/// the exec): let through and left so. A strict allow list that names none
/// of these is that much wider for the app than with runc, which installs
/// the profile itself.
pub(super) const STILL_NEEDED: [&str; 10] =
    ["prctl", "capget", "capset", "setgroups", "setresgid", "setresuid", "poll", "execve", "write", "exit_group"];

/// systemd's `@mount` group, as far as appexec calls it (not in `@system-service`).
const MOUNT_API: [&str; 9] =
    ["mount", "mount_setattr", "open_tree", "move_mount", "pivot_root", "umount2", "fsopen", "fsconfig", "fsmount"];

/// Whether a systemd (252) filter entry names `call`, itself or by a group
/// (`@system-service`, RuntimeDefault's, holds every call appexec makes but
/// the @mount ones).
fn names(entry: &str, call: &str) -> bool {
    match (call, entry) {
        (_, "@known") => true,
        (_, "@mount") => MOUNT_API.contains(&call),
        (_, "@system-service") => !MOUNT_API.contains(&call),
        ("unshare" | "setns", "@process") => true,
        _ => entry == call,
    }
}

/// How the app's seccomp filter must change for appexec: the calls to let
/// through (allowed after the app's filter, which removes them from a deny
/// list), and those to deny again once appexec is done with them.
pub(crate) fn widen(pid: &PidMode, allow_list: bool, entries: &[String]) -> (Vec<String>, Vec<String>) {
    let deniable: Vec<&str> = needs(pid).into_iter().chain(DENIED_AGAIN).collect();
    let denied = deniable
        .iter()
        .filter(|call| entries.iter().any(|e| names(e, call)) != allow_list)
        .map(|c| c.to_string())
        .collect();
    (deniable.iter().chain(&STILL_NEEDED).map(|c| c.to_string()).collect(), denied)
}

/// What appexec does for one app.
#[derive(Debug, Clone, Default)]
pub(crate) struct Plan {
    /// A target's pid in the pod and its start time.
    pub join: Option<(i32, String)>,
    /// No new PID namespace: the app stays in appexec's (`pid=keep`).
    pub keep_pid: bool,
    /// The template of a host-PID app (`pid=host`): confined, not exec'd.
    pub host: bool,
    /// Paths in the app's root of volumes whose mounts propagate both ways
    /// (appexec keeps them peers of the host's, `shared=`).
    pub shared: Vec<String>,
    /// The app's paths to mask and to make read-only (after its new /proc
    /// is mounted; systemd makes none of them for such an app).
    pub masks: Vec<String>,
    pub read_only: Vec<String>,
    pub deny: Vec<String>,
    /// The errno of the app's filter (none: a denied call kills).
    pub errno: Option<i32>,
    /// The capability bounding set (none: all the pod has).
    pub caps: Option<u64>,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub no_new_privs: bool,
    /// The AppArmor profile the app runs under (`stage1::apparmor`).
    pub apparmor: Option<String>,
    /// The app's cgroup v1 directory name and how many hierarchies have
    /// one: appexec waits until the daemon has moved it into all of them.
    pub cgroup_wait: Option<(String, usize)>,
    /// A file of the pod's with environment entries (`NAME=VALUE`, each
    /// NUL-ended) appexec adds before anything else: what systemd refuses
    /// in a unit's `Environment=`.
    pub env_file: Option<String>,
    /// Where appexec marks, once the app has ended, that its unit's cgroup
    /// v2 counted an OOM kill (`stage1::app::OOM_KILLED`).
    pub oom_marker: Option<String>,
    /// The FIFO appexec writes a byte to once systemd is told the app
    /// started ([`StartedFifo`], `started=`), in the pod.
    pub started: Option<String>,
    /// The app's own cgroups at its /sys/fs/cgroup (`cgroupfs=`), as runc
    /// shows them (kubelet's swap checks and programs that size themselves
    /// read the container's limits there): `Some(true)` read-only, as for
    /// every container but a privileged one.
    pub cgroup_view: Option<bool>,
    /// Where the pod's cgroup v1 hierarchies are mounted, to copy the
    /// app's own cgroups from (`cgroupviews=`, `stage1::cgroup_views`).
    pub cgroup_views: Option<String>,
    /// The app's root in the pod: appexec makes its mount namespace (none
    /// from systemd), the binds, and pivots into it.
    pub root: Option<String>,
    pub binds: Vec<Bind>,
    pub root_read_only: bool,
    pub working_directory: Option<String>,
    /// A container restored from a checkpoint: the command is `criu
    /// restore`, which writes the restored container's pid to this file;
    /// appexec runs it and then waits for the container (nothing else of
    /// the plan applies: CRIU restores the namespaces and confinement).
    pub restore: Option<String>,
}

/// A path of the pod bound at one of the app's (systemd's `BindPaths=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bind {
    /// A path of the pod, or `@path`: inside the app's root, resolved by
    /// appexec as if it were `/`.
    pub source: String,
    pub target: String,
    pub recursive: bool,
    pub read_only: bool,
    /// A missing source is skipped.
    pub optional: bool,
}

impl Plan {
    /// The unit's ExecStart: appexec with its options, then the app's
    /// program, argv[0] and arguments.
    pub(crate) fn command(&self, app: &ExecCommand) -> ExecCommand {
        if let Some(pidfile) = &self.restore {
            let mut args = vec![format!("restore={pidfile}")];
            args.extend(self.root.iter().map(|r| format!("root={r}")));
            if self.root_read_only {
                args.push("rootro".into());
            }
            self.cgroup_args(&mut args);
            args.extend(["--".into(), app.path.clone()]);
            args.extend(app.argv.iter().cloned());
            let mut cmd = ExecCommand::new(IN_POD, args);
            cmd.argv[0] = COMM.into();
            return cmd;
        }
        let mut args = vec![match &self.join {
            Some((pid, start)) => format!("pid={pid}@{start}"),
            None if self.host => "pid=host".into(),
            None if self.keep_pid => "pid=keep".into(),
            None => "pid=new".into(),
        }];
        args.extend(self.shared.iter().map(|p| format!("shared={p}")));
        if let Some(root) = &self.root {
            args.push(format!("root={root}"));
        }
        for b in &self.binds {
            let key = match (b.recursive, b.read_only) {
                (true, true) => "rrobind",
                (false, true) => "robind",
                (true, false) => "rbind",
                (false, false) => "bind",
            };
            args.push(format!("{key}={}{}", if b.optional { "-" } else { "" }, b.source));
            args.push(b.target.clone());
        }
        if self.root_read_only {
            args.push("rootro".into());
        }
        args.extend(self.working_directory.iter().map(|d| format!("cwd={d}")));
        args.extend(self.masks.iter().map(|p| format!("mask={p}")));
        args.extend(self.read_only.iter().map(|p| format!("ro={p}")));
        if !self.deny.is_empty() {
            args.push(format!("deny={}", self.deny.join(",")));
            args.extend(self.errno.map(|e| format!("errno={e}")));
        }
        args.extend(self.caps.map(|c| format!("caps={c:x}")));
        args.push(format!("uid={}", self.uid));
        args.push(format!("gid={}", self.gid));
        if !self.groups.is_empty() {
            let groups: Vec<String> = self.groups.iter().map(u32::to_string).collect();
            args.push(format!("groups={}", groups.join(",")));
        }
        if self.no_new_privs {
            args.push("nnp".into());
        }
        args.extend(self.apparmor.iter().map(|p| format!("aa={p}")));
        args.extend(self.env_file.iter().map(|f| format!("env={f}")));
        self.cgroup_args(&mut args);
        args.push("--".into());
        args.push(app.path.clone());
        args.extend(app.argv.iter().cloned());
        let mut cmd = ExecCommand::new(IN_POD, args);
        cmd.argv[0] = COMM.into();
        cmd
    }
}

impl Plan {
    /// What restored and started apps alike take: where appexec waits to
    /// be placed (cgroup v1), where it marks an OOM kill, where it says the
    /// app started, and the app's own cgroups at its /sys/fs/cgroup.
    fn cgroup_args(&self, args: &mut Vec<String>) {
        args.extend(self.cgroup_wait.iter().map(|(name, n)| format!("cgwait={name}:{n}")));
        args.extend(self.oom_marker.iter().map(|f| format!("oom={f}")));
        args.extend(self.started.iter().map(|f| format!("started={f}")));
        args.extend(self.cgroup_view.map(|ro| format!("cgroupfs={}", if ro { "ro" } else { "rw" })));
        args.extend(self.cgroup_views.iter().map(|dir| format!("cgroupviews={dir}")));
    }
}

/// Field `n` of `/proc/<pid>/stat` counted from the state (the first after
/// the command name, which may hold spaces).
fn stat_field(pid: i32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(n).map(str::to_string)
}

fn parent_of(pid: i32) -> Option<i32> {
    stat_field(pid, 1)?.parse().ok()
}

fn is_appexec(pid: i32) -> Option<bool> {
    Some(std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim_end() == COMM)
}

/// The host pid of an app's own process among its unit's processes: the
/// unit's main process (the child of the pod's systemd), or, when that is
/// appexec, appexec's child once it has become the app (before, it is root
/// with the pod's capabilities: nothing may be run as a copy of it); for a
/// host-PID app, the process its log writer recorded (`host_app`, see
/// [`host_app_pid`]).
///
/// None while no process is the app yet. appexec's child is the app once
/// its executable is no longer appexec's: the kernel changes that in the
/// execve before it closes the pipe that tells appexec the app started, and
/// the process's name (`comm`) only after. The unit's main process without
/// appexec is the app once its executable is no longer the pod's systemd's
/// (before, it is systemd's child setting the app up, as root). A process
/// still in the pod's root (appexec before its pivot) is never the app: a
/// command run as a copy of it would run in the pod's root, with none of
/// the app's files.
pub(crate) fn app_pid(pod_pid1: i32, unit_processes: &[i32], host_app: Option<(i32, String)>) -> Option<i32> {
    if let Some(app) = host_app_pid(host_app, unit_processes) {
        return Some(app);
    }
    let main = unit_processes.iter().copied().find(|pid| parent_of(*pid) == Some(pod_pid1))?;
    let app = if is_appexec(main)? {
        let child = unit_processes.iter().copied().find(|pid| parent_of(*pid) == Some(main))?;
        if same_file(&format!("/proc/{child}/exe"), &format!("/proc/{main}/exe"))? {
            return None;
        }
        child
    } else {
        // systemd's child runs systemd until its execve, as root with the
        // pod's capabilities, already in the app's root once it chrooted
        if same_file(&format!("/proc/{main}/exe"), &format!("/proc/{pod_pid1}/exe"))? {
            return None;
        }
        main
    };
    let in_pods_root = same_file(&format!("/proc/{app}/root"), &format!("/proc/{pod_pid1}/root"))?;
    (!in_pods_root).then_some(app)
}

/// Whether two paths (followed) are the same file; None if one is gone.
fn same_file(a: &str, b: &str) -> Option<bool> {
    crate::base::fsutil::same_file(Path::new(a), Path::new(b)).ok()
}

/// The template of a host-PID app: the child of the unit's main process
/// (appexec), itself still appexec (parked, never exec'd).
pub(crate) fn template_pid(pod_pid1: i32, unit_processes: &[i32]) -> Option<i32> {
    let main = unit_processes.iter().copied().find(|pid| parent_of(*pid) == Some(pod_pid1))?;
    let template = unit_processes.iter().copied().find(|pid| parent_of(*pid) == Some(main))?;
    is_appexec(template)?.then_some(template)
}

/// A host-PID app among its unit's processes: the process its log writer
/// started and recorded (`stage1::app::host_app`: pid and start time), if
/// it is still that process and in the unit. Not guessed from the unit's
/// processes: any process of the node put in the app's cgroup (older than
/// the app, say) would be taken for it, and an exec would copy it.
pub(crate) fn host_app_pid(recorded: Option<(i32, String)>, unit_processes: &[i32]) -> Option<i32> {
    let (pid, start) = recorded?;
    (unit_processes.contains(&pid) && start_time(pid).as_deref() == Some(start.as_str())).then_some(pid)
}

/// When a process started (`/proc/<pid>/stat` field 22), the same in every namespace.
pub(crate) fn start_time(host_pid: i32) -> Option<String> {
    stat_field(host_pid, 19)
}

/// A host pid as the pod's PID namespace numbers it (the second `NSpid`).
pub(crate) fn pid_in_pod(host_pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What appexec's `started=` does with the FIFO: a writer that finds
    /// the daemon reading makes its read end readable; one that comes once
    /// the start went on (the FIFO removed) finds nothing, and fails at once.
    #[test]
    fn the_started_fifo_is_read_without_blocking_and_removed_after() {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let tmp = tempfile::tempdir().expect("tempdir");
        let pod = rkt::pod::Pod::create(&DataDir::new(tmp.path().join("data"))).expect("create");
        std::fs::create_dir_all(pod.stage1_rootfs().join("rkt/status")).expect("mkdir");
        let paths = super::super::app::AppPaths::new(&pod, "web");
        let on_node = paths.started_fifo();
        let fifo = StartedFifo::make(&paths).expect("make");
        assert_eq!(fifo.in_pod(), "/rkt/execd/web");
        drop(fifo);
        // one an interrupted start left is made again
        std::fs::write(&on_node, b"stale").expect("stale file");
        let fifo = StartedFifo::make(&paths).expect("made again");
        let readable = |f: &StartedFifo| {
            let mut fds = [PollFd::new(f.reader(), PollFlags::POLLIN)];
            poll(&mut fds, PollTimeout::ZERO).expect("poll") > 0
        };
        assert!(!readable(&fifo), "nothing written yet");
        let open_writer =
            || std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW).open(&on_node);
        std::io::Write::write_all(&mut open_writer().expect("a reader is there"), b"r").expect("write");
        assert!(readable(&fifo), "appexec's byte");
        drop(fifo);
        assert!(!on_node.exists(), "removed once the start is done");
        assert_eq!(open_writer().expect_err("gone").kind(), io::ErrorKind::NotFound);
    }

    fn list(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_filter_lets_appexec_through_and_keeps_what_it_denied() {
        // RuntimeDefault: unshare is in @system-service (through @process), mount is not
        let (allow, deny) = widen(&PidMode::Container, true, &list(&["@system-service"]));
        let mount_api = MOUNT_API;
        assert_eq!(allow[..3], ["mount", "mount_setattr", "unshare"]);
        assert!(allow.iter().any(|c| c == "setresuid") && allow.iter().any(|c| c == "chdir"));
        assert_eq!(deny, mount_api);
        // an allow list: what it does not name is denied again, but for what the
        // child still needs after its filter
        let (allow, deny) = widen(&PidMode::Join(7, "1".into()), true, &list(&["read", "write"]));
        assert_eq!(deny[..5], ["mount", "mount_setattr", "unshare", "setns", "open_tree"]);
        assert!(!deny.iter().any(|c| c == "read" || c == "setresuid" || c == "execve"), "{deny:?}");
        assert!(deny.iter().any(|c| c == "kill") && deny.iter().any(|c| c == "openat"));
        assert!(allow.iter().any(|c| c == "setresuid"));
        // a deny list: only what it names, itself or by group
        let (_, deny) = widen(&PidMode::Container, false, &list(&["@mount", "ptrace"]));
        assert_eq!(deny, mount_api);
        let (_, deny) = widen(&PidMode::Container, false, &list(&["unshare"]));
        assert_eq!(deny, ["unshare"]);
    }

    #[test]
    fn a_host_pid_template_keeps_the_pid_namespace_and_needs_no_setns() {
        let app = ExecCommand { path: "/bin/sh".into(), argv: list(&["sh"]), ignore_failure: false };
        let plan = Plan { keep_pid: true, host: true, root: Some("/r".into()), ..Default::default() };
        assert_eq!(plan.command(&app).argv[..3], list(&[COMM, "pid=host", "root=/r"])[..]);
        let (_, deny) = widen(&PidMode::Host, true, &list(&["@system-service"]));
        assert!(!deny.iter().any(|c| c == "setns"), "{deny:?}");
    }

    #[test]
    fn a_restore_runs_criu_with_the_root_it_makes_read_only() {
        let criu = ExecCommand::new("/usr/sbin/criu", ["restore", "-D", "/rkt/checkpoint/a"]);
        let plan = Plan {
            restore: Some("/rkt/checkpoint/a/restored.pid".into()),
            root: Some("/opt/stage2/a/rootfs".into()),
            root_read_only: true,
            caps: Some(0x20),
            cgroup_wait: Some(("app-0-a".into(), 3)),
            oom_marker: Some("/rkt/status/a.oom".into()),
            cgroup_view: Some(true),
            ..Default::default()
        };
        // (CRIU runs in the app's cgroups, and is told where the app's own go)
        assert_eq!(
            plan.command(&criu).argv,
            list(&[
                COMM,
                "restore=/rkt/checkpoint/a/restored.pid",
                "root=/opt/stage2/a/rootfs",
                "rootro",
                "cgwait=app-0-a:3",
                "oom=/rkt/status/a.oom",
                "cgroupfs=ro",
                "--",
                "/usr/sbin/criu",
                "/usr/sbin/criu",
                "restore",
                "-D",
                "/rkt/checkpoint/a"
            ])
        );
    }

    #[test]
    fn the_command_carries_the_plan_then_the_app() {
        let app = ExecCommand { path: "/bin/busybox".into(), argv: list(&["sh", "-c", "x"]), ignore_failure: false };
        let plan = Plan {
            masks: list(&["/proc/kcore"]),
            read_only: list(&["/proc/sys"]),
            deny: list(&["mount"]),
            errno: Some(1),
            caps: Some(0x20),
            uid: 1000,
            gid: 3000,
            groups: vec![4000],
            no_new_privs: true,
            root: Some("/opt/stage2/a/rootfs".into()),
            binds: vec![
                Bind {
                    source: "/dev".into(),
                    target: "/dev".into(),
                    recursive: true,
                    read_only: false,
                    optional: false,
                },
                Bind {
                    source: "/etc/hosts".into(),
                    target: "/etc/hosts".into(),
                    recursive: false,
                    read_only: true,
                    optional: true,
                },
            ],
            root_read_only: true,
            working_directory: Some("/work dir".into()),
            started: Some("/rkt/execd/a".into()),
            ..Default::default()
        };
        let cmd = plan.command(&app);
        assert_eq!(cmd.path, IN_POD);
        assert_eq!(
            cmd.argv,
            list(&[
                COMM,
                "pid=new",
                "root=/opt/stage2/a/rootfs",
                "rbind=/dev",
                "/dev",
                "robind=-/etc/hosts",
                "/etc/hosts",
                "rootro",
                "cwd=/work dir",
                "mask=/proc/kcore",
                "ro=/proc/sys",
                "deny=mount",
                "errno=1",
                "caps=20",
                "uid=1000",
                "gid=3000",
                "groups=4000",
                "nnp",
                "started=/rkt/execd/a",
                "--",
                "/bin/busybox",
                "sh",
                "-c",
                "x"
            ])
        );
    }

    #[test]
    fn a_process_still_in_the_pods_root_is_not_the_app() {
        // this test process plays the pod's systemd, its child the unit's
        // main process before its chroot: the same root, so no app yet
        let mut child = std::process::Command::new("sleep").arg("100").spawn().expect("sleep");
        let pid = i32::try_from(child.id()).expect("pid");
        let found = app_pid(std::process::id() as i32, &[pid], None);
        let same_program = same_file(&format!("/proc/{pid}/exe"), "/proc/self/exe");
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found, None);
        assert_eq!(same_program, Some(false), "sleep is not this test's program");
        assert_eq!(same_file("/proc/self/exe", "/proc/self/exe"), Some(true));
        assert_eq!(same_file("/proc/self/exe", "/no/such/file"), None);
    }
}
