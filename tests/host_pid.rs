//! Host-PID pods (`namespace_options.pid = NODE`, node-exporter and CNI
//! daemonsets): their containers run in the node's PID namespace, confined
//! as any container, supervised by the pod's log writer.

mod common;

use common::{Daemon, assert_no_leaks, exec_sync, host_network, pod_config};
use rktlet::proto::v1 as cri;
use rktlet::proto::v1::runtime_service_client::RuntimeServiceClient;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// A host-network pod in the node's PID namespace, logging under `logs`.
fn host_pid_pod(name: &str, logs: &std::path::Path) -> cri::PodSandboxConfig {
    let mut config = host_network(pod_config(name, &[]));
    config.log_directory = logs.join(name).display().to_string();
    if let Some(ns) =
        config.linux.as_mut().and_then(|l| l.security_context.as_mut()).and_then(|s| s.namespace_options.as_mut())
    {
        ns.pid = cri::NamespaceMode::Node as i32;
    }
    config
}

/// A busybox container in the node's PID namespace, as kubelet asks for a
/// host-PID pod's: uid 1000, RuntimeDefault seccomp, no_new_privs.
fn host_container(name: &str, image: &str, script: &str) -> cri::ContainerConfig {
    let mut c = common::container_config(name, image, &["sh", "-c", script]);
    c.linux = Some(cri::LinuxContainerConfig {
        security_context: Some(cri::LinuxContainerSecurityContext {
            namespace_options: Some(cri::NamespaceOption {
                pid: cri::NamespaceMode::Node as i32,
                network: cri::NamespaceMode::Node as i32,
                ..Default::default()
            }),
            run_as_user: Some(cri::Int64Value { value: 1000 }),
            no_new_privs: true,
            seccomp: Some(cri::SecurityProfile {
                profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    c
}

async fn wait_exited(rt: &mut RuntimeServiceClient<Channel>, id: &str, within: Duration) -> cri::ContainerStatus {
    let deadline = Instant::now() + within;
    loop {
        let s = common::container_status(rt, id).await;
        if s.state == cri::ContainerState::ContainerExited as i32 {
            return s;
        }
        assert!(Instant::now() < deadline, "container {id} did not exit: {s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The node pid a container wrote to its /tmp/pid (its own `$$`).
async fn own_pid(rt: &mut RuntimeServiceClient<Channel>, id: &str) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = exec_sync(rt, id, &["cat", "/tmp/pid"]).await;
        if let Ok(pid) = String::from_utf8_lossy(&out.stdout).trim().parse() {
            return pid;
        }
        assert!(Instant::now() < deadline, "no /tmp/pid in {id}: {out:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn status_field(pid: i32, name: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status of the app");
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

fn field_of(status: &str, name: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

fn alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
}

/// A host-PID container sees the node's processes and is one of them (its
/// pid is a node pid, its process the container's), with every confinement
/// of a container, in it and in what is exec'd into it; its output is
/// logged; its exit code is recorded; StopContainer SIGKILLs it at the
/// timeout; removing the pod leaves nothing.
#[tokio::test(flavor = "multi_thread")]
async fn host_pid_containers_are_node_processes_and_confined() {
    let d = Daemon::start(&[]);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let logs = tempfile::tempdir().expect("logs");
    let config = host_pid_pod("hostpid", logs.path());
    let pod = common::run_pod(&mut rt, &config).await;
    let st = rt
        .pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: pod.clone(), verbose: false })
        .await
        .expect("PodSandboxStatus")
        .into_inner()
        .status
        .expect("status");
    let ns = st.linux.and_then(|l| l.namespaces).and_then(|n| n.options).expect("namespace options");
    assert_eq!(ns.pid, cri::NamespaceMode::Node as i32, "{ns:?}");

    let main = common::start_container(
        &mut rt,
        &pod,
        &config,
        host_container("main", &image, "echo $$ > /tmp/pid; echo started; exec sleep 1000"),
    )
    .await;
    let pid = own_pid(&mut rt, &main).await;
    // the node's pid of its own process: a process of the node (one NSpid),
    // the container's (its root holds the file it wrote)
    assert_eq!(std::fs::read_to_string(format!("/proc/{pid}/cmdline")).expect("cmdline"), "sleep\u{0}1000\u{0}");
    assert_eq!(status_field(pid, "NSpid"), pid.to_string());
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/root/tmp/pid")).expect("its /tmp/pid").trim(),
        pid.to_string()
    );
    // confined: its user, its filter, no_new_privs, kubelet's capabilities, its own mounts
    assert_eq!(status_field(pid, "Uid").split_whitespace().next(), Some("1000"));
    assert_eq!(status_field(pid, "Seccomp"), "2");
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    assert_ne!(status_field(pid, "CapBnd"), status_field(std::process::id() as i32, "CapBnd"));
    let mnt = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/mnt")).expect("mnt ns");
    assert_ne!(mnt(&pid.to_string()), mnt("self"));

    // an exec'd command: in the node's PID namespace (sees this test's process), confined the same
    let me = std::process::id();
    let out = exec_sync(&mut rt, &main, &["sh", "-c", &format!("test -d /proc/{me} && cat /proc/self/status")]).await;
    assert_eq!(out.exit_code, 0, "{out:?}");
    let theirs = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(field_of(&theirs, "NSpid").split_whitespace().count(), 1, "{theirs}");
    assert_eq!(field_of(&theirs, "Uid").split_whitespace().next(), Some("1000"));
    assert_eq!(field_of(&theirs, "Seccomp"), "2");
    assert_eq!(field_of(&theirs, "NoNewPrivs"), "1");
    assert_eq!(field_of(&theirs, "CapBnd"), status_field(pid, "CapBnd"));
    // kubelet's default masks on the node's /proc
    let masked = ["/proc/kcore", "/proc/timer_list", "/proc/keys", "/proc/sched_debug"]
        .into_iter()
        .find(|p| std::fs::read(p).is_ok_and(|c| !c.is_empty()))
        .expect("a /proc file kubelet masks");
    let out = exec_sync(&mut rt, &main, &["sh", "-c", &format!("wc -c < {masked}")]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "{masked}: {out:?}");
    // a second container sees the first's process
    let other =
        common::start_container(&mut rt, &pod, &config, host_container("other", &image, "exec sleep 1000")).await;
    let out = exec_sync(&mut rt, &other, &["cat", &format!("/proc/{pid}/cmdline")]).await;
    assert_eq!(out.stdout, b"sleep\x001000\x00", "{out:?}");
    // its output is in its CRI log
    let log_file = logs.path().join("hostpid").join("main.log");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log_file).unwrap_or_default().contains("stdout F started") {
        assert!(Instant::now() < deadline, "no output logged: {:?}", std::fs::read_to_string(&log_file));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // its exit code is recorded
    let exits =
        common::start_container(&mut rt, &pod, &config, host_container("exits", &image, "sleep 0.2; exit 3")).await;
    let s = wait_exited(&mut rt, &exits, Duration::from_secs(15)).await;
    assert_eq!(s.exit_code, 3, "{s:?}");

    // StopContainer: SIGTERM (ignored here), SIGKILL at the timeout
    let stubborn = common::start_container(
        &mut rt,
        &pod,
        &config,
        host_container("stubborn", &image, "trap '' TERM; echo $$ > /tmp/pid; while :; do sleep 1; done"),
    )
    .await;
    let stubborn_pid = own_pid(&mut rt, &stubborn).await;
    let began = Instant::now();
    rt.stop_container(cri::StopContainerRequest { container_id: stubborn.clone(), timeout: 2 })
        .await
        .expect("StopContainer");
    let took = began.elapsed();
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(10), "{took:?}");
    let s = common::container_status(&mut rt, &stubborn).await;
    assert_eq!((s.state, s.exit_code), (cri::ContainerState::ContainerExited as i32, 137), "{s:?}");
    assert!(!alive(stubborn_pid), "the stopped container's process lives on");
    // a graceful one exits at SIGTERM
    rt.stop_container(cri::StopContainerRequest { container_id: other.clone(), timeout: 10 })
        .await
        .expect("StopContainer");
    assert_eq!(common::container_status(&mut rt, &other).await.exit_code, 143);

    // the pod's stop kills a running one; its exit is its own (SIGKILL), not its template's
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("StopPodSandbox");
    assert!(!alive(pid), "a host-PID container outlived its pod");
    let s = common::container_status(&mut rt, &main).await;
    assert_eq!((s.state, s.exit_code), (cri::ContainerState::ContainerExited as i32, 137), "{s:?}");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() })
        .await
        .expect("RemovePodSandbox");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

/// The pod's log writer, not the daemon, supervises a host-PID container:
/// its exit while the daemon is down (SIGKILLed) is recorded all the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_pid_exit_is_recorded_across_a_daemon_crash() {
    let mut d = Daemon::start(&[]);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let logs = tempfile::tempdir().expect("logs");
    let config = host_pid_pod("hostpid-crash", logs.path());
    let pod = common::run_pod(&mut rt, &config).await;
    let late = common::start_container(
        &mut rt,
        &pod,
        &config,
        host_container("late", &image, "echo $$ > /tmp/pid; sleep 2; exit 5"),
    )
    .await;
    let pid = own_pid(&mut rt, &late).await;
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(15);
    while alive(pid) {
        assert!(Instant::now() < deadline, "the container did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    d.child = Daemon::spawn(&d.socket, d.dir.path(), &[]);
    d.wait_ready();
    let mut rt = d.runtime().await;
    let s = wait_exited(&mut rt, &late, Duration::from_secs(10)).await;
    assert_eq!(s.exit_code, 5, "{s:?}");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() })
        .await
        .expect("RemovePodSandbox");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

/// A container cannot ask for the node's PID namespace in a pod that did not.
#[tokio::test(flavor = "multi_thread")]
async fn the_node_pid_namespace_needs_a_host_pid_pod() {
    let d = Daemon::start(&[]);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let config = host_network(pod_config("podpid", &[]));
    let pod = common::run_pod(&mut rt, &config).await;
    let err = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(host_container("c", &image, "true")),
            sandbox_config: Some(config.clone()),
        })
        .await
        .expect_err("refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() })
        .await
        .expect("RemovePodSandbox");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

/// The pod's log writer of a pod (a fork of its sandbox process, whose
/// command line it keeps; nspawn replaced the sandbox's own).
fn log_writer_of(pod: &str) -> i32 {
    let found: Vec<i32> = common::processes_mentioning(&format!("--uuid={pod}"))
        .iter()
        .filter(|p| p.contains(" app sandbox "))
        .filter_map(|p| p.split(':').next()?.parse().ok())
        .collect();
    assert_eq!(found.len(), 1, "the log writer of {pod}: {found:?}");
    found[0]
}

/// A log writer SIGKILLed (nothing supervises its host-PID apps any more)
/// while the daemon is down: the restarted daemon kills the app and records
/// its exit as unknown (255).
#[tokio::test(flavor = "multi_thread")]
async fn a_host_pid_app_without_its_writer_is_killed_at_a_restart() {
    let mut d = Daemon::start(&[]);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let logs = tempfile::tempdir().expect("logs");
    let config = host_pid_pod("hostpid-orphan", logs.path());
    let pod = common::run_pod(&mut rt, &config).await;
    let app = common::start_container(
        &mut rt,
        &pod,
        &config,
        host_container("app", &image, "echo $$ > /tmp/pid; exec sleep 1000"),
    )
    .await;
    let pid = own_pid(&mut rt, &app).await;
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    let writer = log_writer_of(&pod);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(writer), nix::sys::signal::Signal::SIGKILL).expect("kill writer");
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(writer) {
        assert!(Instant::now() < deadline, "the writer did not die");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(alive(pid), "the app went with its writer");
    d.child = Daemon::spawn(&d.socket, d.dir.path(), &[]);
    d.wait_ready();
    let mut rt = d.runtime().await;
    let s = wait_exited(&mut rt, &app, Duration::from_secs(10)).await;
    assert_eq!(s.exit_code, 255, "{s:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < deadline, "the app outlived the reconcile");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() })
        .await
        .expect("RemovePodSandbox");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

/// An exec into a host-PID container and its stop find the app's own
/// process, as the pod's log writer recorded it when it started it, not
/// whichever process of the node is oldest in the app's cgroup: a node
/// process older than the app, put there (here by the node's root), is
/// neither copied by an exec (it would run the command unconfined, in the
/// node's root) nor signalled by StopContainer.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_pid_app_is_the_process_its_writer_started() {
    let d = Daemon::start(&[]);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let logs = tempfile::tempdir().expect("logs");
    let config = host_pid_pod("recorded", logs.path());
    let pod = common::run_pod(&mut rt, &config).await;
    // older than the app: started before it
    let mut older = std::process::Command::new("sleep").arg("1000").spawn().expect("sleep");
    let script = "trap 'exit 143' TERM; echo $$ > /tmp/pid; while true; do sleep 0.05; done";
    let id = common::start_container(&mut rt, &pod, &config, host_container("app", &image, script)).await;
    let app = own_pid(&mut rt, &id).await;
    // into the app's unit cgroup (the unified hierarchy's, where the unit's processes are read)
    let cgroups = std::fs::read_to_string(format!("/proc/{app}/cgroup")).expect("the app's cgroups");
    let unified = cgroups.lines().find_map(|l| l.strip_prefix("0::")).expect("a unified cgroup");
    let layout = rktlet::cgroup::Layout::read().expect("layout");
    let root = layout.hierarchies.iter().find(|h| h.id == 0).and_then(|h| h.mount.clone()).expect("unified mount");
    let procs = root.join(unified.trim_start_matches('/')).join("cgroup.procs");
    std::fs::write(&procs, older.id().to_string()).unwrap_or_else(|e| panic!("{}: {e}", procs.display()));

    let out = exec_sync(&mut rt, &id, &["sh", "-c", "cat /tmp/pid; id -u"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{app}\n1000\n"), "the exec copies the app: {out:?}");
    rt.stop_container(cri::StopContainerRequest { container_id: id.clone(), timeout: 10 }).await.expect("stop");
    let s = common::container_status(&mut rt, &id).await;
    assert_eq!(s.exit_code, 143, "the app got the stop signal: {s:?}");
    let _ = older.kill();
    let _ = older.wait();
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove pod");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}
