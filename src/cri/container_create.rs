//! CreateContainer: the request checked and decoded
//! (`container::from_cri::create_request`), then `container::create::create`,
//! or `container::restore::create` for an image that is a checkpoint archive.

use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

pub(crate) async fn create_container(
    rt: &std::sync::Arc<Runtime>,
    req: cri::CreateContainerRequest,
) -> Result<cri::CreateContainerResponse, Status> {
    let request = crate::container::from_cri::create_request(rt, &req)?;
    // an image that is a path: a checkpoint archive to restore (CRI-O's way)
    let container_id = if crate::container::restore::is_archive(&request.image) {
        crate::container::restore::create(rt, request).await?
    } else {
        crate::container::create::create(rt, request).await?
    };
    Ok(cri::CreateContainerResponse { container_id })
}
