//! StopPodSandbox: the pod id, then `sandbox::stop::stop`.

use super::sandbox_error;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

pub async fn stop_pod_sandbox(
    rt: &Runtime,
    req: cri::StopPodSandboxRequest,
) -> Result<cri::StopPodSandboxResponse, Status> {
    if req.pod_sandbox_id.is_empty() {
        return Err(Status::invalid_argument("pod_sandbox_id is required"));
    }
    crate::sandbox::stop::stop(rt, &req.pod_sandbox_id).await.map_err(sandbox_error)?;
    Ok(cri::StopPodSandboxResponse {})
}
