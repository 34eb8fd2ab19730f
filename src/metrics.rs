//! Prometheus metrics: per-RPC latency histograms and call counts by status
//! code (recorded by every CRI call), image pull bytes, and, read when
//! scraped, pods and containers by state and the image store's size. Served
//! as Prometheus text on an optional loopback HTTP listener
//! (`--metrics-address`, off by default). The HTTP side is one GET answered
//! and closed: a scrape needs no more.

use crate::runtime::Runtime;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Upper bounds of the latency buckets, seconds (CRI calls span 0.1 ms to seconds).
const BUCKETS: [f64; 14] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

#[derive(Debug, Default, Clone)]
struct Histogram {
    /// Cumulative counts per bucket, then +Inf.
    counts: [u64; BUCKETS.len() + 1],
    sum: f64,
}

#[derive(Debug, Default)]
struct Recorded {
    latency: BTreeMap<&'static str, Histogram>,
    calls: BTreeMap<(&'static str, String), u64>,
    pulled_bytes: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Metrics {
    recorded: Mutex<Recorded>,
}

/// The process's metrics (CRI calls are recorded wherever they are served).
pub(crate) fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::default)
}

impl Metrics {
    /// One CRI call: its method, how long it took, its gRPC code's name (`Ok`, `NotFound`...).
    pub(crate) fn record_call(&self, method: &'static str, took: Duration, code: String) {
        crate::base::heap::note_call();
        let Ok(mut r) = self.recorded.lock() else { return };
        let secs = took.as_secs_f64();
        let h = r.latency.entry(method).or_default();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                h.counts[i] += 1;
            }
        }
        h.counts[BUCKETS.len()] += 1;
        h.sum += secs;
        *r.calls.entry((method, code)).or_default() += 1;
    }

    /// Bytes of a pulled image (as stored: its layers as downloaded).
    pub(crate) fn record_pull(&self, bytes: u64) {
        if let Ok(mut r) = self.recorded.lock() {
            r.pulled_bytes += bytes;
        }
    }

    /// The Prometheus text of what was recorded plus `live` gauges.
    fn render(&self, live: &Live) -> String {
        let mut out = String::new();
        let Ok(r) = self.recorded.lock() else { return out };
        out.push_str("# HELP rktlet_cri_request_duration_seconds CRI call latency.\n");
        out.push_str("# TYPE rktlet_cri_request_duration_seconds histogram\n");
        for (method, h) in &r.latency {
            for (i, bound) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "rktlet_cri_request_duration_seconds_bucket{{method=\"{method}\",le=\"{bound}\"}} {}",
                    h.counts[i]
                );
            }
            let total = h.counts[BUCKETS.len()];
            let _ =
                writeln!(out, "rktlet_cri_request_duration_seconds_bucket{{method=\"{method}\",le=\"+Inf\"}} {total}");
            let _ = writeln!(out, "rktlet_cri_request_duration_seconds_sum{{method=\"{method}\"}} {}", h.sum);
            let _ = writeln!(out, "rktlet_cri_request_duration_seconds_count{{method=\"{method}\"}} {total}");
        }
        out.push_str("# HELP rktlet_cri_requests_total CRI calls by method and gRPC code.\n");
        out.push_str("# TYPE rktlet_cri_requests_total counter\n");
        for ((method, code), n) in &r.calls {
            let _ = writeln!(out, "rktlet_cri_requests_total{{method=\"{method}\",code=\"{code}\"}} {n}");
        }
        out.push_str("# HELP rktlet_image_pulled_bytes_total Bytes of images pulled (layers as downloaded).\n");
        out.push_str("# TYPE rktlet_image_pulled_bytes_total counter\n");
        let _ = writeln!(out, "rktlet_image_pulled_bytes_total {}", r.pulled_bytes);
        out.push_str("# HELP rktlet_pods Pod sandboxes by state.\n# TYPE rktlet_pods gauge\n");
        for (state, n) in &live.pods {
            let _ = writeln!(out, "rktlet_pods{{state=\"{state}\"}} {n}");
        }
        out.push_str("# HELP rktlet_containers Containers by state.\n# TYPE rktlet_containers gauge\n");
        for (state, n) in &live.containers {
            let _ = writeln!(out, "rktlet_containers{{state=\"{state}\"}} {n}");
        }
        out.push_str("# HELP rktlet_image_store_bytes Bytes used by the image store.\n");
        out.push_str("# TYPE rktlet_image_store_bytes gauge\n");
        let _ = writeln!(out, "rktlet_image_store_bytes {}", live.store_bytes);
        let p = &live.pool;
        for (name, kind, help, value) in [
            ("rktlet_pod_pool_size", "gauge", "Configured pod pool size (0: off).", p.size as f64),
            ("rktlet_pod_pool_ready", "gauge", "Pool pods booted and waiting.", p.ready as f64),
            ("rktlet_pod_pool_takes_total", "counter", "Pod starts served from the pool.", p.takes as f64),
            ("rktlet_pod_pool_misses_total", "counter", "Pod starts that found the pool empty.", p.misses as f64),
            (
                "rktlet_pod_pool_discarded_total",
                "counter",
                "Pool pods found dead or failing to adapt.",
                p.discarded as f64,
            ),
            ("rktlet_pod_pool_boots_total", "counter", "Pool pods booted.", p.boots as f64),
            (
                "rktlet_pod_pool_boot_cpu_seconds_total",
                "counter",
                "CPU time the pool's boots used.",
                p.boot_cpu_ms_mean * p.boots as f64 / 1e3,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        }
        out
    }
}

/// Figures read at scrape time.
#[derive(Debug, Default)]
struct Live {
    pods: BTreeMap<String, u64>,
    containers: BTreeMap<String, u64>,
    store_bytes: u64,
    pool: crate::pool::PoolInfo,
}

async fn live(rt: &Runtime) -> Live {
    use crate::proto::v1 as cri;
    use rkt::pod::PodDir;
    let mut l = Live::default();
    // the pods in run/, as ListPodSandbox and ListContainers see them (from the pod table)
    let in_run =
        |pods: &[(uuid::Uuid, PodDir)]| Ok(pods.iter().filter(|(_, dir)| *dir == PodDir::Run).copied().collect());
    if let Ok(views) = rt.pods.views(&rt.manifests, in_run) {
        for (uuid, view) in views {
            match view {
                // the pods kubelet sees: CRI-made ones
                Ok(v) if v.sandbox.manifest.is_kubernetes_pod() => {
                    let state = if v.sandbox.ready { "ready" } else { "notready" };
                    *l.pods.entry(state.into()).or_default() += 1;
                }
                Ok(_) | Err(rkt::pod::PodError::NotFound(_)) => {}
                Err(e) => tracing::warn!(pod = %uuid, error = %e, "skipping unreadable pod"),
            }
        }
    }
    rt.wait_reconciled().await;
    if let Ok(views) = rt.pods.views(&rt.manifests, in_run) {
        for view in views.into_iter().filter_map(|(_, v)| v.ok()) {
            for c in &view.containers {
                let state = cri::ContainerState::try_from(c.state)
                    .map_or("unknown".to_string(), |s| s.as_str_name().trim_start_matches("CONTAINER_").to_lowercase());
                *l.containers.entry(state).or_default() += 1;
            }
        }
    }
    l.store_bytes = tokio::task::block_in_place(|| rt.images.usage().0);
    l.pool = rt.pool.info();
    l
}

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub(crate) async fn serve(listener: tokio::net::TcpListener, rt: Arc<Runtime>) {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else { continue };
        let rt = rt.clone();
        tokio::spawn(async move {
            // the whole head, however the client's bytes are segmented
            let head =
                tokio::time::timeout(Duration::from_secs(10), crate::base::http_head::read_head(&mut conn)).await;
            let (status, body) = match head {
                Ok(Ok(Some(h))) if h.method == "GET" && (h.path == "/metrics" || h.path == "/") => {
                    ("200 OK", global().render(&live(&rt).await))
                }
                Ok(Ok(Some(_))) => ("404 Not Found", "only GET /metrics is served\n".to_string()),
                Ok(Err(_)) => return,
                _ => ("400 Bad Request", "malformed or incomplete request head\n".to_string()),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(body.as_bytes()).await;
            let _ = conn.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_counts_per_code() {
        let m = Metrics::default();
        m.record_call("Version", Duration::from_micros(200), "Ok".into());
        m.record_call("Version", Duration::from_millis(3), "Ok".into());
        m.record_call("Version", Duration::from_secs(9), "NotFound".into());
        m.record_pull(1234);
        let text = m.render(&Live::default());
        assert!(
            text.contains("rktlet_cri_request_duration_seconds_bucket{method=\"Version\",le=\"0.00025\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("rktlet_cri_request_duration_seconds_bucket{method=\"Version\",le=\"0.005\"} 2\n"));
        assert!(text.contains("rktlet_cri_request_duration_seconds_bucket{method=\"Version\",le=\"5\"} 2\n"));
        assert!(text.contains("rktlet_cri_request_duration_seconds_bucket{method=\"Version\",le=\"+Inf\"} 3\n"));
        assert!(text.contains("rktlet_cri_request_duration_seconds_count{method=\"Version\"} 3\n"));
        assert!(text.contains("rktlet_cri_requests_total{method=\"Version\",code=\"Ok\"} 2\n"));
        assert!(text.contains("rktlet_cri_requests_total{method=\"Version\",code=\"NotFound\"} 1\n"));
        assert!(text.contains("rktlet_image_pulled_bytes_total 1234\n"));
    }
}
