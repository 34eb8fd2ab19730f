//! RunPodSandbox: the request checked (metadata, namespaces, hostname,
//! cgroup parent, sysctls, pod resources, confinement) and its manifest
//! made, then `sandbox::start::run`.

use super::{pod_meta, sandbox_error};
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use crate::sandbox::run::Request;
use crate::stage1::sysctl::{self, PodNamespaces};
use crate::stage1::userns::IdMap;
use tonic::Status;

fn validate(req: cri::RunPodSandboxRequest, systemd_driver: bool) -> Result<Request, Status> {
    let config = req.config.ok_or_else(|| Status::invalid_argument("config is required"))?;
    let meta = config.metadata.as_ref().ok_or_else(|| Status::invalid_argument("config.metadata is required"))?;
    for (field, value) in [("name", &meta.name), ("namespace", &meta.namespace), ("uid", &meta.uid)] {
        if value.is_empty() {
            return Err(Status::invalid_argument(format!("config.metadata.{field} is required")));
        }
    }
    super::check_metadata_size("pod", &config.labels, &config.annotations)?;
    if !req.runtime_handler.is_empty() {
        return Err(Status::invalid_argument(format!(
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
        return Err(Status::invalid_argument(
            "a pod in a user namespace cannot use the node's network, IPC or PID namespace",
        ));
    }
    let hostname = if !config.hostname.is_empty() {
        if config.hostname.len() > rkt::pod::HOST_NAME_MAX {
            return Err(Status::invalid_argument(format!(
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
        .map_err(|e| Status::invalid_argument(format!("config.linux.cgroup_parent: {e}")))?;
    let sysctls = config.linux.as_ref().map(|l| l.sysctls.iter()).into_iter().flatten();
    let sysctls =
        sysctl::check(sysctls, PodNamespaces { host_network, host_ipc }).map_err(|e| sandbox_error(e.into()))?;
    let linux = config.linux.as_ref();
    let pod_resources = super::sandbox_resources::from_cri(
        linux.and_then(|l| l.resources.as_ref()),
        linux.and_then(|l| l.overhead.as_ref()),
        "config.linux.",
    )?;
    let mut manifest = pod_meta::manifest_from_config(&config, host_network, host_ipc, &hostname);
    if host_pid {
        manifest.set_annotation(pod_meta::PID_MODE, "node");
    }
    if let Some(map) = userns {
        manifest.set_annotation(rkt::schema::ANNOTATION_USERNS, map.to_string());
    }
    crate::sandbox::resources::record(&mut manifest, &pod_resources).map_err(sandbox_error)?;
    Ok(Request {
        config,
        host_network,
        host_ipc,
        host_pid,
        userns,
        hostname,
        cgroup_parent,
        sysctls,
        pod_resources,
        manifest,
    })
}

/// The user namespace `options` ask for: none for NODE mode (or none
/// given), a checked mapping for POD mode; CONTAINER mode is refused.
pub(super) fn userns_of(options: Option<&cri::UserNamespace>, at: &str) -> Result<Option<IdMap>, Status> {
    let Some(u) = options else { return Ok(None) };
    match cri::NamespaceMode::try_from(u.mode) {
        Ok(cri::NamespaceMode::Node) => Ok(None),
        Ok(cri::NamespaceMode::Pod) => crate::container::from_cri::userns_mapping(u)
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("{at}.userns_options: {e}"))),
        _ => Err(Status::invalid_argument(format!(
            "{at}.userns_options.mode {}: rktlet supports user namespaces per pod (POD) or none (NODE)",
            u.mode
        ))),
    }
}

pub async fn run_pod_sandbox(
    rt: &Runtime,
    req: cri::RunPodSandboxRequest,
) -> Result<cri::RunPodSandboxResponse, Status> {
    let sc = req.config.as_ref().and_then(|c| c.linux.as_ref()).and_then(|l| l.security_context.as_ref());
    if let Some(sc) = sc {
        let prefix = "config.linux.security_context";
        // the pod has no process of the user's to confine (no pause
        // container): a named profile must still exist, as containerd's pause needs it
        let apparmor = super::apparmor_asked(&format!("{prefix}.apparmor"), sc.apparmor.as_ref(), "")?;
        let confinement = super::check_lsm(rt, prefix, apparmor, sc.privileged, sc.selinux_options.as_ref())?;
        if matches!(confinement, crate::stage1::lsm::Confinement::Profile(_)) {
            super::apparmor_profile(rt, &format!("{prefix}.apparmor"), &confinement)?;
        }
    }
    let req = validate(req, rt.cgroup_driver == crate::cgroup::Driver::Systemd)?;
    let uuid = crate::sandbox::start::run(rt, &req).await.map_err(sandbox_error)?;
    Ok(cri::RunPodSandboxResponse { pod_sandbox_id: uuid.to_string() })
}
