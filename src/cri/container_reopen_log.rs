//! ReopenContainerLog: the container id, then `container::log::reopen`.

use super::container_error;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

pub(super) async fn reopen_container_log(
    rt: &Runtime,
    req: cri::ReopenContainerLogRequest,
) -> Result<cri::ReopenContainerLogResponse, Status> {
    crate::container::log::reopen(rt, &req.container_id).map_err(container_error)?;
    Ok(cri::ReopenContainerLogResponse {})
}
