//! StopPodSandbox and RemovePodSandbox. Both are idempotent: stopping a
//! stopped pod and removing a removed one succeed.

use super::pod_status;
use crate::pod::PodError;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use crate::stage1::teardown::{self, TeardownError};
use std::time::Duration;
use tonic::Status;

/// How long a pod's systemd gets to power off before everything is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

fn teardown_status(e: TeardownError) -> Status {
    match e.pod_error() {
        Ok(p) => pod_status(p),
        Err(e) => Status::internal(e.to_string()),
    }
}

/// Drops the daemon's connection to a pod's systemd once the pod is going
/// away (the exit recorder keeps its own until the pod's systemd closes it).
fn forget_bus(rt: &Runtime, id: &str) {
    if let Ok(uuid) = rt.data.resolve(id) {
        rt.expect_pod_bus_close(uuid);
        rt.drop_pod_bus(uuid);
    }
}

pub async fn stop_pod_sandbox(
    rt: &Runtime,
    req: cri::StopPodSandboxRequest,
) -> Result<cri::StopPodSandboxResponse, Status> {
    if req.pod_sandbox_id.is_empty() {
        return Err(Status::invalid_argument("pod_sandbox_id is required"));
    }
    if let Ok(uuid) = rt.data.resolve(&req.pod_sandbox_id) {
        rt.expect_pod_bus_close(uuid);
    }
    teardown::stop_pod(&rt.data, &req.pod_sandbox_id, STOP_GRACE, &rt.net_dirs()).await.map_err(teardown_status)?;
    forget_bus(rt, &req.pod_sandbox_id);
    rt.pods.warm(&rt.manifests, &req.pod_sandbox_id);
    Ok(cri::StopPodSandboxResponse {})
}

pub async fn remove_pod_sandbox(
    rt: &Runtime,
    req: cri::RemovePodSandboxRequest,
) -> Result<cri::RemovePodSandboxResponse, Status> {
    if req.pod_sandbox_id.is_empty() {
        return Err(Status::invalid_argument("pod_sandbox_id is required"));
    }
    forget_bus(rt, &req.pod_sandbox_id);
    match teardown::remove_pod(&rt.data, &req.pod_sandbox_id, STOP_GRACE, &rt.net_dirs(), teardown::Deletion::Later)
        .await
    {
        Ok(()) => Ok(cri::RemovePodSandboxResponse {}),
        Err(e) => match e.pod_error() {
            // already gone: removal is idempotent
            Ok(PodError::NotFound(_) | PodError::InvalidId(_)) => Ok(cri::RemovePodSandboxResponse {}),
            Ok(p) => Err(pod_status(p)),
            Err(e) => Err(Status::internal(e.to_string())),
        },
    }
}
