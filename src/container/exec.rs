//! ExecSync's domain half: the command run as a copy of the container's
//! main process (`stage1::exec`), waited for, its output kept up to a cap.
//! Also the main process a streaming exec copies.

use super::{ContainerError, Target, open};
use crate::runtime::Runtime;
use crate::stage1::exec::{self, AppProcess, ExecOutput};
use std::collections::HashSet;
use std::time::Duration;

/// Output kept per stream; the rest is read and dropped.
const OUTPUT_CAP: usize = 16 << 20;

/// The host pid of the app's own process, if it runs (past appexec, when
/// the app has a PID namespace of its own).
pub(crate) fn main_pid(t: &Target) -> Option<i32> {
    let cgroup = super::app_cgroup(&t.pod, &t.app.name)?;
    let sandbox = t.pod.sandbox_pid().ok()??;
    let pid1 = crate::stage1::inject::pod_pid1(sandbox).ok()?;
    // an exec right after StartContainer may find no app for a moment (a
    // process not yet in the app's root is never taken for it: `app_pid`)
    for _ in 0..50 {
        let procs = cgroup.unit_processes();
        let host_app = crate::stage1::app::host_app(&crate::stage1::app::AppPaths::new(&t.pod, &t.app.name));
        if let Some(pid) = crate::stage1::appexec::app_pid(pid1, &procs, host_app) {
            return Some(pid);
        }
        if procs.is_empty() {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    None
}

/// The main process of a running container as a command exec'd into it
/// copies it (for a streaming exec). Blocking.
pub(crate) fn running_app(rt: &Runtime, id: &str) -> Result<AppProcess, ContainerError> {
    let t = open(rt, id)?;
    if !t.running {
        return Err(ContainerError::FailedPrecondition(format!("pod of container {id} is not running")));
    }
    app_process(rt, &t, id)
}

/// The app's main process and the seccomp profile it was started with.
fn app_process(rt: &Runtime, t: &Target, id: &str) -> Result<AppProcess, ContainerError> {
    let isolators = t.app.app.as_ref().map(|a| a.isolators.as_slice()).unwrap_or_default();
    let profile = crate::stage1::seccomp::profile_of(isolators)
        .map_err(|e| ContainerError::Internal(format!("the seccomp isolator of container {id}: {e}")))?;
    let pid =
        main_pid(t).ok_or_else(|| ContainerError::FailedPrecondition(format!("container {id} is not running")))?;
    tracing::debug!(container = id, pid, "exec: a copy of the app's process");
    let cgroups = own_cgroups(rt, t, id, pid)?;
    Ok(AppProcess { pid, profile, cgroups })
}

/// The cgroups a command exec'd into the app joins on cgroup v1: those the
/// daemon made for it (`AppCgroup::exec_dirs`), not whatever its main
/// process `pid` is in now; the app is put back in them first if it was
/// moved out ([`put_back`]). An app the daemon could not give cgroups of
/// its own and that needs none (no limits, no v1 devices cgroup) runs where
/// it is, and so does the command. Empty on cgroup v2 (the unit's cgroup,
/// which the pod's systemd keeps, is the app's).
fn own_cgroups(rt: &Runtime, t: &Target, id: &str, pid: i32) -> Result<Vec<std::path::PathBuf>, ContainerError> {
    let Some(cg) = super::app_cgroup(&t.pod, &t.app.name).filter(|cg| cg.placement(&t.app.name).is_some()) else {
        return Ok(Vec::new());
    };
    match put_back(rt, &cg, id, pid) {
        Ok(_) => Ok(cg.exec_dirs()),
        Err(NotPutBack { error, needs_own: false }) => {
            tracing::debug!(container = id, error = %error, "no cgroups of its own: the command joins the app's");
            Ok(Vec::new())
        }
        Err(NotPutBack { error, .. }) => Err(error),
    }
}

/// Why [`put_back`] could not put an app back.
pub(super) struct NotPutBack {
    pub error: ContainerError,
    /// Whether the app has limits or a device list only its own cgroups hold.
    pub needs_own: bool,
}

/// Puts app `id` back in its v1 cgroups `cg` when its process `pid` is out
/// of them or they are gone. The node's systemd, managing the v1
/// hierarchies beside pods of the cgroupfs driver, moves their processes
/// into its own cgroups as it turns controllers on and off for its slices,
/// and removes the emptied ones (docs/kubelet.md): they are made again with
/// the app's limits as recorded now, the unit's processes moved back in,
/// and the pod's limits written again, its cgroups having gone the same
/// way. The controllers it was out of; none when it was in place.
pub(super) fn put_back(
    rt: &Runtime,
    cg: &crate::cgroup::app::AppCgroup,
    id: &str,
    pid: i32,
) -> Result<Vec<&'static str>, NotPutBack> {
    let fail = |error| NotPutBack { error, needs_own: true };
    let layout =
        crate::cgroup::Layout::cached().map_err(|e| fail(ContainerError::Internal(format!("cgroups: {e}"))))?;
    let now = || {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .map_err(|e| fail(ContainerError::FailedPrecondition(format!("container {id} is not running: {e}"))))
    };
    if cg.strays(layout, &now()?).is_empty() {
        return Ok(Vec::new());
    }
    let _held = crate::cgroup::writes();
    // put back meanwhile by another exec or the periodic check?
    let strays = cg.strays(layout, &now()?);
    if strays.is_empty() {
        return Ok(Vec::new());
    }
    let t = open(rt, id).map_err(fail)?;
    if !t.running {
        // (its pod stopped meanwhile: its cgroups go with it)
        return Ok(Vec::new());
    }
    let limits = super::meta::limits(&t.app);
    match cg.restore(&limits, &super::meta::allowed_devices(&t.app)) {
        Ok(()) => {
            let still = cg.strays(layout, &now()?);
            tracing::warn!(container = id, controllers = ?strays, still_out = ?still, "the app was out of its cgroups (moved by the node's systemd?): put back");
            if let Err(e) = super::pod_resources::refresh_for_app(rt, &t.pod) {
                tracing::warn!(container = id, error = %e, "writing its pod's limits again");
            }
            Ok(strays)
        }
        Err(e) => Err(NotPutBack {
            error: ContainerError::Internal(format!("putting container {id} back in its cgroups: {e}")),
            needs_own: limits.in_cgroups() || cg.holds_devices(),
        }),
    }
}

/// Every running app of the node found out of its v1 cgroups put back
/// ([`put_back`]), as an exec into it would, for the apps no exec reaches
/// (a pod without exec probes): the daemon runs this every
/// [`strays_period`] where apps have v1 cgroups. A failure is warned of
/// once: `failing` holds the containers that could not be put back last
/// time, and is left holding those of this time. How many were put back.
pub(crate) fn put_back_strays(rt: &Runtime, failing: &mut HashSet<String>) -> usize {
    let before = std::mem::take(failing);
    let views = match super::stats::list_views(rt) {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!(error = %e, "no pods read for the cgroup check");
            return 0;
        }
    };
    let mut back = 0;
    for view in &views {
        let uuid = view.sandbox.pod.uuid().to_string();
        for (app, _) in super::stats::running_apps(view) {
            let Some(cg) =
                super::app_cgroup(&view.sandbox.pod, &app.name).filter(|cg| cg.placement(&app.name).is_some())
            else {
                continue;
            };
            // any of the unit's processes: the node's systemd moves them all
            let Some(pid) = cg.unit_processes().first().copied() else { continue };
            let id = super::meta::container_id(&uuid, &app.name);
            match put_back(rt, &cg, &id, pid) {
                Ok(strays) if !strays.is_empty() => back += 1,
                Ok(_) => {}
                // an app let run without cgroups of its own (it needs none),
                // or one that ended meanwhile
                Err(NotPutBack { error, needs_own })
                    if !needs_own || error.kind() == super::ErrorKind::FailedPrecondition =>
                {
                    tracing::debug!(container = id, error = %error, "not put back in its cgroups")
                }
                // said once while it lasts, not every period
                Err(NotPutBack { error, .. }) => {
                    if before.contains(&id) {
                        tracing::debug!(container = id, error = %error, "still out of its cgroups");
                    } else {
                        tracing::warn!(container = id, error = %error, "the app is out of its cgroups and cannot be put back");
                    }
                    failing.insert(id);
                }
            }
        }
    }
    back
}

/// `RKTLET_CGROUP_CHECK` in the daemon's environment: seconds between two
/// [`put_back_strays`] (`0`: never).
pub(crate) const STRAYS_PERIOD_ENV: &str = "RKTLET_CGROUP_CHECK";

/// How often the daemon looks for apps out of their cgroups: every 10 s
/// (kubelet's housekeeping period), or what [`STRAYS_PERIOD_ENV`] says;
/// `None`: never.
pub(crate) fn strays_period() -> Option<Duration> {
    match std::env::var(STRAYS_PERIOD_ENV).ok().map(|v| v.trim().parse::<u64>()) {
        None => Some(Duration::from_secs(10)),
        Some(Ok(0)) => None,
        Some(Ok(secs)) => Some(Duration::from_secs(secs)),
        Some(Err(_)) => {
            tracing::warn!("{STRAYS_PERIOD_ENV} is not a number of seconds: checking every 10 s");
            Some(Duration::from_secs(10))
        }
    }
}

/// Runs `cmd` in running container `id` and waits for it, killed after
/// `timeout_secs` (0: no timeout).
pub(crate) async fn exec_sync(
    rt: &Runtime,
    id: &str,
    cmd: Vec<String>,
    timeout_secs: i64,
) -> Result<ExecOutput, ContainerError> {
    if cmd.is_empty() {
        return Err(ContainerError::InvalidArgument("cmd is required".into()));
    }
    if timeout_secs < 0 {
        return Err(ContainerError::InvalidArgument(format!("timeout {timeout_secs} is negative")));
    }
    let t = open(rt, id)?;
    let id = id.to_string();
    if !t.running {
        return Err(ContainerError::FailedPrecondition(format!("pod of container {id} is not running")));
    }
    let timeout = (timeout_secs > 0).then(|| Duration::from_secs(timeout_secs as u64));
    let app = tokio::task::block_in_place(|| app_process(rt, &t, &id))?;
    tokio::task::spawn_blocking(move || {
        let out = exec::run(&app, &cmd, timeout, OUTPUT_CAP)
            .map_err(|source| ContainerError::Exec { id: id.clone(), source })?;
        if out.truncated {
            // as containerd: an answer cut short would read as the whole
            // output (a probe's, which kubelet shows and may parse)
            return Err(ContainerError::ResourceExhausted(format!(
                "the output of {:?} in container {id} passed the {} MiB ExecSync keeps per stream \
                 (exit code {}); use Exec to stream more",
                cmd.join(" "),
                OUTPUT_CAP >> 20,
                out.exit_code
            )));
        }
        Ok(out)
    })
    .await
    .map_err(|e| ContainerError::Internal(format!("exec task: {e}")))?
}
