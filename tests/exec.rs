//! ExecSync through the daemon's socket into real containers: the command
//! runs as a copy of the app's main process (its rootfs, user, environment,
//! working directory, capabilities, namespaces and cgroups), its output and
//! exit code come back, a timeout answers DeadlineExceeded, and `rktlet app
//! exec` (the CLI, no daemon) gives the same answers.

mod common;

use common::{BIN, Daemon, assert_no_leaks, host_network, pod_config};
use rktlet::proto::v1 as cri;
use rktlet::proto::v1::runtime_service_client::RuntimeServiceClient;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

async fn exec(
    rt: &mut RuntimeServiceClient<Channel>,
    id: &str,
    cmd: &[&str],
    timeout: i64,
) -> Result<cri::ExecSyncResponse, tonic::Status> {
    rt.exec_sync(cri::ExecSyncRequest {
        container_id: id.into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout,
    })
    .await
    .map(|r| r.into_inner())
}

/// Host pids of the processes in an app's unit cgroup.
fn unit_processes(pod: &str, app: &str) -> Vec<String> {
    // the pod's cgroup is `rktlet-<pod>` (cgroupfs driver) or `rktlet-<pod>.service` (systemd)
    let unit = format!("/payload/system.slice/{app}.service");
    std::fs::read_dir("/proc")
        .expect("proc")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter(|e| {
            std::fs::read_to_string(e.path().join("cgroup"))
                .is_ok_and(|c| c.lines().any(|l| l.contains(pod) && l.ends_with(&unit)))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_sync_runs_inside_the_container() {
    let d = Daemon::start(&[]);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let logs = tempfile::tempdir().expect("logs");
    let mut pod_config = host_network(pod_config("execpod", &[]));
    pod_config.log_directory = logs.path().display().to_string();
    let pod = common::run_pod(&mut rt, &pod_config).await;
    let config = cri::ContainerConfig {
        envs: vec![cri::KeyValue { key: "FOO".into(), value: "bar baz".into() }],
        working_dir: "/tmp".into(),
        linux: Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                run_as_user: Some(cri::Int64Value { value: 1000 }),
                capabilities: Some(cri::Capability { drop_capabilities: vec!["KILL".into()], ..Default::default() }),
                no_new_privs: true,
                namespace_options: Some(cri::NamespaceOption {
                    pid: cri::NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..common::container_config("web", &image, &["sh", "-c", "echo started > /tmp/marker; exec sleep 100000"])
    };
    let id = common::create_container(&mut rt, &pod, &pod_config, config).await;
    let e = exec(&mut rt, &id, &["true"], 5).await.expect_err("created, not started");
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("StartContainer");

    // the app's view: its file, user, env, cwd, hostname, the app as PID 1 of its own namespace, NoNewPrivs, KILL dropped
    let deadline = Instant::now() + Duration::from_secs(10);
    let script = "cat /tmp/marker; id -u; echo $FOO; pwd; hostname; cat /proc/1/comm; \
                  grep NoNewPrivs /proc/self/status; grep CapBnd /proc/self/status; echo oops >&2; exit 3";
    let out = loop {
        let out = exec(&mut rt, &id, &["sh", "-c", script], 10).await.expect("ExecSync");
        if text(&out.stdout).starts_with("started") || Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(&lines[..6], ["started", "1000", "bar baz", "/tmp", "execpod", "sleep"], "{stdout}");
    assert_eq!(lines[6].split_whitespace().collect::<Vec<_>>(), ["NoNewPrivs:", "1"]);
    let capbnd = u64::from_str_radix(lines[7].split_whitespace().nth(1).expect("mask"), 16).expect("hex");
    assert_eq!(capbnd & (1 << 5), 0, "KILL is dropped in the exec'd process too: {stdout}");
    assert_eq!((out.exit_code, text(&out.stderr)), (3, "oops\n".to_string()));

    // it ran in the app's cgroup: stopping the container ends it too
    let out = exec(&mut rt, &id, &["cat", "/proc/self/cgroup"], 5).await.expect("cgroup");
    assert!(text(&out.stdout).contains("web.service"), "{}", text(&out.stdout));
    // with default signal dispositions and an empty mask, not the daemon's (which ignores SIGPIPE)
    let out = exec(&mut rt, &id, &["grep", "-E", "^Sig(Ign|Blk):", "/proc/self/status"], 5).await.expect("signals");
    let lines: Vec<String> =
        text(&out.stdout).lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
    assert_eq!(lines, ["SigBlk: 0000000000000000", "SigIgn: 0000000000000000"], "{}", text(&out.stdout));

    // errors a probe must tell apart
    // (the app, and appexec waiting for it as the unit's main process)
    let app_processes = unit_processes(&pod, "0-web").len();
    assert_eq!(app_processes, 2);
    let t = Instant::now();
    let e = exec(&mut rt, &id, &["sleep", "30"], 1).await.expect_err("timeout");
    assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(10));
    // the killed command is reaped, not left in the app's cgroup (it would keep the pod from stopping)
    let deadline = Instant::now() + Duration::from_secs(5);
    while unit_processes(&pod, "0-web").len() > app_processes && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(unit_processes(&pod, "0-web").len(), app_processes, "only the app's own processes are left");
    let e = exec(&mut rt, &id, &["no-such-program"], 5).await.expect_err("missing program");
    assert!(e.message().contains("No such file") && e.message().contains("not found in its PATH /"), "{e:?}");
    // more output than ExecSync keeps (16 MiB a stream): refused as containerd refuses it,
    // never a cut answer that reads as the whole output
    let e = exec(&mut rt, &id, &["head", "-c", "17000000", "/dev/zero"], 20).await.expect_err("too much output");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("16 MiB"), "{e:?}");
    let out = exec(&mut rt, &id, &["head", "-c", "1000000", "/dev/zero"], 20).await.expect("1 MB is kept");
    assert_eq!(out.stdout.len(), 1_000_000);
    let e = exec(&mut rt, &id, &[], 5).await.expect_err("empty");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    let e = exec(&mut rt, &format!("{pod}:0-nothing"), &["true"], 5).await.expect_err("unknown");
    assert_eq!(e.code(), tonic::Code::NotFound);

    // the CLI, with no daemon involved, gives the command's output and exit code
    let (uuid, app) = id.split_once(':').expect("pod:app");
    let cli = std::process::Command::new(BIN)
        .arg("--dir")
        .arg(d.dir.path().join("data"))
        .args(["app", "exec", uuid, &format!("--app={app}"), "--timeout=5", "--", "sh", "-c", "echo $FOO; exit 4"])
        .output()
        .expect("rktlet app exec");
    assert_eq!((cli.status.code(), text(&cli.stdout)), (Some(4), "bar baz\n".to_string()), "{}", text(&cli.stderr));
    // on a terminal (util-linux `script` provides one) the command gets a terminal of its own
    let line = format!(
        "{BIN} --dir {} app exec {uuid} --app={app} -- sh -c '[ -t 0 ] && echo on-a-tty; stty size; exit 3'",
        d.dir.path().join("data").display()
    );
    let tty = std::process::Command::new("script")
        .args(["-qefc", &line, "/dev/null"])
        .env("COLUMNS", "91")
        .env("LINES", "27")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script");
    let shown = text(&tty.stdout);
    assert!(shown.contains("on-a-tty"), "{shown:?} {}", text(&tty.stderr));
    assert_eq!(tty.status.code(), Some(3), "{shown:?}");

    rt.stop_container(cri::StopContainerRequest { container_id: id.clone(), timeout: 5 }).await.expect("stop");
    let e = exec(&mut rt, &id, &["true"], 5).await.expect_err("stopped");
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove pod");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

/// Where the v1 hierarchy of `controller` is mounted on the node, if it is.
fn v1_mount(controller: &str) -> Option<std::path::PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut post = post.split(' ');
        let (fstype, options) = (post.next()?, post.nth(1)?);
        (fstype == "cgroup" && options.split(',').any(|o| o == controller))
            .then(|| std::path::PathBuf::from(pre.split(' ').nth(4).unwrap_or_default()))
    })
}

/// The directory of `pid`'s cgroup in the v1 hierarchy mounted at `mount`
/// (holding `controller`).
fn v1_cgroup_of(pid: &str, controller: &str, mount: &std::path::Path) -> std::path::PathBuf {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("the app's cgroups");
    let path = cgroups
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':').skip(1);
            parts.next().zip(parts.next())
        })
        .find(|(controllers, _)| controllers.split(',').any(|c| c == controller))
        .map(|(_, path)| path.trim_start_matches('/').to_string())
        .unwrap_or_else(|| panic!("no {controller} line in {cgroups}"));
    mount.join(path)
}

/// On a node whose systemd manages the v1 hierarchies, pods of the
/// cgroupfs driver (made beside systemd's units) have their processes moved
/// to the hierarchy's root when systemd turns a controller on or off for its
/// slices, and their emptied cgroups removed (seen on the node lane's
/// systemd node: `systemd-run -p IOAccounting=yes` moves them out of blkio,
/// a unit with CPU shares out of cpu; containerd's containers too, whose
/// execs then fail). Done here by hand to an app's memory, cpu and devices
/// cgroups: two execs at once still run in the app's own cgroups, and one
/// puts the app back in them, made again with its limits and device list.
/// A running app with a memory limit, a CPU quota and its own device list,
/// and its memory, cpu and devices cgroups: (controller, hierarchy, cgroup).
struct Stray {
    pod: String,
    id: String,
    app: String,
    own: [(&'static str, std::path::PathBuf, std::path::PathBuf); 3],
    device_list: String,
}

/// [`Stray`]'s app started, then moved out as the node's systemd moves it:
/// every process to the hierarchy's root, the emptied cgroup removed. None
/// (after a counted SKIPPED line) without the three v1 hierarchies.
async fn a_stray(test: &str, d: &Daemon, rt: &mut RuntimeServiceClient<Channel>) -> Option<Stray> {
    let (Some(memory), Some(cpu), Some(devices)) = (v1_mount("memory"), v1_mount("cpu"), v1_mount("devices")) else {
        common::skipped(test, "no v1 memory, cpu and devices hierarchies: nothing moves an app between them");
        return None;
    };
    let image = common::pull_busybox(d).await;
    let pod_config = host_network(pod_config("strays", &[]));
    let pod = common::run_pod(rt, &pod_config).await;
    let mut config = common::container_config("stray", &image, &["sleep", "100000"]);
    config.linux.get_or_insert_default().resources = Some(cri::LinuxContainerResources {
        memory_limit_in_bytes: 64 << 20,
        cpu_period: 100_000,
        cpu_quota: 20_000,
        ..Default::default()
    });
    let id = common::start_container(rt, &pod, &pod_config, config).await;
    let procs = unit_processes(&pod, "0-stray");
    let app = procs
        .iter()
        .find(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep"))
        .unwrap_or_else(|| panic!("no sleep among the unit's processes {procs:?}"))
        .clone();
    let own = [("memory", memory), ("cpu", cpu), ("devices", devices)].map(|(controller, mount)| {
        let dir = v1_cgroup_of(&app, controller, &mount);
        (controller, mount, dir)
    });
    for (_, _, dir) in &own {
        assert!(dir.ends_with("app-0-stray"), "the app is in a cgroup of its own: {}", dir.display());
    }
    let device_list = read_cgroup(&own[2].2, "devices.list");
    assert!(!device_list.contains("a *:* rwm"), "{device_list}");
    Some(Stray { pod, id, app, own, device_list })
}

fn read_cgroup(dir: &std::path::Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()))
        .trim()
        .to_string()
}

impl Stray {
    /// What the node's systemd does: every process to the root, the emptied
    /// cgroup removed (again while the daemon's check puts the app back
    /// meanwhile: the removal then finds processes in it).
    fn move_out(&self) {
        for (_, mount, dir) in &self.own {
            for attempt in 0.. {
                let pids = std::fs::read_to_string(dir.join("cgroup.procs")).expect("cgroup.procs");
                for pid in pids.lines() {
                    std::fs::write(mount.join("cgroup.procs"), pid).expect("moving a process of the app to the root");
                }
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempt < 10 => {}
                    Err(e) => panic!("removing {}: {e}", dir.display()),
                }
            }
        }
    }

    /// Whether the app is in each of its own cgroups again.
    fn back(&self) -> bool {
        self.own.iter().all(|(controller, mount, dir)| &v1_cgroup_of(&self.app, controller, mount) == dir)
    }

    /// The app back in its own cgroups, with its limits and device list.
    fn assert_back(&self) {
        for (controller, mount, dir) in &self.own {
            assert_eq!(&v1_cgroup_of(&self.app, controller, mount), dir, "the app is back in its {controller} cgroup");
        }
        assert_eq!(
            read_cgroup(&self.own[0].2, "memory.limit_in_bytes"),
            (64u64 << 20).to_string(),
            "its memory limit is back"
        );
        assert_eq!(read_cgroup(&self.own[1].2, "cpu.cfs_quota_us"), "20000", "its CPU quota is back");
        assert_eq!(
            read_cgroup(&self.own[2].2, "devices.list"),
            self.device_list,
            "its device list is back, not its parent's"
        );
    }

    async fn remove(self, d: &Daemon, rt: &mut RuntimeServiceClient<Channel>) {
        let pod = self.pod;
        rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("stop pod");
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove pod");
        assert_no_leaks(&d.dir.path().join("data"), &[pod]);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exec_puts_an_app_moved_out_of_its_cgroups_back() {
    // (the daemon's own check off: the exec must do it)
    let mut cmd = std::process::Command::new(BIN);
    cmd.env("RKTLET_CGROUP_CHECK", "0");
    let d = Daemon::start_with(cmd, &[]);
    let mut rt = d.runtime().await;
    let Some(stray) = a_stray("an_exec_puts_an_app_moved_out_of_its_cgroups_back", &d, &mut rt).await else { return };
    let before = exec(&mut rt, &stray.id, &["cat", "/proc/self/cgroup"], 10).await.expect("ExecSync");
    stray.move_out();
    assert_eq!(&v1_cgroup_of(&stray.app, "memory", &stray.own[0].1), &stray.own[0].1, "moved");

    // (two at once, as a liveness and a readiness probe may be)
    let mut rt2 = d.runtime().await;
    let cmd = ["cat", "/proc/self/cgroup"];
    let (a, b) = tokio::join!(exec(&mut rt, &stray.id, &cmd, 10), exec(&mut rt2, &stray.id, &cmd, 10));
    for after in [a, b] {
        let after = after.expect("an exec into the moved app");
        assert_eq!(text(&after.stdout), text(&before.stdout), "the command runs in the app's own cgroups");
    }
    stray.assert_back();
    stray.remove(&d, &mut rt).await;
}

/// The same move with no exec to notice it (a pod without exec probes):
/// the daemon's own check (`RKTLET_CGROUP_CHECK` seconds apart, here 1)
/// puts the app back, with its limits and device list.
#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_puts_an_app_moved_out_of_its_cgroups_back_unasked() {
    let mut cmd = std::process::Command::new(BIN);
    cmd.env("RKTLET_CGROUP_CHECK", "1");
    let d = Daemon::start_with(cmd, &[]);
    let mut rt = d.runtime().await;
    let Some(stray) = a_stray("the_daemon_puts_an_app_moved_out_of_its_cgroups_back_unasked", &d, &mut rt).await else {
        return;
    };
    stray.move_out();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !stray.back() {
        assert!(Instant::now() < deadline, "the app is still out of its cgroups after 20 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stray.assert_back();
    stray.remove(&d, &mut rt).await;
}
