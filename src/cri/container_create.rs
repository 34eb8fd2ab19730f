//! CreateContainer: the request checked and decoded
//! (`container::from_cri::create_request`), then `container::create::create`.

use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

pub async fn create_container(
    rt: &Runtime,
    req: cri::CreateContainerRequest,
) -> Result<cri::CreateContainerResponse, Status> {
    let request = crate::container::from_cri::create_request(rt, &req)?;
    let container_id = crate::container::create::create(rt, request).await?;
    Ok(cri::CreateContainerResponse { container_id })
}
