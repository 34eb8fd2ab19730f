//! ContainerStats, ListContainerStats, PodSandboxStats, ListPodSandboxStats:
//! read from the host without exec (cgroup files, the app's overlay upper
//! directory, the pod network namespace's counters through its systemd's
//! `/proc/<pid>/net/dev`). Only running containers and ready pods have stats.
//! `usage_nano_cores` is the rate since the previous sample of the same
//! container or pod taken by this daemon.

use super::container_status::status_of;
use super::sandbox_status::{PodView, list_views};
use super::{pod_meta, pod_status};
use crate::container::stats::{self, Sample};
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use rkt::pod::{self, Pod, PodState};
use std::sync::Arc;
use tonic::Status;

fn value(v: u64) -> Option<cri::UInt64Value> {
    Some(cri::UInt64Value { value: v })
}

/// CPU and memory of one sample as CRI reports them.
fn cpu_memory(s: &Sample) -> (Option<cri::CpuUsage>, Option<cri::MemoryUsage>) {
    let now = s.at;
    let cpu = s.usage.cpu_ns.map(|ns| cri::CpuUsage {
        timestamp: now,
        usage_core_nano_seconds: value(ns),
        usage_nano_cores: s.cpu_rate.and_then(value),
        psi: None,
    });
    let memory = s.usage.memory.map(|m| cri::MemoryUsage {
        timestamp: now,
        working_set_bytes: value(m.working_set_bytes),
        available_bytes: m.available_bytes.and_then(value),
        usage_bytes: value(m.usage_bytes),
        rss_bytes: value(m.rss_bytes),
        page_faults: value(m.page_faults),
        major_page_faults: value(m.major_page_faults),
        psi: None,
    });
    (cpu, memory)
}

/// Stats of one running app of `pod`, whose status was just read.
fn container_stats_of(
    rt: &Runtime,
    pod: &Pod,
    app: &rkt::schema::RuntimeApp,
    status: cri::ContainerStatus,
    sub: Option<&str>,
) -> cri::ContainerStats {
    let (sample, writable) = stats::app_sample(rt, pod, &app.name, &status.id, sub);
    let now = sample.at;
    let (cpu, memory) = cpu_memory(&sample);
    let writable_layer = writable.map(|(bytes, inodes)| cri::FilesystemUsage {
        timestamp: now,
        fs_id: Some(cri::FilesystemIdentifier { mountpoint: rt.data.root().display().to_string() }),
        used_bytes: value(bytes),
        inodes_used: value(inodes),
    });
    cri::ContainerStats {
        attributes: Some(cri::ContainerAttributes {
            id: status.id,
            metadata: status.metadata,
            labels: status.labels,
            annotations: status.annotations,
        }),
        cpu,
        memory,
        writable_layer,
        swap: None,
        io: None,
    }
}

/// The running apps of a running pod, with their stats.
fn running_containers(rt: &Runtime, view: &PodView) -> Vec<cri::ContainerStats> {
    let pod = &view.sandbox.pod;
    stats::running_apps(view)
        .map(|(a, status)| container_stats_of(rt, pod, a, status.clone(), view.subcgroup.as_deref()))
        .collect()
}

pub(crate) async fn container_stats(
    rt: &Runtime,
    req: cri::ContainerStatsRequest,
) -> Result<cri::ContainerStatsResponse, Status> {
    let t = crate::container::open(rt, &req.container_id)?;
    if !t.running {
        return Err(Status::not_found(format!("container {} has no stats: its pod is not running", req.container_id)));
    }
    tokio::task::block_in_place(|| {
        let sub = t.pod.read_file(pod::SUBCGROUP_FILE).ok().flatten();
        let status = status_of(&t.pod, &t.app, true);
        Ok(cri::ContainerStatsResponse { stats: Some(container_stats_of(rt, &t.pod, &t.app, status, sub.as_deref())) })
    })
}

pub(crate) async fn list_container_stats(
    rt: &Runtime,
    req: cri::ListContainerStatsRequest,
) -> Result<cri::ListContainerStatsResponse, Status> {
    let filter = req.filter.unwrap_or_default();
    tokio::task::block_in_place(|| {
        let views: Vec<Arc<PodView>> = list_views(rt)
            .map_err(pod_status)?
            .into_iter()
            .filter(|v| {
                v.sandbox.state == PodState::Running
                    && v.sandbox.pod.uuid().to_string().starts_with(&filter.pod_sandbox_id)
            })
            .collect();
        let stats = par_flat_map(&views, |view| {
            running_containers(rt, view)
                .into_iter()
                .filter(|s| {
                    s.attributes.as_ref().is_some_and(|a| {
                        a.id.starts_with(&filter.id)
                            && filter.label_selector.iter().all(|(k, v)| a.labels.get(k) == Some(v))
                    })
                })
                .collect()
        });
        Ok(cri::ListContainerStatsResponse { stats })
    })
}

/// Pods per thread below which a list of stats is read on one thread.
const PAR_MIN: usize = 8;

/// `f` over `items` on up to one thread per CPU (at most 4), results in
/// order: every pod's stats are a few dozen independent file reads, and the
/// lists are what kubelet polls.
pub(super) fn par_flat_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> Vec<R> + Sync) -> Vec<R> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
    let workers = cpus.min(items.len() / PAR_MIN).max(1);
    if workers == 1 {
        return items.iter().flat_map(&f).collect();
    }
    let chunk = items.len().div_ceil(workers);
    std::thread::scope(|s| {
        let handles: Vec<_> =
            items.chunks(chunk).map(|c| s.spawn(|| c.iter().flat_map(&f).collect::<Vec<R>>())).collect();
        // a worker that panicked loses its pods' stats, not the call
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    })
}

pub(super) fn pod_stats_of(rt: &Runtime, pod_view: &PodView) -> cri::PodSandboxStats {
    let sample = stats::pod_sample(rt, pod_view);
    let (now, usage) = (sample.at, &sample.usage);
    let view = &pod_view.sandbox;
    let id = view.pod.uuid().to_string();
    let (cpu, memory) = cpu_memory(&sample);
    let host_network = pod_meta::namespace_options(&view.manifest).network == cri::NamespaceMode::Node as i32;
    let network = (!host_network)
        .then(|| pod_view.sandbox_pid.and_then(|p| crate::stage1::inject::pod_pid1(p).ok()))
        .flatten()
        .map(|pid1| {
            let interfaces: Vec<cri::NetworkInterfaceUsage> = crate::net::netns::counters_of(pid1)
                .unwrap_or_default()
                .into_iter()
                .map(|i| cri::NetworkInterfaceUsage {
                    name: i.name,
                    rx_bytes: value(i.rx_bytes),
                    rx_errors: value(i.rx_errors),
                    tx_bytes: value(i.tx_bytes),
                    tx_errors: value(i.tx_errors),
                })
                .collect();
            let default_interface =
                interfaces.iter().find(|i| i.name == "eth0").or_else(|| interfaces.first()).cloned();
            cri::NetworkUsage { timestamp: now, default_interface, interfaces }
        });
    cri::PodSandboxStats {
        attributes: Some(cri::PodSandboxAttributes {
            id,
            metadata: Some(pod_meta::metadata(&view.manifest)),
            labels: pod_meta::labels(&view.manifest),
            annotations: pod_meta::annotations(&view.manifest),
        }),
        linux: Some(cri::LinuxPodSandboxStats {
            cpu,
            memory,
            network,
            process: usage.processes.map(|n| cri::ProcessUsage { timestamp: now, process_count: value(n) }),
            containers: running_containers(rt, pod_view),
            io: None,
        }),
        windows: None,
    }
}

pub(crate) async fn pod_sandbox_stats(
    rt: &Runtime,
    req: cri::PodSandboxStatsRequest,
) -> Result<cri::PodSandboxStatsResponse, Status> {
    super::required(&req.pod_sandbox_id, "pod_sandbox_id")?;
    tokio::task::block_in_place(|| {
        let view = rt.pods.view_of(&rt.manifests, &req.pod_sandbox_id).map_err(pod_status)?;
        if !view.sandbox.ready {
            return Err(Status::not_found(format!("pod {} has no stats: it is not ready", req.pod_sandbox_id)));
        }
        Ok(cri::PodSandboxStatsResponse { stats: Some(pod_stats_of(rt, &view)) })
    })
}

pub(crate) async fn list_pod_sandbox_stats(
    rt: &Runtime,
    req: cri::ListPodSandboxStatsRequest,
) -> Result<cri::ListPodSandboxStatsResponse, Status> {
    let filter = req.filter.unwrap_or_default();
    tokio::task::block_in_place(|| {
        let views = stats::ready_pods(rt, &filter.id, &filter.label_selector).map_err(pod_status)?;
        let stats = par_flat_map(&views, |v| vec![pod_stats_of(rt, v)]);
        Ok(cri::ListPodSandboxStatsResponse { stats })
    })
}
