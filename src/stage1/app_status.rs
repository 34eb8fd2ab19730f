//! One app's files in its pod and what they record: its paths
//! ([`AppPaths`]), its status files (created, started, exit, stopping, OOM,
//! host-PID process) and the state read from them. Kept apart from the
//! app's making (`app`), which the stop path, the spare trees and the pod's
//! log writer do not need.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Paths of one app in a pod.
pub(crate) struct AppPaths {
    pub name: String,
    pub(super) pod_path: PathBuf,
    stage1: PathBuf,
}

impl AppPaths {
    pub(crate) fn new(pod: &rkt::pod::Pod, name: &str) -> Self {
        AppPaths { name: name.to_string(), pod_path: pod.path(), stage1: pod.stage1_rootfs() }
    }

    /// The paths of app `name` of the pod whose directory is `pod_dir`.
    pub(crate) fn in_pod_dir(pod_dir: &Path, name: &str) -> Self {
        AppPaths { name: name.to_string(), pod_path: pod_dir.to_path_buf(), stage1: pod_dir.join("stage1/rootfs") }
    }

    /// The app rootfs as the host sees it (the overlay's host mount).
    pub(crate) fn rootfs(&self) -> PathBuf {
        self.stage1.join("opt/stage2").join(&self.name).join("rootfs")
    }

    /// The app rootfs as the pod sees it.
    pub(crate) fn rootfs_in_pod(&self) -> PathBuf {
        Path::new("/opt/stage2").join(&self.name).join("rootfs")
    }

    pub(crate) fn appsinfo(&self) -> PathBuf {
        self.pod_path.join("appsinfo").join(&self.name)
    }

    /// Bytes and inodes of the app's writable layer (its overlay upper
    /// directory); `None` before the app was added.
    pub(crate) fn writable_usage(&self) -> Option<(u64, u64)> {
        let tree = fs::read_to_string(self.appsinfo().join("treeStoreID")).ok()?;
        Some(rkt::extract::usage(&self.overlay_upper(tree.trim())))
    }

    pub(crate) fn overlay_upper(&self, tree_id: &str) -> PathBuf {
        self.pod_path.join("overlay").join(tree_id).join("upper").join(&self.name)
    }

    pub(crate) fn overlay_work(&self, tree_id: &str) -> PathBuf {
        self.pod_path.join("overlay").join(tree_id).join("work").join(&self.name)
    }

    pub(crate) fn env_file(&self) -> PathBuf {
        self.stage1.join("rkt/env").join(&self.name)
    }

    /// The app's environment entries systemd refuses in a unit, NUL-ended,
    /// for appexec (`stage1::appexec::Plan::env_file`).
    pub(crate) fn environ_file(&self) -> PathBuf {
        self.stage1.join("rkt/env").join(format!("{}.environ", self.name))
    }

    /// [`AppPaths::environ_file`] as the pod sees it.
    pub(crate) fn environ_file_in_pod(&self) -> PathBuf {
        Path::new("/rkt/env").join(format!("{}.environ", self.name))
    }

    /// The FIFO through which appexec says the app started
    /// (`stage1::appexec::StartedFifo`): in a directory of its own, which
    /// the pod watch does not watch, named as the app (an ACName: no other
    /// app's file can be at that path).
    pub(crate) fn started_fifo(&self) -> PathBuf {
        self.stage1.join("rkt/execd").join(&self.name)
    }

    /// [`AppPaths::started_fifo`] as the pod sees it.
    pub(crate) fn started_fifo_in_pod(&self) -> PathBuf {
        Path::new("/rkt/execd").join(&self.name)
    }

    /// Device nodes made for the app (bound into its root by its unit).
    pub(crate) fn devices(&self) -> PathBuf {
        self.stage1.join("rkt/devices").join(&self.name)
    }

    /// [`AppPaths::devices`] as the pod sees it.
    pub(crate) fn devices_in_pod(&self) -> PathBuf {
        Path::new("/rkt/devices").join(&self.name)
    }

    /// CRIU's images of a container restored from a checkpoint, until its start.
    pub(crate) fn checkpoint(&self) -> PathBuf {
        self.stage1.join("rkt/checkpoint").join(&self.name)
    }

    /// [`AppPaths::checkpoint`] as the pod sees it.
    pub(crate) fn checkpoint_in_pod(&self) -> PathBuf {
        Path::new("/rkt/checkpoint").join(&self.name)
    }

    pub(crate) fn status_file(&self, suffix: &str) -> PathBuf {
        self.stage1.join("rkt/status").join(format!("{}{suffix}", self.name))
    }

    /// [`AppPaths::status_file`] as the pod sees it.
    pub(crate) fn status_file_in_pod(&self, suffix: &str) -> PathBuf {
        Path::new("/rkt/status").join(format!("{}{suffix}", self.name))
    }
}

/// Where an app is in its life, from its files (and the pod's state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AppState {
    Created,
    Running,
    /// Exit code as CRI reports it (128 + signal for signals); `None` when
    /// the pod went away before the exit was recorded.
    Exited(Option<i32>),
}

/// Timestamps (ns since the epoch, 0 when unknown) and state of an app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AppFacts {
    pub state: AppState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
}

fn mtime_ns(p: &Path) -> Option<i64> {
    let m = fs::metadata(p).ok()?.modified().ok()?;
    m.duration_since(std::time::UNIX_EPOCH).ok().map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Reads an app's state from rkt's status files: `<app>-created`,
/// `<app>-started` and `<app>` (the recorded exit code). `pod_running`
/// decides what a started app without a recorded exit is.
pub(crate) fn facts(paths: &AppPaths, pod_running: bool) -> AppFacts {
    let created_at = mtime_ns(&paths.status_file("-created")).unwrap_or(0);
    let started_at = mtime_ns(&paths.status_file("-started")).unwrap_or(0);
    let exit_file = paths.status_file("");
    let (state, finished_at) = match fs::read_to_string(&exit_file) {
        Ok(s) => (AppState::Exited(s.trim().parse().ok()), mtime_ns(&exit_file).unwrap_or(0)),
        Err(_) if started_at == 0 => (AppState::Created, 0),
        Err(_) if pod_running => (AppState::Running, 0),
        Err(_) => (AppState::Exited(None), 0),
    };
    AppFacts { state, created_at, started_at, finished_at }
}

/// Status-file suffix marking an app the kernel OOM-killed, as the pod's
/// systemd reported it (the service's `Result` was `oom-kill`): on cgroup v2
/// the unit's cgroup, and its `memory.events`, go with the unit.
pub(crate) const OOM_KILLED: &str = "-oom";

/// Notes that the pod's systemd saw the app OOM-killed (idempotent).
pub(crate) fn record_oom_kill(paths: &AppPaths) -> io::Result<()> {
    fs::write(paths.status_file(OOM_KILLED), b"")
}

/// Records an app's exit code (once: the first record wins) so it survives
/// the unit being forgotten, a daemon restart and the pod's stop.
/// Returns whether this call recorded it (false: an earlier record stands).
pub(crate) fn record_exit(paths: &AppPaths, exit_code: i32) -> io::Result<bool> {
    let file = paths.status_file("");
    if file.exists() {
        return Ok(false);
    }
    // complete before visible: written aside, then linked in (the link fails if
    // another recorder was first), so a reader never sees an empty file
    let tmp = file.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
    fs::write(&tmp, format!("{exit_code}\n"))?;
    let linked = fs::hard_link(&tmp, &file);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Marks an app being stopped with `signal` (`<app>-stopping`), before the
/// stop is asked of the pod's systemd. systemd forgets a stopped unit, exit
/// status included; a daemon that dies before recording the exit learns
/// from this file, after its restart, how the app ended (see [`vanished_exit`]).
pub(crate) fn mark_stopping(paths: &AppPaths, signal: i32) -> io::Result<()> {
    fs::write(paths.status_file("-stopping"), signal.to_string())
}

/// The exit to record for a started app whose unit the pod's systemd no
/// longer knows (a running unit is always loaded, so the app is gone):
/// 128 + the stop signal if a stop was under way; else, if the start is
/// not recent (a start marks `-started` just before creating the unit),
/// 255, exit unknown. `None`: too early to tell.
pub(crate) fn vanished_exit(paths: &AppPaths) -> Option<i32> {
    if let Some(sig) =
        fs::read_to_string(paths.status_file("-stopping")).ok().and_then(|s| s.trim().parse::<i32>().ok())
    {
        return Some(128 + sig);
    }
    let started = fs::metadata(paths.status_file("-started")).and_then(|m| m.modified()).ok()?;
    (started.elapsed().ok()? > std::time::Duration::from_secs(10)).then_some(255)
}

/// `<app>-starterror`: why the app's start failed after its process ran
/// (ContainerStatus reason `StartError`, as containerd reports it).
pub(crate) const START_ERROR: &str = "-starterror";

/// Marks an app of a host-PID pod (`<app>-host`): the pod's log writer
/// supervises its process and records its exit, not the pod's systemd.
pub(crate) const HOST_PID: &str = "-host";

/// Records the process of a host-PID app (its log writer, which started it
/// and has not reaped it: the pid is its): `<pid> <start time>` in
/// `<app>-host`, written aside and renamed in. An exec copies that process
/// and a stop signals it, nothing else that may be in the app's cgroup.
pub(crate) fn record_host_app(paths: &AppPaths, pid: i32, start: &str) -> io::Result<()> {
    rkt::fs::write_volatile(&paths.status_file(HOST_PID), format!("{pid} {start}\n").as_bytes(), 0o644)
}

/// The process of a host-PID app as its log writer recorded it: its pid
/// and start time (`/proc/<pid>/stat` field 22). None before it is recorded.
pub(crate) fn host_app(paths: &AppPaths) -> Option<(i32, String)> {
    let record = fs::read_to_string(paths.status_file(HOST_PID)).ok()?;
    let (pid, start) = record.trim().split_once(' ')?;
    Some((pid.parse().ok()?, start.to_string()))
}

/// Whether the pod's log writer records this app's exit: a host-PID app
/// whose writer is alive (accepts on its socket).
pub(crate) fn exit_recorded_by_writer(paths: &AppPaths) -> bool {
    paths.status_file(HOST_PID).exists()
        && std::os::unix::net::UnixStream::connect(paths.pod_path.join(crate::pod::LOG_SOCKET_FILE)).is_ok()
}

/// A `-started` marker made ahead with the app's other files (`spare.rs`):
/// renamed into place when the app starts, which costs less than making a
/// file then (allocating an inode is ext4's slow step).
pub(crate) const STARTED_SPARE: &str = "-started.spare";

/// Marks an app started (`<app>-started`, its mtime is StartedAt).
pub(crate) fn mark_started(paths: &AppPaths) -> io::Result<()> {
    let (spare, started) = (paths.status_file(STARTED_SPARE), paths.status_file("-started"));
    // the start's time first (a rename keeps it): a reader never sees the spare's
    let now = std::time::SystemTime::now();
    let stamped = fs::File::options()
        .write(true)
        .open(&spare)
        .and_then(|f| f.set_times(fs::FileTimes::new().set_accessed(now).set_modified(now)));
    match stamped {
        Ok(()) => fs::rename(spare, started),
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::write(started, b""),
        Err(e) => Err(e),
    }
}
