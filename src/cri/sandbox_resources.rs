//! Pod-level resources in CRI's terms (`LinuxPodSandboxConfig.resources`
//! and `.overhead`, UpdatePodSandboxResources' fields): checked and
//! translated for `cgroup::pod_limits`. What is done with them is
//! `sandbox::resources`.

use super::{container_meta as meta, sandbox_error};
use crate::cgroup::pod_limits::{self, PodResources};
use crate::proto::v1 as cri;
use tonic::Status;

/// The pod-level resources of a request, checked.
pub(super) fn from_cri(
    resources: Option<&cri::LinuxContainerResources>,
    overhead: Option<&cri::LinuxContainerResources>,
    prefix: &str,
) -> Result<PodResources, Status> {
    for (what, r) in [("resources", resources), ("overhead", overhead)] {
        if let Some(r) = r {
            pod_limits::check_cri_numbers(
                &format!("{prefix}{what}"),
                r.memory_limit_in_bytes,
                r.cpu_shares,
                r.cpu_quota,
                r.cpu_period,
            )
            .map_err(|e| sandbox_error(e.into()))?;
        }
    }
    Ok(PodResources {
        resources: resources.map(meta::limits_from_cri).unwrap_or_default(),
        overhead: overhead.map(meta::limits_from_cri).unwrap_or_default(),
    })
}
