//! The handlers of both services over a runtime on a node of the test's own
//! making (`Runtime::on_node`): a data dir, CNI and registry config in a
//! temporary directory, no systemd-nspawn, no systemd, no security module,
//! no pool. Nothing here needs root or changes the machine: what a request
//! that fails its checks, or names nothing, gets back, and that it leaves
//! the data dir as it was (handlers block in place: a multi-thread runtime,
//! as the daemon's). Requests that boot pods run in `tests/` (real
//! systemd-nspawn, real processes).

use super::CriService;
use crate::cgroup::Driver;
use crate::config::Config;
use crate::proto::v1 as cri;
use crate::proto::v1::image_service_server::ImageService;
use crate::proto::v1::runtime_service_server::RuntimeService;
use crate::runtime::{NodeFacts, Runtime};
use crate::stage1::host::Host;
use std::path::PathBuf;
use std::sync::Arc;
use tonic::{Code, Request};

/// A runtime over a temporary node: the service and where its data dir is.
struct Node {
    dir: tempfile::TempDir,
    svc: CriService,
    rt: Arc<Runtime>,
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        let at = |p: &str| dir.path().join(p);
        let config = Config {
            socket: at("rktlet.sock"),
            data_dir: at("data"),
            cni_conf_dir: at("cni/net.d"),
            cni_bin_dirs: vec![at("cni/bin")],
            registry_config: at("registries.toml"),
            trust_dir: at("trust"),
            pod_pool_size: 0,
            ..Config::default()
        };
        let node = NodeFacts {
            host: Host { pid1_is_systemd: false, nspawn: None, lsm: Default::default() },
            cgroup_driver: Driver::Cgroupfs,
        };
        let rt = Arc::new(Runtime::on_node(config, node).expect("a runtime over a temporary data dir"));
        // as the daemon does before it serves (status reads wait for it)
        rt.reconcile();
        Node { svc: CriService::new(rt.clone()), rt, dir }
    }

    /// Every file and directory below the data dir, sorted: what a failed
    /// request must leave as it found it.
    fn data_files(&self) -> Vec<PathBuf> {
        fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
            let Ok(entries) = std::fs::read_dir(dir) else { return };
            for e in entries.flatten() {
                out.push(e.path());
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&e.path(), out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.dir.path().join("data"), &mut out);
        out.sort();
        out
    }
}

/// An id of the right form that names nothing.
const NO_POD: &str = "0b4a3f3e-6c61-4e43-9d8a-5f1e0c2b7a90";
const NO_CONTAINER: &str = "0b4a3f3e-6c61-4e43-9d8a-5f1e0c2b7a90:app";

fn code<T>(r: Result<tonic::Response<T>, tonic::Status>) -> Code {
    r.err().map_or(Code::Ok, |s| s.code())
}

fn pod_config(name: &str) -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: format!("{name}-uid"),
            namespace: "default".into(),
            attempt: 0,
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn status_names_what_the_node_lacks() {
    let n = Node::new();
    let resp = n.svc.status(Request::new(cri::StatusRequest { verbose: true })).await.expect("Status").into_inner();
    let conditions = resp.status.expect("a status").conditions;
    let of = |t: &str| conditions.iter().find(|c| c.r#type == t).cloned().expect(t);
    let runtime = of("RuntimeReady");
    assert!(!runtime.status, "no systemd-nspawn: not ready");
    assert_eq!(runtime.reason, "NspawnMissing");
    let network = of("NetworkReady");
    assert!(!network.status, "no CNI config: not ready");
    assert_eq!(network.reason, "NetworkPluginNotReady");
    assert!(!network.message.is_empty(), "the reason's cause is given");
    let version = n.svc.version(Request::new(cri::VersionRequest::default())).await.expect("Version").into_inner();
    assert_eq!(version.runtime_api_version, "v1");
    assert_eq!(version.runtime_name, "rktlet");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_pod_sandbox_refuses_a_bad_config_and_writes_nothing() {
    let n = Node::new();
    let before = n.data_files();
    let mut no_name = pod_config("");
    no_name.metadata.as_mut().expect("metadata").name.clear();
    let mut bad_parent = pod_config("web");
    bad_parent.linux = Some(cri::LinuxPodSandboxConfig { cgroup_parent: "../../escape".into(), ..Default::default() });
    let mut bad_sysctl = pod_config("web");
    bad_sysctl.linux = Some(cri::LinuxPodSandboxConfig {
        sysctls: [("kernel.no_such_sysctl".to_string(), "1".to_string())].into(),
        ..Default::default()
    });
    let cases = [
        ("no config", None),
        ("no metadata", Some(cri::PodSandboxConfig::default())),
        ("no name", Some(no_name)),
        ("cgroup parent outside the root", Some(bad_parent)),
        ("an unknown sysctl", Some(bad_sysctl)),
    ];
    for (what, config) in cases {
        let req = cri::RunPodSandboxRequest { config, runtime_handler: String::new() };
        let r = n.svc.run_pod_sandbox(Request::new(req)).await;
        assert_eq!(code(r), Code::InvalidArgument, "{what}");
    }
    assert_eq!(n.data_files(), before, "a refused RunPodSandbox leaves the data dir as it was");
}

#[tokio::test(flavor = "multi_thread")]
async fn stops_and_removes_of_unknown_ids_succeed() {
    // kubelet retries stops and removes after its own restarts and ours
    let n = Node::new();
    let s = &n.svc;
    for id in [NO_POD, "not-a-uuid"] {
        let stop = cri::StopPodSandboxRequest { pod_sandbox_id: id.into() };
        assert_eq!(code(s.stop_pod_sandbox(Request::new(stop)).await), Code::Ok, "StopPodSandbox {id}");
        let rm = cri::RemovePodSandboxRequest { pod_sandbox_id: id.into() };
        assert_eq!(code(s.remove_pod_sandbox(Request::new(rm)).await), Code::Ok, "RemovePodSandbox {id}");
    }
    for id in [NO_CONTAINER, "nothing"] {
        let stop = cri::StopContainerRequest { container_id: id.into(), timeout: 0 };
        assert_eq!(code(s.stop_container(Request::new(stop)).await), Code::Ok, "StopContainer {id}");
        let rm = cri::RemoveContainerRequest { container_id: id.into() };
        assert_eq!(code(s.remove_container(Request::new(rm)).await), Code::Ok, "RemoveContainer {id}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_and_changes_of_unknown_ids_are_not_found() {
    let n = Node::new();
    let s = &n.svc;
    let pod = || NO_POD.to_string();
    let ctr = || NO_CONTAINER.to_string();
    let checks: Vec<(&str, Code)> = vec![
        (
            "PodSandboxStatus",
            code(
                s.pod_sandbox_status(Request::new(cri::PodSandboxStatusRequest {
                    pod_sandbox_id: pod(),
                    verbose: false,
                }))
                .await,
            ),
        ),
        (
            "ContainerStatus",
            code(
                s.container_status(Request::new(cri::ContainerStatusRequest { container_id: ctr(), verbose: false }))
                    .await,
            ),
        ),
        (
            "StartContainer",
            code(s.start_container(Request::new(cri::StartContainerRequest { container_id: ctr() })).await),
        ),
        (
            "ExecSync",
            code(
                s.exec_sync(Request::new(cri::ExecSyncRequest {
                    container_id: ctr(),
                    cmd: vec!["true".into()],
                    timeout: 1,
                }))
                .await,
            ),
        ),
        (
            "Exec",
            code(
                s.exec(Request::new(cri::ExecRequest {
                    container_id: ctr(),
                    cmd: vec!["sh".into()],
                    stdout: true,
                    ..Default::default()
                }))
                .await,
            ),
        ),
        (
            "Attach",
            code(
                s.attach(Request::new(cri::AttachRequest { container_id: ctr(), stdout: true, ..Default::default() }))
                    .await,
            ),
        ),
        (
            "PortForward",
            code(s.port_forward(Request::new(cri::PortForwardRequest { pod_sandbox_id: pod(), port: vec![80] })).await),
        ),
        (
            "ContainerStats",
            code(s.container_stats(Request::new(cri::ContainerStatsRequest { container_id: ctr() })).await),
        ),
        (
            "PodSandboxStats",
            code(s.pod_sandbox_stats(Request::new(cri::PodSandboxStatsRequest { pod_sandbox_id: pod() })).await),
        ),
        (
            "UpdateContainerResources",
            code(
                s.update_container_resources(Request::new(cri::UpdateContainerResourcesRequest {
                    container_id: ctr(),
                    linux: Some(cri::LinuxContainerResources { cpu_shares: 512, ..Default::default() }),
                    ..Default::default()
                }))
                .await,
            ),
        ),
        (
            "ReopenContainerLog",
            code(s.reopen_container_log(Request::new(cri::ReopenContainerLogRequest { container_id: ctr() })).await),
        ),
        (
            "CheckpointContainer",
            code(
                s.checkpoint_container(Request::new(cri::CheckpointContainerRequest {
                    container_id: ctr(),
                    location: n.dir.path().join("checkpoint.tar").display().to_string(),
                    timeout: 10,
                }))
                .await,
            ),
        ),
        (
            "CreateContainer in no pod",
            code(
                s.create_container(Request::new(cri::CreateContainerRequest {
                    pod_sandbox_id: pod(),
                    config: Some(cri::ContainerConfig {
                        metadata: Some(cri::ContainerMetadata { name: "app".into(), attempt: 0 }),
                        image: Some(cri::ImageSpec { image: "busybox".into(), ..Default::default() }),
                        ..Default::default()
                    }),
                    sandbox_config: Some(pod_config("web")),
                }))
                .await,
            ),
        ),
    ];
    let wrong: Vec<String> =
        checks.iter().filter(|(_, c)| *c != Code::NotFound).map(|(what, c)| format!("{what}: {c:?}")).collect();
    assert!(wrong.is_empty(), "unknown ids must be NotFound: {wrong:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_without_its_config_is_refused() {
    let n = Node::new();
    let before = n.data_files();
    let no_config = cri::CreateContainerRequest { pod_sandbox_id: NO_POD.into(), config: None, sandbox_config: None };
    let r = n.svc.create_container(Request::new(no_config)).await;
    assert_eq!(code(r), Code::InvalidArgument);
    let r = n
        .svc
        .exec_sync(Request::new(cri::ExecSyncRequest { container_id: NO_CONTAINER.into(), cmd: vec![], timeout: 0 }))
        .await;
    assert_eq!(code(r), Code::InvalidArgument, "ExecSync of no command");
    assert_eq!(n.data_files(), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn lists_of_an_empty_node_are_empty() {
    let n = Node::new();
    let s = &n.svc;
    let pods = s.list_pod_sandbox(Request::new(cri::ListPodSandboxRequest::default())).await.expect("ListPodSandbox");
    assert!(pods.into_inner().items.is_empty());
    let ctrs = s.list_containers(Request::new(cri::ListContainersRequest::default())).await.expect("ListContainers");
    assert!(ctrs.into_inner().containers.is_empty());
    let stats = s.list_container_stats(Request::new(cri::ListContainerStatsRequest::default())).await;
    assert!(stats.expect("ListContainerStats").into_inner().stats.is_empty());
    let images = s.list_images(Request::new(cri::ListImagesRequest::default())).await.expect("ListImages");
    assert!(images.into_inner().images.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn images_that_are_not_there() {
    let n = Node::new();
    let s = &n.svc;
    let spec = |image: &str| Some(cri::ImageSpec { image: image.into(), ..Default::default() });
    // ImageStatus of an image the node lacks: no image, no error (kubelet then pulls)
    let st =
        s.image_status(Request::new(cri::ImageStatusRequest { image: spec("busybox:1.36"), verbose: false })).await;
    assert!(st.expect("ImageStatus").into_inner().image.is_none());
    // RemoveImage of it succeeds (idempotent, as containerd)
    let rm = s.remove_image(Request::new(cri::RemoveImageRequest { image: spec("busybox:1.36") })).await;
    assert_eq!(code(rm), Code::Ok);
    // a reference no registry could serve is the caller's mistake, found before any connection
    for bad in ["", "UPPER/case", "busybox:bad tag", "busybox@sha256:1234"] {
        let pull = s.pull_image(Request::new(cri::PullImageRequest { image: spec(bad), ..Default::default() })).await;
        assert_eq!(code(pull), Code::InvalidArgument, "PullImage {bad:?}");
    }
    let fs = s.image_fs_info(Request::new(cri::ImageFsInfoRequest {})).await.expect("ImageFsInfo").into_inner();
    let image_fs = fs.image_filesystems.first().expect("the image filesystem");
    let mount = image_fs.fs_id.as_ref().expect("its mount").mountpoint.clone();
    assert!(mount.starts_with(n.rt.data.root().to_str().expect("utf-8 path")), "{mount} is in the data dir");
}

#[tokio::test(flavor = "multi_thread")]
async fn update_runtime_config_keeps_the_pod_cidr() {
    let n = Node::new();
    let req = cri::UpdateRuntimeConfigRequest {
        runtime_config: Some(cri::RuntimeConfig {
            network_config: Some(cri::NetworkConfig { pod_cidr: "10.88.0.0/16".into() }),
        }),
    };
    n.svc.update_runtime_config(Request::new(req)).await.expect("UpdateRuntimeConfig");
    assert_eq!(n.rt.pod_cidr(), "10.88.0.0/16");
}

#[tokio::test(flavor = "multi_thread")]
async fn config_metrics_and_pod_stats_of_an_empty_node() {
    let n = Node::new();
    let s = &n.svc;
    let config = s.runtime_config(Request::new(cri::RuntimeConfigRequest {})).await.expect("RuntimeConfig");
    let linux = config.into_inner().linux.expect("the linux section");
    assert_eq!(linux.cgroup_driver, cri::CgroupDriver::Cgroupfs as i32, "the node's driver, as kubelet must use it");
    let descriptors = s.list_metric_descriptors(Request::new(cri::ListMetricDescriptorsRequest {})).await;
    assert!(!descriptors.expect("ListMetricDescriptors").into_inner().descriptors.is_empty());
    let metrics = s.list_pod_sandbox_metrics(Request::new(cri::ListPodSandboxMetricsRequest {})).await;
    assert!(metrics.expect("ListPodSandboxMetrics").into_inner().pod_metrics.is_empty());
    let stats = s.list_pod_sandbox_stats(Request::new(cri::ListPodSandboxStatsRequest::default())).await;
    assert!(stats.expect("ListPodSandboxStats").into_inner().stats.is_empty());
    let update = |id: &str| cri::UpdatePodSandboxResourcesRequest {
        pod_sandbox_id: id.into(),
        resources: Some(cri::LinuxContainerResources { cpu_shares: 512, ..Default::default() }),
        ..Default::default()
    };
    assert_eq!(code(s.update_pod_sandbox_resources(Request::new(update(NO_POD))).await), Code::NotFound);
    assert_eq!(code(s.update_pod_sandbox_resources(Request::new(update(""))).await), Code::InvalidArgument);
}

#[test]
fn the_clients_deadline_is_read_from_grpc_timeout() {
    use std::time::Duration;
    let deadline = |v: &str| {
        let mut m = tonic::metadata::MetadataMap::new();
        m.insert("grpc-timeout", v.parse().expect("ascii"));
        super::client_deadline(&m)
    };
    assert_eq!(deadline("2S"), Some(Duration::from_millis(1999)), "a millisecond ahead of tonic's own timer");
    assert_eq!(deadline("1m"), Some(Duration::ZERO));
    assert_eq!(deadline("999u"), Some(Duration::ZERO));
    assert_eq!(deadline("3M"), Some(Duration::from_secs(180) - Duration::from_millis(1)));
    assert_eq!(deadline("1H"), Some(Duration::from_secs(3600) - Duration::from_millis(1)));
    for bad in ["", "S", "5", "123456789S", "1x", "-1S", "1.5S"] {
        assert_eq!(deadline(bad), None, "{bad:?}");
    }
    assert_eq!(super::client_deadline(&tonic::metadata::MetadataMap::new()), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_past_the_clients_deadline_is_deadline_exceeded() {
    // what critest v1.36 asks of PullImage with 1 ms: tonic alone answered CANCELLED
    // a registry that takes the connection and never answers
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let image = format!("{}/never/answers:1", silent.local_addr().expect("addr"));
    let mut req = Request::new(cri::PullImageRequest {
        image: Some(cri::ImageSpec { image, ..Default::default() }),
        ..Default::default()
    });
    req.metadata_mut().insert("grpc-timeout", "1m".parse().expect("ascii"));
    let n = Node::new();
    let r = tokio::time::timeout(std::time::Duration::from_secs(30), n.svc.pull_image(req)).await;
    assert_eq!(code(r.expect("PullImage ends at the deadline, not at the registry's")), Code::DeadlineExceeded);
    let never =
        super::observe("Test", Some(std::time::Duration::from_millis(20)), std::future::pending::<Result<(), _>>());
    let status = never.await.expect_err("the deadline ends it");
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert!(status.message().contains("deadline"), "{}", status.message());
}
