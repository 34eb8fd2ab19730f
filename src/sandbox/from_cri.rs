//! A pod's requests in CRI's terms (RunPodSandbox's config,
//! UpdatePodSandboxResources' fields), checked and translated into the pod
//! verbs' own: `run::Request` with the pod's manifest, `PodResources`. The
//! pod side of what `container::from_cri` is for containers; the errors are
//! the verbs' own (`SandboxError::InvalidArgument` for a request that cannot
//! be run as asked). The manifest is the only record of a pod's CRI
//! identity: metadata in reserved user annotations (as rktlet did), labels
//! as user labels, the options rktlet must remember as pod annotations
//! (read back for the CRI by `cri::pod_meta`).

use super::SandboxError;
use super::run::Request;
use crate::cgroup::pod_limits::{self, PodResources};
use crate::proto::v1 as cri;
use crate::stage1::sysctl::{self, PodNamespaces};
use crate::stage1::userns::IdMap;
use rkt::schema::PodManifest;

pub(crate) const POD_UID: &str = rkt::schema::USER_ANNOTATION_POD_UID;
pub(crate) const POD_NAME: &str = rkt::schema::USER_ANNOTATION_POD_NAME;
pub(crate) const POD_NAMESPACE: &str = rkt::schema::USER_ANNOTATION_POD_NAMESPACE;
pub(crate) const POD_ATTEMPT: &str = "k8s.io/reserved/pod-attempt";
pub(crate) const RESERVED_PREFIX: &str = "k8s.io/reserved/";

/// Pod annotation: `node` when the pod uses the node's network namespace.
pub(crate) const NETWORK_MODE: &str = rkt::schema::ANNOTATION_NETWORK_MODE;
/// Pod annotation: `node` when the pod shares the node's IPC namespace.
pub(crate) const IPC_MODE: &str = "rktlet.io/ipc-mode";
/// `node` for a host-PID pod (its apps in the node's PID namespace); absent otherwise.
pub(crate) const PID_MODE: &str = rkt::schema::ANNOTATION_PID_MODE;
/// Pod annotation: the pod's hostname.
pub(crate) const HOSTNAME: &str = rkt::schema::ANNOTATION_HOSTNAME;
/// Pod annotation rkt uses for kubelet's pod log directory.
pub(crate) const LOG_DIR: &str = rkt::schema::ANNOTATION_LOG_DIR;

/// The manifest of a new sandbox for `config`.
pub(crate) fn manifest_from_config(
    config: &cri::PodSandboxConfig,
    host_network: bool,
    host_ipc: bool,
    hostname: &str,
) -> PodManifest {
    let mut m = PodManifest::mutable();
    if let Some(meta) = &config.metadata {
        m.user_annotations.insert(POD_UID.into(), meta.uid.clone());
        m.user_annotations.insert(POD_NAME.into(), meta.name.clone());
        m.user_annotations.insert(POD_NAMESPACE.into(), meta.namespace.clone());
        m.user_annotations.insert(POD_ATTEMPT.into(), meta.attempt.to_string());
    }
    for (k, v) in &config.annotations {
        if !k.starts_with(RESERVED_PREFIX) {
            m.user_annotations.insert(k.clone(), v.clone());
        }
    }
    m.user_labels.extend(config.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    m.set_annotation(NETWORK_MODE, if host_network { "node" } else { "pod" });
    m.set_annotation(IPC_MODE, if host_ipc { "node" } else { "pod" });
    m.set_annotation(HOSTNAME, hostname);
    if !config.log_directory.is_empty() {
        m.set_annotation(LOG_DIR, config.log_directory.clone());
    }
    m
}

/// RunPodSandbox's request checked against the node too: the security
/// modules it asks for are there, and a named AppArmor profile is loaded
/// (the pod has no process of the user's to confine, no pause container,
/// but a profile it names must exist, as containerd's pause needs it);
/// then [`run_request`].
pub(crate) fn checked_run_request(
    rt: &crate::runtime::Runtime,
    req: cri::RunPodSandboxRequest,
) -> Result<Request, SandboxError> {
    use crate::container::from_cri::{apparmor_asked, apparmor_profile, check_lsm};
    let sc = req.config.as_ref().and_then(|c| c.linux.as_ref()).and_then(|l| l.security_context.as_ref());
    if let Some(sc) = sc {
        let prefix = "config.linux.security_context";
        let field = format!("{prefix}.apparmor");
        let checked = apparmor_asked(&field, sc.apparmor.as_ref(), "")
            .and_then(|apparmor| check_lsm(rt, prefix, apparmor, sc.privileged, sc.selinux_options.as_ref()))
            .and_then(|confinement| match confinement {
                crate::stage1::lsm::Confinement::Profile(_) => apparmor_profile(rt, &field, &confinement).map(drop),
                _ => Ok(()),
            });
        checked.map_err(|e| match e.kind() {
            crate::container::ErrorKind::InvalidArgument => SandboxError::InvalidArgument(e.to_string()),
            crate::container::ErrorKind::FailedPrecondition => SandboxError::FailedPrecondition(e.to_string()),
            _ => SandboxError::Internal(e.to_string()),
        })?;
    }
    run_request(req, rt.cgroup_driver == crate::cgroup::Driver::Systemd)
}

/// RunPodSandbox's request checked (metadata, runtime handler, namespaces,
/// hostname, cgroup parent, sysctls, pod resources) and its manifest made.
pub(crate) fn run_request(req: cri::RunPodSandboxRequest, systemd_driver: bool) -> Result<Request, SandboxError> {
    let invalid = |m: String| SandboxError::InvalidArgument(m);
    let config = req.config.ok_or_else(|| invalid("config is required".into()))?;
    let meta = config.metadata.as_ref().ok_or_else(|| invalid("config.metadata is required".into()))?;
    for (field, value) in [("name", &meta.name), ("namespace", &meta.namespace), ("uid", &meta.uid)] {
        if value.is_empty() {
            return Err(invalid(format!("config.metadata.{field} is required")));
        }
    }
    crate::container::from_cri::check_metadata_size("pod", &config.labels, &config.annotations)
        .map_err(|e| invalid(e.to_string()))?;
    if !req.runtime_handler.is_empty() {
        return Err(invalid(format!(
            "runtime handler {:?} is not configured; rktlet has only the default handler",
            req.runtime_handler
        )));
    }
    let ns = config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default();
    // the pod's infrastructure keeps a PID namespace of its own (systemd is
    // its PID 1); its apps run in the node's (docs/architecture.md, Host PID pods)
    let host_pid = ns.pid == cri::NamespaceMode::Node as i32;
    let host_network = ns.network == cri::NamespaceMode::Node as i32;
    let host_ipc = ns.ipc == cri::NamespaceMode::Node as i32;
    let userns = userns_of(ns.userns_options.as_ref(), "config.linux.security_context.namespace_options")?;
    if userns.is_some() && (host_network || host_ipc || host_pid) {
        return Err(invalid("a pod in a user namespace cannot use the node's network, IPC or PID namespace".into()));
    }
    let hostname = if !config.hostname.is_empty() {
        if config.hostname.len() > rkt::pod::HOST_NAME_MAX {
            return Err(invalid(format!(
                "config.hostname: {} bytes, more than the kernel's {}",
                config.hostname.len(),
                rkt::pod::HOST_NAME_MAX
            )));
        }
        config.hostname.clone()
    } else if host_network {
        nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default()
    } else {
        rkt::pod::hostname_from_name(&meta.name).to_string()
    };
    let cgroup_parent = config.linux.as_ref().map(|l| l.cgroup_parent.clone()).unwrap_or_default();
    crate::cgroup::pod::subcgroup(&cgroup_parent, "check", systemd_driver)
        .map_err(|e| invalid(format!("config.linux.cgroup_parent: {e}")))?;
    let sysctls = config.linux.as_ref().map(|l| l.sysctls.iter()).into_iter().flatten();
    let sysctls = sysctl::check(sysctls, PodNamespaces { host_network, host_ipc })?;
    let linux = config.linux.as_ref();
    let pod_resources = pod_resources(
        linux.and_then(|l| l.resources.as_ref()),
        linux.and_then(|l| l.overhead.as_ref()),
        "config.linux.",
    )?;
    let mut manifest = manifest_from_config(&config, host_network, host_ipc, &hostname);
    if host_pid {
        manifest.set_annotation(PID_MODE, "node");
    }
    if let Some(map) = userns {
        manifest.set_annotation(rkt::schema::ANNOTATION_USERNS, map.to_string());
    }
    super::resources::record(&mut manifest, &pod_resources)?;
    Ok(Request { config, host_network, host_ipc, host_pid, userns, hostname, cgroup_parent, sysctls, manifest })
}

/// The user namespace `options` ask for: none for NODE mode (or none
/// given), a checked mapping for POD mode; CONTAINER mode is refused.
pub(crate) fn userns_of(options: Option<&cri::UserNamespace>, at: &str) -> Result<Option<IdMap>, SandboxError> {
    let Some(u) = options else { return Ok(None) };
    match cri::NamespaceMode::try_from(u.mode) {
        Ok(cri::NamespaceMode::Node) => Ok(None),
        Ok(cri::NamespaceMode::Pod) => crate::container::from_cri::userns_mapping(u)
            .map(Some)
            .map_err(|e| SandboxError::InvalidArgument(format!("{at}.userns_options: {e}"))),
        _ => Err(SandboxError::InvalidArgument(format!(
            "{at}.userns_options.mode {}: rktlet supports user namespaces per pod (POD) or none (NODE)",
            u.mode
        ))),
    }
}

/// Pod-level resources in CRI's terms (`LinuxPodSandboxConfig.resources` and
/// `.overhead`, UpdatePodSandboxResources' fields), checked; `prefix` names
/// where they came from in the request.
pub(crate) fn pod_resources(
    resources: Option<&cri::LinuxContainerResources>,
    overhead: Option<&cri::LinuxContainerResources>,
    prefix: &str,
) -> Result<PodResources, SandboxError> {
    for (what, r) in [("resources", resources), ("overhead", overhead)] {
        if let Some(r) = r {
            pod_limits::check_cri_numbers(
                &format!("{prefix}{what}"),
                r.memory_limit_in_bytes,
                r.cpu_shares,
                r.cpu_quota,
                r.cpu_period,
            )?;
        }
    }
    let limits = crate::container::meta::limits_from_cri;
    Ok(PodResources {
        resources: resources.map(limits).unwrap_or_default(),
        overhead: overhead.map(limits).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(change: impl FnOnce(&mut cri::PodSandboxConfig)) -> cri::RunPodSandboxRequest {
        let mut config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "web".into(),
                uid: "u1".into(),
                namespace: "ns".into(),
                attempt: 0,
            }),
            ..Default::default()
        };
        change(&mut config);
        cri::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() }
    }

    #[test]
    fn a_run_request_is_checked_and_translated() {
        let r = run_request(request(|c| c.hostname = "h1".into()), false).expect("a valid request");
        assert_eq!(r.hostname, "h1");
        assert!(!r.host_network && !r.host_ipc && !r.host_pid && r.userns.is_none());
        assert_eq!(r.manifest.annotation(HOSTNAME), Some("h1"));
        assert_eq!(r.manifest.annotation(PID_MODE), None);
        assert_eq!(r.manifest.user_annotations.get(POD_UID).map(String::as_str), Some("u1"));
        let host_pid = run_request(
            request(|c| {
                c.linux = Some(cri::LinuxPodSandboxConfig {
                    security_context: Some(cri::LinuxSandboxSecurityContext {
                        namespace_options: Some(cri::NamespaceOption {
                            pid: cri::NamespaceMode::Node as i32,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
            }),
            false,
        )
        .expect("a host-PID request");
        assert!(host_pid.host_pid);
        assert_eq!(host_pid.manifest.annotation(PID_MODE), Some("node"));
    }

    #[test]
    fn refusals_are_the_pod_verbs_invalid_argument_naming_the_field() {
        let refused = |req: cri::RunPodSandboxRequest, why: &str| match run_request(req, false).err() {
            Some(SandboxError::InvalidArgument(m)) => assert!(m.contains(why), "{why}: {m}"),
            other => panic!("expected InvalidArgument naming {why}, got {other:?}"),
        };
        refused(cri::RunPodSandboxRequest::default(), "config is required");
        refused(request(|c| c.metadata = None), "config.metadata is required");
        refused(request(|c| c.metadata.as_mut().map_or((), |m| m.uid.clear())), "config.metadata.uid");
        refused(cri::RunPodSandboxRequest { runtime_handler: "kata".into(), ..request(|_| ()) }, "runtime handler");
        refused(request(|c| c.hostname = "h".repeat(rkt::pod::HOST_NAME_MAX + 1)), "config.hostname");
        refused(
            request(|c| {
                c.linux =
                    Some(cri::LinuxPodSandboxConfig { cgroup_parent: "../../escape".into(), ..Default::default() })
            }),
            "config.linux.cgroup_parent",
        );
        let negative = cri::LinuxContainerResources { memory_limit_in_bytes: -5, ..Default::default() };
        match pod_resources(Some(&negative), None, "config.linux.") {
            Err(e @ SandboxError::PodLimits(_)) => {
                assert!(e.to_string().contains("config.linux.resources: memory_limit_in_bytes -5"), "{e}");
                assert_eq!(e.kind(), crate::container::ErrorKind::InvalidArgument);
            }
            other => panic!("expected a refused pod limit, got {:?}", other.err()),
        }
    }
}
