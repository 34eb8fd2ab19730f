//! RunPodSandbox served from the pod pool (see `crate::pool`; its pods are
//! booted by [`boot`]): adapting a taken one to the request so that it
//! is the pod a cold start would have made: same files, same manifest,
//! requested hostname, DNS, network, cgroup parent, and created at the time
//! of the request. The network's identity-free plugins ran while the pool
//! pod booted; a take runs the rest of the chain (portmap with the pod's
//! port mappings) with the pod's identity, started first, and the local
//! steps meanwhile on a blocking thread.

pub(crate) mod boot;
pub(crate) mod fill;

use super::run::{Request, cni_request, make_log_directory, pod_network, record_network};
use super::{SandboxError, internal};
use crate::pool::{self, Member, adapt};
use crate::runtime::Runtime;
use crate::stage1::nspawn::PodNet;
use crate::stage1::rootfs::{Identity, Stage1Root};
use rkt::pod::{self, Pod, PodState};
use std::time::SystemTime;
use uuid::Uuid;

/// Why a taken pod was not used.
enum Unusable {
    /// It died while waiting: try the next one.
    Dead(String),
    /// Adapting it failed: the request cold-starts.
    Failed(SandboxError),
}

impl From<SandboxError> for Unusable {
    fn from(e: SandboxError) -> Self {
        Unusable::Failed(e)
    }
}

/// Serves the request from the pool when it can: a pod network and no
/// node namespaces (what pool pods are booted with). `None` means cold-start
/// (pool empty or off, request not eligible, or adaptation failed: the
/// pool pod is then removed with whatever the attempt made).
pub(crate) async fn serve(rt: &Runtime, req: &Request) -> Option<Uuid> {
    // a host-PID pod boots cold (its apps' /proc is the node's, bound at
    // their start); so does a pod in a user namespace (pool pods have none)
    if req.host_network || req.host_ipc || req.host_pid || req.userns.is_some() || !rt.pool.enabled() {
        return None;
    }
    loop {
        let member = rt.pool.take()?;
        let result = adapt(rt, req, &member).await;
        let Err(why) = result else { return Some(member.uuid) };
        rt.pool.discarded();
        fill::discard(rt, member.uuid).await;
        match why {
            Unusable::Dead(e) => tracing::info!(pod = %member.uuid, reason = %e, "pool pod died; taking the next"),
            Unusable::Failed(e) => {
                tracing::warn!(pod = %member.uuid, error = %e, "adapting a pool pod failed; cold start");
                return None;
            }
        }
    }
}

/// Turns a ready pool pod into the requested one. The manifest rewrite comes
/// last: until then the pod is still a pool pod to everyone.
async fn adapt(rt: &Runtime, req: &Request, member: &Member) -> Result<(), Unusable> {
    let served_at = SystemTime::now();
    let uuid = member.uuid;
    let mut pod = Pod::open(&rt.data, &uuid.to_string()).map_err(|e| Unusable::Dead(e.to_string()))?;
    if pod.state().ok() != Some(PodState::Running) {
        return Err(Unusable::Dead("not running".into()));
    }
    let sandbox = pod.sandbox_pid().ok().flatten().ok_or_else(|| Unusable::Dead("no sandbox pid".into()))?;
    let pid1 = crate::stage1::inject::pod_pid1(sandbox).map_err(|e| Unusable::Dead(format!("no pod systemd: {e}")))?;
    // from here on a crash leaves a half-taken pod: the marker makes a
    // restarted daemon discard it instead of putting it back in the pool
    pod.write_file(pool::TAKING_FILE, b"").map_err(|e| internal(uuid, "marking the pool pod taken", e))?;
    let config = &req.config;
    let net = pod_network(rt)?;
    make_log_directory(uuid, config)?;
    let cni = cni_request(rt, uuid, &member.netns, config);
    let t0 = std::time::Instant::now();
    let micros = move || u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
    let cgroups = {
        let (pod, parent) = (Pod::at(&rt.data, uuid, pod.dir()), req.cgroup_parent.clone());
        tokio::task::spawn_blocking(move || adapt_cgroups(&pod, &parent))
    };
    let identity = {
        let (pod, hostname, netns) = (Pod::at(&rt.data, uuid, pod.dir()), req.hostname.clone(), member.netns.clone());
        let dns = config.dns_config.as_ref().map(crate::net::dns::DnsConfig::from);
        tokio::task::spawn_blocking(move || adapt_identity(&pod, pid1, &hostname, dns.as_ref(), netns))
    };
    let added = async {
        let r = match net.prefix_done(&cni) {
            Some((from, prev)) => net.add_from(&cni, from, Some(prev)).await,
            None => net.add(&cni).await,
        };
        tracing::debug!(pod = %uuid, micros = micros(), "pool pod: CNI ADD done");
        r
    };
    let local = async {
        let (c, i) = tokio::join!(cgroups, identity);
        tracing::debug!(pod = %uuid, micros = micros(), "pool pod: local steps done");
        match (c, i) {
            (Ok(c), Ok(i)) => Ok(c.and(i)),
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    };
    let (added, local) = tokio::join!(added, local);
    local.map_err(|e| internal(uuid, "adapt worker", e))??;
    super::run::apply_sysctls(pid1, &req.sysctls).await?;
    let result = added.map_err(|e| internal(uuid, "CNI ADD", e))?;
    record_network(rt, uuid, &net, &result, &req.hostname)?;
    adapt::set_created(&pod.path(), served_at).map_err(|e| internal(uuid, "setting the creation time", e))?;
    // the request's manifest: a pool pod's request has no node namespaces
    let manifest = &req.manifest;
    let _lock = pod.lock_manifest().map_err(|e| internal(uuid, "locking the manifest", e))?;
    pod.write_manifest(manifest).map_err(|e| internal(uuid, "writing the manifest", e))?;
    let _ = std::fs::remove_file(pod.path().join(pool::TAKING_FILE));
    tracing::debug!(pod = %uuid, micros = micros(), "pool pod adapted");
    Ok(())
}

/// Hostname, DNS files and runtime-config.
fn adapt_identity(
    pod: &Pod,
    pid1: i32,
    hostname: &str,
    dns: Option<&crate::net::dns::DnsConfig>,
    netns: std::path::PathBuf,
) -> Result<(), SandboxError> {
    let uuid = pod.uuid();
    adapt::set_hostname(pid1, hostname).map_err(|e| internal(uuid, "setting the hostname", e))?;
    let host_resolv = std::fs::read_to_string(crate::net::dns::HOST_RESOLV_CONF).unwrap_or_default();
    let identity = Identity {
        machine_id: String::new(),
        hostname: hostname.to_string(),
        resolv_conf: crate::net::dns::resolv_conf(dns, &host_resolv),
        hosts: crate::net::dns::hosts(hostname, &[]),
    };
    Stage1Root::new(pod.stage1_rootfs())
        .write_network_identity(&identity)
        .map_err(|e| internal(uuid, "writing hostname, hosts and resolv.conf", e))?;
    let runtime_config = crate::stage1::sandbox::runtime_config(hostname, &PodNet::Netns(netns), false);
    pod.write_file(pod::RUNTIME_CONFIG_FILE, runtime_config.as_bytes())
        .map_err(|e| internal(uuid, "writing runtime-config", e))
}

/// The pod's v1 controller cgroups under the requested parent, and its
/// normal priority. The first cgroup migration after a quiet spell waits
/// for an RCU grace period (pod-boot-fast.md §2.5): the slowest local step,
/// so it runs on a thread of its own.
fn adapt_cgroups(pod: &Pod, cgroup_parent: &str) -> Result<(), SandboxError> {
    let uuid = pod.uuid();
    let layout = crate::cgroup::Layout::cached().map_err(|e| internal(uuid, "reading the cgroup layout", e))?;
    let from = pool::subcgroup(uuid).map_err(|e| internal(uuid, "pool cgroup", e))?;
    let to = crate::cgroup::pod::subcgroup(cgroup_parent, &uuid.to_string(), false)
        .map_err(|e| internal(uuid, "cgroup parent", e))?;
    // recorded first, so that a failed move is undone by the pod's teardown
    pod.write_file(pod::SUBCGROUP_FILE, to.as_bytes()).map_err(|e| internal(uuid, "writing subcgroup", e))?;
    adapt::move_pod(layout, &from, &to).map_err(|e| internal(uuid, "moving the pod to its cgroup parent", e))?;
    let pids = crate::cgroup::pod::PodCgroup::tracking(layout, &from).pids();
    adapt::renice(&pids).map_err(|e| internal(uuid, "resetting the pod's priority", e))
}
