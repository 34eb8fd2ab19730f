//! The Prometheus metrics listener: off by default, loopback only, and a
//! scrape that parses as Prometheus text and counts the calls made.

mod common;

use common::Daemon;
use common::ports::free_port;
use rktlet::proto::v1 as cri;
use std::io::{Read, Write};

fn scrape(port: u16, path: &str) -> (String, String) {
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to the metrics listener");
    write!(conn, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("request");
    let mut text = String::new();
    conn.read_to_string(&mut text).expect("response");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    (head.to_string(), body.to_string())
}

/// `name{labels} value` samples; fails on any line that is not a comment or a sample.
fn samples(body: &str) -> Vec<(String, f64)> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {l:?}"));
            (name.to_string(), value.parse().unwrap_or_else(|_| panic!("not a number in {l:?}")))
        })
        .collect()
}

fn value(s: &[(String, f64)], name: &str) -> f64 {
    s.iter().find(|(n, _)| n == name).map_or(0.0, |(_, v)| *v)
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_the_calls_made() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let d = Daemon::start(&["--metrics-address", &addr]);
    let mut rt = d.runtime().await;
    for _ in 0..3 {
        rt.version(cri::VersionRequest::default()).await.expect("Version");
    }
    let e = rt
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: "00000000-0000-4000-8000-000000000000".into(),
            verbose: false,
        })
        .await
        .expect_err("no such pod");
    assert_eq!(e.code(), tonic::Code::NotFound);

    let (head, body) = scrape(port, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200") && head.contains("text/plain; version=0.0.4"), "{head}");
    let s = samples(&body);
    assert_eq!(value(&s, "rktlet_cri_requests_total{method=\"Version\",code=\"Ok\"}"), 3.0, "{body}");
    assert_eq!(value(&s, "rktlet_cri_requests_total{method=\"PodSandboxStatus\",code=\"NotFound\"}"), 1.0);
    assert_eq!(value(&s, "rktlet_cri_request_duration_seconds_count{method=\"Version\"}"), 3.0);
    assert_eq!(value(&s, "rktlet_cri_request_duration_seconds_bucket{method=\"Version\",le=\"+Inf\"}"), 3.0);
    // buckets never decrease
    let buckets: Vec<f64> = s
        .iter()
        .filter(|(n, _)| n.starts_with("rktlet_cri_request_duration_seconds_bucket{method=\"Version\""))
        .map(|(_, v)| *v)
        .collect();
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    assert!(body.contains("# TYPE rktlet_pods gauge") && body.contains("rktlet_image_store_bytes "), "{body}");
    let (head, _) = scrape(port, "/other");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_pods_and_containers_by_state() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let d = Daemon::start(&["--metrics-address", &addr]);
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let config = common::host_network(common::pod_config("metrics", &[]));
    let pod = common::run_pod(&mut rt, &config).await;
    common::create_container(&mut rt, &pod, &config, common::container_config("c", &image, &["sleep", "60"])).await;
    let s = samples(&scrape(port, "/metrics").1);
    assert_eq!(value(&s, "rktlet_pods{state=\"ready\"}"), 1.0, "{s:?}");
    assert_eq!(value(&s, "rktlet_containers{state=\"created\"}"), 1.0, "{s:?}");

    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("stop");
    let s = samples(&scrape(port, "/metrics").1);
    assert_eq!(value(&s, "rktlet_pods{state=\"ready\"}"), 0.0, "{s:?}");
    assert_eq!(value(&s, "rktlet_pods{state=\"notready\"}"), 1.0, "{s:?}");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod }).await.expect("remove");
}

#[test]
fn a_non_loopback_metrics_address_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = std::process::Command::new(common::BIN)
        .arg("serve")
        .arg("--socket")
        .arg(dir.path().join("s.sock"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--metrics-address", "0.0.0.0:9095"])
        .output()
        .expect("run serve");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a loopback address"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
