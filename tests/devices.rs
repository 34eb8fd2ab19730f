//! Containers are held to their devices by the kernel: a container, with
//! CAP_MKNOD or without, in any PID namespace, and every process exec'd into
//! it, may make any device node but opens only the pseudo devices, the
//! terminals and what its CRI config gives it (with exactly the permissions
//! given); a privileged one opens the node's devices. Nothing here writes to
//! a device: the probes open and close.

mod common;

use common::{Daemon, assert_no_leaks, exec_sync, host_network, pod_config};
use rktlet::proto::v1 as cri;
use rktlet::proto::v1::runtime_service_client::RuntimeServiceClient;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// A block device of the node (`/sys/dev/block`) that the node itself can
/// open (not an empty floppy drive), a loop device only when there is no
/// other: its major, minor and name.
fn node_block_device() -> (u64, u64, String) {
    let mut found: Vec<(u64, u64, String)> = std::fs::read_dir("/sys/dev/block")
        .expect("/sys/dev/block")
        .filter_map(|e| {
            let e = e.ok()?;
            let (major, minor) =
                e.file_name().to_str()?.split_once(':').map(|(a, b)| (a.to_string(), b.to_string()))?;
            let uevent = std::fs::read_to_string(e.path().join("uevent")).unwrap_or_default();
            let name = uevent.lines().find_map(|l| l.strip_prefix("DEVNAME="))?.to_string();
            let (major, minor) = (major.parse().ok()?, minor.parse().ok()?);
            opens_on_the_node(major, minor).then_some((major, minor, name))
        })
        .collect();
    found.sort_by_key(|(major, minor, _)| (*major == 7, *major, *minor));
    found.into_iter().next().expect("the node opens no block device of /sys/dev/block")
}

/// Whether the node itself (this test, as root, in its cgroup) opens block
/// device `major:minor` read-only (a VM's own root disk may be closed to it).
fn opens_on_the_node(major: u64, minor: u64) -> bool {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = dir.path().join("b");
    let mode = nix::sys::stat::Mode::from_bits_truncate(0o600);
    nix::sys::stat::mknod(&node, nix::sys::stat::SFlag::S_IFBLK, mode, nix::sys::stat::makedev(major, minor)).is_ok()
        && std::fs::File::open(&node).is_ok()
}

/// The node's devices a container must not open (name, kind, major, minor):
/// a disk, a loop device, kvm, fuse, loop-control, the console, tty1.
fn forbidden() -> Vec<(String, char, u64, u64)> {
    let (major, minor, name) = node_block_device();
    vec![
        (format!("disk-{name}"), 'b', major, minor),
        ("loop0".into(), 'b', 7, 0),
        ("kvm".into(), 'c', 10, 232),
        ("fuse".into(), 'c', 10, 229),
        ("loop-control".into(), 'c', 10, 237),
        ("console".into(), 'c', 5, 1),
        ("tty1".into(), 'c', 4, 1),
    ]
}

/// A shell script that prints one line per probe: `NAME: ok` or `NAME:
/// <the shell's error>`. A `mk` probe makes the node in /tmp first (its
/// failure is printed as `NAME: mknod: ...`); `rw` opens read-write, `r`
/// read-only.
/// The probes' shell functions (see [`probe_script`]).
const PRELUDE: &str = "o() { if (exec 3<>\"$2\") 2>/tmp/.e; then echo \"$1: ok\"; else echo \"$1: $(cat /tmp/.e)\"; fi; }\n\
    r() { if (exec 3<\"$2\") 2>/tmp/.e; then echo \"$1: ok\"; else echo \"$1: $(cat /tmp/.e)\"; fi; }\n\
    mk() { rm -f /tmp/.n-$1; if mknod /tmp/.n-$1 $2 $3 $4 2>/tmp/.e; then $5 $1 /tmp/.n-$1; \
    else echo \"$1: mknod: $(cat /tmp/.e)\"; fi; }\n";

fn probe_script(forbidden: &[(String, char, u64, u64)], extra: &[(&str, &str, &str)]) -> String {
    let mut s = String::from(PRELUDE);
    for (name, kind, major, minor) in forbidden {
        s.push_str(&format!("mk {name} {kind} {major} {minor} o\n"));
    }
    for probe in ["o null /dev/null", "o zero /dev/zero", "o urandom /dev/urandom", "o ptmx /dev/ptmx"] {
        s.push_str(probe);
        s.push('\n');
    }
    s.push_str("o tty /dev/tty\nmk pts0 c 136 0 o\n");
    for (how, name, path) in extra {
        s.push_str(&format!("{how} {name} {path}\n"));
    }
    s
}

fn parse(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(name, result)| (name.trim().to_string(), result.trim().to_string()))
        .collect()
}

const EPERM: &str = "Operation not permitted";

/// The checks every container that is not privileged passes.
fn assert_held(who: &str, got: &BTreeMap<String, String>, forbidden: &[(String, char, u64, u64)]) {
    for (name, ..) in forbidden {
        let r = got.get(name).unwrap_or_else(|| panic!("{who}: no probe of {name}: {got:?}"));
        assert!(!r.starts_with("mknod"), "{who}: making {name} must work (only opening is refused): {r}");
        assert!(r.contains(EPERM), "{who}: opening the node's {name} must be refused with EPERM, got {r:?}");
    }
    for name in ["null", "zero", "urandom", "ptmx"] {
        assert_eq!(got.get(name).map(String::as_str), Some("ok"), "{who}: /dev/{name}: {got:?}");
    }
    for name in ["tty", "pts0"] {
        // no controlling terminal, no such pts: ENXIO or EIO, never the cgroup's EPERM
        let r = got.get(name).unwrap_or_else(|| panic!("{who}: no probe of {name}: {got:?}"));
        assert!(!r.contains(EPERM) && !r.starts_with("mknod"), "{who}: {name} must be allowed: {r}");
    }
}

/// What the container's main process printed to `/tmp/main.out` (it
/// probes first, then sleeps), read by ExecSync once it is all there.
async fn main_output(rt: &mut RuntimeServiceClient<Channel>, id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = exec_sync(rt, id, &["cat", "/tmp/main.done"]).await;
        if r.exit_code == 0 {
            let out = exec_sync(rt, id, &["cat", "/tmp/main.out"]).await;
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        let s = common::container_status(rt, id).await;
        assert_eq!(s.state, cri::ContainerState::ContainerRunning as i32, "container {id} ended: {s:?}");
        assert!(Instant::now() < deadline, "container {id} did not finish its probes");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A container that runs `script` as its main process (output in
/// /tmp/main.out), then sleeps.
fn prober(name: &str, image: &str, script: &str) -> cri::ContainerConfig {
    let main = format!("{{\n{script}\n}} >/tmp/main.out 2>&1; touch /tmp/main.done; exec sleep 600");
    common::container_config(name, image, &["sh", "-c", &main])
}

fn security(c: &mut cri::ContainerConfig) -> &mut cri::LinuxContainerSecurityContext {
    c.linux.get_or_insert_default().security_context.get_or_insert_default()
}

/// Main process and ExecSync both: the same result.
async fn probe_both(rt: &mut RuntimeServiceClient<Channel>, id: &str, script: &str) -> [BTreeMap<String, String>; 2] {
    let main = parse(&main_output(rt, id).await);
    let exec = exec_sync(rt, id, &["sh", "-c", script]).await;
    [main, parse(&String::from_utf8_lossy(&exec.stdout))]
}

/// The pod's own processes are held to the pseudo devices and terminals:
/// on cgroup v1 the pod's systemd is in a devices cgroup that allows those
/// and no block device; on pure v2 a process put beside nspawn (in the
/// pod's `supervisor` cgroup, under rktlet's device program) opens
/// `/dev/null` and not the node's disk.
fn pods_own_processes_are_held(test: &str, d: &Daemon, pod: &str) {
    let pid1 = common::pod_pid1(&d.dir.path().join("data"), pod);
    let cgroups = std::fs::read_to_string(format!("/proc/{pid1}/cgroup")).expect("the pod's cgroups");
    if let Some(path) = cgroups.lines().find_map(|l| l.split_once(":devices:").map(|(_, p)| p.to_string())) {
        let list = std::fs::read_to_string(format!("/sys/fs/cgroup/devices{path}/devices.list")).expect("devices.list");
        assert!(path.ends_with("/rktlet-pod"), "the pod's systemd is in {path}");
        assert!(list.lines().any(|l| l == "c 1:3 rwm") && list.lines().any(|l| l == "c 136:* rwm"), "{list}");
        assert!(!list.lines().any(|l| l.starts_with("a ") || l.starts_with("b ")), "the pod's systemd: {list}");
        return;
    }
    let Some(pod_cgroup) = cgroups
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .and_then(|p| p.strip_suffix("/payload/init.scope"))
        .map(str::to_string)
    else {
        return common::skipped(test, &format!("neither a v1 devices nor a v2 pod cgroup in {cgroups}"));
    };
    let (major, minor, _) = node_block_device();
    let dir = tempfile::tempdir().expect("tempdir");
    let node = dir.path().join("disk");
    let script = format!(
        "echo $$ > /sys/fs/cgroup{pod_cgroup}/supervisor/cgroup.procs || exit 9\n\
         {{ mknod {n} b {major} {minor} && (exec 3<{n}); }} 2>&1\n\
         (exec 3<>/dev/null) && echo null-ok",
        n = node.display()
    );
    let out = std::process::Command::new("sh").arg("-c").arg(&script).output().expect("sh");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said} {}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("Operation not permitted"), "beside the pod's nspawn, the node's disk opened: {said}");
    assert!(said.contains("null-ok"), "beside the pod's nspawn, /dev/null did not open: {said}");
}

#[tokio::test(flavor = "multi_thread")]
async fn containers_open_only_their_devices() {
    open_only_their_devices("containers_open_only_their_devices", false).await;
}

/// The same with the cgroupfs driver, which a systemd node may be told to use
/// (on pure v2: pods rktlet places itself, the pod's own program attached by rktlet).
#[tokio::test(flavor = "multi_thread")]
async fn containers_open_only_their_devices_under_the_cgroupfs_driver() {
    open_only_their_devices("containers_open_only_their_devices_under_the_cgroupfs_driver", true).await;
}

async fn open_only_their_devices(test: &str, cgroupfs: bool) {
    let d = if cgroupfs {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("run/rktlet.sock");
        let child = Daemon::spawn_env(&socket, dir.path(), &[], &[("RKTLET_CGROUP_DRIVER", "cgroupfs")]);
        let cni_conf_dir = Daemon::cni_conf_dir(dir.path(), &[]);
        let mut d = Daemon { child, socket, dir, cni_conf_dir };
        d.wait_ready();
        d
    } else {
        Daemon::start(&[])
    };
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let logs = tempfile::tempdir().expect("logs");
    let mut config = host_network(pod_config("devices", &[]));
    config.log_directory = logs.path().display().to_string();
    if let Some(sc) = config.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
        // kubelet marks a pod privileged when one of its containers is
        sc.privileged = true;
    }
    let pod = common::run_pod(&mut rt, &config).await;
    let forbidden = forbidden();
    let (major, minor, _) = node_block_device();
    pods_own_processes_are_held(test, &d, &pod);
    let script = probe_script(&forbidden, &[]);

    // kubelet's default: a PID namespace of its own, the default capabilities (CAP_MKNOD among them)
    let default = common::start_container(&mut rt, &pod, &config, prober("default", &image, &script)).await;
    // MKNOD asked for, in the pod's PID namespace (systemd runs it without appexec where it can)
    let mut c = prober("mknod", &image, &script);
    security(&mut c).capabilities =
        Some(cri::Capability { add_capabilities: vec!["MKNOD".into()], ..Default::default() });
    security(&mut c).namespace_options.get_or_insert_default().pid = cri::NamespaceMode::Pod as i32;
    let mknod = common::start_container(&mut rt, &pod, &config, c).await;
    for (who, id) in [("default", &default), ("MKNOD, pod PID namespace", &mknod)] {
        for (how, got) in ["main process", "ExecSync"].iter().zip(probe_both(&mut rt, id, &script).await) {
            assert_held(&format!("{who} ({how})"), &got, &forbidden);
        }
    }

    // a device given in `devices`, read-only: read works, write is refused
    let node = tempfile::tempdir_in(logs.path()).expect("node dir");
    let host_path = node.path().join("disk");
    nix::sys::stat::mknod(
        &host_path,
        nix::sys::stat::SFlag::S_IFBLK,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
        nix::sys::stat::makedev(major, minor),
    )
    .expect("mknod on the node");
    let given = probe_script(&forbidden, &[("r", "given-r", "/dev/given"), ("o", "given-rw", "/dev/given")]);
    let mut c = prober("given", &image, &given);
    c.devices = vec![cri::Device {
        container_path: "/dev/given".into(),
        host_path: host_path.display().to_string(),
        permissions: "r".into(),
    }];
    let given_id = common::start_container(&mut rt, &pod, &config, c).await;
    for got in probe_both(&mut rt, &given_id, &given).await {
        assert_held("with a device", &got, &forbidden);
        assert_eq!(got.get("given-r").map(String::as_str), Some("ok"), "the device given 'r' reads: {got:?}");
        let rw = got.get("given-rw").cloned().unwrap_or_default();
        assert!(rw.contains(EPERM), "the device given 'r' must not open for writing: {rw:?}");
    }

    // a device that is not on the node: InvalidArgument, nothing created
    let mut c = prober("missing", &image, "true");
    c.devices = vec![cri::Device {
        container_path: "/dev/missing".into(),
        host_path: "/dev/rktlet-no-such-device".into(),
        permissions: "rw".into(),
    }];
    let e = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(c),
            sandbox_config: Some(config.clone()),
        })
        .await
        .expect_err("a missing device is refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("rktlet-no-such-device"), "{e:?}");

    // privileged: the node's devices open (read-only here)
    let privileged_script = format!("{PRELUDE}mk disk b {major} {minor} r\n");
    let mut c = prober("privileged", &image, &privileged_script);
    security(&mut c).privileged = true;
    let privileged = common::start_container(&mut rt, &pod, &config, c).await;
    for got in probe_both(&mut rt, &privileged, &privileged_script).await {
        assert_eq!(got.get("disk").map(String::as_str), Some("ok"), "privileged opens the node's disk: {got:?}");
    }

    // after UpdateContainerResources the list holds as before
    rt.update_container_resources(cri::UpdateContainerResourcesRequest {
        container_id: default.clone(),
        linux: Some(cri::LinuxContainerResources { memory_limit_in_bytes: 256 << 20, ..Default::default() }),
        ..Default::default()
    })
    .await
    .expect("UpdateContainerResources");
    let exec = exec_sync(&mut rt, &default, &["sh", "-c", &script]).await;
    assert_held("default, after an update", &parse(&String::from_utf8_lossy(&exec.stdout)), &forbidden);

    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("stop");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

#[tokio::test(flavor = "multi_thread")]
async fn host_pid_containers_open_only_their_devices() {
    let d = Daemon::start(&[]);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let logs = tempfile::tempdir().expect("logs");
    let mut config = host_network(pod_config("devices-host-pid", &[]));
    config.log_directory = logs.path().display().to_string();
    if let Some(ns) =
        config.linux.as_mut().and_then(|l| l.security_context.as_mut()).and_then(|s| s.namespace_options.as_mut())
    {
        ns.pid = cri::NamespaceMode::Node as i32;
    }
    let pod = common::run_pod(&mut rt, &config).await;
    let forbidden = forbidden();
    let script = probe_script(&forbidden, &[]);
    let mut c = prober("host-pid", &image, &script);
    let ns = security(&mut c).namespace_options.get_or_insert_default();
    ns.pid = cri::NamespaceMode::Node as i32;
    ns.network = cri::NamespaceMode::Node as i32;
    let id = common::start_container(&mut rt, &pod, &config, c).await;
    for (how, got) in ["main process", "ExecSync"].iter().zip(probe_both(&mut rt, &id, &script).await) {
        assert_held(&format!("host-PID app ({how})"), &got, &forbidden);
    }
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("stop");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

/// The pool's status in Status (verbose): `disabled` says why it is off.
async fn pool_info(rt: &mut RuntimeServiceClient<Channel>) -> serde_json::Value {
    let st = rt.status(cri::StatusRequest { verbose: true }).await.expect("Status").into_inner();
    let text = st.info.get("podPool").expect("podPool in verbose info");
    serde_json::from_str::<serde_json::Value>(text).expect("podPool json")["pool"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn pool_pods_hold_their_devices_across_a_daemon_restart() {
    let test = "pool_pods_hold_their_devices_across_a_daemon_restart";
    let dir = tempfile::tempdir().expect("tempdir");
    let net = common::TestNetwork::new(dir.path());
    let conf = net.conf_dir.to_string_lossy().to_string();
    let args = ["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni", "--pod-pool-size", "1"];
    let mut d = Daemon::start(&args);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    // a pod taken from the pool where there is one (moved under its parent), else a cold one
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = pool_info(&mut rt).await;
        if let Some(why) = info["disabled"].as_str() {
            // (what this test checks of a pool pod, the pool tests cover on hosts with one)
            eprintln!("{test}: the pod pool is off on this host ({why}): the pod boots cold");
            break;
        }
        if info["ready"].as_u64() == Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "the pool did not fill: {info}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let logs = tempfile::tempdir().expect("logs");
    let mut config = pod_config("devices-pool", &[]);
    config.log_directory = logs.path().display().to_string();
    let pod = common::run_pod(&mut rt, &config).await;
    pods_own_processes_are_held(test, &d, &pod);
    let forbidden = forbidden();
    let script = probe_script(&forbidden, &[]);
    let first = common::start_container(&mut rt, &pod, &config, prober("first", &image, &script)).await;
    for (how, got) in ["main process", "ExecSync"].iter().zip(probe_both(&mut rt, &first, &script).await) {
        assert_held(&format!("pool pod ({how})"), &got, &forbidden);
    }

    // the daemon restarts: what it wrote holds, and what it starts now is held the same way
    d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    d.child = Daemon::spawn(&d.socket, d.dir.path(), &args);
    d.wait_ready();
    let mut rt = d.runtime().await;
    let exec = exec_sync(&mut rt, &first, &["sh", "-c", &script]).await;
    assert_held("after a restart (ExecSync)", &parse(&String::from_utf8_lossy(&exec.stdout)), &forbidden);
    let second = common::start_container(&mut rt, &pod, &config, prober("second", &image, &script)).await;
    for (how, got) in ["main process", "ExecSync"].iter().zip(probe_both(&mut rt, &second, &script).await) {
        assert_held(&format!("started after a restart ({how})"), &got, &forbidden);
    }
    pods_own_processes_are_held(test, &d, &pod);
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("stop");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}
