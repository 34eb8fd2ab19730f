//! RemovePodSandbox: the pod id, then `sandbox::stop::remove`.

use super::sandbox_error;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

pub(super) async fn remove_pod_sandbox(
    rt: &Runtime,
    req: cri::RemovePodSandboxRequest,
) -> Result<cri::RemovePodSandboxResponse, Status> {
    super::required(&req.pod_sandbox_id, "pod_sandbox_id")?;
    crate::sandbox::stop::remove(rt, &req.pod_sandbox_id).await.map_err(sandbox_error)?;
    Ok(cri::RemovePodSandboxResponse {})
}
