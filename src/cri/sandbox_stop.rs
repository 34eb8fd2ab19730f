//! StopPodSandbox and RemovePodSandbox. Both are idempotent: stopping a
//! stopped pod and removing a removed one succeed.

use super::pod_status;
use crate::pod::{Pod, PodError};
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use crate::stage1::stop;
use std::time::Duration;
use tonic::Status;

/// How long a pod's systemd gets to power off before everything is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

fn stop_error(e: stop::StopError) -> Status {
    match e {
        stop::StopError::Pod(p) => pod_status(p),
        e => Status::internal(e.to_string()),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, Status> + Send + 'static) -> Result<T, Status> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Status::internal(format!("worker failed: {e}")))?
}

pub async fn stop_pod_sandbox(
    rt: &Runtime,
    req: cri::StopPodSandboxRequest,
) -> Result<cri::StopPodSandboxResponse, Status> {
    if req.pod_sandbox_id.is_empty() {
        return Err(Status::invalid_argument("pod_sandbox_id is required"));
    }
    let data = rt.data.clone();
    blocking(move || {
        let mut pod = Pod::open(&data, &req.pod_sandbox_id).map_err(pod_status)?;
        stop::stop(&mut pod, STOP_GRACE).map_err(stop_error)?;
        stop::release(&pod).map_err(stop_error)
    })
    .await?;
    Ok(cri::StopPodSandboxResponse {})
}

pub async fn remove_pod_sandbox(
    rt: &Runtime,
    req: cri::RemovePodSandboxRequest,
) -> Result<cri::RemovePodSandboxResponse, Status> {
    if req.pod_sandbox_id.is_empty() {
        return Err(Status::invalid_argument("pod_sandbox_id is required"));
    }
    let data = rt.data.clone();
    blocking(move || match Pod::open(&data, &req.pod_sandbox_id) {
        Ok(pod) => stop::destroy(pod, STOP_GRACE).map_err(stop_error),
        // already gone: removal is idempotent
        Err(PodError::NotFound(_)) => Ok(()),
        Err(e) => Err(pod_status(e)),
    })
    .await?;
    Ok(cri::RemovePodSandboxResponse {})
}
