//! RunPodSandbox's domain half: a pod from the pool when one fits
//! (`pool`), else one started cold (`run`), whose helpers the pool shares.

use super::SandboxError;
use super::run::Request;
use crate::runtime::Runtime;
use uuid::Uuid;

/// Runs the pod `req` asks for; its uuid.
pub(crate) async fn run(rt: &Runtime, req: &Request) -> Result<Uuid, SandboxError> {
    // from the request's start: the first cgroup migration (a pool pod's
    // move, a cold sandbox's placement) then waits less of the grace period
    crate::cgroup::warm::hold(crate::cgroup::warm::POD_START);
    if let Some(uuid) = super::pool::serve(rt, req).await {
        if let Err(e) = tokio::task::block_in_place(|| super::resources::apply_at_start(rt, uuid)) {
            super::run::cleanup(rt, uuid).await;
            return Err(e);
        }
        rt.pods.warm(&rt.manifests, &uuid.to_string());
        rt.connect_pod_bus_soon(uuid);
        return Ok(uuid);
    }
    let uuid = super::run::cold(rt, req).await?;
    // its first StartContainer then finds its systemd's connection made
    rt.connect_pod_bus_soon(uuid);
    Ok(uuid)
}
