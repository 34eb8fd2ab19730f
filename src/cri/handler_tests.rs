//! The handlers of both services over a runtime on a node of the test's own
//! making (`Runtime::on_node`): a data dir, CNI and registry config in a
//! temporary directory, no systemd-nspawn, no systemd, no security module,
//! no pool. Nothing here needs root or changes the machine: what a request
//! that fails its checks, or names nothing, gets back, and that it leaves
//! the data dir as it was (handlers block in place: a multi-thread runtime,
//! as the daemon's). Where a request needs something to name, a pod is
//! written to the data dir as one whose sandbox has ended (`exited_pod`).
//! Requests that boot pods run in `tests/` (real systemd-nspawn, real
//! processes).

use super::CriService;
use crate::cgroup::Driver;
use crate::config::Config;
use crate::proto::v1 as cri;
use crate::proto::v1::image_service_server::ImageService;
use crate::proto::v1::runtime_service_server::RuntimeService;
use crate::runtime::{NodeFacts, Runtime};
use crate::stage1::host::Host;
use futures::FutureExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::{Stream, StreamExt};
use tonic::{Code, Request};

/// A runtime over a temporary node: the service and where its data dir is.
struct Node {
    dir: tempfile::TempDir,
    svc: CriService,
    rt: Arc<Runtime>,
}

impl Node {
    fn new() -> Node {
        Self::with(|_| {})
    }

    /// A node whose pods' systemd is `bus` for the unit calls (stop, limits).
    fn over(bus: Arc<crate::stage1::bus::testing::FakeBus>) -> Node {
        Self::build(|_| {}, Some(bus))
    }

    /// A node whose config `tweak` changes (paths in it go below `dir`).
    fn with(tweak: impl FnOnce(&mut Config)) -> Node {
        Self::build(tweak, None)
    }

    fn build(tweak: impl FnOnce(&mut Config), bus: Option<Arc<crate::stage1::bus::testing::FakeBus>>) -> Node {
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
        let mut config = config;
        tweak(&mut config);
        let node = NodeFacts {
            host: Host { pid1_is_systemd: false, nspawn: None, lsm: Default::default() },
            cgroup_driver: Driver::Cgroupfs,
        };
        let mut rt = Runtime::on_node(config, node).expect("a runtime over a temporary data dir");
        if let Some(bus) = bus {
            rt = rt.with_unit_bus(bus);
        }
        let rt = Arc::new(rt);
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

/// How long a stream may take to answer before the test calls it a hang.
const WAIT: Duration = Duration::from_secs(5);

/// A server stream read to its end: its messages, or the first error.
async fn drain<T>(stream: impl Stream<Item = Result<T, tonic::Status>>) -> Result<Vec<T>, tonic::Status> {
    let all: Vec<_> = tokio::time::timeout(WAIT, stream.collect()).await.expect("the stream ends");
    all.into_iter().collect()
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

/// A pod on disk as RunPodSandbox and CreateContainer leave one (its
/// manifest from the CRI config, one app named `app`) whose sandbox has
/// since ended: in `run`, its lock free. CRI lists it as NOTREADY; nothing
/// runs, so nothing needs root. Its id.
fn exited_pod(n: &Node, name: &str) -> String {
    // dropped: the lock goes with it, as it goes with the sandbox process
    pod_with_an_app(n, name).uuid().to_string()
}

/// [`exited_pod`]'s pod, still running: its lock held by the pod returned
/// (as the sandbox process holds it; dropped, the pod has ended).
fn pod_with_an_app(n: &Node, name: &str) -> rkt::pod::Pod {
    let mut manifest = crate::sandbox::from_cri::manifest_from_config(&pod_config(name), false, false, name);
    manifest.apps.push(rkt::schema::RuntimeApp {
        name: "app".into(),
        image: rkt::schema::RuntimeImage {
            name: Some("docker.io/library/busybox:1.36".into()),
            id: format!("sha512-{}", "ab".repeat(64)),
            labels: vec![],
        },
        app: Some(rkt::schema::App {
            exec: Some(vec!["/bin/sleep".into(), "1000".into()]),
            user: "0".into(),
            group: "0".into(),
            ..Default::default()
        }),
        read_only_root_fs: false,
        mounts: vec![],
        annotations: vec![],
    });
    let mut pod = rkt::pod::Pod::create(&n.rt.data).expect("create");
    pod.to_preparing().expect("prepare");
    pod.write_initial(&manifest).expect("manifest");
    pod.to_run().expect("run");
    pod
}

/// A pod that reads as running with its app `app` started, as its start
/// leaves the app's status files; the pod's systemd is the node's double.
fn pod_with_a_started_app(n: &Node, name: &str) -> rkt::pod::Pod {
    let pod = pod_with_an_app(n, name);
    let paths = crate::stage1::app::AppPaths::new(&pod, "app");
    let created = paths.status_file("-created");
    std::fs::create_dir_all(created.parent().expect("status dir")).expect("status dir");
    for marker in [created, paths.status_file("-started")] {
        std::fs::write(marker, b"").expect("status file");
    }
    pod
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

#[test]
fn a_node_spreads_its_pods_directories_over_the_block_groups() {
    let n = Node::new();
    let embryo = n.rt.data.pod_parent(rkt::pod::PodDir::Embryo);
    if !crate::base::fsutil::walks_freed_inodes(&embryo).expect("asked") {
        let reason = format!("{} is not an ext4 without a journal: nothing to spread", embryo.display());
        crate::base::skipped("a_node_spreads_its_pods_directories_over_the_block_groups", &reason);
        return;
    }
    // where a pod's directory is made: `lsattr -d` shows T there
    assert!(crate::base::fsutil::spreads_subdirectories(&embryo).expect("flags"), "chattr +T {}", embryo.display());
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

/// A cold RunPodSandbox whose sandbox program fails (here a script that
/// makes the pod's directory, says why and exits, as a sandbox without
/// systemd-nspawn would): the
/// error carries what the program said, and the pod it began is taken down
/// again: no pod directory, no start manifest, nothing in the data dir
/// that was not there before. As an ordinary user too (no cgroups made).
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_cold_start_says_why_and_leaves_nothing() {
    let programs = tempfile::tempdir().expect("tempdir");
    let program = programs.path().join("sandbox");
    // as `<rkt> --dir DATA app sandbox --uuid=UUID ...` begins: the pod's directory
    let script = "#!/bin/sh\nfor a; do case $a in --uuid=*) uuid=${a#--uuid=};; esac; done\n\
                  mkdir -p \"$2/pods/run/$uuid/stage1/rootfs\" && echo begun > \"$2/pods/run/$uuid/pod\" || \
                  { echo 'the fake sandbox could not make the pod directory' >&2; exit 4; }\n\
                  echo 'no stage1 here' >&2\nexit 3\n";
    std::fs::write(&program, script).expect("program");
    std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let n = Node::with(|c| c.rkt_path = Some(program.clone()));
    let before = n.data_files();
    let mut config = pod_config("doomed");
    config.log_directory = n.dir.path().join("logs").display().to_string();
    config.linux = Some(cri::LinuxPodSandboxConfig {
        security_context: Some(cri::LinuxSandboxSecurityContext {
            namespace_options: Some(cri::NamespaceOption {
                network: cri::NamespaceMode::Node as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let req = cri::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
    let e = n.svc.run_pod_sandbox(Request::new(req)).await.expect_err("the sandbox program fails");
    assert!(e.message().contains("no stage1 here"), "the error says what the sandbox said: {e:?}");
    // (the log writer's program, installed once per build for every pod, stays)
    let logwriter = n.dir.path().join("data/logwriter");
    let after: Vec<PathBuf> = n.data_files().into_iter().filter(|p| !p.starts_with(&logwriter)).collect();
    assert_eq!(after, before, "the failed start leaves the data dir as it was");
    let pods = n.svc.list_pod_sandbox(Request::new(cri::ListPodSandboxRequest::default())).await.expect("list");
    assert!(pods.into_inner().items.is_empty(), "no pod is listed");
}

/// An ACI file of one program, `example.com/sleeper` version 1.0, written
/// below `dir`: what `rkt fetch` and `rktlet fetch` take.
fn sleeper_aci(dir: &std::path::Path) -> PathBuf {
    let manifest = serde_json::json!({
        "acKind": "ImageManifest", "acVersion": "0.8.11", "name": "example.com/sleeper",
        "labels": [{"name": "version", "value": "1.0"}, {"name": "os", "value": "linux"}],
        "app": {"exec": ["/bin/sleep", "600"], "user": "0", "group": "0"}
    });
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |path: &str, kind: tar::EntryType, mode: u32, data: &[u8]| {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        b.append_data(&mut h, path, data).expect("append");
    };
    add("manifest", tar::EntryType::Regular, 0o644, &serde_json::to_vec(&manifest).expect("manifest"));
    add("rootfs/", tar::EntryType::Directory, 0o755, b"");
    add("rootfs/bin/", tar::EntryType::Directory, 0o755, b"");
    add("rootfs/bin/sleep", tar::EntryType::Regular, 0o755, b"#!/bin/sh\n");
    let path = dir.join("sleeper.aci");
    std::fs::write(&path, b.into_inner().expect("tar")).expect("aci");
    path
}

/// CreateContainer into a pod that reads as running (its lock held, as the
/// sandbox process holds it) whose systemd has gone (its sandbox process,
/// here a `sleep`, has no child): the add begins (the app's files and
/// overlay directories are made) and fails where it looks for the pod's
/// systemd. The error names that step; the app's files, its ids and its
/// manifest entry are gone again, and the pod lists no container. What
/// the image's rendering added to the store stays (a cache). As an
/// ordinary user too.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_create_says_why_and_leaves_the_pod_as_it_was() {
    let n = Node::new();
    let files = tempfile::tempdir().expect("tempdir");
    let aci = sleeper_aci(files.path());
    crate::image::aci::Fetcher::new(&n.rt.images, None).fetch(&aci.display().to_string()).await.expect("fetch");

    let config = pod_config("hollow");
    let manifest = crate::sandbox::from_cri::manifest_from_config(&config, false, false, "hollow");
    let mut pod = rkt::pod::Pod::create(&n.rt.data).expect("create");
    pod.to_preparing().expect("prepare");
    pod.write_initial(&manifest).expect("manifest");
    pod.to_run().expect("run");
    // the stage1 directories an add writes into, and the pod's own ids
    let stage1 = pod.path().join("stage1/rootfs");
    for dir in ["etc", "opt/stage2", "rkt/env", "rkt/status"] {
        std::fs::create_dir_all(stage1.join(dir)).expect("stage1 directory");
    }
    std::fs::write(stage1.join("etc/passwd"), "root:x:0:0::/:/bin/sh\n").expect("passwd");
    std::fs::write(stage1.join("etc/group"), "root:x:0:\n").expect("group");
    // and the spare a booted pod has made ready for its first add
    crate::stage1::spare::replenish(&pod.path()).expect("spare");
    // the sandbox process: alive, but the pod's systemd below it is gone
    /// Killed when dropped, the test failing or not.
    struct Sandbox(std::process::Child);
    impl Drop for Sandbox {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let sandbox = Sandbox(std::process::Command::new("sleep").arg("600").spawn().expect("sleep"));
    std::fs::write(pod.path().join(rkt::pod::PPID_FILE), sandbox.0.id().to_string()).expect("ppid");
    let id = pod.uuid().to_string();
    let manifest_before = std::fs::read(pod.path().join("pod")).expect("pod manifest");
    // the store keeps the rendered tree, and a spare has another name each time
    let (store, spares) = (n.dir.path().join("data/cas"), pod.path().join("spares"));
    let outside_store = |files: Vec<PathBuf>| -> Vec<PathBuf> {
        files.into_iter().filter(|p| !p.starts_with(&store) && !p.starts_with(&spares)).collect()
    };
    let before = outside_store(n.data_files());

    let req = cri::CreateContainerRequest {
        pod_sandbox_id: id.clone(),
        config: Some(cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: "sleeper".into(), attempt: 0 }),
            image: Some(cri::ImageSpec { image: "example.com/sleeper:1.0".into(), ..Default::default() }),
            log_path: "sleeper/0.log".into(),
            ..Default::default()
        }),
        sandbox_config: Some(config),
    };
    let e = n.svc.create_container(Request::new(req)).await.expect_err("the pod's systemd is gone");
    drop(sandbox);
    assert!(e.message().contains("finding the pod's systemd"), "the error names the step that failed: {e:?}");
    assert_eq!(outside_store(n.data_files()), before, "the failed create leaves the pod's files as they were");
    // the spare it took went with the app; the next one is made after, ready in time
    let ready_spares = || -> Vec<String> {
        let names =
            std::fs::read_dir(&spares).map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()));
        names.map(Iterator::collect).unwrap_or_default()
    };
    let waited = std::time::Instant::now();
    while ready_spares().iter().any(|n| n.starts_with('.')) || ready_spares().is_empty() {
        assert!(waited.elapsed() < WAIT, "a spare is made again: {:?}", ready_spares());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(ready_spares().len(), 1, "one spare, nothing half-made or taken: {:?}", ready_spares());
    assert_eq!(std::fs::read(pod.path().join("pod")).expect("pod manifest"), manifest_before, "manifest unchanged");
    let list = n.svc.list_containers(Request::new(cri::ListContainersRequest::default())).await.expect("list");
    assert!(list.into_inner().containers.is_empty(), "no container is listed");
    drop(pod);
}

/// A running container's start again, update, stop and removal, its pod's
/// systemd a recording double: the second start is refused; the update is recorded and shown; the stop asks the
/// unit to stop with the grace period asked for, then reads how its main
/// process ended, and the container reads as exited with that code; a second
/// stop asks nothing; the removal leaves no trace of the app, and the pod
/// lists no container. As an ordinary user too.
#[tokio::test(flavor = "multi_thread")]
async fn update_stop_and_remove_of_a_running_container_over_its_pods_systemd() {
    use crate::stage1::bus::UnitStatus;
    use crate::stage1::bus::testing::{Call, FakeBus};
    let bus = Arc::new(FakeBus::default());
    // the main process ended by the stop signal's handler: exit code 143
    bus.set_status(UnitStatus {
        active_state: "inactive".into(),
        sub_state: "dead".into(),
        exec_main_code: 1,
        exec_main_status: 143,
        result: "exit-code".into(),
        loaded: true,
        ..Default::default()
    });
    let n = Node::over(bus.clone());
    let pod = pod_with_a_started_app(&n, "busy");
    let id = format!("{}:app", pod.uuid());
    let s = &n.svc;
    let status = |id: String| async {
        let req = cri::ContainerStatusRequest { container_id: id, verbose: false };
        s.container_status(Request::new(req)).await.map(|r| r.into_inner().status.expect("a status"))
    };
    assert_eq!(status(id.clone()).await.expect("status").state, cri::ContainerState::ContainerRunning as i32);
    // a second start is refused before anything reaches the pod (kubelet
    // starts a container once; a retry after a lost answer must not run it twice)
    let again = s.start_container(Request::new(cri::StartContainerRequest { container_id: id.clone() })).await;
    let e = again.expect_err("already started");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("already started"), "{e:?}");
    assert!(bus.calls().is_empty(), "nothing asked of the pod's systemd: {:?}", bus.calls());

    let resources = cri::LinuxContainerResources { memory_limit_in_bytes: 64 << 20, ..Default::default() };
    let update =
        cri::UpdateContainerResourcesRequest { container_id: id.clone(), linux: Some(resources), ..Default::default() };
    s.update_container_resources(Request::new(update)).await.expect("UpdateContainerResources");
    let shown = status(id.clone()).await.expect("status").resources.and_then(|r| r.linux);
    assert_eq!(shown.map(|l| l.memory_limit_in_bytes), Some(64 << 20), "the new limit is recorded and shown");
    assert!(!bus.calls().iter().any(|c| matches!(c, Call::Stop(..) | Call::Kill(..))), "{:?}", bus.calls());

    let stop = cri::StopContainerRequest { container_id: id.clone(), timeout: 7 };
    s.stop_container(Request::new(stop.clone())).await.expect("StopContainer");
    let unit = "app.service".to_string();
    let stops: Vec<Call> = bus.calls().into_iter().filter(|c| !matches!(c, Call::SetProperties(..))).collect();
    assert_eq!(
        stops,
        [Call::Stop(unit.clone(), Duration::from_secs(7)), Call::Status(unit)],
        "the unit stopped, then read"
    );
    let exited = status(id.clone()).await.expect("status");
    assert_eq!((exited.state, exited.exit_code), (cri::ContainerState::ContainerExited as i32, 143));
    let calls = bus.calls().len();
    s.stop_container(Request::new(stop)).await.expect("a second StopContainer");
    assert_eq!(bus.calls().len(), calls, "a stopped container's stop asks its pod nothing");

    let paths = crate::stage1::app::AppPaths::new(&pod, "app");
    s.remove_container(Request::new(cri::RemoveContainerRequest { container_id: id.clone() }))
        .await
        .expect("RemoveContainer");
    assert_eq!(status(id.clone()).await.err().map(|e| e.code()), Some(Code::NotFound), "removed");
    for gone in [paths.status_file("-created"), paths.status_file("-started"), paths.status_file(""), paths.appsinfo()]
    {
        assert!(!gone.exists(), "{} is left", gone.display());
    }
    let list = s.list_containers(Request::new(cri::ListContainersRequest::default())).await.expect("list");
    assert!(list.into_inner().containers.is_empty(), "no container is listed");
    drop(pod);
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

/// The next event of a GetContainerEvents stream (a hang is a failure).
async fn next_event(
    events: &mut (impl Stream<Item = Result<cri::ContainerEventResponse, tonic::Status>> + Unpin),
) -> cri::ContainerEventResponse {
    let next = tokio::time::timeout(WAIT, events.next()).await.expect("an event within 5 s");
    next.expect("the stream stays open").expect("an event, not an error")
}

async fn subscribe(n: &Node) -> <CriService as RuntimeService>::GetContainerEventsStream {
    let r = n.svc.get_container_events(Request::new(cri::GetEventsRequest {})).await;
    r.expect("GetContainerEvents").into_inner()
}

#[tokio::test(flavor = "multi_thread")]
async fn container_events_carry_what_kubelets_evented_pleg_reads() {
    use crate::runtime::EventKind;
    use cri::ContainerEventType as T;
    let n = Node::new();
    let pod = exited_pod(&n, "web");
    let uuid: uuid::Uuid = pod.parse().expect("a uuid");
    let mut events = subscribe(&n).await;
    assert!(events.next().now_or_never().is_none(), "open, and nothing sent before anything happened");
    let before = crate::base::time::now_nanos();
    n.rt.emit(uuid, "app", EventKind::Started);
    let after = crate::base::time::now_nanos();
    let e = next_event(&mut events).await;
    assert_eq!(e.container_id, format!("{pod}:app"));
    assert_eq!(e.container_event_type(), T::ContainerStartedEvent);
    assert!((before..=after).contains(&e.created_at), "{} is when it was sent, in ns", e.created_at);
    // kubelet skips an event without the pod's status and metadata, and files it under the uid
    let status = e.pod_sandbox_status.expect("the pod's status");
    assert_eq!(status.id, pod);
    let meta = status.metadata.as_ref().expect("the pod's metadata");
    assert_eq!((meta.name.as_str(), meta.uid.as_str(), meta.namespace.as_str()), ("web", "web-uid", "default"));
    assert_eq!(status.state(), cri::PodSandboxState::SandboxNotready, "its sandbox has ended");
    let ids: Vec<&str> = e.containers_statuses.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, [format!("{pod}:app")], "the pod's containers' statuses");
    // every kind, in the order sent, as its CRI type
    let kinds = [
        (EventKind::Created, T::ContainerCreatedEvent),
        (EventKind::Stopped, T::ContainerStoppedEvent),
        (EventKind::Deleted, T::ContainerDeletedEvent),
    ];
    for (kind, _) in kinds {
        n.rt.emit(uuid, "app", kind);
    }
    for (kind, want) in kinds {
        let e = next_event(&mut events).await;
        assert_eq!(e.container_event_type(), want, "{kind:?}");
        assert_eq!(e.container_id, format!("{pod}:app"));
    }
    assert!(events.next().now_or_never().is_none(), "nothing more, and still open");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_that_goes_away_leaves_the_others_served() {
    use crate::runtime::EventKind;
    let n = Node::new();
    let pod: uuid::Uuid = NO_POD.parse().expect("a uuid");
    let gone = subscribe(&n).await;
    let mut stays = subscribe(&n).await;
    n.rt.emit(pod, "one", EventKind::Created);
    drop(gone); // with an event it never read
    n.rt.emit(pod, "two", EventKind::Started);
    assert_eq!(n.rt.events.receiver_count(), 1, "the dropped stream no longer subscribes");
    for app in ["one", "two"] {
        let e = next_event(&mut stays).await;
        assert_eq!(e.container_id, format!("{NO_POD}:{app}"));
        // the pod is not on disk (removed since): no status, which kubelet skips
        assert!(e.pod_sandbox_status.is_none() && e.containers_statuses.is_empty());
    }
    drop(stays);
    // none listening is fine, and the next subscriber gets what comes after it
    n.rt.emit(pod, "unheard", EventKind::Stopped);
    let mut next = subscribe(&n).await;
    n.rt.emit(pod, "three", EventKind::Deleted);
    let e = next_event(&mut next).await;
    assert_eq!(e.container_id, format!("{NO_POD}:three"), "only what was sent after it subscribed");
    assert_eq!(e.container_event_type(), cri::ContainerEventType::ContainerDeletedEvent);
}

#[tokio::test(flavor = "multi_thread")]
async fn list_streams_of_an_empty_node_send_one_empty_chunk() {
    // as the List verbs' empty answers: one message with no items, then the end
    let n = Node::new();
    let s = &n.svc;
    let pods = s.stream_pod_sandboxes(Request::new(Default::default())).await.expect("StreamPodSandboxes");
    assert_eq!(drain(pods.into_inner()).await.expect("chunks"), [cri::StreamPodSandboxesResponse::default()]);
    let ctrs = s.stream_containers(Request::new(Default::default())).await.expect("StreamContainers");
    assert_eq!(drain(ctrs.into_inner()).await.expect("chunks"), [cri::StreamContainersResponse::default()]);
    let stats = s.stream_container_stats(Request::new(Default::default())).await.expect("StreamContainerStats");
    assert_eq!(drain(stats.into_inner()).await.expect("chunks"), [cri::StreamContainerStatsResponse::default()]);
    let stats = s.stream_pod_sandbox_stats(Request::new(Default::default())).await.expect("StreamPodSandboxStats");
    assert_eq!(drain(stats.into_inner()).await.expect("chunks"), [cri::StreamPodSandboxStatsResponse::default()]);
    let metrics =
        s.stream_pod_sandbox_metrics(Request::new(Default::default())).await.expect("StreamPodSandboxMetrics");
    assert_eq!(drain(metrics.into_inner()).await.expect("chunks"), [cri::StreamPodSandboxMetricsResponse::default()]);
    let images = s.stream_images(Request::new(Default::default())).await.expect("StreamImages");
    assert_eq!(drain(images.into_inner()).await.expect("chunks"), [cri::StreamImagesResponse::default()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn list_streams_filtered_by_an_unknown_id_send_nothing() {
    let n = Node::new();
    let s = &n.svc;
    let pod = exited_pod(&n, "web");
    let ctr = format!("{pod}:app");
    // unfiltered, the pod and its container are there
    let all = s.stream_pod_sandboxes(Request::new(Default::default())).await.expect("StreamPodSandboxes");
    let chunks = drain(all.into_inner()).await.expect("chunks");
    let ids: Vec<String> = chunks.into_iter().flat_map(|c| c.pod_sandboxes).map(|p| p.id).collect();
    assert_eq!(ids, [pod.as_str()]);
    let all = s.stream_containers(Request::new(Default::default())).await.expect("StreamContainers");
    let chunks = drain(all.into_inner()).await.expect("chunks");
    let ids: Vec<String> = chunks.into_iter().flat_map(|c| c.containers).map(|c| c.id).collect();
    assert_eq!(ids, [ctr.as_str()]);

    let pod_filter = |id: &str| Some(cri::PodSandboxFilter { id: id.into(), ..Default::default() });
    let r = s.stream_pod_sandboxes(Request::new(cri::StreamPodSandboxesRequest { filter: pod_filter(NO_POD) })).await;
    let chunks = drain(r.expect("StreamPodSandboxes").into_inner()).await.expect("no error");
    assert!(chunks.iter().all(|c| c.pod_sandboxes.is_empty()), "{chunks:?}");

    let by_id = cri::ContainerFilter { id: NO_CONTAINER.into(), ..Default::default() };
    let by_pod = cri::ContainerFilter { pod_sandbox_id: NO_POD.into(), ..Default::default() };
    for filter in [by_id, by_pod] {
        let req = cri::StreamContainersRequest { filter: Some(filter.clone()) };
        let chunks = drain(s.stream_containers(Request::new(req)).await.expect("StreamContainers").into_inner()).await;
        let chunks = chunks.expect("no error");
        assert!(chunks.iter().all(|c| c.containers.is_empty()), "{filter:?}: {chunks:?}");
    }

    let by_id = cri::ContainerStatsFilter { id: NO_CONTAINER.into(), ..Default::default() };
    let by_pod = cri::ContainerStatsFilter { pod_sandbox_id: NO_POD.into(), ..Default::default() };
    for filter in [by_id, by_pod] {
        let req = cri::StreamContainerStatsRequest { filter: Some(filter.clone()) };
        let r = s.stream_container_stats(Request::new(req)).await.expect("StreamContainerStats");
        let chunks = drain(r.into_inner()).await.expect("no error");
        assert!(chunks.iter().all(|c| c.container_stats.is_empty()), "{filter:?}: {chunks:?}");
    }

    let filter = Some(cri::PodSandboxStatsFilter { id: NO_POD.into(), ..Default::default() });
    let r = s.stream_pod_sandbox_stats(Request::new(cri::StreamPodSandboxStatsRequest { filter })).await;
    let chunks = drain(r.expect("StreamPodSandboxStats").into_inner()).await.expect("no error");
    assert!(chunks.iter().all(|c| c.pod_sandbox_stats.is_empty()), "{chunks:?}");

    let image = Some(cri::ImageSpec { image: "busybox:1.36".into(), ..Default::default() });
    let filter = Some(cri::ImageFilter { image });
    let r = s.stream_images(Request::new(cri::StreamImagesRequest { filter })).await;
    let chunks = drain(r.expect("StreamImages").into_inner()).await.expect("no error");
    assert!(chunks.iter().all(|c| c.images.is_empty()), "{chunks:?}");
}

/// The gRPC codes of ExecSync, Exec, Attach (of `ctr`) and PortForward (of `pod`).
async fn stream_verb_codes(s: &CriService, ctr: &str, pod: &str) -> [(&'static str, Code); 4] {
    let exec_sync = cri::ExecSyncRequest { container_id: ctr.into(), cmd: vec!["true".into()], timeout: 1 };
    let exec =
        cri::ExecRequest { container_id: ctr.into(), cmd: vec!["sh".into()], stdout: true, ..Default::default() };
    let attach = cri::AttachRequest { container_id: ctr.into(), stdout: true, ..Default::default() };
    let forward = cri::PortForwardRequest { pod_sandbox_id: pod.into(), port: vec![80] };
    [
        ("ExecSync", code(s.exec_sync(Request::new(exec_sync)).await)),
        ("Exec", code(s.exec(Request::new(exec)).await)),
        ("Attach", code(s.attach(Request::new(attach)).await)),
        ("PortForward", code(s.port_forward(Request::new(forward)).await)),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_attach_and_port_forward_of_what_is_not_there_or_not_running() {
    let n = Node::new();
    let pod = exited_pod(&n, "web");
    let before = n.data_files();
    let prefix = &NO_POD[..8];
    let absent = [
        ("an unknown pod", NO_CONTAINER.to_string(), NO_POD.to_string()),
        ("an id prefix of no pod", format!("{prefix}:app"), prefix.to_string()),
        ("not a pod id", "not-a-uuid:app".to_string(), "not-a-uuid".to_string()),
        ("an unknown app of a pod", format!("{pod}:nope"), NO_POD.to_string()),
    ];
    for (what, ctr, pod) in absent {
        for (verb, c) in stream_verb_codes(&n.svc, &ctr, &pod).await {
            assert_eq!(c, Code::NotFound, "{verb} of {what} ({ctr}, {pod})");
        }
    }
    // there, but its sandbox has ended: nothing to run in, read from or forward to
    for (verb, c) in stream_verb_codes(&n.svc, &format!("{pod}:app"), &pod).await {
        assert_eq!(c, Code::FailedPrecondition, "{verb} of a container whose pod has exited");
    }
    assert_eq!(n.data_files(), before, "refused requests leave the data dir as it was");
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_attach_and_port_forward_missing_what_they_need_are_invalid() {
    // of a pod and container that exist, so that a lookup cannot be what refuses them
    let n = Node::new();
    let pod = exited_pod(&n, "web");
    let ctr = format!("{pod}:app");
    let before = n.data_files();
    let s = &n.svc;
    let exec = |f: fn(&mut cri::ExecRequest)| {
        let mut r =
            cri::ExecRequest { container_id: ctr.clone(), cmd: vec!["sh".into()], stdout: true, ..Default::default() };
        f(&mut r);
        r
    };
    let attach = |f: fn(&mut cri::AttachRequest)| {
        let mut r = cri::AttachRequest { container_id: ctr.clone(), stdout: true, ..Default::default() };
        f(&mut r);
        r
    };
    let exec_sync = |f: fn(&mut cri::ExecSyncRequest)| {
        let mut r = cri::ExecSyncRequest { container_id: ctr.clone(), cmd: vec!["true".into()], timeout: 1 };
        f(&mut r);
        r
    };
    let forward = |id: &str, port: i32| cri::PortForwardRequest { pod_sandbox_id: id.into(), port: vec![port] };
    let cases = [
        ("Exec of no command", code(s.exec(Request::new(exec(|r| r.cmd.clear()))).await)),
        ("Exec with no stream", code(s.exec(Request::new(exec(|r| r.stdout = false))).await)),
        ("Exec with a tty and stderr", code(s.exec(Request::new(exec(|r| (r.tty, r.stderr) = (true, true)))).await)),
        ("Exec of no container", code(s.exec(Request::new(exec(|r| r.container_id.clear()))).await)),
        ("Attach with no stream", code(s.attach(Request::new(attach(|r| r.stdout = false))).await)),
        (
            "Attach with a tty and stderr",
            code(s.attach(Request::new(attach(|r| (r.tty, r.stderr) = (true, true)))).await),
        ),
        ("Attach of no container", code(s.attach(Request::new(attach(|r| r.container_id.clear()))).await)),
        ("ExecSync of no command", code(s.exec_sync(Request::new(exec_sync(|r| r.cmd.clear()))).await)),
        ("ExecSync with a negative timeout", code(s.exec_sync(Request::new(exec_sync(|r| r.timeout = -1))).await)),
        ("ExecSync of no container", code(s.exec_sync(Request::new(exec_sync(|r| r.container_id.clear()))).await)),
        ("PortForward of no pod", code(s.port_forward(Request::new(forward("", 80))).await)),
        ("PortForward of port 0", code(s.port_forward(Request::new(forward(&pod, 0))).await)),
        ("PortForward of port 65536", code(s.port_forward(Request::new(forward(&pod, 65536))).await)),
        ("PortForward of port -1", code(s.port_forward(Request::new(forward(&pod, -1))).await)),
    ];
    let wrong: Vec<String> =
        cases.iter().filter(|(_, c)| *c != Code::InvalidArgument).map(|(what, c)| format!("{what}: {c:?}")).collect();
    assert!(wrong.is_empty(), "must be InvalidArgument: {wrong:?}");
    assert_eq!(n.data_files(), before, "refused requests leave the data dir as it was");
}
