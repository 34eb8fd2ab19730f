//! Crash safety (issue 10): the daemon SIGKILLs itself at chosen points
//! (`RKTLET_CRASH_AT`, see `rktlet::base::fault`); after a restart every pod,
//! container and image is reported in its true state, the interrupted
//! operation succeeds when retried, and nothing leaks.

mod common;

use common::{Daemon, assert_no_leaks, host_network, pod_config};
use rktlet::proto::v1 as cri;
use rktlet::proto::v1::image_service_client::ImageServiceClient;
use rktlet::proto::v1::runtime_service_client::RuntimeServiceClient;
use std::time::Duration;
use tonic::transport::Channel;

/// Stops the daemon (SIGTERM if it still runs) and starts it again, armed
/// to crash at `point` if given.
async fn restart(d: &mut Daemon, point: Option<&str>) -> (RuntimeServiceClient<Channel>, ImageServiceClient<Channel>) {
    if d.child.try_wait().expect("try_wait").is_none() {
        d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    }
    let env: Vec<(&str, &str)> = point.map(|p| (rktlet::base::fault::ENV, p)).into_iter().collect();
    d.child = Daemon::spawn_env(&d.socket, d.dir.path(), &[], &env);
    d.wait_ready();
    (d.runtime().await, d.images().await)
}

/// `rktlet image verify` (deep: trees compared with their layers) passes;
/// its JSON report.
fn store_verifies(data: &std::path::Path) -> serde_json::Value {
    let out = std::process::Command::new(common::BIN)
        .arg("--dir")
        .arg(data)
        .args(["image", "verify", "--deep", "--format=json"])
        .output()
        .expect("rktlet image verify");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("verify report");
    assert!(out.status.success(), "the store does not verify: {report}");
    assert_eq!(report["problems"], serde_json::json!([]), "{report}");
    report
}

/// The daemon died at its crash point (SIGKILL).
fn crashed(d: &mut Daemon) {
    let status = common::wait_timeout(&mut d.child, Duration::from_secs(20)).expect("the daemon did not die");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "{status:?}: {}", d.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn interrupted_operations_recover_after_a_restart() {
    let mut d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let image = common::pull_busybox(&d).await;
    let reg = common::registry::registry().main.clone();
    let mut rt = d.runtime().await;
    let pod_cfg = host_network(pod_config("crashy", &[]));
    let pod = common::run_pod(&mut rt, &pod_cfg).await;
    let create = |name: &str| cri::CreateContainerRequest {
        pod_sandbox_id: pod.clone(),
        config: Some(common::container_config(name, &image, &["sh", "-c", "trap 'exit 143' TERM; sleep 1000 & wait"])),
        sandbox_config: Some(pod_cfg.clone()),
    };

    // CreateContainer dies after the overlay is mounted, before the manifest names the app
    let (mut rt, _) = restart(&mut d, Some("create-before-manifest")).await;
    assert!(rt.create_container(create("first")).await.is_err());
    crashed(&mut d);
    let (mut rt, _) = restart(&mut d, None).await;
    let listed = rt.list_containers(cri::ListContainersRequest::default()).await.expect("list").into_inner().containers;
    assert!(listed.is_empty(), "a half-made container is not reported: {listed:?}");
    store_verifies(&data);
    let first = rt.create_container(create("first")).await.expect("the retried create").into_inner().container_id;
    assert!(d.log().contains("removing what an interrupted add left"), "the leftovers were cleared first");
    rt.start_container(cri::StartContainerRequest { container_id: first.clone() }).await.expect("start");

    // StartContainer dies after the unit started: the container is running after the restart
    let second = rt.create_container(create("second")).await.expect("create").into_inner().container_id;
    let (mut rt, _) = restart(&mut d, Some("start-after-unit")).await;
    assert!(rt.start_container(cri::StartContainerRequest { container_id: second.clone() }).await.is_err());
    crashed(&mut d);
    let (mut rt, _) = restart(&mut d, None).await;
    for id in [&first, &second] {
        let st = rt
            .container_status(cri::ContainerStatusRequest { container_id: id.clone(), verbose: false })
            .await
            .expect("status")
            .into_inner()
            .status
            .expect("status");
        assert_eq!(st.state, cri::ContainerState::ContainerRunning as i32, "{id}");
    }
    let out = rt
        .exec_sync(cri::ExecSyncRequest {
            container_id: second.clone(),
            cmd: vec!["echo".into(), "alive".into()],
            timeout: 5,
        })
        .await
        .expect("exec")
        .into_inner();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "alive\n");

    // PullImage dies after the layers are unpacked, before the image is in the index
    let cfg = format!("{reg}/cfg:latest");
    let spec = || Some(cri::ImageSpec { image: cfg.clone(), ..Default::default() });
    let (_, mut img) = restart(&mut d, Some("pull-before-commit")).await;
    assert!(img.pull_image(cri::PullImageRequest { image: spec(), ..Default::default() }).await.is_err());
    crashed(&mut d);
    let (_, mut img) = restart(&mut d, None).await;
    let st = img.image_status(cri::ImageStatusRequest { image: spec(), verbose: false }).await.expect("status");
    assert!(st.into_inner().image.is_none(), "an image whose pull was cut short is not reported");
    store_verifies(&data);
    img.pull_image(cri::PullImageRequest { image: spec(), ..Default::default() }).await.expect("the retried pull");
    let st = img.image_status(cri::ImageStatusRequest { image: spec(), verbose: false }).await.expect("status");
    assert!(st.into_inner().image.is_some());

    // a pull of three layers dies after the first is unpacked, and another while
    // it commits (its blobs stored, the index not written yet)
    for (point, name) in [("pull-between-layers", "big"), ("pull-mid-commit", "edge")] {
        let reference = format!("{reg}/{name}:latest");
        let spec = || Some(cri::ImageSpec { image: reference.clone(), ..Default::default() });
        let (_, mut img) = restart(&mut d, Some(point)).await;
        assert!(img.pull_image(cri::PullImageRequest { image: spec(), ..Default::default() }).await.is_err());
        crashed(&mut d);
        let (_, mut img) = restart(&mut d, None).await;
        let st = img.image_status(cri::ImageStatusRequest { image: spec(), verbose: false }).await.expect("status");
        assert!(st.into_inner().image.is_none(), "{point}: a cut pull is not reported");
        let report = store_verifies(&data);
        if point == "pull-mid-commit" {
            let notes = report["notes"].to_string();
            assert!(notes.contains("is not in the index"), "{point}: stored blobs are noted: {report}");
        }
        img.pull_image(cri::PullImageRequest { image: spec(), ..Default::default() }).await.expect("retried pull");
        let st = img.image_status(cri::ImageStatusRequest { image: spec(), verbose: false }).await.expect("status");
        assert!(st.into_inner().image.is_some(), "{point}: the retried pull is reported");
        store_verifies(&data);
    }

    // the background task that writes a pulled layer's ACI dies before the
    // rename: nothing is under the layer's key, its download is still there;
    // the next start writes the ACI
    let reference = format!("{reg}/arm64only:latest");
    let spec = || Some(cri::ImageSpec { image: reference.clone(), ..Default::default() });
    let (_, mut img) = restart(&mut d, Some("layer-aci-before-rename")).await;
    // the answer may or may not get out before the background task dies
    let _ = img.pull_image(cri::PullImageRequest { image: spec(), ..Default::default() }).await;
    crashed(&mut d);
    let store = rktlet::image::Store::open(&rkt::pod::DataDir::new(&data), Default::default()).expect("store");
    let layer = store.resolve(&reference).expect("the pull committed").layer_keys()[0].clone();
    assert!(!store.cas().blob(&layer).exists(), "no ACI under its key before the rename");
    assert!(rkt::layer_aci::pending(store.cas(), &layer).exists(), "the download stays");
    let (_, mut img) = restart(&mut d, None).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !store.cas().blob(&layer).exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let aci = std::fs::read(store.cas().blob(&layer)).expect("the start wrote the ACI");
    assert_eq!(rkt::digest::cas_key_of(&aci), layer);
    let st = img.image_status(cri::ImageStatusRequest { image: spec(), verbose: false }).await.expect("status");
    assert!(st.into_inner().image.is_some());
    store_verifies(&data);

    // StopContainer dies after the app exited, before its exit was recorded
    let (mut rt, _) = restart(&mut d, Some("stop-before-record")).await;
    assert!(rt.stop_container(cri::StopContainerRequest { container_id: first.clone(), timeout: 5 }).await.is_err());
    crashed(&mut d);
    let (mut rt, _) = restart(&mut d, None).await;
    let st = rt
        .container_status(cri::ContainerStatusRequest { container_id: first.clone(), verbose: false })
        .await
        .expect("status")
        .into_inner()
        .status
        .expect("status");
    assert_eq!((st.state, st.exit_code), (cri::ContainerState::ContainerExited as i32, 143), "{st:?}");
    rt.stop_container(cri::StopContainerRequest { container_id: first.clone(), timeout: 5 })
        .await
        .expect("the retried stop");

    // RemovePodSandbox dies after the pod stopped, before its directory went
    let (mut rt, _) = restart(&mut d, Some("remove-after-stop")).await;
    assert!(rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.is_err());
    crashed(&mut d);
    let (mut rt, _) = restart(&mut d, None).await;
    let st = rt
        .pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: pod.clone(), verbose: false })
        .await
        .expect("the stopped pod is still there")
        .into_inner()
        .status
        .expect("status");
    assert_eq!(st.state, cri::PodSandboxState::SandboxNotready as i32);
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() })
        .await
        .expect("the retried remove");
    assert_no_leaks(&data, &[pod]);
    let report = store_verifies(&data);
    assert!(report["trees_compared"].as_u64().is_some_and(|n| n >= 4), "every tree compared: {report}");
}
