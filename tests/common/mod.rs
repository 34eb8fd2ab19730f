//! Shared helpers for integration tests: start the real `rktlet` binary on a
//! temporary socket and talk to it with a tonic client over that socket.
#![allow(dead_code)]

use rktlet::proto::v1::image_service_client::ImageServiceClient;
use rktlet::proto::v1::runtime_service_client::RuntimeServiceClient;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

pub const BIN: &str = env!("CARGO_BIN_EXE_rktlet");

/// A `rktlet serve` process with its own socket and data dir.
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub dir: tempfile::TempDir,
    /// The CNI configs the daemon uses (the cleanup on drop needs them for DEL).
    pub cni_conf_dir: PathBuf,
}

impl Daemon {
    /// Starts `rktlet serve` with a temporary socket, data dir and CNI conf dir,
    /// plus `extra` flags, and waits until the socket accepts connections.
    pub fn start(extra: &[&str]) -> Daemon {
        Self::start_with(Command::new(BIN), extra)
    }

    /// [`Daemon::start`] with the daemon under a seccomp filter of its own,
    /// as a node in a container keeps its engine's (or a service manager
    /// confines the daemon): every pod inherits it, and the kernel refuses
    /// the daemon the filters of others. The filter denies `kexec_load` and
    /// `pidfd_getfd` (EPERM; systemd-nspawn's filter, which a node in a
    /// container keeps, lets no pidfd_getfd through) and lets everything
    /// else through.
    pub fn start_under_seccomp(extra: &[&str]) -> Daemon {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(BIN);
        // SAFETY: in the forked child before exec: prctl(2) with a program on
        // this closure's stack, alive for the call; async-signal-safe only.
        unsafe {
            cmd.pre_exec(|| {
                let ld = |k| libc::sock_filter {
                    code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
                    jt: 0,
                    jf: 0,
                    k,
                };
                let ret = |k| libc::sock_filter { code: (libc::BPF_RET | libc::BPF_K) as u16, jt: 0, jf: 0, k };
                let jeq = |k, jt, jf| libc::sock_filter {
                    code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                    jt,
                    jf,
                    k,
                };
                let mut program = [
                    ld(4),                  // arch
                    jeq(0xc000_003e, 0, 5), // x86_64 only (the tests' machines)
                    ld(0),                  // nr
                    jeq(libc::SYS_kexec_load as u32, 2, 0),
                    jeq(libc::SYS_pidfd_getfd as u32, 1, 0),
                    ret(libc::SECCOMP_RET_ALLOW),
                    ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
                    ret(libc::SECCOMP_RET_ALLOW),
                ];
                let prog = libc::sock_fprog { len: program.len() as u16, filter: program.as_mut_ptr() };
                if libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const libc::sock_fprog) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Self::start_with(cmd, extra)
    }

    /// [`Daemon::start`] through `cmd` (a command that runs the rktlet binary).
    pub fn start_with(cmd: Command, extra: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("run/rktlet.sock");
        let child = Self::spawn_with(cmd, &socket, dir.path(), extra, &[]);
        let cni_conf_dir = Self::cni_conf_dir(dir.path(), extra);
        let mut d = Daemon { child, socket, dir, cni_conf_dir };
        d.wait_ready();
        d
    }

    /// The `--cni-conf-dir` among `extra`, or the default of [`Daemon::spawn`].
    pub fn cni_conf_dir(dir: &Path, extra: &[&str]) -> PathBuf {
        extra
            .iter()
            .position(|a| *a == "--cni-conf-dir")
            .and_then(|i| extra.get(i + 1))
            .map(PathBuf::from)
            .unwrap_or_else(|| dir.join("net.d"))
    }

    /// Spawns `rktlet serve`; the CNI conf dir defaults to an empty `<dir>/net.d`.
    pub fn spawn(socket: &Path, dir: &Path, extra: &[&str]) -> Child {
        Self::spawn_env(socket, dir, extra, &[])
    }

    /// [`Daemon::spawn`] with extra environment variables.
    pub fn spawn_env(socket: &Path, dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Child {
        Self::spawn_with(Command::new(BIN), socket, dir, extra, env)
    }

    /// [`Daemon::spawn_env`] through `cmd`, a command that ends with the
    /// rktlet binary (a wrapper such as `unshare ... rktlet`).
    pub fn spawn_with(mut cmd: Command, socket: &Path, dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Child {
        cmd.envs(env.iter().copied());
        cmd.arg("serve").arg("--socket").arg(socket).arg("--data-dir").arg(dir.join("data"));
        if !extra.contains(&"--cni-conf-dir") {
            cmd.arg("--cni-conf-dir").arg(dir.join("net.d"));
        }
        // tests that are not about the pod pool see every pod cold-started
        if !extra.contains(&"--pod-pool-size") {
            cmd.arg("--pod-pool-size").arg("0");
        }
        // a file, not a pipe: nobody reads the log while the daemon runs, and a full pipe would block it
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(dir.join("daemon.log")).expect("daemon log");
        cmd.args(extra)
            .env("RUST_LOG", std::env::var("RKTLET_TEST_LOG").unwrap_or_else(|_| "rktlet=debug".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn rktlet serve")
    }

    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("rktlet exited early with {status}: {}", self.log());
            }
            assert!(Instant::now() < deadline, "rktlet did not listen on {} in 20s", self.socket.display());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What the daemon logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    pub async fn runtime(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(channel(&self.socket).await)
    }

    pub async fn images(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(channel(&self.socket).await)
    }

    /// Sends `signal` and waits for the process to exit.
    pub fn signal_and_wait(&mut self, signal: nix::sys::signal::Signal) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("kill");
        wait_timeout(&mut self.child, Duration::from_secs(20)).expect("rktlet did not exit within 20s")
    }
}

impl Drop for Daemon {
    /// Stops the daemon and removes every pod it left (a failed test must not
    /// leave pods booted on the machine).
    fn drop(&mut self) {
        // a failed test shows what its daemon said last (its directory goes with it)
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "---- the daemon's log, last {} lines ----\n{}",
                lines.len().min(80),
                lines[lines.len().saturating_sub(80)..].join("\n")
            );
        }
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let data = self.dir.path().join("data");
        for state in ["run", "prepare", "embryo"] {
            let Ok(entries) = std::fs::read_dir(data.join("pods").join(state)) else { continue };
            for e in entries.flatten() {
                let _ = Command::new(BIN)
                    .arg("--dir")
                    .arg(&data)
                    .arg("--cni-conf-dir")
                    .arg(&self.cni_conf_dir)
                    .arg("rm")
                    .arg(e.file_name())
                    .status();
            }
        }
    }
}

/// A gRPC channel over a unix socket.
pub async fn channel(socket: &Path) -> Channel {
    rktlet::client::channel(socket).await.expect("connect over unix socket")
}

pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Fails the test if anything of the given pods is left on the host: a pod
/// directory, a mount under the data dir, a cgroup, a network namespace or a
/// process.
pub fn assert_no_leaks(data_dir: &Path, uuids: &[String]) {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let data = data_dir.to_string_lossy().to_string();
    let leaked: Vec<&str> =
        mounts.lines().filter(|l| l.split(' ').nth(4).is_some_and(|m| m.starts_with(&data))).collect();
    assert!(leaked.is_empty(), "mounts left under {data}: {leaked:?}");
    for uuid in uuids {
        // the daemon deletes a removed pod's directory just after the removal
        let trashed = data_dir.join("tmp/rktlet-trash").join(uuid);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while trashed.exists() {
            assert!(std::time::Instant::now() < deadline, "removed pod's directory not deleted: {}", trashed.display());
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        for state in ["embryo", "prepare", "prepared", "run", "exited-garbage", "garbage"] {
            let dir = data_dir.join("pods").join(state).join(uuid);
            assert!(!dir.exists(), "pod directory left: {}", dir.display());
        }
        let name = format!("rktlet-{uuid}");
        let found = find_dirs_named(Path::new("/sys/fs/cgroup"), &name, 6);
        assert!(found.is_empty(), "cgroups left: {found:?}");
        for netns in [format!("/var/run/netns/rktlet-{uuid}"), format!("/run/netns/rktlet-{uuid}")] {
            assert!(!Path::new(&netns).exists(), "netns left: {netns}");
        }
        let procs = processes_mentioning(uuid);
        assert!(procs.is_empty(), "processes left: {procs:?}");
        // CNI leftovers: iptables rules (bridge masquerading, portmap) name the
        // container id in a comment; host-local leases hold it in their file
        for table in ["nat", "filter"] {
            // iptables is a dependency (scripts/install-deps.sh): a check that cannot run fails
            let out = Command::new("iptables-save").args(["-t", table]).output().expect("run iptables-save");
            assert!(out.status.success(), "iptables-save -t {table}: {}", String::from_utf8_lossy(&out.stderr));
            let rules = String::from_utf8_lossy(&out.stdout);
            let named: Vec<&str> = rules.lines().filter(|l| l.contains(uuid.as_str())).collect();
            assert!(named.is_empty(), "iptables {table} rules left: {named:?}");
        }
        let leases = leases_naming(uuid);
        assert!(leases.is_empty(), "IP leases left: {leases:?}");
    }
}

/// host-local lease files (in the default data dir) whose content is `uuid`.
fn leases_naming(uuid: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(nets) = std::fs::read_dir("/var/lib/cni/networks") else { return out };
    for net in nets.flatten() {
        let Ok(files) = std::fs::read_dir(net.path()) else { continue };
        for f in files.flatten() {
            if std::fs::read_to_string(f.path()).is_ok_and(|c| c.lines().next() == Some(uuid)) {
                out.push(f.path());
            }
        }
    }
    out
}

fn find_dirs_named(dir: &Path, name: &str, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let Ok(t) = e.file_type() else { continue };
        if !t.is_dir() || t.is_symlink() {
            continue;
        }
        if e.file_name().to_string_lossy() == name {
            out.push(e.path());
        } else if depth > 0 {
            out.extend(find_dirs_named(&e.path(), name, depth - 1));
        }
    }
    out
}

/// Processes whose command line mentions `needle` (a pod uuid appears in nspawn's).
pub fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return out };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) {
            out.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
        }
    }
    out
}

/// A CRI pod config with the given name and labels.
pub fn pod_config(name: &str, labels: &[(&str, &str)]) -> rktlet::proto::v1::PodSandboxConfig {
    use rktlet::proto::v1 as cri;
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        annotations: [("team".to_string(), "rktlet".to_string())].into(),
        ..Default::default()
    }
}

/// The same config on the node's network namespace.
pub fn host_network(mut config: rktlet::proto::v1::PodSandboxConfig) -> rktlet::proto::v1::PodSandboxConfig {
    use rktlet::proto::v1 as cri;
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
    config
}

/// A daemon whose pods get a CNI network of the test's own: the directory
/// holding the network's config, the network (its bridge deleted on drop)
/// and the daemon.
pub fn daemon_with_network() -> (tempfile::TempDir, TestNetwork, Daemon) {
    let dir = tempfile::tempdir().expect("tempdir");
    let net = TestNetwork::new(dir.path());
    let conf = net.conf_dir.to_string_lossy().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni"]);
    (dir, net, d)
}

/// A CNI network of one test: its own bridge and /24, so tests running at the
/// same time never share addresses. The bridge is deleted on drop.
pub struct TestNetwork {
    pub conf_dir: PathBuf,
    pub name: String,
    pub bridge: String,
    pub subnet_prefix: String,
}

impl TestNetwork {
    pub fn new(dir: &Path) -> TestNetwork {
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let n = u32::from_str_radix(&tag[..4], 16).expect("hex");
        let subnet_prefix = format!("10.{}.{}", 200 + n % 50, (n / 50) % 250);
        let name = format!("t{}", &tag[..8]);
        let bridge = format!("rkt{}", &tag[..8]);
        let conf_dir = dir.join("net.d");
        std::fs::create_dir_all(&conf_dir).expect("net.d");
        let conf = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": name,
            "plugins": [
                {"type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": true,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": format!("{subnet_prefix}.0/24")}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
            ]
        });
        std::fs::write(conf_dir.join("10-test.conflist"), conf.to_string()).expect("conflist");
        TestNetwork { conf_dir, name, bridge, subnet_prefix }
    }

    /// Addresses host-local still has allocated in this network.
    pub fn allocated(&self) -> Vec<String> {
        std::fs::read_dir(Path::new("/var/lib/cni/networks").join(&self.name))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("10."))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for TestNetwork {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.bridge]).status();
        let _ = std::fs::remove_dir_all(Path::new("/var/lib/cni/networks").join(&self.name));
    }
}
pub mod aci;
pub mod crictl;
pub mod http;
pub mod ports;
pub mod registry;

/// Host pid of a running pod's systemd (the single child of its `ppid`).
pub fn pod_pid1(data: &Path, pod: &str) -> i32 {
    let ppid: i32 = std::fs::read_to_string(data.join("pods/run").join(pod).join("ppid"))
        .expect("ppid")
        .trim()
        .parse()
        .expect("pid");
    rktlet::stage1::inject::pod_pid1(ppid).expect("pod pid 1")
}

/// Pulls the fixture registry's busybox through the daemon; returns its reference.
pub async fn pull_busybox(d: &Daemon) -> String {
    pull(d, &busybox_ref()).await
}

/// The busybox image the tests run: `RKTLET_TEST_IMAGE` where the node lane
/// serves one (the VM has no registry of its own), else the seeded registry's.
pub fn busybox_ref() -> String {
    std::env::var("RKTLET_TEST_IMAGE").unwrap_or_else(|_| format!("{}/busybox:latest", registry::registry().main))
}

/// Pulls `image` through the daemon; returns the reference.
pub async fn pull(d: &Daemon, image: &str) -> String {
    use rktlet::proto::v1 as cri;
    d.images()
        .await
        .pull_image(cri::PullImageRequest {
            image: Some(cri::ImageSpec { image: image.to_string(), ..Default::default() }),
            ..Default::default()
        })
        .await
        .expect("PullImage");
    image.to_string()
}

/// ExecSync of `cmd` in a container (5 s timeout).
pub async fn exec_sync(
    rt: &mut RuntimeServiceClient<Channel>,
    container: &str,
    cmd: &[&str],
) -> rktlet::proto::v1::ExecSyncResponse {
    rt.exec_sync(rktlet::proto::v1::ExecSyncRequest {
        container_id: container.to_string(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout: 5,
    })
    .await
    .expect("ExecSync")
    .into_inner()
}
pub mod test_pod;

/// A container running `command` in `image`, logging to `<name>.log`, in a
/// PID namespace of its own as kubelet asks by default.
pub fn container_config(name: &str, image: &str, command: &[&str]) -> rktlet::proto::v1::ContainerConfig {
    use rktlet::proto::v1 as cri;
    let namespaces = cri::NamespaceOption { pid: cri::NamespaceMode::Container as i32, ..Default::default() };
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata { name: name.into(), attempt: 0 }),
        image: Some(cri::ImageSpec { image: image.into(), ..Default::default() }),
        command: command.iter().map(|s| s.to_string()).collect(),
        log_path: format!("{name}.log"),
        linux: Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                namespace_options: Some(namespaces),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// RunPodSandbox; the pod's id.
pub async fn run_pod(rt: &mut RuntimeServiceClient<Channel>, config: &rktlet::proto::v1::PodSandboxConfig) -> String {
    use rktlet::proto::v1 as cri;
    rt.run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id
}

/// ContainerStatus of `id` (not verbose).
pub async fn container_status(rt: &mut RuntimeServiceClient<Channel>, id: &str) -> rktlet::proto::v1::ContainerStatus {
    rt.container_status(rktlet::proto::v1::ContainerStatusRequest { container_id: id.into(), verbose: false })
        .await
        .expect("ContainerStatus")
        .into_inner()
        .status
        .expect("status")
}

/// CreateContainer and StartContainer in `pod`; the container's id.
pub async fn start_container(
    rt: &mut RuntimeServiceClient<Channel>,
    pod: &str,
    pod_config: &rktlet::proto::v1::PodSandboxConfig,
    config: rktlet::proto::v1::ContainerConfig,
) -> String {
    let id = create_container(rt, pod, pod_config, config).await;
    rt.start_container(rktlet::proto::v1::StartContainerRequest { container_id: id.clone() })
        .await
        .expect("StartContainer");
    id
}

/// PodSandboxStatus of `pod` (not verbose).
pub async fn pod_status(rt: &mut RuntimeServiceClient<Channel>, pod: &str) -> rktlet::proto::v1::PodSandboxStatus {
    rt.pod_sandbox_status(rktlet::proto::v1::PodSandboxStatusRequest { pod_sandbox_id: pod.into(), verbose: false })
        .await
        .expect("PodSandboxStatus")
        .into_inner()
        .status
        .expect("status")
}

/// CreateContainer in `pod`; the container's id.
pub async fn create_container(
    rt: &mut RuntimeServiceClient<Channel>,
    pod: &str,
    pod_config: &rktlet::proto::v1::PodSandboxConfig,
    config: rktlet::proto::v1::ContainerConfig,
) -> String {
    use rktlet::proto::v1 as cri;
    rt.create_container(cri::CreateContainerRequest {
        pod_sandbox_id: pod.to_string(),
        config: Some(config),
        sandbox_config: Some(pod_config.clone()),
    })
    .await
    .expect("CreateContainer")
    .into_inner()
    .container_id
}

/// Listens on `port` in the pod's network namespace, sends `reply` to the
/// first connection, and returns what a connection to the node's
/// `host_port` received (a CNI port mapping at work).
pub fn via_host_port(pod: &str, port: u16, host_port: u16, reply: &'static str) -> String {
    let netns = rktlet::net::netns::Netns::open(format!("/var/run/netns/rktlet-{pod}")).expect("pod netns");
    let listener =
        netns.run(move || std::net::TcpListener::bind(("0.0.0.0", port))).expect("enter netns").expect("bind in pod");
    let server = std::thread::spawn(move || {
        use std::io::Write;
        let (mut conn, _) = listener.accept().expect("accept");
        conn.write_all(reply.as_bytes()).expect("write");
    });
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", host_port)).expect("connect to hostPort");
    let mut got = String::new();
    std::io::Read::read_to_string(&mut conn, &mut got).expect("read");
    server.join().expect("server");
    got
}

/// The project's way to say a check could not run here: one line
/// `SKIPPED: <test>: <reason>` on the test process's stderr (written past
/// the test harness's capture, so it shows and can be counted), and the
/// caller returns. CI lanes that must run the check fail on such a line.
pub fn skipped(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {reason}");
}

/// A static program of `tests/fixtures/<name>.c` (cc from build-essential,
/// static glibc from libc6-dev), built into a directory of its own, to
/// bind read-only into containers (busybox cannot make every system call).
pub fn static_program(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("program dir");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(format!("{name}.c"));
    let out = Command::new("cc")
        .args(["-static", "-O1", "-pthread", "-o"])
        .arg(dir.path().join(name))
        .arg(&source)
        .output()
        .expect("cc (apt build-essential)");
    assert!(out.status.success(), "cc {}: {}", source.display(), String::from_utf8_lossy(&out.stderr));
    dir
}

/// `podResources` of the verbose PodSandboxStatus (the pod-level limits
/// recorded and those its cgroup holds).
pub async fn pod_resources_status(rt: &mut RuntimeServiceClient<Channel>, pod: &str) -> serde_json::Value {
    use rktlet::proto::v1 as cri;
    let r = rt
        .pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: pod.into(), verbose: true })
        .await
        .expect("PodSandboxStatus")
        .into_inner();
    let info: serde_json::Value = serde_json::from_str(&r.info["info"]).expect("info is JSON");
    info["podResources"].clone()
}

/// Pod-level resources for the resize tests: `memory` bytes, `shares`, and
/// a quota of half a CPU.
pub fn pod_resources(memory: i64, shares: i64) -> rktlet::proto::v1::LinuxContainerResources {
    rktlet::proto::v1::LinuxContainerResources {
        memory_limit_in_bytes: memory,
        cpu_shares: shares,
        cpu_quota: 50_000,
        cpu_period: 100_000,
        ..Default::default()
    }
}

/// The parent pid of `pid` (0 when it is gone).
pub fn parent_of(pid: i32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").and_then(|(_, rest)| rest.split(' ').nth(1)?.parse().ok()))
        .unwrap_or(0)
}
