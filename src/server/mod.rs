//! Serving CRI on a unix socket: claiming the socket path safely, serving
//! both services, and shutting down gracefully on SIGTERM/SIGINT. Every
//! connection goes through [`authority::AuthorityFix`], so clients that send
//! the socket's path as `:authority` (kubelet 1.29, crictl 1.29) are served.

pub(crate) mod authority;

use crate::cri::CriService;
use crate::proto::v1::image_service_server::ImageServiceServer;
use crate::proto::v1::runtime_service_server::RuntimeServiceServer;
use crate::runtime::Runtime;
use rkt::lock::{self, HeldLock};
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::UnixListener;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    #[error("another rktlet is already serving on {socket} ({why}); stop it first or pick another --socket")]
    AlreadyServing { socket: PathBuf, why: String },
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    #[error("another rktlet daemon ({holder}) uses the data dir {dir}; stop it first or pick another --data-dir")]
    DataDirInUse { dir: PathBuf, holder: String },
    #[error("starting the runtime: {0}")]
    Runtime(String),
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("cannot listen for metrics on {addr}: {source}")]
    Metrics { addr: std::net::SocketAddr, source: io::Error },
    #[error("cannot listen for streams on {addr}: {source}")]
    Streaming { addr: std::net::SocketAddr, source: io::Error },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> ServeError {
    let context = context.into();
    move |source| ServeError::Io { context, source }
}

/// The claimed socket path. The `<socket>.lock` flock makes the claim
/// exclusive between daemons; dropping the guard removes the socket.
#[derive(Debug)]
pub(crate) struct SocketGuard {
    path: PathBuf,
    _lock: HeldLock,
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_file(&self.path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(socket = %self.path.display(), error = %e, "cannot remove socket");
        }
    }
}

/// The CRI socket's path, claimed (its lock held, no live server on it) but
/// not bound yet: a client must not connect before the runtime is built.
#[derive(Debug)]
pub(crate) struct SocketClaim {
    path: PathBuf,
    lock: HeldLock,
}

/// Claims the CRI socket: creates its directory, refuses when a live server
/// holds it, removes a stale socket file.
pub(crate) fn claim_socket(path: &Path) -> Result<SocketClaim, ServeError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .map_err(io_err(format!("creating {}", parent.display())))?;
    }
    let mut lock_name = path.as_os_str().to_owned();
    lock_name.push(".lock");
    let lock_path = Path::new(&lock_name);
    let lock = lock_when_free(lock_path, LOCK_GRACE)?.ok_or_else(|| ServeError::AlreadyServing {
        socket: path.to_path_buf(),
        why: format!("{} is locked by {}", lock_path.display(), holders(lock_path)),
    })?;
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            // a server that holds no lock (another tool, an older build) still counts
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                let why = "a server answers on it".to_string();
                return Err(ServeError::AlreadyServing { socket: path.to_path_buf(), why });
            }
            tracing::info!(socket = %path.display(), "removing stale socket");
            fs::remove_file(path).map_err(io_err(format!("removing stale socket {}", path.display())))?;
        }
        Ok(_) => return Err(ServeError::NotASocket(path.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(format!("checking {}", path.display()))(e)),
    }
    Ok(SocketClaim { path: path.to_path_buf(), lock })
}

/// How long a start waits for the socket's lock: a daemon killed a moment
/// ago may leave a child forked and not yet exec'd (or exited) that holds
/// its descriptors, the lock among them, for a few milliseconds; a daemon
/// that serves holds it for good.
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The lock on `path`, waited for up to `grace`; None if it is still held then.
fn lock_when_free(path: &Path, grace: std::time::Duration) -> Result<Option<HeldLock>, ServeError> {
    let deadline = std::time::Instant::now() + grace;
    loop {
        if let Some(lock) = lock::try_exclusive_file(path).map_err(io_err(format!("locking {}", path.display())))? {
            return Ok(Some(lock));
        }
        if std::time::Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The processes that have `file` open (a flock lives as long as any of
/// them keeps it: a child forked and not yet exec'd holds its parent's), as
/// `pid N (comm)`, for a refusal that says who is in the way.
fn holders(file: &Path) -> String {
    let mut found = Vec::new();
    for proc_entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = proc_entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(fds) = fs::read_dir(proc_entry.path().join("fd")) else { continue };
        if fds.flatten().any(|fd| fs::read_link(fd.path()).is_ok_and(|target| target == file)) {
            let comm = fs::read_to_string(proc_entry.path().join("comm")).unwrap_or_default();
            found.push(format!("pid {pid} ({})", comm.trim()));
        }
    }
    if found.is_empty() { "a process this one cannot see".to_string() } else { found.join(", ") }
}

impl SocketClaim {
    /// Binds the claimed path and sets mode 0660.
    pub(crate) fn listen(self) -> Result<(UnixListener, SocketGuard), ServeError> {
        let path = self.path;
        let listener = UnixListener::bind(&path).map_err(io_err(format!("binding {}", path.display())))?;
        let guard = SocketGuard { path: path.clone(), _lock: self.lock };
        fs::set_permissions(&path, fs::Permissions::from_mode(0o660))
            .map_err(io_err(format!("setting mode of {}", path.display())))?;
        Ok((listener, guard))
    }
}

/// Where apps have v1 cgroups of the daemon's making (a node's systemd may
/// move their processes out of them: docs/kubelet.md, the cgroupfs driver
/// under systemd), a task that puts the apps it finds out back, every
/// `container::exec::strays_period` (about 50 µs per running app).
fn put_back_strays_every(runtime: &Arc<Runtime>) -> Option<tokio::task::JoinHandle<()>> {
    let v1 = crate::cgroup::Layout::cached().is_ok_and(|l| l.v1_controllers().next().is_some());
    if runtime.config.exec_mode || !v1 {
        return None;
    }
    let period = crate::container::exec::strays_period()?;
    let rt = runtime.clone();
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = std::collections::HashSet::new();
        loop {
            tick.tick().await;
            let rt = rt.clone();
            let check = tokio::task::spawn_blocking(move || {
                crate::container::exec::put_back_strays(&rt, &mut failing);
                failing
            });
            failing = check.await.unwrap_or_default();
        }
    }))
}

/// Serves both CRI services on `listener` until `shutdown` completes; calls
/// in flight are allowed to finish.
pub(crate) async fn serve(
    runtime: Arc<Runtime>,
    listener: UnixListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let service = if runtime.config.exec_mode {
        tracing::info!("exec mode: CRI calls are served by exec'ing the rkt-style CLI, as the original rktlet did");
        CriService::exec_mode(runtime).map_err(io_err("locating the CLI for exec mode"))?
    } else {
        CriService::new(runtime)
    };
    tonic::transport::Server::builder()
        .add_service(RuntimeServiceServer::new(service.clone()))
        .add_service(ImageServiceServer::new(service))
        .serve_with_incoming_shutdown(
            UnixListenerStream::new(listener).map(|conn| conn.map(authority::AuthorityFix::new)),
            shutdown,
        )
        .await?;
    Ok(())
}

/// Installs SIGTERM and SIGINT handlers now and returns a future that
/// resolves when either arrives.
pub(crate) fn shutdown_signal() -> Result<impl Future<Output = ()> + Send, ServeError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(io_err("installing SIGTERM handler"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(io_err("installing SIGINT handler"))?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    })
}

/// The daemon's claim on its data dir: an exclusive flock on
/// `<data dir>/daemon.lock`, held for the daemon's life. A second daemon on
/// the same data dir would take the first one's pool pods for leftovers of a
/// previous run and delete them. The file names the holder for the refusal.
#[derive(Debug)]
pub(crate) struct DataDirGuard {
    _lock: HeldLock,
}

pub(crate) fn claim_data_dir(dir: &Path, socket: &Path) -> Result<DataDirGuard, ServeError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(dir)
        .map_err(io_err(format!("creating {}", dir.display())))?;
    let path = dir.join("daemon.lock");
    match lock::try_exclusive_file(&path).map_err(io_err(format!("locking {}", path.display())))? {
        Some(lock) => {
            let holder = format!("pid {}, socket {}\n", std::process::id(), socket.display());
            let _ = fs::write(&path, holder);
            Ok(DataDirGuard { _lock: lock })
        }
        None => {
            let holder = fs::read_to_string(&path).unwrap_or_default().trim().to_string();
            let holder = if holder.is_empty() { "pid unknown".to_string() } else { holder };
            Err(ServeError::DataDirInUse { dir: dir.to_path_buf(), holder })
        }
    }
}

/// `rktlet serve`: claim the socket (before anything is created for the
/// data dir), then the data dir, start the runtime, serve until a signal,
/// remove the socket.
pub(crate) async fn run_with(config: crate::config::Config) -> Result<(), ServeError> {
    let signals = shutdown_signal()?;
    let claim = claim_socket(&config.socket)?;
    // exec mode is the original rktlet's design: every call execs the CLI,
    // which takes rkt's own locks; such a daemon owns nothing of the data
    // dir (no pool, no recovery) and may run beside the daemon that does
    let data_guard = if config.exec_mode { None } else { Some(claim_data_dir(&config.data_dir, &config.socket)?) };
    if data_guard.is_some() {
        // for the stage1 entry points of the pods (`rkt gc` releases their network as the daemon would)
        let net = crate::stage1::teardown::NetDirs {
            conf_dir: config.cni_conf_dir.clone(),
            bin_dirs: config.cni_bin_dirs.clone(),
        };
        let data = rkt::pod::DataDir::new(&config.data_dir);
        if let Err(e) = crate::stage1::entrypoints::record_net(&data, &net) {
            tracing::warn!(error = %e, "cannot record the CNI directories for rkt's gc of the pods");
        }
    }
    let runtime = Arc::new(Runtime::new(config).map_err(|e| ServeError::Runtime(e.to_string()))?);
    // bound only now: a client that can connect finds the runtime ready
    let (listener, socket_guard) = claim.listen()?;
    let result = run(runtime, listener, socket_guard, signals).await;
    drop(data_guard);
    result
}

async fn run(
    runtime: Arc<Runtime>,
    listener: UnixListener,
    guard: SocketGuard,
    signals: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let socket = runtime.config.socket.clone();
    tracing::info!(
        socket = %socket.display(),
        data_dir = %runtime.data.root().display(),
        cgroup_driver = %runtime.cgroup_driver,
        pid1_is_systemd = runtime.host.pid1_is_systemd,
        "rktlet serving CRI"
    );
    let rt = runtime.clone();
    tokio::task::spawn_blocking(move || rt.reconcile());
    // the default AppArmor profile loaded now, not by the first CreateContainer
    if runtime.host.lsm.apparmor {
        let dir = runtime.apparmor_dir();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = crate::stage1::apparmor::ensure_default(&dir) {
                tracing::warn!(error = %e, "AppArmor: the default profile is not loaded yet (CreateContainer retries)");
            }
        });
    }
    // what pulls cut short by a crash left in cas/tmp (before the first
    // request: a pull of ours holds its lock, one by the CLI too)
    // removed pods a daemon that died had not finished deleting (exec mode
    // deletes none later, and may run beside the daemon whose trash it is)
    if !runtime.config.exec_mode {
        let data = runtime.data.clone();
        tokio::task::spawn_blocking(move || {
            let emptied = data.empty_trash();
            if emptied > 0 {
                tracing::info!(emptied, "deleted the directories of pods removed before a restart");
            }
            let sockets = crate::stage1::launch::remove_stale_notify_sockets(data.root());
            if sockets > 0 {
                tracing::info!(sockets, "removed the notify sockets of pod starts cut short before a restart");
            }
        });
    }
    let cleaned = runtime.images.clean_leftovers();
    if cleaned > 0 {
        tracing::info!(cleaned, "removed leftovers of interrupted pulls");
    }
    // trees of this boot a process that rendered them left unsynced
    let unsynced = rkt::tree::settle_unsynced(runtime.images.cas());
    if unsynced > 0 {
        tracing::info!(unsynced, "syncing rendered trees in the background");
    }
    // layers whose ACI an earlier process did not get to write
    crate::image::layer_aci::convert_later(runtime.images.cas());
    // listed before the first request can start a pod of its own (not in
    // exec mode: that daemon owns no pod starts)
    if !runtime.config.exec_mode {
        let interrupted = crate::stage1::boot::interrupted_starts(&runtime.data);
        let rt = runtime.clone();
        tokio::spawn(
            async move { crate::stage1::boot::recover_interrupted(&rt.data, &rt.net_dirs(), interrupted).await },
        );
    }
    let metrics = match runtime.config.metrics_address {
        Some(addr) => {
            let listener =
                tokio::net::TcpListener::bind(addr).await.map_err(|e| ServeError::Metrics { addr, source: e })?;
            tracing::info!(%addr, "serving Prometheus metrics at /metrics");
            Some(tokio::spawn(crate::metrics::serve(listener, runtime.clone())))
        }
        None => None,
    };
    let addr = runtime.config.streaming_address;
    let listener_s = crate::stream::server::bind(addr).await.map_err(|e| ServeError::Streaming { addr, source: e })?;
    let streaming = tokio::spawn(crate::stream::server::serve(listener_s, runtime.clone()));
    let refill = tokio::spawn(crate::sandbox::pool::fill::refill(runtime.clone()));
    // the first cold pod start's sandbox process
    if runtime.supervisor() == crate::stage1::launch::Supervisor::Detached
        && let Ok(program) = runtime.sandbox_program()
    {
        crate::stage1::launch::keep_standby(&program, runtime.data.root());
    }
    let trimmer = tokio::spawn(crate::base::heap::trim_when_quiet());
    let strays = put_back_strays_every(&runtime);
    // what only the start-up ran need not stay mapped: calls fault back what they run
    tokio::task::spawn_blocking(|| {
        let kib = crate::base::program_pages::release_all();
        tracing::debug!(kib, "start-up's program pages released");
    });
    let result = serve(runtime.clone(), listener, signals).await;
    if let Some(m) = metrics {
        m.abort();
    }
    streaming.abort();
    trimmer.abort();
    if let Some(s) = strays {
        s.abort();
    }
    crate::sandbox::pool::fill::drain(&runtime, refill).await;
    // removed pods' directories are deleted (and stopped pods' inotify
    // instances closed) before the daemon exits
    let _ = tokio::task::spawn_blocking(crate::stage1::stop::finish_after_calls).await;
    let _ = tokio::task::spawn_blocking(rkt::tree::finish_settling).await;
    drop(guard);
    tracing::info!(socket = %socket.display(), "socket removed, bye");
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_waits_for_a_lock_let_go_of_soon_and_refuses_one_held_on_naming_its_holder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("run/rktlet.sock");
        std::fs::create_dir_all(dir.path().join("run")).expect("run dir");
        let lock_path = dir.path().join("run/rktlet.sock.lock");
        // as a killed daemon's child still holding its descriptors for a moment
        let held = lock::try_exclusive_file(&lock_path).expect("lock").expect("free");
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            drop(held);
        });
        let claim = claim_socket(&socket).expect("claimed once the lock was let go of");
        letting_go.join().expect("thread");
        drop(claim);

        // held on, as by a daemon that serves: refused after the grace, naming who holds it
        let _held = lock::try_exclusive_file(&lock_path).expect("lock").expect("free again");
        let started = std::time::Instant::now();
        let e = claim_socket(&socket).expect_err("refused");
        assert!(started.elapsed() >= LOCK_GRACE, "waited {:?}", started.elapsed());
        let said = e.to_string();
        assert!(said.contains("already serving"), "{said}");
        assert!(said.contains(&format!("is locked by pid {} (", std::process::id())), "{said}");
    }
}
