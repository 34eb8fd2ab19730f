//! StopPodSandbox: the pod id, then `sandbox::stop::stop`.

use super::sandbox_error;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

pub(super) async fn stop_pod_sandbox(
    rt: &Runtime,
    req: cri::StopPodSandboxRequest,
) -> Result<cri::StopPodSandboxResponse, Status> {
    super::required(&req.pod_sandbox_id, "pod_sandbox_id")?;
    match crate::sandbox::stop::stop(rt, &req.pod_sandbox_id).await {
        // the CRI: stopping a pod that is gone is not an error (kubelet
        // retries stops after its restarts and the runtime's)
        Err(e) if e.kind() == crate::container::ErrorKind::NotFound => {
            tracing::debug!(pod = req.pod_sandbox_id, error = %e, "StopPodSandbox: already gone");
        }
        other => other.map_err(sandbox_error)?,
    }
    Ok(cri::StopPodSandboxResponse {})
}
