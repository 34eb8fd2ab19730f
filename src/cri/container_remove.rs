//! RemoveContainer: the container id, then `container::remove::remove`
//! (a container that is not there is removed already).

use super::container_error;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

pub(super) async fn remove_container(
    rt: &std::sync::Arc<Runtime>,
    req: cri::RemoveContainerRequest,
) -> Result<cri::RemoveContainerResponse, Status> {
    crate::container::remove::remove(rt, &req.container_id).await.map_err(container_error)?;
    Ok(cri::RemoveContainerResponse {})
}
