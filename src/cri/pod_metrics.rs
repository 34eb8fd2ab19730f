//! ListMetricDescriptors, ListPodSandboxMetrics and StreamPodSandboxMetrics:
//! the figures ListPodSandboxStats reads, under cAdvisor's metric names and
//! labels, for a kubelet that serves `/metrics/cadvisor` from the runtime
//! (PodAndContainerStatsFromCRI). CRI carries unsigned integers only, so the
//! CPU counter is in whole seconds, as cAdvisor's name says.
//!
//! Labels follow cAdvisor: `container` (CRI name; empty for the pod's own
//! cgroup), `id` (the cgroup path), `image`, `name` (the runtime's id),
//! `namespace` and `pod`; network counters add `interface`.

use super::sandbox_status::{PodView, list_views};
use super::stats::{par_flat_map, pod_stats_of};
use super::{container_meta as meta, pod_meta, pod_status};
use crate::base::time::now_nanos as now_ns;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use std::sync::Arc;
use tonic::Status;

const LABELS: [&str; 6] = ["container", "id", "image", "name", "namespace", "pod"];

/// One metric rktlet reports: name, help, extra label, kind.
struct Desc {
    name: &'static str,
    help: &'static str,
    extra: Option<&'static str>,
    kind: cri::MetricType,
}

const fn gauge(name: &'static str, help: &'static str) -> Desc {
    Desc { name, help, extra: None, kind: cri::MetricType::Gauge }
}

const fn counter(name: &'static str, help: &'static str, extra: Option<&'static str>) -> Desc {
    Desc { name, help, extra, kind: cri::MetricType::Counter }
}

const CPU: &str = "container_cpu_usage_seconds_total";
const MEM_USAGE: &str = "container_memory_usage_bytes";
const MEM_WS: &str = "container_memory_working_set_bytes";
const MEM_RSS: &str = "container_memory_rss";
const MEM_LIMIT: &str = "container_spec_memory_limit_bytes";
const FS_USAGE: &str = "container_fs_usage_bytes";
const FS_INODES: &str = "container_fs_inodes_used";
const START: &str = "container_start_time_seconds";
const LAST_SEEN: &str = "container_last_seen";
const PROCESSES: &str = "container_processes";
const RX: &str = "container_network_receive_bytes_total";
const TX: &str = "container_network_transmit_bytes_total";
const RX_ERR: &str = "container_network_receive_errors_total";
const TX_ERR: &str = "container_network_transmit_errors_total";

const DESCS: [Desc; 14] = [
    counter(CPU, "Cumulative cpu time consumed in seconds.", None),
    gauge(MEM_USAGE, "Current memory usage in bytes, including all memory regardless of when it was accessed"),
    gauge(MEM_WS, "Current working set in bytes."),
    gauge(MEM_RSS, "Size of RSS in bytes."),
    gauge(MEM_LIMIT, "Memory limit for the container."),
    gauge(FS_USAGE, "Number of bytes that are consumed by the container's writable layer."),
    gauge(FS_INODES, "Number of inodes used by the container's writable layer."),
    gauge(START, "Start time of the container since unix epoch in seconds."),
    gauge(LAST_SEEN, "Last time a container was seen by the exporter"),
    gauge(PROCESSES, "Number of processes running inside the container."),
    counter(RX, "Cumulative count of bytes received", Some("interface")),
    counter(TX, "Cumulative count of bytes transmitted", Some("interface")),
    counter(RX_ERR, "Cumulative count of errors encountered while receiving", Some("interface")),
    counter(TX_ERR, "Cumulative count of errors encountered while transmitting", Some("interface")),
];

pub(super) fn descriptors() -> Vec<cri::MetricDescriptor> {
    DESCS
        .iter()
        .map(|d| cri::MetricDescriptor {
            name: d.name.into(),
            help: d.help.into(),
            label_keys: LABELS.iter().copied().chain(d.extra).map(str::to_string).collect(),
        })
        .collect()
}

pub(super) async fn list_metric_descriptors(
    _rt: &Runtime,
    _req: cri::ListMetricDescriptorsRequest,
) -> Result<cri::ListMetricDescriptorsResponse, Status> {
    Ok(cri::ListMetricDescriptorsResponse { descriptors: descriptors() })
}

/// The metrics of every ready pod and its running containers.
pub(super) fn collect(rt: &Runtime) -> Result<Vec<cri::PodSandboxMetrics>, Status> {
    let views: Vec<Arc<PodView>> =
        list_views(rt).map_err(pod_status)?.into_iter().filter(|v| v.sandbox.ready).collect();
    Ok(par_flat_map(&views, |v| vec![pod_metrics(rt, v)]))
}

pub(super) async fn list_pod_sandbox_metrics(
    rt: &Runtime,
    _req: cri::ListPodSandboxMetricsRequest,
) -> Result<cri::ListPodSandboxMetricsResponse, Status> {
    Ok(cri::ListPodSandboxMetricsResponse { pod_metrics: tokio::task::block_in_place(|| collect(rt))? })
}

/// Samples with one set of base labels.
struct Samples {
    labels: Vec<String>,
    at: i64,
    out: Vec<cri::Metric>,
}

impl Samples {
    fn push(&mut self, name: &'static str, value: Option<u64>, extra: Option<&str>) {
        let Some(value) = value else { return };
        let kind = DESCS.iter().find(|d| d.name == name).map_or(cri::MetricType::Gauge, |d| d.kind);
        self.out.push(cri::Metric {
            name: name.into(),
            timestamp: self.at,
            metric_type: kind as i32,
            label_values: self.labels.iter().cloned().chain(extra.map(str::to_string)).collect(),
            value: Some(cri::UInt64Value { value }),
        });
    }

    fn usage(&mut self, cpu: Option<&cri::CpuUsage>, memory: Option<&cri::MemoryUsage>) {
        let v = |x: &Option<cri::UInt64Value>| x.as_ref().map(|v| v.value);
        self.push(CPU, cpu.and_then(|c| v(&c.usage_core_nano_seconds)).map(|ns| ns / 1_000_000_000), None);
        if let Some(m) = memory {
            self.push(MEM_USAGE, v(&m.usage_bytes), None);
            self.push(MEM_WS, v(&m.working_set_bytes), None);
            self.push(MEM_RSS, v(&m.rss_bytes), None);
        }
        self.push(LAST_SEEN, u64::try_from(self.at / 1_000_000_000).ok(), None);
    }
}

fn pod_metrics(rt: &Runtime, view: &PodView) -> cri::PodSandboxMetrics {
    let at = now_ns();
    let stats = pod_stats_of(rt, view);
    let pod_id = view.sandbox.pod.uuid().to_string();
    let pod_meta = pod_meta::metadata(&view.sandbox.manifest);
    let cgroup = format!("/{}", view.subcgroup.as_deref().unwrap_or_default().trim().trim_start_matches('/'));
    let labels = |container: &str, id: String, image: &str, name: &str| {
        vec![container.into(), id, image.into(), name.into(), pod_meta.namespace.clone(), pod_meta.name.clone()]
    };
    let linux = stats.linux.unwrap_or_default();
    let mut pod = Samples { labels: labels("", cgroup.clone(), "", &pod_id), at, out: Vec::new() };
    pod.usage(linux.cpu.as_ref(), linux.memory.as_ref());
    pod.push(PROCESSES, linux.process.as_ref().and_then(|p| p.process_count.as_ref()).map(|c| c.value), None);
    for i in linux.network.as_ref().map(|n| n.interfaces.as_slice()).unwrap_or_default() {
        let v = |x: &Option<cri::UInt64Value>| x.as_ref().map(|v| v.value);
        pod.push(RX, v(&i.rx_bytes), Some(&i.name));
        pod.push(TX, v(&i.tx_bytes), Some(&i.name));
        pod.push(RX_ERR, v(&i.rx_errors), Some(&i.name));
        pod.push(TX_ERR, v(&i.tx_errors), Some(&i.name));
    }
    let container_metrics = linux
        .containers
        .iter()
        .filter_map(|c| {
            let id = c.attributes.as_ref()?.id.clone();
            let (app, status) = view.sandbox.manifest.apps.iter().zip(&view.containers).find(|(_, s)| s.id == id)?;
            let name = status.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
            let image = status.image.as_ref().map(|i| i.image.clone()).unwrap_or_default();
            let mut s =
                Samples { labels: labels(&name, format!("{cgroup}/{}", app.name), &image, &id), at, out: Vec::new() };
            s.usage(c.cpu.as_ref(), c.memory.as_ref());
            s.push(
                MEM_LIMIT,
                Some(meta::limits(app).memory_bytes.and_then(|b| u64::try_from(b).ok()).unwrap_or(0)),
                None,
            );
            if let Some(fs) = &c.writable_layer {
                s.push(FS_USAGE, fs.used_bytes.as_ref().map(|v| v.value), None);
                s.push(FS_INODES, fs.inodes_used.as_ref().map(|v| v.value), None);
            }
            s.push(START, u64::try_from(status.started_at / 1_000_000_000).ok(), None);
            Some(cri::ContainerMetrics { container_id: id, metrics: s.out })
        })
        .collect();
    cri::PodSandboxMetrics { pod_sandbox_id: pod_id, metrics: pod.out, container_metrics }
}
