//! End-to-end container figures through the real daemon: CreateContainer,
//! StartContainer, ContainerStatus, ListContainers (100 containers),
//! StopContainer (an app that honours SIGTERM), RemoveContainer. Medians.
//!
//! Run: `cargo bench --bench container_lifecycle` (root; starts the test
//! registry fixture and a real pod). `N=...` sets the container count;
//! containers get a PID namespace each (kubelet's default), or share the
//! pod's with `PID_NS=pod`. `BENCH_DAEMON_LOG=<file>` keeps the daemon's
//! debug log (per-phase timings of each call).

#[path = "../tests/common/mod.rs"]
mod common;

use rktlet::proto::v1 as cri;
use std::time::{Duration, Instant};

fn summary(name: &str, mut xs: Vec<Duration>) {
    xs.sort();
    let q = |p: f64| xs[((xs.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e3;
    println!("{name:<32} median {:>8.3} ms   p25 {:>8.3}   p75 {:>8.3}   n={}", q(0.5), q(0.25), q(0.75), xs.len());
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo test --all-targets` runs this without `--bench`: a 2-container smoke run
    let smoke = !std::env::args().any(|a| a == "--bench");
    let n: usize = std::env::var("N").ok().and_then(|s| s.parse().ok()).unwrap_or(if smoke { 2 } else { 100 });
    let pid = match std::env::var("PID_NS").as_deref() {
        Ok("pod") => cri::NamespaceMode::Pod,
        _ => cri::NamespaceMode::Container,
    };
    let d = common::Daemon::start(&[]);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let logs = tempfile::tempdir().expect("logs");
    let mut pod_config = common::host_network(common::pod_config("bench", &[]));
    pod_config.log_directory = logs.path().display().to_string();
    let pod = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(pod_config.clone()), runtime_handler: String::new() })
        .await
        .expect("run pod")
        .into_inner()
        .pod_sandbox_id;

    let (mut create, mut start, mut status, mut stop, mut remove, mut list) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut ids, mut status_again) = (Vec::new(), Vec::new());
    for i in 0..n {
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: format!("c{i}"), attempt: 0 }),
            image: Some(cri::ImageSpec { image: image.clone(), ..Default::default() }),
            // a PID 1 without a handler would ignore SIGTERM
            command: vec!["sh".into(), "-c".into(), "trap 'exit 0' TERM; sleep 1000 & wait".into()],
            log_path: format!("c{i}.log"),
            linux: Some(cri::LinuxContainerConfig {
                security_context: Some(cri::LinuxContainerSecurityContext {
                    namespace_options: Some(cri::NamespaceOption { pid: pid as i32, ..Default::default() }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let t = Instant::now();
        let id = rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: pod.clone(),
                config: Some(config),
                sandbox_config: Some(pod_config.clone()),
            })
            .await
            .expect("create")
            .into_inner()
            .container_id;
        create.push(t.elapsed());
        let t = Instant::now();
        rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("start");
        start.push(t.elapsed());
        let t = Instant::now();
        rt.container_status(cri::ContainerStatusRequest { container_id: id.clone(), verbose: false })
            .await
            .expect("status");
        status.push(t.elapsed());
        let t = Instant::now();
        rt.container_status(cri::ContainerStatusRequest { container_id: id.clone(), verbose: false })
            .await
            .expect("status");
        status_again.push(t.elapsed());
        ids.push(id);
    }
    for _ in 0..if smoke { 2 } else { 20 } {
        let t = Instant::now();
        let got = rt.list_containers(cri::ListContainersRequest { filter: None }).await.expect("list").into_inner();
        list.push(t.elapsed());
        assert_eq!(got.containers.len(), n);
    }
    for id in &ids {
        let t = Instant::now();
        rt.stop_container(cri::StopContainerRequest { container_id: id.clone(), timeout: 10 }).await.expect("stop");
        stop.push(t.elapsed());
        let t = Instant::now();
        rt.remove_container(cri::RemoveContainerRequest { container_id: id.clone() }).await.expect("remove");
        remove.push(t.elapsed());
    }
    let create_start: Vec<Duration> = create.iter().zip(&start).map(|(a, b)| *a + *b).collect();
    summary("CreateContainer", create);
    summary("StartContainer", start);
    summary("Create + Start", create_start);
    summary("ContainerStatus (first read)", status);
    summary("ContainerStatus (unchanged)", status_again);
    summary(&format!("ListContainers ({n} containers)"), list);
    summary("StopContainer (SIGTERM honoured)", stop);
    summary("RemoveContainer", remove);
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod }).await.expect("remove pod");
    // the daemon's debug log (per-phase timings of each call), for a closer look
    if let Ok(path) = std::env::var("BENCH_DAEMON_LOG") {
        std::fs::write(&path, d.log()).expect("writing BENCH_DAEMON_LOG");
    }
}
