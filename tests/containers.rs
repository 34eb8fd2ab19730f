//! Real containers in real pods through the daemon's CRI socket: busybox from
//! the test registry, apps started by the pod's systemd over sd-bus.

mod common;

use common::{Daemon, TestNetwork, assert_no_leaks, host_network, pod_config};
use rktlet::proto::v1 as cri;
use rktlet::proto::v1::runtime_service_client::RuntimeServiceClient;
use std::path::Path;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

struct Env {
    d: Daemon,
    rt: RuntimeServiceClient<Channel>,
    image: String,
    logs: tempfile::TempDir,
    /// The PID namespace of containers that do not name one: kubelet's
    /// default (CONTAINER) unless a test says otherwise.
    pid: cri::NamespaceMode,
    /// Pods get a network namespace of their own on it (else the node's).
    net: Option<TestNetwork>,
}

async fn env() -> Env {
    let d = Daemon::start(&[]);
    let image = common::pull_busybox(&d).await;
    let rt = d.runtime().await;
    Env { d, rt, image, logs: tempfile::tempdir().expect("logs"), pid: cri::NamespaceMode::Container, net: None }
}

/// [`env_with_pid`] whose pods have a network namespace of their own.
async fn env_on_network(pid: cri::NamespaceMode, dir: &Path) -> Env {
    let net = TestNetwork::new(dir);
    let conf = net.conf_dir.to_string_lossy().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni"]);
    let image = common::pull_busybox(&d).await;
    let rt = d.runtime().await;
    Env { d, rt, image, logs: tempfile::tempdir().expect("logs"), pid, net: Some(net) }
}

/// [`env`] whose containers get `pid` unless they name one.
async fn env_with_pid(pid: cri::NamespaceMode) -> Env {
    Env { pid, ..env().await }
}

impl Env {
    async fn pod(&mut self, name: &str) -> (String, cri::PodSandboxConfig) {
        let mut config = if self.net.is_some() { pod_config(name, &[]) } else { host_network(pod_config(name, &[])) };
        if self.pid == cri::NamespaceMode::Node {
            // a host-PID pod, whose containers run in the node's PID namespace
            let linux = config.linux.get_or_insert_default();
            let sc = linux.security_context.get_or_insert_default();
            sc.namespace_options.get_or_insert_default().pid = cri::NamespaceMode::Node as i32;
        }
        config.log_directory = self.logs.path().join(name).display().to_string();
        let id = self
            .rt
            .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() })
            .await
            .expect("RunPodSandbox")
            .into_inner()
            .pod_sandbox_id;
        (id, config)
    }

    async fn create(
        &mut self,
        pod: &(String, cri::PodSandboxConfig),
        name: &str,
        command: &[&str],
        tweak: impl FnOnce(&mut cri::ContainerConfig),
    ) -> String {
        self.try_create(pod, name, command, tweak).await.expect("CreateContainer")
    }

    async fn try_create(
        &mut self,
        pod: &(String, cri::PodSandboxConfig),
        name: &str,
        command: &[&str],
        tweak: impl FnOnce(&mut cri::ContainerConfig),
    ) -> Result<String, tonic::Status> {
        let mut config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(cri::ImageSpec { image: self.image.clone(), ..Default::default() }),
            command: command.iter().map(|s| s.to_string()).collect(),
            log_path: format!("{name}/0.log"),
            labels: [("app".to_string(), name.to_string())].into(),
            ..Default::default()
        };
        tweak(&mut config);
        let sc = config.linux.get_or_insert_default().security_context.get_or_insert_default();
        sc.namespace_options.get_or_insert(cri::NamespaceOption { pid: self.pid as i32, ..Default::default() });
        self.rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: pod.0.clone(),
                config: Some(config),
                sandbox_config: Some(pod.1.clone()),
            })
            .await
            .map(|r| r.into_inner().container_id)
    }

    async fn start(&mut self, id: &str) {
        self.rt.start_container(cri::StartContainerRequest { container_id: id.into() }).await.expect("StartContainer");
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

    async fn wait_state(&mut self, id: &str, state: cri::ContainerState) -> cri::ContainerStatus {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.status(id).await;
            if s.state == state as i32 {
                return s;
            }
            assert!(Instant::now() < deadline, "container {id} did not reach {state:?}: {s:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn log(&self, pod: &str, name: &str) -> String {
        std::fs::read_to_string(self.logs.path().join(pod).join(name).join("0.log")).unwrap_or_default()
    }

    async fn wait_log(&self, pod: &str, name: &str, lines: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log(pod, name);
            if log.lines().count() >= lines || Instant::now() > deadline {
                return log;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Two tests of `$body(pid)`: with a PID namespace of the container's own
/// (kubelet's default, through appexec) and with the pod's (systemd's path).
macro_rules! in_both_pid_namespaces {
    ($own:ident, $pod:ident, $body:ident) => {
        #[tokio::test(flavor = "multi_thread")]
        async fn $own() {
            $body(cri::NamespaceMode::Container).await;
        }

        #[tokio::test(flavor = "multi_thread")]
        async fn $pod() {
            $body(cri::NamespaceMode::Pod).await;
        }
    };
}

/// The same test in a host-PID pod (containers in the node's PID namespace).
macro_rules! in_the_node_pid_namespace {
    ($name:ident, $body:ident) => {
        #[tokio::test(flavor = "multi_thread")]
        async fn $name() {
            $body(cri::NamespaceMode::Node).await;
        }
    };
}

/// Whether the pod's systemd has the unit loaded (a new connection: none of
/// the daemon's memory).
fn unit_loaded(data: &Path, pod: &str, unit: &str) -> bool {
    let bus = rktlet::stage1::bus::PodBus::connect(common::pod_pid1(data, pod)).expect("pod bus");
    match bus.unit_status(unit) {
        Ok(u) => u.loaded,
        Err(e) if e.is_not_found() => false,
        Err(e) => panic!("unit status: {e}"),
    }
}

/// An app that ends on its own, successfully (its unit stays "active
/// (exited)": RemainAfterExit) or not (failed): RemoveContainer has the
/// pod's systemd forget its unit either way, so nothing of it is left there.
#[tokio::test(flavor = "multi_thread")]
async fn apps_that_ended_on_their_own_leave_no_unit_after_remove() {
    let mut e = env().await;
    let pod = e.pod("enders").await;
    let data = e.d.dir.path().join("data");
    for (name, code) in [("ok", 0), ("fails", 3)] {
        let id = e.create(&pod, name, &["sh", "-c", &format!("exit {code}")], |_| {}).await;
        e.start(&id).await;
        let s = e.wait_state(&id, cri::ContainerState::ContainerExited).await;
        assert_eq!(s.exit_code, code);
        let unit = format!("0-{name}.service");
        assert!(unit_loaded(&data, &pod.0, &unit), "{unit} is kept until its container is removed");
        e.rt.remove_container(cri::RemoveContainerRequest { container_id: id }).await.expect("remove");
        assert!(!unit_loaded(&data, &pod.0, &unit), "the pod's systemd forgets {unit} once its container is removed");
    }
    e.rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("stop pod");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&data, &[pod.0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn sleep_runs_stops_and_is_removed() {
    let mut e = env().await;
    let pod = e.pod("sleeper").await;
    let id = e.create(&pod, "sleep", &["sleep", "1000"], |_| {}).await;
    assert_eq!(e.status(&id).await.state, cri::ContainerState::ContainerCreated as i32);
    e.start(&id).await;
    let s = e.wait_state(&id, cri::ContainerState::ContainerRunning).await;
    assert!(s.started_at >= s.created_at && s.created_at > 0);
    assert_eq!(s.image.map(|i| i.image), Some(e.image.clone()));
    let list = e.rt.list_containers(cri::ListContainersRequest { filter: None }).await.expect("list").into_inner();
    assert_eq!(list.containers.len(), 1);
    assert_eq!(list.containers[0].pod_sandbox_id, pod.0);
    // one image id across the APIs: the content id ListImages and ContainerStatus give
    let s = e.status(&id).await;
    assert!(rktlet::image::is_content_id(&s.image_id), "{}", s.image_id);
    assert_eq!(
        (list.containers[0].image_id.as_str(), s.image_ref.as_str()),
        (s.image_id.as_str(), s.image_id.as_str())
    );
    let running = cri::ContainerFilter {
        state: Some(cri::ContainerStateValue { state: cri::ContainerState::ContainerRunning as i32 }),
        label_selector: [("app".to_string(), "sleep".to_string())].into(),
        ..Default::default()
    };
    let list =
        e.rt.list_containers(cri::ListContainersRequest { filter: Some(running) }).await.expect("list").into_inner();
    assert_eq!(list.containers.len(), 1);
    // its writable layer never syncs the node's file system (`volatile`;
    // Linux 6.5 and later show it as `fsync=volatile`)
    let data = e.d.dir.path().join("data");
    let app_rootfs = data.join("pods/run").join(&pod.0).join("stage1/rootfs/opt/stage2/0-sleep/rootfs");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let line = mountinfo
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(app_rootfs.to_str().expect("utf-8")))
        .expect("the app's rootfs is mounted on the node");
    let options = line.rsplit(' ').next().unwrap_or_default();
    if e.d.log().contains("overlayfs has no 'volatile' here") {
        println!("SKIPPED: sleep_runs_stops_and_is_removed: this kernel's overlayfs has no volatile option");
    } else {
        assert!(
            line.contains(" overlay ") && options.split(',').any(|o| o == "volatile" || o == "fsync=volatile"),
            "{line}"
        );
    }

    // `sleep` as PID 1 of its own namespace has no SIGTERM handler, so the
    // signal is ignored (as under runc) and it is killed at the timeout
    e.rt.stop_container(cri::StopContainerRequest { container_id: id.clone(), timeout: 1 }).await.expect("stop");
    let s = e.status(&id).await;
    assert_eq!(s.state, cri::ContainerState::ContainerExited as i32);
    assert_eq!(s.exit_code, 128 + 9, "killed at the timeout");
    assert!(s.finished_at >= s.started_at);
    // killed, its unit stays loaded in the pod's systemd (failed) until the
    // container is removed
    assert!(
        unit_loaded(&data, &pod.0, "0-sleep.service"),
        "a killed app's unit is kept until its container is removed"
    );
    e.rt.remove_container(cri::RemoveContainerRequest { container_id: id.clone() }).await.expect("remove");
    assert!(!unit_loaded(&data, &pod.0, "0-sleep.service"), "the pod's systemd forgets a removed container's unit");
    e.rt.remove_container(cri::RemoveContainerRequest { container_id: id.clone() }).await.expect("remove again");
    let err =
        e.rt.container_status(cri::ContainerStatusRequest { container_id: id.clone(), verbose: false })
            .await
            .expect_err("gone");
    assert_eq!(err.code(), tonic::Code::NotFound);
    let app_root = data.join("pods/run").join(&pod.0).join("stage1/rootfs/opt/stage2/0-sleep");
    assert!(!app_root.exists(), "app rootfs removed");
    e.rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("stop pod");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&data, &[pod.0]);
    // the pod's systemd closing its bus as the pod stops is no fault
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!e.d.log().contains("pod bus disconnected"), "{}", e.d.log());
}

/// Environment names Kubernetes allows and systemd refuses in a unit
/// (`data-1` and `a.b`, from a ConfigMap's keys), and a value with a control
/// character, reach the app and every command exec'd into it unchanged, in
/// the pod's PID namespace (which systemd runs without appexec otherwise),
/// in one of its own, and in the node's (the pod's log writer starts the
/// app as a copy of its template).
#[tokio::test(flavor = "multi_thread")]
async fn environment_names_kubernetes_allows_reach_the_app() {
    let mut e = env().await;
    let pod = e.pod("envnames").await;
    let envs = [("data-1", "one"), ("a.b", "two words"), ("PLAIN", "three"), ("BELL", "x\u{7}y")];
    let want: Vec<String> = ["BELL=x\u{7}y", "PLAIN=three", "a.b=two words", "data-1=one"].map(String::from).to_vec();
    // (busybox's shell drops the names it cannot use from the environment it passes on: the
    // app is `sleep`, and the exec'd `env`, a copy of it, shows what its execve got)
    for (name, pid) in [("in-pod", cri::NamespaceMode::Pod), ("own", cri::NamespaceMode::Container)] {
        let id = e
            .create(&pod, name, &["sleep", "1000"], |c| {
                c.envs = envs.iter().map(|(k, v)| cri::KeyValue { key: k.to_string(), value: v.to_string() }).collect();
                c.linux.get_or_insert_default().security_context.get_or_insert_default().namespace_options =
                    Some(cri::NamespaceOption { pid: pid as i32, ..Default::default() });
            })
            .await;
        e.start(&id).await;
        let out = common::exec_sync(&mut e.rt, &id, &["env"]).await;
        assert_eq!(named_env(&out.stdout), want, "{name}: the app's environment, as the exec'd command copies it");
    }
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    // a host-PID pod's app, which the pod's log writer starts as a copy of its template
    e.pid = cri::NamespaceMode::Node;
    let pod = e.pod("envnames-host").await;
    let id = e
        .create(&pod, "host", &["sleep", "1000"], |c| {
            c.envs = envs.iter().map(|(k, v)| cri::KeyValue { key: k.to_string(), value: v.to_string() }).collect();
        })
        .await;
    e.start(&id).await;
    let out = common::exec_sync(&mut e.rt, &id, &["env"]).await;
    assert_eq!(named_env(&out.stdout), want, "host-PID: the app's environment, as the exec'd command copies it");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
}

/// The entries of `env`'s output that the environment-name test set, sorted.
fn named_env(stdout: &[u8]) -> Vec<String> {
    let mut got: Vec<String> = String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| ["data-1=", "a.b=", "PLAIN=", "BELL="].iter().any(|p| l.starts_with(p)))
        .map(str::to_string)
        .collect();
    got.sort();
    got
}

/// A last line the app did not end is a partial (`P`) record in its CRI log,
/// as containerd writes it: kubelet rebuilds the output from the tags, so
/// a termination message taken from the log (`FallbackToLogsOnError`) is
/// `DONE`, not `DONE` and a newline the app never wrote.
#[tokio::test(flavor = "multi_thread")]
async fn an_unended_last_line_is_a_partial_record() {
    let mut e = env().await;
    let pod = e.pod("partial").await;
    let id = e.create(&pod, "done", &["sh", "-c", "echo one; printf DONE; exit 3"], |_| {}).await;
    e.start(&id).await;
    let s = e.wait_state(&id, cri::ContainerState::ContainerExited).await;
    assert_eq!(s.exit_code, 3);
    let log = e.wait_log("partial", "done", 2).await;
    let tags: Vec<(&str, &str)> = log
        .lines()
        .map(|l| {
            let mut f = l.splitn(4, ' ');
            let (_, _, tag, content) = (f.next(), f.next(), f.next().unwrap_or(""), f.next().unwrap_or(""));
            (tag, content)
        })
        .collect();
    assert_eq!(tags, [("F", "one"), ("P", "DONE")], "{log}");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
}

/// StopPodSandbox kills what still runs, as the CRI asks: a container that
/// was running reads as exited by SIGKILL (137, as containerd reports it),
/// its output up to the kill is in its log, and no process of it is left.
async fn stop_pod_kills_running_containers(pid: cri::NamespaceMode) {
    let mut e = env_with_pid(pid).await;
    let pod = e.pod("killed").await;
    // the marker names the shell ($0) in every process list
    let marker = format!("stop-kill-marker-{}-{pid:?}", std::process::id());
    let script = "echo up; trap '' TERM; while :; do sleep 1; done";
    let id = e.create(&pod, "busy", &["sh", "-c", script, &marker], |_| {}).await;
    e.start(&id).await;
    e.wait_log("killed", "busy", 1).await;
    let before = e.status(&id).await;
    assert_eq!(before.state, cri::ContainerState::ContainerRunning as i32);
    e.rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("stop pod");
    let s = e.status(&id).await;
    assert_eq!(s.state, cri::ContainerState::ContainerExited as i32, "{s:?}");
    assert_eq!((s.exit_code, s.reason.as_str()), (137, "Error"), "{s:?}");
    assert!(s.finished_at >= s.started_at, "{s:?}");
    assert!(e.log("killed", "busy").contains("up"), "{}", e.log("killed", "busy"));
    assert!(common::processes_mentioning(&marker).is_empty(), "{:?}", common::processes_mentioning(&marker));
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}
in_both_pid_namespaces!(
    stop_pod_kills_running_containers_in_their_own_pid_namespace,
    stop_pod_kills_running_containers_in_the_pods,
    stop_pod_kills_running_containers
);
in_the_node_pid_namespace!(stop_pod_kills_running_containers_of_a_host_pid_pod, stop_pod_kills_running_containers);

/// The pod manifest stays valid appc, so rkt's own tools can read the pod:
/// appc refuses an isolator name it does not know (and with it the whole
/// manifest); rktlet's masked and read-only paths are kept as annotations.
#[tokio::test(flavor = "multi_thread")]
async fn pod_manifest_isolators_are_appc_ones() {
    // appc's isolator names (schema/types: isolator_linux_specific.go, isolator_resources.go)
    const APPC: [&str; 14] = [
        "os/linux/capabilities-retain-set",
        "os/linux/capabilities-remove-set",
        "os/linux/no-new-privileges",
        "os/linux/seccomp-remove-set",
        "os/linux/seccomp-retain-set",
        "os/linux/selinux-context",
        "os/linux/apparmor",
        "os/linux/oom-score-adj",
        "os/linux/cpu-shares",
        "os/unix/sysctl",
        "resource/block-bandwidth",
        "resource/block-iops",
        "resource/cpu",
        "resource/memory",
    ];
    let mut e = env().await;
    let pod = e.pod("appc").await;
    let plain = e.create(&pod, "plain", &["sleep", "300"], |_| {}).await;
    e.create(&pod, "privileged", &["true"], |c| {
        c.linux.get_or_insert_default().security_context.get_or_insert_default().privileged = true;
    })
    .await;
    // no capability at all: appc wants a capability set non-empty
    let nocaps = e
        .create(&pod, "nocaps", &["sleep", "300"], |c| {
            c.linux.get_or_insert_default().security_context.get_or_insert_default().capabilities =
                Some(cri::Capability { drop_capabilities: vec!["ALL".into()], ..Default::default() });
        })
        .await;
    let manifest = e.d.dir.path().join("data/pods/run").join(&pod.0).join("pod");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).expect("pod manifest")).expect("pod manifest is JSON");
    let apps = doc["apps"].as_array().expect("apps");
    assert_eq!(apps.len(), 3, "{doc}");
    for app in apps {
        for iso in app["app"]["isolators"].as_array().into_iter().flatten() {
            let name = iso["name"].as_str().unwrap_or_default();
            assert!(APPC.contains(&name), "isolator {name:?} of {} is not appc's: {doc}", app["name"]);
            if name.starts_with("os/linux/capabilities-") {
                assert!(iso["value"]["set"].as_array().is_some_and(|s| !s.is_empty()), "empty set: {iso}");
            }
        }
    }
    e.start(&nocaps).await;
    let out = common::exec_sync(&mut e.rt, &nocaps, &["grep", "CapBnd", "/proc/1/status"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).split_whitespace().nth(1), Some("0000000000000000"), "{out:?}");
    // and the paths are still masked: kubelet's defaults in the plain one
    e.start(&plain).await;
    let out = common::exec_sync(&mut e.rt, &plain, &["cat", "/proc/kcore"]).await;
    assert_eq!(out.stdout, b"", "/proc/kcore is masked: {out:?}");
    let out = common::exec_sync(
        &mut e.rt,
        &plain,
        &["sh", "-c", "awk '$5 == \"/proc/sys\" { print $6 }' /proc/self/mountinfo"],
    )
    .await;
    let options = String::from_utf8_lossy(&out.stdout);
    assert!(options.lines().last().is_some_and(|o| o.starts_with("ro")), "/proc/sys is read-only: {out:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_code_and_cri_logs() {
    let mut e = env().await;
    let pod = e.pod("logger").await;
    // arguments reach the program verbatim (systemd would expand `$HOME` in them)
    let id =
        e.create(&pod, "talk", &["sh", "-c", "echo \"out $1\"; echo err >&2; exit 3", "sh", "$HOME"], |_| {}).await;
    e.start(&id).await;
    let s = e.wait_state(&id, cri::ContainerState::ContainerExited).await;
    assert_eq!(s.exit_code, 3);
    assert_eq!(s.reason, "Error");
    assert!(s.log_path.ends_with("talk/0.log"), "{}", s.log_path);
    let log = e.wait_log("logger", "talk", 2).await;
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    let find = |stream: &str| lines.iter().find(|l| l.split(' ').nth(1) == Some(stream)).copied().unwrap_or("");
    for (stream, text) in [("stdout", "out $HOME"), ("stderr", "err")] {
        let line = find(stream);
        let f: Vec<&str> = line.splitn(4, ' ').collect();
        assert_eq!(f.len(), 4, "{line}");
        assert!(f[0].ends_with('Z') && f[0].contains('T'), "RFC3339 timestamp: {line}");
        assert_eq!((f[2], f[3]), ("F", text), "{line}");
    }
    let err = e.rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect_err("restart");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_ignoring_container_is_killed_at_the_timeout() {
    let mut e = env().await;
    let pod = e.pod("stubborn").await;
    let id = e.create(&pod, "stubborn", &["sh", "-c", "trap '' TERM; while true; do sleep 0.1; done"], |_| {}).await;
    e.start(&id).await;
    e.wait_state(&id, cri::ContainerState::ContainerRunning).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    e.rt.stop_container(cri::StopContainerRequest { container_id: id.clone(), timeout: 1 }).await.expect("stop");
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(900), "SIGKILL came before the timeout: {took:?}");
    let s = e.status(&id).await;
    assert_eq!(s.exit_code, 128 + 9, "SIGKILLed: {s:?}");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
}

in_both_pid_namespaces!(
    user_env_workdir_and_mounts_inside_the_container,
    user_env_workdir_and_mounts_inside_the_container_pod_pid_namespace,
    identity_env_workdir_and_mounts
);

in_the_node_pid_namespace!(
    user_env_workdir_and_mounts_inside_the_container_node_pid_namespace,
    identity_env_workdir_and_mounts
);

async fn identity_env_workdir_and_mounts(pid: cri::NamespaceMode) {
    let mut e = env_with_pid(pid).await;
    let pod = e.pod("identity").await;
    let vol = tempfile::tempdir().expect("volume");
    std::fs::write(vol.path().join("hello"), "from the host\n").expect("write");
    let vol_path = vol.path().display().to_string();
    // kubelet's termination message file: a volume below the container's /dev
    let termination = tempfile::NamedTempFile::new().expect("termination log");
    let termination_path = termination.path().display().to_string();
    // (world-writable, as kubelet makes it)
    std::fs::set_permissions(&termination_path, std::os::unix::fs::PermissionsExt::from_mode(0o666)).expect("chmod");
    let script = "id -u; id -g; echo $FOO; pwd; cat /data/hello; cat /etc/hostname; touch /data/x 2>/dev/null && echo writable || echo readonly; \
                  (echo last words > /dev/termination-log) 2>/dev/null || true";
    let id = e
        .create(&pod, "who", &["sh", "-c", script], |c| {
            c.envs = vec![cri::KeyValue { key: "FOO".into(), value: "bar".into() }];
            c.working_dir = "/tmp".into();
            c.mounts = vec![
                cri::Mount {
                    container_path: "/data".into(),
                    host_path: vol_path.clone(),
                    readonly: true,
                    ..Default::default()
                },
                cri::Mount {
                    container_path: "/dev/termination-log".into(),
                    host_path: termination_path.clone(),
                    ..Default::default()
                },
            ];
            c.linux = secured(cri::LinuxContainerSecurityContext {
                run_as_user: Some(cri::Int64Value { value: 1000 }),
                run_as_group: Some(cri::Int64Value { value: 2000 }),
                ..Default::default()
            });
        })
        .await;
    e.start(&id).await;
    let s = e.wait_state(&id, cri::ContainerState::ContainerExited).await;
    let log = e.wait_log("identity", "who", 7).await;
    let out = log_content(&log);
    assert_eq!(out, ["1000", "2000", "bar", "/tmp", "from the host", "identity", "readonly"], "{log}");
    assert_eq!(s.exit_code, 0);
    assert_eq!(s.reason, "Completed");
    assert_eq!(s.mounts.first().map(|m| m.host_path.as_str()), Some(vol_path.as_str()));
    if pid == cri::NamespaceMode::Container {
        assert_eq!(std::fs::read_to_string(&termination_path).expect("termination log"), "last words\n");
    }
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
    assert!(Path::new(&vol_path).join("hello").exists(), "the volume source is untouched");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_container_requests() {
    let mut e = env().await;
    let pod = e.pod("bad").await;
    let no_image =
        e.rt.create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.0.clone(),
            config: Some(cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata { name: "x".into(), attempt: 0 }),
                image: Some(cri::ImageSpec { image: "localhost:1/not/pulled:latest".into(), ..Default::default() }),
                ..Default::default()
            }),
            sandbox_config: Some(pod.1.clone()),
        })
        .await
        .expect_err("image not pulled");
    assert_eq!(no_image.code(), tonic::Code::NotFound, "{no_image:?}");
    let id = e.create(&pod, "dup", &["true"], |_| {}).await;
    let dup =
        e.rt.create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.0.clone(),
            config: Some(cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata { name: "dup".into(), attempt: 0 }),
                image: Some(cri::ImageSpec { image: e.image.clone(), ..Default::default() }),
                ..Default::default()
            }),
            sandbox_config: Some(pod.1.clone()),
        })
        .await
        .expect_err("same name twice");
    assert_eq!(dup.code(), tonic::Code::AlreadyExists);
    // mounts rktlet cannot make as asked are refused, and leave no app behind
    let host = tempfile::tempdir().expect("host dir");
    for (what, mount) in [
        ("unknown propagation", cri::Mount { propagation: 7, ..Default::default() }),
        (
            "id-mapped",
            cri::Mount {
                uid_mappings: vec![cri::IdMapping { host_id: 1000, container_id: 0, length: 1 }],
                ..Default::default()
            },
        ),
    ] {
        let mount = cri::Mount { container_path: "/vol".into(), host_path: host.path().display().to_string(), ..mount };
        let err =
            e.rt.create_container(cri::CreateContainerRequest {
                pod_sandbox_id: pod.0.clone(),
                config: Some(cri::ContainerConfig {
                    metadata: Some(cri::ContainerMetadata { name: "badmount".into(), attempt: 0 }),
                    image: Some(cri::ImageSpec { image: e.image.clone(), ..Default::default() }),
                    mounts: vec![mount],
                    ..Default::default()
                }),
                sandbox_config: Some(pod.1.clone()),
            })
            .await
            .expect_err(what);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{what}: {err:?}");
    }
    let listed = e.rt.list_containers(cri::ListContainersRequest::default()).await.expect("list").into_inner();
    assert_eq!(listed.containers.len(), 1, "only dup: {:?}", listed.containers);
    // a container of a stopped pod cannot start
    e.rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("stop pod");
    let err =
        e.rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect_err("pod stopped");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    let err =
        e.rt.container_status(cri::ContainerStatusRequest { container_id: id, verbose: false })
            .await
            .expect_err("gone");
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

/// rktlet's own `k8s.io/reserved/` keys are not taken from a request: a
/// forged pid-namespace or device key neither puts the container in the
/// node's PID namespace nor gives it a device, and is not reported back.
#[tokio::test(flavor = "multi_thread")]
async fn reserved_annotations_in_a_request_are_not_obeyed() {
    let mut e = env().await;
    let pod = e.pod("forged").await;
    let id = e
        .create(&pod, "forged", &["sleep", "1000"], |c| {
            c.annotations = [
                ("k8s.io/reserved/pid-namespace".to_string(), "host".to_string()),
                ("k8s.io/reserved/devices".to_string(), "/dev/sda:/dev/sda:rwm".to_string()),
                ("team".to_string(), "a".to_string()),
            ]
            .into();
        })
        .await;
    e.start(&id).await;
    let out = common::exec_sync(&mut e.rt, &id, &["sh", "-c", "readlink /proc/self/ns/pid; ls /dev/sda 2>&1"]).await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let node_pidns = std::fs::read_link("/proc/self/ns/pid").expect("ns").display().to_string();
    assert!(!text.contains(&node_pidns), "in the node's PID namespace: {text}");
    assert!(text.contains("No such file"), "a device from a forged key: {text}");
    let annotations =
        e.rt.container_status(cri::ContainerStatusRequest { container_id: id.clone(), verbose: false })
            .await
            .expect("status")
            .into_inner()
            .status
            .expect("status")
            .annotations;
    assert_eq!(annotations.get("team").map(String::as_str), Some("a"));
    assert!(annotations.keys().all(|k| !k.starts_with("k8s.io/reserved/")), "{annotations:?}");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn capabilities_no_new_privs_and_log_reopen() {
    let mut e = env().await;
    let pod = e.pod("caps").await;
    let script = "grep -E 'CapBnd|NoNewPrivs' /proc/self/status; while true; do echo tick; sleep 0.05; done";
    let id = e
        .create(&pod, "caps", &["sh", "-c", script], |c| {
            c.linux = secured(cri::LinuxContainerSecurityContext {
                capabilities: Some(cri::Capability {
                    add_capabilities: vec!["NET_ADMIN".into()],
                    drop_capabilities: vec!["KILL".into(), "CAP_CHOWN".into()],
                    ..Default::default()
                }),
                no_new_privs: true,
                ..Default::default()
            });
        })
        .await;
    e.start(&id).await;
    let log = e.wait_log("caps", "caps", 3).await;
    let want =
        rktlet::stage1::caps::bounding_set(&["NET_ADMIN".into()], &["KILL".into(), "CHOWN".into()]).expect("set");
    let content: Vec<&str> = log.lines().filter_map(|l| l.splitn(4, ' ').nth(3)).collect();
    let capbnd = content.iter().find(|l| l.starts_with("CapBnd:")).expect("CapBnd line");
    let got = u64::from_str_radix(capbnd.split_whitespace().nth(1).expect("mask"), 16).expect("hex");
    // the pod's own bounding set caps it (nspawn keeps NET_ADMIN only for pods with a private network)
    let pid1 = common::pod_pid1(&e.d.dir.path().join("data"), &pod.0);
    let status = std::fs::read_to_string(format!("/proc/{pid1}/status")).expect("status");
    let pod_set = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .expect("pod CapBnd");
    assert_eq!(got, want & pod_set, "bounding set inside the container");
    assert_eq!(got & (1 << 5), 0, "KILL dropped");
    assert!(content.iter().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["NoNewPrivs:", "1"]), "{log}");

    // kubelet rotates the log: move it away, ask for a reopen, new lines land in a new file
    let path = e.logs.path().join("caps/caps/0.log");
    std::fs::rename(&path, e.logs.path().join("caps/caps/0.log.1")).expect("rotate");
    e.rt.reopen_container_log(cri::ReopenContainerLogRequest { container_id: id.clone() }).await.expect("reopen");
    let fresh = e.wait_log("caps", "caps", 2).await;
    assert!(fresh.lines().all(|l| l.ends_with(" stdout F tick")), "{fresh}");
    e.rt.stop_container(cri::StopContainerRequest { container_id: id.clone(), timeout: 0 }).await.expect("stop");
    assert_eq!(e.status(&id).await.exit_code, 128 + 9, "timeout 0 kills at once");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

fn app_cgroup_file(data: &Path, pod: &str, app: &str, controller: &str, file: &str) -> String {
    let sub = std::fs::read_to_string(data.join("pods/run").join(pod).join("subcgroup")).expect("subcgroup");
    let layout = rktlet::cgroup::Layout::read().expect("layout");
    let h = layout.hierarchies.iter().find(|h| h.controllers.iter().any(|c| c == controller)).expect("controller");
    let path = h.mount.as_ref().expect("mounted").join(sub.trim()).join(format!("app-{app}")).join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).trim().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_limit_oom_kill_and_resource_updates() {
    let mut e = env().await;
    let pod = e.pod("limits").await;
    let data = e.d.dir.path().join("data");
    let resources = |mem: i64, quota: i64| cri::LinuxContainerResources {
        memory_limit_in_bytes: mem,
        cpu_shares: 512,
        cpu_period: 100_000,
        cpu_quota: quota,
        ..Default::default()
    };
    // a 32 MiB limit and an app that holds 80 MB in a shell variable
    let hog = e
        .create(&pod, "hog", &["sh", "-c", "v=$(yes | head -c 80000000); echo survived"], |c| {
            c.linux =
                Some(cri::LinuxContainerConfig { resources: Some(resources(32 << 20, 50_000)), ..Default::default() });
        })
        .await;
    e.start(&hog).await;
    let s = e.wait_state(&hog, cri::ContainerState::ContainerExited).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (137, "OOMKilled"), "{s:?}");
    // a child OOM-killed, the app's shell goes on: its own exit (tail's 137), OOMKilled as
    // containerd reports a container whose cgroup counted an OOM kill. One child
    // allocates: in `head | tail`, head's next pipe write could invoke a second
    // OOM kill before tail's pages were uncharged, and the kernel then took the
    // shell (1 run in 7 here; runc's containers alike). The shell's wait returns
    // only once tail's memory is freed.
    let piped = e
        .create(&pod, "piped", &["sh", "-c", "tail /dev/zero; echo after $?"], |c| {
            c.linux =
                Some(cri::LinuxContainerConfig { resources: Some(resources(32 << 20, 50_000)), ..Default::default() });
        })
        .await;
    e.start(&piped).await;
    let s = e.wait_state(&piped, cri::ContainerState::ContainerExited).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (0, "OOMKilled"), "{s:?}");
    let log = e.wait_log("limits", "piped", 1).await;
    assert!(log.contains("after 137"), "the shell saw tail killed and went on: {log}");

    // the limits hold from the app's first instruction: on cgroup v1 the
    // daemon moves the app, and a process moved once it ran keeps what it
    // had charged elsewhere (critest's `dd bs=20M` under 15 MiB then ran on)
    let early = e
        .create(&pod, "early", &["cat", "/proc/self/cgroup"], |c| {
            c.linux =
                Some(cri::LinuxContainerConfig { resources: Some(resources(32 << 20, 50_000)), ..Default::default() });
        })
        .await;
    e.start(&early).await;
    e.wait_state(&early, cri::ContainerState::ContainerExited).await;
    let log = e.wait_log("limits", "early", 1).await;
    let limited: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once(" F ").map(|(_, line)| line))
        .filter(|l| l.split(':').nth(1).is_some_and(|c| c.split(',').any(|c| c == "memory" || c == "pids")))
        .collect();
    assert!(!limited.is_empty(), "no memory or pids cgroup in the app's /proc/self/cgroup: {log}");
    for line in limited {
        assert!(line.ends_with("/app-0-early"), "the app ran before it was in its cgroups: {line} ({log})");
    }

    let steady = e
        .create(&pod, "steady", &["sleep", "1000"], |c| {
            c.linux =
                Some(cri::LinuxContainerConfig { resources: Some(resources(64 << 20, 50_000)), ..Default::default() });
        })
        .await;
    e.start(&steady).await;
    e.wait_state(&steady, cri::ContainerState::ContainerRunning).await;
    assert_eq!(
        app_cgroup_file(&data, &pod.0, "0-steady", "memory", "memory.limit_in_bytes"),
        (64u64 << 20).to_string()
    );
    assert_eq!(app_cgroup_file(&data, &pod.0, "0-steady", "cpu", "cpu.cfs_quota_us"), "50000");
    assert_eq!(app_cgroup_file(&data, &pod.0, "0-steady", "cpu", "cpu.shares"), "512");
    let procs = app_cgroup_file(&data, &pod.0, "0-steady", "memory", "cgroup.procs");
    assert!(!procs.is_empty(), "the app's process sits in its memory cgroup");
    // cgroup v1 (this host): swap (memsw), cpusets and hugepages are written too, or refused
    let v1 = rktlet::cgroup::Layout::read().expect("layout").v2_root().is_none();
    let has = |c: &str| {
        rktlet::cgroup::Layout::read()
            .expect("layout")
            .hierarchies
            .iter()
            .any(|h| h.mount.is_some() && h.controllers.iter().any(|x| x == c))
    };
    let memsw = |d: &Path| {
        let layout = rktlet::cgroup::Layout::read().expect("layout");
        let h = layout.hierarchies.iter().find(|h| h.controllers.iter().any(|c| c == "memory")).expect("memory");
        h.mount.as_ref().is_some_and(|m| m.join("memory.memsw.limit_in_bytes").exists()) && d.exists()
    };
    let cpus = std::fs::read_to_string("/sys/fs/cgroup/cpuset/cpuset.cpus").unwrap_or_default();
    let first_cpu = cpus.trim().split([',', '-']).next().unwrap_or("0").to_string();
    if v1 && has("cpuset") && memsw(&data) {
        let pinned = e
            .create(&pod, "pinned", &["sleep", "1000"], |c| {
                let mut r = resources(64 << 20, 50_000);
                r.memory_swap_limit_in_bytes = 96 << 20;
                r.cpuset_cpus = first_cpu.clone();
                c.linux = Some(cri::LinuxContainerConfig { resources: Some(r), ..Default::default() });
            })
            .await;
        e.start(&pinned).await;
        e.wait_state(&pinned, cri::ContainerState::ContainerRunning).await;
        let file = |c: &str, f: &str| app_cgroup_file(&data, &pod.0, "0-pinned", c, f);
        assert_eq!(file("memory", "memory.memsw.limit_in_bytes"), (96u64 << 20).to_string());
        assert_eq!(file("cpuset", "cpuset.cpus"), first_cpu);
        assert!(!file("cpuset", "cgroup.procs").is_empty(), "the app's process sits in its cpuset cgroup");
        // raising memory above the old memsw: memsw goes first
        let mut r = resources(128 << 20, 25_000);
        r.memory_swap_limit_in_bytes = 160 << 20;
        e.rt.update_container_resources(cri::UpdateContainerResourcesRequest {
            container_id: pinned.clone(),
            linux: Some(r),
            ..Default::default()
        })
        .await
        .expect("UpdateContainerResources with swap");
        assert_eq!(file("memory", "memory.limit_in_bytes"), (128u64 << 20).to_string());
        assert_eq!(file("memory", "memory.memsw.limit_in_bytes"), (160u64 << 20).to_string());
    } else {
        common::skipped(
            "memory_limit_oom_kill_and_resource_updates/v1 cpuset+memsw",
            "not cgroup v1 with cpuset and swap accounting",
        );
    }
    if v1 && has("cpuset") {
        // cgroups the kernel will not make as asked (a CPU the node does not
        // have): the start fails with the refusal as its cause, the
        // container is exited, nothing of it runs
        let no_cpu = e
            .create(&pod, "nocpu", &["sleep", "1000"], |c| {
                let mut r = resources(64 << 20, 50_000);
                r.cpuset_cpus = "4095".into();
                c.linux = Some(cri::LinuxContainerConfig { resources: Some(r), ..Default::default() });
            })
            .await;
        let err =
            e.rt.start_container(cri::StartContainerRequest { container_id: no_cpu.clone() })
                .await
                .expect_err("a CPU the node does not have");
        assert!(err.message().contains("cpuset.cpus"), "the refusal is the cause: {err:?}");
        let s = e.wait_state(&no_cpu, cri::ContainerState::ContainerExited).await;
        assert!(s.message.contains("cpuset.cpus"), "{s:?}");
        // killed by the daemon as its cgroups failed, not ended by appexec
        // giving up on a placement that never came
        assert_eq!(s.exit_code, 128 + libc::SIGKILL, "{s:?}");
        assert!(common::processes_mentioning("/opt/stage2/0-nocpu/").is_empty(), "nothing of it runs");
    }
    if v1 && !has("hugetlb") {
        let mut r = resources(64 << 20, 50_000);
        r.hugepage_limits = vec![cri::HugepageLimit { page_size: "2MB".into(), limit: 2 << 20 }];
        let err = e
            .try_create(&pod, "huge", &["sleep", "1"], |c| {
                c.linux = Some(cri::LinuxContainerConfig { resources: Some(r), ..Default::default() });
            })
            .await
            .expect_err("no hugetlb controller");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains("hugepage_limits"), "{err:?}");
    }
    e.rt.update_container_resources(cri::UpdateContainerResourcesRequest {
        container_id: steady.clone(),
        linux: Some(resources(128 << 20, 25_000)),
        ..Default::default()
    })
    .await
    .expect("UpdateContainerResources");
    assert_eq!(
        app_cgroup_file(&data, &pod.0, "0-steady", "memory", "memory.limit_in_bytes"),
        (128u64 << 20).to_string()
    );
    assert_eq!(app_cgroup_file(&data, &pod.0, "0-steady", "cpu", "cpu.cfs_quota_us"), "25000");
    // ContainerStatus reports what the container runs with now (kubelet checks resizes there)
    let linux = e.status(&steady).await.resources.and_then(|r| r.linux).expect("resources in status");
    assert_eq!((linux.memory_limit_in_bytes, linux.cpu_quota, linux.cpu_shares), (128 << 20, 25_000, 512));
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&data, &[pod.0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn containers_survive_a_daemon_sigkill() {
    let mut e = env().await;
    let pod = e.pod("restart").await;
    let long = e.create(&pod, "long", &["sh", "-c", "trap 'exit 143' TERM; sleep 1000 & wait"], |_| {}).await;
    let short = e.create(&pod, "short", &["sh", "-c", "sleep 1; exit 4"], |_| {}).await;
    e.start(&long).await;
    e.start(&short).await;
    e.d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    // `short` exits while no daemon listens to the pod
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let child = Daemon::spawn(&e.d.socket, e.d.dir.path(), &[]);
    e.d.child = child;
    e.d.wait_ready();
    e.rt = e.d.runtime().await;
    assert_eq!(e.status(&long).await.state, cri::ContainerState::ContainerRunning as i32);
    let s = e.wait_state(&short, cri::ContainerState::ContainerExited).await;
    assert_eq!(s.exit_code, 4, "exit recorded after the restart");
    e.rt.stop_container(cri::StopContainerRequest { container_id: long.clone(), timeout: 10 }).await.expect("stop");
    assert_eq!(e.status(&long).await.exit_code, 143);
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

in_both_pid_namespaces!(exec_gets_the_seccomp_filters, exec_gets_the_seccomp_filters_pod_pid_namespace, exec_filters);

in_the_node_pid_namespace!(exec_gets_the_seccomp_filters_node_pid_namespace, exec_filters);

in_both_pid_namespaces!(
    exec_gets_the_seccomp_filters_from_a_filtered_daemon,
    exec_gets_the_seccomp_filters_from_a_filtered_daemon_pod_pid_namespace,
    exec_filters_filtered_daemon
);

in_the_node_pid_namespace!(
    exec_gets_the_seccomp_filters_from_a_filtered_daemon_node_pid_namespace,
    exec_filters_filtered_daemon
);

async fn exec_filters(pid: cri::NamespaceMode) {
    exec_filters_with(Env { pid, ..env().await }, false).await;
}

/// The daemon itself under a seccomp filter (a node in a container that
/// keeps its engine's): the kernel refuses it the app's filters, and exec
/// still confines the command (issue: every ExecSync failed there).
async fn exec_filters_filtered_daemon(pid: cri::NamespaceMode) {
    let d = Daemon::start_under_seccomp(&[]);
    let image = common::pull_busybox(&d).await;
    let rt = d.runtime().await;
    let e = Env { d, rt, image, logs: tempfile::tempdir().expect("logs"), pid, net: None };
    exec_filters_with(e, true).await;
}

/// ExecSync runs under the filters of the container's main process: the
/// same count (read from the main process; with a filtered daemon, as on a
/// node that keeps a filter, built from the profile: more than the daemon's
/// own), a call the profile denies
/// is denied to the command, and so is a user namespace to a RuntimeDefault
/// container (its RestrictNamespaces=).
async fn exec_filters_with(mut e: Env, filtered_daemon: bool) {
    let pod = e.pod("filtered").await;
    let profiles = tempfile::tempdir().expect("profiles");
    let deny_mkdir = profiles.path().join("deny-mkdir.json");
    std::fs::write(
        &deny_mkdir,
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}"#,
    )
    .expect("profile");
    let localhost_ref = deny_mkdir.to_str().expect("utf8").to_string();
    let id = e
        .create(&pod, "filtered", &["sleep", "1000"], |c| {
            c.linux = secured(cri::LinuxContainerSecurityContext {
                seccomp: Some(cri::SecurityProfile {
                    profile_type: cri::security_profile::ProfileType::Localhost as i32,
                    localhost_ref,
                }),
                ..Default::default()
            });
        })
        .await;
    e.start(&id).await;
    e.wait_state(&id, cri::ContainerState::ContainerRunning).await;
    let script = "grep -E '^Seccomp(_filters)?:' /proc/self/status; \
                  me=$(readlink /proc/self/ns/mnt); \
                  for p in /proc/[0-9]*; do [ \"$(cat $p/comm)\" = sleep ] && [ \"$(readlink $p/ns/mnt)\" = \"$me\" ] \
                  && grep '^Seccomp_filters:' $p/status; done; \
                  mkdir /tmp/made 2>&1; echo rc=$?";
    let out = common::exec_sync(&mut e.rt, &id, &["sh", "-c", script]).await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    assert_eq!(lines.first().map(|l| l.split_whitespace().collect::<Vec<_>>()), Some(vec!["Seccomp:", "2"]), "{text}");
    let own = lines.get(1).copied().unwrap_or_default();
    assert!(own.starts_with("Seccomp_filters:"), "{text}");
    let count = |l: &str| l.split_whitespace().nth(1).and_then(|n| n.parse::<u32>().ok()).unwrap_or(0);
    // the daemon's own filters: the test's, and the node's where the node keeps one
    let daemon = std::fs::read_to_string(format!("/proc/{}/status", e.d.child.id())).expect("daemon status");
    let daemon = daemon.lines().find(|l| l.starts_with("Seccomp_filters:")).map(count).unwrap_or(0);
    if filtered_daemon {
        assert!(daemon >= 1, "the daemon runs under the test's filter");
    }
    if daemon > 0 {
        assert!(count(own) > daemon, "the command has filters of the app's beyond the daemon's: {text}");
    } else {
        assert_eq!(lines.get(2).copied(), Some(own), "the command has the main process's filters: {text}");
    }
    assert!(text.contains("Permission denied") && text.contains("rc=1"), "mkdir denied to the command: {text}");

    // RuntimeDefault: no user namespace without SYS_ADMIN, in the command too
    let id = e
        .create(&pod, "default", &["sleep", "1000"], |c| {
            c.linux = secured(cri::LinuxContainerSecurityContext {
                seccomp: Some(cri::SecurityProfile {
                    profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
                    ..Default::default()
                }),
                ..Default::default()
            });
        })
        .await;
    e.start(&id).await;
    e.wait_state(&id, cri::ContainerState::ContainerRunning).await;
    let out = common::exec_sync(
        &mut e.rt,
        &id,
        &["sh", "-c", "unshare -U true 2>&1; echo rc=$?; mkdir /tmp/made; echo rc=$?"],
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("Operation not permitted"), "unshare -U denied to the command: {text}");
    assert!(text.ends_with("rc=0\n") && text.contains("rc=1"), "mkdir allowed, unshare not: {text}");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
}

in_both_pid_namespaces!(seccomp_and_masked_paths, seccomp_and_masked_paths_pod_pid_namespace, seccomp_and_masks);

in_the_node_pid_namespace!(seccomp_and_masked_paths_node_pid_namespace, seccomp_and_masks);

async fn seccomp_and_masks(pid: cri::NamespaceMode) {
    let mut e = env_with_pid(pid).await;
    let pod = e.pod("hardened").await;
    // masks are looked at directly (reading a masked file would fail without CAP_SYS_RAWIO anyway)
    let script = "grep Seccomp: /proc/self/status; stat -c '%n %F' /proc/timer_list /proc/irq; \
                  ls -A /proc/irq | wc -l; grep -E ' /proc/(sys|bus) ' /proc/self/mounts | cut -d' ' -f2,4 | cut -d, -f1; \
                  echo x 2>&1 > /proc/sys/kernel/hostname || true";
    let id = e
        .create(&pod, "hardened", &["sh", "-c", script], |c| {
            c.linux = secured(cri::LinuxContainerSecurityContext {
                seccomp: Some(cri::SecurityProfile {
                    profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
                    localhost_ref: String::new(),
                }),
                masked_paths: ["/proc/irq", "/proc/kcore", "/proc/timer_list", "/proc/not-there"]
                    .map(String::from)
                    .to_vec(),
                readonly_paths: ["/proc/bus", "/proc/sys"].map(String::from).to_vec(),
                ..Default::default()
            });
        })
        .await;
    e.start(&id).await;
    e.wait_state(&id, cri::ContainerState::ContainerExited).await;
    let log = e.wait_log("hardened", "hardened", 7).await;
    let out: Vec<String> = log
        .lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        out[..6],
        [
            "Seccomp: 2",
            "/proc/timer_list character special file",
            "/proc/irq directory",
            "0",
            "/proc/bus ro",
            "/proc/sys ro"
        ],
        "{log}"
    );
    assert!(out[6].contains("Read-only file system"), "{log}");
    let bad =
        e.rt.create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.0.clone(),
            config: Some(cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata { name: "local".into(), attempt: 0 }),
                image: Some(cri::ImageSpec { image: e.image.clone(), ..Default::default() }),
                linux: secured(cri::LinuxContainerSecurityContext {
                    seccomp: Some(cri::SecurityProfile {
                        profile_type: cri::security_profile::ProfileType::Localhost as i32,
                        localhost_ref: "profiles/x.json".into(),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            sandbox_config: Some(pod.1.clone()),
        })
        .await
        .expect_err("a relative localhost profile path");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);

    // a Localhost profile (kubelet's localhost_ref: a host path): allow by
    // default, mkdir denied with EACCES
    let profiles = tempfile::tempdir().expect("profiles");
    let deny_mkdir = profiles.path().join("deny-mkdir.json");
    std::fs::write(
        &deny_mkdir,
        r#"{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],
           "syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}"#,
    )
    .expect("profile");
    let localhost = |path: &std::path::Path| {
        let localhost_ref = path.to_str().expect("utf8").to_string();
        move |c: &mut cri::ContainerConfig| {
            c.linux = secured(cri::LinuxContainerSecurityContext {
                seccomp: Some(cri::SecurityProfile {
                    profile_type: cri::security_profile::ProfileType::Localhost as i32,
                    localhost_ref,
                }),
                ..Default::default()
            });
        }
    };
    let script = "mkdir /tmp/made 2>&1; echo rc=$?; touch /tmp/file && echo touched";
    let id = e.create(&pod, "profiled", &["sh", "-c", script], localhost(&deny_mkdir)).await;
    e.start(&id).await;
    e.wait_state(&id, cri::ContainerState::ContainerExited).await;
    let log = e.wait_log("hardened", "profiled", 3).await;
    assert!(log.contains("Permission denied") && log.contains("rc=1") && log.contains("touched"), "{log}");
    // rules on arguments cannot be enforced by name: refused, not weakened
    let by_args = profiles.path().join("args.json");
    std::fs::write(
        &by_args,
        r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["personality"],"action":"SCMP_ACT_ALLOW",
           "args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]}]}"#,
    )
    .expect("profile");
    let mut config = cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata { name: "by-args".into(), attempt: 0 }),
        image: Some(cri::ImageSpec { image: e.image.clone(), ..Default::default() }),
        ..Default::default()
    };
    localhost(&by_args)(&mut config);
    let bad =
        e.rt.create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.0.clone(),
            config: Some(config),
            sandbox_config: Some(pod.1.clone()),
        })
        .await
        .expect_err("a profile with argument conditions");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().contains("argument conditions"), "{}", bad.message());
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

in_both_pid_namespaces!(
    default_masks_read_only_rootfs_and_privileged_apps,
    default_masks_read_only_rootfs_and_privileged_apps_pod_pid_namespace,
    default_masks_and_privileged_apps
);

in_the_node_pid_namespace!(
    default_masks_read_only_rootfs_and_privileged_apps_node_pid_namespace,
    default_masks_and_privileged_apps
);

async fn default_masks_and_privileged_apps(pid: cri::NamespaceMode) {
    let mut e = env_with_pid(pid).await;
    let pod = e.pod("masks").await;
    // no masked or read-only paths sent: kubelet's defaults, applied once to the pod's /proc and /sys
    let script = "stat -c '%n %F' /proc/keys /proc/timer_list; ls -A /sys/firmware | wc -l; \
                  echo 1 2>&1 > /proc/sys/kernel/ns_last_pid || true; cat /proc/1/comm; \
                  grep -c ' /etc/hosts ' /proc/self/mountinfo";
    let plain = e.create(&pod, "plain", &["sh", "-c", script], |_| {}).await;
    e.start(&plain).await;
    e.wait_state(&plain, cri::ContainerState::ContainerExited).await;
    let log = e.wait_log("masks", "plain", 6).await;
    let out = log_content(&log);
    assert_eq!(out[0], "/proc/keys character special file", "{log}");
    assert_eq!(out[1], "/proc/timer_list character special file", "{log}");
    assert_eq!(out[2], "0", "{log}");
    assert!(out[3].contains("Read-only file system"), "{log}");
    // PID 1: the pod's systemd, or the app itself; the pod's hosts file is bound in the app
    // (in a host-PID pod: the node's init)
    let node_init = std::fs::read_to_string("/proc/1/comm").unwrap_or_default();
    let pid1 = match pid {
        cri::NamespaceMode::Pod => "systemd",
        cri::NamespaceMode::Node => node_init.trim(),
        _ => "sh",
    };
    assert_eq!(out[4], pid1, "{log}");
    assert_eq!(out[5], "1", "{log}");
    // a privileged app in the same pod sees the real files
    let privileged = e
        .create(
            &pod,
            "privileged",
            &["sh", "-c", "stat -c '%n %F' /proc/timer_list; ls -A /sys/firmware | wc -l"],
            |c| {
                c.linux = secured(cri::LinuxContainerSecurityContext { privileged: true, ..Default::default() });
            },
        )
        .await;
    e.start(&privileged).await;
    e.wait_state(&privileged, cri::ContainerState::ContainerExited).await;
    let log = e.wait_log("masks", "privileged", 2).await;
    let out = log_content(&log);
    assert_eq!(out[0], "/proc/timer_list regular empty file", "{log}");
    assert_ne!(out[1], "0", "{log}");
    // a read-only rootfs is read-only in either PID namespace, keeps the pod's
    // identity files read-only too, and a writable volume writable
    let volume = tempfile::tempdir().expect("volume");
    let rofs = e
        .create(
            &pod,
            "rofs",
            &[
                "sh",
                "-c",
                "echo x 2>&1 >> /etc/hosts; echo x 2>&1 >> /etc/resolv.conf; touch /written 2>&1; \
                 touch /data/ok && echo volume-writable",
            ],
            |c| {
                c.mounts = vec![cri::Mount {
                    container_path: "/data".into(),
                    host_path: volume.path().display().to_string(),
                    ..Default::default()
                }];
                c.linux = secured(cri::LinuxContainerSecurityContext { readonly_rootfs: true, ..Default::default() });
            },
        )
        .await;
    e.start(&rofs).await;
    e.wait_state(&rofs, cri::ContainerState::ContainerExited).await;
    // all four lines: the exit can be reported before the log writer has
    // the last one
    let log = e.wait_log("masks", "rofs", 4).await;
    // the root itself (EROFS), and the identity files
    assert_eq!(log.matches("Read-only file system").count(), 3, "{log}");
    assert!(log.contains("/written"), "{log}");
    assert!(log.contains("volume-writable") && volume.path().join("ok").exists(), "{log}");
    // more than the defaults: /proc/sys, only read-only in the pod, is masked for this app
    let masksys = e
        .create(&pod, "masksys", &["sh", "-c", "ls -A /proc/sys | wc -l; stat -c '%F' /proc/keys"], |c| {
            let mut masked: Vec<String> = rktlet::stage1::api_vfs::DEFAULT_MASKED.map(String::from).to_vec();
            masked.push("/proc/sys".into());
            c.linux = secured(cri::LinuxContainerSecurityContext {
                masked_paths: masked,
                readonly_paths: rktlet::stage1::api_vfs::DEFAULT_READONLY.map(String::from).to_vec(),
                ..Default::default()
            });
        })
        .await;
    e.start(&masksys).await;
    e.wait_state(&masksys, cri::ContainerState::ContainerExited).await;
    let log = e.wait_log("masks", "masksys", 2).await;
    let out = log_content(&log);
    assert_eq!(out, ["0", "character special file"], "{log}");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_signal_oom_score_and_identity_in_status() {
    let mut e = env().await;
    let pod = e.pod("signals").await;
    let data = e.d.dir.path().join("data");
    // ignores SIGTERM: only its stop signal (SIGUSR1) ends it before the 10 s timeout
    let script =
        "trap 'exit 7' USR1; trap '' TERM; echo $(cat /proc/self/oom_score_adj); while true; do sleep 0.1; done";
    let quits = e
        .create(&pod, "quits", &["sh", "-c", script], |c| {
            c.stop_signal = cri::Signal::Sigusr1 as i32;
            c.linux = Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources { oom_score_adj: 500, ..Default::default() }),
                security_context: Some(cri::LinuxContainerSecurityContext {
                    run_as_user: Some(cri::Int64Value { value: 1234 }),
                    run_as_group: Some(cri::Int64Value { value: 2345 }),
                    supplemental_groups: vec![3456],
                    ..Default::default()
                }),
            });
        })
        .await;
    // kubelet's Guaranteed value: lower than the pod's, which needs CAP_SYS_RESOURCE
    let guaranteed = e
        .create(&pod, "guaranteed", &["sh", "-c", "echo $(cat /proc/self/oom_score_adj); sleep 1000"], |c| {
            c.linux = Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources { oom_score_adj: -997, ..Default::default() }),
                ..Default::default()
            });
        })
        .await;
    e.start(&quits).await;
    e.start(&guaranteed).await;
    let s = e.wait_state(&quits, cri::ContainerState::ContainerRunning).await;
    assert_eq!(s.stop_signal, cri::Signal::Sigusr1 as i32);
    let user = s.user.and_then(|u| u.linux).expect("user in status");
    assert_eq!((user.uid, user.gid), (1234, 2345));
    assert!(user.supplemental_groups.contains(&3456), "{:?}", user.supplemental_groups);
    assert!(!s.image_id.is_empty() && s.image_id == s.image_ref, "{} vs {}", s.image_id, s.image_ref);
    assert_eq!(s.resources.and_then(|r| r.linux).map(|l| l.oom_score_adj), Some(500));
    assert_eq!(e.status(&guaranteed).await.stop_signal, cri::Signal::Sigterm as i32);

    let log = e.wait_log("signals", "quits", 1).await;
    assert!(log.ends_with(" stdout F 500\n"), "{log}");
    // the pod's own value, and whether it may go lower
    let pid1 = common::pod_pid1(&data, &pod.0);
    let pod_adj = std::fs::read_to_string(format!("/proc/{pid1}/oom_score_adj")).expect("adj").trim().to_string();
    let status = std::fs::read_to_string(format!("/proc/{pid1}/status")).expect("status");
    let cap_eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).expect("CapEff");
    let can_lower = u64::from_str_radix(cap_eff.trim(), 16).expect("hex") & (1 << 24) != 0;
    let want = if can_lower { "-997".to_string() } else { pod_adj };
    let log = e.wait_log("signals", "guaranteed", 1).await;
    assert!(log.ends_with(&format!(" stdout F {want}\n")), "{log}");

    // exit 7 is the USR1 trap; SIGTERM would have been ignored and SIGKILL given 137
    e.rt.stop_container(cri::StopContainerRequest { container_id: quits.clone(), timeout: 10 }).await.expect("stop");
    assert_eq!(e.status(&quits).await.exit_code, 7);
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&data, &[pod.0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn devices_appear_where_asked() {
    let mut e = env().await;
    let pod = e.pod("devices").await;
    let device = |host: &str, path: &str, perms: &str| cri::Device {
        container_path: path.into(),
        host_path: host.into(),
        permissions: perms.into(),
    };
    let script = "head -c 3 /dev/myzero | od -An -tx1; stat -c '%F %t:%T %A' /dev/myzero; \
                  echo x > /opt/mynull && echo wrote; ls /dev/myzero /dev/mynull 2>&1 | sort";
    let id = e
        .create(&pod, "dev", &["sh", "-c", script], |c| {
            c.devices = vec![device("/dev/zero", "/dev/myzero", "r"), device("/dev/null", "/opt/mynull", "rw")];
        })
        .await;
    e.start(&id).await;
    e.wait_state(&id, cri::ContainerState::ContainerExited).await;
    let log = e.wait_log("devices", "dev", 5).await;
    let out: Vec<String> = log.lines().filter_map(|l| l.splitn(4, ' ').nth(3).map(|s| s.trim().to_string())).collect();
    assert_eq!(out[0], "00 00 00", "{log}");
    assert_eq!(out[1], "character special file 1:5 cr--r--r--", "{log}");
    assert_eq!(out[2], "wrote", "{log}");
    // a device at /dev/mynull was not asked for
    assert!(out[3..].iter().any(|l| l == "ls: /dev/mynull: No such file or directory"), "{log}");

    for (bad, why) in [
        (device("/etc/passwd", "/dev/x", "rw"), "not a device"),
        (device("/dev/null", "dev/x", "rw"), "absolute"),
        (device("/dev/null", "/dev/x", "rwx"), "permissions"),
        (device("/nonexistent", "/dev/x", "r"), "nonexistent"),
    ] {
        let err =
            e.rt.create_container(cri::CreateContainerRequest {
                pod_sandbox_id: pod.0.clone(),
                config: Some(cri::ContainerConfig {
                    metadata: Some(cri::ContainerMetadata { name: "baddev".into(), attempt: 0 }),
                    image: Some(cri::ImageSpec { image: e.image.clone(), ..Default::default() }),
                    command: vec!["true".into()],
                    devices: vec![bad],
                    ..Default::default()
                }),
                sandbox_config: Some(pod.1.clone()),
            })
            .await
            .expect_err("bad device");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(why), "{why}: {}", err.message());
    }
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

/// The security context with a PID namespace mode (and a target for TARGET).
fn pid_namespace(mode: cri::NamespaceMode, target: &str) -> cri::LinuxContainerSecurityContext {
    cri::LinuxContainerSecurityContext {
        namespace_options: Some(cri::NamespaceOption {
            pid: mode as i32,
            target_id: target.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A container config's linux section with only this security context.
fn secured(sc: cri::LinuxContainerSecurityContext) -> Option<cri::LinuxContainerConfig> {
    Some(cri::LinuxContainerConfig { security_context: Some(sc), ..Default::default() })
}

/// The content of each CRI log line (after time, stream and tag).
fn log_content(log: &str) -> Vec<String> {
    log.lines().filter_map(|l| l.splitn(4, ' ').nth(3)).map(str::to_string).collect()
}

/// kubelet's default, a PID namespace per container: the app is PID 1 of
/// its own, sees no other process of the pod, keeps kubelet's /proc masks,
/// its capabilities, user and seccomp profile (which still refuses `mount`
/// though appexec needed it); a TARGET container joins it and an exec
/// enters it; exit codes and signals come through appexec unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn a_pid_namespace_per_container_and_targets_joining_it() {
    let mut e = env().await;
    let pod = e.pod("pidns").await;
    let script = "echo pid $$ $HOME; cat /proc/1/comm; grep -l systemd /proc/[0-9]*/comm | wc -l; \
                  stat -c '%F' /proc/keys; stat -f -c %T /sys/firmware; \
                  echo 1 2>&1 > /proc/sys/kernel/ns_last_pid || true; \
                  grep CapBnd /proc/self/status; mount -t tmpfs t /mnt 2>&1 || echo refused; \
                  trap 'exit 0' TERM; echo ready; while true; do sleep 0.05; done";
    // a profile that denies mount, which appexec itself needs first
    let profiles = tempfile::tempdir().expect("profiles");
    let deny_mount = profiles.path().join("deny-mount.json");
    std::fs::write(
        &deny_mount,
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mount"],"action":"SCMP_ACT_ERRNO","errnoRet":1}]}"#,
    )
    .expect("profile");
    let first = e
        .create(&pod, "first", &["sh", "-c", script], |c| {
            let mut sc = pid_namespace(cri::NamespaceMode::Container, "");
            sc.capabilities = Some(cri::Capability {
                add_capabilities: vec!["SYS_ADMIN".into()],
                drop_capabilities: vec!["KILL".into()],
                ..Default::default()
            });
            sc.seccomp = Some(cri::SecurityProfile {
                profile_type: cri::security_profile::ProfileType::Localhost as i32,
                localhost_ref: deny_mount.to_str().expect("utf8").to_string(),
            });
            c.linux = secured(sc);
        })
        .await;
    e.start(&first).await;
    let log = e.wait_log("pidns", "first", 10).await;
    let out = log_content(&log);
    // kubelet's masks: /proc's on the app's own /proc, /sys's too (appexec makes them all)
    assert_eq!(&out[..5], ["pid 1 /root", "sh", "0", "character special file", "tmpfs"], "{log}");
    assert!(out[5].contains("Read-only file system"), "{log}");
    let capbnd = u64::from_str_radix(out[6].split_whitespace().nth(1).expect("mask"), 16).expect("hex");
    assert_eq!(capbnd & (1 << 5), 0, "KILL dropped: {log}");
    assert_ne!(capbnd & (1 << 21), 0, "SYS_ADMIN added: {log}");
    // the profile refuses mount even with SYS_ADMIN, though appexec needed it
    assert!(out[7].contains("permission denied"), "{log}");
    assert_eq!(out[8..], ["refused", "ready"], "{log}");

    // an exec enters the container's PID namespace
    let ran =
        e.rt.exec_sync(cri::ExecSyncRequest {
            container_id: first.clone(),
            cmd: vec!["sh".into(), "-c".into(), "cat /proc/1/comm; grep -c CapBnd /proc/1/status".into()],
            timeout: 10,
        })
        .await
        .expect("ExecSync")
        .into_inner();
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "sh\n1\n");

    // a debug container joins it: the first's shell is its PID 1; its own user, its own exit code
    let debug = e
        .create(
            &pod,
            "debug",
            &["sh", "-c", "cat /proc/1/comm; id -u; echo $HOME; grep CapEff /proc/self/status; exit 7"],
            |c| {
                let mut sc = pid_namespace(cri::NamespaceMode::Target, &first);
                sc.run_as_user = Some(cri::Int64Value { value: 1000 });
                c.linux = secured(sc);
            },
        )
        .await;
    e.start(&debug).await;
    let s = e.wait_state(&debug, cri::ContainerState::ContainerExited).await;
    assert_eq!(s.exit_code, 7);
    let log = e.wait_log("pidns", "debug", 4).await;
    let out = log_content(&log);
    // HOME from the image's /etc/passwd
    assert_eq!(out[..3], ["sh", "1000", "/home/app"], "{log}");
    assert_eq!(out[3].split_whitespace().collect::<Vec<_>>(), ["CapEff:", "0000000000000000"], "{log}");

    // the pod's namespace (CRI POD, shareProcessNamespace): its systemd is PID 1;
    // no standard signal ignored in either way (systemd would ignore SIGPIPE;
    // the pod's systemd leaves 32 and 33, glibc's own, ignored; appexec does not)
    let shared = e
        .create(
            &pod,
            "shared",
            &["grep", "-h", "-e", "^systemd$", "-e", "^SigIgn:", "/proc/1/comm", "/proc/self/status"],
            |c| {
                let sc = pid_namespace(cri::NamespaceMode::Pod, "");
                c.linux = secured(sc);
            },
        )
        .await;
    e.start(&shared).await;
    e.wait_state(&shared, cri::ContainerState::ContainerExited).await;
    let log = e.wait_log("pidns", "shared", 2).await;
    let out = log_content(&log);
    assert_eq!(out[0], "systemd", "{log}");
    let ignored = |line: &str| u64::from_str_radix(line.trim_start_matches("SigIgn:").trim(), 16).expect("hex");
    assert_eq!(ignored(&out[1]) & 0x7fff_ffff, 0, "signals 1-31: {log}");
    let own = e
        .create(&pod, "own", &["grep", "^SigIgn:", "/proc/self/status"], |c| {
            let sc = pid_namespace(cri::NamespaceMode::Container, "");
            c.linux = secured(sc);
        })
        .await;
    e.start(&own).await;
    e.wait_state(&own, cri::ContainerState::ContainerExited).await;
    let log = e.wait_log("pidns", "own", 1).await;
    assert_eq!(ignored(&log_content(&log)[0]), 0, "{log}");

    // SIGTERM reaches a PID 1 that handles it; one that does not is killed at the timeout
    e.rt.stop_container(cri::StopContainerRequest { container_id: first.clone(), timeout: 10 }).await.expect("stop");
    assert_eq!(e.status(&first).await.exit_code, 0);
    let sleeper = e
        .create(&pod, "sleeper", &["sleep", "1000"], |c| {
            let sc = pid_namespace(cri::NamespaceMode::Container, "");
            c.linux = secured(sc);
        })
        .await;
    e.start(&sleeper).await;
    e.wait_state(&sleeper, cri::ContainerState::ContainerRunning).await;
    e.rt.stop_container(cri::StopContainerRequest { container_id: sleeper.clone(), timeout: 1 }).await.expect("stop");
    assert_eq!(e.status(&sleeper).await.exit_code, 128 + 9);

    // an app that cannot be exec'd fails StartContainer, as with runc, its reason in its log
    let broken = e
        .create(&pod, "broken", &["/etc/passwd"], |c| {
            let sc = pid_namespace(cri::NamespaceMode::Container, "");
            c.linux = secured(sc);
        })
        .await;
    let err =
        e.rt.start_container(cri::StartContainerRequest { container_id: broken.clone() })
            .await
            .expect_err("not exec'd");
    assert!(err.message().contains("Exited(127)"), "{err:?}");
    assert!(e.wait_log("pidns", "broken", 1).await.contains("Permission denied"));
    // and it ended there, as containerd reports a start error
    let s = e.wait_state(&broken, cri::ContainerState::ContainerExited).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (127, "StartError"));
    assert!(s.message.contains("Exited(127)"), "{s:?}");

    // a target must be a container of the same pod, and the node's PID
    // namespace is for the containers of a host-PID pod only
    for (sc, code) in [
        (pid_namespace(cri::NamespaceMode::Target, "nope:0-x"), tonic::Code::NotFound),
        (pid_namespace(cri::NamespaceMode::Node, ""), tonic::Code::InvalidArgument),
    ] {
        let mut config = common::container_config("bad", &e.image, &["true"]);
        config.linux = secured(sc);
        let err =
            e.rt.create_container(cri::CreateContainerRequest {
                pod_sandbox_id: pod.0.clone(),
                config: Some(config),
                sandbox_config: Some(pod.1.clone()),
            })
            .await
            .expect_err("refused");
        assert_eq!(err.code(), code, "{err:?}");
    }
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

in_both_pid_namespaces!(
    added_and_privileged_capabilities_work,
    added_and_privileged_capabilities_work_pod_pid_namespace,
    added_and_privileged_capabilities
);

/// The bounding set of a process, from its status.
fn cap_bnd(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .expect("CapBnd")
}

in_the_node_pid_namespace!(
    added_and_privileged_capabilities_work_node_pid_namespace,
    added_and_privileged_capabilities
);

/// A capability a container adds is one it can use (NET_ADMIN: a bridge in
/// the pod's network), and one it did not add is not; a privileged
/// container holds everything the node has, and the node's devices.
async fn added_and_privileged_capabilities(pid: cri::NamespaceMode) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut e = env_on_network(pid, dir.path()).await;
    let pod = e.pod("caps-added").await;
    let sleep = ["sleep", "3600"];
    let added = e
        .create(&pod, "netadmin", &sleep, |c| {
            c.linux = secured(cri::LinuxContainerSecurityContext {
                capabilities: Some(cri::Capability {
                    add_capabilities: vec!["NET_ADMIN".into()],
                    ..Default::default()
                }),
                ..Default::default()
            });
        })
        .await;
    let plain = e.create(&pod, "plain", &sleep, |_| {}).await;
    let privileged = e
        .create(&pod, "privileged", &sleep, |c| {
            c.linux = secured(cri::LinuxContainerSecurityContext { privileged: true, ..Default::default() });
        })
        .await;
    for id in [&added, &plain, &privileged] {
        e.start(id).await;
    }
    let ok = common::exec_sync(&mut e.rt, &added, &["brctl", "addbr", "added0"]).await;
    assert_eq!(ok.exit_code, 0, "NET_ADMIN added: {}", String::from_utf8_lossy(&ok.stderr));
    let denied = common::exec_sync(&mut e.rt, &plain, &["brctl", "addbr", "plain0"]).await;
    assert_ne!(denied.exit_code, 0, "without NET_ADMIN");
    assert!(String::from_utf8_lossy(&denied.stderr).contains("Operation not permitted"), "{denied:?}");
    let ok = common::exec_sync(&mut e.rt, &privileged, &["brctl", "addbr", "priv0"]).await;
    assert_eq!(ok.exit_code, 0, "privileged: {}", String::from_utf8_lossy(&ok.stderr));
    let links = common::exec_sync(&mut e.rt, &plain, &["sh", "-c", "ip link show added0 && ip link show priv0"]).await;
    assert_eq!(links.exit_code, 0, "both bridges are in the pod's network: {links:?}");
    assert!(!Path::new("/sys/class/net/added0").exists(), "not on the node");

    // each container's own bounding set: exactly what it was given (capped by
    // what the node has), not the pod's
    let node = cap_bnd(&std::fs::read_to_string("/proc/self/status").expect("status"));
    let want = |add: &[&str]| {
        rktlet::stage1::caps::bounding_set(&add.iter().map(|c| c.to_string()).collect::<Vec<_>>(), &[]).expect("set")
            & node
    };
    for (id, expected) in [(&added, want(&["NET_ADMIN"])), (&plain, want(&[])), (&privileged, node)] {
        let out = common::exec_sync(&mut e.rt, id, &["cat", "/proc/self/status"]).await;
        assert_eq!(cap_bnd(&String::from_utf8_lossy(&out.stdout)), expected, "{id}");
    }
    // the node's devices, in the privileged container only: one beyond the few every pod's
    // /dev has (a node container has no other)
    let device = ["/dev/loop-control", "/dev/kvm", "/dev/autofs", "/dev/cpu_dma_latency", "/dev/fuse"]
        .into_iter()
        .find(|d| Path::new(d).exists());
    if let Some(device) = device {
        let seen = common::exec_sync(&mut e.rt, &privileged, &["stat", "-c", "%F", device]).await;
        assert_eq!(String::from_utf8_lossy(&seen.stdout).trim(), "character special file", "{seen:?}");
        // (an unprivileged one may see the empty mount point systemd left in the pod's /dev: no device)
        let unseen = common::exec_sync(&mut e.rt, &plain, &["stat", "-c", "%F", device]).await;
        assert_ne!(String::from_utf8_lossy(&unseen.stdout).trim(), "character special file", "{device}: {unseen:?}");
    } else {
        common::skipped(
            &format!("added_and_privileged_capabilities ({pid:?}): node devices"),
            "the node has no device beyond a pod's own /dev (loop-control, kvm, autofs, cpu_dma_latency, fuse)",
        );
    }
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

/// `id -G` shows the groups the image's /etc/group lists the user in, by
/// name or by uid, and the SupplementalGroups of the security context.
#[tokio::test(flavor = "multi_thread")]
async fn image_groups_and_supplemental_groups() {
    let mut e = env().await;
    e.image = groups_image(&e.d).await;
    let pod = e.pod("groups").await;
    let by_uid = e
        .create(&pod, "byuid", &["sh", "-c", "id -G"], |c| {
            c.linux = secured(cri::LinuxContainerSecurityContext {
                run_as_user: Some(cri::Int64Value { value: 1000 }),
                supplemental_groups: vec![1234],
                ..Default::default()
            });
        })
        .await;
    let root = e.create(&pod, "root", &["sh", "-c", "id -G"], |_| {}).await;
    for id in [&by_uid, &root] {
        e.start(id).await;
        e.wait_state(id, cri::ContainerState::ContainerExited).await;
    }
    assert_eq!(log_content(&e.wait_log("groups", "byuid", 1).await), ["1000 1234 50000"]);
    assert_eq!(log_content(&e.wait_log("groups", "root", 1).await), ["0 10"]);
    // a group without a user is refused, and leaves no container behind
    let err =
        e.rt.create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.0.clone(),
            config: Some(cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata { name: "grouponly".into(), attempt: 0 }),
                image: Some(cri::ImageSpec { image: e.image.clone(), ..Default::default() }),
                command: vec!["id".into()],
                linux: secured(cri::LinuxContainerSecurityContext {
                    run_as_group: Some(cri::Int64Value { value: 50000 }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            sandbox_config: Some(pod.1.clone()),
        })
        .await
        .expect_err("run_as_group alone");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    let listed =
        e.rt.list_containers(cri::ListContainersRequest::default()).await.expect("list").into_inner().containers;
    assert_eq!(listed.len(), 2, "{listed:?}");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

/// An image of the node's static busybox whose `user1` (uid 1000, primary
/// group 1000) is a member of `group1` (50000) in its /etc/group, and root
/// of `wheel` (10); pushed to the test registry and pulled.
async fn groups_image(d: &common::Daemon) -> String {
    use common::registry::{raw_tar, registry};
    use tar::EntryType as T;
    let busybox = std::fs::read("/bin/busybox").expect("the node's static busybox");
    let layer = raw_tar(&[
        ("bin/", T::Directory, b"", ""),
        ("etc/", T::Directory, b"", ""),
        ("bin/busybox", T::Regular, &busybox, ""),
        ("bin/sh", T::Symlink, b"", "busybox"),
        ("bin/id", T::Symlink, b"", "busybox"),
        ("bin/grep", T::Symlink, b"", "busybox"),
        ("bin/sleep", T::Symlink, b"", "busybox"),
        ("etc/passwd", T::Regular, b"root:x:0:0::/:/bin/sh\nuser1:x:1000:1000::/:/bin/sh\n", ""),
        ("etc/group", T::Regular, b"root:x:0:\nwheel:x:10:root\nuser1:x:1000:\ngroup1:x:50000:user1\n", ""),
    ]);
    // the layer's files are 0644: the test's busybox must be executable
    let layer = {
        let mut a = tar::Archive::new(&layer[..]);
        let mut b = tar::Builder::new(Vec::new());
        for entry in a.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            let mut h = entry.header().clone();
            if entry.path().expect("path").ends_with("busybox") {
                h.set_mode(0o755);
                h.set_cksum();
            }
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut data).expect("read");
            b.append(&h, &data[..]).expect("append");
        }
        b.into_inner().expect("tar")
    };
    let reg = registry();
    reg.push("rktlet-test/groups", &[layer]).await;
    common::pull(d, &format!("{}/rktlet-test/groups:latest", reg.main)).await
}

in_both_pid_namespaces!(
    supplemental_groups_policy_merge_and_strict,
    supplemental_groups_policy_merge_and_strict_pod_pid_namespace,
    supplemental_groups_policy
);

in_the_node_pid_namespace!(supplemental_groups_policy_merge_and_strict_node_pid_namespace, supplemental_groups_policy);

/// SupplementalGroupsPolicy as containerd applies it, seen by the app's
/// first process (`id -G`, the kernel's `Groups:`), by an exec, and in
/// ContainerStatus' user (the primary gid among the groups): Merge (the
/// default) adds the groups the image's /etc/group gives the user, Strict
/// keeps only the primary gid and the ones asked for. Runtime announces it.
async fn supplemental_groups_policy(pid: cri::NamespaceMode) {
    let mut e = env_with_pid(pid).await;
    let features = e.rt.status(cri::StatusRequest { verbose: false }).await.expect("Status").into_inner().features;
    assert_eq!(features.map(|f| f.supplemental_groups_policy), Some(true));
    e.image = groups_image(&e.d).await;
    let pod = e.pod("policy").await;
    let script = "id -G; grep ^Groups: /proc/self/status; exec sleep 1000";
    // (name, run_as_group, policy) -> (gid, groups)
    type Case = (&'static str, Option<i64>, cri::SupplementalGroupsPolicy, u32, &'static [i64]);
    let cases: [Case; 4] = [
        ("merge", None, cri::SupplementalGroupsPolicy::Merge, 1000, &[1000, 1234, 50000]),
        ("strict", None, cri::SupplementalGroupsPolicy::Strict, 1000, &[1000, 1234]),
        ("mergegroup", Some(3000), cri::SupplementalGroupsPolicy::Merge, 3000, &[1234, 3000, 50000]),
        ("strictgroup", Some(3000), cri::SupplementalGroupsPolicy::Strict, 3000, &[1234, 3000]),
    ];
    let mut ids = Vec::new();
    for (name, group, policy, _, _) in cases {
        let id = e
            .create(&pod, name, &["sh", "-c", script], |c| {
                c.linux = secured(cri::LinuxContainerSecurityContext {
                    run_as_user: Some(cri::Int64Value { value: 1000 }),
                    run_as_group: group.map(|value| cri::Int64Value { value }),
                    supplemental_groups: vec![1234],
                    supplemental_groups_policy: policy as i32,
                    ..Default::default()
                });
            })
            .await;
        e.start(&id).await;
        ids.push(id);
    }
    for ((name, _, _, gid, groups), id) in cases.iter().zip(&ids) {
        let s = e.wait_state(id, cri::ContainerState::ContainerRunning).await;
        let user = s.user.and_then(|u| u.linux).expect("user in status");
        assert_eq!(
            (user.uid, user.gid, user.supplemental_groups.as_slice()),
            (1000, i64::from(*gid), *groups),
            "{name}"
        );
        // `id -G`: the gid first, then the others
        let rest: Vec<String> = groups.iter().filter(|g| **g != i64::from(*gid)).map(|g| g.to_string()).collect();
        let id_g = std::iter::once(gid.to_string()).chain(rest).collect::<Vec<_>>().join(" ");
        let listed = groups.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(" ");
        let log = log_content(&e.wait_log("policy", name, 2).await);
        assert_eq!(log, [id_g.clone(), format!("Groups:\t{listed} ")], "{name}: first process");
        let out = common::exec_sync(&mut e.rt, id, &["id", "-G"]).await;
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), id_g, "{name}: exec");
        let out = common::exec_sync(&mut e.rt, id, &["grep", "^Groups:", "/proc/self/status"]).await;
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("Groups:\t{listed} \n"), "{name}: exec");
    }
    // an unknown policy is refused, and leaves no container behind
    let err = e
        .try_create(&pod, "badpolicy", &["id"], |c| {
            c.linux = secured(cri::LinuxContainerSecurityContext {
                run_as_user: Some(cri::Int64Value { value: 1000 }),
                supplemental_groups_policy: 7,
                ..Default::default()
            });
        })
        .await
        .expect_err("unknown policy");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("supplemental_groups_policy"), "{err:?}");
    let listed =
        e.rt.list_containers(cri::ListContainersRequest::default()).await.expect("list").into_inner().containers;
    assert_eq!(listed.len(), cases.len(), "{listed:?}");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

in_both_pid_namespaces!(
    mount_propagation_is_reported_and_works,
    mount_propagation_is_reported_and_works_pod_pid_namespace,
    mount_propagation
);

in_the_node_pid_namespace!(mount_propagation_is_reported_and_works_node_pid_namespace, mount_propagation);

/// Host paths bound with each CRI propagation: ContainerStatus reports
/// each mount as asked; a mount made on the node below an rslave or rshared
/// volume after the start appears in the container, one below a private
/// volume does not; a mount the container makes below its rshared volume
/// appears on the node, one below rslave does not.
async fn mount_propagation(pid: cri::NamespaceMode) {
    use nix::mount::{MntFlags, MsFlags, mount, umount2};
    let mut e = env_with_pid(pid).await;
    let host = tempfile::tempdir().expect("host dir");
    let kinds = [
        ("private", cri::MountPropagation::PropagationPrivate),
        ("slave", cri::MountPropagation::PropagationHostToContainer),
        ("shared", cri::MountPropagation::PropagationBidirectional),
    ];
    let flag_dir = host.path().join("flag");
    std::fs::create_dir_all(&flag_dir).expect("flag dir");
    std::fs::write(flag_dir.join("flagFile"), b"").expect("flag");
    // each volume is a shared mount on the node, as kubelet makes its pod dirs
    let mut sources = Vec::new();
    for (name, _) in kinds {
        let src = host.path().join(name);
        std::fs::create_dir_all(src.join("from-node")).expect("mkdir");
        std::fs::create_dir_all(src.join("from-container")).expect("mkdir");
        mount(Some(&src), &src, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>).expect("bind");
        mount(None::<&str>, &src, None::<&str>, MsFlags::MS_SHARED | MsFlags::MS_REC, None::<&str>).expect("rshared");
        sources.push(src);
    }
    let pod = e.pod("propagation").await;
    let ctr = e
        .create(&pod, "prop", &["sleep", "1000"], |c| {
            c.linux = Some(cri::LinuxContainerConfig {
                security_context: Some(cri::LinuxContainerSecurityContext { privileged: true, ..Default::default() }),
                ..Default::default()
            });
            c.mounts = kinds
                .iter()
                .zip(&sources)
                .map(|((name, p), src)| cri::Mount {
                    container_path: format!("/vol/{name}"),
                    host_path: src.display().to_string(),
                    propagation: *p as i32,
                    selinux_relabel: *name == "slave",
                    ..Default::default()
                })
                .collect();
        })
        .await;
    let reported = e.status(&ctr).await.mounts;
    let want: Vec<(String, String, bool, i32, bool)> = kinds
        .iter()
        .zip(&sources)
        .map(|((name, p), src)| (format!("/vol/{name}"), src.display().to_string(), false, *p as i32, *name == "slave"))
        .collect();
    let got: Vec<(String, String, bool, i32, bool)> = reported
        .iter()
        .map(|m| (m.container_path.clone(), m.host_path.clone(), m.readonly, m.propagation, m.selinux_relabel))
        .collect();
    assert_eq!(got, want, "mounts as asked");
    e.start(&ctr).await;

    for src in &sources {
        mount(Some(&flag_dir), &src.join("from-node"), None::<&str>, MsFlags::MS_BIND, None::<&str>)
            .expect("node mount");
    }
    let mut in_container = Vec::new();
    for (name, _) in kinds {
        let out = common::exec_sync(&mut e.rt, &ctr, &["ls", "-A", &format!("/vol/{name}/from-node")]).await;
        in_container.push(String::from_utf8_lossy(&out.stdout).trim().to_string());
        let bind = format!("mount --bind /etc /vol/{name}/from-container");
        let out = common::exec_sync(&mut e.rt, &ctr, &["sh", "-c", &bind]).await;
        assert_eq!(out.exit_code, 0, "{name}: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(in_container, ["", "flagFile", "flagFile"], "node to container: rslave and rshared only");
    let on_node: Vec<bool> = sources
        .iter()
        .map(|src| std::fs::read_dir(src.join("from-container")).map(|d| d.count() > 0).unwrap_or(false))
        .collect();
    assert_eq!(on_node, [false, false, true], "container to node: rshared only");

    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove");
    for src in &sources {
        let _ = umount2(&src.join("from-container"), MntFlags::MNT_DETACH);
        let _ = umount2(&src.join("from-node"), MntFlags::MNT_DETACH);
        umount2(src, MntFlags::MNT_DETACH).expect("umount");
    }
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

in_both_pid_namespaces!(
    recursive_read_only_volumes,
    recursive_read_only_volumes_pod_pid_namespace,
    read_only_submounts
);

in_the_node_pid_namespace!(recursive_read_only_volumes_node_pid_namespace, read_only_submounts);

/// A host directory with a tmpfs mounted inside it, as a volume: writable
/// through and through, read-only, and recursively read-only. A read-only
/// volume is read-only below too (rktlet makes its tree read-only as a
/// whole at CreateContainer), which `recursive_read_only` asks for
/// explicitly; ContainerStatus reports each mount as asked. Runtime
/// announces the feature (this kernel has mount_setattr). Asking for it
/// without `readonly` or with a propagation other than private is refused
/// and leaves no container behind.
async fn read_only_submounts(pid: cri::NamespaceMode) {
    use nix::mount::{MntFlags, MsFlags, mount, umount2};
    let mut e = env_with_pid(pid).await;
    let status = e.rt.status(cri::StatusRequest { verbose: false }).await.expect("Status").into_inner();
    let features: Vec<_> =
        status.runtime_handlers.iter().map(|h| h.features.map(|f| f.recursive_read_only_mounts)).collect();
    assert_eq!(features, [Some(true)], "{status:?}");
    let host = tempfile::tempdir().expect("host dir");
    let sub = host.path().join("sub");
    std::fs::create_dir_all(&sub).expect("sub");
    mount(Some("tmpfs"), &sub, Some("tmpfs"), MsFlags::empty(), Some("size=1m")).expect("tmpfs");
    let volume = |readonly: bool, recursive_read_only: bool| cri::Mount {
        container_path: "/vol".into(),
        host_path: host.path().display().to_string(),
        readonly,
        recursive_read_only,
        ..Default::default()
    };
    let pod = e.pod("rro").await;
    // (name, readonly, recursive_read_only) -> (the top writable, the submount writable)
    let cases = [
        ("rw", false, false, true, true),
        // `readonly` alone: the volume's own mount, not the mounts below it (the CRI, critest v1.36)
        ("ro", true, false, false, true),
        ("rro", true, true, false, false),
        ("rwpath", false, false, false, false),
    ];
    let mut ids = Vec::new();
    for (name, ro, rro, _, _) in cases {
        let id = e
            .create(&pod, name, &["sleep", "1000"], |c| {
                c.mounts = vec![volume(ro, rro)];
                // a writable volume made read-only as a path: systemd's
                // BindReadOnlyPaths= in the pod's PID namespace, appexec's
                // recursive mount_setattr in a namespace of its own
                if name == "rwpath" {
                    c.linux = secured(cri::LinuxContainerSecurityContext {
                        readonly_paths: vec!["/vol".into()],
                        ..Default::default()
                    });
                }
            })
            .await;
        let m = e.status(&id).await.mounts;
        let got: Vec<_> = m.iter().map(|m| (m.container_path.as_str(), m.readonly, m.recursive_read_only)).collect();
        assert_eq!(got, [("/vol", ro, rro)], "{name}: reported as asked");
        e.start(&id).await;
        ids.push(id);
    }
    for ((name, _, _, top, below), id) in cases.iter().zip(&ids) {
        for (path, writable) in [(format!("/vol/top-{name}"), top), (format!("/vol/sub/below-{name}"), below)] {
            let out = common::exec_sync(&mut e.rt, id, &["touch", &path]).await;
            let err = String::from_utf8_lossy(&out.stderr);
            if *writable {
                assert_eq!((out.exit_code, err.as_ref()), (0, ""), "{name}: {path} writable");
            } else {
                assert_ne!(out.exit_code, 0, "{name}: {path} read-only");
                assert!(err.contains("Read-only file system"), "{name}: {path}: {err}");
            }
        }
    }
    assert!(host.path().join("top-rw").exists() && sub.join("below-rw").exists());
    // refused: without readonly, or with mounts propagating from the node
    let slave =
        cri::Mount { propagation: cri::MountPropagation::PropagationHostToContainer as i32, ..volume(true, true) };
    for (name, m, says) in [("notro", volume(false, true), "readonly"), ("slave", slave, "PROPAGATION_PRIVATE")] {
        let err = e.try_create(&pod, name, &["true"], |c| c.mounts = vec![m]).await.expect_err(name);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{name}: {err:?}");
        assert!(err.message().contains("recursive_read_only") && err.message().contains(says), "{name}: {err:?}");
    }
    let listed =
        e.rt.list_containers(cri::ListContainersRequest::default()).await.expect("list").into_inner().containers;
    assert_eq!(listed.len(), cases.len(), "{listed:?}");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    umount2(&sub, MntFlags::MNT_DETACH).expect("umount");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

/// CRI fields rktlet does not implement are refused naming the field, or
/// ignored where containerd ignores them (the host lacks the LSM): CDI
/// devices, AppArmor profiles, SELinux labels. Nothing is left of a refusal.
#[tokio::test(flavor = "multi_thread")]
async fn unsupported_security_fields_are_refused_or_ignored_as_containerd_does() {
    let mut e = env().await;
    let pod = e.pod("lsm").await;
    let host = rktlet::stage1::lsm::Lsms::detect();
    let refused = |r: Result<String, tonic::Status>, field: &str| {
        let err = r.expect_err(field);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(field), "{field}: {err:?}");
    };
    let r = e
        .try_create(&pod, "cdi", &["true"], |c| {
            c.cdi_devices = vec![cri::CdiDevice { name: "vendor.com/gpu=0".into() }];
        })
        .await;
    refused(r, "config.CDI_devices");
    let profile = |t: cri::security_profile::ProfileType, name: &str| cri::SecurityProfile {
        profile_type: t as i32,
        localhost_ref: name.into(),
    };
    use cri::security_profile::ProfileType;
    let with_apparmor = |p: cri::SecurityProfile| {
        move |c: &mut cri::ContainerConfig| {
            c.linux.get_or_insert_default().security_context.get_or_insert_default().apparmor = Some(p);
        }
    };
    let r = e.try_create(&pod, "aa-local", &["true"], with_apparmor(profile(ProfileType::Localhost, "mine"))).await;
    refused(r, "config.linux.security_context.apparmor");
    let r = e.try_create(&pod, "aa-default", &["true"], with_apparmor(profile(ProfileType::RuntimeDefault, ""))).await;
    // applied where the host has AppArmor (tests/apparmor.rs), ignored where not, as containerd does
    r.expect("RuntimeDefault AppArmor");
    e.try_create(&pod, "aa-unconfined", &["true"], with_apparmor(profile(ProfileType::Unconfined, "")))
        .await
        .expect("Unconfined AppArmor");
    let r = e
        .try_create(&pod, "labels", &["true"], |c| {
            c.linux.get_or_insert_default().security_context.get_or_insert_default().selinux_options =
                Some(cri::SeLinuxOption { r#type: "container_t".into(), ..Default::default() });
        })
        .await;
    if host.selinux {
        refused(r, "config.linux.security_context.selinux_options");
    } else {
        r.expect("SELinux labels are ignored on a host without SELinux, as containerd ignores them");
    }
    // the refused ones left no container behind
    let listed = e.rt.list_containers(cri::ListContainersRequest::default()).await.expect("list").into_inner();
    let names: Vec<String> =
        listed.containers.iter().filter_map(|c| c.metadata.as_ref().map(|m| m.name.clone())).collect();
    assert!(!names.iter().any(|n| n == "cdi" || n == "aa-local"), "{names:?}");
    // a pod asking for an AppArmor profile it cannot have is refused before it is made
    let mut config = host_network(pod_config("lsm-pod", &[]));
    config.linux.get_or_insert_default().security_context.get_or_insert_default().apparmor =
        Some(profile(ProfileType::Localhost, "mine"));
    let before = e.rt.list_pod_sandbox(cri::ListPodSandboxRequest::default()).await.expect("list").into_inner();
    let err =
        e.rt.run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() })
            .await
            .expect_err("Localhost AppArmor for the pod");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("config.linux.security_context.apparmor"), "{err:?}");
    let after = e.rt.list_pod_sandbox(cri::ListPodSandboxRequest::default()).await.expect("list").into_inner();
    assert_eq!(before.items.len(), after.items.len());
}

in_both_pid_namespaces!(
    runtime_default_refuses_user_namespaces,
    runtime_default_refuses_user_namespaces_pod_pid_namespace,
    user_namespaces
);

in_the_node_pid_namespace!(runtime_default_refuses_user_namespaces_node_pid_namespace, user_namespaces);

/// RuntimeDefault without SYS_ADMIN refuses a user namespace however it is
/// asked for, as containerd's profile does: clone with CLONE_NEWUSER and
/// unshare fail with EPERM, clone3 with ENOSYS (its flags are behind a
/// pointer: libc falls back to clone); forks and threads still work. The
/// same for a command exec'd into the container. With SYS_ADMIN the
/// profile lets all of them through.
async fn user_namespaces(pid: cri::NamespaceMode) {
    let mut e = env_with_pid(pid).await;
    let pod = e.pod("userns").await;
    let probe = common::static_program("nsprobe");
    let probe_dir = probe.path().display().to_string();
    let confined = |add: &[&str]| {
        let add: Vec<String> = add.iter().map(|c| c.to_string()).collect();
        let probe_dir = probe_dir.clone();
        move |c: &mut cri::ContainerConfig| {
            c.mounts = vec![cri::Mount {
                container_path: "/probe".into(),
                host_path: probe_dir,
                readonly: true,
                ..Default::default()
            }];
            c.linux = secured(cri::LinuxContainerSecurityContext {
                seccomp: Some(cri::SecurityProfile {
                    profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
                    localhost_ref: String::new(),
                }),
                capabilities: Some(cri::Capability { add_capabilities: add, ..Default::default() }),
                ..Default::default()
            });
        }
    };
    let refused = "clone-userns=EPERM clone3-userns=ENOSYS clone3=ENOSYS unshare-userns=EPERM fork=ok thread=ok";
    let script = "/probe/nsprobe; exec sleep 1000";
    let id = e.create(&pod, "plain", &["sh", "-c", script], confined(&[])).await;
    e.start(&id).await;
    let log = e.wait_log("userns", "plain", 1).await;
    assert_eq!(log_content(&log), [refused], "the container's process: {log}");
    let out = common::exec_sync(&mut e.rt, &id, &["/probe/nsprobe"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), refused, "an exec: {out:?}");
    if pid == cri::NamespaceMode::Container {
        // a debug container joining it (appexec's setns of a PID namespace is let through)
        let joined = e
            .create(&pod, "joined", &["/probe/nsprobe"], |c| {
                confined(&[])(c);
                let sc = c.linux.as_mut().and_then(|l| l.security_context.as_mut()).expect("security context");
                sc.namespace_options = Some(cri::NamespaceOption {
                    pid: cri::NamespaceMode::Target as i32,
                    target_id: id.clone(),
                    ..Default::default()
                });
            })
            .await;
        e.start(&joined).await;
        let log = e.wait_log("userns", "joined", 1).await;
        assert_eq!(log_content(&log), [refused], "a container joining it: {log}");
    }

    let admin = e.create(&pod, "admin", &["sh", "-c", script], confined(&["SYS_ADMIN"])).await;
    e.start(&admin).await;
    let log = e.wait_log("userns", "admin", 1).await;
    let allowed = "clone-userns=ok clone3-userns=ok clone3=ok unshare-userns=ok fork=ok thread=ok";
    assert_eq!(log_content(&log), [allowed], "with SYS_ADMIN: {log}");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

in_both_pid_namespaces!(tun_only_when_asked_for, tun_only_when_asked_for_pod_pid_namespace, tun_device);

/// No /dev/net/tun in a container that did not ask for it, as with
/// containerd (systemd-nspawn makes one in every pod's /dev); a container
/// that asks for it (CRI devices) gets it, and a privileged one has the
/// node's.
async fn tun_device(pid: cri::NamespaceMode) {
    const TEST: &str = "tun_only_when_asked_for";
    if !Path::new("/dev/net/tun").exists() {
        common::skipped(TEST, "the node has no /dev/net/tun");
        return;
    }
    let mut e = env_with_pid(pid).await;
    let pod = e.pod("tun").await;
    // EBADFD: opened (a tun descriptor is bad until TUNSETIFF)
    let script = "stat -c '%F %t:%T' /dev/net/tun 2>&1 || true; cat /dev/net/tun 2>&1; ls /dev/net 2>&1 | wc -l";
    let id = e.create(&pod, "plain", &["sh", "-c", &format!("{script}; exec sleep 1000")], |_| {}).await;
    e.start(&id).await;
    let log = e.wait_log("tun", "plain", 3).await;
    let out = log_content(&log);
    assert!(out.len() == 3 && out[..2].iter().all(|l| l.contains("No such file")), "not asked for: {log}");
    let ex = common::exec_sync(&mut e.rt, &id, &["sh", "-c", script]).await;
    assert!(String::from_utf8_lossy(&ex.stdout).contains("No such file"), "an exec: {ex:?}");

    let asked = e
        .create(&pod, "asked", &["sh", "-c", script], |c| {
            c.devices = vec![cri::Device {
                container_path: "/dev/net/tun".into(),
                host_path: "/dev/net/tun".into(),
                permissions: "rw".into(),
            }];
        })
        .await;
    e.start(&asked).await;
    e.wait_state(&asked, cri::ContainerState::ContainerExited).await;
    let log = e.wait_log("tun", "asked", 3).await;
    let out = log_content(&log);
    assert_eq!(out[..2], ["character special file a:c8", "cat: read error: File descriptor in bad state"], "{log}");

    let privileged = e
        .create(&pod, "privileged", &["sh", "-c", script], |c| {
            c.linux = secured(cri::LinuxContainerSecurityContext { privileged: true, ..Default::default() });
        })
        .await;
    e.start(&privileged).await;
    e.wait_state(&privileged, cri::ContainerState::ContainerExited).await;
    let log = e.wait_log("tun", "privileged", 3).await;
    assert_eq!(
        log_content(&log)[..2],
        ["character special file a:c8", "cat: read error: File descriptor in bad state"],
        "{log}"
    );
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

in_both_pid_namespaces!(
    cgroups_are_read_only_unless_privileged,
    cgroups_are_read_only_unless_privileged_pod_pid_namespace,
    cgroup_fs
);

in_the_node_pid_namespace!(cgroups_are_read_only_unless_privileged_node_pid_namespace, cgroup_fs);

/// A container that is not privileged cannot write its cgroup files (raise
/// its own limits, move or kill other apps' processes): /sys/fs/cgroup is
/// read-only in it and in a command exec'd into it, as containerd mounts
/// it; a privileged container's is writable.
async fn cgroup_fs(pid: cri::NamespaceMode) {
    let mut e = env_with_pid(pid).await;
    let pod = e.pod("cgroupfs").await;
    // the options of the mount on top, then a write to the app's own cgroup
    // (its memory cgroup at /sys/fs/cgroup/memory on v1, /sys/fs/cgroup on v2)
    let script = "grep ' /sys/fs/cgroup ' /proc/self/mountinfo | tail -n 1 | cut -d' ' -f6 | cut -d, -f1; \
                  cg=/sys/fs/cgroup; [ -d $cg/memory ] && cg=$cg/memory; \
                  echo $$ 2>&1 > $cg/cgroup.procs && echo wrote; true";
    // (appexec parks the v1 hierarchies on the pod's /tmp while it copies
    // the app's cgroups out of them: that stays behind with the pod's mounts)
    // nor do the pod's own mounts of the v1 hierarchies it copies them from
    let parked = "grep -c ' /tmp ' /proc/self/mountinfo; grep -c ' /run/.rkt-cgroup/' /proc/self/mountinfo; true";
    let id = e.create(&pod, "plain", &["sh", "-c", &format!("{script}; {parked}; exec sleep 1000")], |_| {}).await;
    e.start(&id).await;
    let log = e.wait_log("cgroupfs", "plain", 4).await;
    let out = log_content(&log);
    assert_eq!(out.first().map(String::as_str), Some("ro"), "{log}");
    assert!(out.get(1).is_some_and(|l| l.contains("Read-only file system")), "{log}");
    assert_eq!(out.get(2).map(String::as_str), Some("0"), "a mount at /tmp: {log}");
    assert_eq!(out.get(3).map(String::as_str), Some("0"), "the pod's cgroup v1 hierarchies: {log}");
    // the pod holds one mount of each v1 hierarchy of the node (none on
    // pure v2), read-only, rooted at its cgroup namespace's root (an
    // ancestor of its PID 1's cgroup, or that cgroup), where appexec copies
    // its apps' from
    let pid1 = common::pod_pid1(&e.d.dir.path().join("data"), &pod.0);
    let mounts = std::fs::read_to_string(format!("/proc/{pid1}/mountinfo")).expect("the pod's mountinfo");
    let views: Vec<&str> = mounts.lines().filter(|l| l.contains(" /run/.rkt-cgroup/")).collect();
    let v1 = std::fs::read_to_string("/proc/self/cgroup")
        .expect("cgroups")
        .lines()
        .filter(|l| !l.starts_with("0::"))
        .count();
    assert_eq!(views.len(), v1, "{views:?}");
    // (roots and paths as this process's cgroup namespace, the node's, names them)
    let pid1_cgroups = std::fs::read_to_string(format!("/proc/{pid1}/cgroup")).expect("the pod's cgroups");
    let pid1_in = |place: &str| {
        pid1_cgroups.lines().find_map(|l| {
            let (controllers, path) = l.split_once(':')?.1.split_once(':')?;
            (controllers.strip_prefix("name=").unwrap_or(controllers) == place).then(|| path.to_string())
        })
    };
    let rooted = |l: &&str| {
        let fields: Vec<&str> = l.split(' ').collect();
        let place = fields.get(4).and_then(|m| m.strip_prefix("/run/.rkt-cgroup/")).unwrap_or_default();
        let root = fields.get(3).copied().unwrap_or_default();
        pid1_in(place).is_some_and(|p| p == root || p.starts_with(&format!("{}/", root.trim_end_matches('/'))))
    };
    // read-only, and private: an app's copy carries no sharing (CRIU restores none)
    let read_only = |l: &&str| l.split(' ').nth(5).is_some_and(|o| o.split(',').any(|o| o == "ro"));
    let private = |l: &&str| !l.contains(" shared:") && !l.contains(" master:");
    let cgroup = |l: &&str| l.contains(" - cgroup ");
    assert!(views.iter().all(|l| rooted(l) && read_only(l) && private(l) && cgroup(l)), "{views:?}");
    // a start through appexec hears from it through a FIFO, gone once the start returned
    let execd = e.d.dir.path().join("data/pods/run").join(&pod.0).join("stage1/rootfs/rkt/execd");
    let left: Vec<_> =
        std::fs::read_dir(&execd).map(|d| d.flatten().map(|f| f.file_name()).collect()).unwrap_or_default();
    // (there on cgroup v1, where every app is placed in its cgroups by appexec)
    assert!(execd.exists() || !Path::new("/sys/fs/cgroup/memory").exists(), "no FIFO made on cgroup v1");
    assert!(left.is_empty(), "FIFOs left after the start: {left:?}");
    let ex = common::exec_sync(&mut e.rt, &id, &["sh", "-c", &format!("{{ {script}; }} 2>&1")]).await;
    let text = String::from_utf8_lossy(&ex.stdout);
    assert!(text.starts_with("ro\n") && text.contains("Read-only file system"), "an exec: {text}");

    let privileged = e
        .create(
            &pod,
            "privileged",
            // (and its own memory cgroup, where it has one: v1, a copy of the pod's read-only mount)
            &[
                "sh",
                "-c",
                "grep ' /sys/fs/cgroup ' /proc/self/mountinfo | tail -n 1 | cut -d' ' -f6; \
                 m=$(grep ' /sys/fs/cgroup/memory ' /proc/self/mountinfo | tail -n 1 | cut -d' ' -f6); echo ${m:-none}",
            ],
            |c| {
                c.linux = secured(cri::LinuxContainerSecurityContext { privileged: true, ..Default::default() });
            },
        )
        .await;
    e.start(&privileged).await;
    e.wait_state(&privileged, cri::ContainerState::ContainerExited).await;
    let log = e.wait_log("cgroupfs", "privileged", 2).await;
    let out = log_content(&log);
    assert!(out.first().is_some_and(|l| l.starts_with("rw")), "privileged: {log}");
    assert!(out.get(1).is_some_and(|l| !l.starts_with("ro")), "privileged, its memory cgroup: {log}");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

in_both_pid_namespaces!(
    a_container_reads_its_own_limits,
    a_container_reads_its_own_limits_pod_pid_namespace,
    own_limits
);

in_the_node_pid_namespace!(a_container_reads_its_own_limits_node_pid_namespace, own_limits);

/// kubelet's swap checks (and programs that size themselves, as a JVM does)
/// read the container's own limits where runc shows them:
/// `/sys/fs/cgroup/memory/memory.limit_in_bytes` and
/// `memory.memsw.limit_in_bytes` on cgroup v1, `/sys/fs/cgroup/memory.max`
/// and `memory.swap.max` on v2; so does a command exec'd into it. They
/// cannot be written. (Under RuntimeDefault, as kubelet's `SeccompDefault`
/// runs every container.)
async fn own_limits(pid: cri::NamespaceMode) {
    let mut e = env_with_pid(pid).await;
    let pod = e.pod("ownlimits").await;
    let script = own_limits_script();
    let id = e
        .create(&pod, "limited", &["sh", "-c", &format!("{{ {script}; }} 2>&1; exec sleep 1000")], |c| {
            let mut linux = secured(cri::LinuxContainerSecurityContext {
                seccomp: Some(cri::SecurityProfile {
                    profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .unwrap_or_default();
            linux.resources =
                Some(cri::LinuxContainerResources { memory_limit_in_bytes: 64 << 20, ..Default::default() });
            c.linux = Some(linux);
        })
        .await;
    e.start(&id).await;
    let log = e.wait_log("ownlimits", "limited", 3).await;
    let want = [(64u64 << 20).to_string(), "read".to_string(), "not written".to_string()];
    assert_eq!(log_content(&log), want, "{log}");
    let ex = common::exec_sync(&mut e.rt, &id, &["sh", "-c", &format!("{{ {script}; }} 2>&1")]).await;
    assert_eq!(String::from_utf8_lossy(&ex.stdout), format!("{}\n", want.join("\n")), "an exec");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

/// A shell script that prints the memory limit a container reads at its
/// /sys/fs/cgroup (v1 or v2, as the node runs), `read` once it has read its
/// swap limit too, and `not written` when raising its limit fails. A v1
/// kernel without swap accounting (no `memory.memsw.*`) is named by a
/// counted SKIPPED line.
fn own_limits_script() -> &'static str {
    if Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() {
        if !Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists() {
            println!("SKIPPED: memory.memsw.limit_in_bytes: this kernel has no swap accounting (swapaccount=1)");
            return "cat /sys/fs/cgroup/memory/memory.limit_in_bytes && echo read && \
                    { { echo -1 > /sys/fs/cgroup/memory/memory.limit_in_bytes; } 2>/dev/null || echo not written; }";
        }
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes && cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes \
         >/dev/null && echo read && { { echo -1 > /sys/fs/cgroup/memory/memory.limit_in_bytes; } 2>/dev/null || echo not written; }"
    } else {
        "cat /sys/fs/cgroup/memory.max && cat /sys/fs/cgroup/memory.swap.max >/dev/null && echo read && \
         { { echo max > /sys/fs/cgroup/memory.max; } 2>/dev/null || echo not written; }"
    }
}

in_both_pid_namespaces!(exec_takes_the_apps_rlimits, exec_takes_the_apps_rlimits_pod_pid_namespace, exec_rlimits);

in_the_node_pid_namespace!(exec_takes_the_apps_rlimits_node_pid_namespace, exec_rlimits);

/// A command exec'd into a container runs with the resource limits of the
/// container's main process (here lowered by the app itself to a value
/// nothing else has), not with those of the daemon; and the app starts with
/// its unit's limits (a host-PID app too, which the pod's log writer starts).
async fn exec_rlimits(pid: cri::NamespaceMode) {
    let mut e = env_with_pid(pid).await;
    let pod = e.pod("rlimits").await;
    let main = "cat /proc/self/limits > /tmp/initial; ulimit -n 777; ulimit -s 4321; \
                cat /proc/self/limits > /tmp/limits; exec sleep 1000";
    // not root: the daemon copies the limits of a process of another user
    let id = e
        .create(&pod, "limited", &["sh", "-c", main], |c| {
            c.linux = secured(cri::LinuxContainerSecurityContext {
                run_as_user: Some(cri::Int64Value { value: 1000 }),
                ..Default::default()
            });
        })
        .await;
    e.start(&id).await;
    e.wait_state(&id, cri::ContainerState::ContainerRunning).await;
    // once the app has lowered its limits (an exec copies them when it starts)
    common::exec_sync(&mut e.rt, &id, &["sh", "-c", "while [ ! -s /tmp/limits ]; do sleep 0.1; done"]).await;
    let out =
        common::exec_sync(&mut e.rt, &id, &["sh", "-c", "cat /tmp/limits; echo ---; cat /proc/self/limits"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    let (app, exec) = text.split_once("---\n").unwrap_or_else(|| panic!("{out:?}"));
    let open_files = app.lines().find(|l| l.starts_with("Max open files")).unwrap_or_default();
    assert_eq!(open_files.split_whitespace().collect::<Vec<_>>()[3..5], ["777", "777"], "{app}");
    assert_eq!(exec, app, "the exec's limits are the app's");
    if pid != cri::NamespaceMode::Pod {
        // the unit's main process (appexec, the app's parent or its
        // template's) has the limits the pod's systemd gave the unit
        let data = e.d.dir.path().join("data");
        let pid1 = common::pod_pid1(&data, &pod.0);
        let procs = app_cgroup_file(&data, &pod.0, "0-limited", "memory", "cgroup.procs");
        let parent = |p: &str| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok())
        };
        let unit_main = procs.lines().find(|p| parent(p) == Some(pid1)).unwrap_or_else(|| panic!("{procs}"));
        let unit = std::fs::read_to_string(format!("/proc/{unit_main}/limits")).expect("the unit's limits");
        let initial = common::exec_sync(&mut e.rt, &id, &["cat", "/tmp/initial"]).await;
        assert_eq!(String::from_utf8_lossy(&initial.stdout), unit, "the app started with its unit's limits");
    }
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}

/// An image volume (CRI `Mount.image`, kubelet's `image` volume source):
/// the pulled image's files at the mount point, read-only, a sub path of it
/// on its own; the image stays while a container has it; what cannot be
/// mounted is refused with the code a client expects and nothing is left.
#[tokio::test(flavor = "multi_thread")]
async fn image_volumes_are_the_images_files_read_only() {
    use common::registry::{raw_tar, registry};
    use tar::EntryType::{Directory, Regular, Symlink};
    let mut e = env().await;
    let layer = raw_tar(&[
        ("data/", Directory, b"", ""),
        ("data/hello.txt", Regular, b"from an image\n", ""),
        ("data/out", Symlink, b"", "/etc"),
    ]);
    registry().push("volume-data", &[layer]).await;
    let volume_image = common::pull(&e.d, &format!("{}/volume-data:latest", registry().main)).await;
    let mut images = e.d.images().await;
    let pod = e.pod("imagevol").await;
    let mount = |path: &str, sub: &str| cri::Mount {
        container_path: path.into(),
        image: Some(cri::ImageSpec { image: volume_image.clone(), ..Default::default() }),
        image_sub_path: sub.into(),
        // read-only whatever is asked (kubelet asks for it)
        readonly: false,
        ..Default::default()
    };
    let script = "cat /vol/data/hello.txt /sub/hello.txt; touch /vol/x 2>/dev/null && echo writable || echo read-only";
    let reader = e
        .create(&pod, "reader", &["sh", "-c", script], |c| c.mounts = vec![mount("/vol", ""), mount("/sub", "data")])
        .await;
    e.start(&reader).await;
    e.wait_state(&reader, cri::ContainerState::ContainerExited).await;
    let log = e.wait_log("imagevol", "reader", 3).await;
    let lines: Vec<&str> = log.lines().filter_map(|l| l.split_once(" F ").map(|(_, x)| x)).collect();
    assert_eq!(lines, ["from an image", "from an image", "read-only"], "{log}");

    // kept while a container has it, removable once it is gone
    let remove =
        cri::RemoveImageRequest { image: Some(cri::ImageSpec { image: volume_image.clone(), ..Default::default() }) };
    let refused = images.remove_image(remove.clone()).await.expect_err("an image mounted as a volume was removed");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("volume"), "{refused:?}");
    e.rt.remove_container(cri::RemoveContainerRequest { container_id: reader.clone() }).await.expect("remove");

    // refused: a sub path out of the image (by `..` or by a link), a missing
    // one, both a host path and an image, an image that was not pulled
    let missing = format!("{}/volume-data:nosuchtag", registry().main);
    let cases: [(&str, cri::Mount, tonic::Code); 5] = [
        ("dotdot", mount("/v", "data/../.."), tonic::Code::InvalidArgument),
        ("link", mount("/v", "data/out"), tonic::Code::InvalidArgument),
        ("missing", mount("/v", "nothere"), tonic::Code::InvalidArgument),
        ("both", cri::Mount { host_path: "/tmp".into(), ..mount("/v", "") }, tonic::Code::InvalidArgument),
        (
            "unpulled",
            cri::Mount { image: Some(cri::ImageSpec { image: missing, ..Default::default() }), ..mount("/v", "") },
            tonic::Code::NotFound,
        ),
    ];
    for (name, m, code) in cases {
        let err =
            e.try_create(&pod, name, &["true"], |c| c.mounts = vec![m]).await.expect_err(&format!("{name}: created"));
        assert_eq!(err.code(), code, "{name}: {err:?}");
    }
    let listed =
        e.rt.list_containers(cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter { pod_sandbox_id: pod.0.clone(), ..Default::default() }),
        })
        .await
        .expect("list")
        .into_inner()
        .containers;
    assert!(listed.is_empty(), "refused containers were left: {listed:?}");
    images.remove_image(remove).await.expect("the image, no longer mounted, is removed");
    let data = e.d.dir.path().join("data");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&data, &[pod.0]);
}

/// A log the pod's log writer cannot open (its directory replaced by a file
/// after the pod ran) fails StartContainer with the cause before anything
/// of the app runs: the container stays created, and is removed cleanly.
#[tokio::test(flavor = "multi_thread")]
async fn a_log_the_pods_writer_cannot_open_fails_the_start_and_leaves_nothing_running() {
    let mut e = env().await;
    let pod = e.pod("badlog").await;
    let id = e.create(&pod, "c", &["sleep", "4711"], |_| {}).await;
    let dir = e.logs.path().join("badlog");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::write(&dir, b"").expect("a file where the log directory was");
    let err = e.rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect_err("no log");
    assert!(err.message().contains("attaching the log"), "{err:?}");
    let s = e.status(&id).await;
    assert_eq!(s.state, cri::ContainerState::ContainerCreated as i32, "{s:?}");
    assert!(common::processes_mentioning("sleep 4711").is_empty(), "{:?}", common::processes_mentioning("sleep 4711"));
    e.rt.remove_container(cri::RemoveContainerRequest { container_id: id }).await.expect("remove");
    e.rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("stop pod");
    e.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.0.clone() }).await.expect("remove pod");
    assert_no_leaks(&e.d.dir.path().join("data"), &[pod.0]);
}
