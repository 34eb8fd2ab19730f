//! rkt driving rktlet's pods, by rkt's published rules (rkt 1.30's stage0,
//! `rkt gc`, `rkt stop`, the stage1 implementors' guide), without the rkt
//! binary: each test does what rkt's code does, step by step.
//! - `$P/stage1/manifest` is a valid appc image manifest naming stop and gc
//!   entry points; run as stage0 runs them (cwd `$P`, the caller's
//!   environment, `[--force] UUID` / `[--debug] [--local-config DIR] UUID`),
//!   stop stops the pod and gc releases what it holds on the node;
//! - after `rkt gc --mark-only` (a rename to `pods/exited-garbage`) CRI
//!   still lists the pod and its containers until they are removed;
//! - the daemon's start leaves what other programs keep in `cas/tmp`.

mod common;

use common::{Daemon, TestNetwork, assert_no_leaks, host_network, pod_config};
use rktlet::proto::v1 as cri;
use rktlet::proto::v1::runtime_service_client::RuntimeServiceClient;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

type Client = RuntimeServiceClient<Channel>;

/// appc's ACIdentifier: `^[a-z0-9]+([-._~/][a-z0-9]+)*$`.
fn is_ac_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.split(['-', '.', '_', '~', '/'])
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
}

/// Checks `$P/stage1/manifest` against appc's ImageManifest rules (the
/// schema's validation: kind, semver version, identifier names, unique
/// label and annotation names, a valid os/arch pair) and returns it.
fn stage1_manifest(pod_dir: &Path) -> serde_json::Value {
    let path = pod_dir.join("stage1/manifest");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // the same bytes parse as rktlet's own appc ImageManifest type
    let _: rkt::schema::ImageManifest = serde_json::from_slice(&bytes).expect("an appc ImageManifest");
    let m: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(m["acKind"], "ImageManifest", "{m}");
    let version = m["acVersion"].as_str().expect("acVersion");
    let parts: Vec<&str> = version.split(['-', '+']).next().unwrap_or("").split('.').collect();
    assert!(parts.len() == 3 && parts.iter().all(|p| p.parse::<u64>().is_ok()), "acVersion {version} not semver");
    assert!(is_ac_identifier(m["name"].as_str().expect("name")), "{m}");
    let pairs = |key: &str| -> Vec<(String, String)> {
        m[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key}: {m}"))
            .iter()
            .map(|nv| (nv["name"].as_str().expect("name").into(), nv["value"].as_str().expect("value").into()))
            .collect()
    };
    for key in ["labels", "annotations"] {
        let list = pairs(key);
        let names: std::collections::BTreeSet<&str> = list.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.len(), list.len(), "duplicate {key}: {m}");
        assert!(names.iter().all(|n| is_ac_identifier(n)), "{key} names: {m}");
    }
    let labels = pairs("labels");
    let label = |n: &str| labels.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    assert_eq!(label("os"), Some("linux"));
    let linux_arches =
        ["amd64", "i386", "aarch64", "aarch64_be", "armv6l", "armv7l", "armv7b", "ppc64", "ppc64le", "s390x"];
    assert!(label("arch").is_some_and(|a| linux_arches.contains(&a)), "arch: {m}");
    m
}

/// Annotation `name` of a stage1 manifest.
fn annotation(m: &serde_json::Value, name: &str) -> Option<String> {
    m["annotations"].as_array()?.iter().find(|a| a["name"] == name).and_then(|a| a["value"].as_str()).map(String::from)
}

/// Runs the stage1 entry point `which` (`stop`, `gc`) of the pod in
/// `pod_dir` as rkt's stage0 does: found through the manifest, the program
/// `$P/stage1/rootfs/<value>`, cwd the pod directory, the caller's environment.
fn run_entry_point(pod_dir: &Path, which: &str, args: &[&str]) -> Output {
    let m = stage1_manifest(pod_dir);
    let ep = annotation(&m, &format!("coreos.com/rkt/stage1/{which}"))
        .unwrap_or_else(|| panic!("no {which} entry point: {m}"));
    assert!(ep.starts_with('/'), "entry point {ep} is not a path in the stage1 rootfs");
    let program = pod_dir.join("stage1/rootfs").join(ep.trim_start_matches('/'));
    Command::new(&program)
        .args(args)
        .current_dir(pod_dir)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()))
}

/// `rkt gc`'s arguments for the pod's stage1: `--local-config` from interface version 5.
fn gc_args<'a>(pod_dir: &Path, uuid: &'a str, debug: bool) -> Vec<&'a str> {
    let version: u32 = annotation(&stage1_manifest(pod_dir), "coreos.com/rkt/stage1/interface-version")
        .map(|v| v.parse().expect("interface version is a number"))
        .unwrap_or(1);
    let mut args = Vec::new();
    if debug {
        args.push("--debug");
    }
    if version >= 5 {
        args.extend(["--local-config", "/etc/rkt"]);
    }
    args.push(uuid);
    args
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn sandbox_state(rt: &mut Client, id: &str) -> i32 {
    common::pod_status(rt, id).await.state
}

fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.to_string_lossy().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| *m == prefix || m.starts_with(&format!("{prefix}/")))
        .map(String::from)
        .collect()
}

fn wait_unlocked(pod_dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while rkt::lock::is_held(pod_dir).expect("probe") {
        assert!(Instant::now() < deadline, "pod lock of {} still held", pod_dir.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What `rkt gc` does to an exited pod after its mark (rename to
/// `exited-garbage`): exclusive lock, the stage1 gc entry point, then its
/// own unmount of leftovers and removal of the stage1 rootfs and the pod.
/// The entry point must have unmounted everything under the pod (rkt's own
/// unmount pass after it is a fallback this test does not take).
fn rkt_sweep(pod_dir: &Path, uuid: &str) {
    let _lock = rkt::lock::try_exclusive_dir(pod_dir).expect("lock").expect("nobody holds an exited pod's lock");
    ok(&run_entry_point(pod_dir, "gc", &gc_args(pod_dir, uuid, true)), "gc entry point");
    let left = mounts_under(pod_dir);
    assert!(left.is_empty(), "mounts left after the gc entry point of {uuid}: {left:?}");
    ok(&run_entry_point(pod_dir, "gc", &gc_args(pod_dir, uuid, false)), "gc entry point, once more");
    std::fs::remove_dir_all(pod_dir.join("stage1/rootfs")).expect("rm stage1 rootfs");
    std::fs::remove_dir_all(pod_dir).expect("rm pod");
}

/// rkt's mark: `pods/run/<uuid>` renamed to `pods/exited-garbage/<uuid>`.
fn rkt_mark(data: &Path, uuid: &str) -> PathBuf {
    let to = data.join("pods/exited-garbage").join(uuid);
    std::fs::rename(data.join("pods/run").join(uuid), &to).expect("rename to exited-garbage");
    to
}

#[tokio::test(flavor = "multi_thread")]
async fn rkt_stop_entry_point_stops_a_running_pod() {
    let (_dir, net, d) = common::daemon_with_network();
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let (a, b) = (
        common::run_pod(&mut rt, &pod_config("stop-plain", &[])).await,
        common::run_pod(&mut rt, &pod_config("stop-force", &[])).await,
    );
    assert_eq!(net.allocated().len(), 2);
    for (id, args) in [(&a, vec![a.as_str()]), (&b, vec!["--force", b.as_str()])] {
        let pod_dir = data.join("pods/run").join(id);
        let m = stage1_manifest(&pod_dir);
        assert!(annotation(&m, "coreos.com/rkt/stage1/gc").is_some(), "{m}");
        // rkt image gc reads it for every pod (and skips a pod without it)
        assert!(pod_dir.join("stage1TreeStoreID").is_file());
        assert_eq!(sandbox_state(&mut rt, id).await, cri::PodSandboxState::SandboxReady as i32);
        ok(&run_entry_point(&pod_dir, "stop", &args), "stop entry point");
        assert!(!rkt::lock::is_held(&pod_dir).expect("probe"), "pod {id} still running after stop");
        assert_eq!(sandbox_state(&mut rt, id).await, cri::PodSandboxState::SandboxNotready as i32);
        assert!(common::processes_mentioning(id).is_empty(), "{:?}", common::processes_mentioning(id));
        assert!(!Path::new(&format!("/var/run/netns/rktlet-{id}")).exists(), "netns of {id} left");
    }
    assert!(net.allocated().is_empty(), "addresses left: {:?}", net.allocated());
    for id in [&a, &b] {
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.to_string() }).await.expect("remove");
    }
    assert_no_leaks(&data, &[a, b]);
}

/// A pod whose sandbox died without the daemon tearing it down (its netns,
/// address, cgroup and mounts remain), then collected by rkt's gc; and a pod
/// the daemon had stopped already (gc has nothing left to do, and succeeds).
#[tokio::test(flavor = "multi_thread")]
async fn rkt_gc_entry_point_releases_what_an_exited_pod_holds() {
    let (_dir, net, d) = common::daemon_with_network();
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let config = pod_config("gc-died", &[]);
    let died = common::run_pod(&mut rt, &config).await;
    let c = common::create_container(&mut rt, &died, &config, common::container_config("c", &image, &["sleep", "100"]))
        .await;
    rt.start_container(cri::StartContainerRequest { container_id: c }).await.expect("start");
    let stopped = common::run_pod(&mut rt, &pod_config("gc-stopped", &[])).await;
    assert_eq!(net.allocated().len(), 2);

    let run_dir = data.join("pods/run").join(&died);
    let ppid: i32 = std::fs::read_to_string(run_dir.join("ppid")).expect("ppid").trim().parse().expect("pid");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(ppid), nix::sys::signal::Signal::SIGKILL).expect("kill");
    wait_unlocked(&run_dir);
    // what rkt's gc finds: an exited pod that still holds node resources
    assert_eq!(net.allocated().len(), 2, "the dead pod's address is still allocated");
    assert!(Path::new(&format!("/var/run/netns/rktlet-{died}")).exists(), "the dead pod's netns is still there");

    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: stopped.clone() }).await.expect("stop");
    for id in [&died, &stopped] {
        let pod_dir = rkt_mark(&data, id);
        rkt_sweep(&pod_dir, id);
    }
    assert!(net.allocated().is_empty(), "addresses left: {:?}", net.allocated());
    assert_no_leaks(&data, &[died, stopped]);
}

/// The gc entry point refuses a running pod (rkt never asks; an operator might).
#[tokio::test(flavor = "multi_thread")]
async fn rkt_gc_entry_point_leaves_a_running_pod_alone() {
    let d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let id = common::run_pod(&mut rt, &host_network(pod_config("gc-running", &[]))).await;
    let pod_dir = data.join("pods/run").join(&id);
    let out = run_entry_point(&pod_dir, "gc", &gc_args(&pod_dir, &id, false));
    assert!(!out.status.success(), "gc of a running pod succeeded");
    assert!(String::from_utf8_lossy(&out.stderr).contains("running"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(sandbox_state(&mut rt, &id).await, cri::PodSandboxState::SandboxReady as i32);
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("remove");
    assert_no_leaks(&data, &[id]);
}

async fn listed_pods(rt: &mut Client) -> std::collections::BTreeMap<String, i32> {
    let l = rt.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }).await.expect("list").into_inner();
    l.items.into_iter().map(|p| (p.id, p.state)).collect()
}

async fn listed_containers(rt: &mut Client) -> std::collections::BTreeMap<String, i32> {
    let l = rt.list_containers(cri::ListContainersRequest { filter: None }).await.expect("list").into_inner();
    l.containers.into_iter().map(|c| (c.id, c.state)).collect()
}

/// After `rkt gc --mark-only` (a rename, or `rktlet gc --mark-only`) an
/// exited pod and its containers stay listed, NOTREADY and EXITED, until removed.
#[tokio::test(flavor = "multi_thread")]
async fn marked_exited_pods_stay_listed_until_removed() {
    let d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let mut pods = Vec::new();
    for name in ["marked-by-rename", "marked-by-cli"] {
        let config = host_network(pod_config(name, &[]));
        let pod = common::run_pod(&mut rt, &config).await;
        let c =
            common::create_container(&mut rt, &pod, &config, common::container_config("c", &image, &["sleep", "100"]))
                .await;
        rt.start_container(cri::StartContainerRequest { container_id: c.clone() }).await.expect("start");
        rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("stop");
        pods.push((pod, c));
    }
    let exited = cri::ContainerState::ContainerExited as i32;
    let notready = cri::PodSandboxState::SandboxNotready as i32;
    let before = (listed_pods(&mut rt).await, listed_containers(&mut rt).await);
    for (pod, c) in &pods {
        assert_eq!(before.0.get(pod), Some(&notready));
        assert_eq!(before.1.get(c), Some(&exited));
    }

    rkt_mark(&data, &pods[0].0);
    let out = Command::new(common::BIN).arg("--dir").arg(&data).args(["gc", "--mark-only"]).output().expect("gc");
    ok(&out, "rktlet gc --mark-only");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("moved {} to garbage", pods[1].0));
    for (pod, _) in &pods {
        assert!(data.join("pods/exited-garbage").join(pod).is_dir(), "{pod} not marked");
    }
    assert_eq!((listed_pods(&mut rt).await, listed_containers(&mut rt).await), before, "listing changed by the mark");
    for (pod, c) in &pods {
        assert_eq!(sandbox_state(&mut rt, pod).await, notready);
        let st = rt
            .container_status(cri::ContainerStatusRequest { container_id: c.clone(), verbose: false })
            .await
            .expect("ContainerStatus")
            .into_inner()
            .status
            .expect("status");
        assert_eq!(st.state, exited);
        let by_pod = rt
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter { pod_sandbox_id: pod.clone(), ..Default::default() }),
            })
            .await
            .expect("list")
            .into_inner();
        assert_eq!(by_pod.containers.iter().map(|c| c.id.clone()).collect::<Vec<_>>(), vec![c.clone()]);
    }

    for (pod, _) in &pods {
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    }
    assert!(listed_pods(&mut rt).await.is_empty());
    assert!(listed_containers(&mut rt).await.is_empty());
    assert_no_leaks(&data, &pods.into_iter().map(|(p, _)| p).collect::<Vec<_>>());
}

/// `cas/tmp` is shared with rkt: a daemon start removes the leftovers of
/// its own interrupted pulls and nothing else (rkt's `docker2aci-*` work
/// dirs, anything of another name, a pull whose lock a live process holds).
#[tokio::test(flavor = "multi_thread")]
async fn daemon_start_leaves_other_programs_work_in_cas_tmp() {
    let root = tempfile::tempdir().expect("tempdir");
    let tmp = root.path().join("data/cas/tmp");
    std::fs::create_dir_all(&tmp).expect("cas/tmp");
    let make = |name: &str| {
        std::fs::create_dir_all(tmp.join(name).join("rootfs")).expect("dir");
        std::fs::write(tmp.join(name).join("manifest"), b"{}").expect("file");
    };
    // rkt's docker2aci work dir, and one with a lock file next to it (as a pull's)
    make("docker2aci-123456");
    make("other-tool");
    std::fs::write(tmp.join("other-tool.lock"), b"").expect("lock file");
    // a pull a killed rktlet left, and one a live process still holds
    make("pull-0123456789abcdef0123456789abcdef");
    std::fs::write(tmp.join("pull-0123456789abcdef0123456789abcdef.lock"), b"").expect("lock");
    make("pull-fedcba9876543210fedcba9876543210");
    let held = rkt::lock::exclusive_file(&tmp.join("pull-fedcba9876543210fedcba9876543210.lock")).expect("hold");

    let socket = root.path().join("run/rktlet.sock");
    let child = Daemon::spawn(&socket, root.path(), &[]);
    let cni_conf_dir = Daemon::cni_conf_dir(root.path(), &[]);
    let mut d = Daemon { child, socket, dir: root, cni_conf_dir };
    d.wait_ready();
    // answered only once the start's cleanup is done
    d.runtime().await.version(cri::VersionRequest::default()).await.expect("Version");
    let tmp = d.dir.path().join("data/cas/tmp");
    for kept in ["docker2aci-123456", "other-tool", "other-tool.lock", "pull-fedcba9876543210fedcba9876543210"] {
        assert!(tmp.join(kept).exists(), "{kept} removed: {}", d.log());
    }
    assert!(tmp.join("docker2aci-123456/manifest").is_file());
    assert!(!tmp.join("pull-0123456789abcdef0123456789abcdef").exists(), "stale pull dir kept");
    assert!(!tmp.join("pull-0123456789abcdef0123456789abcdef.lock").exists(), "stale pull lock kept");
    drop(held);
}

/// Pool pods get the stage1 manifest when they boot, and keep it (with
/// working entry points) when a request adopts them.
#[tokio::test(flavor = "multi_thread")]
async fn pool_pods_and_adopted_pods_have_the_stage1_entry_points() {
    let dir = tempfile::tempdir().expect("tempdir");
    let net = TestNetwork::new(dir.path());
    let conf = net.conf_dir.to_string_lossy().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni", "--pod-pool-size", "1"]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let pool_info = |rt: &mut Client| {
        let mut rt = rt.clone();
        async move {
            let st = rt.status(cri::StatusRequest { verbose: true }).await.expect("Status").into_inner();
            let text = st.info.get("podPool").cloned().unwrap_or_default();
            serde_json::from_str::<serde_json::Value>(&text).expect("podPool json")["pool"].clone()
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = pool_info(&mut rt).await;
        if let Some(why) = info["disabled"].as_str() {
            common::skipped("pool_pods_and_adopted_pods_have_the_stage1_entry_points", why);
            return;
        }
        if info["ready"].as_u64() == Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "pool did not fill: {info}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pooled: Vec<String> = std::fs::read_dir(data.join("pods/run"))
        .expect("run")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(pooled.len(), 1);
    let m = stage1_manifest(&data.join("pods/run").join(&pooled[0]));
    assert!(annotation(&m, "coreos.com/rkt/stage1/stop").is_some(), "{m}");

    let id = common::run_pod(&mut rt, &pod_config("adopted", &[])).await;
    assert_eq!(id, pooled[0], "the request was not served by the pool pod");
    let pod_dir = data.join("pods/run").join(&id);
    ok(&run_entry_point(&pod_dir, "stop", &[id.as_str()]), "stop entry point of an adopted pod");
    assert_eq!(sandbox_state(&mut rt, &id).await, cri::PodSandboxState::SandboxNotready as i32);
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("remove");
    // (the pool boots a replacement meanwhile: only this pod's leftovers count)
    assert_no_leaks(&data, &[id]);
}

/// A pod an older rktlet made (no stage1 manifest) gets the manifest and
/// working entry points from the next daemon start.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_daemon_gives_older_pods_the_entry_points() {
    let mut d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let id = common::run_pod(&mut rt, &host_network(pod_config("older", &[]))).await;
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    let pod_dir = data.join("pods/run").join(&id);
    for f in ["stage1/manifest", "stage1TreeStoreID", "stage1/rootfs/stop", "stage1/rootfs/gc"] {
        std::fs::remove_file(pod_dir.join(f)).expect(f);
    }

    d.child = Daemon::spawn(&d.socket, d.dir.path(), &[]);
    d.wait_ready();
    let mut rt = d.runtime().await;
    // answered once the start's reconcile is done
    rt.list_containers(cri::ListContainersRequest { filter: None }).await.expect("ListContainers");
    assert!(pod_dir.join("stage1TreeStoreID").is_file());
    ok(&run_entry_point(&pod_dir, "stop", &[id.as_str()]), "stop entry point of an older pod");
    assert_eq!(sandbox_state(&mut rt, &id).await, cri::PodSandboxState::SandboxNotready as i32);
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("remove");
    assert_no_leaks(&data, &[id]);
}
