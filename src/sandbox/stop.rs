//! StopPodSandbox and RemovePodSandbox. Both are idempotent: stopping a
//! stopped pod and removing a removed one succeed. The daemon's connection
//! to the pod's systemd is let go as the pod goes away.

use super::SandboxError;
use crate::runtime::Runtime;
use crate::stage1::teardown;
use rkt::pod::PodError;
use std::time::Duration;

/// How long a pod's systemd gets to power off before everything is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Drops the daemon's connection to a pod's systemd once the pod is going
/// away (the exit recorder keeps its own until the pod's systemd closes it).
fn forget_bus(rt: &Runtime, id: &str) {
    if let Ok(uuid) = rt.data.resolve(id) {
        rt.expect_pod_bus_close(uuid);
        rt.drop_pod_bus(uuid);
    }
}

/// Stops pod `id` (its systemd powered off, then everything killed after
/// [`STOP_GRACE`]); its bus closing is expected, then dropped.
pub(crate) async fn stop(rt: &Runtime, id: &str) -> Result<(), SandboxError> {
    if let Ok(uuid) = rt.data.resolve(id) {
        rt.expect_pod_bus_close(uuid);
    }
    teardown::stop_pod(&rt.data, id, STOP_GRACE, &rt.net_dirs()).await?;
    forget_bus(rt, id);
    rt.pods.warm(&rt.manifests, id);
    Ok(())
}

/// Removes pod `id` (stopped first); its directory is deleted after the
/// call. A pod that is not there is removed already.
pub(crate) async fn remove(rt: &Runtime, id: &str) -> Result<(), SandboxError> {
    forget_bus(rt, id);
    match teardown::remove_pod(&rt.data, id, STOP_GRACE, &rt.net_dirs(), teardown::Deletion::Later).await {
        Ok(()) => Ok(()),
        Err(e) => match e.pod_error() {
            // already gone: removal is idempotent
            Ok(PodError::NotFound(_) | PodError::InvalidId(_)) => Ok(()),
            Ok(p) => Err(SandboxError::Pod(p)),
            Err(e) => Err(SandboxError::Teardown(e)),
        },
    }
}
