//! ExecSync's domain half: the command run as a copy of the container's
//! main process (`stage1::exec`), waited for, its output kept up to a cap.
//! Also the main process a streaming exec copies.

use super::{ContainerError, Target, open};
use crate::runtime::Runtime;
use crate::stage1::exec::{self, AppProcess, ExecOutput};
use std::time::Duration;

/// Output kept per stream; the rest is read and dropped.
const OUTPUT_CAP: usize = 16 << 20;

/// The host pid of the app's own process, if it runs (past appexec, when
/// the app has a PID namespace of its own).
pub fn main_pid(t: &Target) -> Option<i32> {
    let cgroup = super::app_cgroup(&t.pod, &t.app.name)?;
    let sandbox = t.pod.sandbox_pid().ok()??;
    let pid1 = crate::stage1::inject::pod_pid1(sandbox).ok()?;
    // appexec says the app started as its exec closes a pipe, a moment before
    // the kernel has given the process its new name: an exec right after
    // StartContainer may have to wait that moment
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
pub fn running_app(rt: &Runtime, id: &str) -> Result<AppProcess, ContainerError> {
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
    let cgroups = own_cgroups(rt, t, id, pid)?;
    Ok(AppProcess { pid, profile, cgroups })
}

/// Held while an app is put back in its cgroups and while an app's limits
/// change (UpdateContainerResources): of two execs that find an app moved
/// out, one puts it back (the other then finds it in place), and none
/// writes limits an update is changing.
pub(super) static CGROUP_WRITES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The cgroups a command exec'd into the app joins on cgroup v1: those the
/// daemon made for it (`AppCgroup::exec_dirs`), not whatever its main
/// process `pid` is in now. The node's systemd, managing the v1 hierarchies
/// beside pods of the cgroupfs driver, moves their processes into its own
/// cgroups as it turns controllers on and off for its slices, and removes
/// the app's emptied cgroups: the app is put back first (its cgroups made
/// again with its limits as recorded now, and the pod's limits written
/// again, its cgroups having gone the same way). An app the daemon could
/// not give cgroups of its own and that needs none (no limits, no v1
/// devices cgroup) runs where it is, and so does the command. Empty on
/// cgroup v2 (the unit's cgroup, which the pod's systemd keeps, is the app's).
fn own_cgroups(rt: &Runtime, t: &Target, id: &str, pid: i32) -> Result<Vec<std::path::PathBuf>, ContainerError> {
    let Some(cg) = super::app_cgroup(&t.pod, &t.app.name).filter(|cg| cg.placement(&t.app.name).is_some()) else {
        return Ok(Vec::new());
    };
    let layout = crate::cgroup::Layout::cached().map_err(|e| ContainerError::Internal(format!("cgroups: {e}")))?;
    let now = || {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .map_err(|e| ContainerError::FailedPrecondition(format!("container {id} is not running: {e}")))
    };
    if cg.strays(layout, &now()?).is_empty() {
        return Ok(cg.exec_dirs());
    }
    let _held = CGROUP_WRITES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // put back meanwhile by another exec?
    let strays = cg.strays(layout, &now()?);
    if strays.is_empty() {
        return Ok(cg.exec_dirs());
    }
    let t = open(rt, id)?;
    let limits = super::meta::limits(&t.app);
    match cg.restore(&limits, &super::meta::allowed_devices(&t.app)) {
        Ok(()) => {
            let still = cg.strays(layout, &now()?);
            tracing::warn!(container = id, controllers = ?strays, still_out = ?still, "the app was out of its cgroups (moved by the node's systemd?): put back");
            if let Err(e) = super::pod_resources::refresh_for_app(rt, &t.pod) {
                tracing::warn!(container = id, error = %e, "writing its pod's limits again");
            }
            Ok(cg.exec_dirs())
        }
        Err(e) if !limits.in_cgroups() && !cg.holds_devices() => {
            tracing::debug!(container = id, error = %e, "no cgroups of its own: the command joins the app's");
            Ok(Vec::new())
        }
        Err(e) => Err(ContainerError::Internal(format!("putting container {id} back in its cgroups: {e}"))),
    }
}

/// Runs `cmd` in running container `id` and waits for it, killed after
/// `timeout_secs` (0: no timeout).
pub async fn exec_sync(
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
