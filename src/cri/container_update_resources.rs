//! UpdateContainerResources: CRI's Linux resources as `cgroup::app::Limits`,
//! then `container::resources::update`.

use super::{container_error, container_meta as meta};
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

/// The limits a request asks for (`None`: it has no Linux resources).
pub(super) fn limits_asked(req: &cri::UpdateContainerResourcesRequest) -> Option<crate::cgroup::app::Limits> {
    req.linux.as_ref().map(meta::limits_from_cri)
}

pub(super) async fn update_container_resources(
    rt: &Runtime,
    req: cri::UpdateContainerResourcesRequest,
) -> Result<cri::UpdateContainerResourcesResponse, Status> {
    let update = limits_asked(&req);
    tokio::task::block_in_place(|| crate::container::resources::update(rt, &req.container_id, update))
        .map_err(container_error)?;
    Ok(cri::UpdateContainerResourcesResponse {})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_resources_as_limits() {
        let mut req = cri::UpdateContainerResourcesRequest { container_id: "p:a".into(), ..Default::default() };
        assert_eq!(limits_asked(&req), None);
        req.linux = Some(cri::LinuxContainerResources {
            memory_limit_in_bytes: 64 << 20,
            cpu_shares: 512,
            cpu_quota: 0,
            ..Default::default()
        });
        let l = limits_asked(&req).expect("limits");
        assert_eq!((l.memory_bytes, l.cpu_shares, l.cpu_quota_us), (Some(64 << 20), Some(512), None));
    }
}
