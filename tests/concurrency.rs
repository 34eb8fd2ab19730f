//! Concurrency through the socket (issue 10): twenty pod + container
//! lifecycles at once on the pod network, while overlapping images are
//! pulled concurrently (busybox in three forms sharing its layer, cfg built
//! on it, big); zero errors, every pod with its own address, nothing left.

mod common;

use common::{Daemon, TestNetwork, assert_no_leaks, pod_config};
use rktlet::proto::v1 as cri;
use std::collections::BTreeSet;

const PODS: usize = 20;

#[tokio::test(flavor = "multi_thread")]
async fn twenty_lifecycles_and_overlapping_pulls_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let net = TestNetwork::new(dir.path());
    let conf = net.conf_dir.to_string_lossy().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni", "--pod-pool-size", "2"]);
    let image = common::pull_busybox(&d).await;
    let reg = common::registry::registry().main.clone();

    let pulls = ["busybox:v2s2", "busybox:zstd", "cfg:latest", "big:latest", "cfg:latest", "busybox:v2s2"].map(|tag| {
        let (socket, image) = (d.socket.clone(), format!("{reg}/{tag}"));
        tokio::spawn(async move {
            let mut img =
                rktlet::proto::v1::image_service_client::ImageServiceClient::new(common::channel(&socket).await);
            img.pull_image(cri::PullImageRequest {
                image: Some(cri::ImageSpec { image: image.clone(), ..Default::default() }),
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner().image_ref)
            .map_err(|e| format!("pull {image}: {e}"))
        })
    });
    let lifecycles: Vec<_> = (0..PODS)
        .map(|i| {
            let (socket, image) = (d.socket.clone(), image.clone());
            tokio::spawn(async move {
                let mut rt = rktlet::proto::v1::runtime_service_client::RuntimeServiceClient::new(
                    common::channel(&socket).await,
                );
                let config = pod_config(&format!("many-{i}"), &[("batch", "many")]);
                let pod = rt
                    .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(config.clone()), ..Default::default() })
                    .await
                    .map_err(|e| format!("run {i}: {e}"))?
                    .into_inner()
                    .pod_sandbox_id;
                let ctr = rt
                    .create_container(cri::CreateContainerRequest {
                        pod_sandbox_id: pod.clone(),
                        config: Some(common::container_config("w", &image, &["sleep", "1000"])),
                        sandbox_config: Some(config),
                    })
                    .await
                    .map_err(|e| format!("create {i}: {e}"))?
                    .into_inner()
                    .container_id;
                rt.start_container(cri::StartContainerRequest { container_id: ctr.clone() })
                    .await
                    .map_err(|e| format!("start {i}: {e}"))?;
                let out = rt
                    .exec_sync(cri::ExecSyncRequest {
                        container_id: ctr.clone(),
                        cmd: vec!["hostname".into()],
                        timeout: 10,
                    })
                    .await
                    .map_err(|e| format!("exec {i}: {e}"))?
                    .into_inner();
                let hostname = String::from_utf8_lossy(&out.stdout).trim().to_string();
                let ip = rt
                    .pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: pod.clone(), verbose: false })
                    .await
                    .map_err(|e| format!("status {i}: {e}"))?
                    .into_inner()
                    .status
                    .and_then(|s| s.network)
                    .map(|n| n.ip)
                    .unwrap_or_default();
                rt.stop_container(cri::StopContainerRequest { container_id: ctr, timeout: 5 })
                    .await
                    .map_err(|e| format!("stop {i}: {e}"))?;
                rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() })
                    .await
                    .map_err(|e| format!("remove {i}: {e}"))?;
                Ok::<_, String>((pod, hostname, ip))
            })
        })
        .collect();

    let mut errors = Vec::new();
    let (mut pods, mut ips) = (Vec::new(), BTreeSet::new());
    for (i, l) in futures::future::join_all(lifecycles).await.into_iter().enumerate() {
        match l.expect("task") {
            Ok((pod, hostname, ip)) => {
                assert_eq!(hostname, format!("many-{i}"), "each container sees its own pod's hostname");
                assert!(ip.starts_with(&format!("{}.", net.subnet_prefix)), "{ip}");
                ips.insert(ip);
                pods.push(pod);
            }
            Err(e) => errors.push(e),
        }
    }
    for p in futures::future::join_all(pulls).await {
        if let Err(e) = p.expect("task") {
            errors.push(e);
        }
    }
    assert!(errors.is_empty(), "errors: {errors:#?}");
    assert_eq!(ips.len(), PODS, "every pod had its own address");

    let mut rt = d.runtime().await;
    let left = rt.list_pod_sandbox(cri::ListPodSandboxRequest::default()).await.expect("list").into_inner().items;
    assert!(left.is_empty(), "{left:?}");
    let images = d.images().await.list_images(cri::ListImagesRequest::default()).await.expect("images").into_inner();
    let tags: BTreeSet<String> = images.images.iter().flat_map(|i| i.repo_tags.clone()).collect();
    for tag in ["busybox:latest", "busybox:v2s2", "busybox:zstd", "cfg:latest", "big:latest"] {
        assert!(tags.contains(&format!("{reg}/{tag}")), "{tag} missing from {tags:?}");
    }
    assert_no_leaks(&d.dir.path().join("data"), &pods);
    // only the pool's idle pods still hold addresses
    assert!(net.allocated().len() <= 2, "{:?}", net.allocated());
}
