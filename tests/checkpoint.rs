//! Checkpoint and restore with CRIU: `crictl checkpoint --export` writes
//! the CRI's checkpoint archive while the container keeps running; a
//! container created from that archive (its path as the image) in another
//! pod continues where the checkpoint was. Driven with the official crictl,
//! the refusals over gRPC. Where CRIU cannot run, the tests say SKIPPED.

mod common;

use common::{assert_no_leaks, crictl};
use rktlet::proto::v1 as cri;
use std::path::Path;
use std::time::{Duration, Instant};

/// Why CRIU cannot checkpoint here, if it cannot.
fn criu_missing() -> Option<String> {
    let criu = match rktlet::container::checkpoint::criu_binary() {
        Ok(p) => p,
        Err(e) => return Some(e.to_string()),
    };
    let out = std::process::Command::new(&criu).arg("check").output().expect("run criu check");
    (!out.status.success())
        .then(|| format!("`{} check` fails: {}", criu.display(), String::from_utf8_lossy(&out.stderr).trim()))
}

/// The numbers the counter wrote to a CRI log so far.
fn numbers(log: &Path) -> Vec<u64> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.rsplit(' ').next().and_then(|n| n.parse().ok()))
        .collect()
}

fn wait_for_numbers(log: &Path, at_least: usize) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n = numbers(log);
        if n.len() >= at_least {
            return n;
        }
        assert!(Instant::now() < deadline, "{} has {} numbers, not {at_least}", log.display(), n.len());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn state(sock: &Path, ctr: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(&crictl::ok(sock, &["inspect", ctr])).expect("inspect json");
    v["status"]["state"].as_str().unwrap_or_default().to_string()
}

/// The archive's entries: name and content.
fn entries(archive: &Path) -> Vec<(String, Vec<u8>)> {
    let mut tar = tar::Archive::new(std::fs::File::open(archive).expect("archive"));
    tar.entries()
        .expect("tar")
        .map(|e| {
            let mut e = e.expect("entry");
            let name = e.path().expect("path").display().to_string();
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut bytes).expect("read");
            (name, bytes)
        })
        .collect()
}

fn capability_lines(status: &str) -> Vec<String> {
    status.lines().filter(|l| l.starts_with("Cap") || l.starts_with("Seccomp:")).map(str::to_string).collect()
}

const COUNTER: &str = "echo made > /made; rm /bin/dmesg; i=0; while :; do i=$((i+1)); echo $i; sleep 0.2; done";

#[tokio::test(flavor = "multi_thread")]
async fn a_checkpointed_container_keeps_running_and_continues_in_a_new_pod() {
    let test = "a_checkpointed_container_keeps_running_and_continues_in_a_new_pod";
    if let Some(why) = criu_missing() {
        return common::skipped(test, &why);
    }
    let (dir, _net, d) = common::daemon_with_network();
    let sock = d.socket.clone();
    let image = common::busybox_ref();
    crictl::ok(&sock, &["pull", &image]);
    let logs = dir.path().join("logs");
    let write = |name: &str, v: serde_json::Value| {
        let path = dir.path().join(name);
        std::fs::write(&path, v.to_string()).expect("write json");
        path.display().to_string()
    };
    let pod_json = |name: &str| {
        serde_json::json!({
            "metadata": { "name": name, "namespace": "default", "uid": format!("{name}-uid"), "attempt": 0 },
            "log_directory": logs.display().to_string(),
        })
    };
    // kubelet's defaults: a PID namespace of its own, RuntimeDefault seccomp
    // volumes as kubelet gives them: a directory, its own /etc/hosts, and a
    // termination log below /dev; each container gets its own
    let volumes = |name: &str| {
        let vol = dir.path().join(format!("vol-{name}"));
        std::fs::create_dir_all(vol.join("data")).expect("volume");
        std::fs::write(vol.join("data/whose"), name).expect("file");
        std::fs::write(vol.join("hosts"), format!("127.0.0.1 {name}\n")).expect("hosts");
        std::fs::write(vol.join("termination-log"), b"").expect("log");
        let at = |p: &str| vol.join(p).display().to_string();
        serde_json::json!([
            { "container_path": "/data", "host_path": at("data") },
            { "container_path": "/etc/hosts", "host_path": at("hosts") },
            { "container_path": "/dev/termination-log", "host_path": at("termination-log") },
        ])
    };
    let ctr_json = |name: &str, image: &str| {
        serde_json::json!({
            "metadata": { "name": name },
            "image": { "image": image },
            "command": ["sh", "-c", COUNTER],
            "log_path": format!("{name}.log"),
            "mounts": volumes(name),
            "linux": { "security_context": {
                "namespace_options": { "pid": 1 },
                "seccomp": { "profile_type": 0 },
            } }
        })
    };
    let pod_a = write("a.json", pod_json("ckpt-a"));
    let ctr_a = write("counter.json", ctr_json("counter", &image));
    let a = crictl::ok(&sock, &["runp", &pod_a]).trim().to_string();
    let counter = crictl::ok(&sock, &["create", &a, &ctr_a, &pod_a]).trim().to_string();
    crictl::ok(&sock, &["start", &counter]);
    let before = *wait_for_numbers(&logs.join("counter.log"), 5).last().expect("a number");
    let caps_before = capability_lines(&crictl::ok(&sock, &["exec", &counter, "cat", "/proc/1/status"]));
    // the LSM label (AppArmor's profile on nodes that enforce it)
    let label = ["sh", "-c", "cat /proc/1/attr/current 2>/dev/null || echo none"];
    let label_before = crictl::ok(&sock, &[&["exec", counter.as_str()][..], &label[..]].concat());

    // its own cgroup at /sys/fs/cgroup (v1: its memory cgroup there), holding its PID 1
    let own_cgroup = ["sh", "-c", "cg=/sys/fs/cgroup; [ -d $cg/memory ] && cg=$cg/memory; cat $cg/cgroup.procs"];
    let procs = crictl::ok(&sock, &[&["exec", counter.as_str()][..], &own_cgroup[..]].concat());
    assert!(procs.lines().any(|l| l == "1"), "the container's own cgroup: {procs}");

    let archive = dir.path().join("counter.tar");
    crictl::ok(&sock, &["checkpoint", &format!("--export={}", archive.display()), &counter]);
    let after = *numbers(&logs.join("counter.log")).last().expect("a number");

    // the archive, as checkpointctl reads it
    let files = entries(&archive);
    let get = |name: &str| {
        files.iter().find(|(n, _)| n.trim_start_matches("./") == name).map(|(_, b)| b.clone()).unwrap_or_else(|| {
            panic!("no {name} in the archive: {:?}", files.iter().map(|(n, _)| n).collect::<Vec<_>>())
        })
    };
    let config: serde_json::Value = serde_json::from_slice(&get("config.dump")).expect("config.dump is JSON");
    assert_eq!(config["rootfsImageName"], image.as_str(), "{config:#}");
    assert_eq!(config["id"], counter.as_str(), "{config:#}");
    assert!(config["checkpointedTime"].as_str().is_some_and(|t| t.ends_with('Z')), "{config:#}");
    let spec: serde_json::Value = serde_json::from_slice(&get("spec.dump")).expect("spec.dump is JSON");
    assert_eq!(spec["annotations"]["io.kubernetes.cri.container-name"], "counter", "{spec:#}");
    assert_eq!(spec["annotations"]["io.kubernetes.cri.sandbox-name"], "ckpt-a", "{spec:#}");
    assert_eq!(spec["process"]["args"][2], COUNTER, "{spec:#}");
    let deleted: Vec<String> = serde_json::from_slice(&get("deleted.files")).expect("deleted.files is JSON");
    let diff = get("rootfs-diff.tar");
    let mut diff = tar::Archive::new(&diff[..]);
    let in_diff: Vec<String> =
        diff.entries().expect("diff").map(|e| e.expect("entry").path().expect("path").display().to_string()).collect();
    assert!(deleted.contains(&"/bin/dmesg".to_string()), "{deleted:?} {in_diff:?}");
    assert!(in_diff.iter().any(|p| p == "made"), "{in_diff:?}");
    // what volumes and the pod mount over the root is not the container's
    assert!(!in_diff.iter().any(|p| p.starts_with("etc/hosts") || p.starts_with("data/")), "{in_diff:?}");
    assert!(String::from_utf8_lossy(&get("dump.log")).contains("Dumping finished successfully"));
    assert!(!get("stats-dump").is_empty());
    get("checkpoint/inventory.img");
    assert!(files.iter().any(|(n, _)| n.trim_start_matches("./").starts_with("checkpoint/pages-")), "no memory pages");

    // the original keeps counting
    wait_for_numbers(&logs.join("counter.log"), numbers(&logs.join("counter.log")).len() + 3);
    assert_eq!(state(&sock, &counter), "CONTAINER_RUNNING");

    // restored into another pod: the archive's path as the image
    let pod_b = write("b.json", pod_json("ckpt-b"));
    let ctr_b = write("restored.json", ctr_json("restored", &archive.display().to_string()));
    let b = crictl::ok(&sock, &["runp", &pod_b]).trim().to_string();
    // a copy of the archive with one file changed
    let altered = |to: &str, file: &str, content: Vec<u8>| {
        let path = dir.path().join(to);
        let mut tar = tar::Builder::new(std::fs::File::create(&path).expect("altered archive"));
        for (name, bytes) in &files {
            let bytes = if name.trim_start_matches("./") == file { &content } else { bytes };
            let mut h = tar::Header::new_gnu();
            h.set_size(bytes.len() as u64);
            h.set_mode(0o600);
            h.set_cksum();
            tar.append_data(&mut h, name, &bytes[..]).expect("append");
        }
        tar.finish().expect("tar");
        path.display().to_string()
    };
    // (not while its base image is missing from the store)
    let mut c = config.clone();
    c["rootfsImageName"] = "localhost:1/never-pulled:1".into();
    c["rootfsImageRef"] = "".into();
    let orphan = altered("orphan.tar", "config.dump", serde_json::to_vec(&c).expect("json"));
    let ctr_orphan = write("orphan.json", ctr_json("orphan", &orphan));
    let refused = crictl::run(&sock, &["create", &b, &ctr_orphan, &pod_b]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("NotFound") && said.contains("never-pulled"), "{said}");
    // CRIU failing to restore fails the start, and the container reads as exited
    let broken = altered("broken.tar", "checkpoint/inventory.img", b"not an image".to_vec());
    let ctr_broken = write("broken.json", ctr_json("broken", &broken));
    let broken = crictl::ok(&sock, &["create", &b, &ctr_broken, &pod_b]).trim().to_string();
    let failed = crictl::run(&sock, &["start", &broken]);
    let said = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success() && said.contains("inventory.img"), "{said}");
    assert_eq!(state(&sock, &broken), "CONTAINER_EXITED");
    crictl::ok(&sock, &["rm", &broken]);
    let restored = crictl::ok(&sock, &["create", &b, &ctr_b, &pod_b]).trim().to_string();
    assert_eq!(state(&sock, &restored), "CONTAINER_CREATED");
    crictl::ok(&sock, &["start", &restored]);
    let got = wait_for_numbers(&logs.join("restored.log"), 5);
    // it goes on from the checkpoint: not from 1, and from no earlier than the
    // last number before the dump nor later than the first after it
    assert!(got[0] > 1 && got[0] > before && got[0] <= after + 1, "restored {got:?}, before {before}, after {after}");
    assert!(got.windows(2).all(|w| w[1] == w[0] + 1), "{got:?}");
    assert_eq!(state(&sock, &restored), "CONTAINER_RUNNING");
    // its root has what the original wrote and lacks what it deleted
    assert_eq!(crictl::ok(&sock, &["exec", &restored, "cat", "/made"]).trim(), "made");
    // its volumes are the new container's
    assert_eq!(crictl::ok(&sock, &["exec", &restored, "cat", "/data/whose"]), "restored");
    assert_eq!(crictl::ok(&sock, &["exec", &restored, "cat", "/etc/hosts"]), "127.0.0.1 restored\n");
    crictl::ok(&sock, &["exec", &restored, "sh", "-c", "echo bye > /dev/termination-log"]);
    assert_eq!(std::fs::read_to_string(dir.path().join("vol-restored/termination-log")).expect("log"), "bye\n");
    let gone = crictl::run(&sock, &["exec", &restored, "ls", "/bin/dmesg"]);
    assert!(!gone.status.success(), "/bin/dmesg is back: {gone:?}");
    // confined as before: PID 1 of its own namespace, the same capabilities and filter
    let caps_after = capability_lines(&crictl::ok(&sock, &["exec", &restored, "cat", "/proc/1/status"]));
    assert_eq!(caps_after, caps_before);
    let label_after = crictl::ok(&sock, &[&["exec", restored.as_str()][..], &label[..]].concat());
    assert_eq!(label_after, label_before);
    assert!(caps_after.iter().any(|l| l.starts_with("Seccomp:") && l.ends_with('2')), "{caps_after:?}");
    // held to its devices: the node's loop0 made and refused, in an exec'd process and, on
    // cgroup v1, the restored process itself in its app's devices cgroup (v2: its unit's)
    let probe = ["sh", "-c", "mknod /tmp/.l0 b 7 0 && (exec 3<>/tmp/.l0) 2>&1; rm -f /tmp/.l0"];
    let refused = crictl::run(&sock, &[&["exec", restored.as_str()][..], &probe[..]].concat());
    let said = String::from_utf8_lossy(&refused.stdout);
    assert!(said.contains("Operation not permitted"), "a restored container opened the node's loop0: {said}");
    let cgroups = crictl::ok(&sock, &["exec", &restored, "cat", "/proc/1/cgroup"]);
    if let Some(devices) = cgroups.lines().find(|l| l.split(':').nth(1) == Some("devices")) {
        assert!(devices.ends_with("/app-0-restored"), "the restored process is not in its devices cgroup: {cgroups}");
    }
    // its own new cgroup at /sys/fs/cgroup, as before
    let procs = crictl::ok(&sock, &[&["exec", restored.as_str()][..], &own_cgroup[..]].concat());
    assert!(procs.lines().any(|l| l == "1"), "the restored container's own cgroup: {procs}");
    // in the new pod's network namespace
    let pid1_b = common::pod_pid1(&d.dir.path().join("data"), &b);
    let net_b = std::fs::read_link(format!("/proc/{pid1_b}/ns/net")).expect("pod b's netns");
    let net = crictl::ok(&sock, &["exec", &restored, "readlink", "/proc/self/ns/net"]);
    assert_eq!(net.trim(), net_b.display().to_string());

    // a restored container can be checkpointed again, and says it was restored
    let second = dir.path().join("restored.tar");
    crictl::ok(&sock, &["checkpoint", &format!("--export={}", second.display()), &restored]);
    let (_, config) = entries(&second).into_iter().find(|(n, _)| n.ends_with("config.dump")).expect("config.dump");
    let config: serde_json::Value = serde_json::from_slice(&config).expect("config.dump is JSON");
    assert_eq!(config["restored"], true, "{config:#}");
    assert_eq!(config["rootfsImageName"], image.as_str(), "{config:#}");

    crictl::ok(&sock, &["stop", "--timeout", "2", &restored]);
    assert_eq!(state(&sock, &restored), "CONTAINER_EXITED");
    crictl::ok(&sock, &["rm", &restored]);
    for pod in [&a, &b] {
        crictl::ok(&sock, &["stopp", pod]);
        crictl::ok(&sock, &["rmp", pod]);
    }
    let data = d.dir.path().join("data");
    assert_no_leaks(&data, &[a, b]);
    assert!(common::processes_mentioning("i=$((i+1))").is_empty(), "a counter is left");
    let staged = |data: &Path| -> Vec<String> {
        let names = std::fs::read_dir(data.join("tmp")).map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>());
        names
            .unwrap_or_default()
            .into_iter()
            .map(|n| n.to_string_lossy().to_string())
            .filter(|n| n.starts_with("checkpoint-") || n.starts_with("restore-"))
            .collect()
    };
    assert!(staged(&data).is_empty(), "{:?}", staged(&data));
}

#[tokio::test(flavor = "multi_thread")]
async fn checkpoints_and_restores_that_cannot_be_are_refused() {
    let (dir, _net, d) = common::daemon_with_network();
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let config = common::pod_config("refusals", &[]);
    let pod = common::run_pod(&mut rt, &config).await;
    let location = dir.path().join("out.tar");
    let checkpoint = |id: &str, location: &Path| cri::CheckpointContainerRequest {
        container_id: id.to_string(),
        location: location.display().to_string(),
        timeout: 60,
    };
    let code = |r: Result<tonic::Response<cri::CheckpointContainerResponse>, tonic::Status>| {
        r.map(drop).expect_err("refused").code()
    };

    let unknown = format!("{pod}:0-nothing");
    assert_eq!(code(rt.checkpoint_container(checkpoint(&unknown, &location)).await), tonic::Code::NotFound);
    // created, not started; then exited
    let done =
        common::create_container(&mut rt, &pod, &config, common::container_config("done", &image, &["true"])).await;
    assert_eq!(code(rt.checkpoint_container(checkpoint(&done, &location)).await), tonic::Code::FailedPrecondition);
    rt.start_container(cri::StartContainerRequest { container_id: done.clone() }).await.expect("start");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = rt
            .container_status(cri::ContainerStatusRequest { container_id: done.clone(), verbose: false })
            .await
            .expect("status")
            .into_inner();
        if s.status.is_some_and(|s| s.state == cri::ContainerState::ContainerExited as i32) {
            break;
        }
        assert!(Instant::now() < deadline, "`true` did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(code(rt.checkpoint_container(checkpoint(&done, &location)).await), tonic::Code::FailedPrecondition);
    // a relative location
    let err = code(rt.checkpoint_container(checkpoint(&done, Path::new("out.tar"))).await);
    assert_eq!(err, tonic::Code::InvalidArgument);
    assert!(!location.exists(), "something was written at {}", location.display());

    // a dump that cannot be written where asked (a directory): nothing is left beside it
    if let Some(why) = criu_missing() {
        common::skipped("checkpoints_and_restores_that_cannot_be_are_refused (the failed write)", &why);
    } else {
        let sleeper =
            common::create_container(&mut rt, &pod, &config, common::container_config("s", &image, &["sleep", "600"]))
                .await;
        rt.start_container(cri::StartContainerRequest { container_id: sleeper.clone() }).await.expect("start");
        let target = dir.path().join("a-directory");
        std::fs::create_dir(&target).expect("dir");
        std::fs::write(target.join("kept"), b"x").expect("file");
        let r = rt.checkpoint_container(checkpoint(&sleeper, &target)).await;
        assert!(r.is_err(), "a checkpoint replaced a directory");
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").flatten().map(|e| e.file_name()).collect();
        assert!(!left.iter().any(|n| n.to_string_lossy().contains(".tmp-")), "{left:?}");
        assert_eq!(std::fs::read_dir(&target).expect("dir").count(), 1);
        let tmp = d.dir.path().join("data/tmp");
        let staged: Vec<_> = std::fs::read_dir(&tmp).expect("tmp").flatten().map(|e| e.file_name()).collect();
        assert!(!staged.iter().any(|n| n.to_string_lossy().starts_with("checkpoint-")), "{staged:?}");
    }

    // nor in a pod with a user namespace
    let m = cri::IdMapping { host_id: 65536 * 41, container_id: 0, length: 65536 };
    let mut userns_config = common::pod_config("userns", &[]);
    userns_config.linux = Some(cri::LinuxPodSandboxConfig {
        security_context: Some(cri::LinuxSandboxSecurityContext {
            namespace_options: Some(cri::NamespaceOption {
                userns_options: Some(cri::UserNamespace {
                    mode: cri::NamespaceMode::Pod as i32,
                    uids: vec![m],
                    gids: vec![m],
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let userns_pod = common::run_pod(&mut rt, &userns_config).await;
    let inside = common::create_container(
        &mut rt,
        &userns_pod,
        &userns_config,
        common::container_config("in-userns", &image, &["sleep", "600"]),
    )
    .await;
    rt.start_container(cri::StartContainerRequest { container_id: inside.clone() }).await.expect("start");
    let err = rt.checkpoint_container(checkpoint(&inside, &location)).await.expect_err("in a user namespace");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("user namespace"), "{err:?}");
    let mut c = common::container_config("restored", &dir.path().join("any.tar").display().to_string(), &[]);
    c.command.clear();
    let err = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: userns_pod.clone(),
            config: Some(c),
            sandbox_config: Some(userns_config.clone()),
        })
        .await
        .expect_err("into a user namespace");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(!location.exists());

    // restores from what is no checkpoint archive
    let garbage = dir.path().join("garbage.tar");
    std::fs::write(&garbage, b"not a tar at all, not even close").expect("garbage");
    let foreign = dir.path().join("foreign.tar");
    {
        let mut tar = tar::Builder::new(std::fs::File::create(&foreign).expect("foreign"));
        let mut add = |name: &str, bytes: &[u8]| {
            let mut h = tar::Header::new_gnu();
            h.set_size(bytes.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            tar.append_data(&mut h, name, bytes).expect("append");
        };
        add("config.dump", br#"{"id":"x","name":"x","rootfsImageName":"busybox"}"#);
        add("spec.dump", br#"{"process":{"args":["sh"]}}"#);
        tar.finish().expect("tar");
    }
    let before = rt.list_containers(cri::ListContainersRequest::default()).await.expect("list").into_inner();
    for archive in [dir.path().join("missing.tar"), garbage, foreign] {
        let mut c = common::container_config("restored", &archive.display().to_string(), &[]);
        c.command.clear();
        let err = rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: pod.clone(),
                config: Some(c),
                sandbox_config: Some(config.clone()),
            })
            .await
            .expect_err("not a checkpoint");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{}: {err:?}", archive.display());
        assert!(err.message().contains("checkpoint archive"), "{err:?}");
    }
    let after = rt.list_containers(cri::ListContainersRequest::default()).await.expect("list").into_inner();
    assert_eq!(before.containers.len(), after.containers.len());

    for pod in [&pod, &userns_pod] {
        rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("stop");
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    }
    assert_no_leaks(&d.dir.path().join("data"), &[pod, userns_pod]);
}

/// The daemon's side of CRIU failing or hanging, with a `criu` of the
/// test's own first in the daemon's `PATH` (what CRIU itself does is the
/// other tests' business): a dump cut by the CRI timeout is
/// DeadlineExceeded, a failed one Internal with CRIU's complaint, and
/// neither leaves anything at the location, beside it or in the data dir.
#[tokio::test(flavor = "multi_thread")]
async fn a_dump_that_fails_or_outlives_its_timeout_leaves_nothing() {
    let fake = tempfile::tempdir().expect("fake criu dir");
    let criu = fake.path().join("criu");
    // what it does is in the file `mode` beside it: `hang` or `fail`
    std::fs::write(
        &criu,
        format!(
            "#!/bin/sh\nmode=$(cat {0}/mode)\n[ \"$mode\" = hang ] && exec sleep 317\necho 'criu: no way' >&2\nexit 3\n",
            fake.path().display()
        ),
    )
    .expect("fake criu");
    std::fs::set_permissions(&criu, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let path = format!("{}:{}", fake.path().display(), std::env::var("PATH").unwrap_or_default());
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("run/rktlet.sock");
    let child = common::Daemon::spawn_env(&socket, dir.path(), &[], &[("PATH", &path)]);
    let cni_conf_dir = common::Daemon::cni_conf_dir(dir.path(), &[]);
    let mut d = common::Daemon { child, socket, dir, cni_conf_dir };
    d.wait_ready();
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let config = common::host_network(common::pod_config("fake-criu", &[]));
    let pod = common::run_pod(&mut rt, &config).await;
    let ctr =
        common::create_container(&mut rt, &pod, &config, common::container_config("s", &image, &["sleep", "600"]))
            .await;
    rt.start_container(cri::StartContainerRequest { container_id: ctr.clone() }).await.expect("start");
    let out = tempfile::tempdir().expect("out");
    let location = out.path().join("ckpt.tar");
    let request = |timeout| cri::CheckpointContainerRequest {
        container_id: ctr.clone(),
        location: location.display().to_string(),
        timeout,
    };

    std::fs::write(fake.path().join("mode"), "hang").expect("mode");
    let began = Instant::now();
    let err = rt.checkpoint_container(request(1)).await.expect_err("timed out");
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
    assert!(began.elapsed() < Duration::from_secs(30), "{:?}", began.elapsed());
    // the hung criu was killed
    let deadline = Instant::now() + Duration::from_secs(10);
    while !common::processes_mentioning("sleep 317").is_empty() {
        assert!(Instant::now() < deadline, "the timed-out criu still runs");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    std::fs::write(fake.path().join("mode"), "fail").expect("mode");
    let err = rt.checkpoint_container(request(60)).await.expect_err("failed");
    assert_eq!(err.code(), tonic::Code::Internal, "{err:?}");
    assert!(err.message().contains("criu: no way"), "{err:?}");

    assert_eq!(std::fs::read_dir(out.path()).expect("out").count(), 0, "left beside the location");
    let tmp = d.dir.path().join("data/tmp");
    let staged: Vec<_> = std::fs::read_dir(&tmp).expect("tmp").flatten().map(|e| e.file_name()).collect();
    assert!(!staged.iter().any(|n| n.to_string_lossy().starts_with("checkpoint-")), "{staged:?}");
    // and the container runs on
    let s = rt
        .container_status(cri::ContainerStatusRequest { container_id: ctr.clone(), verbose: false })
        .await
        .expect("status")
        .into_inner();
    assert_eq!(s.status.map(|s| s.state), Some(cri::ContainerState::ContainerRunning as i32));
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("stop");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_root_and_volume_stay_read_only_after_a_restore() {
    let test = "a_read_only_root_and_volume_stay_read_only_after_a_restore";
    if let Some(why) = criu_missing() {
        return common::skipped(test, &why);
    }
    let (dir, _net, d) = common::daemon_with_network();
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let config = common::pod_config("ro", &[]);
    let pod = common::run_pod(&mut rt, &config).await;
    let mut c = common::container_config("ro", &image, &["sleep", "600"]);
    if let Some(sc) = c.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
        sc.readonly_rootfs = true;
    }
    let vol = dir.path().join("vol");
    std::fs::create_dir(&vol).expect("vol");
    c.mounts.push(cri::Mount {
        container_path: "/ro".into(),
        host_path: vol.display().to_string(),
        readonly: true,
        ..Default::default()
    });
    let ro = common::create_container(&mut rt, &pod, &config, c.clone()).await;
    rt.start_container(cri::StartContainerRequest { container_id: ro.clone() }).await.expect("start");
    let archive = dir.path().join("ro.tar");
    rt.checkpoint_container(cri::CheckpointContainerRequest {
        container_id: ro.clone(),
        location: archive.display().to_string(),
        timeout: 60,
    })
    .await
    .expect("checkpoint");
    let mut again = c;
    again.metadata = Some(cri::ContainerMetadata { name: "ro-again".into(), attempt: 0 });
    again.image = Some(cri::ImageSpec { image: archive.display().to_string(), ..Default::default() });
    again.log_path = "ro-again.log".into();
    let restored = common::create_container(&mut rt, &pod, &config, again).await;
    rt.start_container(cri::StartContainerRequest { container_id: restored.clone() }).await.expect("restore");
    for id in [&ro, &restored] {
        for path in ["/written", "/ro/written"] {
            let r = common::exec_sync(&mut rt, id, &["touch", path]).await;
            assert_ne!(r.exit_code, 0, "{id}: {path} is writable");
            assert!(String::from_utf8_lossy(&r.stderr).contains("Read-only"), "{id}: {r:?}");
        }
    }
    assert_eq!(std::fs::read_dir(&vol).expect("vol").count(), 0);
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("stop");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

/// What is served over HTTP on port 8080 of a pod's network (from inside it).
fn fetch_in_pod(pod: &str) -> std::io::Result<String> {
    let netns = rktlet::net::netns::Netns::open(format!("/var/run/netns/rktlet-{pod}")).expect("pod netns");
    netns
        .run(|| {
            use std::io::{Read, Write};
            let mut conn = std::net::TcpStream::connect(("127.0.0.1", 8080))?;
            conn.set_read_timeout(Some(Duration::from_secs(5)))?;
            conn.write_all(b"GET /x HTTP/1.0\r\n\r\n")?;
            let mut reply = String::new();
            conn.read_to_string(&mut reply)?;
            Ok(reply)
        })
        .expect("enter the pod's netns")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listening_server_serves_from_its_new_pod() {
    let test = "a_listening_server_serves_from_its_new_pod";
    if let Some(why) = criu_missing() {
        return common::skipped(test, &why);
    }
    let (dir, _net, d) = common::daemon_with_network();
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let script = "mkdir -p /www; echo served > /www/x; exec httpd -f -p 8080 -h /www";
    let (config_a, config_b) = (common::pod_config("web-a", &[]), common::pod_config("web-b", &[]));
    let a = common::run_pod(&mut rt, &config_a).await;
    let web = common::container_config("web", &image, &["sh", "-c", script]);
    let web = common::create_container(&mut rt, &a, &config_a, web).await;
    rt.start_container(cri::StartContainerRequest { container_id: web.clone() }).await.expect("start");
    let deadline = Instant::now() + Duration::from_secs(10);
    while fetch_in_pod(&a).is_err() {
        assert!(Instant::now() < deadline, "httpd does not serve");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let archive = dir.path().join("web.tar");
    let dumped = rt
        .checkpoint_container(cri::CheckpointContainerRequest {
            container_id: web.clone(),
            location: archive.display().to_string(),
            timeout: 60,
        })
        .await;
    // CRIU up to 4.1 reads SO_PASSCRED (1:16) of every socket, which kernels
    // from 6.16 refuse for TCP ones: such a node cannot checkpoint a server
    if let Err(e) = &dumped
        && e.message().contains("Can't get 1:16 opt: Operation not supported")
    {
        common::skipped(test, "this CRIU cannot dump TCP sockets on this kernel (getsockopt SO_PASSCRED: EOPNOTSUPP)");
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: a.clone() }).await.expect("remove");
        assert!(!archive.exists());
        return assert_no_leaks(&d.dir.path().join("data"), &[a]);
    }
    dumped.expect("checkpoint");
    let b = common::run_pod(&mut rt, &config_b).await;
    let again = common::container_config("web", &archive.display().to_string(), &[]);
    let again = common::create_container(&mut rt, &b, &config_b, again).await;
    rt.start_container(cri::StartContainerRequest { container_id: again.clone() }).await.expect("restore");
    // the restored server listens in its new pod's network, the old one still in its own
    for pod in [&a, &b] {
        let reply = fetch_in_pod(pod).expect("served");
        assert!(reply.starts_with("HTTP/1.") && reply.ends_with("served\n"), "{pod}: {reply:?}");
    }
    for pod in [&a, &b] {
        rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("stop");
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    }
    assert_no_leaks(&d.dir.path().join("data"), &[a, b]);
}
