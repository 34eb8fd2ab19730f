//! CRI container identity <-> rkt app: ids are `<pod uuid>:<app name>` (as
//! rktlet's), the app name is `<attempt>-<sanitized container name>`, and CRI
//! metadata rides in the app's user annotations and labels.

use crate::pod::manifest::RuntimeApp;
use crate::proto::v1 as cri;
use std::collections::HashMap;

pub const NAME: &str = "k8s.io/reserved/container-name";
pub const ATTEMPT: &str = "k8s.io/reserved/container-attempt";
pub const IMAGE: &str = "k8s.io/reserved/image-name";
pub const LOG_PATH: &str = "k8s.io/reserved/log-path";
/// `true` or `once` when the container has a stdin (CRI `stdin`, `stdin_once`).
pub const STDIN: &str = "k8s.io/reserved/stdin";
/// The app's cgroup limits (JSON of `cgroup::app::Limits`).
pub const RESOURCES: &str = "k8s.io/reserved/resources";
const RESERVED_PREFIX: &str = "k8s.io/reserved/";

pub fn app_name(meta: &cri::ContainerMetadata) -> String {
    format!("{}-{}", meta.attempt, crate::pod::manifest::sanitize_ac_name(&meta.name))
}

pub fn container_id(pod: &str, app: &str) -> String {
    format!("{pod}:{app}")
}

/// Splits a container id into pod id and app name.
pub fn split_id(id: &str) -> Option<(&str, &str)> {
    id.split_once(':').filter(|(p, a)| !p.is_empty() && !a.is_empty())
}

fn user_annotations(app: &RuntimeApp) -> HashMap<String, String> {
    app.app
        .as_ref()
        .map(|a| a.user_annotations.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

pub fn metadata(app: &RuntimeApp) -> cri::ContainerMetadata {
    let ann = user_annotations(app);
    cri::ContainerMetadata {
        name: ann.get(NAME).cloned().unwrap_or_else(|| app.name.clone()),
        attempt: ann.get(ATTEMPT).and_then(|a| a.parse().ok()).unwrap_or(0),
    }
}

pub fn image(app: &RuntimeApp) -> String {
    user_annotations(app).get(IMAGE).cloned().unwrap_or_else(|| app.image.name.clone().unwrap_or_default())
}

pub fn log_path(app: &RuntimeApp) -> String {
    user_annotations(app).get(LOG_PATH).cloned().unwrap_or_default()
}

/// Whether the container has a stdin, and whether it closes after the first attach.
pub fn stdin(app: &RuntimeApp) -> Option<StdinMode> {
    match user_annotations(app).get(STDIN).map(String::as_str) {
        Some("true") => Some(StdinMode::Open),
        Some("once") => Some(StdinMode::Once),
        _ => None,
    }
}

/// How a container's stdin behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdinMode {
    /// Open until the container exits; attach sessions come and go.
    Open,
    /// Closed when the first attach session with stdin ends (Kubernetes'
    /// `stdinOnce`).
    Once,
}

pub fn limits(app: &RuntimeApp) -> crate::cgroup::app::Limits {
    user_annotations(app).get(RESOURCES).and_then(|j| serde_json::from_str(j).ok()).unwrap_or_default()
}

/// CRI resources as cgroup v1 limits.
pub fn limits_from_cri(r: &cri::LinuxContainerResources) -> crate::cgroup::app::Limits {
    let pos = |v: i64| (v > 0).then_some(v);
    crate::cgroup::app::Limits {
        memory_bytes: pos(r.memory_limit_in_bytes),
        cpu_shares: u64::try_from(r.cpu_shares).ok().filter(|s| *s > 0),
        cpu_quota_us: pos(r.cpu_quota),
        cpu_period_us: u64::try_from(r.cpu_period).ok().filter(|p| *p > 0),
        pids: None,
    }
}

pub fn labels(app: &RuntimeApp) -> HashMap<String, String> {
    app.app.as_ref().map(|a| a.user_labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default()
}

pub fn annotations(app: &RuntimeApp) -> HashMap<String, String> {
    user_annotations(app).into_iter().filter(|(k, _)| !k.starts_with(RESERVED_PREFIX)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names() {
        assert_eq!(app_name(&cri::ContainerMetadata { name: "Web_Server".into(), attempt: 2 }), "2-web-server");
        assert_eq!(split_id("u-1:0-web"), Some(("u-1", "0-web")));
        assert_eq!(split_id("nocolon"), None);
        assert_eq!(split_id(":x"), None);
    }
}
