//! Pod-level resources (`LinuxPodSandboxConfig.resources` and `.overhead`,
//! UpdatePodSandboxResources): `cgroup::pod_limits` decides and writes the
//! pod's own limits; they are recorded in the pod manifest, where
//! PodSandboxStatus (verbose) reads them and a restarted daemon finds them.

use super::SandboxError;
use crate::cgroup::app::Limits;
use crate::cgroup::pod_limits::PodResources;
use crate::container::meta;
use crate::runtime::Runtime;
use rkt::pod::{Pod, PodState};
use rkt::schema::PodManifest;

pub(crate) use crate::container::pod_resources::{POD_RESOURCES, pod_cgroup, recorded};

/// Records `res` in a manifest (nothing for a pod without pod-level resources).
pub(crate) fn record(m: &mut PodManifest, res: &PodResources) -> Result<(), SandboxError> {
    if res.is_empty() && m.annotation(POD_RESOURCES).is_none() {
        return Ok(());
    }
    let json =
        serde_json::to_string(res).map_err(|e| SandboxError::Internal(format!("encoding pod resources: {e}")))?;
    m.set_annotation(POD_RESOURCES, json);
    Ok(())
}

/// Writes the limits `res` makes for the pod with the apps of `m` (blocking).
fn apply(rt: &Runtime, pod: &Pod, m: &PodManifest, res: &PodResources) -> Result<(), SandboxError> {
    Ok(crate::container::pod_resources::apply(rt, pod, m, res)?)
}

/// At RunPodSandbox, once the pod is in its cgroups: its own processes held
/// to their devices and the recorded limits written (blocking).
pub(crate) fn apply_at_start(rt: &Runtime, uuid: uuid::Uuid) -> Result<(), SandboxError> {
    let pod = Pod::open(&rt.data, &uuid.to_string())?;
    hold_own_devices(&pod)?;
    let m = pod.read_manifest()?;
    match recorded(&m) {
        Some(res) if !res.is_empty() => apply(rt, &pod, &m, &res),
        _ => Ok(()),
    }
}

/// The pod's own processes held to the devices they use (cgroup v1).
fn hold_own_devices(pod: &Pod) -> Result<(), SandboxError> {
    let internal = |e: &dyn std::fmt::Display| {
        SandboxError::Internal(format!("holding pod {}'s own processes to their devices: {e}", pod.uuid()))
    };
    let Some(subs) = pod.subcgroups().map_err(|e| internal(&e))? else { return Ok(()) };
    let layout = crate::cgroup::Layout::cached().map_err(|e| internal(&e))?;
    crate::cgroup::pod::hold_own_devices(layout, &subs).map_err(|e| internal(&e))
}

/// UpdatePodSandboxResources of running pod `id` (blocking): `resources`
/// and `overhead` replace those recorded, a `None` keeps what was
/// recorded; the limits are written, then recorded (the old ones written
/// back if the record fails).
pub(crate) fn update(
    rt: &Runtime,
    id: &str,
    resources: Option<Limits>,
    overhead: Option<Limits>,
) -> Result<(), SandboxError> {
    let mut pod = Pod::open(&rt.data, id)?;
    if pod.state()? != PodState::Running {
        return Err(SandboxError::FailedPrecondition(format!("pod {id} is not running")));
    }
    let _lock = pod.lock_manifest()?;
    let mut m = pod.read_manifest()?;
    let old = recorded(&m).unwrap_or_default();
    // kubelet sends both; a field left out keeps what was recorded
    let new = PodResources {
        resources: resources.unwrap_or_else(|| old.resources.clone()),
        overhead: overhead.unwrap_or_else(|| old.overhead.clone()),
    };
    apply(rt, &pod, &m, &new)?;
    record(&mut m, &new)?;
    if let Err(e) = pod.write_manifest(&m) {
        // recorded and written go together: the old limits back
        if let Err(e) = apply(rt, &pod, &m, &old) {
            tracing::warn!(pod = %pod.uuid(), error = %e, "restoring the pod's limits");
        }
        return Err(e.into());
    }
    tracing::info!(pod = %pod.uuid(), resources = ?new, "pod resources updated");
    Ok(())
}

/// The verbose PodSandboxStatus part: the recorded resources in CRI's terms
/// and what the pod's cgroup holds now.
pub(crate) fn status_info(rt: &Runtime, pod: &Pod, m: &PodManifest) -> serde_json::Value {
    let res = recorded(m).unwrap_or_default();
    let cri_json = |l: &Limits| {
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
