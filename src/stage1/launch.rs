//! Daemon side of a pod start: run `<rkt> app sandbox` (the one exec), either
//! in a transient unit of the node's systemd (host PID 1 is systemd: init
//! supervises the pod; started over its bus, `stage1::node_bus`) or
//! detached in its own session (elsewhere: containers, CI), then wait for the
//! pod to be ready without polling in fixed steps.
//!
//! Runs in: the daemon (async), plus one blocking thread per wait.

use super::bus::{ExecCommand, Property, Value};
use super::sandbox::SandboxArgs;
use crate::base::sys::pidfd_open;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    #[error("cannot start the sandbox process {program}: {source}")]
    Spawn { program: PathBuf, source: io::Error },
    #[error("sandbox process failed: {0}")]
    Failed(String),
    #[error("pod did not become ready within {0:?}")]
    Timeout(Duration),
    #[error("pod exited before it was ready{0}")]
    Exited(String),
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

/// Who supervises the sandbox process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Supervisor {
    /// The node's systemd: a transient service `rktlet-<uuid>.service`
    /// ([`sandbox_unit_properties`]), started over its bus.
    NodeSystemd,
    /// A child of the daemon in its own session; reaped by the daemon while
    /// it lives, by init afterwards.
    Detached,
}

/// A sandbox process that got as far as exec'ing nspawn.
#[derive(Debug)]
pub(crate) struct Started {
    pub pid: i32,
    /// pidfd of the sandbox (nspawn) process: readable once it exits.
    pub pidfd: OwnedFd,
    /// Where the pod's READY=1 arrives (`--ready-by-notify`); none: the pod
    /// marks itself ready.
    pub notify: Option<NotifySocket>,
}

/// A datagram socket that hears a pod's READY=1: nspawn's
/// `--notify-ready=yes` passes its systemd's on to `$NOTIFY_SOCKET`, about
/// 5 ms before a unit in the pod could mark it ready. Removed when dropped.
#[derive(Debug)]
pub(crate) struct NotifySocket {
    socket: std::os::unix::net::UnixDatagram,
    path: PathBuf,
}

impl NotifySocket {
    /// Binds `<data>/tmp/<uuid>.notify` (the data dir is the daemon's: root
    /// only). None where that fails, e.g. a path too long for a socket
    /// address: the pod then marks itself ready.
    fn bind(data_dir: &Path, uuid: uuid::Uuid) -> Option<Self> {
        // sd_notify takes an absolute path only; the data dir may be relative
        let path =
            std::path::absolute(rkt::pod::DataDir::new(data_dir).tmp().join(format!("{uuid}.{NOTIFY_EXT}"))).ok()?;
        let _ = std::fs::remove_file(&path);
        let socket = std::os::unix::net::UnixDatagram::bind(&path)
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .inspect_err(
                |e| tracing::debug!(path = %path.display(), error = %e, "no notify socket; the pod marks itself ready"),
            )
            .ok()?;
        Some(NotifySocket { socket, path })
    }

    /// Whether READY=1 is among the messages queued now.
    fn ready_queued(&self) -> io::Result<bool> {
        let mut buf = [0u8; 4096];
        loop {
            match self.socket.recv(&mut buf) {
                Ok(n) if buf[..n].split(|b| *b == b'\n').any(|l| l == b"READY=1") => return Ok(true),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for NotifySocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The extension of a pod start's notify socket in `<data>/tmp` (`<uuid>.notify`).
const NOTIFY_EXT: &str = "notify";

/// Removes the notify sockets in `<data>/tmp` that nobody listens on any
/// more (what a daemon or CLI that died while a pod started left); a socket
/// still bound, a start in flight, refuses nothing and stays. Returns how
/// many went.
pub(crate) fn remove_stale_notify_sockets(data_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(rkt::pod::DataDir::new(data_dir).tmp()) else { return 0 };
    let Ok(probe) = std::os::unix::net::UnixDatagram::unbound() else { return 0 };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == NOTIFY_EXT))
        .filter(|p| probe.connect(p).is_err_and(|e| e.kind() == io::ErrorKind::ConnectionRefused))
        .filter(|p| std::fs::remove_file(p).is_ok())
        .count()
}

/// The full argv of the sandbox command (after the program).
pub(crate) fn sandbox_argv(data_dir: &Path, args: &SandboxArgs) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec!["--dir".into(), data_dir.into(), "app".into(), "sandbox".into()];
    argv.extend(args.to_argv());
    argv
}

/// The sandbox's transient service on the node's systemd, as `systemd-run
/// --unit=rktlet-<uuid> --service-type=notify --slice=... -p Delegate=yes`
/// would make it. Not collected: a unit that ends cleanly is unloaded
/// anyway, and a failed one stays loaded so its result and exit status can
/// be read (`unit_failure`) until the pod is removed (`forget_unit`).
pub(crate) fn sandbox_unit_properties(
    uuid: &str,
    slice: Option<&str>,
    program: &Path,
    argv: &[OsString],
) -> Vec<Property> {
    let program = program.to_string_lossy().into_owned();
    let args = argv.iter().map(|a| a.to_string_lossy().into_owned());
    let mut p = vec![
        Property::str("Description", format!("rktlet pod {uuid}")),
        // ready when the sandbox says so (READY=1 from nspawn, the pod's systemd's)
        Property::str("Type", "notify"),
        Property::str("NotifyAccess", "main"),
        Property::str("KillMode", "mixed"),
        // the unit's subtree is the pod's (nspawn splits it into payload/ and
        // supervisor/, the pod's systemd manages payload/): on cgroup v2 systemd
        // enables the controllers down to it, on v1 it gives the unit its own
        // cgroup in every controller it manages (else cpu stays at the slice)
        Property::bool("Delegate", true),
        Property::new("ExecStart", Value::Exec(vec![ExecCommand::new(program, args)])),
    ];
    if let Some(s) = slice.map(crate::cgroup::pod::slice_name).filter(|s| !s.is_empty()) {
        p.push(Property::str("Slice", s));
    }
    p
}

/// Starts the sandbox process (or gives `standby` its arguments) and
/// returns once it has exec'd nspawn (or failed, with its error output
/// quoted).
pub(crate) async fn start(
    program: &Path,
    data_dir: &Path,
    args: &SandboxArgs,
    supervisor: Supervisor,
    slice: Option<&str>,
    standby: Option<Standby>,
) -> Result<Started, LaunchError> {
    // the program the pod's log writer execs (written once per data dir and
    // build); without it the sandbox process's fork serves the pod itself
    if let Err(e) = super::logwriter::host_copy(&rkt::pod::DataDir::new(data_dir)) {
        tracing::warn!(error = %e, "cannot write the log writer program into the data directory");
    }
    match supervisor {
        Supervisor::Detached => start_detached(program, data_dir, args, standby).await,
        Supervisor::NodeSystemd => start_node_unit(program, data_dir, args, slice).await,
    }
}

async fn start_detached(
    program: &Path,
    data_dir: &Path,
    args: &SandboxArgs,
    standby: Option<Standby>,
) -> Result<Started, LaunchError> {
    let mut args = args.clone();
    args.cgroup_from_caller = args.uuid.is_some();
    let notify = args.uuid.and_then(|uuid| NotifySocket::bind(data_dir, uuid));
    args.ready_by_notify = notify.is_some();
    args.notify_socket = notify.as_ref().map(|n| n.path.clone());
    let sent = match standby {
        Some(s) => s.send(&args).await,
        None => None,
    };
    let mut child = match sent {
        Some(child) => child,
        None => {
            let stdin = if args.cgroup_from_caller { Stdio::piped() } else { Stdio::null() };
            sandbox_command(program, sandbox_argv(data_dir, &args), stdin)
                .spawn()
                .map_err(|source| LaunchError::Spawn { program: program.into(), source })?
        }
    };
    let pid = child.id().map(|p| p as i32).ok_or_else(|| LaunchError::Failed("sandbox exited at once".into()))?;
    let placing = place_in_cgroup(&args, pid, child.stdin.take());
    let pidfd = pidfd_open(pid).map_err(|source| LaunchError::Io { context: "pidfd_open".into(), source })?;
    // EOF on stderr: either nspawn was exec'd (stderr now goes to the pod log) or the process died
    let mut err = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut err).await;
    }
    // done by now, unless the sandbox failed first: awaited, so that no
    // cgroup is made again after a failed start's cleanup
    if let Some(placing) = placing {
        let _ = placing.await;
    }
    // the sandbox writes nothing on success: output means it failed before exec
    if !err.trim().is_empty() {
        let status = child.wait().await.map(|s| s.to_string()).unwrap_or_default();
        if let (true, Some(uuid)) = (args.cgroup_from_caller, args.uuid) {
            let parent = args.cgroup_parent.clone().unwrap_or_default();
            let tracking_only = args.defer_cgroup_controllers;
            let removed = tokio::task::spawn_blocking(move || {
                crate::cgroup::pod::unplace_sandbox(&parent, &uuid.to_string(), tracking_only)
            })
            .await;
            if let Ok(Err(e)) = removed {
                tracing::warn!(pod = %uuid, error = %e, "removing a failed sandbox's cgroup");
            }
        }
        return Err(LaunchError::Failed(format!("{} ({status})", err.trim())));
    }
    // the daemon reaps it; after a daemon restart init does
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    Ok(Started { pid, pidfd, notify })
}

/// The detached sandbox command: stdout to /dev/null, stderr to the daemon
/// (a failure's message), in a process group of its own, so signals to the
/// daemon's group spare the pod. No pre_exec closure, so std can use
/// posix_spawn (vfork) instead of copying the daemon's page tables with fork.
fn sandbox_command(program: &Path, argv: Vec<OsString>, stdin: Stdio) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(argv).stdin(stdin).stdout(Stdio::null()).stderr(Stdio::piped()).process_group(0);
    cmd
}

/// A sandbox process started ahead (`app sandbox --standby`): exec'd and
/// past its start-up, it waits on stdin for a pod's arguments. A cold pod
/// start that takes it skips the exec of this program and its start-up
/// (about 4 ms here); the daemon keeps one ([`keep_standby`]). Its pod's
/// uuid is chosen when it starts, so its command line names its pod like
/// any sandbox's (and so does its log writer's, a fork of it). Dropped
/// unused, it sees EOF on stdin and exits: none outlives the daemon.
#[derive(Debug)]
pub(crate) struct Standby {
    program: PathBuf,
    data_dir: PathBuf,
    uuid: uuid::Uuid,
    child: tokio::process::Child,
}

impl Standby {
    /// The uuid of the pod this process will start.
    pub(crate) fn uuid(&self) -> uuid::Uuid {
        self.uuid
    }

    /// Sends `args` (for the pod [`Standby::uuid`]); the process, or none
    /// when it is gone (the caller starts a process then).
    async fn send(self, args: &SandboxArgs) -> Option<tokio::process::Child> {
        use tokio::io::AsyncWriteExt;
        if args.uuid != Some(self.uuid) {
            return None;
        }
        let mut child = self.child;
        let sent = match child.stdin.as_mut() {
            Some(stdin) => stdin.write_all(&super::sandbox::standby_message(args)).await,
            None => Err(io::ErrorKind::BrokenPipe.into()),
        };
        match sent {
            Ok(()) => Some(child),
            Err(e) => {
                tracing::debug!(pod = %self.uuid, error = %e, "the standby sandbox process is gone; starting one");
                None
            }
        }
    }
}

static STANDBY: std::sync::Mutex<Option<Standby>> = std::sync::Mutex::new(None);

/// Starts a standby sandbox process for `program` on `data_dir` unless one
/// is waiting. Call from the daemon, in its runtime, off a request's path.
pub(crate) fn keep_standby(program: &Path, data_dir: &Path) {
    // the standby protocol is this binary's; a configured other program starts per pod
    if std::env::current_exe().ok().as_deref() != Some(program) {
        return;
    }
    let Ok(mut slot) = STANDBY.lock() else { return };
    if let Some(s) = slot.as_mut()
        && s.program == program
        && s.data_dir == data_dir
        && matches!(s.child.try_wait(), Ok(None))
    {
        return;
    }
    let uuid = uuid::Uuid::new_v4();
    let argv = vec![
        "--dir".into(),
        data_dir.into(),
        "app".into(),
        "sandbox".into(),
        "--standby".into(),
        format!("--uuid={uuid}").into(),
    ];
    match sandbox_command(program, argv, Stdio::piped()).spawn() {
        // one it replaces sees EOF on stdin and exits; tokio reaps it
        Ok(child) => *slot = Some(Standby { program: program.into(), data_dir: data_dir.into(), uuid, child }),
        Err(e) => tracing::debug!(program = %program.display(), error = %e, "no standby sandbox process"),
    }
}

/// The waiting standby process for `program` on `data_dir`, if any: the
/// caller starts its pod with [`Standby::uuid`].
pub(crate) fn take_standby(program: &Path, data_dir: &Path) -> Option<Standby> {
    let mut s = STANDBY.lock().ok()?.take()?;
    (s.program == program && s.data_dir == data_dir && matches!(s.child.try_wait(), Ok(None))).then_some(s)
}

/// Moves the new sandbox process `pid` into its pod's cgroup on a blocking
/// thread, then tells it so on `stdin` (`--cgroup-from-caller`); dropping
/// `stdin` unwritten tells it to join the cgroup itself.
fn place_in_cgroup(
    args: &SandboxArgs,
    pid: i32,
    stdin: Option<tokio::process::ChildStdin>,
) -> Option<tokio::task::JoinHandle<()>> {
    let (uuid, stdin) = (args.uuid?, stdin?);
    let parent = args.cgroup_parent.clone().unwrap_or_default();
    let tracking_only = args.defer_cgroup_controllers;
    Some(tokio::spawn(async move {
        let placed = tokio::task::spawn_blocking(move || {
            crate::cgroup::pod::place_sandbox(&parent, &uuid.to_string(), tracking_only, pid)
        })
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)));
        let mut stdin = stdin;
        match placed {
            Ok(()) => {
                use tokio::io::AsyncWriteExt;
                let _ = stdin.write_all(b"1").await;
            }
            Err(e) => tracing::debug!(pod = %uuid, error = %e, "the sandbox joins its cgroup itself"),
        }
    }))
}

async fn start_node_unit(
    program: &Path,
    data_dir: &Path,
    args: &SandboxArgs,
    slice: Option<&str>,
) -> Result<Started, LaunchError> {
    let uuid = args.uuid.map(|u| u.to_string()).ok_or_else(|| LaunchError::Failed("no pod uuid".into()))?;
    let mut args = args.clone();
    args.in_systemd_unit = true;
    let unit = crate::cgroup::pod::unit_name(&uuid);
    let argv = sandbox_argv(data_dir, &args);
    let (program, slice) = (program.to_path_buf(), slice.map(str::to_string));
    // until the sandbox is ready (or failed): the start job of a notify unit
    let started = {
        let (name, uuid) = (unit.clone(), uuid.clone());
        tokio::task::spawn_blocking(move || {
            super::node_bus::call(|bus| {
                bus.start_notify_unit(&name, sandbox_unit_properties(&uuid, slice.as_deref(), &program, &argv))
            })
        })
        .await
        .map_err(|e| LaunchError::Failed(format!("starting unit {unit}: {e}")))?
    };
    if let Err(e) = started {
        return Err(LaunchError::Failed(format!("{e}: {}", unit_failure(&uuid).await)));
    }
    let ppid = rkt::pod::DataDir::new(data_dir).pod_parent(rkt::pod::PodDir::Run).join(&uuid).join(rkt::pod::PPID_FILE);
    let pid: i32 = std::fs::read_to_string(&ppid)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| LaunchError::Failed(format!("no sandbox pid in {}", ppid.display())))?;
    let pidfd = pidfd_open(pid).map_err(|source| LaunchError::Io { context: "pidfd_open".into(), source })?;
    Ok(Started { pid, pidfd, notify: None })
}

/// Longest cause `unit_failure` returns.
const CAUSE_MAX: usize = 2048;
/// Journal lines `unit_failure` quotes.
const JOURNAL_LINES: &str = "10";

/// Why the sandbox unit `rktlet-<uuid>.service` failed, for an error
/// message: its state, result and main process's exit (`systemctl show`),
/// then the last lines of its journal, at most `CAUSE_MAX` bytes. Resets the
/// unit's failed state afterwards so no failed unit outlives the pod.
pub(crate) async fn unit_failure(uuid: &str) -> String {
    let unit = crate::cgroup::pod::unit_name(uuid);
    let show = tokio::process::Command::new("systemctl")
        .args(["show", "-p", "LoadState,ActiveState,Result,ExecMainCode,ExecMainStatus", &unit])
        .stdin(Stdio::null())
        .output()
        .await;
    let mut cause = match show {
        Ok(o) if o.status.success() => describe_unit(&String::from_utf8_lossy(&o.stdout)),
        Ok(o) => format!("systemctl show: {}", String::from_utf8_lossy(&o.stderr).trim()),
        Err(e) => format!("systemctl show: {e}"),
    };
    // journald writes asynchronously: flush what the unit printed first
    let _ = tokio::process::Command::new("journalctl").arg("--sync").stdin(Stdio::null()).output().await;
    let journal = tokio::process::Command::new("journalctl")
        .args(["-u", &unit, "-n", JOURNAL_LINES, "--no-pager", "-o", "cat"])
        .stdin(Stdio::null())
        .output()
        .await;
    match journal {
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout);
            let lines = journal_lines(&text, &unit);
            if !lines.is_empty() {
                cause.push_str("; journal: ");
                cause.push_str(&lines.join(" | "));
            }
        }
        Err(e) => cause.push_str(&format!("; journalctl: {e}")),
    }
    forget_unit(uuid).await;
    bounded(&cause, CAUSE_MAX)
}

/// The lines of a unit's journal worth quoting: systemd's start/stop
/// announcements are left out (the result says as much) and its own lines
/// lose the `<unit>: ` prefix.
fn journal_lines<'a>(text: &'a str, unit: &str) -> Vec<&'a str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| {
            !["Starting ", "Started ", "Failed to start ", "Stopped ", "Stopping "].iter().any(|p| l.starts_with(p))
        })
        .map(|l| l.strip_prefix(unit).and_then(|r| r.strip_prefix(": ")).unwrap_or(l))
        .collect()
}

/// Clears a failed sandbox unit's state (systemd then unloads it). A unit
/// that is not loaded is no error: nothing is left to clear.
pub(crate) async fn forget_unit(uuid: &str) {
    let unit = crate::cgroup::pod::unit_name(uuid);
    let reset = {
        let unit = unit.clone();
        tokio::task::spawn_blocking(move || super::node_bus::call(|bus| bus.reset_failed(&unit))).await
    };
    match reset {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(unit, error = %e, "ResetFailedUnit"),
        Err(e) => tracing::debug!(unit, error = %e, "ResetFailedUnit"),
    }
}

/// One phrase from `systemctl show` output: `unit failed: result
/// exit-code, main process exited with status 3`.
pub(crate) fn describe_unit(show: &str) -> String {
    let get =
        |k: &str| show.lines().find_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix('='))).unwrap_or("").trim();
    let (load, active, result) = (get("LoadState"), get("ActiveState"), get("Result"));
    if load != "loaded" {
        return format!("unit {}", if load.is_empty() { "unknown" } else { load });
    }
    let status = get("ExecMainStatus");
    // ExecMainCode is a CLD_* code from waitid(2)
    let main = match get("ExecMainCode") {
        "1" => format!("main process exited with status {status}"),
        "2" => format!("main process killed by signal {}", signal_name(status)),
        "3" => format!("main process dumped core on signal {}", signal_name(status)),
        _ => "main process never ran".to_string(),
    };
    format!("unit {active}, result {result}, {main}")
}

fn signal_name(num: &str) -> String {
    num.parse::<i32>()
        .ok()
        .and_then(|n| nix::sys::signal::Signal::try_from(n).ok())
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|| num.to_string())
}

/// `s` cut to at most `max` bytes at a char boundary, marked when cut.
fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Waits until the pod is ready, its process exits, or `timeout` passes:
/// with `notify`, until its READY=1 arrives there (then the pod is marked
/// ready, `Stage1Root::mark_ready`); without, until
/// `<rootfs>/rkt/supervisor-status` points at `ready` (inotify on the
/// directory). Both watch the pidfd; no fixed-step polling.
pub(crate) async fn wait_ready(
    rootfs: PathBuf,
    pidfd: OwnedFd,
    notify: Option<NotifySocket>,
    timeout: Duration,
) -> Result<OwnedFd, LaunchError> {
    tokio::task::spawn_blocking(move || {
        match &notify {
            Some(n) => wait_notified(n, &rootfs, &pidfd, timeout),
            None => wait_ready_blocking(&rootfs, &pidfd, timeout),
        }
        .map(|()| pidfd)
    })
    .await
    .map_err(|e| LaunchError::Io { context: "waiting for the pod".into(), source: io::Error::other(e) })?
}

fn wait_notified(notify: &NotifySocket, rootfs: &Path, pidfd: &OwnedFd, timeout: Duration) -> Result<(), LaunchError> {
    let io_err = |context: &'static str| move |source: io::Error| LaunchError::Io { context: context.into(), source };
    let deadline = Instant::now() + timeout;
    let mut exited = false;
    loop {
        if notify.ready_queued().map_err(io_err("reading the pod's notify socket"))? {
            return super::rootfs::Stage1Root::new(rootfs).mark_ready().map_err(io_err("marking the pod ready"));
        }
        // READY=1 sent before the exit was read above
        if exited {
            return Err(LaunchError::Exited(String::new()));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LaunchError::Timeout(timeout));
        }
        let ms = u16::try_from(left.as_millis().min(10_000)).unwrap_or(10_000);
        let mut fds =
            [PollFd::new(notify.socket.as_fd(), PollFlags::POLLIN), PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(e) => return Err(io_err("poll")(e.into())),
        }
        exited = fds[1].revents().is_some_and(|r| !r.is_empty());
    }
}

fn wait_ready_blocking(rootfs: &Path, pidfd: &OwnedFd, timeout: Duration) -> Result<(), LaunchError> {
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)
        .map_err(|e| LaunchError::Io { context: "inotify_init".into(), source: e.into() })?;
    let r = wait_ready_on(&inotify, rootfs, pidfd, timeout);
    // the last close of an inotify instance that watched something waits for
    // an SRCU grace period (10-25 ms here): not on the pod start's path
    if let Err(e) = super::stop::after_the_call("inotify-close", move || drop(inotify)) {
        tracing::debug!(error = %e, "closed the readiness watch on the start's path");
    }
    r
}

fn wait_ready_on(inotify: &Inotify, rootfs: &Path, pidfd: &OwnedFd, timeout: Duration) -> Result<(), LaunchError> {
    let root = super::rootfs::Stage1Root::new(rootfs);
    let dir = root.supervisor_status().parent().map(Path::to_path_buf).unwrap_or_default();
    let io_err = |context: &str| {
        let context = context.to_string();
        move |e: nix::Error| LaunchError::Io { context, source: e.into() }
    };
    if let Err(e) = inotify.add_watch(&dir, AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO) {
        // no pod directory: the sandbox died before making it
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0) {
            return Err(LaunchError::Exited(String::new()));
        }
        return Err(io_err("watching the pod's readiness link")(e));
    }
    let deadline = Instant::now() + timeout;
    loop {
        if root.is_ready() {
            return Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LaunchError::Timeout(timeout));
        }
        let ms = u16::try_from(left.as_millis().min(10_000)).unwrap_or(10_000);
        let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN), PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(e) => return Err(io_err("poll")(e)),
        }
        if fds[1].revents().is_some_and(|r| !r.is_empty()) && !root.is_ready() {
            return Err(LaunchError::Exited(String::new()));
        }
        // drain; EAGAIN just means nothing is queued
        let _ = inotify.read_events();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_notify_sockets_nobody_listens_on_are_removed() {
        let t = tempfile::tempdir().expect("tempdir");
        let tmp = rkt::pod::DataDir::new(t.path()).tmp();
        std::fs::create_dir_all(&tmp).expect("tmp");
        let live = NotifySocket::bind(t.path(), uuid::Uuid::new_v4()).expect("bind");
        // a socket whose owner died: the file stays behind
        let stale = tmp.join(format!("{}.{NOTIFY_EXT}", uuid::Uuid::new_v4()));
        drop(std::os::unix::net::UnixDatagram::bind(&stale).expect("bind stale"));
        let other = tmp.join("some.file");
        std::fs::write(&other, b"x").expect("file");
        assert_eq!(remove_stale_notify_sockets(t.path()), 1);
        assert!(!stale.exists());
        assert!(live.path.exists() && other.exists());
        assert_eq!(remove_stale_notify_sockets(t.path()), 0);
    }

    #[test]
    fn command_lines() {
        let args = SandboxArgs { net: "host".into(), hostname: Some("h".into()), ..Default::default() };
        let argv: Vec<String> =
            sandbox_argv(Path::new("/d"), &args).iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(&argv[..4], ["--dir", "/d", "app", "sandbox"]);
        assert!(argv.contains(&"--net=host".to_string()));
        let props = |slice| {
            sandbox_unit_properties("u1", slice, Path::new("/bin/rktlet"), &sandbox_argv(Path::new("/d"), &args))
        };
        let find =
            |props: &[Property], name: &str| props.iter().find(|p| p.name == name).map(|p| format!("{:?}", p.value));
        let unit = props(Some("kubepods-pod1.slice"));
        assert_eq!(find(&unit, "Type").as_deref(), Some(r#"Str("notify")"#));
        assert_eq!(find(&unit, "Delegate").as_deref(), Some("Bool(true)"));
        assert_eq!(find(&unit, "KillMode").as_deref(), Some(r#"Str("mixed")"#));
        assert_eq!(find(&unit, "Slice").as_deref(), Some(r#"Str("kubepods-pod1.slice")"#));
        let exec = find(&unit, "ExecStart").expect("ExecStart");
        assert!(exec.contains(r#"path: "/bin/rktlet""#) && exec.contains(r#""sandbox""#), "{exec}");
        assert_eq!(find(&props(Some("/test.slice")), "Slice").as_deref(), Some(r#"Str("test.slice")"#));
        assert_eq!(find(&props(None), "Slice"), None);
        // a failed unit must stay loaded for its result to be read
        assert_eq!(find(&unit, "CollectMode"), None);
    }

    #[test]
    fn unit_failure_is_described() {
        let exited = "LoadState=loaded\nActiveState=failed\nResult=exit-code\nExecMainCode=1\nExecMainStatus=3\n";
        assert_eq!(describe_unit(exited), "unit failed, result exit-code, main process exited with status 3");
        let killed = "Result=signal\nExecMainCode=2\nExecMainStatus=9\nLoadState=loaded\nActiveState=failed\n";
        assert_eq!(describe_unit(killed), "unit failed, result signal, main process killed by signal SIGKILL");
        let never = "LoadState=loaded\nActiveState=failed\nResult=resources\nExecMainCode=0\nExecMainStatus=0\n";
        assert_eq!(describe_unit(never), "unit failed, result resources, main process never ran");
        assert_eq!(describe_unit("LoadState=not-found\nActiveState=inactive\n"), "unit not-found");
        let long = "é".repeat(3000);
        let cut = bounded(&long, CAUSE_MAX);
        assert!(cut.len() <= CAUSE_MAX + 3 && cut.ends_with("..."));
        assert_eq!(bounded("short", CAUSE_MAX), "short");
        let journal = "Starting rktlet-u1.service - rktlet pod u1...\nno such file\n\n\
            rktlet-u1.service: Main process exited, code=exited, status=3/NOTIMPLEMENTED\n\
            Failed to start rktlet-u1.service - rktlet pod u1.\n";
        assert_eq!(
            journal_lines(journal, "rktlet-u1.service"),
            ["no such file", "Main process exited, code=exited, status=3/NOTIMPLEMENTED"]
        );
    }

    #[test]
    fn wait_ready_sees_the_link_and_the_exit() {
        let t = tempfile::tempdir().expect("tempdir");
        let rootfs = t.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("rkt")).expect("mkdir");
        let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pidfd = pidfd_open(sleeper.id() as i32).expect("pidfd");
        let link = rootfs.join("rkt/supervisor-status");
        let l2 = link.clone();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            std::os::unix::fs::symlink("ready", l2).expect("link");
        });
        wait_ready_blocking(&rootfs, &pidfd, Duration::from_secs(10)).expect("ready");
        writer.join().expect("join");
        std::fs::remove_file(&link).expect("rm");
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert!(matches!(wait_ready_blocking(&rootfs, &pidfd, Duration::from_secs(10)), Err(LaunchError::Exited(_))));
        let mut other = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pidfd = pidfd_open(other.id() as i32).expect("pidfd");
        assert!(matches!(
            wait_ready_blocking(&rootfs, &pidfd, Duration::from_millis(100)),
            Err(LaunchError::Timeout(_))
        ));
        let _ = other.kill();
        let _ = other.wait();
    }

    #[test]
    fn wait_notified_hears_ready_and_marks_the_pod() {
        let t = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(t.path().join("tmp")).expect("tmp");
        let rootfs = t.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("rkt")).expect("mkdir");
        let uuid = uuid::Uuid::new_v4();
        let notify = NotifySocket::bind(t.path(), uuid).expect("bind");
        let path = notify.path.clone();
        assert!(path.is_absolute());
        let cwd = std::env::current_dir().expect("cwd");
        if let Ok(rel) = t.path().strip_prefix(&cwd) {
            let again = NotifySocket::bind(rel, uuid).expect("bind relative");
            assert!(again.path.is_absolute(), "NOTIFY_SOCKET must be absolute: {}", again.path.display());
        }
        let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pidfd = pidfd_open(sleeper.id() as i32).expect("pidfd");
        let sender = std::os::unix::net::UnixDatagram::unbound().expect("socket");
        // nspawn's status messages first; only READY=1 makes the pod ready
        sender.send_to(b"STATUS=Container running.\nX_NSPAWN_LEADER_PID=7", &path).expect("send");
        assert!(matches!(
            wait_notified(&notify, &rootfs, &pidfd, Duration::from_millis(100)),
            Err(LaunchError::Timeout(_))
        ));
        assert!(!crate::stage1::rootfs::Stage1Root::new(&rootfs).is_ready());
        sender.send_to(b"READY=1\nSTATUS=Ready.", &path).expect("send");
        wait_notified(&notify, &rootfs, &pidfd, Duration::from_secs(10)).expect("ready");
        assert!(crate::stage1::rootfs::Stage1Root::new(&rootfs).is_ready());
        // a pod that exits without READY=1
        std::fs::remove_file(rootfs.join("rkt/supervisor-status")).expect("rm");
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert!(matches!(
            wait_notified(&notify, &rootfs, &pidfd, Duration::from_secs(10)),
            Err(LaunchError::Exited(_))
        ));
        drop(notify);
        assert!(!path.exists(), "the socket goes with its owner");
    }
}
