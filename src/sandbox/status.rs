//! What PodSandboxStatus and PortForward read of a pod beyond its view
//! (`pod::table`): the verbose details, the network namespace of a ready pod.

use super::SandboxError;
use crate::container::stats::PodView;
use crate::runtime::Runtime;
use rkt::pod::{self, Pod, PodState};
use std::sync::Arc;

/// The pod's view (`pod::table`, kept warm by the verbs).
pub(crate) fn view(rt: &Runtime, id: &str) -> Result<Arc<PodView>, SandboxError> {
    Ok(rt.pods.view_of(&rt.manifests, id)?)
}

/// The verbose PodSandboxStatus details: where the pod's parts are, its
/// cgroup and its own limits.
pub(crate) fn verbose_info(rt: &Runtime, pod_view: &PodView) -> serde_json::Value {
    let view = &pod_view.sandbox;
    let p = &view.pod;
    serde_json::json!({
        "uuid": p.uuid().to_string(),
        "state": view.state.as_str(),
        "podDir": p.path(),
        "pid": pod_view.sandbox_pid,
        "subcgroup": pod_view.subcgroup,
        "subcgroupTracking": p.read_file(pod::TRACKING_SUBCGROUP_FILE).ok().flatten(),
        "sandboxLog": p.path().join(pod::SANDBOX_LOG_FILE),
        "netns": p.read_file(pod::NETNS_FILE).ok().flatten(),
        "hostname": view.manifest.annotation(rkt::schema::ANNOTATION_HOSTNAME),
        "podResources": super::resources::status_info(rt, p, &view.manifest),
    })
}

/// The network namespace of a ready pod (`None`: it uses the node's). Blocking.
pub(crate) fn running_netns(rt: &Runtime, id: &str) -> Result<Option<std::path::PathBuf>, SandboxError> {
    let mut p = Pod::open(&rt.data, id)?;
    if p.state()? != PodState::Running {
        return Err(SandboxError::FailedPrecondition(format!("pod {id} is not running")));
    }
    let manifest = rt.manifests.read(&p)?;
    if manifest.annotation(rkt::schema::ANNOTATION_NETWORK_MODE) == Some("node") {
        return Ok(None);
    }
    let netns = p.read_file(pod::NETNS_FILE)?;
    netns
        .map(|n| Some(std::path::PathBuf::from(n)))
        .ok_or_else(|| SandboxError::FailedPrecondition(format!("pod {id} has no network namespace")))
}
