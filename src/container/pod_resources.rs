//! The pod's own limits (`cgroup::pod_limits`) as its apps change: the
//! pod-level resources recorded in its manifest, written on the pod's
//! cgroup with the apps' limits counted.

use super::meta;
use crate::cgroup::pod_limits::{PodCgroupLimits, PodLimitsError, PodResources};
use crate::runtime::Runtime;
use rkt::pod::Pod;
use rkt::schema::PodManifest;

/// Pod annotation: the pod-level resources in force (`PodResources` as JSON).
pub(crate) const POD_RESOURCES: &str = "rktlet.io/pod-resources";

/// The pod-level resources recorded in a manifest.
pub(crate) fn recorded(m: &PodManifest) -> Option<PodResources> {
    m.annotation(POD_RESOURCES).and_then(|j| serde_json::from_str(j).ok())
}

/// The pod's cgroup, if it has one (a pod the CLI ran may not).
pub(crate) fn pod_cgroup(rt: &Runtime, pod: &Pod) -> Option<PodCgroupLimits> {
    let subs = pod.subcgroups().ok().flatten()?;
    let layout = crate::cgroup::Layout::cached().ok()?;
    let unit = (rt.cgroup_driver == crate::cgroup::Driver::Systemd)
        .then(|| crate::cgroup::pod::unit_name(&pod.uuid().to_string()));
    Some(PodCgroupLimits::new(layout, &subs, unit))
}

/// Writes the limits `res` makes for the pod with the apps of `m` (blocking).
pub(crate) fn apply(rt: &Runtime, pod: &Pod, m: &PodManifest, res: &PodResources) -> Result<(), PodLimitsError> {
    let Some(cg) = pod_cgroup(rt, pod) else { return Ok(()) };
    let apps: Vec<_> = m.apps.iter().map(meta::limits).collect();
    cg.apply(res.limits(&apps))
}

/// Before an app starts: the pod's limits again with it counted (an app
/// without a memory limit lifts the pod's, as kubelet's pod cgroup has none
/// then). Growing only, so the pod's cgroup goes before the app's. Blocking.
pub(crate) fn refresh_for_app(rt: &Runtime, pod: &Pod) -> Result<(), super::ContainerError> {
    let cached = rt.manifests.read(pod)?;
    if recorded(&cached).is_none_or(|r| r.is_empty()) {
        return Ok(());
    }
    // as UpdatePodSandboxResources: under `pod.lck`, from the manifest on disk
    let _lock = pod.lock_manifest()?;
    let m = pod.read_manifest()?;
    match recorded(&m) {
        Some(res) if !res.is_empty() => Ok(apply(rt, pod, &m, &res)?),
        _ => Ok(()),
    }
}
