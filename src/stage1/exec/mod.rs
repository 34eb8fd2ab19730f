//! Running a command inside a running app (ExecSync, `rktlet app exec`),
//! with no helper program: the command is the only thing exec'd.
//!
//! The command becomes a copy of the app's main process in everything but
//! its program: the same namespaces (mnt, pid, net, ipc, uts, cgroup), root,
//! working directory, environment, uid/gid/groups, capability sets,
//! no_new_privs, cgroups, resource limits and AppArmor profile, all read
//! from `/proc/<main pid>` beforehand, and the same seccomp filters, copied
//! from the main process, or built from the app's profile where the daemon,
//! itself filtered, may not read them (`filters`).
//!
//! One child, made the way `posix_spawn` makes one, because copying the
//! daemon's page tables for a fork was most of an exec's cost:
//! - a short-lived thread of the daemon enters the app's PID namespace (for
//!   the children it makes: nothing else of the daemon changes), blocks all
//!   signals and clones with `CLONE_VM | CLONE_VFORK` onto a stack of its
//!   own; it resumes once the child has exec'd (or failed);
//! - the child shares the daemon's memory until its exec, so it touches
//!   nothing but data prepared before the clone and makes raw syscalls only
//!   (no glibc wrapper that keeps process-wide state: credentials are set
//!   with `syscall(2)`, as glibc would otherwise signal the daemon's
//!   threads); it resets every signal to its default disposition (handlers
//!   of the daemon must never run in it; `SIGPIPE`, ignored by Rust
//!   programs, would stay ignored across exec), joins the app's cgroups and
//!   other namespaces, starts its own session (a timeout kills it and what
//!   it started), enters the app's root, takes its credentials and
//!   capabilities, and execs;
//! - the daemon is the command's parent: it reaps it (through a pidfd for
//!   kills, so a reused pid is never signalled); processes the command
//!   leaves behind are the pod's, reaped by the pod's systemd.

use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::filters::Profile;
use child::ChildArgs;
use thread::clone_child;

mod child;
mod thread;

/// Namespaces joined, in this order: the user namespace of a pod that has
/// one last, since the node's root may enter the others (some are owned by
/// the node's user namespace, as a network namespace made before the boot)
/// only before it gives up its capabilities there.
const NAMESPACES: [(&str, libc::c_int); 7] = [
    ("cgroup", libc::CLONE_NEWCGROUP),
    ("ipc", libc::CLONE_NEWIPC),
    ("uts", libc::CLONE_NEWUTS),
    ("net", libc::CLONE_NEWNET),
    ("pid", libc::CLONE_NEWPID),
    ("mnt", libc::CLONE_NEWNS),
    ("user", libc::CLONE_NEWUSER),
];

/// `PATH` when the app's environment has none (as a shell would use).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Reports on the status pipe, as i32 words: `SETUP step errno` (a setup
/// step failed; the child then exits 126). A successful exec closes the pipe
/// (close-on-exec) without a word.
const REPORT_SETUP: i32 = 1;
/// The setup step of joining the target's `cgroup_procs[i]` is this plus `i`.
const CGROUP_STEPS: usize = 100;

/// What the child reported.
#[derive(Debug, Default, PartialEq)]
struct Reports {
    setup: Option<(i32, i32)>,
}

fn parse_reports(bytes: &[u8]) -> Reports {
    let words: Vec<i32> = bytes.chunks_exact(4).map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect();
    let mut r = Reports::default();
    let mut rest = words.as_slice();
    loop {
        rest = match rest {
            [REPORT_SETUP, step, errno, tail @ ..] => {
                r.setup.get_or_insert((*step, *errno));
                tail
            }
            _ => return r,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("app process {pid} is gone: {source}")]
    TargetGone { pid: i32, source: io::Error },
    #[error("cannot read app process {pid}: {detail}")]
    Target { pid: i32, detail: String },
    #[error("the command is empty")]
    EmptyCommand,
    #[error("an argument or environment entry contains a NUL byte")]
    Nul,
    #[error("cannot start {program:?} in the app: {step}: {source}")]
    Setup { program: String, step: String, source: io::Error },
    #[error("{program:?} did not finish within {timeout:?} and was killed")]
    Timeout { program: String, timeout: Duration },
    #[error("exec in the app: {0}")]
    Io(#[from] io::Error),
}

/// What the command left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Exit code; 128 + signal when killed by one.
    pub exit_code: i32,
    /// True when stdout or stderr was cut at the cap.
    pub truncated: bool,
}

/// An app's process a command is started as a copy of, and the seccomp
/// profile the app was started with (None: no filter of its own).
#[derive(Debug, Clone)]
pub struct AppProcess {
    pub pid: i32,
    pub profile: Option<Profile>,
    /// The v1 cgroups the command joins in place of the main process's in
    /// their hierarchies (the app's own, as the daemon made them: see
    /// `cgroup::app::AppCgroup::exec_dirs`); the main process's in the rest
    /// (in the other v1 hierarchies only where that still is a cgroup, when
    /// these are given).
    pub cgroups: Vec<PathBuf>,
}

impl AppProcess {
    /// The command joins the main process's cgroups.
    pub(crate) fn new(pid: i32, profile: Option<Profile>) -> Self {
        AppProcess { pid, profile, cgroups: Vec::new() }
    }
}

/// The app's main process as the command must copy it.
#[derive(Debug)]
struct Target {
    /// The process it was read from (host pid).
    pid: i32,
    ns: Vec<(libc::c_int, OwnedFd)>,
    root: OwnedFd,
    cwd: CString,
    env: Vec<CString>,
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
    /// Effective, permitted, inheritable, bounding, ambient.
    caps: [u64; 5],
    no_new_privs: bool,
    /// `cgroup.procs` files of the app's cgroups, on the host.
    cgroup_procs: Vec<CString>,
    /// The app's `oom_score_adj` (empty if unreadable).
    oom_score_adj: String,
    /// The main process's resource limits (resource, limit), not the daemon's.
    rlimits: Vec<(libc::c_int, libc::rlimit64)>,
    /// The main process's seccomp filters, oldest first.
    seccomp: super::filters::Filters,
    /// `exec <profile>`: the AppArmor profile the main process runs under.
    apparmor: Option<CString>,
}

/// The resource limits the kernel knows (RLIMIT_CPU to RLIMIT_RTTIME), in
/// the order `/proc/<pid>/limits` lists them.
const RLIMIT_COUNT: usize = 16;

/// The resource limits in a `/proc/<pid>/limits` (world-readable, unlike
/// `prlimit(2)` of another process, which needs CAP_SYS_RESOURCE): a header,
/// then one line per resource, the name in 26 columns, then the soft and
/// hard limits, numbers or `unlimited`.
fn rlimits_of(limits: &str) -> Option<Vec<(libc::c_int, libc::rlimit64)>> {
    let value = |v: &str| if v == "unlimited" { Some(libc::RLIM64_INFINITY) } else { v.parse().ok() };
    let lines: Vec<&str> = limits.lines().skip(1).collect();
    if lines.len() < RLIMIT_COUNT {
        return None;
    }
    lines[..RLIMIT_COUNT]
        .iter()
        .enumerate()
        .map(|(resource, line)| {
            let mut fields = line.get(26..)?.split_whitespace();
            let rlim_cur = value(fields.next()?)?;
            let rlim_max = value(fields.next()?)?;
            Some((resource as libc::c_int, libc::rlimit64 { rlim_cur, rlim_max }))
        })
        .collect()
}

fn cstring(bytes: &[u8]) -> Result<CString, ExecError> {
    CString::new(bytes).map_err(|_| ExecError::Nul)
}

fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim)
}

impl Target {
    fn read(app: &AppProcess) -> Result<Target, ExecError> {
        let (pid, profile) = (app.pid, app.profile.as_ref());
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let gone = |source: io::Error| ExecError::TargetGone { pid, source };
        let bad = |detail: &str| ExecError::Target { pid, detail: detail.to_string() };
        let status = std::fs::read_to_string(proc.join("status")).map_err(gone)?;
        let ids = |name: &str| -> Result<u32, ExecError> {
            // real, effective, saved, fs: the effective id is the one the app acts as
            status_field(&status, name)
                .and_then(|v| v.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(&format!("no {name} in its status")))
        };
        let cap = |name: &str| -> Result<u64, ExecError> {
            status_field(&status, name)
                .and_then(|v| u64::from_str_radix(v, 16).ok())
                .ok_or_else(|| bad(&format!("no {name} in its status")))
        };
        let groups = status_field(&status, "Groups")
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|g| g.parse().ok())
            .collect();
        let mut ns = Vec::new();
        for (name, flag) in NAMESPACES {
            let theirs = proc.join("ns").join(name);
            let ours = Path::new("/proc/self/ns").join(name);
            let same = match (std::fs::metadata(&theirs), std::fs::metadata(&ours)) {
                (Ok(a), Ok(b)) => std::os::unix::fs::MetadataExt::ino(&a) == std::os::unix::fs::MetadataExt::ino(&b),
                (Err(e), _) => return Err(gone(e)),
                _ => false,
            };
            if !same {
                ns.push((flag, std::fs::File::open(&theirs).map_err(gone)?.into()));
            }
        }
        let root = nix::fcntl::open(
            &proc.join("root"),
            nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| gone(e.into()))?;
        let cwd = std::fs::read_link(proc.join("cwd")).map_err(gone)?;
        // an app caught in its own execve reads as an empty environment for
        // a moment (seen by the exec test: `sh` exec'ing `sleep`)
        let mut env = std::fs::read(proc.join("environ")).map_err(gone)?;
        for _ in 0..5 {
            if !env.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
            env = std::fs::read(proc.join("environ")).map_err(gone)?;
        }
        let env = env.split(|b| *b == 0).filter(|e| !e.is_empty()).map(cstring).collect::<Result<_, _>>()?;
        let layout = crate::cgroup::Layout::cached()?;
        let cgroups = std::fs::read_to_string(proc.join("cgroup")).map_err(gone)?;
        // the app's own cgroups (or one it made below its own), then where
        // the main process is in the other hierarchies (those mounted
        // nowhere, or out of this namespace's view, are skipped: nothing
        // can be joined there)
        let now = layout.cgroups_of(&cgroups);
        let mut joins: Vec<PathBuf> = app
            .cgroups
            .iter()
            .map(|own| now.iter().find(|(_, at)| at.starts_with(own)).map_or_else(|| own.clone(), |(_, at)| at.clone()))
            .collect();
        for (h, at) in now {
            let Some(mount) = h.mount.as_deref() else { continue };
            if app.cgroups.iter().any(|own| own.starts_with(mount)) {
                continue;
            }
            // a v1 hierarchy the app is given no cgroup in holds nothing of
            // it: where the main process was moved to, if removed since, is not joined
            let v1_controller = h.controllers.iter().any(|c| !c.starts_with("name="));
            if v1_controller && !app.cgroups.is_empty() && !at.is_dir() {
                continue;
            }
            joins.push(at);
        }
        let cgroup_procs =
            joins.iter().map(|p| cstring(p.join("cgroup.procs").as_os_str().as_bytes())).collect::<Result<_, _>>()?;
        let limits = std::fs::read_to_string(proc.join("limits")).map_err(gone)?;
        let rlimits = rlimits_of(&limits).ok_or_else(|| bad("its limits cannot be read"))?;
        // last: the main process is held for a moment while its filters are read
        let seccomp = super::filters::for_exec(pid, status_field(&status, "Seccomp").unwrap_or("0"), profile)
            .map_err(|e| bad(&format!("cannot read its seccomp filters: {e}")))?;
        let apparmor =
            super::apparmor::label_of(pid).map(|p| cstring(super::apparmor::exec_attr(&p).as_bytes())).transpose()?;
        // in a user namespace, the app's ids as it sees them (its status shows the node's)
        let (mut uid, mut gid, mut groups): (u32, u32, Vec<u32>) = (ids("Uid")?, ids("Gid")?, groups);
        if ns.iter().any(|(flag, _)| *flag == libc::CLONE_NEWUSER) {
            let uid_map = std::fs::read_to_string(proc.join("uid_map")).map_err(gone)?;
            let gid_map = std::fs::read_to_string(proc.join("gid_map")).map_err(gone)?;
            uid = super::userns::to_inside(&uid_map, uid);
            gid = super::userns::to_inside(&gid_map, gid);
            groups = groups.into_iter().map(|g| super::userns::to_inside(&gid_map, g)).collect();
        }
        Ok(Target {
            pid,
            seccomp,
            apparmor,
            rlimits,
            ns,
            root,
            cwd: cstring(cwd.as_os_str().as_bytes())?,
            env,
            uid,
            gid,
            groups,
            caps: [cap("CapEff")?, cap("CapPrm")?, cap("CapInh")?, cap("CapBnd")?, cap("CapAmb")?],
            no_new_privs: status_field(&status, "NoNewPrivs") == Some("1"),
            cgroup_procs,
            oom_score_adj: std::fs::read_to_string(proc.join("oom_score_adj")).unwrap_or_default().trim().to_string(),
        })
    }

    /// Where `program` may be inside the app: itself when it has a slash,
    /// else every directory of the app's `PATH`, tried in order by the child.
    fn candidates(&self, program: &str) -> Result<Vec<CString>, ExecError> {
        if program.contains('/') {
            return Ok(vec![cstring(program.as_bytes())?]);
        }
        self.search_path()
            .split(':')
            .filter(|d| d.starts_with('/'))
            .map(|d| cstring(format!("{}/{program}", d.trim_end_matches('/')).as_bytes()))
            .collect()
    }

    /// The app's `PATH` (the default one where its environment has none).
    fn search_path(&self) -> String {
        self.env
            .iter()
            .find_map(|e| e.to_bytes().strip_prefix(b"PATH="))
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_else(|| DEFAULT_PATH.to_string())
    }
}

/// Runs `argv` as a copy of the app process `app`; `timeout` kills it (and
/// whatever it started in its process group); output beyond `cap` bytes per
/// stream is read and dropped. Blocking.
pub(crate) fn run(
    app: &AppProcess,
    argv: &[String],
    timeout: Option<Duration>,
    cap: usize,
) -> Result<ExecOutput, ExecError> {
    let devnull = std::fs::File::open("/dev/null")?;
    let (out_r, out_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    let (err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    let mut running = spawn(app, argv, [devnull.as_fd(), out_w.as_fd(), err_w.as_fd()], false, timeout)?;
    drop((out_w, err_w, devnull));
    let (stdout, stderr, truncated) = match collect(running.child, [out_r, err_r], timeout, cap) {
        Ok(Collected::Output { stdout, stderr, truncated }) => (stdout, stderr, truncated),
        other => {
            running.kill();
            return Err(match other {
                Err(e) => e.into(),
                Ok(_) => ExecError::Timeout { program: running.program.clone(), timeout: timeout.unwrap_or_default() },
            });
        }
    };
    let exit_code = running.wait()?;
    Ok(ExecOutput { stdout, stderr, exit_code, truncated })
}

/// Starts `argv` as a copy of the app process `app` with `stdio` as its
/// standard streams; with `tty`, stdin is a terminal that becomes its
/// controlling terminal. Returns once it has exec'd (or failed to, or was
/// killed for taking longer than `setup_timeout`); then [`Running::wait`]
/// for its exit code. Blocking (briefly).
pub(crate) fn spawn(
    app: &AppProcess,
    argv: &[String],
    stdio: [std::os::fd::BorrowedFd<'_>; 3],
    tty: bool,
    setup_timeout: Option<Duration>,
) -> Result<Running, ExecError> {
    let program = argv.first().filter(|p| !p.is_empty()).ok_or(ExecError::EmptyCommand)?.clone();
    let target = Target::read(app)?;
    spawn_as(target, program, argv, stdio, tty, setup_timeout)
}

/// Starts the app of a host-PID pod (`program`, with `argv` from argv[0])
/// as a copy of its template `template` (appexec, parked confined: see
/// appexec/src/main.rs) in every way but the PID namespace: the caller's (the
/// pod's log writer, in the node's) is kept. Systemd's notification socket,
/// in the template's environment for appexec, is left out; `env_file`'s
/// entries (`NAME=VALUE`, each NUL-ended: the names systemd refused, which
/// appexec puts in place for its other apps) are added. With `tty`,
/// stdin is a terminal that becomes its controlling terminal. Returns once
/// it has exec'd or failed to ([`Running::started`] tells which).
pub(crate) fn spawn_in_own_pid_namespace(
    template: &AppProcess,
    program: &str,
    argv: &[String],
    stdio: [std::os::fd::BorrowedFd<'_>; 3],
    tty: bool,
    env_file: &[u8],
) -> Result<Running, ExecError> {
    if program.is_empty() || argv.is_empty() {
        return Err(ExecError::EmptyCommand);
    }
    let mut target = Target::read(template)?;
    target.ns.retain(|(flag, _)| *flag != libc::CLONE_NEWPID);
    target.env.retain(|e| !e.to_bytes().starts_with(b"NOTIFY_SOCKET="));
    for entry in env_file.split(|b| *b == 0).filter(|e| e.iter().skip(1).any(|b| *b == b'=')) {
        let name_eq = &entry[..=entry.iter().position(|b| *b == b'=').unwrap_or_default()];
        target.env.retain(|e| !e.to_bytes().starts_with(name_eq));
        target.env.push(cstring(entry)?);
    }
    spawn_as(target, program.to_string(), argv, stdio, tty, None)
}

fn spawn_as(
    target: Target,
    program: String,
    argv: &[String],
    stdio: [std::os::fd::BorrowedFd<'_>; 3],
    tty: bool,
    setup_timeout: Option<Duration>,
) -> Result<Running, ExecError> {
    let candidates = target.candidates(&program)?;
    let searched = (!program.contains('/')).then(|| target.search_path());
    let args: Vec<CString> = argv.iter().map(|a| cstring(a.as_bytes())).collect::<Result<_, _>>()?;
    let (rep_r, rep_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;

    // the descriptors the child uses, sorted: all others are closed in it
    let mut keep: Vec<RawFd> = target.ns.iter().map(|(_, fd)| fd.as_raw_fd()).collect();
    keep.extend([target.root.as_raw_fd(), rep_w.as_raw_fd()]);
    keep.extend(stdio.map(|f| f.as_raw_fd()));
    keep.sort_unstable();
    keep.dedup();
    let (stdio, rep) = (stdio.map(|f| f.as_raw_fd()), rep_w.as_raw_fd());
    let pidns = target.ns.iter().find(|(flag, _)| *flag == libc::CLONE_NEWPID).map(|(_, fd)| fd.as_raw_fd());
    // the kernel writes the child's pidfd here when it clones, before the
    // spawning thread waits for the exec: a setup that hangs is killed through it
    let pidfd_slot = std::sync::atomic::AtomicI32::new(-1);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    // a thread of its own: entering the PID namespace changes where the
    // calling thread's children go, and this thread is gone right after
    let mut fired = false;
    let pid = std::thread::scope(|s| {
        let spawner = s.spawn(|| {
            let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
            argv.push(std::ptr::null());
            let mut envp: Vec<*const libc::c_char> = target.env.iter().map(|e| e.as_ptr()).collect();
            envp.push(std::ptr::null());
            let child = ChildArgs {
                target: &target,
                keep: &keep,
                candidates: &candidates,
                argv: &argv,
                envp: &envp,
                stdio,
                tty,
                rep,
            };
            let r = clone_child(&child, pidns, &pidfd_slot);
            let _ = done_tx.send(());
            r
        });
        if done_rx.recv_timeout(setup_timeout.unwrap_or(SETUP_TIMEOUT))
            == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        {
            fired = true;
            let fd = pidfd_slot.load(std::sync::atomic::Ordering::Acquire);
            if fd >= 0 {
                // (the pidfd the kernel gave the spawning thread)
                let _ = crate::base::sys::pidfd_send_signal(fd, libc::SIGKILL);
            }
        }
        spawner.join().unwrap_or_else(|_| Err(io::Error::other("the spawning thread panicked")))
    });
    let slot = pidfd_slot.load(std::sync::atomic::Ordering::Acquire);
    // SAFETY: the kernel installed this descriptor for us (CLONE_PIDFD); nothing else owns it.
    let pidfd = (slot >= 0).then(|| unsafe { OwnedFd::from_raw_fd(slot) });
    let pid = pid?;
    drop(rep_w);
    if fired {
        reap(pid);
        return Err(ExecError::Timeout { program, timeout: setup_timeout.unwrap_or(SETUP_TIMEOUT) });
    }
    Ok(Running {
        child: pid,
        pidfd,
        reports: std::fs::File::from(rep_r),
        program,
        started: Instant::now(),
        reaped: false,
        context: SetupContext { searched, target: target.pid, cgroup_procs: target.cgroup_procs },
    })
}

/// How long the child may take to start the command when the caller gives
/// no deadline (a hung setup, e.g. an app cgroup frozen, is killed then).
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Kills a [`Running`] command from elsewhere (see [`Running::killer`]).
#[derive(Debug)]
pub(crate) struct Killer {
    child: i32,
    pidfd: Option<OwnedFd>,
}

impl Killer {
    /// Kills the command's session.
    pub(crate) fn kill(&self) {
        kill_session(self.child, self.pidfd.as_ref());
    }
}

/// A command started in an app by [`spawn`].
#[derive(Debug)]
pub(crate) struct Running {
    /// The command (our child).
    child: i32,
    pidfd: Option<OwnedFd>,
    reports: std::fs::File,
    program: String,
    started: Instant,
    /// Waited for: nothing left to clean up.
    reaped: bool,
    /// What its setup errors name.
    context: SetupContext,
}

/// What a failed setup step is told with.
#[derive(Debug, Default)]
struct SetupContext {
    /// The `cgroup.procs` files the child joins, in order.
    cgroup_procs: Vec<CString>,
    /// The `PATH` a program without a slash was looked for in.
    searched: Option<String>,
    /// The app process copied (its root is where the program was looked for).
    target: i32,
}

/// A command dropped without being waited for (a cancelled session) is
/// killed and reaped, not left running or as a zombie.
impl Drop for Running {
    fn drop(&mut self) {
        if !self.reaped {
            kill_session(self.child, self.pidfd.as_ref());
            reap(self.child);
        }
    }
}

impl Running {
    /// Waits for the command; its exit code (128 + signal when killed by one).
    pub(crate) fn wait(mut self) -> Result<i32, ExecError> {
        let status = reap(self.child);
        self.reaped = true;
        let mut bytes = Vec::new();
        self.reports.read_to_end(&mut bytes)?;
        let r = parse_reports(&bytes);
        let program = std::mem::take(&mut self.program);
        tracing::debug!(program, micros = self.started.elapsed().as_micros() as u64, "exec in app");
        if let Some((step, errno)) = r.setup {
            return Err(setup_error(program, &self.context, step, errno));
        }
        let status = status.ok_or_else(|| ExecError::Setup {
            program,
            step: "wait".into(),
            source: io::Error::other("the command could not be waited for"),
        })?;
        Ok(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) })
    }

    /// Kills the command's session and reaps the command.
    pub(crate) fn kill(&mut self) {
        kill_session(self.child, self.pidfd.as_ref());
        reap(self.child);
        self.reaped = true;
    }

    /// A handle that can kill the command while another thread waits for it.
    pub(crate) fn killer(&self) -> Killer {
        Killer { child: self.child, pidfd: self.pidfd.as_ref().and_then(|fd| fd.try_clone().ok()) }
    }

    /// The child's pid.
    pub(crate) fn pid(&self) -> i32 {
        self.child
    }

    /// The child's pidfd (readable once it exited).
    pub(crate) fn pidfd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.pidfd.as_ref().map(|fd| fd.as_fd())
    }

    /// Whether the child exec'd the command: its setup failure otherwise.
    /// Does not block (the child has exec'd or exited when `spawn` returns).
    pub(crate) fn started(&mut self) -> Result<(), ExecError> {
        let mut bytes = Vec::new();
        self.reports.read_to_end(&mut bytes)?;
        match parse_reports(&bytes).setup {
            Some((step, errno)) => Err(setup_error(self.program.clone(), &self.context, step, errno)),
            None => Ok(()),
        }
    }
}

/// Kills the command and its session (what it started). Through the pidfd:
/// a command already reaped (its pid free for reuse) is not signalled, nor
/// then its session.
fn kill_session(child: i32, pidfd: Option<&OwnedFd>) {
    use nix::sys::signal::{Signal, killpg};
    let alive = match pidfd {
        Some(fd) => crate::base::sys::pidfd_send_signal(fd.as_raw_fd(), libc::SIGKILL).is_ok(),
        None => nix::sys::signal::kill(nix::unistd::Pid::from_raw(child), Signal::SIGKILL).is_ok(),
    };
    if alive {
        // the command made its own session, whose id is its pid
        let _ = killpg(nix::unistd::Pid::from_raw(child), Signal::SIGKILL);
    }
}

/// What the child's setup step `step` failing with `errno` means: the
/// step's name, which of the cgroups could not be joined, or where a
/// program that is not there was looked for.
fn setup_error(program: String, context: &SetupContext, step: i32, errno: i32) -> ExecError {
    let step = match usize::try_from(step).unwrap_or(usize::MAX) {
        EXEC_STEP if errno == libc::ENOENT && context.searched.is_some() => format!(
            "not found in its PATH {} (in the root of process {})",
            context.searched.as_deref().unwrap_or_default(),
            context.target
        ),
        i @ CGROUP_STEPS.. => match context.cgroup_procs.get(i - CGROUP_STEPS) {
            Some(procs) => format!("joining the app's cgroup {}", procs.to_string_lossy()),
            None => "joining the app's cgroups".into(),
        },
        i => STEPS.get(i).copied().unwrap_or("setup").to_string(),
    };
    ExecError::Setup { program, step, source: io::Error::from_raw_os_error(errno) }
}

/// The step of the command's execve.
const EXEC_STEP: usize = 11;

/// Names of the setup steps, indexed by the number the child reports.
const STEPS: [&str; 15] = [
    "setsid",
    "joining the app's cgroups",
    "joining the app's namespaces",
    "fork",
    "chroot into the app",
    "redirecting stdio",
    "dropping capabilities from the bounding set",
    "setting groups",
    "setting the gid",
    "setting the uid",
    "setting capabilities",
    "exec",
    "installing the app's seccomp filters",
    "setting the app's resource limits",
    "setting the app's AppArmor profile",
];

/// What the command wrote, or that its time ran out.
enum Collected {
    Output { stdout: Vec<u8>, stderr: Vec<u8>, truncated: bool },
    TimedOut,
}

/// Reads stdout and stderr until both end, or until the intermediate child
/// exits (background processes may hold them open), or the deadline.
fn collect(child: i32, pipes: [OwnedFd; 2], timeout: Option<Duration>, cap: usize) -> io::Result<Collected> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let deadline = timeout.map(|t| Instant::now() + t);
    let pidfd = pidfd_open(child)?;
    let mut bufs = [Vec::new(), Vec::new()];
    let mut open = [true, true];
    let mut truncated = false;
    let mut chunk = vec![0u8; 64 * 1024];
    let mut exited = false;
    loop {
        if !open.iter().any(|o| *o) {
            let [stdout, stderr] = bufs;
            return Ok(Collected::Output { stdout, stderr, truncated });
        }
        let wait = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(Collected::TimedOut);
                }
                PollTimeout::try_from(left.as_millis().min(60_000) as i32 + 1).unwrap_or(PollTimeout::MAX)
            }
            None => PollTimeout::NONE,
        };
        // once the command ended, only what is already buffered is read
        let wait = if exited { PollTimeout::ZERO } else { wait };
        let mut fds: Vec<PollFd> = Vec::new();
        let mut which = Vec::new();
        for (i, p) in pipes.iter().enumerate() {
            if open[i] {
                fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
                which.push(i);
            }
        }
        if !exited {
            fds.push(PollFd::new(pidfd.as_fd(), PollFlags::POLLIN));
        }
        let n = match poll(&mut fds, wait) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 && exited {
            let [stdout, stderr] = bufs;
            return Ok(Collected::Output { stdout, stderr, truncated });
        }
        let ready: Vec<bool> = fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect();
        if !exited && ready.last().copied().unwrap_or(false) {
            exited = true;
        }
        for (slot, i) in which.iter().enumerate() {
            if !ready[slot] {
                continue;
            }
            match nix::unistd::read(&pipes[*i], &mut chunk) {
                Ok(0) => open[*i] = false,
                Ok(n) => {
                    let room = cap.saturating_sub(bufs[*i].len());
                    truncated |= n > room;
                    bufs[*i].extend_from_slice(&chunk[..n.min(room)]);
                }
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

use crate::base::sys::pidfd_open;

/// Reaps our child; its wait status (`None` if it could not be waited for).
fn reap(child: i32) -> Option<i32> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid(2) on our own child with a local status word.
        let r = unsafe { libc::waitpid(child, &mut status, 0) };
        if r == child {
            return Some(status);
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_name_the_first_failed_step() {
        let bytes: Vec<u8> =
            [REPORT_SETUP, 11, 2, REPORT_SETUP, 4, 1].iter().flat_map(|w: &i32| w.to_ne_bytes()).collect();
        assert_eq!(parse_reports(&bytes), Reports { setup: Some((11, 2)) });
        assert_eq!(parse_reports(&bytes[..10]), Reports::default());
        assert_eq!(parse_reports(&[]), Reports::default());
    }

    #[test]
    fn a_cgroup_that_cannot_be_joined_is_named() {
        let procs = [
            CString::from(c"/sys/fs/cgroup/memory/a/cgroup.procs"),
            CString::from(c"/sys/fs/cgroup/cpu/b/cgroup.procs"),
        ];
        let context = SetupContext { cgroup_procs: procs.to_vec(), ..Default::default() };
        let e = setup_error("cat".into(), &context, (CGROUP_STEPS + 1) as i32, libc::ENOENT).to_string();
        assert!(
            e.contains("joining the app's cgroup /sys/fs/cgroup/cpu/b/cgroup.procs") && e.contains("os error 2"),
            "{e}"
        );
        let e = setup_error("cat".into(), &context, (CGROUP_STEPS + 2) as i32, libc::ENOENT).to_string();
        assert!(e.contains("joining the app's cgroups:"), "{e}");
        let e = setup_error("/bin/cat".into(), &context, EXEC_STEP as i32, libc::ENOENT).to_string();
        assert!(e.contains(": exec:"), "{e}");
    }

    #[test]
    fn a_program_not_found_names_the_path_and_root_it_was_looked_for_in() {
        let context = SetupContext { searched: Some("/usr/bin:/bin".into()), target: 42, ..Default::default() };
        let e = setup_error("cat".into(), &context, EXEC_STEP as i32, libc::ENOENT).to_string();
        assert!(
            e.contains("\"cat\"") && e.contains("not found in its PATH /usr/bin:/bin (in the root of process 42)"),
            "{e}"
        );
        // found but not runnable: the exec's own error
        let e = setup_error("cat".into(), &context, EXEC_STEP as i32, libc::EACCES).to_string();
        assert!(e.contains(": exec:") && e.contains("denied"), "{e}");
    }

    #[test]
    fn limits_are_read_as_the_kernel_writes_them() {
        let own = std::fs::read_to_string("/proc/self/limits").expect("limits");
        let limits = rlimits_of(&own).expect("parsed");
        assert_eq!(limits.len(), RLIMIT_COUNT);
        for (resource, limit) in &limits {
            let mut ours = libc::rlimit64 { rlim_cur: 0, rlim_max: 0 };
            // SAFETY: prlimit64(2) reading this process's own limit into a local.
            let rc = unsafe {
                libc::syscall(libc::SYS_prlimit64, 0, *resource, std::ptr::null::<libc::rlimit64>(), &mut ours)
            };
            assert_eq!(rc, 0);
            assert_eq!((limit.rlim_cur, limit.rlim_max), (ours.rlim_cur, ours.rlim_max), "resource {resource}");
        }
        assert!(rlimits_of("Limit\nMax cpu time unlimited\n").is_none());
    }

    #[test]
    fn status_fields_are_read_as_the_kernel_writes_them() {
        let status = "Name:\tsh\nUid:\t1000\t1001\t1000\t1001\nGroups:\t10 20 \nCapBnd:\t000001ffffffffff\n";
        assert_eq!(status_field(status, "Uid"), Some("1000\t1001\t1000\t1001"));
        assert_eq!(status_field(status, "Groups"), Some("10 20"));
        assert_eq!(
            status_field(status, "CapBnd").map(|v| u64::from_str_radix(v, 16).ok()),
            Some(Some(0x1ff_ffff_ffff))
        );
        assert_eq!(status_field(status, "Gid"), None);
    }

    #[test]
    fn a_command_runs_as_a_copy_of_a_host_process() {
        // a target in our own namespaces: the exec path without a pod
        let mut target = std::process::Command::new("sleep")
            .arg("30")
            .current_dir("/tmp")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("MARK", "copied")
            .spawn()
            .expect("spawn sleep");
        let pid = target.id() as i32;
        std::thread::sleep(Duration::from_millis(30));
        let argv = ["sh".to_string(), "-c".into(), "echo $MARK; pwd; echo err >&2; exit 7".into()];
        let out = run(&AppProcess::new(pid, None), &argv, Some(Duration::from_secs(10)), 1 << 20).expect("exec");
        assert_eq!(
            (out.exit_code, out.stdout.as_slice(), out.stderr.as_slice()),
            (7, &b"copied\n/tmp\n"[..], &b"err\n"[..])
        );
        // the cap keeps the first bytes and says so
        let argv = ["sh".to_string(), "-c".into(), "echo 0123456789".into()];
        let out = run(&AppProcess::new(pid, None), &argv, None, 4).expect("exec");
        assert_eq!((out.stdout.as_slice(), out.truncated), (&b"0123"[..], true));
        // a timeout kills the command and what it started
        let argv = ["sh".to_string(), "-c".into(), "sleep 30; echo late".into()];
        let t = Instant::now();
        let e =
            run(&AppProcess::new(pid, None), &argv, Some(Duration::from_millis(200)), 1 << 20).expect_err("timeout");
        assert!(matches!(e, ExecError::Timeout { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10));
        // a lock the daemon held while the command started is free once the
        // daemon closes it (the exec's processes keep no copy of the descriptor)
        let dir = tempfile::tempdir().expect("tempdir");
        let lock_path = dir.path().join("lock");
        // flock(2) directly: a lock held by an open file description, released when every copy is closed
        let held = std::fs::File::create(&lock_path).expect("lock file");
        // SAFETY: flock(2) on a descriptor we own.
        assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        let long = std::thread::spawn(move || {
            run(&AppProcess::new(pid, None), &["sleep".to_string(), "1".into()], None, 1 << 10)
        });
        std::thread::sleep(Duration::from_millis(200));
        drop(held);
        let again = std::fs::File::open(&lock_path).expect("open");
        // SAFETY: flock(2) on a descriptor we own.
        let taken = unsafe { libc::flock(again.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(taken, 0, "the lock is still held by a copy in the exec's processes");
        assert!(long.join().expect("join").is_ok());
        // a missing program is an error, not an exit code
        let e = run(&AppProcess::new(pid, None), &["no-such-program".to_string()], None, 1 << 20).expect_err("missing");
        assert!(e.to_string().contains("No such file"), "{e}");
        let _ = target.kill();
        let _ = target.wait();
        let e = run(&AppProcess::new(pid, None), &["true".to_string()], None, 1 << 20).expect_err("gone");
        assert!(matches!(e, ExecError::TargetGone { .. }), "{e}");
    }
}
