//! RunPodSandbox: validate, choose the pod's uuid, write its manifest, start
//! `<rkt> app sandbox` (the one exec), wait for readiness; on any failure take
//! down everything that was made.

use super::pod_meta;
use crate::net::cni::{CniResult, Network, PortMapping};
use crate::net::pod as podnet;
use crate::pod::{self, Pod};
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use crate::stage1::boot::BootError;
use crate::stage1::sandbox::SandboxArgs;
use crate::stage1::sysctl::{self, PodNamespaces, Sysctl, SysctlError};
use std::path::PathBuf;
use tonic::Status;
use uuid::Uuid;

/// Checked request: what the sandbox needs.
pub(super) struct Request {
    pub config: cri::PodSandboxConfig,
    pub host_network: bool,
    pub host_ipc: bool,
    /// The node's PID namespace for the apps (`namespace_options.pid = NODE`).
    pub host_pid: bool,
    pub hostname: String,
    pub cgroup_parent: String,
    /// `linux.sysctls`, checked against the pod's namespaces.
    pub sysctls: Vec<Sysctl>,
    /// `linux.resources` and `linux.overhead`: the pod's own limits.
    pub pod_resources: crate::cgroup::pod_limits::PodResources,
}

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
    if ns.userns_options.as_ref().is_some_and(|u| u.mode == cri::NamespaceMode::Pod as i32) {
        return Err(Status::invalid_argument("user namespaces are not supported by rktlet yet"));
    }
    let host_network = ns.network == cri::NamespaceMode::Node as i32;
    let host_ipc = ns.ipc == cri::NamespaceMode::Node as i32;
    let hostname = if !config.hostname.is_empty() {
        if config.hostname.len() > crate::pod::HOST_NAME_MAX {
            return Err(Status::invalid_argument(format!(
                "config.hostname: {} bytes, more than the kernel's {}",
                config.hostname.len(),
                crate::pod::HOST_NAME_MAX
            )));
        }
        config.hostname.clone()
    } else if host_network {
        nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default()
    } else {
        crate::pod::hostname_from_name(&meta.name).to_string()
    };
    let cgroup_parent = config.linux.as_ref().map(|l| l.cgroup_parent.clone()).unwrap_or_default();
    crate::cgroup::pod::subcgroup(&cgroup_parent, "check", systemd_driver)
        .map_err(|e| Status::invalid_argument(format!("config.linux.cgroup_parent: {e}")))?;
    let sysctls = config.linux.as_ref().map(|l| l.sysctls.iter()).into_iter().flatten();
    let sysctls = sysctl::check(sysctls, PodNamespaces { host_network, host_ipc }).map_err(sysctl_status)?;
    let linux = config.linux.as_ref();
    let pod_resources = super::sandbox_resources::from_cri(
        linux.and_then(|l| l.resources.as_ref()),
        linux.and_then(|l| l.overhead.as_ref()),
        "config.linux.",
    )?;
    Ok(Request { config, host_network, host_ipc, host_pid, hostname, cgroup_parent, sysctls, pod_resources })
}

pub(super) fn sysctl_status(e: SysctlError) -> Status {
    if e.is_invalid_argument() { Status::invalid_argument(e.to_string()) } else { Status::internal(e.to_string()) }
}

/// Writes the pod's sysctls in its namespaces (those of its systemd, `pid1`).
pub(super) async fn apply_sysctls(pid1: i32, sysctls: &[Sysctl]) -> Result<(), Status> {
    if sysctls.is_empty() {
        return Ok(());
    }
    let sysctls = sysctls.to_vec();
    tokio::task::spawn_blocking(move || sysctl::apply(pid1, &sysctls))
        .await
        .map_err(|e| Status::internal(format!("sysctl worker: {e}")))?
        .map_err(sysctl_status)
}

pub(super) fn internal(uuid: Uuid, what: &str, e: impl std::fmt::Display) -> Status {
    Status::internal(format!("pod {uuid}: {what}: {e}"))
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
    if let Some(uuid) = super::sandbox_pool::serve(rt, &req).await {
        if let Err(status) = tokio::task::block_in_place(|| super::sandbox_resources::apply_at_start(rt, uuid)) {
            cleanup(rt, uuid).await;
            return Err(status);
        }
        rt.pods.warm(&rt.manifests, &uuid.to_string());
        return Ok(cri::RunPodSandboxResponse { pod_sandbox_id: uuid.to_string() });
    }
    let uuid = Uuid::new_v4();
    let mut manifest = pod_meta::manifest_from_config(&req.config, req.host_network, req.host_ipc, &req.hostname);
    if req.host_pid {
        manifest.set_annotation(pod_meta::PID_MODE, "node");
    }
    super::sandbox_resources::record(&mut manifest, &req.pod_resources)?;
    let manifest_file = crate::stage1::boot::start_manifest(&rt.data, uuid);
    let bytes = serde_json::to_vec(&manifest).map_err(|e| internal(uuid, "encoding manifest", e))?;
    crate::fsutil::write_volatile(&manifest_file, &bytes, 0o600).map_err(|e| internal(uuid, "writing manifest", e))?;
    let result = start(rt, &req, uuid, manifest_file.clone()).await;
    let _ = std::fs::remove_file(&manifest_file);
    match result {
        Ok(()) => {
            rt.pods.warm(&rt.manifests, &uuid.to_string());
            Ok(cri::RunPodSandboxResponse { pod_sandbox_id: uuid.to_string() })
        }
        Err(status) => {
            let log = sandbox_log_tail(rt, uuid);
            cleanup(rt, uuid).await;
            if log.is_empty() {
                Err(status)
            } else {
                Err(Status::new(status.code(), format!("{}; sandbox log: {log}", status.message())))
            }
        }
    }
}

async fn start(rt: &Runtime, req: &Request, uuid: Uuid, manifest_file: PathBuf) -> Result<(), Status> {
    let config = &req.config;
    make_log_directory(uuid, config)?;
    let dns = config.dns_config.clone().unwrap_or_default();
    let mut args = SandboxArgs {
        uuid: Some(uuid),
        pod_manifest: Some(manifest_file),
        hostname: Some(req.hostname.clone()),
        dns: dns.servers,
        dns_search: dns.searches,
        dns_opt: dns.options,
        net: if req.host_network { "host".into() } else { "none".into() },
        ipc: req.host_ipc.then(|| "parent".into()),
        cgroup_parent: Some(req.cgroup_parent.clone()),
        ..Default::default()
    };
    // the pod network: config checked and netns made before the boot; CNI ADD runs during it
    let network = if req.host_network {
        None
    } else {
        let net = pod_network(rt)?;
        let netns = podnet::create_netns(uuid).map_err(|e| internal(uuid, "creating network namespace", e))?;
        args.net = "default".into();
        args.netns = Some(netns.path().to_path_buf());
        Some((net, netns.path().to_path_buf()))
    };
    let cni = network.as_ref().map(|(net, netns)| (net, cni_request(rt, uuid, netns, config)));
    if let (Some(result), Some((net, _))) = (boot(rt, uuid, args, cni).await?, &network) {
        record_network(rt, uuid, net, &result, &req.hostname)?;
    }
    if !req.sysctls.is_empty() {
        let pod = Pod::open(&rt.data, &uuid.to_string()).map_err(|e| internal(uuid, "opening the pod", e))?;
        let sandbox = pod
            .sandbox_pid()
            .map_err(|e| internal(uuid, "reading the sandbox pid", e))?
            .ok_or_else(|| internal(uuid, "applying sysctls", "the pod has no sandbox"))?;
        let pid1 =
            crate::stage1::inject::pod_pid1(sandbox).map_err(|e| internal(uuid, "finding the pod's systemd", e))?;
        apply_sysctls(pid1, &req.sysctls).await?;
    }
    // the pod is in its controller cgroups now
    tokio::task::block_in_place(|| super::sandbox_resources::apply_at_start(rt, uuid))
}

/// The default CNI network, or FailedPrecondition while there is none.
pub(super) fn pod_network(rt: &Runtime) -> Result<Network, Status> {
    Network::load_default(&rt.config.cni_conf_dir, &rt.config.cni_bin_dirs)
        .map_err(|e| Status::failed_precondition(format!("pod network is not ready: {e}")))
}

/// Creates kubelet's pod log directory.
pub(super) fn make_log_directory(uuid: Uuid, config: &cri::PodSandboxConfig) -> Result<(), Status> {
    if !config.log_directory.is_empty() {
        std::fs::create_dir_all(&config.log_directory)
            .map_err(|e| internal(uuid, &format!("creating log directory {}", config.log_directory), e))?;
    }
    Ok(())
}

/// Boots a pod (`stage1::boot::boot`) with `args` and `cni` (a network and
/// its request). Returns the CNI result.
pub(super) async fn boot(
    rt: &Runtime,
    uuid: Uuid,
    args: SandboxArgs,
    cni: Option<(&Network, crate::net::cni::CniRequest)>,
) -> Result<Option<CniResult>, Status> {
    let program = rt.sandbox_program().map_err(|e| internal(uuid, "locating the sandbox program", e))?;
    crate::stage1::boot::boot(&rt.data, &program, rt.supervisor(), uuid, args, cni).await.map_err(boot_status)
}

/// A failed boot's status: DeadlineExceeded when the pod was not ready in time.
fn boot_status(e: BootError) -> Status {
    match e {
        BootError::Timeout { .. } => Status::deadline_exceeded(e.to_string()),
        BootError::Failed { .. } => Status::internal(e.to_string()),
    }
}

/// The CNI request for a new pod: its identity, port mappings and DNS.
pub(super) fn cni_request(
    rt: &Runtime,
    uuid: Uuid,
    netns: &std::path::Path,
    config: &cri::PodSandboxConfig,
) -> crate::net::cni::CniRequest {
    let mut cni = podnet::request(&rt.data, uuid, netns);
    if let Some(meta) = &config.metadata {
        cni.pod_name = meta.name.clone();
        cni.pod_namespace = meta.namespace.clone();
        cni.pod_uid = meta.uid.clone();
    }
    cni.port_mappings = config.port_mappings.iter().filter_map(PortMapping::from_cri).collect();
    cni.dns = config.dns_config.as_ref().map(crate::net::dns::DnsConfig::from);
    cni
}

/// Records the CNI outcome in the pod (`net-info.json`) and puts the pod's IP
/// into its `/etc/hosts`.
pub(super) fn record_network(
    rt: &Runtime,
    uuid: Uuid,
    net: &Network,
    result: &CniResult,
    hostname: &str,
) -> Result<(), Status> {
    let pod = Pod::open(&rt.data, &uuid.to_string()).map_err(|e| internal(uuid, "reopening pod", e))?;
    podnet::record(&pod, net, result).map_err(|e| internal(uuid, "writing net-info.json", e))?;
    let hosts = crate::net::dns::hosts(hostname, &result.pod_ips());
    let path = pod.stage1_rootfs().join("etc/hosts");
    crate::fsutil::write_volatile(&path, hosts.as_bytes(), 0o644).map_err(|e| internal(uuid, "writing /etc/hosts", e))
}

/// Last lines of the pod's console log, for error messages.
fn sandbox_log_tail(rt: &Runtime, uuid: Uuid) -> String {
    let Ok(pod) = Pod::open(&rt.data, &uuid.to_string()) else { return String::new() };
    let text = std::fs::read_to_string(pod.path().join(pod::SANDBOX_LOG_FILE)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// Takes down whatever a failed start left: processes, cgroup, mounts,
/// network, pod dir.
pub(super) async fn cleanup(rt: &Runtime, uuid: Uuid) {
    if let Err(e) = crate::stage1::teardown::abort_start(&rt.data, uuid, &rt.net_dirs()).await {
        tracing::error!(pod = %uuid, error = %e, "cleanup after a failed start");
    }
}
