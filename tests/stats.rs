//! Container and pod stats through the daemon's socket, from real pods:
//! CPU of a busy container (counter and rate), memory, the writable layer it
//! filled, the pod's process count and its network counters after traffic.

mod common;

use common::{Daemon, TestNetwork, assert_no_leaks, pod_config};
use rktlet::proto::v1 as cri;
use std::time::{Duration, Instant};

fn all_ids(ids: &[String]) -> Vec<String> {
    let mut all = ids.to_vec();
    all.sort();
    all
}

fn v(x: &Option<cri::UInt64Value>) -> u64 {
    x.as_ref().map_or(0, |v| v.value)
}

#[tokio::test(flavor = "multi_thread")]
async fn stats_of_a_busy_container_and_its_pod() {
    let scratch = tempfile::tempdir().expect("tmp");
    let net = TestNetwork::new(scratch.path());
    let conf = net.conf_dir.display().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf]);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let mut config = pod_config("statspod", &[]);
    config.log_directory = scratch.path().join("logs").display().to_string();
    let pod = common::run_pod(&mut rt, &config).await;
    let mut ids = Vec::new();
    for (name, script) in [
        ("burner", "head -c 20000000 /dev/zero > /tmp/blob; while true; do :; done"),
        ("idle", "exec sleep 100000"),
        // 50 MB held in a shell variable: anonymous memory in the working set
        ("hog", "x=$(head -c 50000000 /dev/zero | tr '\\0' a); while true; do sleep 1; done"),
    ] {
        let c = cri::ContainerConfig {
            labels: [("role".to_string(), name.to_string())].into(),
            ..common::container_config(name, &image, &["sh", "-c", script])
        };
        let id = common::create_container(&mut rt, &pod, &config, c).await;
        rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("start");
        ids.push(id);
    }
    let burner = ids[0].clone();
    let hog = ids[2].clone();
    let stats = |rt: &mut rktlet::proto::v1::runtime_service_client::RuntimeServiceClient<_>, id: String| {
        let mut rt: rktlet::proto::v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel> =
            rt.clone();
        async move {
            rt.container_stats(cri::ContainerStatsRequest { container_id: id })
                .await
                .expect("ContainerStats")
                .into_inner()
                .stats
                .expect("stats")
        }
    };

    // the writable layer fills with the 20 MB file
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        let s = stats(&mut rt, burner.clone()).await;
        if s.writable_layer.as_ref().is_some_and(|w| v(&w.used_bytes) >= 20_000_000) || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let layer = first.writable_layer.as_ref().expect("writable layer");
    assert!(v(&layer.used_bytes) >= 20_000_000, "{layer:?}");
    assert!(v(&layer.inodes_used) >= 2, "{layer:?}");
    // the same bytes in the container filesystem figure of ImageFsInfo
    let fs_info = d.images().await.image_fs_info(cri::ImageFsInfoRequest {}).await.expect("fsinfo").into_inner();
    let containers_fs = fs_info.container_filesystems.first().expect("container filesystem");
    assert!(v(&containers_fs.used_bytes) >= 20_000_000, "{containers_fs:?}");
    let attrs = first.attributes.as_ref().expect("attributes");
    assert_eq!((attrs.id.as_str(), attrs.labels.get("role").map(String::as_str)), (burner.as_str(), Some("burner")));
    let memory = first.memory.as_ref().expect("memory");
    assert!(v(&memory.usage_bytes) > 0 && v(&memory.working_set_bytes) <= v(&memory.usage_bytes), "{memory:?}");
    let cpu1 = v(&first.cpu.as_ref().expect("cpu").usage_core_nano_seconds);
    assert!(cpu1 > 0);

    // a busy loop: the counter grows and the rate between samples is a large share of a core
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = stats(&mut rt, burner.clone()).await;
    let cpu = second.cpu.as_ref().expect("cpu");
    assert!(v(&cpu.usage_core_nano_seconds) > cpu1);
    assert!(v(&cpu.usage_nano_cores) > 100_000_000, "{cpu:?}");
    let idle = stats(&mut rt, ids[1].clone()).await;
    assert!(v(&idle.cpu.as_ref().expect("cpu").usage_core_nano_seconds) < v(&cpu.usage_core_nano_seconds));

    // 50 MB held by a shell variable are in the hog's working set
    let deadline = Instant::now() + Duration::from_secs(20);
    let held = loop {
        let s = stats(&mut rt, hog.clone()).await;
        let ws = v(&s.memory.as_ref().expect("memory").working_set_bytes);
        if ws >= 50_000_000 || Instant::now() > deadline {
            break ws;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(held >= 50_000_000, "working set {held}");

    // lists and filters
    let lister = rt.clone();
    let list = |filter: cri::ContainerStatsFilter| {
        let mut rt = lister.clone();
        async move {
            let mut ids: Vec<String> = rt
                .list_container_stats(cri::ListContainerStatsRequest { filter: Some(filter) })
                .await
                .expect("ListContainerStats")
                .into_inner()
                .stats
                .into_iter()
                .filter_map(|s| s.attributes.map(|a| a.id))
                .collect();
            ids.sort();
            ids
        }
    };
    let mut all = ids.clone();
    all.sort();
    assert_eq!(list(cri::ContainerStatsFilter { pod_sandbox_id: pod.clone(), ..Default::default() }).await, all);
    let by_label =
        cri::ContainerStatsFilter { label_selector: [("role".into(), "idle".into())].into(), ..Default::default() };
    assert_eq!(list(by_label).await, [ids[1].clone()]);

    // the pod: its processes, its containers, and its interface after a ping from the host
    let ip = rt
        .pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: pod.clone(), verbose: false })
        .await
        .expect("status")
        .into_inner()
        .status
        .and_then(|s| s.network)
        .map(|n| n.ip)
        .expect("pod ip");
    let ping =
        std::process::Command::new("/bin/busybox").args(["ping", "-c", "2", "-W", "2", &ip]).output().expect("ping");
    assert!(ping.status.success(), "ping {ip}: {}", String::from_utf8_lossy(&ping.stdout));
    let ps = rt
        .pod_sandbox_stats(cri::PodSandboxStatsRequest { pod_sandbox_id: pod.clone() })
        .await
        .expect("PodSandboxStats")
        .into_inner()
        .stats
        .and_then(|s| s.linux)
        .expect("linux stats");
    assert!(v(&ps.process.as_ref().expect("process").process_count) >= 3, "{:?}", ps.process);
    assert_eq!(ps.containers.len(), 3);
    assert!(v(&ps.cpu.as_ref().expect("cpu").usage_core_nano_seconds) >= v(&cpu.usage_core_nano_seconds));
    let eth0 = ps.network.as_ref().and_then(|n| n.default_interface.clone()).expect("default interface");
    assert_eq!(eth0.name, "eth0");
    assert!(v(&eth0.rx_bytes) > 0 && v(&eth0.tx_bytes) > 0, "{eth0:?}");
    let listed = rt
        .list_pod_sandbox_stats(cri::ListPodSandboxStatsRequest { filter: None })
        .await
        .expect("ListPodSandboxStats")
        .into_inner()
        .stats;
    assert_eq!(listed.len(), 1);

    // the same figures under cAdvisor's names, as kubelet serves /metrics/cadvisor from CRI
    let descriptors = rt
        .list_metric_descriptors(cri::ListMetricDescriptorsRequest {})
        .await
        .expect("ListMetricDescriptors")
        .into_inner()
        .descriptors;
    let keys: std::collections::HashMap<String, Vec<String>> =
        descriptors.into_iter().map(|d| (d.name, d.label_keys)).collect();
    let pods = rt
        .list_pod_sandbox_metrics(cri::ListPodSandboxMetricsRequest {})
        .await
        .expect("ListPodSandboxMetrics")
        .into_inner()
        .pod_metrics;
    assert_eq!(pods.iter().map(|p| p.pod_sandbox_id.as_str()).collect::<Vec<_>>(), [pod.as_str()]);
    let all: Vec<&cri::Metric> =
        pods[0].metrics.iter().chain(pods[0].container_metrics.iter().flat_map(|c| &c.metrics)).collect();
    for m in &all {
        let k = keys.get(&m.name).unwrap_or_else(|| panic!("{} has no descriptor", m.name));
        assert_eq!(k.len(), m.label_values.len(), "{m:?}");
    }
    let sample = |metrics: &[cri::Metric], name: &str, label: (&str, &str)| -> u64 {
        let k = &keys[name];
        let i = k.iter().position(|k| k == label.0).expect("label key");
        metrics
            .iter()
            .find(|m| m.name == name && m.label_values[i] == label.1)
            .and_then(|m| m.value.as_ref())
            .map_or(0, |v| v.value)
    };
    let of = |id: &str| &pods[0].container_metrics.iter().find(|c| c.container_id == id).expect("container").metrics;
    assert!(sample(of(&hog), "container_memory_working_set_bytes", ("container", "hog")) >= 50_000_000);
    assert!(sample(of(&hog), "container_memory_working_set_bytes", ("pod", "statspod")) >= 50_000_000);
    assert!(sample(of(&burner), "container_fs_usage_bytes", ("name", &burner)) >= 20_000_000);
    assert!(sample(of(&burner), "container_start_time_seconds", ("image", &image)) > 1_600_000_000);
    assert!(sample(&pods[0].metrics, "container_network_receive_bytes_total", ("interface", "eth0")) > 0);
    assert!(sample(&pods[0].metrics, "container_processes", ("container", "")) >= 3);

    // the streaming forms of the lists answer what the lists answer
    use tokio_stream::StreamExt;
    let streamed: Vec<String> = rt
        .stream_containers(cri::StreamContainersRequest { filter: None })
        .await
        .expect("StreamContainers")
        .into_inner()
        .map(|chunk| chunk.expect("chunk").containers)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .flatten()
        .map(|c| c.id)
        .collect();
    let mut streamed = streamed;
    streamed.sort();
    assert_eq!(streamed, all_ids(&ids));
    let metric_chunks: Vec<_> = rt
        .stream_pod_sandbox_metrics(cri::StreamPodSandboxMetricsRequest {})
        .await
        .expect("StreamPodSandboxMetrics")
        .into_inner()
        .collect()
        .await;
    assert_eq!(metric_chunks.into_iter().map(|c| c.expect("chunk").pod_sandbox_metrics.len()).sum::<usize>(), 1);

    // the CLI reads the same figures without the daemon
    let cli = std::process::Command::new(common::BIN)
        .arg("--dir")
        .arg(d.dir.path().join("data"))
        .args(["stats", "--format=json"])
        .output()
        .expect("rktlet stats");
    assert!(cli.status.success(), "{}", String::from_utf8_lossy(&cli.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&cli.stdout).expect("json");
    assert_eq!(rows.len(), 4, "the pod and its three containers: {rows:?}");
    let row = rows.iter().find(|r| r["name"] == "burner").expect("burner row");
    assert!(row["cpu_nano_cores"].as_u64().is_some_and(|n| n > 100_000_000), "{row}");
    assert!(row["writable_layer_bytes"].as_u64().is_some_and(|n| n >= 20_000_000), "{row}");

    // a stopped container has no stats; an unknown one is NotFound
    rt.stop_container(cri::StopContainerRequest { container_id: burner.clone(), timeout: 0 }).await.expect("stop");
    let mut left = vec![ids[1].clone(), hog.clone()];
    left.sort();
    assert_eq!(list(cri::ContainerStatsFilter::default()).await, left);
    let e = rt
        .container_stats(cri::ContainerStatsRequest { container_id: format!("{pod}:0-nothing") })
        .await
        .expect_err("unknown");
    assert_eq!(e.code(), tonic::Code::NotFound);

    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove pod");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}
