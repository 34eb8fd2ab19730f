//! CheckpointContainer: the id, location and timeout checked, then
//! `container::checkpoint::checkpoint`.

use super::container_error;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use std::time::Duration;
use tonic::Status;

pub(super) async fn checkpoint_container(
    rt: &Runtime,
    req: cri::CheckpointContainerRequest,
) -> Result<cri::CheckpointContainerResponse, Status> {
    super::required(&req.container_id, "container_id")?;
    if req.location.is_empty() {
        return Err(Status::invalid_argument("location is required (the archive to write)"));
    }
    // (seconds; none given: no limit)
    let timeout = u64::try_from(req.timeout).ok().filter(|t| *t > 0).map(Duration::from_secs);
    crate::container::checkpoint::checkpoint(rt, &req.container_id, std::path::Path::new(&req.location), timeout)
        .await
        .map_err(container_error)?;
    Ok(cri::CheckpointContainerResponse {})
}
