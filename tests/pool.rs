//! The pod pool against real pods: a request served from a pre-booted pod
//! gets what it asked for and behaves like a cold pod; requests the pool
//! cannot serve cold-start; the pool survives (or is cleaned up after) a
//! daemon SIGKILL and is drained on shutdown, leaving nothing behind.

mod common;

use common::{BIN, Daemon, TestNetwork, assert_no_leaks, host_network, pod_config, pod_pid1};
use rktlet::proto::v1 as cri;
use rktlet::proto::v1::runtime_service_client::RuntimeServiceClient;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};
use tonic::transport::Channel;

type Client = RuntimeServiceClient<Channel>;

/// A daemon with a pool of `size` on a test network of its own.
fn pool_daemon(dir: &Path, size: &str) -> (TestNetwork, Daemon) {
    let net = TestNetwork::new(dir);
    let conf = net.conf_dir.to_string_lossy().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni", "--pod-pool-size", size]);
    (net, d)
}

/// The pool figures from Status (verbose).
async fn pool_info(rt: &mut Client) -> serde_json::Value {
    let st = rt.status(cri::StatusRequest { verbose: true }).await.expect("Status").into_inner();
    let text = st.info.get("podPool").expect("podPool in verbose info");
    serde_json::from_str::<serde_json::Value>(text).expect("podPool json")["pool"].clone()
}

/// Whether the daemon's pool is off on this host (then the check cannot run
/// here: it says SKIPPED and the caller returns).
async fn pool_off(rt: &mut Client, test: &str) -> bool {
    let info = pool_info(rt).await;
    let Some(why) = info["disabled"].as_str() else { return false };
    common::skipped(test, &format!("the pod pool is off on this host: {why}"));
    true
}

/// Waits until the pool has `n` ready pods.
async fn wait_pool(rt: &mut Client, n: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = pool_info(rt).await;
        if let Some(why) = info["disabled"].as_str() {
            panic!("the pod pool is off on this host: {why}");
        }
        if info["ready"].as_u64() == Some(n) {
            return info;
        }
        assert!(Instant::now() < deadline, "pool did not reach {n} ready pods: {info}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Pods on disk that carry the pool annotation (not taken yet).
fn pool_pods(data: &Path) -> BTreeSet<String> {
    std::fs::read_dir(data.join("pods/run"))
        .map(|d| {
            d.flatten()
                .filter(|e| std::fs::read_to_string(e.path().join("pod")).is_ok_and(|m| m.contains("rktlet.io/pool")))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

async fn run(rt: &mut Client, config: &cri::PodSandboxConfig) -> String {
    common::run_pod(rt, config).await
}

async fn remove(rt: &mut Client, id: &str) {
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.into() }).await.expect("remove");
}

fn files_of(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir).expect("pod dir").flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()
}

fn nice_of(pid: i32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(16)).unwrap_or("").to_string()
}

fn in_pod(pid1: i32, script: &str) -> String {
    let out = std::process::Command::new("nsenter")
        .args(["-t", &pid1.to_string(), "-u", "-m", "-n", "sh", "-c", script])
        .output()
        .expect("nsenter");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Stops the daemon with SIGTERM (which drains the pool) and checks that
/// nothing of `pods` is left.
fn stop_and_check(d: &mut Daemon, pods: impl IntoIterator<Item = String>) {
    let status = d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    assert!(status.success(), "daemon exit: {status}; log: {}", d.log());
    let data = d.dir.path().join("data");
    assert!(pool_pods(&data).is_empty(), "pool pods left after shutdown");
    let pods: Vec<String> = pods.into_iter().collect();
    assert_no_leaks(&data, &pods);
}

/// Removes a test's own cgroup parent (deepest first) from every hierarchy.
fn remove_cgroup_parent(parent: &str) {
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else { return };
    for h in hierarchies.flatten() {
        let mut p = parent.to_string();
        loop {
            let _ = std::fs::remove_dir(h.path().join(&p));
            match p.rsplit_once('/') {
                Some((up, _)) => p = up.to_string(),
                None => break,
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_pod_gets_what_was_asked_and_runs_containers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (net, mut d) = pool_daemon(dir.path(), "1");
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    if pool_off(&mut rt, "a_pool_pod_gets_what_was_asked_and_runs_containers").await {
        return;
    }
    wait_pool(&mut rt, 1).await;
    let waiting = pool_pods(&data);
    assert_eq!(waiting.len(), 1);
    let pooled_uuid = waiting.iter().next().cloned().expect("one");
    // a waiting pool pod is nobody's pod: not listed to kubelet nor by the CLI
    let listed = rt.list_pod_sandbox(cri::ListPodSandboxRequest::default()).await.expect("list").into_inner();
    assert!(listed.items.is_empty(), "pool pods must not be listed: {:?}", listed.items);
    // --full: whole UUIDs (the short table shows 8 characters, as rkt's)
    let cli =
        std::process::Command::new(BIN).arg("--dir").arg(&data).args(["list", "--full"]).output().expect("rktlet list");
    assert!(!String::from_utf8_lossy(&cli.stdout).contains(&pooled_uuid), "rktlet list shows a pool pod");
    let idle_pid1 = pod_pid1(&data, &pooled_uuid);
    assert_eq!(nice_of(idle_pid1), "10", "a waiting pool pod runs at low priority");

    let parent = format!("rktlet-test-{}/pod-pooled", &net.name);
    let mut config = pod_config("pooled", &[("tier", "web")]);
    config.dns_config = Some(cri::DnsConfig {
        servers: vec!["10.96.0.10".into()],
        searches: vec!["default.svc.cluster.local".into()],
        options: vec!["ndots:5".into()],
    });
    config.linux = Some(cri::LinuxPodSandboxConfig { cgroup_parent: format!("/{parent}"), ..Default::default() });
    config.log_directory = dir.path().join("logs/pooled").to_string_lossy().into_owned();
    let host_port = 20000 + (std::process::id() % 20000) as i32 + 7;
    config.port_mappings = vec![cri::PortMapping {
        protocol: cri::Protocol::Tcp as i32,
        container_port: 8080,
        host_port,
        host_ip: String::new(),
    }];
    let asked_at = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).expect("now").as_nanos() as i64;
    let id = run(&mut rt, &config).await;
    assert_eq!(id, pooled_uuid, "the request was served by the waiting pool pod");
    // the next request finds the pool empty (a cold pod, to compare with) or
    // its refill ready: not the pod that was waiting either way
    let mut cold_config = pod_config("cold", &[("tier", "web")]);
    cold_config.linux = config.linux.clone();
    cold_config.log_directory = dir.path().join("logs/cold").to_string_lossy().into_owned();
    let cold = run(&mut rt, &cold_config).await;
    assert!(!waiting.contains(&cold));

    let st = rt
        .pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: id.clone(), verbose: true })
        .await
        .expect("status")
        .into_inner();
    let s = st.status.expect("status");
    assert_eq!(s.state, cri::PodSandboxState::SandboxReady as i32);
    assert_eq!(s.metadata.as_ref().map(|m| m.name.as_str()), Some("pooled"));
    assert_eq!(s.labels.get("tier").map(String::as_str), Some("web"));
    assert_eq!(s.annotations.get("team").map(String::as_str), Some("rktlet"));
    assert!(!s.annotations.contains_key("rktlet.io/pool"), "{:?}", s.annotations);
    assert!(s.created_at >= asked_at, "created at the request ({}), not at the pool boot ({})", asked_at, s.created_at);
    let ip = s.network.expect("network").ip;
    assert!(ip.starts_with(&format!("{}.", net.subnet_prefix)), "pod IP {ip} not in {}.0/24", net.subnet_prefix);
    assert!(Path::new(&config.log_directory).is_dir(), "log directory made");

    // inside: hostname, DNS, hosts with its IP, eth0
    let pid1 = pod_pid1(&data, &id);
    let inside = in_pod(pid1, "hostname; cat /etc/resolv.conf /etc/hosts /etc/hostname");
    assert!(inside.starts_with("pooled\n"), "{inside}");
    assert!(inside.contains("nameserver 10.96.0.10"), "{inside}");
    assert!(inside.contains("search default.svc.cluster.local"), "{inside}");
    assert!(inside.contains(&format!("{ip}\tpooled")), "{inside}");
    let links = std::fs::read_to_string(format!("/proc/{pid1}/net/dev")).expect("pod net/dev");
    assert!(links.contains("eth0:"), "{links}");
    // the port mapping asked for at the take answers on the node
    assert_eq!(common::via_host_port(&id, 8080, host_port as u16, "hello from the pool"), "hello from the pool");
    // the requested cgroup parent holds the pod in the controller hierarchies, at normal priority
    for h in ["memory", "cpu", "pids"] {
        let procs = std::fs::read_to_string(
            Path::new("/sys/fs/cgroup").join(h).join(&parent).join(format!("rktlet-{id}")).join("cgroup.procs"),
        )
        .unwrap_or_default();
        assert!(procs.lines().any(|p| p == pid1.to_string()), "pod systemd not in {h}:{parent}: {procs:?}");
    }
    assert_eq!(nice_of(pid1), "0");

    // the same files and manifest fields as the cold pod
    let run_dir = data.join("pods/run");
    assert_eq!(files_of(&run_dir.join(&id)), files_of(&run_dir.join(&cold)));
    let manifest = |p: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(run_dir.join(p).join("pod")).expect("manifest")).expect("json")
    };
    let names = |m: &serde_json::Value| -> Vec<String> {
        m["annotations"].as_array().map(|a| a.iter().map(|x| x["name"].to_string()).collect()).unwrap_or_default()
    };
    assert_eq!(names(&manifest(&id)), names(&manifest(&cold)));

    // a container with a memory limit runs in it like in a cold pod
    let image = common::pull_busybox(&d).await;
    let mut c = common::container_config("web", &image, &["sh", "-c", "echo started; sleep 1000"]);
    // (a PID namespace of its own, kubelet's default: one that can be checkpointed)
    let own_pid = cri::NamespaceOption { pid: cri::NamespaceMode::Container as i32, ..Default::default() };
    c.linux = Some(cri::LinuxContainerConfig {
        resources: Some(cri::LinuxContainerResources { memory_limit_in_bytes: 64 << 20, ..Default::default() }),
        security_context: Some(cri::LinuxContainerSecurityContext {
            namespace_options: Some(own_pid),
            ..Default::default()
        }),
    });
    let cid = common::create_container(&mut rt, &id, &config, c).await;
    rt.start_container(cri::StartContainerRequest { container_id: cid.clone() }).await.expect("start");
    let out = rt
        .exec_sync(cri::ExecSyncRequest { container_id: cid.clone(), cmd: vec!["hostname".into()], timeout: 10 })
        .await
        .expect("ExecSync")
        .into_inner();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "pooled");
    // a checkpoint is refused before CRIU runs, with the way round it: the
    // take moved the pod's cgroups out of its cgroup namespace, which CRIU
    // cannot dump
    let location = dir.path().join("web.tar");
    let request = cri::CheckpointContainerRequest {
        container_id: cid.clone(),
        location: location.to_string_lossy().into_owned(),
        timeout: 10,
    };
    let err = rt.checkpoint_container(request).await.expect_err("checkpoint of a container in a pool pod");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("pod pool") && err.message().contains("pod_pool_size = 0"), "{}", err.message());
    assert!(!location.exists());
    let limit = std::fs::read_to_string(
        Path::new("/sys/fs/cgroup/memory").join(&parent).join(format!("rktlet-{id}/app-0-web/memory.limit_in_bytes")),
    )
    .expect("app memory cgroup below the requested parent");
    assert_eq!(limit.trim(), (64u64 << 20).to_string());
    let cs = rt
        .container_status(cri::ContainerStatusRequest { container_id: cid.clone(), verbose: false })
        .await
        .expect("container status")
        .into_inner()
        .status
        .expect("status");
    assert_eq!(cs.state, cri::ContainerState::ContainerRunning as i32);

    remove(&mut rt, &id).await;
    remove(&mut rt, &cold).await;
    assert_no_leaks(&data, &[id.clone(), cold.clone()]);
    // only a refilled pool pod (wired ahead) may hold an address now
    let left = net.allocated();
    assert!(!left.contains(&ip) && left.len() <= 1, "IPs released: {left:?}");
    let refilled = wait_pool(&mut rt, 1).await;
    // the second request may have found the refill ready already (CI saw it once)
    assert!(matches!(refilled["takes"].as_u64(), Some(1 | 2)), "{refilled}");
    let all: Vec<String> = pool_pods(&data).into_iter().chain([id, cold]).collect();
    stop_and_check(&mut d, all);
    remove_cgroup_parent(&parent);
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_beyond_the_pool_cold_start_and_host_network_never_uses_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_net, mut d) = pool_daemon(dir.path(), "1");
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    if pool_off(&mut rt, "requests_beyond_the_pool_cold_start_and_host_network_never_uses_it").await {
        return;
    }
    wait_pool(&mut rt, 1).await;
    let waiting = pool_pods(&data);

    // a host-network pod first: it must not take the pool pod
    let host = run(&mut rt, &host_network(pod_config("on-node", &[]))).await;
    assert!(!waiting.contains(&host));
    assert_eq!(pool_pods(&data), waiting, "the pool pod is still waiting");

    // three at once: one from the pool, two cold, all in parallel
    let configs: Vec<cri::PodSandboxConfig> = (0..3).map(|i| pod_config(&format!("burst-{i}"), &[])).collect();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(d.runtime().await);
    }
    let ids: Vec<String> = futures::future::join_all(
        clients.iter_mut().zip(&configs).map(|(c, config)| async move { run(c, config).await }),
    )
    .await;
    let from_pool = ids.iter().filter(|id| waiting.contains(*id)).count();
    assert_eq!(from_pool, 1, "exactly one request was served by the pool: {ids:?} / {waiting:?}");
    let mut ips = BTreeSet::new();
    for id in &ids {
        let st = rt
            .pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: id.clone(), verbose: false })
            .await
            .expect("status")
            .into_inner()
            .status
            .expect("status");
        assert_eq!(st.state, cri::PodSandboxState::SandboxReady as i32);
        ips.insert(st.network.expect("network").ip);
    }
    assert_eq!(ips.len(), 3, "every pod has its own IP: {ips:?}");
    let listed = rt.list_pod_sandbox(cri::ListPodSandboxRequest::default()).await.expect("list").into_inner();
    assert_eq!(listed.items.len(), 4, "three pod-network pods and the host-network one");

    for id in ids.iter().chain([&host]) {
        remove(&mut rt, id).await;
    }
    let all: Vec<String> = ids.into_iter().chain([host]).chain(pool_pods(&data)).collect();
    stop_and_check(&mut d, all);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_with_a_full_pool_then_restart_readopts_and_leaks_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let net = TestNetwork::new(dir.path());
    let conf = net.conf_dir.to_string_lossy().to_string();
    let flags =
        |size: &'static str| ["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni", "--pod-pool-size", size];
    let mut d = Daemon::start(&flags("2"));
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    if pool_off(&mut rt, "sigkill_with_a_full_pool_then_restart_readopts_and_leaks_nothing").await {
        return;
    }
    wait_pool(&mut rt, 2).await;
    let before = pool_pods(&data);
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    assert_eq!(pool_pods(&data), before, "pool pods outlive the daemon");

    // restarted with room for one: one is adopted, the other removed
    d.child = Daemon::spawn(&d.socket, d.dir.path(), &flags("1"));
    d.wait_ready();
    let mut rt = d.runtime().await;
    let info = wait_pool(&mut rt, 1).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while pool_pods(&data).len() != 1 {
        assert!(Instant::now() < deadline, "the extra pool pod was not removed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = pool_pods(&data);
    assert!(after.is_subset(&before), "the kept pod is one of the old ones: {after:?} / {before:?}");
    assert_eq!(info["boots"].as_u64(), Some(0), "adopted, not booted again: {info}");
    let removed: Vec<String> = before.difference(&after).cloned().collect();
    // its removal runs in the background after the restart: wait until its directory is gone
    let deadline = Instant::now() + Duration::from_secs(20);
    let any_dir = |uuid: &str| {
        std::fs::read_dir(data.join("pods")).expect("pods").flatten().any(|s| s.path().join(uuid).exists())
    };
    while removed.iter().any(|u| any_dir(u)) {
        assert!(Instant::now() < deadline, "the extra pool pod was not removed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_no_leaks(&data, &removed);

    // the adopted pod serves a request
    let id = run(&mut rt, &pod_config("adopted", &[])).await;
    assert!(after.contains(&id));
    remove(&mut rt, &id).await;
    let all: Vec<String> = before.into_iter().chain(pool_pods(&data)).collect();
    stop_and_check(&mut d, all);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_pool_pod_is_discarded_and_the_request_cold_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_net, mut d) = pool_daemon(dir.path(), "1");
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    if pool_off(&mut rt, "a_dead_pool_pod_is_discarded_and_the_request_cold_starts").await {
        return;
    }
    wait_pool(&mut rt, 1).await;
    let dead = pool_pods(&data).into_iter().next().expect("pool pod");
    let ppid: i32 = std::fs::read_to_string(data.join("pods/run").join(&dead).join("ppid"))
        .expect("ppid")
        .trim()
        .parse()
        .expect("pid");
    // nspawn killed: the pod's systemd is orphaned, the pod reads as exited
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(ppid), nix::sys::signal::Signal::SIGKILL).expect("kill");
    tokio::time::sleep(Duration::from_millis(100)).await;

    let id = run(&mut rt, &pod_config("after-death", &[])).await;
    assert_ne!(id, dead);
    let info = pool_info(&mut rt).await;
    assert_eq!(info["discarded"].as_u64(), Some(1), "{info}");
    assert_no_leaks(&data, std::slice::from_ref(&dead));
    remove(&mut rt, &id).await;
    let all: Vec<String> = [id, dead].into_iter().chain(pool_pods(&data)).collect();
    stop_and_check(&mut d, all);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_of_zero_boots_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_net, mut d) = pool_daemon(dir.path(), "0");
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let id = run(&mut rt, &pod_config("plain", &[])).await;
    let info = pool_info(&mut rt).await;
    assert_eq!((info["size"].as_u64(), info["ready"].as_u64(), info["boots"].as_u64()), (Some(0), Some(0), Some(0)));
    assert!(pool_pods(&data).is_empty());
    let pods: Vec<_> = std::fs::read_dir(data.join("pods/run")).expect("run").flatten().collect();
    assert_eq!(pods.len(), 1, "only the requested pod exists");
    remove(&mut rt, &id).await;
    stop_and_check(&mut d, [id]);
}

/// A pod whose name is longer than a kernel hostname and that names no
/// hostname is served by the pool like any other; its hostname is the name
/// cut to 63 bytes, as kubelet cuts it.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_with_a_long_name_is_served_by_the_pool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_net, mut d) = pool_daemon(dir.path(), "1");
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    if pool_off(&mut rt, "a_pod_with_a_long_name_is_served_by_the_pool").await {
        return;
    }
    wait_pool(&mut rt, 1).await;
    let waiting = pool_pods(&data);
    let name = format!("{}-{}", "long".repeat(16), "tail");
    assert!(name.len() > 64);
    let mut config = pod_config(&name, &[]);
    config.hostname = String::new();
    config.log_directory = dir.path().join("logs/long").to_string_lossy().into_owned();
    let id = run(&mut rt, &config).await;
    assert!(waiting.contains(&id), "served by the waiting pool pod: {}", d.log());
    let inside = in_pod(pod_pid1(&data, &id), "hostname");
    assert_eq!(inside.trim(), &name[..63]);
    remove(&mut rt, &id).await;
    stop_and_check(&mut d, [id]);
}

/// A sysctl as the pod's processes see it (its network, IPC and UTS namespaces).
fn sysctl_in_pod(pid1: i32, name: &str) -> String {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    let out = std::process::Command::new("nsenter")
        .args(["-t", &pid1.to_string(), "-n", "-i", "-u", "cat", &path])
        .output()
        .expect("nsenter");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn with_sysctls(mut config: cri::PodSandboxConfig, sysctls: &[(&str, &str)]) -> cri::PodSandboxConfig {
    let linux = config.linux.get_or_insert_default();
    linux.sysctls = sysctls.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    config
}

#[tokio::test(flavor = "multi_thread")]
async fn sysctls_apply_to_pool_and_cold_pods_and_node_wide_ones_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_net, mut d) = pool_daemon(dir.path(), "1");
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    if pool_off(&mut rt, "sysctls_apply_to_pool_and_cold_pods_and_node_wide_ones_are_refused").await {
        return;
    }
    wait_pool(&mut rt, 1).await;
    let waiting = pool_pods(&data);

    // refused before anything is made: the pool pod stays, no pod is listed
    let refused = [
        with_sysctls(pod_config("node-wide", &[]), &[("kernel.pid_max", "4096")]),
        with_sysctls(pod_config("hostname", &[]), &[("kernel.hostname", "other")]),
        with_sysctls(host_network(pod_config("host-net", &[])), &[("net.core.somaxconn", "100")]),
        with_sysctls(host_network(pod_config("host-uts", &[])), &[("kernel.domainname", "x")]),
    ];
    for config in refused {
        let err = rt
            .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() })
            .await
            .expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    }
    let mut host_ipc = with_sysctls(pod_config("host-ipc", &[]), &[("kernel.shmmax", "1")]);
    host_ipc.linux.get_or_insert_default().security_context = Some(cri::LinuxSandboxSecurityContext {
        namespace_options: Some(cri::NamespaceOption { ipc: cri::NamespaceMode::Node as i32, ..Default::default() }),
        ..Default::default()
    });
    let err = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(host_ipc.clone()), runtime_handler: String::new() })
        .await
        .expect_err("IPC sysctl with the node's IPC namespace");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert_eq!(pool_pods(&data), waiting, "a refused request leaves the pool pod waiting");
    let listed = rt.list_pod_sandbox(cri::ListPodSandboxRequest::default()).await.expect("list").into_inner();
    assert!(listed.items.is_empty(), "{:?}", listed.items);

    // from the pool: every namespace kind; the node keeps its own values
    let sysctls = [
        ("net.ipv4.ip_unprivileged_port_start", "123"),
        ("kernel.shm_rmid_forced", "1"),
        ("fs.mqueue.msg_max", "100"),
        ("kernel.domainname", "sysctl.example"),
    ];
    let node: Vec<String> = sysctls.iter().map(|(k, _)| sysctl_in_pod(1, k)).collect();
    let pooled = run(&mut rt, &with_sysctls(pod_config("pooled", &[]), &sysctls)).await;
    assert!(waiting.contains(&pooled), "served from the pool");
    let pid1 = pod_pid1(&data, &pooled);
    for ((name, value), node) in sysctls.iter().zip(&node) {
        assert_eq!(sysctl_in_pod(pid1, name), *value, "{name} in the pool pod");
        assert_ne!(sysctl_in_pod(1, name), *value, "{name} on the node (was {node})");
    }

    // cold: a pod network with the node's IPC namespace (never from the pool), and a host-network one
    let mut cold_net = with_sysctls(pod_config("cold-net", &[]), &[("net.ipv4.ip_unprivileged_port_start", "99")]);
    cold_net.linux.get_or_insert_default().security_context =
        host_ipc.linux.as_ref().and_then(|l| l.security_context.clone());
    let cold_net = run(&mut rt, &cold_net).await;
    assert!(!waiting.contains(&cold_net));
    assert_eq!(sysctl_in_pod(pod_pid1(&data, &cold_net), "net.ipv4.ip_unprivileged_port_start"), "99");
    let cold_ipc =
        run(&mut rt, &with_sysctls(host_network(pod_config("cold-ipc", &[])), &[("kernel.shm_rmid_forced", "1")]))
            .await;
    assert_eq!(sysctl_in_pod(pod_pid1(&data, &cold_ipc), "kernel.shm_rmid_forced"), "1");
    assert_eq!(sysctl_in_pod(1, "kernel.shm_rmid_forced"), node[1], "the node's IPC namespace is untouched");

    // a value the kernel refuses fails the request and leaves no pod behind
    let before = files_of(&data.join("pods/run"));
    let err = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(with_sysctls(host_network(pod_config("bad-value", &[])), &[("kernel.shm_rmid_forced", "x")])),
            runtime_handler: String::new(),
        })
        .await
        .expect_err("a value the kernel refuses");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert_eq!(files_of(&data.join("pods/run")), before, "the failed pod was taken down");

    for id in [&pooled, &cold_net, &cold_ipc] {
        remove(&mut rt, id).await;
    }
    let all: Vec<String> = [pooled, cold_net, cold_ipc].into_iter().chain(pool_pods(&data)).collect();
    stop_and_check(&mut d, all);
}

/// A pod served by the pool gets its pod-level limits on the cgroup of the
/// requested parent, as a cold pod does, and resizes the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_pod_gets_its_pod_level_limits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (net, d) = pool_daemon(dir.path(), "1");
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    if pool_off(&mut rt, "a_pool_pod_gets_its_pod_level_limits").await {
        return;
    }
    let layout = rktlet::cgroup::Layout::read().expect("layout");
    let Some(mem) =
        layout.v1_controllers().find(|h| h.controllers.iter().any(|c| c == "memory")).and_then(|h| h.mount.clone())
    else {
        common::skipped(
            "pool::a_pool_pod_gets_its_pod_level_limits",
            "no cgroup v1 memory controller (v2: tests/cgroup_v2.rs)",
        );
        return;
    };
    wait_pool(&mut rt, 1).await;
    let pooled = pool_pods(&data).into_iter().next().expect("a pool pod");
    let parent = format!("rktlet-test-{}/pod-limits", &net.name);
    let mut config = pod_config("pooled-limits", &[]);
    let res = |memory: i64| cri::LinuxContainerResources {
        memory_limit_in_bytes: memory,
        cpu_shares: 256,
        ..Default::default()
    };
    config.linux = Some(cri::LinuxPodSandboxConfig {
        cgroup_parent: format!("/{parent}"),
        resources: Some(res(100 << 20)),
        overhead: Some(res(10 << 20)),
        ..Default::default()
    });
    config.log_directory = dir.path().join("logs/pooled-limits").to_string_lossy().into_owned();
    let id = run(&mut rt, &config).await;
    assert_eq!(id, pooled, "served by the pool");
    let pod_dir = mem.join(&parent).join(format!("rktlet-{id}"));
    let limit = || std::fs::read_to_string(pod_dir.join("memory.limit_in_bytes")).expect("limit").trim().to_string();
    assert_eq!(limit(), (110u64 << 20).to_string());
    rt.update_pod_sandbox_resources(cri::UpdatePodSandboxResourcesRequest {
        pod_sandbox_id: id.clone(),
        resources: Some(res(200 << 20)),
        overhead: None,
    })
    .await
    .expect("UpdatePodSandboxResources");
    assert_eq!(limit(), (210u64 << 20).to_string(), "the overhead left out is kept");
    remove(&mut rt, &id).await;
    drop(d);
    remove_cgroup_parent(&parent);
}
