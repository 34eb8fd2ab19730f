//! In-place resize on a cgroup v1 (or hybrid) host: a pod's own limits from
//! its pod-level resources and overhead at RunPodSandbox, changed live by
//! UpdatePodSandboxResources, checked where a user looks: the pod's cgroup
//! files and PodSandboxStatus (verbose). Pure cgroup v2 is covered by
//! `tests/cgroup_v2.rs`; there these tests print a `SKIPPED:` line.

mod common;

use common::{Daemon, container_config, host_network, pod_config};
use rktlet::proto::v1 as cri;
use rktlet::proto::v1::runtime_service_client::RuntimeServiceClient;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

const MIB: i64 = 1 << 20;

fn not_v1() -> Option<String> {
    let layout = rktlet::cgroup::Layout::read().expect("layout");
    if layout.v2_root().is_some() {
        return Some("pure cgroup v2 host: tests/cgroup_v2.rs checks pod resizes there".into());
    }
    if !layout.v1_controllers().any(|h| h.controllers.iter().any(|c| c == "memory")) {
        return Some("no cgroup v1 memory controller mounted".into());
    }
    None
}

/// A file of the pod's own cgroup in the hierarchy of `controller`.
fn pod_file(data: &Path, pod: &str, controller: &str, file: &str) -> String {
    let sub = std::fs::read_to_string(data.join("pods/run").join(pod).join("subcgroup")).expect("subcgroup");
    let layout = rktlet::cgroup::Layout::read().expect("layout");
    let h = layout.v1_controllers().find(|h| h.controllers.iter().any(|c| c == controller)).expect("controller");
    let path: PathBuf = h.mount.as_ref().expect("mounted").join(sub.trim()).join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).trim().to_string()
}

/// The pod's memory limit as the kernel has it; `None`: unlimited.
fn pod_memory_limit(data: &Path, pod: &str) -> Option<i64> {
    let v: u64 = pod_file(data, pod, "memory", "memory.limit_in_bytes").parse().expect("number");
    (v < 1 << 62).then(|| i64::try_from(v).expect("fits"))
}

async fn update(
    rt: &mut RuntimeServiceClient<Channel>,
    pod: &str,
    res: cri::LinuxContainerResources,
    overhead: cri::LinuxContainerResources,
) -> Result<(), tonic::Status> {
    rt.update_pod_sandbox_resources(cri::UpdatePodSandboxResourcesRequest {
        pod_sandbox_id: pod.into(),
        resources: Some(res),
        overhead: Some(overhead),
    })
    .await
    .map(drop)
}

async fn start(
    rt: &mut RuntimeServiceClient<Channel>,
    pod: &str,
    pod_config: &cri::PodSandboxConfig,
    config: cri::ContainerConfig,
) -> String {
    let id = common::create_container(rt, pod, pod_config, config).await;
    rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("StartContainer");
    id
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "{what} did not happen in 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_limits_grow_shrink_and_survive_a_restart() {
    if let Some(reason) = not_v1() {
        common::skipped("resize::pod_limits_grow_shrink_and_survive_a_restart", &reason);
        return;
    }
    let mut d = Daemon::start(&[]);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let data = d.dir.path().join("data");
    let logs = tempfile::tempdir().expect("logs");
    let mut config = host_network(pod_config("resize", &[]));
    config.log_directory = logs.path().display().to_string();
    let overhead = common::pod_resources(20 * MIB, 100);
    if let Some(l) = config.linux.as_mut() {
        l.resources = Some(common::pod_resources(300 * MIB, 512));
        l.overhead = Some(overhead.clone());
    }
    let pod = common::run_pod(&mut rt, &config).await;

    // at RunPodSandbox: containers plus overhead on the pod's own cgroup
    assert_eq!(pod_memory_limit(&data, &pod), Some(320 * MIB));
    assert_eq!(pod_file(&data, &pod, "cpu", "cpu.shares"), "612");
    // the CPU quota stays kubelet's pod cgroup's (v1 children may not exceed it)
    assert_eq!(pod_file(&data, &pod, "cpu", "cpu.cfs_quota_us"), "-1");
    let s = common::pod_resources_status(&mut rt, &pod).await;
    assert_eq!(s["resources"]["memoryLimitInBytes"], 300 * MIB, "{s}");
    assert_eq!(s["resources"]["cpuQuota"], 50_000, "{s}");
    assert_eq!(s["overhead"]["memoryLimitInBytes"], 20 * MIB, "{s}");
    assert_eq!(s["podCgroup"]["memoryLimitBytes"], 320 * MIB, "{s}");

    // grow
    update(&mut rt, &pod, common::pod_resources(500 * MIB, 1024), overhead.clone()).await.expect("grow");
    assert_eq!(pod_memory_limit(&data, &pod), Some(520 * MIB));
    assert_eq!(pod_file(&data, &pod, "cpu", "cpu.shares"), "1124");
    let s = common::pod_resources_status(&mut rt, &pod).await;
    assert_eq!(s["resources"]["memoryLimitInBytes"], 500 * MIB, "{s}");
    assert_eq!(s["podCgroup"]["cpuShares"], 1124, "{s}");

    // an app with a memory limit of its own holds 60 MB in the pod
    // (the loop keeps the shell: busybox would exec a last `sleep` in its place)
    let script = "v=$(yes | head -c 60000000); echo filled; while true; do sleep 1; done";
    let mut hog = container_config("hog", &image, &["sh", "-c", script]);
    hog.linux.get_or_insert_default().resources = Some(common::pod_resources(256 * MIB, 2));
    start(&mut rt, &pod, &config, hog).await;
    let hog_log = logs.path().join("hog.log");
    wait_for("hog's 60 MB", || std::fs::read_to_string(&hog_log).is_ok_and(|l| l.contains("filled")));
    let usage: i64 = pod_file(&data, &pod, "memory", "memory.usage_in_bytes").parse().expect("usage");
    assert!(usage > 60_000_000, "the pod's usage counts its apps': {usage}");

    // a shrink below what the pod uses fails and changes nothing
    let err =
        update(&mut rt, &pod, common::pod_resources(20 * MIB, 256), overhead.clone()).await.expect_err("below usage");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("more than the new limit"), "{err:?}");
    assert_eq!(pod_memory_limit(&data, &pod), Some(520 * MIB));
    assert_eq!(pod_file(&data, &pod, "cpu", "cpu.shares"), "1124", "the shares were not written either");
    assert_eq!(common::pod_resources_status(&mut rt, &pod).await["resources"]["memoryLimitInBytes"], 500 * MIB);

    // bad values: refused before anything is written
    for bad in [
        common::pod_resources(-1, 512),
        common::pod_resources(200 * MIB, -3),
        cri::LinuxContainerResources { cpu_quota: 10, ..common::pod_resources(0, 0) },
    ] {
        let err = update(&mut rt, &pod, bad, overhead.clone()).await.expect_err("invalid");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    }
    assert_eq!(pod_memory_limit(&data, &pod), Some(520 * MIB));

    // a shrink the usage allows
    update(&mut rt, &pod, common::pod_resources(200 * MIB, 256), overhead.clone()).await.expect("shrink");
    assert_eq!(pod_memory_limit(&data, &pod), Some(220 * MIB));
    assert_eq!(pod_file(&data, &pod, "cpu", "cpu.shares"), "356");

    // an app without a memory limit: the pod's goes (kubelet's figure leaves it out)
    start(&mut rt, &pod, &config, container_config("free", &image, &["sleep", "1000"])).await;
    assert_eq!(pod_memory_limit(&data, &pod), None);
    let s = common::pod_resources_status(&mut rt, &pod).await;
    assert_eq!(s["resources"]["memoryLimitInBytes"], 200 * MIB, "still recorded: {s}");
    assert!(s["podCgroup"]["memoryLimitBytes"].is_null(), "{s}");

    // a restarted daemon reports and changes them as before
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    d.child = Daemon::spawn(&d.socket, d.dir.path(), &[]);
    d.wait_ready();
    let mut rt = d.runtime().await;
    let s = common::pod_resources_status(&mut rt, &pod).await;
    assert_eq!(s["resources"]["memoryLimitInBytes"], 200 * MIB, "{s}");
    assert_eq!(s["overhead"]["cpuShares"], 100, "{s}");
    update(&mut rt, &pod, common::pod_resources(200 * MIB, 2048), overhead).await.expect("update after a restart");
    assert_eq!(pod_file(&data, &pod, "cpu", "cpu.shares"), "2148");
    assert_eq!(pod_memory_limit(&data, &pod), None, "still an app without a memory limit");

    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("stop");
    let err = update(&mut rt, &pod, common::pod_resources(200 * MIB, 2), common::pod_resources(0, 0))
        .await
        .expect_err("stopped pod");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    common::assert_no_leaks(&data, &[pod]);
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_pods_and_bad_values_are_refused() {
    let d = Daemon::start(&[]);
    let mut rt = d.runtime().await;
    let err = update(
        &mut rt,
        "0b9e5c1e-0000-4000-8000-00000000dead",
        common::pod_resources(64 * MIB, 2),
        common::pod_resources(0, 0),
    )
    .await
    .expect_err("unknown pod");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    let err =
        update(&mut rt, "", common::pod_resources(64 * MIB, 2), common::pod_resources(0, 0)).await.expect_err("no id");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    // RunPodSandbox checks the same numbers
    let mut config = host_network(pod_config("bad-resources", &[]));
    if let Some(l) = config.linux.as_mut() {
        l.overhead = Some(common::pod_resources(-5, 0));
    }
    let err = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() })
        .await
        .expect_err("negative overhead");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("config.linux.overhead"), "{err:?}");
}

/// A file of an app's own cgroup (`<pod>/app-<app>`) in the hierarchy of `controller`.
fn app_file(data: &Path, pod: &str, app: &str, controller: &str, file: &str) -> String {
    pod_file(data, pod, controller, &format!("app-{app}/{file}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_update_the_kernel_refuses_changes_nothing() {
    if let Some(reason) = not_v1() {
        common::skipped("resize::a_container_update_the_kernel_refuses_changes_nothing", &reason);
        return;
    }
    let d = Daemon::start(&[]);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let data = d.dir.path().join("data");
    let logs = tempfile::tempdir().expect("logs");
    let mut config = host_network(pod_config("resize-app", &[]));
    config.log_directory = logs.path().display().to_string();
    let pod = common::run_pod(&mut rt, &config).await;
    let script = "v=$(yes | head -c 60000000); echo filled; while true; do sleep 1; done";
    let mut hog = container_config("hog", &image, &["sh", "-c", script]);
    hog.linux.get_or_insert_default().resources = Some(common::pod_resources(192 * MIB, 512));
    let id = start(&mut rt, &pod, &config, hog).await;
    let hog_log = logs.path().join("hog.log");
    wait_for("hog's 60 MB", || std::fs::read_to_string(&hog_log).is_ok_and(|l| l.contains("filled")));

    // the quota is written before the memory limit, which the kernel refuses (EBUSY)
    let below = cri::LinuxContainerResources { cpu_quota: 20_000, ..common::pod_resources(16 * MIB, 256) };
    let err = rt
        .update_container_resources(cri::UpdateContainerResourcesRequest {
            container_id: id.clone(),
            linux: Some(below),
            ..Default::default()
        })
        .await
        .expect_err("below the app's usage");
    assert!(err.message().contains("memory.limit_in_bytes"), "{err:?}");
    assert_eq!(app_file(&data, &pod, "0-hog", "memory", "memory.limit_in_bytes"), (192 * MIB).to_string());
    assert_eq!(app_file(&data, &pod, "0-hog", "cpu", "cpu.cfs_quota_us"), "50000", "the quota was put back");
    assert_eq!(app_file(&data, &pod, "0-hog", "cpu", "cpu.shares"), "512");
    let status = rt
        .container_status(cri::ContainerStatusRequest { container_id: id.clone(), verbose: false })
        .await
        .expect("ContainerStatus")
        .into_inner()
        .status
        .expect("status");
    let linux = status.resources.and_then(|r| r.linux).expect("resources reported");
    assert_eq!((linux.memory_limit_in_bytes, linux.cpu_quota), (192 * MIB, 50_000));

    // what the kernel takes is taken
    rt.update_container_resources(cri::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(cri::LinuxContainerResources { cpu_quota: 20_000, ..common::pod_resources(128 * MIB, 256) }),
        ..Default::default()
    })
    .await
    .expect("UpdateContainerResources");
    assert_eq!(app_file(&data, &pod, "0-hog", "memory", "memory.limit_in_bytes"), (128 * MIB).to_string());
    assert_eq!(app_file(&data, &pod, "0-hog", "cpu", "cpu.cfs_quota_us"), "20000");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    common::assert_no_leaks(&data, &[pod]);
}
