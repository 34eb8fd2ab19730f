//! Pod-level resources (`LinuxPodSandboxConfig.resources` and `.overhead`,
//! UpdatePodSandboxResources): translated for `cgroup::pod_limits`, which
//! decides and writes the pod's own limits, and recorded in the pod
//! manifest, where PodSandboxStatus (verbose) reads them and a restarted
//! daemon finds them.

use super::{container_meta as meta, pod_status};
use crate::cgroup::pod_limits::{self, PodLimitsError, PodResources};
use crate::pod::manifest::PodManifest;
use crate::pod::{Pod, PodState};
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

pub use crate::container::pod_resources::{POD_RESOURCES, pod_cgroup, recorded};

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
            .map_err(limits_status)?;
        }
    }
    Ok(PodResources {
        resources: resources.map(meta::limits_from_cri).unwrap_or_default(),
        overhead: overhead.map(meta::limits_from_cri).unwrap_or_default(),
    })
}

/// Records `res` in a manifest (nothing for a pod without pod-level resources).
pub(super) fn record(m: &mut PodManifest, res: &PodResources) -> Result<(), Status> {
    if res.is_empty() && m.annotation(POD_RESOURCES).is_none() {
        return Ok(());
    }
    let json = serde_json::to_string(res).map_err(|e| Status::internal(format!("encoding pod resources: {e}")))?;
    m.set_annotation(POD_RESOURCES, json);
    Ok(())
}

fn limits_status(e: PodLimitsError) -> Status {
    match e {
        PodLimitsError::Invalid(_) => Status::invalid_argument(e.to_string()),
        PodLimitsError::BelowUsage { .. } => Status::failed_precondition(e.to_string()),
        PodLimitsError::Write { .. } | PodLimitsError::Systemd { .. } => Status::internal(e.to_string()),
    }
}

/// Writes the limits `res` makes for the pod with the apps of `m` (blocking).
fn apply(rt: &Runtime, pod: &Pod, m: &PodManifest, res: &PodResources) -> Result<(), Status> {
    crate::container::pod_resources::apply(rt, pod, m, res).map_err(limits_status)
}

/// At RunPodSandbox, once the pod is in its cgroups: the recorded limits
/// written (blocking).
pub(super) fn apply_at_start(rt: &Runtime, uuid: uuid::Uuid) -> Result<(), Status> {
    let pod = Pod::open(&rt.data, &uuid.to_string()).map_err(pod_status)?;
    let m = pod.read_manifest().map_err(pod_status)?;
    match recorded(&m) {
        Some(res) if !res.is_empty() => apply(rt, &pod, &m, &res),
        _ => Ok(()),
    }
}

pub async fn update_pod_sandbox_resources(
    rt: &Runtime,
    req: cri::UpdatePodSandboxResourcesRequest,
) -> Result<cri::UpdatePodSandboxResourcesResponse, Status> {
    if req.pod_sandbox_id.is_empty() {
        return Err(Status::invalid_argument("pod_sandbox_id is required"));
    }
    let update = from_cri(req.resources.as_ref(), req.overhead.as_ref(), "")?;
    tokio::task::block_in_place(|| {
        let mut pod = Pod::open(&rt.data, &req.pod_sandbox_id).map_err(pod_status)?;
        if pod.state().map_err(pod_status)? != PodState::Running {
            return Err(Status::failed_precondition(format!("pod {} is not running", req.pod_sandbox_id)));
        }
        let _lock = pod.lock_manifest().map_err(pod_status)?;
        let mut m = pod.read_manifest().map_err(pod_status)?;
        let old = recorded(&m).unwrap_or_default();
        // kubelet sends both; a field left out keeps what was recorded
        let new = PodResources {
            resources: if req.resources.is_some() { update.resources } else { old.resources.clone() },
            overhead: if req.overhead.is_some() { update.overhead } else { old.overhead.clone() },
        };
        apply(rt, &pod, &m, &new)?;
        record(&mut m, &new)?;
        if let Err(e) = pod.write_manifest(&m) {
            // recorded and written go together: the old limits back
            if let Err(e) = apply(rt, &pod, &m, &old) {
                tracing::warn!(pod = %pod.uuid(), error = %e, "restoring the pod's limits");
            }
            return Err(pod_status(e));
        }
        tracing::info!(pod = %pod.uuid(), resources = ?new, "pod resources updated");
        Ok(cri::UpdatePodSandboxResourcesResponse {})
    })
}

/// The verbose PodSandboxStatus part: the recorded resources in CRI's terms
/// and what the pod's cgroup holds now.
pub(super) fn status_info(rt: &Runtime, pod: &Pod, m: &PodManifest) -> serde_json::Value {
    let res = recorded(m).unwrap_or_default();
    let cri_json = |l: &crate::cgroup::app::Limits| {
        let r = meta::limits_to_cri(l);
        serde_json::json!({
            "memoryLimitInBytes": r.memory_limit_in_bytes,
            "cpuShares": r.cpu_shares,
            "cpuQuota": r.cpu_quota,
            "cpuPeriod": r.cpu_period,
            "cpusetCpus": r.cpuset_cpus,
            "cpusetMems": r.cpuset_mems,
            "memorySwapLimitInBytes": r.memory_swap_limit_in_bytes,
        })
    };
    serde_json::json!({
        "resources": cri_json(&res.resources),
        "overhead": cri_json(&res.overhead),
        "podCgroup": pod_cgroup(rt, pod).map(|cg| cg.read()),
    })
}
