//! The usage of pods and their running containers, read from the host
//! without exec: cgroup files (`cgroup::stats`) and the app's writable
//! layer. The CPU rate is the one since the previous sample of the same
//! container or pod taken by this process (`Runtime::cpu_rates`).
//! ContainerStats and the pod stats verbs (`cri::stats`) and `rktlet stats`
//! are made from these.

use crate::base::time::now_nanos;
use crate::cgroup::Layout;
use crate::cgroup::stats::{StatDirs, Usage};
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use crate::stage1::app::AppPaths;
use rkt::pod::{Pod, PodError};
use rkt::schema::RuntimeApp;
use std::collections::HashMap;
use std::sync::Arc;

/// A pod as the read verbs show it, with its containers' statuses (the
/// pod table keeps them as CRI's).
pub(crate) type PodView = crate::pod::table::PodView<cri::ContainerStatus>;

/// Pods kubelet should see: CRI-made pods in `run/` (running or exited) and
/// in `exited-garbage/` (exited pods `rkt gc` marked: listed until removed).
pub(crate) fn list_views(rt: &Runtime) -> Result<Vec<Arc<PodView>>, PodError> {
    let views =
        rt.pods.views(&rt.manifests, |pods| Ok(pods.iter().filter(|(_, dir)| dir.is_listed()).copied().collect()))?;
    let mut out = Vec::with_capacity(views.len());
    for (uuid, view) in views {
        match view {
            Ok(v) if v.sandbox.manifest.is_kubernetes_pod() => out.push(v),
            Ok(_) => {}
            // removed between the listing and the read
            Err(PodError::NotFound(_)) => {}
            Err(e) => tracing::warn!(pod = %uuid, error = %e, "skipping unreadable pod"),
        }
    }
    Ok(out)
}

/// The ready pods whose id starts with `id_prefix` and that have every label of `labels`.
pub(crate) fn ready_pods(
    rt: &Runtime,
    id_prefix: &str,
    labels: &HashMap<String, String>,
) -> Result<Vec<Arc<PodView>>, PodError> {
    Ok(list_views(rt)?
        .into_iter()
        .filter(|v| v.sandbox.ready && v.sandbox.pod.uuid().to_string().starts_with(id_prefix))
        .filter(|v| labels.iter().all(|(k, val)| v.sandbox.manifest.user_labels.get(k) == Some(val)))
        .collect())
}

/// One reading of a cgroup's usage.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sample {
    /// When it was taken (ns since the epoch).
    pub at: i64,
    pub usage: Usage,
    /// CPU time per second since the previous sample (ns), if there was one.
    pub cpu_rate: Option<u64>,
}

fn sample(rt: &Runtime, key: &str, at: i64, usage: Usage) -> Sample {
    let cpu_rate = usage.cpu_ns.and_then(|ns| rt.cpu_rates.rate(key, at, ns));
    Sample { at, usage, cpu_rate }
}

/// The usage of app `app` of `pod` (its rate kept under `key`, the
/// container id) and its writable layer's bytes and inodes; `sub` is the
/// pod's cgroup.
pub(crate) fn app_sample(
    rt: &Runtime,
    pod: &Pod,
    app: &str,
    key: &str,
    sub: Option<&str>,
) -> (Sample, Option<(u64, u64)>) {
    let at = now_nanos();
    let usage = match (sub, Layout::cached()) {
        // CRI has no process count per container: pids.current is not read
        (Some(sub), Ok(layout)) => StatDirs { pids: None, ..StatDirs::of_app(layout, sub, app) }.read(),
        _ => Usage::default(),
    };
    let writable = AppPaths::new(pod, app).writable_usage();
    (sample(rt, key, at, usage), writable)
}

/// The usage of a pod's own cgroup (its rate kept under the pod's id).
pub(crate) fn pod_sample(rt: &Runtime, view: &PodView) -> Sample {
    let at = now_nanos();
    let usage = match (&view.subcgroup, Layout::cached()) {
        (Some(sub), Ok(layout)) => StatDirs::of(layout, sub).read(),
        _ => Usage::default(),
    };
    sample(rt, &view.sandbox.pod.uuid().to_string(), at, usage)
}

/// The running apps of a pod's view, with their statuses.
pub(crate) fn running_apps(view: &PodView) -> impl Iterator<Item = (&RuntimeApp, &cri::ContainerStatus)> {
    view.sandbox
        .manifest
        .apps
        .iter()
        .zip(&view.containers)
        .filter(|(_, s)| s.state == cri::ContainerState::ContainerRunning as i32)
}
