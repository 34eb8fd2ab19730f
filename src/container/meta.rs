//! CRI container identity <-> rkt app: ids are `<pod uuid>:<app name>` (as
//! rktlet's), the app name is `<attempt>-<sanitized container name>`, and CRI
//! metadata rides in the app's user annotations and labels.

use crate::proto::v1 as cri;
use rkt::schema::RuntimeApp;
use std::collections::HashMap;

pub(crate) const NAME: &str = "k8s.io/reserved/container-name";
pub(crate) const ATTEMPT: &str = "k8s.io/reserved/container-attempt";
pub(crate) const IMAGE: &str = "k8s.io/reserved/image-name";
/// The image's content id (`image::Image::content_id`), the CRI's image id.
pub(crate) const IMAGE_ID: &str = "k8s.io/reserved/image-id";
pub(crate) const LOG_PATH: &str = "k8s.io/reserved/log-path";
/// `true` or `once` when the container has a stdin (CRI `stdin`, `stdin_once`).
pub(crate) const STDIN: &str = "k8s.io/reserved/stdin";
/// `true` when the container runs on a terminal (CRI `tty`).
pub(crate) const TTY: &str = "k8s.io/reserved/tty";
/// The app's cgroup limits (JSON of `cgroup::app::Limits`).
pub(crate) const RESOURCES: &str = "k8s.io/reserved/resources";
/// The container's devices (JSON list of [`Device`]).
pub(crate) const DEVICES: &str = "k8s.io/reserved/devices";
/// `true` for a privileged container: it may open every device of the node.
pub(crate) const PRIVILEGED: &str = "k8s.io/reserved/privileged";
/// The signal that stops the container (a name such as `SIGQUIT`), when not SIGTERM.
pub(crate) const STOP_SIGNAL: &str = "k8s.io/reserved/stop-signal";
/// The container's PID namespace when not the pod's: `container` (its own),
/// `target:<app>` (that of another app of the pod) or `host` (the node's,
/// in a host-PID pod).
pub(crate) const PID_NAMESPACE: &str = "k8s.io/reserved/pid-namespace";
/// The container's masked and read-only paths (JSON lists; none for a
/// privileged container).
pub(crate) const MASKED_PATHS: &str = "k8s.io/reserved/masked-paths";
pub(crate) const READONLY_PATHS: &str = "k8s.io/reserved/readonly-paths";
/// The AppArmor profile the container runs under (none: unconfined).
pub(crate) const APPARMOR: &str = "k8s.io/reserved/apparmor";
/// A container restored from a checkpoint: where CRIU's images are, in the pod.
pub(crate) const RESTORE: &str = "k8s.io/reserved/restore-images";
pub(crate) const RESERVED_PREFIX: &str = "k8s.io/reserved/";

/// Where the CRIU images of a container created from a checkpoint are
/// (its start restores them rather than exec'ing its command).
pub(crate) fn restore_images(app: &RuntimeApp) -> Option<String> {
    user_annotations(app).get(RESTORE).cloned()
}

/// The PID namespace a container asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PidNamespace {
    /// The pod's, with its systemd as PID 1 (CRI `POD`).
    Pod,
    /// Its own (CRI `CONTAINER`, kubelet's default).
    Container,
    /// That of another app of the pod (CRI `TARGET`).
    Target(String),
    /// The node's (an app of a host-PID pod).
    Host,
}

pub(crate) fn pid_namespace(app: &RuntimeApp) -> PidNamespace {
    match user_annotations(app).get(PID_NAMESPACE).map(String::as_str) {
        Some("container") => PidNamespace::Container,
        Some("host") => PidNamespace::Host,
        Some(v) => v.strip_prefix("target:").map_or(PidNamespace::Pod, |a| PidNamespace::Target(a.to_string())),
        None => PidNamespace::Pod,
    }
}

#[cfg(test)]
pub(crate) fn app_name(meta: &cri::ContainerMetadata) -> String {
    app_name_of(&meta.name, meta.attempt)
}

/// The app name of attempt `attempt` of container `name`.
pub(crate) fn app_name_of(name: &str, attempt: u32) -> String {
    format!("{attempt}-{}", rkt::schema::sanitize_ac_name(name))
}

pub(crate) fn container_id(pod: &str, app: &str) -> String {
    format!("{pod}:{app}")
}

/// Splits a container id into pod id and app name.
pub(crate) fn split_id(id: &str) -> Option<(&str, &str)> {
    id.split_once(':').filter(|(p, a)| !p.is_empty() && !a.is_empty())
}

fn user_annotations(app: &RuntimeApp) -> HashMap<String, String> {
    app.app
        .as_ref()
        .map(|a| a.user_annotations.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

pub(crate) fn metadata(app: &RuntimeApp) -> cri::ContainerMetadata {
    let ann = user_annotations(app);
    cri::ContainerMetadata {
        name: ann.get(NAME).cloned().unwrap_or_else(|| app.name.clone()),
        attempt: ann.get(ATTEMPT).and_then(|a| a.parse().ok()).unwrap_or(0),
    }
}

pub(crate) fn image(app: &RuntimeApp) -> String {
    user_annotations(app).get(IMAGE).cloned().unwrap_or_else(|| app.image.name.clone().unwrap_or_default())
}

/// The CRI id of the container's image: its content id, recorded at
/// CreateContainer; for an app created otherwise (rkt, an older rktlet) its
/// image's key.
pub(crate) fn image_id(app: &RuntimeApp) -> String {
    user_annotations(app).get(IMAGE_ID).cloned().unwrap_or_else(|| app.image.id.clone())
}

pub(crate) fn log_path(app: &RuntimeApp) -> String {
    user_annotations(app).get(LOG_PATH).cloned().unwrap_or_default()
}

/// Whether the container has a stdin, and whether it closes after the first attach.
pub(crate) fn stdin(app: &RuntimeApp) -> Option<StdinMode> {
    match user_annotations(app).get(STDIN).map(String::as_str) {
        Some("true") => Some(StdinMode::Open),
        Some("once") => Some(StdinMode::Once),
        _ => None,
    }
}

/// Whether the container runs on a terminal.
pub(crate) fn tty(app: &RuntimeApp) -> bool {
    user_annotations(app).get(TTY).is_some_and(|v| v == "true")
}

/// How a container's stdin behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StdinMode {
    /// Open until the container exits; attach sessions come and go.
    Open,
    /// Closed when the first attach session with stdin ends (Kubernetes'
    /// `stdinOnce`).
    Once,
}

/// A signal as CRI, the image config (`SIGQUIT`, `QUIT` or `3`) or a unit
/// file writes it: its number and its CRI name.
pub(crate) fn parse_signal(s: &str) -> Option<(i32, cri::Signal)> {
    let s = s.trim();
    let sig = match s.parse::<i32>() {
        Ok(n) => nix::sys::signal::Signal::try_from(n).ok()?,
        Err(_) => {
            let upper = s.to_ascii_uppercase();
            let name = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
            name.parse::<nix::sys::signal::Signal>().ok()?
        }
    };
    Some((sig as i32, cri::Signal::from_str_name(sig.as_str()).unwrap_or(cri::Signal::RuntimeDefault)))
}

/// The signal that stops the container: its number and CRI name (SIGTERM unless asked otherwise).
pub(crate) fn stop_signal(app: &RuntimeApp) -> (i32, cri::Signal) {
    user_annotations(app)
        .get(STOP_SIGNAL)
        .and_then(|s| parse_signal(s))
        .unwrap_or((libc::SIGTERM, cri::Signal::Sigterm))
}

/// A host device given to a container, as found at CreateContainer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Device {
    /// Where the container sees it.
    pub path: String,
    /// `c` or `b`.
    pub kind: char,
    pub major: u64,
    pub minor: u64,
    /// CRI's `rwm` letters.
    pub permissions: String,
    /// The node's permission bits, for a node device a privileged container
    /// gets (the letters give every user `r`/`w` of a device asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

impl Device {
    /// The CRI device: `host_path` must be a character or block device.
    pub(crate) fn from_cri(d: &cri::Device) -> Result<Device, String> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        if !d.container_path.starts_with('/') || d.container_path.split('/').any(|c| c == "..") {
            return Err(format!("device container_path {:?} must be absolute, without \"..\"", d.container_path));
        }
        if let Some(bad) = d.permissions.chars().find(|c| !"rwm".contains(*c)) {
            return Err(format!("device permissions {:?}: {bad:?} is not one of r, w, m", d.permissions));
        }
        let meta = std::fs::metadata(&d.host_path).map_err(|e| format!("device {}: {e}", d.host_path))?;
        let kind = match meta.file_type() {
            t if t.is_char_device() => 'c',
            t if t.is_block_device() => 'b',
            _ => return Err(format!("{} is not a device", d.host_path)),
        };
        let rdev = meta.rdev();
        Ok(Device {
            path: d.container_path.clone(),
            kind,
            major: nix::sys::stat::major(rdev),
            minor: nix::sys::stat::minor(rdev),
            permissions: if d.permissions.is_empty() { "rwm".into() } else { d.permissions.clone() },
            mode: None,
        })
    }
}

/// The masked and read-only paths, when the container has them.
pub(crate) fn path_lists(app: &RuntimeApp) -> (Option<Vec<String>>, Option<Vec<String>>) {
    let ann = user_annotations(app);
    let list = |key: &str| ann.get(key).and_then(|j| serde_json::from_str(j).ok());
    (list(MASKED_PATHS), list(READONLY_PATHS))
}

pub(crate) fn apparmor(app: &RuntimeApp) -> Option<String> {
    user_annotations(app).get(APPARMOR).cloned()
}

pub(crate) fn devices(app: &RuntimeApp) -> Vec<Device> {
    user_annotations(app).get(DEVICES).and_then(|j| serde_json::from_str(j).ok()).unwrap_or_default()
}

/// Whether the container is privileged.
pub(crate) fn privileged(app: &RuntimeApp) -> bool {
    user_annotations(app).get(PRIVILEGED).is_some_and(|v| v == "true")
}

/// The device nodes the kernel lets the container open and make: the
/// default list plus its devices, or everything when privileged.
pub(crate) fn allowed_devices(app: &RuntimeApp) -> crate::cgroup::devices::Allowed {
    let privileged = privileged(app);
    let devices = devices(app);
    crate::cgroup::devices::Allowed::for_container(
        privileged,
        devices.iter().map(|d| (d.kind, d.major, d.minor, d.permissions.as_str())),
    )
}

pub(crate) fn limits(app: &RuntimeApp) -> crate::cgroup::app::Limits {
    user_annotations(app).get(RESOURCES).and_then(|j| serde_json::from_str(j).ok()).unwrap_or_default()
}

/// CRI resources as cgroup v1 limits.
pub(crate) fn limits_from_cri(r: &cri::LinuxContainerResources) -> crate::cgroup::app::Limits {
    let pos = |v: i64| (v > 0).then_some(v);
    crate::cgroup::app::Limits {
        memory_bytes: pos(r.memory_limit_in_bytes),
        cpu_shares: u64::try_from(r.cpu_shares).ok().filter(|s| *s > 0),
        cpu_quota_us: pos(r.cpu_quota),
        cpu_period_us: u64::try_from(r.cpu_period).ok().filter(|p| *p > 0),
        pids: None,
        memory_swap_bytes: (r.memory_swap_limit_in_bytes != 0).then_some(r.memory_swap_limit_in_bytes),
        cpuset_cpus: Some(r.cpuset_cpus.clone()).filter(|c| !c.is_empty()),
        cpuset_mems: Some(r.cpuset_mems.clone()).filter(|c| !c.is_empty()),
        hugepages: r.hugepage_limits.iter().map(|h| (h.page_size.clone(), h.limit)).collect(),
        unified: r.unified.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        oom_score_adj: (r.oom_score_adj != 0).then_some(r.oom_score_adj),
    }
}

/// The resources a container runs with, as ContainerStatus reports them.
pub(crate) fn resources(app: &RuntimeApp) -> Option<cri::ContainerResources> {
    let l = limits(app);
    if l.is_empty() {
        return None;
    }
    Some(cri::ContainerResources { linux: Some(limits_to_cri(&l)), ..Default::default() })
}

/// Limits as CRI's resources (0 and empty where none is set).
pub(crate) fn limits_to_cri(l: &crate::cgroup::app::Limits) -> cri::LinuxContainerResources {
    cri::LinuxContainerResources {
        cpu_period: l.cpu_period_us.and_then(|v| i64::try_from(v).ok()).unwrap_or(0),
        cpu_quota: l.cpu_quota_us.unwrap_or(0),
        cpu_shares: l.cpu_shares.and_then(|v| i64::try_from(v).ok()).unwrap_or(0),
        memory_limit_in_bytes: l.memory_bytes.unwrap_or(0),
        oom_score_adj: l.oom_score_adj.unwrap_or(0),
        memory_swap_limit_in_bytes: l.memory_swap_bytes.unwrap_or(0),
        cpuset_cpus: l.cpuset_cpus.clone().unwrap_or_default(),
        cpuset_mems: l.cpuset_mems.clone().unwrap_or_default(),
        hugepage_limits: l
            .hugepages
            .iter()
            .map(|(size, limit)| cri::HugepageLimit { page_size: size.clone(), limit: *limit })
            .collect(),
        unified: l.unified.clone().into_iter().collect(),
    }
}

pub(crate) fn labels(app: &RuntimeApp) -> HashMap<String, String> {
    app.app.as_ref().map(|a| a.user_labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default()
}

pub(crate) fn annotations(app: &RuntimeApp) -> HashMap<String, String> {
    user_annotations(app).into_iter().filter(|(k, _)| !k.starts_with(RESERVED_PREFIX)).collect()
}

/// The isolators older builds kept masked and read-only paths in (read
/// from their manifests; appc does not know them, see `path_annotations` of CreateContainer).
pub(crate) const ISOLATOR_MASKED: &str = "rktlet.io/masked-paths";
pub(crate) const ISOLATOR_READONLY: &str = "rktlet.io/readonly-paths";
/// What kubelet's defaults mask and make read-only when it sends none.
pub(crate) use crate::stage1::api_vfs::{DEFAULT_MASKED, DEFAULT_READONLY};

/// rkt's isolator names for the capability set and no_new_privs.
pub(crate) const ISOLATOR_CAPS: &str = "os/linux/capabilities-retain-set";
pub(crate) const ISOLATOR_CAPS_REMOVE: &str = "os/linux/capabilities-remove-set";
pub(crate) const ISOLATOR_NO_NEW_PRIVS: &str = "os/linux/no-new-privileges";

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

    #[test]
    fn signals_in_every_spelling() {
        for s in ["SIGQUIT", "QUIT", "quit", "3", " SIGQUIT\n"] {
            assert_eq!(parse_signal(s), Some((libc::SIGQUIT, cri::Signal::Sigquit)), "{s:?}");
        }
        assert_eq!(parse_signal("SIGRTMIN+3"), None);
        assert_eq!(parse_signal("NOPE"), None);
        assert_eq!(parse_signal("99"), None);
        assert_eq!(parse_signal(cri::Signal::Sigwinch.as_str_name()), Some((libc::SIGWINCH, cri::Signal::Sigwinch)));
    }
}
