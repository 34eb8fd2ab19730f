//! UpdatePodSandboxResources: CRI's pod-level resources checked and
//! checked (`sandbox::from_cri::pod_resources`), then `sandbox::resources::update`.

use super::{container_meta as meta, sandbox_error};
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

pub(super) async fn update_pod_sandbox_resources(
    rt: &Runtime,
    req: cri::UpdatePodSandboxResourcesRequest,
) -> Result<cri::UpdatePodSandboxResourcesResponse, Status> {
    super::required(&req.pod_sandbox_id, "pod_sandbox_id")?;
    crate::sandbox::from_cri::pod_resources(req.resources.as_ref(), req.overhead.as_ref(), "")
        .map_err(sandbox_error)?;
    let resources = req.resources.as_ref().map(meta::limits_from_cri);
    let overhead = req.overhead.as_ref().map(meta::limits_from_cri);
    tokio::task::block_in_place(|| crate::sandbox::resources::update(rt, &req.pod_sandbox_id, resources, overhead))
        .map_err(sandbox_error)?;
    Ok(cri::UpdatePodSandboxResourcesResponse {})
}
