//! RunPodSandbox: the request checked and translated
//! (`sandbox::from_cri::checked_run_request`), then `sandbox::start::run`.

use super::sandbox_error;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

pub(crate) async fn run_pod_sandbox(
    rt: &Runtime,
    req: cri::RunPodSandboxRequest,
) -> Result<cri::RunPodSandboxResponse, Status> {
    let req = crate::sandbox::from_cri::checked_run_request(rt, req).map_err(sandbox_error)?;
    let uuid = crate::sandbox::start::run(rt, &req).await.map_err(sandbox_error)?;
    Ok(cri::RunPodSandboxResponse { pod_sandbox_id: uuid.to_string() })
}
