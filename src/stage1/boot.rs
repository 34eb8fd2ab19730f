//! A pod's boot as the daemon runs it, cold or for the pool: `<rkt> app
//! sandbox` started, then waited for until ready while the daemon moves it
//! into its controller cgroups and CNI ADD runs in its network namespace.
//!
//! Runs in: the daemon.

use crate::net::cni::{CniRequest, CniResult, Network};
use crate::stage1::launch::{self, LaunchError, Supervisor};
use crate::stage1::sandbox::SandboxArgs;
use rkt::pod::{self, DataDir};
use std::path::Path;
use std::time::Duration;
use uuid::Uuid;

/// Suffix of the manifest a pod start writes to the data dir's `tmp/`
/// before anything else (netns, CNI, the sandbox) and removes at the end.
const START_MARK: &str = ".pod-manifest";

/// Where a start of pod `uuid` writes its manifest first (see [`interrupted_starts`]).
pub(crate) fn start_manifest(data: &DataDir, uuid: Uuid) -> std::path::PathBuf {
    data.tmp().join(format!("{uuid}{START_MARK}"))
}

/// Starts that a crash interrupted, found at daemon start: a start's
/// manifest in `tmp/` whose pod never got a directory. Call before serving
/// (a start in flight has the same look); [`recover_interrupted`] cleans them.
pub(crate) fn interrupted_starts(data: &DataDir) -> Vec<Uuid> {
    let Ok(entries) = std::fs::read_dir(data.tmp()) else { return Vec::new() };
    let known: std::collections::HashSet<Uuid> =
        data.list_pods().unwrap_or_default().into_iter().map(|(u, _)| u).collect();
    let marks: Vec<Uuid> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(START_MARK)?.parse::<Uuid>().ok())
        .collect();
    // a start that got as far as its pod directory is the pod's business now
    for u in marks.iter().filter(|u| known.contains(u)) {
        let _ = std::fs::remove_file(start_manifest(data, *u));
    }
    marks.into_iter().filter(|u| !known.contains(u)).collect()
}

/// Recovery rule for a start interrupted before its sandbox made the pod
/// directory: what it made on the host goes (CNI DEL from the cached result,
/// the netns `rktlet-<uuid>`), then its manifest. A start whose sandbox got
/// further has a pod directory, and stop/remove/gc handle it as any pod.
pub(crate) async fn recover_interrupted(data: &DataDir, net: &crate::stage1::teardown::NetDirs, uuids: Vec<Uuid>) {
    for uuid in uuids {
        tracing::info!(pod = %uuid, "cleaning up a pod start a crash interrupted");
        if let Err(e) = crate::stage1::teardown::abort_start(data, uuid, net).await {
            tracing::error!(pod = %uuid, error = %e, "cleanup after a failed start");
        }
        let _ = std::fs::remove_file(start_manifest(data, uuid));
    }
}

/// How long a pod may take to boot before its start gives up.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a pod's boot failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BootError {
    /// The pod did not get ready within [`READY_TIMEOUT`].
    #[error("pod {uuid}: {source}")]
    Timeout { uuid: Uuid, source: LaunchError },
    /// A step failed (`what`: the step).
    #[error("pod {uuid}: {what}: {reason}")]
    Failed { uuid: Uuid, what: &'static str, reason: String },
}

impl BootError {
    pub(crate) fn failed(uuid: Uuid, what: &'static str, e: impl std::fmt::Display) -> Self {
        BootError::Failed { uuid, what, reason: e.to_string() }
    }
}

/// Boots a pod: `program` (`<rkt> app sandbox`) with `args` under
/// `supervisor`, then waits until it is ready while the daemon moves it into
/// its controller cgroups and `cni` (a network and its request) is ADDed.
/// Returns the CNI result. `standby` (its uuid is `uuid`) is the sandbox
/// process to use, if the caller took one.
pub(crate) async fn boot(
    data: &DataDir,
    program: &Path,
    supervisor: Supervisor,
    uuid: Uuid,
    args: SandboxArgs,
    cni: Option<(&Network, CniRequest)>,
    standby: Option<launch::Standby>,
) -> Result<Option<CniResult>, BootError> {
    let cgroup_parent = args.cgroup_parent.clone().unwrap_or_default();
    // the boot's cgroup migrations wait for no RCU grace period each while
    // the lock is held warm
    crate::cgroup::warm::hold(crate::cgroup::warm::POD_START);
    let t0 = std::time::Instant::now();
    let micros = move || u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
    // the sandbox boots while CNI ADD runs in the netns made before
    let boot = async {
        let started = launch::start(program, data.root(), &args, supervisor, Some(&cgroup_parent), standby)
            .await
            .map_err(|e| BootError::failed(uuid, "starting sandbox", e))?;
        tracing::debug!(pod = %uuid, micros = micros(), "sandbox exec'd nspawn");
        let sandbox_pid = started.pid;
        let pod_dir = data.pod_parent(pod::PodDir::Run).join(uuid.to_string());
        let rootfs = pod_dir.join("stage1/rootfs");
        let ready = async {
            let r = match launch::wait_ready(rootfs, started.pidfd, started.notify, READY_TIMEOUT).await {
                Ok(fd) => Ok(fd),
                Err(e @ LaunchError::Timeout(_)) => Err(BootError::Timeout { uuid, source: e }),
                Err(LaunchError::Exited(_)) if supervisor == Supervisor::NodeSystemd => {
                    let cause = format!(": {}", launch::unit_failure(&uuid.to_string()).await);
                    Err(BootError::failed(uuid, "waiting for the pod", LaunchError::Exited(cause)))
                }
                Err(e) => Err(BootError::failed(uuid, "waiting for the pod", e)),
            };
            tracing::debug!(pod = %uuid, micros = micros(), "pod ready");
            if r.is_ok() && supervisor == Supervisor::Detached {
                // the next cold start's sandbox process, started while this pod is set up
                let (program, data) = (program.to_path_buf(), data.root().to_path_buf());
                tokio::spawn(async move { launch::keep_standby(&program, &data) });
            }
            if r.is_ok() {
                // appexec and the pod's cgroup v1 hierarchies, now rather
                // than in the first StartContainer (the masks of /proc that
                // only apps of the pod's PID namespace share wait for the
                // first of them: every other app's start would copy them
                // into its mount namespace and let go of them again)
                let data = data.clone();
                // directories for the first app, made while the pod is set up
                crate::stage1::spare::replenish_later(pod_dir.clone());
                let mounted = tokio::task::spawn_blocking(move || {
                    let pid1 = crate::stage1::inject::pod_pid1(sandbox_pid)?;
                    crate::stage1::api_vfs::hide_tun(pid1)?;
                    crate::stage1::appexec::ensure(&data, &pod_dir, pid1)?;
                    crate::stage1::cgroup_views::ensure(&pod_dir, pid1)
                })
                .await;
                match mounted {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(pod = %uuid, error = %e, "hiding the pod's /dev/net/tun, binding appexec or mounting its cgroup v1 hierarchies (appexec left to the first start, the hierarchies to each start)")
                    }
                    Err(e) => tracing::warn!(pod = %uuid, error = %e, "appexec task failed (left to the first start)"),
                }
            }
            r
        };
        let controllers = async {
            // a detached sandbox is placed in every hierarchy before nspawn
            // runs (no --defer-cgroup-controllers): the pod's cgroup namespace,
            // which nspawn unshares early, is rooted there, and a controller
            // added while the pod boots would lie outside that root in the
            // pod's view (`/../../...`, which CRIU refuses)
            let systemd_unit = supervisor == Supervisor::NodeSystemd;
            if !systemd_unit {
                return Ok(());
            }
            let parent = cgroup_parent.clone();
            tokio::task::spawn_blocking(move || crate::cgroup::pod::adopt_controllers(&parent, uuid, systemd_unit))
                .await
                .map_err(|e| BootError::failed(uuid, "cgroup worker", e))?
                .map_err(|e| BootError::failed(uuid, "moving the pod into its controller cgroups", e))
        };
        let (ready, controllers) = tokio::join!(ready, controllers);
        ready.and(controllers)
    };
    let added = async {
        let r = match cni {
            Some((net, request)) => {
                net.add(&request).await.map(Some).map_err(|e| BootError::failed(uuid, "CNI ADD", e))
            }
            None => Ok(None),
        };
        tracing::debug!(pod = %uuid, micros = micros(), "CNI ADD done");
        r
    };
    let (boot, added) = tokio::join!(boot, added);
    boot?;
    added
}
