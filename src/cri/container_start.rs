//! StartContainer: the container id, then `container::start::start`.

use super::container_error;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

pub(crate) async fn start_container(
    rt: &std::sync::Arc<Runtime>,
    req: cri::StartContainerRequest,
) -> Result<cri::StartContainerResponse, Status> {
    crate::container::start::start(rt, &req.container_id).await.map_err(container_error)?;
    Ok(cri::StartContainerResponse {})
}
