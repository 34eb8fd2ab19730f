//! Pods in user namespaces (`hostUsers: false`): kubelet's mapping in
//! `namespace_options.userns_options`, one user namespace per pod. Driven
//! with the official crictl where it can say it (pod and container files),
//! and over gRPC for the refusals.

mod common;

use common::{assert_no_leaks, crictl};
use rktlet::proto::v1 as cri;
use std::os::unix::fs::MetadataExt;

/// The node ids of the pods' user namespace (what kubelet would allocate:
/// a multiple of 65536 above the node's own ids).
const HOST_BASE: u32 = 65536 * 40;
const LENGTH: u32 = 65536;

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).expect("crictl json")
}

fn userns_options(host: u32) -> serde_json::Value {
    let m = serde_json::json!([{ "host_id": host, "container_id": 0, "length": LENGTH }]);
    serde_json::json!({ "mode": 0, "uids": m, "gids": m })
}

/// The parents of `pid`, nearest first, up to the node's PID 1.
fn ancestors(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut p = common::parent_of(pid);
    while p > 1 && out.len() < 64 {
        out.push(p);
        p = common::parent_of(p);
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_in_a_user_namespace_sees_its_own_ids_and_the_right_owners() {
    let (dir, _net, d) = common::daemon_with_network();
    let sock = d.socket.clone();
    let image = format!("{}/busybox:latest", common::registry::registry().main);
    crictl::ok(&sock, &["pull", &image]);

    // a host directory as a volume: owned by the node's root, with a file of uid 1234
    let vol = dir.path().join("vol");
    std::fs::create_dir(&vol).expect("vol");
    std::fs::write(vol.join("theirs"), b"x").expect("file");
    std::os::unix::fs::chown(vol.join("theirs"), Some(1234), Some(1234)).expect("chown");

    let pod_json = serde_json::json!({
        "metadata": { "name": "userns", "namespace": "default", "uid": "userns-uid", "attempt": 0 },
        "log_directory": dir.path().join("logs").display().to_string(),
        "linux": { "security_context": { "namespace_options": { "userns_options": userns_options(HOST_BASE) } } }
    });
    let ctr_json = serde_json::json!({
        "metadata": { "name": "box" },
        "image": { "image": image },
        "command": ["sh", "-c", "echo made > /made-here; exec sleep 600"],
        "log_path": "box.log",
        "mounts": [{ "container_path": "/vol", "host_path": vol.display().to_string() }],
        "linux": { "security_context": { "namespace_options": { "userns_options": userns_options(HOST_BASE) } } }
    });
    let (pod_file, ctr_file) = (dir.path().join("pod.json"), dir.path().join("ctr.json"));
    std::fs::write(&pod_file, pod_json.to_string()).expect("pod.json");
    std::fs::write(&ctr_file, ctr_json.to_string()).expect("ctr.json");
    let (pod_arg, ctr_arg) = (pod_file.to_string_lossy().to_string(), ctr_file.to_string_lossy().to_string());

    let pod = crictl::ok(&sock, &["runp", &pod_arg]).trim().to_string();
    // inspectp reports the pod's mapping
    let inspect = json(&crictl::ok(&sock, &["inspectp", &pod]));
    let userns = &inspect["status"]["linux"]["namespaces"]["options"]["usernsOptions"];
    assert_eq!(userns["mode"], "POD", "{inspect:#}");
    for ids in ["uids", "gids"] {
        assert_eq!(userns[ids][0]["hostId"], HOST_BASE, "{inspect:#}");
        assert_eq!(userns[ids][0]["containerId"], 0, "{inspect:#}");
        assert_eq!(userns[ids][0]["length"], LENGTH, "{inspect:#}");
    }

    let ctr = crictl::ok(&sock, &["create", &pod, &ctr_arg, &pod_arg]).trim().to_string();
    crictl::ok(&sock, &["start", &ctr]);
    let exec = |cmd: &[&str]| {
        let mut args = vec!["exec", ctr.as_str()];
        args.extend_from_slice(cmd);
        crictl::ok(&sock, &args)
    };
    // the container's ids are the mapping's, and it is root in its namespace
    let uid_map = exec(&["cat", "/proc/self/uid_map"]);
    let fields: Vec<&str> = uid_map.split_whitespace().collect();
    assert_eq!(fields, ["0", &HOST_BASE.to_string(), &LENGTH.to_string()], "{uid_map}");
    assert_eq!(exec(&["id", "-u"]).trim(), "0");
    // the image's files and the volume's keep the owners they have on disk
    assert_eq!(exec(&["stat", "-c", "%u:%g", "/bin/busybox"]).trim(), "0:0");
    assert_eq!(exec(&["stat", "-c", "%u:%g", "/vol/theirs"]).trim(), "1234:1234");
    assert_eq!(exec(&["stat", "-c", "%u", "/vol"]).trim(), "0");
    // root in the container may write its root-owned image, and what it
    // writes lands on disk owned by the node's root (the mapping undone)
    assert_eq!(exec(&["cat", "/made-here"]).trim(), "made");
    exec(&["sh", "-c", "echo by-exec > /vol/written"]);
    let written = std::fs::metadata(vol.join("written")).expect("written by the container");
    assert_eq!((written.uid(), written.gid()), (0, 0));
    // but it is not the node's root: the node's root-only files stay closed
    let denied = crictl::run(&sock, &["exec", &ctr, "sh", "-c", "echo x > /proc/sys/kernel/hostname"]);
    assert!(!denied.status.success(), "{denied:?}");

    // on the node, the container's processes run as the mapped ids
    let pid1 = common::pod_pid1(&d.dir.path().join("data"), &pod);
    let status = std::fs::read_to_string(format!("/proc/{pid1}/status")).expect("pod systemd status");
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).expect("Uid");
    assert_eq!(uid_line.split_whitespace().nth(1), Some(HOST_BASE.to_string().as_str()), "{uid_line}");
    // (the pod's own: a `sleep 600` elsewhere on the node, another test's or
    // the node's own, is not this container's and is only reported)
    let pid_of = |line: &str| line.split(':').next().and_then(|p| p.parse::<i32>().ok()).unwrap_or(0);
    let (sleepers, elsewhere): (Vec<String>, Vec<String>) =
        common::processes_mentioning("sleep 600").into_iter().partition(|line| ancestors(pid_of(line)).contains(&pid1));
    for line in &elsewhere {
        eprintln!("a `sleep 600` outside this pod, not checked: {line} (parents {:?})", ancestors(pid_of(line)));
    }
    assert!(!sleepers.is_empty(), "the container's sleep is not running in its pod");
    for line in &sleepers {
        let pid = line.split(':').next().expect("pid");
        let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let uid = st.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(1));
        assert_eq!(uid, Some(HOST_BASE.to_string().as_str()), "process {line}");
    }

    // kubelet's default for a container: a PID namespace of its own (appexec's)
    let mut own_json = ctr_json.clone();
    own_json["metadata"]["name"] = "own".into();
    own_json["log_path"] = "own.log".into();
    own_json["linux"]["security_context"]["namespace_options"]["pid"] = 1.into();
    let own_file = dir.path().join("own.json");
    std::fs::write(&own_file, own_json.to_string()).expect("own.json");
    let own = crictl::ok(&sock, &["create", &pod, &own_file.to_string_lossy(), &pod_arg]).trim().to_string();
    crictl::ok(&sock, &["start", &own]);
    let out = crictl::ok(&sock, &["exec", &own, "sh", "-c", "id -u; cat /proc/self/uid_map; stat -c %u /vol/theirs"]);
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0], "0", "{out}");
    assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["0", &HOST_BASE.to_string(), &LENGTH.to_string()]);
    assert_eq!(lines[2], "1234", "{out}");

    crictl::ok(&sock, &["stopp", &pod]);
    crictl::ok(&sock, &["rmp", &pod]);
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

#[tokio::test(flavor = "multi_thread")]
async fn user_namespaces_kubelet_cannot_ask_for_are_refused() {
    let (_dir, _net, d) = common::daemon_with_network();
    let mut rt = d.runtime().await;
    let m = |host_id, container_id, length| cri::IdMapping { host_id, container_id, length };
    let on = |mut config: cri::PodSandboxConfig, mode: cri::NamespaceMode, uids, gids| {
        let ns = config
            .linux
            .get_or_insert_with(Default::default)
            .security_context
            .get_or_insert_with(Default::default)
            .namespace_options
            .get_or_insert_with(Default::default);
        ns.userns_options = Some(cri::UserNamespace { mode: mode as i32, uids, gids });
        config
    };
    let with = |mode, uids, gids| on(common::pod_config("refused", &[]), mode, uids, gids);
    let good = || vec![m(HOST_BASE, 0, LENGTH)];
    let cases = [
        ("no mappings", with(cri::NamespaceMode::Pod, vec![], vec![])),
        (
            "two uid mappings",
            with(cri::NamespaceMode::Pod, vec![m(HOST_BASE, 0, 100), m(HOST_BASE + 100, 100, 100)], good()),
        ),
        (
            "container id 0 unmapped",
            with(cri::NamespaceMode::Pod, vec![m(HOST_BASE, 1, LENGTH)], vec![m(HOST_BASE, 1, LENGTH)]),
        ),
        ("uids and gids differ", with(cri::NamespaceMode::Pod, good(), vec![m(HOST_BASE * 2, 0, LENGTH)])),
        ("the node's root", with(cri::NamespaceMode::Pod, vec![m(0, 0, LENGTH)], vec![m(0, 0, LENGTH)])),
        ("CONTAINER mode", with(cri::NamespaceMode::Container, good(), good())),
        (
            "with the node's network",
            on(common::host_network(common::pod_config("refused", &[])), cri::NamespaceMode::Pod, good(), good()),
        ),
    ];
    for (what, config) in cases {
        let err = rt
            .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() })
            .await
            .expect_err(what);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{what}: {err:?}");
        assert!(err.message().contains("userns") || err.message().contains("user namespace"), "{what}: {err:?}");
    }
    // nothing was made for them
    let pods = rt.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }).await.expect("list").into_inner();
    assert!(pods.items.is_empty(), "{pods:?}");
    let run = d.dir.path().join("data/pods/run");
    assert_eq!(std::fs::read_dir(&run).map(|d| d.count()).unwrap_or(0), 0);

    // a container asks for another mapping than its pod's, or for one in a pod without
    let image = common::pull_busybox(&d).await;
    let plain = common::pod_config("plain", &[]);
    let pod = common::run_pod(&mut rt, &plain).await;
    let mut c = common::container_config("c", &image, &["sleep", "60"]);
    if let Some(ns) =
        c.linux.as_mut().and_then(|l| l.security_context.as_mut()).and_then(|s| s.namespace_options.as_mut())
    {
        ns.userns_options =
            Some(cri::UserNamespace { mode: cri::NamespaceMode::Pod as i32, uids: good(), gids: good() });
    }
    let err = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(c),
            sandbox_config: Some(plain.clone()),
        })
        .await
        .expect_err("a mapping in a pod without one");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}
