//! The verbs kubelet calls all the time (reads, and ExecSync for probes), through the real daemon and CRI
//! socket, next to the gRPC round-trip floor (Version): PodSandboxStatus,
//! ContainerStatus, ListPodSandbox, ListContainers, and the stats and metrics
//! lists, with N pods (default 50), each running one container. Medians and
//! quartiles.
//!
//! Run: `cargo bench --bench read_paths` (root; boots real pods on the host
//! network). `N=...` sets the pod count, `ROUNDS=...` the calls per verb.

#[path = "../tests/common/mod.rs"]
mod common;

use rktlet::proto::v1 as cri;
use std::future::Future;
use std::time::{Duration, Instant};

fn summary(name: &str, mut xs: Vec<Duration>) {
    xs.sort();
    let q = |p: f64| xs[((xs.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e3;
    println!("{name:<34} median {:>8.3} ms   p25 {:>8.3}   p75 {:>8.3}   n={}", q(0.5), q(0.25), q(0.75), xs.len());
}

async fn time<F: Future<Output = ()>>(rounds: usize, mut call: impl FnMut() -> F) -> Vec<Duration> {
    let mut xs = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        call().await;
        xs.push(t.elapsed());
    }
    xs
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo test --all-targets` runs this without `--bench`: a 2-pod smoke run
    let smoke = !std::env::args().any(|a| a == "--bench");
    let env = |k: &str, d: usize| std::env::var(k).ok().and_then(|s| s.parse().ok()).unwrap_or(d);
    let n = env("N", if smoke { 2 } else { 50 });
    let rounds = env("ROUNDS", if smoke { 5 } else { 500 });
    let d = common::Daemon::start(&[]);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let logs = tempfile::tempdir().expect("logs");
    let (mut pods, mut containers) = (Vec::new(), Vec::new());
    for i in 0..n {
        let mut config = common::host_network(common::pod_config(&format!("read{i}"), &[("bench", "read")]));
        config.log_directory = logs.path().join(format!("p{i}")).display().to_string();
        let pod = common::run_pod(&mut rt, &config).await;
        let c =
            common::create_container(&mut rt, &pod, &config, common::container_config("c", &image, &["sleep", "1000"]))
                .await;
        rt.start_container(cri::StartContainerRequest { container_id: c.clone() }).await.expect("start");
        pods.push(pod);
        containers.push(c);
    }
    println!("{n} pods on the host network, one running container each");
    let rt2 = rt.clone();
    summary(
        "Version (gRPC floor)",
        time(rounds, || {
            let mut rt = rt2.clone();
            async move {
                rt.version(cri::VersionRequest::default()).await.expect("version");
            }
        })
        .await,
    );
    let (pod, c) = (pods[n / 2].clone(), containers[n / 2].clone());
    summary(
        "PodSandboxStatus",
        time(rounds, || {
            let (mut rt, id) = (rt2.clone(), pod.clone());
            async move {
                let s = rt
                    .pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: id, verbose: false })
                    .await
                    .expect("status")
                    .into_inner();
                assert_eq!(s.status.map(|s| s.state), Some(cri::PodSandboxState::SandboxReady as i32));
            }
        })
        .await,
    );
    summary(
        "ContainerStatus",
        time(rounds, || {
            let (mut rt, id) = (rt2.clone(), c.clone());
            async move {
                let s = rt
                    .container_status(cri::ContainerStatusRequest { container_id: id, verbose: false })
                    .await
                    .expect("status")
                    .into_inner();
                assert_eq!(s.status.map(|s| s.state), Some(cri::ContainerState::ContainerRunning as i32));
            }
        })
        .await,
    );
    summary(
        &format!("ListPodSandbox ({n} pods)"),
        time(rounds, || {
            let mut rt = rt2.clone();
            async move {
                let l = rt.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }).await.expect("list");
                assert_eq!(l.into_inner().items.len(), n);
            }
        })
        .await,
    );
    summary(
        &format!("ListContainers ({n} pods)"),
        time(rounds, || {
            let mut rt = rt2.clone();
            async move {
                let l = rt.list_containers(cri::ListContainersRequest { filter: None }).await.expect("list");
                assert_eq!(l.into_inner().containers.len(), n);
            }
        })
        .await,
    );
    summary(
        "ExecSync /bin/true (a probe)",
        time(rounds / 2, || {
            let (mut rt, id) = (rt2.clone(), c.clone());
            async move {
                let r = rt
                    .exec_sync(cri::ExecSyncRequest { container_id: id, cmd: vec!["/bin/true".into()], timeout: 5 })
                    .await
                    .expect("exec");
                assert_eq!(r.into_inner().exit_code, 0);
            }
        })
        .await,
    );
    summary(
        &format!("ListContainerStats ({n} containers)"),
        time(rounds / 5, || {
            let mut rt = rt2.clone();
            async move {
                let l = rt.list_container_stats(cri::ListContainerStatsRequest { filter: None }).await.expect("stats");
                assert_eq!(l.into_inner().stats.len(), n);
            }
        })
        .await,
    );
    summary(
        &format!("ListPodSandboxStats ({n} pods)"),
        time(rounds / 5, || {
            let mut rt = rt2.clone();
            async move {
                let l =
                    rt.list_pod_sandbox_stats(cri::ListPodSandboxStatsRequest { filter: None }).await.expect("stats");
                assert_eq!(l.into_inner().stats.len(), n);
            }
        })
        .await,
    );
    summary(
        &format!("ListPodSandboxMetrics ({n} pods)"),
        time(rounds / 5, || {
            let mut rt = rt2.clone();
            async move {
                let l = rt.list_pod_sandbox_metrics(cri::ListPodSandboxMetricsRequest {}).await.expect("metrics");
                assert_eq!(l.into_inner().pod_metrics.len(), n);
            }
        })
        .await,
    );
    for pod in &pods {
        rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("stop");
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    }
}
