//! Real pods under systemd-nspawn, driven through the CRI socket of the real daemon.

mod common;

use common::{Daemon, assert_no_leaks, host_network, pod_config, pod_pid1};
use rktlet::proto::v1 as cri;
use tonic::Code;

async fn run(
    rt: &mut rktlet::proto::v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    config: cri::PodSandboxConfig,
) -> String {
    rt.run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id
}

async fn status(
    rt: &mut rktlet::proto::v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    id: &str,
) -> Result<cri::PodSandboxStatusResponse, tonic::Status> {
    rt.pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: id.into(), verbose: true })
        .await
        .map(|r| r.into_inner())
}

fn hostname_in_pod(data: &std::path::Path, id: &str) -> String {
    let pid1 = pod_pid1(data, id);
    let out = std::process::Command::new("nsenter")
        .args(["-t", &pid1.to_string(), "-u", "hostname"])
        .output()
        .expect("nsenter");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn host_network_pod_lifecycle() {
    let d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let id = run(&mut rt, host_network(pod_config("hostnet", &[("app", "web")]))).await;

    let s = status(&mut rt, &id).await.expect("status");
    let st = s.status.expect("status");
    assert_eq!(st.state, cri::PodSandboxState::SandboxReady as i32);
    assert_eq!(st.metadata.as_ref().map(|m| m.name.as_str()), Some("hostnet"));
    assert_eq!(st.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(st.annotations.get("team").map(String::as_str), Some("rktlet"));
    assert!(st.annotations.keys().all(|k| !k.starts_with("k8s.io/reserved")), "{:?}", st.annotations);
    let ns = st.linux.and_then(|l| l.namespaces).and_then(|n| n.options).expect("namespace options");
    assert_eq!(ns.network, cri::NamespaceMode::Node as i32);
    assert!(st.created_at > 1_600_000_000_000_000_000, "created_at in ns: {}", st.created_at);
    let info: serde_json::Value = serde_json::from_str(&s.info["info"]).expect("verbose info");
    assert_eq!(info["state"], "running");
    assert_eq!(hostname_in_pod(&data, &id), "hostnet");
    // the pod's systemd sits in the pod cgroup of every mounted hierarchy, controllers included
    let cgroups = std::fs::read_to_string(format!("/proc/{}/cgroup", pod_pid1(&data, &id))).expect("cgroup");
    let layout = rktlet::cgroup::Layout::read().expect("layout");
    for h in layout.hierarchies.iter().filter(|h| h.mount.is_some() && !h.controllers.is_empty()) {
        let line = cgroups
            .lines()
            .find(|l| l.split(':').nth(1) == Some(h.controllers.join(",").as_str()))
            .unwrap_or_else(|| panic!("no {:?} line in {cgroups}", h.controllers));
        assert!(line.contains(&format!("rktlet-{id}")), "{line} (all: {cgroups})");
    }

    // the pod shares the node's network: it sees the same interfaces
    let host_links = std::fs::read_to_string("/proc/net/dev").expect("host net/dev");
    let pid = info["pid"].as_i64().expect("pid");
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).expect("children");
    let pid1 = children.split_whitespace().next().expect("pid1");
    let pod_links = std::fs::read_to_string(format!("/proc/{pid1}/net/dev")).expect("pod net/dev");
    let names = |t: &str| {
        t.lines()
            .skip(2)
            .filter_map(|l| l.split(':').next().map(|s| s.trim().to_string()))
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(names(&pod_links), names(&host_links));

    let list = rt.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }).await.expect("list").into_inner();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].id, id);

    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("stop");
    let st = status(&mut rt, &id).await.expect("status after stop").status.expect("status");
    assert_eq!(st.state, cri::PodSandboxState::SandboxNotready as i32);
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("stop is idempotent");

    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("remove");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.clone() })
        .await
        .expect("remove is idempotent");
    assert_eq!(status(&mut rt, &id).await.expect_err("gone").code(), Code::NotFound);
    assert_no_leaks(&data, &[id]);
}

#[tokio::test(flavor = "multi_thread")]
async fn list_filters_and_concurrent_pods() {
    let d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let rt = d.runtime().await;
    let (mut a, mut b) = (rt.clone(), rt.clone());
    let (ida, idb) = tokio::join!(
        run(&mut a, host_network(pod_config("pod-a", &[("tier", "front")]))),
        run(&mut b, host_network(pod_config("pod-b", &[("tier", "back")]))),
    );
    let mut rt = rt;
    let list = |filter: cri::PodSandboxFilter| cri::ListPodSandboxRequest { filter: Some(filter) };
    let ids = |r: cri::ListPodSandboxResponse| r.items.into_iter().map(|i| i.id).collect::<Vec<_>>();

    let all = ids(rt.list_pod_sandbox(list(Default::default())).await.expect("list").into_inner());
    assert_eq!(all.len(), 2);
    let front = cri::PodSandboxFilter {
        label_selector: [("tier".to_string(), "front".to_string())].into(),
        ..Default::default()
    };
    assert_eq!(ids(rt.list_pod_sandbox(list(front)).await.expect("list").into_inner()), vec![ida.clone()]);
    let by_prefix = cri::PodSandboxFilter { id: idb[..8].to_string(), ..Default::default() };
    assert_eq!(ids(rt.list_pod_sandbox(list(by_prefix)).await.expect("list").into_inner()), vec![idb.clone()]);

    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: ida.clone() }).await.expect("stop a");
    let ready = cri::PodSandboxFilter {
        state: Some(cri::PodSandboxStateValue { state: cri::PodSandboxState::SandboxReady as i32 }),
        ..Default::default()
    };
    assert_eq!(ids(rt.list_pod_sandbox(list(ready)).await.expect("list").into_inner()), vec![idb.clone()]);
    let not_ready = cri::PodSandboxFilter {
        state: Some(cri::PodSandboxStateValue { state: cri::PodSandboxState::SandboxNotready as i32 }),
        ..Default::default()
    };
    assert_eq!(ids(rt.list_pod_sandbox(list(not_ready)).await.expect("list").into_inner()), vec![ida.clone()]);

    for id in [&ida, &idb] {
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("remove");
    }
    assert_no_leaks(&data, &[ida, idb]);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_are_refused_and_leave_nothing() {
    let d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let mut no_uid = pod_config("x", &[]);
    if let Some(m) = no_uid.metadata.as_mut() {
        m.uid.clear();
    }
    let err = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(no_uid), runtime_handler: String::new() })
        .await
        .expect_err("uid required");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("uid"), "{}", err.message());

    // (a host PID namespace is served: tests/host_pid.rs; user namespaces
    // in tests/userns.rs) one without mappings, on the node's network, is not
    let mut user_ns = host_network(pod_config("userns", &[]));
    if let Some(ns) =
        user_ns.linux.as_mut().and_then(|l| l.security_context.as_mut()).and_then(|s| s.namespace_options.as_mut())
    {
        ns.userns_options = Some(cri::UserNamespace { mode: cri::NamespaceMode::Pod as i32, ..Default::default() });
    }
    let err = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(user_ns), runtime_handler: String::new() })
        .await
        .expect_err("user namespace");
    assert_eq!(err.code(), Code::InvalidArgument);

    // a sandbox that fails inside the sandbox process: its error is quoted, nothing stays
    let mut bad_parent = host_network(pod_config("badparent", &[]));
    if let Some(l) = bad_parent.linux.as_mut() {
        l.cgroup_parent = "/kubepods/../../escape".into();
    }
    let err = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(bad_parent), runtime_handler: String::new() })
        .await
        .expect_err("bad cgroup parent");
    // the systemd driver takes a slice name: the parent is refused before any sandbox runs
    let refusal = if rktlet::stage1::host::pid1_is_systemd(std::path::Path::new("/")) {
        "is not a systemd slice name"
    } else {
        "invalid cgroup parent"
    };
    assert!(err.message().contains(refusal), "{}", err.message());
    for state in ["embryo", "prepare", "run", "garbage", "exited-garbage"] {
        let left: Vec<_> = std::fs::read_dir(data.join("pods").join(state)).expect("readdir").collect();
        assert!(left.is_empty(), "pods/{state} not empty after failures");
    }
    let unknown = "00000000-0000-4000-8000-000000000000";
    assert_eq!(status(&mut rt, unknown).await.expect_err("unknown").code(), Code::NotFound);
    // (the CRI: stopping a pod that does not exist is not an error, as removing it is not)
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: unknown.into() })
        .await
        .expect("stop of unknown is ok");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: unknown.into() })
        .await
        .expect("remove of unknown is ok");
    // an id of no form rktlet makes: one rule for pods and containers
    let garbage = "not/a pod!";
    assert_eq!(status(&mut rt, garbage).await.expect_err("garbage").code(), Code::NotFound);
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: garbage.into() })
        .await
        .expect("remove of a pod that cannot exist is ok");
    let ctr = format!("{garbage}:app");
    let err = rt
        .container_status(cri::ContainerStatusRequest { container_id: ctr.clone(), verbose: false })
        .await
        .expect_err("garbage container");
    assert_eq!(err.code(), Code::NotFound);
    rt.remove_container(cri::RemoveContainerRequest { container_id: ctr }).await.expect("remove is ok too");
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_survive_a_daemon_sigkill() {
    let mut d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let id = run(&mut rt, host_network(pod_config("survivor", &[]))).await;
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);

    // a new daemon on the same data dir and socket
    let child = Daemon::spawn(&d.socket, d.dir.path(), &[]);
    d.child = child;
    d.wait_ready();
    let mut rt = d.runtime().await;
    let st = status(&mut rt, &id).await.expect("status after restart").status.expect("status");
    assert_eq!(st.state, cri::PodSandboxState::SandboxReady as i32, "the pod kept running");
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("stop");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("remove");
    assert_no_leaks(&data, &[id]);
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_network_ip_dns_hostname_and_host_port() {
    let dir = tempfile::tempdir().expect("tempdir");
    let net = common::TestNetwork::new(dir.path());
    let conf = net.conf_dir.to_string_lossy().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni"]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let mut config = pod_config("netpod", &[]);
    config.dns_config = Some(cri::DnsConfig {
        servers: vec!["10.96.0.10".into()],
        searches: vec!["default.svc.cluster.local".into()],
        options: vec!["ndots:5".into()],
    });
    let host_port = 20000 + (std::process::id() % 20000) as i32;
    config.port_mappings = vec![cri::PortMapping {
        protocol: cri::Protocol::Tcp as i32,
        container_port: 8080,
        host_port,
        host_ip: String::new(),
    }];
    let id = run(&mut rt, config).await;

    let st = status(&mut rt, &id).await.expect("status").status.expect("status");
    assert_eq!(st.state, cri::PodSandboxState::SandboxReady as i32);
    let ip = st.network.expect("network status").ip;
    assert!(ip.starts_with(&format!("{}.", net.subnet_prefix)), "pod IP {ip} not in {}.0/24", net.subnet_prefix);
    assert_eq!(net.allocated(), vec![ip.clone()]);

    // inside the pod: hostname, resolv.conf, hosts, eth0 with the IP
    let pid1 = pod_pid1(&data, &id);
    let out = std::process::Command::new("nsenter")
        .args(["-t", &pid1.to_string(), "-u", "-m", "-n", "sh", "-c", "hostname; cat /etc/resolv.conf /etc/hosts"])
        .output()
        .expect("nsenter");
    let inside = String::from_utf8_lossy(&out.stdout);
    assert!(inside.starts_with("netpod\n"), "{inside}");
    assert!(inside.contains("nameserver 10.96.0.10"), "{inside}");
    assert!(inside.contains("search default.svc.cluster.local"), "{inside}");
    assert!(inside.contains("options ndots:5"), "{inside}");
    assert!(inside.contains(&format!("{ip}\tnetpod")), "{inside}");
    let links = std::fs::read_to_string(format!("/proc/{pid1}/net/dev")).expect("pod net/dev");
    assert!(links.contains("eth0:"), "{links}");

    // a listener in the pod's netns answers on the node's hostPort
    assert_eq!(common::via_host_port(&id, 8080, host_port as u16, "hello from the pod"), "hello from the pod");

    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("stop");
    assert!(net.allocated().is_empty(), "IP released on stop");
    assert!(!std::path::Path::new(&format!("/var/run/netns/rktlet-{id}")).exists(), "netns removed on stop");
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("stop again");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("remove");
    let nat = std::process::Command::new("iptables-save").args(["-t", "nat"]).output().expect("iptables-save");
    assert!(!String::from_utf8_lossy(&nat.stdout).contains(&id), "iptables rules naming the pod remain");
    assert_no_leaks(&data, &[id]);
}

#[tokio::test(flavor = "multi_thread")]
async fn broken_cni_config_fails_clearly_and_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf_dir = dir.path().join("net.d");
    std::fs::create_dir_all(&conf_dir).expect("net.d");
    std::fs::write(
        conf_dir.join("10-broken.conflist"),
        br#"{"cniVersion":"1.0.0","name":"broken","plugins":[{"type":"no-such-plugin"}]}"#,
    )
    .expect("conflist");
    let conf = conf_dir.to_string_lossy().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni"]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let err = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(pod_config("broken", &[])),
            runtime_handler: String::new(),
        })
        .await
        .expect_err("broken network");
    assert!(err.message().contains("no-such-plugin"), "{}", err.message());
    let pods: Vec<_> = ["embryo", "prepare", "run", "exited-garbage", "garbage"]
        .iter()
        .flat_map(|s| std::fs::read_dir(data.join("pods").join(s)).expect("readdir").flatten())
        .collect();
    assert!(pods.is_empty(), "pod directories left: {pods:?}");
    // the network was set up before the failure: its cache (and netns, named after the pod) are gone
    let caches = std::fs::read_dir(data.join("networks")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(caches, 0, "CNI cache left behind");
    let netns_left: Vec<_> = std::fs::read_dir("/var/run/netns")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    for name in netns_left {
        if let Some(uuid) = name.strip_prefix("rktlet-") {
            assert!(!data.join("pods/run").join(uuid).exists() && !err.message().contains(uuid), "netns {name} left");
        }
    }
}

/// A start a crash interrupted before the sandbox made the pod directory
/// left its manifest in tmp/ and the netns: the next daemon removes both.
#[tokio::test(flavor = "multi_thread")]
async fn a_start_interrupted_before_its_pod_existed_is_cleaned_up_at_restart() {
    let mut d = Daemon::start(&[]);
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    let data = d.dir.path().join("data");
    let uuid = uuid::Uuid::new_v4();
    std::fs::write(data.join("tmp").join(format!("{uuid}.pod-manifest")), b"{}").expect("manifest");
    let netns = rktlet::net::pod::create_netns(uuid).expect("netns");
    let path = netns.path().to_path_buf();
    assert!(path.exists());

    d.child = Daemon::spawn(&d.socket, d.dir.path(), &[]);
    d.wait_ready();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while path.exists() || data.join("tmp").join(format!("{uuid}.pod-manifest")).exists() {
        assert!(std::time::Instant::now() < deadline, "the interrupted start was not cleaned up");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_no_leaks(&data, &[uuid.to_string()]);
}

/// The daemon keeps what it read about a pod until the pod changes (the pod
/// table): changes made outside the daemon must show in the very next call,
/// with no waiting in between.
#[tokio::test(flavor = "multi_thread")]
async fn reads_follow_changes_made_outside_the_daemon() {
    let d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let config = host_network(pod_config("watched", &[]));
    let (a, b) = (run(&mut rt, config.clone()).await, run(&mut rt, config.clone()).await);
    let c =
        common::create_container(&mut rt, &a, &config, common::container_config("c", &image, &["sleep", "100"])).await;
    rt.start_container(cri::StartContainerRequest { container_id: c.clone() }).await.expect("start");
    let state = |s: Result<cri::PodSandboxStatusResponse, tonic::Status>| s.expect("status").status.expect("s").state;
    let container_state = |rt: &mut rktlet::proto::v1::runtime_service_client::RuntimeServiceClient<_>| {
        let mut rt = rt.clone();
        let c = c.clone();
        async move {
            rt.container_status(cri::ContainerStatusRequest { container_id: c, verbose: false })
                .await
                .expect("container status")
                .into_inner()
                .status
                .expect("status")
                .state
        }
    };
    for _ in 0..3 {
        assert_eq!(state(status(&mut rt, &a).await), cri::PodSandboxState::SandboxReady as i32);
        assert_eq!(container_state(&mut rt).await, cri::ContainerState::ContainerRunning as i32);
    }
    let listed = |rt: &mut rktlet::proto::v1::runtime_service_client::RuntimeServiceClient<_>| {
        let mut rt = rt.clone();
        async move {
            let l = rt.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }).await.expect("list");
            l.into_inner().items.into_iter().map(|p| (p.id, p.state)).collect::<std::collections::BTreeMap<_, _>>()
        }
    };
    assert_eq!(listed(&mut rt).await.len(), 2);

    // the sandbox process dies (no daemon call involved): the lock is free once it is gone
    let pod_dir = data.join("pods/run").join(&a);
    let ppid: i32 = std::fs::read_to_string(pod_dir.join("ppid")).expect("ppid").trim().parse().expect("pid");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(ppid), nix::sys::signal::Signal::SIGKILL).expect("kill");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while rkt::lock::is_held(&pod_dir).expect("probe") {
        assert!(std::time::Instant::now() < deadline, "pod lock still held");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(state(status(&mut rt, &a).await), cri::PodSandboxState::SandboxNotready as i32);
    assert_eq!(listed(&mut rt).await[&a], cri::PodSandboxState::SandboxNotready as i32);
    assert_ne!(container_state(&mut rt).await, cri::ContainerState::ContainerRunning as i32);

    // another process (the CLI) removes pod b: gone from the very next list and status
    assert_eq!(listed(&mut rt).await[&b], cri::PodSandboxState::SandboxReady as i32);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rktlet"))
        .arg("--dir")
        .arg(&data)
        .arg("--cni-conf-dir")
        .arg(&d.cni_conf_dir)
        .args(["rm", &b])
        .output()
        .expect("rktlet rm");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!listed(&mut rt).await.contains_key(&b));
    assert_eq!(status(&mut rt, &b).await.expect_err("gone").code(), Code::NotFound);

    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: a.clone() }).await.expect("remove");
    assert!(listed(&mut rt).await.is_empty());
    assert_no_leaks(&data, &[a, b]);
}

/// A sandbox program that fails before booting the pod: RunPodSandbox says
/// why (its output and exit status), in a unit of the node's systemd as when detached, and
/// no failed unit stays behind.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_sandbox_says_why() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let program = dir.path().join("broken-rkt");
    std::fs::write(&program, "#!/bin/sh\necho 'sandbox-cause-4711: cannot go on' >&2\nexit 3\n").expect("script");
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let d = Daemon::start(&["--rkt-path", program.to_str().expect("utf-8 path")]);
    let mut rt = d.runtime().await;
    let err = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(host_network(pod_config("broken", &[]))),
            runtime_handler: String::new(),
        })
        .await
        .expect_err("a sandbox that exits 3 cannot start a pod");
    let msg = err.message();
    assert!(msg.contains("sandbox-cause-4711: cannot go on"), "{msg}");
    assert!(msg.len() < 4096, "unbounded error: {} bytes", msg.len());
    if rktlet::stage1::host::pid1_is_systemd(std::path::Path::new("/")) {
        assert!(msg.contains("result exit-code, main process exited with status 3"), "{msg}");
        let failed = std::process::Command::new("systemctl")
            .args(["list-units", "--all", "--state=failed", "--no-legend", "rktlet-*"])
            .output()
            .expect("systemctl");
        let failed = String::from_utf8_lossy(&failed.stdout);
        assert!(failed.trim().is_empty(), "failed units left: {failed}");
    } else {
        assert!(msg.contains("exit status: 3"), "{msg}");
    }
}

/// The inotify instances a process holds.
fn inotify_instances(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fd dir")
        .flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:inotify"))
        .count()
}

/// Running, sleeping or dying, not yet a zombie or gone.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with(['Z', 'X'])))
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_pods_processes_are_gone_and_the_daemon_keeps_nothing_of_it() {
    let d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let id = run(&mut rt, host_network(pod_config("stopped", &[]))).await;
    let pid1 = pod_pid1(&data, &id);
    let nspawn: i32 = std::fs::read_to_string(data.join("pods/run").join(&id).join("ppid"))
        .expect("ppid")
        .trim()
        .parse()
        .expect("pid");
    // the pod's systemd watches files: the stop takes these over while it dies
    assert!(inotify_instances(pid1 as u32) > 0, "the pod's systemd has no inotify instance");
    let before = inotify_instances(d.child.id());

    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("stop");
    // stopped means gone, not dying
    assert!(!alive(pid1), "the pod's systemd (pid {pid1}) outlived StopPodSandbox");
    assert!(!alive(nspawn), "nspawn (pid {nspawn}) outlived StopPodSandbox");
    // what the daemon held for the dying pod is closed soon after, not kept
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = inotify_instances(d.child.id());
        if now <= before {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon still holds {now} inotify instances ({before} before)"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("remove");
    assert_no_leaks(&data, &[id]);
}

/// A pod's log writer is the small `logwriter` program, not a fork of
/// rktlet: each pod keeps it resident (a fork kept rktlet's relocated
/// read-only data, 0.7 MiB of anonymous copies in a release build, 2 MiB in
/// a debug one). It writes the container's log, holds nothing but /dev/null as its
/// stdio, and goes with the pod.
#[tokio::test(flavor = "multi_thread")]
async fn a_pods_log_writer_is_the_small_program() {
    let d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let logs = tempfile::tempdir().expect("logs");
    let mut config = host_network(pod_config("small-writer", &[]));
    config.log_directory = logs.path().display().to_string();
    let id = run(&mut rt, config.clone()).await;
    let app = common::container_config("app", &image, &["sh", "-c", "echo written; exec sleep 1000"]);
    common::start_container(&mut rt, &id, &config, app).await;
    let log = logs.path().join("app.log");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains(" stdout F written\n")) {
        assert!(std::time::Instant::now() < deadline, "no log line: {:?}", std::fs::read_to_string(&log));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let writers: Vec<i32> = common::processes_mentioning(&format!("--uuid={id}"))
        .iter()
        .filter_map(|p| p.split(':').next()?.parse().ok())
        .filter(|pid: &i32| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "rkt-logwriter")
        })
        .collect();
    assert_eq!(writers.len(), 1, "one log writer program for {id}: {:?}", common::processes_mentioning(&id));
    let writer = writers[0];
    let exe = std::fs::read_link(format!("/proc/{writer}/exe")).expect("exe");
    assert!(exe.starts_with(data.join("logwriter")), "the writer runs {}", exe.display());
    let null = std::fs::read_link(format!("/proc/{writer}/fd/0")).expect("stdin");
    assert_eq!(null, std::path::Path::new("/dev/null"));
    let rollup = std::fs::read_to_string(format!("/proc/{writer}/smaps_rollup")).expect("smaps_rollup");
    // its anonymous memory: heap, stack, and the pages relocation copied
    // (Private_Dirty would also count the program's own pages where the
    // data dir is on a tmpfs, as in the node-lane container)
    let private: u64 = rollup
        .lines()
        .find_map(|l| l.strip_prefix("Anonymous:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("Anonymous");
    assert!(private < 512, "the log writer holds {private} KiB of its own: {rollup}");
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("stop");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while alive(writer) {
        assert!(std::time::Instant::now() < deadline, "the log writer outlived its pod");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("remove");
    assert_no_leaks(&data, &[id]);
}

/// The pids and command lines of the standby sandbox processes on `data`.
fn standbys(data: &std::path::Path) -> Vec<(i32, String)> {
    common::processes_mentioning(&format!("--dir {} app sandbox --standby", data.display()))
        .into_iter()
        .filter_map(|p| {
            let (pid, cmd) = p.split_once(": ")?;
            let pid: i32 = pid.parse().ok()?;
            // a log writer is a fork of its pod's sandbox and keeps its command line
            (alive(pid) && common::parent_of(pid) != 1).then(|| (pid, cmd.to_string()))
        })
        .collect()
}

/// Waits up to 10 s for `data`'s standby processes to be `n`.
async fn wait_standbys(data: &std::path::Path, n: usize) -> Vec<(i32, String)> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = standbys(data);
        if now.len() == n {
            return now;
        }
        assert!(std::time::Instant::now() < deadline, "standby processes on {}: {now:?}, want {n}", data.display());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The daemon keeps one sandbox process started ahead: a cold pod start
/// gives it its arguments (the pod gets the uuid it was started with), the
/// next one is started while that pod is set up, a standby that died is not
/// used, and none outlives the daemon. In a unit of the node's systemd there is none (the
/// unit starts the sandbox).
#[tokio::test(flavor = "multi_thread")]
async fn a_cold_start_takes_the_sandbox_process_started_ahead() {
    let mut d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    // the daemon's choice, from the same host and environment
    let pid1_is_systemd = rktlet::stage1::host::pid1_is_systemd(std::path::Path::new("/"));
    if rktlet::cgroup::Driver::chosen(pid1_is_systemd) == rktlet::cgroup::Driver::Systemd {
        let id = run(&mut rt, host_network(pod_config("unit", &[]))).await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(standbys(&data).is_empty(), "a standby beside a systemd unit: {:?}", standbys(&data));
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("remove");
        assert_no_leaks(&data, &[id]);
        return;
    }
    let first = wait_standbys(&data, 1).await.remove(0);
    let id = run(&mut rt, host_network(pod_config("ahead", &[]))).await;
    assert!(first.1.contains(&format!("--uuid={id}")), "pod {id} did not come from the standby {first:?}");
    let nspawn: i32 = std::fs::read_to_string(data.join("pods/run").join(&id).join("ppid"))
        .expect("ppid")
        .trim()
        .parse()
        .expect("pid");
    assert_eq!(nspawn, first.0, "the standby process is the pod's sandbox, now nspawn");
    let second = wait_standbys(&data, 1).await.remove(0);
    assert_ne!(second.0, first.0);
    assert!(!second.1.contains(&id), "{second:?}");

    // a standby killed by someone (and dead, not dying at this instant): the next pod starts all the same
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(second.0), nix::sys::signal::Signal::SIGKILL).expect("kill");
    while alive(second.0) {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let other = run(&mut rt, host_network(pod_config("after-kill", &[]))).await;
    assert_eq!(status(&mut rt, &other).await.expect("status").status.expect("status").state, 0, "ready");
    for pod in [&id, &other] {
        rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.to_string() }).await.expect("stop");
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.to_string() }).await.expect("remove");
    }
    wait_standbys(&data, 1).await;
    d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    wait_standbys(&data, 0).await;
    assert_no_leaks(&data, &[id, other]);
}

/// The pod's sysctls belong to its own namespaces: they are set where the
/// node's /proc/sys is read-only (a node in a container, as kind runs
/// them), here a daemon in a mount namespace whose /proc/sys is.
#[tokio::test(flavor = "multi_thread")]
async fn sysctls_apply_where_the_nodes_proc_sys_is_read_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let net = common::TestNetwork::new(dir.path());
    let conf = net.conf_dir.to_string_lossy().to_string();
    let extra = ["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni"];
    let socket = dir.path().join("run/rktlet.sock");
    let mut wrap = std::process::Command::new("unshare");
    wrap.args([
        "-m",
        "--propagation",
        "slave",
        "sh",
        "-c",
        "mount -o bind,ro /proc/sys /proc/sys && exec \"$@\"",
        "sh",
    ])
    .arg(common::BIN);
    // (pods the daemon starts itself, in its mount namespace: in units of the node's systemd they would
    // start in PID 1's, which has not the network namespaces the daemon binds in its own)
    let child = Daemon::spawn_with(wrap, &socket, dir.path(), &extra, &[("RKTLET_CGROUP_DRIVER", "cgroupfs")]);
    let cni_conf_dir = net.conf_dir.clone();
    let mut d = Daemon { child, socket, dir, cni_conf_dir };
    d.wait_ready();
    let mut rt = d.runtime().await;
    let mut config = pod_config("ro-sysctls", &[]);
    config.linux.get_or_insert_default().sysctls = [
        ("kernel.shm_rmid_forced".to_string(), "1".to_string()),
        ("net/ipv4/ip_local_port_range".to_string(), "40000 50000".to_string()),
    ]
    .into();
    let pod = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() })
        .await
        .unwrap_or_else(|e| panic!("RunPodSandbox with sysctls: {e:?}\n{}", d.log()))
        .into_inner()
        .pod_sandbox_id;
    let pid1 = pod_pid1(&d.dir.path().join("data"), &pod);
    let read = |path: &str| {
        let out = std::process::Command::new("nsenter")
            .args(["-t", &pid1.to_string(), "-n", "-i", "-u", "cat", path])
            .output()
            .expect("nsenter");
        String::from_utf8_lossy(&out.stdout).split_whitespace().collect::<Vec<_>>().join(" ")
    };
    assert_eq!(read("/proc/sys/kernel/shm_rmid_forced"), "1");
    assert_eq!(read("/proc/sys/net/ipv4/ip_local_port_range"), "40000 50000");
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("stop");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

/// Whether the mount namespace `mountinfo` (an open `/proc/<pid>/mountinfo`)
/// belongs to changed since the last look (what a pod's systemd polls for,
/// then re-reads its whole mount table).
fn mount_table_changed(mountinfo: &std::fs::File) -> bool {
    use std::os::fd::AsFd;
    let mut fds = [nix::poll::PollFd::new(mountinfo.as_fd(), nix::poll::PollFlags::POLLPRI)];
    let n = nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).expect("poll mountinfo");
    n > 0
        && fds[0].revents().is_some_and(|r| r.intersects(nix::poll::PollFlags::POLLPRI | nix::poll::PollFlags::POLLERR))
}

/// Network namespace binds in the mount namespace of process `pid`.
fn netns_binds(pid: i32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .expect("mountinfo")
        .lines()
        .filter(|l| l.split_once(" - ").is_some_and(|(_, post)| post.starts_with("nsfs ")))
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .collect()
}

/// Starting and stopping pods touches no other pod's mount namespace: the
/// network namespace the daemon binds for a new pod (under the node's shared
/// /run/netns) used to be copied into every running pod, waking each pod's
/// systemd to re-read its mount table. A pod holds no bind of another pod's
/// network namespace either.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_start_and_stop_leave_other_pods_mount_namespaces_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let net = common::TestNetwork::new(dir.path());
    let conf = net.conf_dir.to_string_lossy().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni"]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let first = run(&mut rt, pod_config("first", &[])).await;
    let pid1 = pod_pid1(&data, &first);
    let mountinfo = std::fs::File::open(format!("/proc/{pid1}/mountinfo")).expect("open mountinfo");
    // whatever the pod did before this look, until it has been quiet a while
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while mount_table_changed(&mountinfo) {
        assert!(std::time::Instant::now() < deadline, "the first pod's mount table never settles");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    let second = run(&mut rt, pod_config("second", &[])).await;
    assert!(
        std::path::Path::new(&format!("/var/run/netns/rktlet-{second}")).exists(),
        "the second pod has no netns bind on the node"
    );
    assert!(!mount_table_changed(&mountinfo), "starting a pod changed the first pod's mount namespace");
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: second.clone() }).await.expect("stop");
    assert!(!mount_table_changed(&mountinfo), "stopping a pod changed the first pod's mount namespace");

    // nspawn's own namespace, where the pod's copy of the node's tree lies
    // below its root: its own network namespace, no other pod's
    let nspawn: i32 = std::fs::read_to_string(data.join("pods/run").join(&first).join("ppid"))
        .expect("ppid")
        .trim()
        .parse()
        .expect("pid");
    let own = std::fs::canonicalize(format!("/var/run/netns/rktlet-{first}")).expect("the first pod's netns");
    assert_eq!(netns_binds(nspawn), [own.to_string_lossy()], "the first pod's sandbox namespace");
    for id in [&first, &second] {
        rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("stop");
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.clone() }).await.expect("remove");
    }
    assert_no_leaks(&data, &[first, second]);
}
