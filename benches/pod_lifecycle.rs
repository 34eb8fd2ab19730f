//! End-to-end pod sandbox figures through the real daemon and CRI socket:
//! RunPodSandbox until ready, PodSandboxStatus, ListPodSandbox with 50 pods,
//! StopPodSandbox, RemovePodSandbox. Prints medians (and quartiles).
//!
//! Run: `cargo bench --bench pod_lifecycle` (as root; boots real pods).
//! `ROUNDS=N` sets the number of lifecycles (default 20), `NET=host|pod` the
//! pod network (default pod when a CNI config is installed, else host).

#[path = "../tests/common/mod.rs"]
mod common;

use rktlet::proto::v1 as cri;
use std::time::{Duration, Instant};

fn summary(name: &str, mut xs: Vec<Duration>) {
    xs.sort();
    let q = |p: f64| xs[((xs.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e3;
    println!("{name:<34} median {:>8.3} ms   p25 {:>8.3}   p75 {:>8.3}   n={}", q(0.5), q(0.25), q(0.75), xs.len());
}

fn config(name: &str, host: bool) -> cri::PodSandboxConfig {
    let c = common::pod_config(name, &[("bench", "yes")]);
    if host { common::host_network(c) } else { c }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo test --all-targets` runs this without `--bench`: a one-round smoke run on host network
    let smoke = !std::env::args().any(|a| a == "--bench");
    let default_rounds = if smoke { 1 } else { 20 };
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default_rounds);
    let list_pods = if smoke { 3 } else { 50 };
    let host = smoke
        || match std::env::var("NET").as_deref() {
            Ok("host") => true,
            Ok("pod") => false,
            _ => !std::path::Path::new(&std::env::var("CNI_CONF_DIR").unwrap_or_else(|_| "/etc/cni/net.d".into()))
                .read_dir()
                .map(|mut d| d.next().is_some())
                .unwrap_or(false),
        };
    let conf_dir = std::env::var("CNI_CONF_DIR").unwrap_or_else(|_| "/etc/cni/net.d".into());
    let conf_dir = if host { "/nonexistent" } else { conf_dir.as_str() };
    let d = common::Daemon::start(&["--cni-conf-dir", conf_dir]);
    let mut rt = d.runtime().await;
    println!("pod network: {}", if host { "host" } else { "pod (CNI)" });

    let mut floor = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        rt.version(cri::VersionRequest::default()).await.expect("version");
        floor.push(t.elapsed());
    }
    summary("Version (gRPC round-trip floor)", floor);
    let (mut run, mut stop, mut rm, mut status) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        let t = Instant::now();
        let id = rt
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config(&format!("b{i}"), host)),
                runtime_handler: String::new(),
            })
            .await
            .expect("run")
            .into_inner()
            .pod_sandbox_id;
        run.push(t.elapsed());
        for _ in 0..5 {
            let t = Instant::now();
            rt.pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: id.clone(), verbose: false })
                .await
                .expect("status");
            status.push(t.elapsed());
        }
        let t = Instant::now();
        rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("stop");
        stop.push(t.elapsed());
        let t = Instant::now();
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id }).await.expect("remove");
        rm.push(t.elapsed());
    }
    summary("RunPodSandbox (until ready)", run);
    summary("PodSandboxStatus", status);
    summary("StopPodSandbox", stop);
    summary("RemovePodSandbox", rm);

    let mut ids = Vec::new();
    for i in 0..list_pods {
        let id = rt
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config(&format!("l{i}"), host)),
                runtime_handler: String::new(),
            })
            .await
            .expect("run")
            .into_inner()
            .pod_sandbox_id;
        ids.push(id);
    }
    let mut list = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let n = rt
            .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
            .await
            .expect("list")
            .into_inner()
            .items
            .len();
        list.push(t.elapsed());
        assert_eq!(n, list_pods);
    }
    summary(&format!("ListPodSandbox ({list_pods} pods)"), list);
    let mut status50 = Vec::new();
    for id in &ids {
        let t = Instant::now();
        rt.pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: id.clone(), verbose: false })
            .await
            .expect("status");
        status50.push(t.elapsed());
    }
    summary(&format!("PodSandboxStatus ({list_pods} pods present)"), status50);
    for id in ids {
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id }).await.expect("remove");
    }
    phases(&d.log());
}

/// Medians of the daemon's own phase timestamps (debug log) for RunPodSandbox.
fn phases(log: &str) {
    for phase in ["sandbox exec'd nspawn", "CNI ADD done", "pod ready"] {
        let xs: Vec<Duration> = log
            .lines()
            .filter(|l| l.contains(phase))
            .filter_map(|l| l.split("micros=").nth(1)?.split_whitespace().next()?.parse().ok())
            .map(Duration::from_micros)
            .collect();
        if !xs.is_empty() {
            summary(&format!("  phase: {phase}"), xs);
        }
    }
}
