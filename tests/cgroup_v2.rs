//! Limits on a pure cgroup v2 host (systemd as PID 1, every controller on
//! the unified hierarchy): what `scripts/node-lane.sh vm` runs inside the
//! node VM. Every check reads what a user would: the container's status, its
//! stats, and the cgroup files of its unit. On any other host each test
//! prints one `SKIPPED:` line and returns.
//!
//! The image comes from `RKTLET_TEST_IMAGE` (the VM reaches the host's
//! registry at 10.0.2.2) or the seeded fixture registry.
mod common;

use common::{Daemon, container_config, host_network, pod_config};
use rktlet::cgroup::Layout;
use rktlet::proto::v1 as cri;
use rktlet::proto::v1::runtime_service_client::RuntimeServiceClient;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Why this host cannot run the suite, if it cannot.
fn not_v2() -> Option<String> {
    let layout = match Layout::read() {
        Ok(l) => l,
        Err(e) => return Some(format!("cannot read the cgroup layout: {e}")),
    };
    if !layout.is_pure_v2() {
        return Some("this host is not pure cgroup v2 (v1 hierarchies are mounted)".into());
    }
    if layout.v2_root().is_none() {
        return Some("the unified hierarchy has no memory controller here".into());
    }
    None
}

macro_rules! v2_only {
    ($name:expr) => {
        if let Some(reason) = not_v2() {
            common::skipped(concat!("cgroup_v2::", $name), &reason);
            return;
        }
    };
}

struct Env {
    d: Daemon,
    rt: RuntimeServiceClient<Channel>,
    image: String,
    logs: tempfile::TempDir,
}

/// A daemon with the host's cgroup driver, or `cgroupfs` when asked.
async fn env(cgroupfs: bool) -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("run/rktlet.sock");
    let vars: &[(&str, &str)] = if cgroupfs { &[("RKTLET_CGROUP_DRIVER", "cgroupfs")] } else { &[] };
    let child = Daemon::spawn_env(&socket, dir.path(), &[], vars);
    let cni_conf_dir = Daemon::cni_conf_dir(dir.path(), &[]);
    let mut d = Daemon { child, socket, dir, cni_conf_dir };
    d.wait_ready();
    let image = common::pull_busybox(&d).await;
    let rt = d.runtime().await;
    Env { d, rt, image, logs: tempfile::tempdir().expect("logs") }
}

impl Env {
    fn data(&self) -> PathBuf {
        self.d.dir.path().join("data")
    }

    async fn pod(&mut self, name: &str, parent: &str) -> (String, cri::PodSandboxConfig) {
        let mut config = host_network(pod_config(name, &[]));
        config.log_directory = self.logs.path().join(name).display().to_string();
        if let Some(l) = config.linux.as_mut() {
            l.cgroup_parent = parent.to_string();
        }
        (common::run_pod(&mut self.rt, &config).await, config)
    }

    async fn container(
        &mut self,
        pod: &(String, cri::PodSandboxConfig),
        name: &str,
        command: &[&str],
        resources: cri::LinuxContainerResources,
    ) -> Result<String, tonic::Status> {
        let mut config = container_config(name, &self.image, command);
        if let Some(l) = config.linux.as_mut() {
            l.resources = Some(resources);
        }
        self.rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: pod.0.clone(),
                config: Some(config),
                sandbox_config: Some(pod.1.clone()),
            })
            .await
            .map(|r| r.into_inner().container_id)
    }

    async fn run(
        &mut self,
        pod: &(String, cri::PodSandboxConfig),
        name: &str,
        command: &[&str],
        resources: cri::LinuxContainerResources,
    ) -> String {
        let id = self.container(pod, name, command, resources).await.expect("CreateContainer");
        self.rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("StartContainer");
        id
    }

    async fn status(&mut self, id: &str) -> cri::ContainerStatus {
        self.rt
            .container_status(cri::ContainerStatusRequest { container_id: id.into(), verbose: false })
            .await
            .expect("ContainerStatus")
            .into_inner()
            .status
            .expect("status")
    }

    async fn wait_exited(&mut self, id: &str, within: Duration) -> cri::ContainerStatus {
        let deadline = Instant::now() + within;
        loop {
            let s = self.status(id).await;
            if s.state == cri::ContainerState::ContainerExited as i32 {
                return s;
            }
            assert!(Instant::now() < deadline, "container {id} did not exit: {s:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The pod's cgroup path below the hierarchy root (its `subcgroup` file).
    fn pod_cgroup(&self, pod: &str) -> String {
        std::fs::read_to_string(self.data().join("pods/run").join(pod).join("subcgroup"))
            .expect("subcgroup")
            .trim()
            .to_string()
    }

    /// The container's cgroup: its unit's in the pod's systemd.
    fn app_cgroup(&self, pod: &str, app: &str) -> PathBuf {
        let sub = self.pod_cgroup(pod);
        root().join(rktlet::cgroup::unit_subpath(&sub, app))
    }

    async fn remove_pod(&mut self, pod: &str) {
        self.rt
            .stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.into() })
            .await
            .expect("StopPodSandbox");
        self.rt
            .remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.into() })
            .await
            .expect("RemovePodSandbox");
    }
}

fn root() -> PathBuf {
    Layout::read().ok().and_then(|l| l.v2_root().map(Path::to_path_buf)).expect("v2 root")
}

fn file(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{}/{name}: {e}", dir.display())).trim().into()
}

fn stat(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {text:?}"))
}

fn memory(bytes: i64) -> cri::LinuxContainerResources {
    cri::LinuxContainerResources { memory_limit_in_bytes: bytes, ..Default::default() }
}

/// Over its memory limit a container is OOM-killed and reported so, under
/// either cgroup driver; stopping and removing the pod leaves no cgroup.
async fn oom_kill_and_cleanup(cgroupfs: bool, parent: &str) {
    let mut e = env(cgroupfs).await;
    let pod = e.pod(if cgroupfs { "oom-fs" } else { "oom-sd" }, parent).await;
    let hog = e.run(&pod, "hog", &["sh", "-c", "v=$(yes | head -c 80000000); echo survived"], memory(32 << 20)).await;
    let s = e.wait_exited(&hog, Duration::from_secs(120)).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (137, "OOMKilled"), "{s:?}");
    // a child OOM-killed: the pod's systemd does not stop the unit (the shell
    // is not SIGTERMed, 143), the exit is the shell's own, reported OOMKilled.
    // One child allocates: with `head | tail`, head's next pipe write can
    // invoke a second OOM kill before tail's pages are uncharged, and the
    // kernel then picks the shell (seen in CI, under runc alike)
    let script = "tail /dev/zero; echo after $?; exit 7";
    let piped = e.run(&pod, "piped", &["sh", "-c", script], memory(32 << 20)).await;
    let s = e.wait_exited(&piped, Duration::from_secs(120)).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (7, "OOMKilled"), "{s:?}");
    let sub = e.pod_cgroup(&pod.0);
    let pod_dir = root().join(&sub);
    assert!(pod_dir.is_dir(), "the pod's cgroup {} exists while it runs", pod_dir.display());
    e.remove_pod(&pod.0).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while pod_dir.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!pod_dir.exists(), "{} left behind", pod_dir.display());
}

#[tokio::test(flavor = "multi_thread")]
async fn oom_killed_under_cgroupfs_driver_and_no_cgroup_left() {
    v2_only!("oom_killed_under_cgroupfs_driver_and_no_cgroup_left");
    oom_kill_and_cleanup(true, "/kubepods/burstable/pod-oom-fs").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn oom_killed_under_the_hosts_driver_and_no_cgroup_left() {
    v2_only!("oom_killed_under_the_hosts_driver_and_no_cgroup_left");
    let systemd = rktlet::stage1::host::Host::detect().pid1_is_systemd;
    let parent = if systemd { "kubepods-burstable-podoomsd.slice" } else { "/kubepods/burstable/pod-oom-sd" };
    oom_kill_and_cleanup(false, parent).await;
}

/// A container with limits that ends before StartContainer returns (a
/// command that returns at once, as an OOM kill at once ends one) started
/// fine: its exit is what it reports. The pod's systemd takes such an app's
/// cgroup down, or disables its controllers, under the daemon's second write
/// of the limits (conformance's OOM spec once failed so, under emulation).
#[tokio::test(flavor = "multi_thread")]
async fn a_container_with_limits_that_ends_at_once_started() {
    v2_only!("a_container_with_limits_that_ends_at_once_started");
    let mut e = env(false).await;
    let pod = e.pod("brief", "").await;
    for i in 0..8 {
        let id = e.run(&pod, &format!("brief{i}"), &["sh", "-c", "exit 3"], memory(64 << 20)).await;
        let s = e.wait_exited(&id, Duration::from_secs(60)).await;
        assert_eq!((s.exit_code, s.reason.as_str()), (3, "Error"), "{s:?}");
    }
    e.remove_pod(&pod.0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cpu_quota_throttles_and_weight_follows_shares() {
    v2_only!("cpu_quota_throttles_and_weight_follows_shares");
    let mut e = env(false).await;
    let pod = e.pod("cpu", "").await;
    let res =
        cri::LinuxContainerResources { cpu_shares: 512, cpu_quota: 10_000, cpu_period: 100_000, ..Default::default() };
    e.run(&pod, "spin", &["sh", "-c", "while :; do :; done"], res).await;
    let dir = e.app_cgroup(&pod.0, "0-spin");
    assert_eq!(file(&dir, "cpu.max"), "10000 100000");
    assert_eq!(file(&dir, "cpu.weight"), "20", "512 shares as kubelet converts them");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = file(&dir, "cpu.stat");
        if stat(&s, "nr_throttled") > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "never throttled: {s}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    e.remove_pod(&pod.0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pids_max_from_unified_holds() {
    v2_only!("pids_max_from_unified_holds");
    let mut e = env(false).await;
    let pod = e.pod("pids", "").await;
    let res = cri::LinuxContainerResources { unified: [("pids.max".into(), "6".into())].into(), ..Default::default() };
    // the forks happen in a child shell, which dies at the first refused one
    // (ash gives up on "can't fork"); the container itself then execs, so it
    // keeps running (and its cgroup stays) whenever the limit bites
    // (the `unified` values are written right after the unit starts, which
    // systemd does not know as properties: the forks wait for them)
    let script = "sleep 2; sh -c 'i=0; while [ $i -lt 20 ]; do sleep 300 & i=$((i+1)); done'; exec sleep 300";
    e.run(&pod, "forker", &["sh", "-c", script], res).await;
    let dir = e.app_cgroup(&pod.0, "0-forker");
    assert_eq!(file(&dir, "pids.max"), "6");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = file(&dir, "pids.events");
        if stat(&events, "max") > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no fork was refused: {events}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let current: u64 = file(&dir, "pids.current").parse().expect("pids.current");
    assert!(current <= 6, "{current} tasks under pids.max 6");
    e.remove_pod(&pod.0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn updates_change_the_live_files_and_stats_are_read() {
    v2_only!("updates_change_the_live_files_and_stats_are_read");
    let mut e = env(false).await;
    let pod = e.pod("update", "").await;
    let res = cri::LinuxContainerResources {
        memory_limit_in_bytes: 64 << 20,
        cpu_shares: 1024,
        cpu_quota: 50_000,
        cpu_period: 100_000,
        ..Default::default()
    };
    // about 10 MB held in a variable, then some CPU work and a long sleep
    let id = e
        .run(&pod, "steady", &["sh", "-c", "v=$(head -c 10000000 /dev/zero | tr '\\0' x); i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 1000"], res)
        .await;
    let dir = e.app_cgroup(&pod.0, "0-steady");
    assert_eq!(file(&dir, "memory.max"), (64u64 << 20).to_string());
    let procs = file(&dir, "cgroup.procs");
    assert!(!procs.is_empty(), "the container's processes are in its cgroup");
    let update = cri::LinuxContainerResources {
        memory_limit_in_bytes: 128 << 20,
        cpu_quota: 25_000,
        unified: [("memory.high".into(), (100u64 << 20).to_string())].into(),
        ..Default::default()
    };
    e.rt.update_container_resources(cri::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(update),
        ..Default::default()
    })
    .await
    .expect("UpdateContainerResources");
    assert_eq!(file(&dir, "memory.max"), (128u64 << 20).to_string());
    assert_eq!(file(&dir, "cpu.max"), "25000 100000");
    assert_eq!(file(&dir, "memory.high"), (100u64 << 20).to_string());
    let linux = e.status(&id).await.resources.and_then(|r| r.linux).expect("resources in status");
    assert_eq!((linux.memory_limit_in_bytes, linux.cpu_quota), (128 << 20, 25_000));

    // stats: read until the shell holds its 10 MB
    let deadline = Instant::now() + Duration::from_secs(60);
    let stats = loop {
        let s =
            e.rt.container_stats(cri::ContainerStatsRequest { container_id: id.clone() })
                .await
                .expect("ContainerStats")
                .into_inner()
                .stats
                .expect("stats");
        let ws = s.memory.as_ref().and_then(|m| m.working_set_bytes.as_ref()).map_or(0, |v| v.value);
        if ws > 5_000_000 {
            break s;
        }
        assert!(Instant::now() < deadline, "working set stays at {ws}: {s:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let cpu = stats.cpu.and_then(|c| c.usage_core_nano_seconds).map_or(0, |v| v.value);
    assert!(cpu > 0, "cpu usage {cpu}");
    let pod_stats =
        e.rt.pod_sandbox_stats(cri::PodSandboxStatsRequest { pod_sandbox_id: pod.0.clone() })
            .await
            .expect("PodSandboxStats")
            .into_inner()
            .stats
            .and_then(|s| s.linux)
            .expect("linux pod stats");
    let pod_mem = pod_stats.memory.and_then(|m| m.working_set_bytes).map_or(0, |v| v.value);
    assert!(pod_mem > 5_000_000, "pod working set {pod_mem}");
    e.remove_pod(&pod.0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unified_keys_outside_the_controllers_are_refused() {
    v2_only!("unified_keys_outside_the_controllers_are_refused");
    let mut e = env(false).await;
    let pod = e.pod("badunified", "").await;
    for key in ["../../memory.max", "cgroup.procs", "memory.current"] {
        let res = cri::LinuxContainerResources { unified: [(key.into(), "1".into())].into(), ..Default::default() };
        let err = e.container(&pod, "bad", &["true"], res).await.expect_err(key);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{key}: {err:?}");
        assert!(err.message().contains(key), "{key}: {}", err.message());
    }
    let listed =
        e.rt.list_containers(cri::ListContainersRequest { filter: None })
            .await
            .expect("ListContainers")
            .into_inner()
            .containers;
    assert!(listed.is_empty(), "a refused container was left: {listed:?}");
    e.remove_pod(&pod.0).await;
}

/// A container that is not privileged cannot raise its own limits, neither
/// its process nor a command exec'd into it, in its own PID namespace or
/// the pod's: its cgroup files are read-only to it, as containerd mounts
/// them; the limits stay what the node set. It reads them where runc shows
/// them, its own cgroup at /sys/fs/cgroup (kubelet's swap checks read
/// `memory.max` and `memory.swap.max` there).
#[tokio::test(flavor = "multi_thread")]
async fn a_container_cannot_raise_its_own_limits() {
    v2_only!("a_container_cannot_raise_its_own_limits");
    let mut e = env(false).await;
    let pod = e.pod("self-raise", "").await;
    let raise = "cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max; \
                 cat /sys/fs/cgroup/memory.swap.max > /dev/null && echo swap read; \
                 echo max 2>&1 > /sys/fs/cgroup/memory.max; echo max 2>&1 > /sys/fs/cgroup/pids.max; true";
    let main = format!("{{ {raise}; }} > /tmp/raised 2>&1; touch /tmp/done; exec sleep 300");
    for (name, pid) in [("pod-ns", cri::NamespaceMode::Pod), ("own-ns", cri::NamespaceMode::Container)] {
        let mut config = container_config(name, &e.image, &["sh", "-c", &main]);
        let linux = config.linux.get_or_insert_default();
        linux.resources = Some(cri::LinuxContainerResources {
            memory_limit_in_bytes: 64 << 20,
            unified: [("pids.max".into(), "50".into())].into(),
            ..Default::default()
        });
        let sc = linux.security_context.get_or_insert_default();
        sc.namespace_options = Some(cri::NamespaceOption { pid: pid as i32, ..Default::default() });
        let id =
            e.rt.create_container(cri::CreateContainerRequest {
                pod_sandbox_id: pod.0.clone(),
                config: Some(config),
                sandbox_config: Some(pod.1.clone()),
            })
            .await
            .expect("CreateContainer")
            .into_inner()
            .container_id;
        e.rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("StartContainer");
        let check = format!("while [ ! -e /tmp/done ]; do sleep 0.1; done; cat /tmp/raised; {raise}");
        let out = common::exec_sync(&mut e.rt, &id, &["sh", "-c", &check]).await;
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.matches("Read-only file system").count(), 4, "{name}: the app's and the exec's writes: {text}");
        let read: Vec<&str> = text.lines().filter(|l| !l.contains("Read-only")).collect();
        let limits = [(64u64 << 20).to_string(), "50".into(), "swap read".into()];
        assert_eq!(read, [&limits[..], &limits[..]].concat(), "{name}: the app's and the exec's reads: {text}");
        // (the app's name: attempt-name)
        let dir = e.app_cgroup(&pod.0, &format!("0-{name}"));
        assert_eq!(file(&dir, "memory.max"), (64u64 << 20).to_string(), "{name}");
        assert_eq!(file(&dir, "pids.max"), "50", "{name}");
    }
    e.remove_pod(&pod.0).await;
}

async fn update_pod(
    e: &mut Env,
    pod: &str,
    res: cri::LinuxContainerResources,
    overhead: cri::LinuxContainerResources,
) -> Result<(), tonic::Status> {
    e.rt.update_pod_sandbox_resources(cri::UpdatePodSandboxResourcesRequest {
        pod_sandbox_id: pod.into(),
        resources: Some(res),
        overhead: Some(overhead),
    })
    .await
    .map(drop)
}

/// A pod's own limits (containers plus overhead) on its cgroup: its
/// `memory.max` and `cpu.weight`, written by rktlet (cgroupfs driver) or by
/// the host's systemd for the pod's unit (systemd driver); grown and shrunk
/// live by UpdatePodSandboxResources; a shrink below the pod's usage is
/// refused without a write (on v2 the kernel would OOM-kill instead).
async fn pod_resize(cgroupfs: bool, parent: &str) {
    let mut e = env(cgroupfs).await;
    let weight = |shares: u64| rktlet::cgroup::v2::weight_from_shares(shares).to_string();
    let mut config = host_network(pod_config(if cgroupfs { "resize-fs" } else { "resize-sd" }, &[]));
    config.log_directory = e.logs.path().display().to_string();
    let overhead = common::pod_resources(20 << 20, 100);
    if let Some(l) = config.linux.as_mut() {
        l.cgroup_parent = parent.to_string();
        l.resources = Some(common::pod_resources(300 << 20, 512));
        l.overhead = Some(overhead.clone());
    }
    let id = common::run_pod(&mut e.rt, &config).await;
    let pod = (id.clone(), config);
    let dir = root().join(e.pod_cgroup(&id));
    assert_eq!(file(&dir, "memory.max"), (320u64 << 20).to_string());
    assert_eq!(file(&dir, "cpu.weight"), weight(612));
    let s = common::pod_resources_status(&mut e.rt, &id).await;
    assert_eq!(s["resources"]["memoryLimitInBytes"], 300 << 20, "{s}");
    assert_eq!(s["podCgroup"]["memoryLimitBytes"], 320 << 20, "{s}");

    update_pod(&mut e, &id, common::pod_resources(500 << 20, 1024), overhead.clone()).await.expect("grow");
    assert_eq!(file(&dir, "memory.max"), (520u64 << 20).to_string());
    assert_eq!(file(&dir, "cpu.weight"), weight(1124));

    // 60 MB held by an app with a limit of its own (the loop keeps the shell)
    let hog = e
        .run(
            &pod,
            "hog",
            &["sh", "-c", "v=$(yes | head -c 60000000); echo filled; while true; do sleep 1; done"],
            memory(256 << 20),
        )
        .await;
    // filling takes seconds natively, minutes in an emulated VM on a busy host:
    // the wait ends as soon as the memory is there
    let deadline = Instant::now() + Duration::from_secs(300);
    while file(&dir, "memory.current").parse::<u64>().unwrap_or(0) < 60_000_000 {
        assert!(Instant::now() < deadline, "the pod never used 60 MB: {}", file(&dir, "memory.current"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let err =
        update_pod(&mut e, &id, common::pod_resources(20 << 20, 256), overhead.clone()).await.expect_err("below usage");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert_eq!(file(&dir, "memory.max"), (520u64 << 20).to_string());
    assert_eq!(file(&dir, "cpu.weight"), weight(1124), "nothing written");
    assert_eq!(e.status(&hog).await.state, cri::ContainerState::ContainerRunning as i32, "nothing OOM-killed");
    let err = update_pod(&mut e, &id, common::pod_resources(-1, 256), overhead.clone()).await.expect_err("negative");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");

    update_pod(&mut e, &id, common::pod_resources(200 << 20, 256), overhead.clone()).await.expect("shrink");
    assert_eq!(file(&dir, "memory.max"), (220u64 << 20).to_string());
    assert_eq!(file(&dir, "cpu.weight"), weight(356));
    assert_eq!(common::pod_resources_status(&mut e.rt, &id).await["resources"]["memoryLimitInBytes"], 200 << 20);

    // an app without a memory limit lifts the pod's, as kubelet's pod cgroup has none then
    e.run(&pod, "free", &["sleep", "1000"], cri::LinuxContainerResources::default()).await;
    assert_eq!(file(&dir, "memory.max"), "max");
    e.remove_pod(&id).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_resources_resize_live_under_cgroupfs_driver() {
    v2_only!("pod_resources_resize_live_under_cgroupfs_driver");
    pod_resize(true, "/kubepods/burstable/pod-resize-fs").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_resources_resize_live_under_the_hosts_driver() {
    v2_only!("pod_resources_resize_live_under_the_hosts_driver");
    let systemd = rktlet::stage1::host::Host::detect().pid1_is_systemd;
    let parent = if systemd { "kubepods-burstable-podresizesd.slice" } else { "/kubepods/burstable/pod-resize-sd" };
    pod_resize(false, parent).await;
}

/// A pod in a user namespace (`hostUsers: false`): its systemd is root
/// only there, yet its container's memory limit holds (OOM-killed and
/// reported so), the container runs with the pod's mapping, and removing the
/// pod leaves no cgroup.
#[tokio::test(flavor = "multi_thread")]
async fn limits_hold_in_a_pod_with_its_own_user_namespace() {
    v2_only!("limits_hold_in_a_pod_with_its_own_user_namespace");
    let mut e = env(false).await;
    // the pod's own network (a user namespace excludes the node's): the
    // daemon reads its default `net.d`, where this network is written
    let _net = common::TestNetwork::new(e.d.dir.path());
    let mut config = pod_config("userns-v2", &[]);
    config.log_directory = e.logs.path().join("userns-v2").display().to_string();
    let map = || vec![cri::IdMapping { host_id: 65536 * 41, container_id: 0, length: 65536 }];
    config
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options
        .get_or_insert_with(Default::default)
        .userns_options = Some(cri::UserNamespace { mode: cri::NamespaceMode::Pod as i32, uids: map(), gids: map() });
    let pod = (common::run_pod(&mut e.rt, &config).await, config);

    let probe = e.run(&pod, "probe", &["sleep", "600"], memory(64 << 20)).await;
    let out = common::exec_sync(&mut e.rt, &probe, &["cat", "/proc/self/uid_map"]).await;
    let fields: Vec<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect();
    assert_eq!(fields, ["0", &(65536 * 41).to_string(), "65536"], "{out:?}");
    let probe_cgroup = e.app_cgroup(&pod.0, "0-probe");
    assert_eq!(file(&probe_cgroup, "memory.max"), (64u64 << 20).to_string());

    let hog = e.run(&pod, "hog", &["sh", "-c", "v=$(yes | head -c 80000000); echo survived"], memory(32 << 20)).await;
    let s = e.wait_exited(&hog, Duration::from_secs(120)).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (137, "OOMKilled"), "{s:?}");

    let pod_dir = root().join(e.pod_cgroup(&pod.0));
    e.remove_pod(&pod.0).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while pod_dir.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!pod_dir.exists(), "{} left behind", pod_dir.display());
}
