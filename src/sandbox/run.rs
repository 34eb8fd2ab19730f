//! RunPodSandbox: a pod from the pool adapted to the request (`pool`), or a
//! cold boot: the pod's manifest written, `<rkt> app sandbox` started (the
//! one exec) with its network, readiness waited for, its sysctls and own
//! limits written; on any failure everything that was made is taken down.

use super::{SandboxError, internal};
use crate::net::cni::{CniResult, Network, PortMapping};
use crate::net::pod as podnet;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use crate::stage1::sandbox::SandboxArgs;
use crate::stage1::sysctl::{self, Sysctl};
use rkt::pod::{self, Pod};
use rkt::schema::PodManifest;
use std::path::PathBuf;
use uuid::Uuid;

/// A checked request: what the sandbox needs.
pub(crate) struct Request {
    pub config: cri::PodSandboxConfig,
    pub host_network: bool,
    pub host_ipc: bool,
    /// The node's PID namespace for the apps (`namespace_options.pid = NODE`).
    pub host_pid: bool,
    /// A user namespace of the pod's own (also recorded in `manifest`).
    pub userns: Option<crate::stage1::userns::IdMap>,
    pub hostname: String,
    pub cgroup_parent: String,
    /// `linux.sysctls`, checked against the pod's namespaces.
    pub sysctls: Vec<Sysctl>,
    /// The pod's manifest: its CRI identity, namespaces and hostname, its
    /// own limits (`linux.resources` and `linux.overhead`) recorded.
    pub manifest: PodManifest,
}

/// Starts the pod `req` asks for cold (no pool pod fits: `super::start`);
/// its uuid.
pub(super) async fn cold(rt: &Runtime, req: &Request) -> Result<Uuid, SandboxError> {
    // a sandbox process started ahead, if the daemon has one: its pod's uuid is this pod's
    let standby = (rt.supervisor() == crate::stage1::launch::Supervisor::Detached)
        .then(|| rt.sandbox_program().ok())
        .flatten()
        .and_then(|program| crate::stage1::launch::take_standby(&program, rt.data.root()));
    let uuid = standby.as_ref().map_or_else(Uuid::new_v4, |s| s.uuid());
    let manifest_file = crate::stage1::boot::start_manifest(&rt.data, uuid);
    let bytes = serde_json::to_vec(&req.manifest).map_err(|e| internal(uuid, "encoding manifest", e))?;
    rkt::fs::write_volatile(&manifest_file, &bytes, 0o600).map_err(|e| internal(uuid, "writing manifest", e))?;
    let result = start(rt, req, uuid, manifest_file.clone(), standby).await;
    let _ = std::fs::remove_file(&manifest_file);
    match result {
        Ok(()) => {
            rt.pods.warm(&rt.manifests, &uuid.to_string());
            Ok(uuid)
        }
        Err(e) => {
            let log = sandbox_log_tail(rt, uuid);
            cleanup(rt, uuid).await;
            if log.is_empty() { Err(e) } else { Err(SandboxError::WithLog { source: Box::new(e), log }) }
        }
    }
}

/// Writes the pod's sysctls in its namespaces (those of its systemd, `pid1`).
pub(super) async fn apply_sysctls(pid1: i32, sysctls: &[Sysctl]) -> Result<(), SandboxError> {
    if sysctls.is_empty() {
        return Ok(());
    }
    let sysctls = sysctls.to_vec();
    Ok(tokio::task::spawn_blocking(move || sysctl::apply(pid1, &sysctls))
        .await
        .map_err(|e| SandboxError::Internal(format!("sysctl worker: {e}")))??)
}

async fn start(
    rt: &Runtime,
    req: &Request,
    uuid: Uuid,
    manifest_file: PathBuf,
    standby: Option<crate::stage1::launch::Standby>,
) -> Result<(), SandboxError> {
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
    if let (Some(result), Some((net, _))) = (boot(rt, uuid, args, cni, standby).await?, &network) {
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
    tokio::task::block_in_place(|| super::resources::apply_at_start(rt, uuid))
}

/// The default CNI network, or FailedPrecondition while there is none.
pub(super) fn pod_network(rt: &Runtime) -> Result<Network, SandboxError> {
    Network::load_default(&rt.config.cni_conf_dir, &rt.config.cni_bin_dirs)
        .map_err(|e| SandboxError::FailedPrecondition(format!("pod network is not ready: {e}")))
}

/// Where kubelet keeps pod logs (`/var/log/pods/<ns>_<name>_<uid>`).
const NODE_LOG_ROOT: &str = "/var/log/pods";

/// Creates kubelet's pod log directory. One outside the node's log root is
/// accepted, as containerd accepts it (the CRI client is trusted with the
/// node's paths), and said at warn: the log writer writes there as root.
pub(super) fn make_log_directory(uuid: Uuid, config: &cri::PodSandboxConfig) -> Result<(), SandboxError> {
    if !config.log_directory.is_empty() {
        if outside_log_root(&config.log_directory) {
            tracing::warn!(
                pod = %uuid,
                log_directory = config.log_directory,
                root = NODE_LOG_ROOT,
                "the pod's log directory is outside the node's log root: container logs are written there as root"
            );
        }
        std::fs::create_dir_all(&config.log_directory)
            .map_err(|e| internal(uuid, &format!("creating log directory {}", config.log_directory), e))?;
    }
    Ok(())
}

/// Whether `dir` is not below the node's log root (its components as
/// given: a `..` counts as leaving it).
fn outside_log_root(dir: &str) -> bool {
    let p = std::path::Path::new(dir);
    !p.starts_with(NODE_LOG_ROOT) || p.components().any(|c| c == std::path::Component::ParentDir)
}

/// Boots a pod (`stage1::boot::boot`) with `args` and `cni` (a network and
/// its request), through `standby` if there is one. Returns the CNI result. A pod not ready in time is
/// DeadlineExceeded.
async fn boot(
    rt: &Runtime,
    uuid: Uuid,
    args: SandboxArgs,
    cni: Option<(&Network, crate::net::cni::CniRequest)>,
    standby: Option<crate::stage1::launch::Standby>,
) -> Result<Option<CniResult>, SandboxError> {
    let program = rt.sandbox_program().map_err(|e| internal(uuid, "locating the sandbox program", e))?;
    Ok(crate::stage1::boot::boot(&rt.data, &program, rt.supervisor(), uuid, args, cni, standby).await?)
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
) -> Result<(), SandboxError> {
    let pod = Pod::open(&rt.data, &uuid.to_string()).map_err(|e| internal(uuid, "reopening pod", e))?;
    podnet::record(&pod, net, result).map_err(|e| internal(uuid, "writing net-info.json", e))?;
    let hosts = crate::net::dns::hosts(hostname, &result.pod_ips());
    let path = pod.stage1_rootfs().join("etc/hosts");
    rkt::fs::write_volatile(&path, hosts.as_bytes(), 0o644).map_err(|e| internal(uuid, "writing /etc/hosts", e))
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

#[cfg(test)]
mod tests {
    #[test]
    fn log_directories_outside_the_nodes_log_root() {
        assert!(!super::outside_log_root("/var/log/pods/default_web_1"));
        for dir in ["/etc", "/var/log", "/var/log/pods/../../../etc", "/var/log/podsx", "relative"] {
            assert!(super::outside_log_root(dir), "{dir}");
        }
    }
}
