//! Hostile CRI requests (issue 10): each gets a precise gRPC code and leaves
//! nothing behind — ids that do not exist or try to walk the data dir, log
//! paths that leave the pod's log directory, oversized annotations, missing
//! names.

mod common;

use common::{Daemon, assert_no_leaks, host_network, pod_config};
use rktlet::proto::v1 as cri;
use tonic::Code;

fn code<T>(r: Result<tonic::Response<T>, tonic::Status>) -> Code {
    r.map(|_| Code::Ok).unwrap_or_else(|e| e.code())
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_requests_get_precise_errors_and_leave_nothing() {
    let d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let logs = tempfile::tempdir().expect("tempdir");
    let mut pod_cfg = host_network(pod_config("target", &[]));
    pod_cfg.log_directory = logs.path().join("pod").to_string_lossy().into_owned();
    let pod = common::run_pod(&mut rt, &pod_cfg).await;

    // ids that do not exist, are malformed, or try to walk out of the data dir
    for id in ["00000000-0000-4000-8000-000000000000", "../../etc", "zz", "", &format!("{pod}/../x")] {
        let st = rt.pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: id.into(), verbose: true }).await;
        assert!(matches!(code(st), Code::NotFound | Code::InvalidArgument), "pod status {id:?}");
        // the CRI (critest v1.36): stopping what does not exist is not an error; an empty id is
        let stop = rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.into() }).await;
        let want = if id.is_empty() { Code::InvalidArgument } else { Code::Ok };
        assert_eq!(code(stop), want, "stop {id:?}");
    }
    for id in [format!("{pod}:0-nope"), format!("{pod}:../../x"), "nocolon".to_string(), ":".to_string()] {
        let st = rt.container_status(cri::ContainerStatusRequest { container_id: id.clone(), verbose: false }).await;
        assert!(matches!(code(st), Code::NotFound | Code::InvalidArgument), "container status {id:?}");
        let start = rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await;
        assert!(matches!(code(start), Code::NotFound | Code::InvalidArgument), "start {id:?}");
        // (stopping what does not exist is not an error; an id with no pod and no name is)
        let stop = rt.stop_container(cri::StopContainerRequest { container_id: id.clone(), timeout: 1 }).await;
        assert_eq!(code(stop), if id == ":" { Code::InvalidArgument } else { Code::Ok }, "stop {id:?}");
        let rm = rt.remove_container(cri::RemoveContainerRequest { container_id: id.clone() }).await;
        assert!(matches!(code(rm), Code::Ok | Code::NotFound | Code::InvalidArgument), "remove {id:?}");
    }

    // log paths must stay inside the pod's log directory
    for bad in ["../escape.log", "a/../../escape.log", "/etc/escape.log"] {
        let mut c = common::container_config("logger", &image, &["true"]);
        c.log_path = bad.into();
        let r = rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: pod.clone(),
                config: Some(c),
                sandbox_config: Some(pod_cfg.clone()),
            })
            .await;
        assert_eq!(code(r), Code::InvalidArgument, "log path {bad:?}");
    }
    assert!(!logs.path().join("escape.log").exists() && !std::path::Path::new("/etc/escape.log").exists());

    // annotations and labels beyond Kubernetes' own limit (256 KiB) are refused
    let big = "x".repeat(300 << 10);
    let mut c = common::container_config("bloated", &image, &["true"]);
    c.annotations.insert("big".into(), big.clone());
    let r = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(c),
            sandbox_config: Some(pod_cfg.clone()),
        })
        .await;
    assert_eq!(code(r), Code::InvalidArgument);
    let mut fat_pod = pod_config("fat", &[]);
    fat_pod.annotations.insert("big".into(), big);
    let r = rt.run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(fat_pod), ..Default::default() }).await;
    assert_eq!(code(r), Code::InvalidArgument);

    // a container needs a name; a pod needs its metadata
    let r = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(common::container_config("", &image, &["true"])),
            sandbox_config: Some(pod_cfg.clone()),
        })
        .await;
    assert_eq!(code(r), Code::InvalidArgument);
    let r = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(cri::PodSandboxConfig::default()),
            ..Default::default()
        })
        .await;
    assert_eq!(code(r), Code::InvalidArgument);

    // the pod is untouched: no app was added to it
    let listed = rt.list_containers(cri::ListContainersRequest::default()).await.expect("list").into_inner().containers;
    assert!(listed.is_empty(), "{listed:?}");

    // a mount source that is a symlink is resolved once, when the container is
    // made: pointing the link elsewhere later changes nothing the container sees
    let vols = tempfile::tempdir().expect("vols");
    for (dir, text) in [("first", "first\n"), ("second", "second\n")] {
        std::fs::create_dir(vols.path().join(dir)).expect("dir");
        std::fs::write(vols.path().join(dir).join("f"), text).expect("file");
    }
    let link = vols.path().join("link");
    std::os::unix::fs::symlink(vols.path().join("first"), &link).expect("symlink");
    let mut c = common::container_config("linked", &image, &["sleep", "1000"]);
    c.mounts = vec![cri::Mount {
        container_path: "/data".into(),
        host_path: link.display().to_string(),
        readonly: true,
        ..Default::default()
    }];
    let linked = common::create_container(&mut rt, &pod, &pod_cfg, c).await;
    std::fs::remove_file(&link).expect("unlink");
    std::os::unix::fs::symlink(vols.path().join("second"), &link).expect("relink");
    rt.start_container(cri::StartContainerRequest { container_id: linked.clone() }).await.expect("start");
    let out = common::exec_sync(&mut rt, &linked, &["cat", "/data/f"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "first\n");
    rt.remove_container(cri::RemoveContainerRequest { container_id: linked }).await.expect("remove container");
    let pods: Vec<_> = std::fs::read_dir(data.join("pods/run")).expect("run").flatten().collect();
    assert_eq!(pods.len(), 1, "only the target pod exists");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&data, &[pod]);
}

/// One layer: a static busybox as `/bin/sh`, `cat`, `id` and `sleep`, and
/// `files` (path, content) and `links` (path, target) of its own.
fn busybox_layer(files: &[(&str, &str)], links: &[(&str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let header = |kind: tar::EntryType, mode: u32, size: usize| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size as u64);
        h.set_mtime(1_700_000_000);
        h.set_uid(0);
        h.set_gid(0);
        h
    };
    for dir in ["bin", "etc", "tmp"] {
        b.append_data(&mut header(tar::EntryType::Directory, 0o755, 0), dir, std::io::empty()).expect("dir");
    }
    let busybox = std::fs::read("/bin/busybox").expect("/bin/busybox (apt busybox-static)");
    b.append_data(&mut header(tar::EntryType::Regular, 0o755, busybox.len()), "bin/busybox", busybox.as_slice())
        .expect("busybox");
    for (path, text) in files {
        b.append_data(&mut header(tar::EntryType::Regular, 0o644, text.len()), path, text.as_bytes()).expect(path);
    }
    let applets = ["sh", "cat", "id", "sleep"].map(|a| (format!("bin/{a}"), "busybox".to_string()));
    let links = links.iter().map(|(p, t)| (p.to_string(), t.to_string()));
    for (path, target) in applets.into_iter().chain(links) {
        b.append_link(&mut header(tar::EntryType::Symlink, 0o777, 0), &path, &target).expect("symlink");
    }
    b.into_inner().expect("tar")
}

/// An image's symlinks lead where they would inside the container, never to
/// the node's files: the mount targets CreateContainer makes (identity files,
/// volumes) and the `/etc/passwd` it reads follow them inside the app's root.
#[tokio::test(flavor = "multi_thread")]
async fn image_symlinks_do_not_lead_to_the_node() {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let node_file = format!("/tmp/rktlet-escape-{tag}-hostname");
    let node_dir = format!("/tmp/rktlet-escape-{tag}-dir");
    let layer = busybox_layer(
        &[("etc/passwd.real", "root:x:0:0::/root:/bin/sh\napp:x:1234:1234::/:/bin/sh\n")],
        &[("etc/passwd", "/etc/passwd.real"), ("etc/hostname", &node_file), ("data", &node_dir)],
    );
    let reg = common::registry::registry();
    let repo = format!("symlinks-{tag}");
    reg.push(&repo, &[layer]).await;
    let image = format!("{}/{repo}:latest", reg.main);

    let d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    common::pull(&d, &image).await;
    let mut rt = d.runtime().await;
    let pod_cfg = host_network(pod_config("links", &[]));
    let pod = common::run_pod(&mut rt, &pod_cfg).await;
    let vol = tempfile::tempdir().expect("vol");
    std::fs::write(vol.path().join("marker"), "volume\n").expect("marker");
    let mut c = common::container_config("linked", &image, &["sleep", "1000"]);
    c.mounts = vec![cri::Mount {
        container_path: "/data/vol".into(),
        host_path: vol.path().display().to_string(),
        ..Default::default()
    }];
    if let Some(sc) = c.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
        sc.run_as_username = "app".into();
    }
    let id = common::create_container(&mut rt, &pod, &pod_cfg, c).await;
    assert!(!std::path::Path::new(&node_file).exists(), "a mount target was made on the node");
    assert!(!std::path::Path::new(&node_dir).exists(), "a volume's mount point was made on the node");
    rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("start");
    let mut run = async |cmd: &[&str]| {
        let out = common::exec_sync(&mut rt, &id, cmd).await;
        assert_eq!(out.exit_code, 0, "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(run(&["cat", "/data/vol/marker"]).await, "volume\n", "the volume, through the image's link");
    assert_eq!(run(&["id", "-u"]).await, "1234\n", "the user from the image's linked /etc/passwd");
    assert_eq!(run(&["cat", "/etc/hostname"]).await, "links\n");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert!(!std::path::Path::new(&node_file).exists() && !std::path::Path::new(&node_dir).exists());
    assert_no_leaks(&data, &[pod]);
}

/// A root container (kubelet's default capabilities include CAP_MKNOD) can
/// make a device node, but not use one of the node's disks through it:
/// neither in its rootfs, nor in /dev, nor in a volume.
#[tokio::test(flavor = "multi_thread")]
async fn containers_cannot_open_the_nodes_disks() {
    use std::os::unix::fs::MetadataExt;
    // the disk under /, or (on an overlay or network root) any disk of the node
    let dev = std::fs::metadata("/").expect("/").dev();
    let (major, minor) = match (libc::major(dev), libc::minor(dev)) {
        (0, _) => match first_block_device() {
            Some(d) => d,
            None => return common::skipped("containers_cannot_open_the_nodes_disks", "the node has no block device"),
        },
        d => d,
    };
    let d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let pod_cfg = host_network(pod_config("disks", &[]));
    let pod = common::run_pod(&mut rt, &pod_cfg).await;
    let vol = tempfile::tempdir().expect("vol");
    let mut c = common::container_config("reader", &image, &["sleep", "1000"]);
    c.mounts = vec![cri::Mount {
        container_path: "/vol".into(),
        host_path: vol.path().display().to_string(),
        ..Default::default()
    }];
    let id = common::create_container(&mut rt, &pod, &pod_cfg, c).await;
    rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("start");
    for dir in ["/tmp", "/dev", "/vol"] {
        let script = format!("mknod {dir}/disk b {major} {minor}; head -c 4096 {dir}/disk | wc -c");
        let out = common::exec_sync(&mut rt, &id, &["sh", "-c", &script]).await;
        let read = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_eq!(read, "0", "read the node's disk through {dir}/disk: {}", String::from_utf8_lossy(&out.stderr));
    }
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&data, &[pod]);
}

/// A volume mounted below another one, through a link in the outer volume's
/// content (`sub -> /`, left by an init container), stays inside the
/// container: it is not mounted over the pod's own `/rkt`.
#[tokio::test(flavor = "multi_thread")]
async fn a_link_in_a_volume_does_not_lead_a_nested_volume_out_of_the_container() {
    let d = Daemon::start(&[]);
    let data = d.dir.path().join("data");
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let pod_cfg = host_network(pod_config("nested", &[]));
    let pod = common::run_pod(&mut rt, &pod_cfg).await;
    let outer = tempfile::tempdir().expect("outer");
    std::os::unix::fs::symlink("/", outer.path().join("sub")).expect("link");
    let inner = tempfile::tempdir().expect("inner");
    std::fs::write(inner.path().join("planted"), "x").expect("marker");
    let mut c = common::container_config("nested", &image, &["sleep", "1000"]);
    let mount = |from: &std::path::Path, to: &str| cri::Mount {
        container_path: to.into(),
        host_path: from.display().to_string(),
        ..Default::default()
    };
    c.mounts = vec![mount(outer.path(), "/data"), mount(inner.path(), "/data/sub/rkt")];
    let created = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(c),
            sandbox_config: Some(pod_cfg.clone()),
        })
        .await;
    let pid1 = common::pod_pid1(&data, &pod);
    let pods_rkt = std::path::PathBuf::from(format!("/proc/{pid1}/root/rkt"));
    assert!(pods_rkt.join("status").is_dir(), "the pod's /rkt is its own");
    assert!(!pods_rkt.join("planted").exists(), "the nested volume covers the pod's /rkt");
    if let Ok(r) = created {
        // made inside the container: its /rkt holds the volume
        let id = r.into_inner().container_id;
        rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("start");
        let out = common::exec_sync(&mut rt, &id, &["ls", "/rkt"]).await;
        assert_eq!(String::from_utf8_lossy(&out.stdout), "planted\n");
    }
    // the same below /dev, whose volumes appexec binds again over the pod's /dev
    let mut c = common::container_config("nested-dev", &image, &["sleep", "1000"]);
    c.mounts = vec![mount(outer.path(), "/dev/e"), mount(inner.path(), "/dev/e/sub")];
    if let Ok(r) = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(c),
            sandbox_config: Some(pod_cfg.clone()),
        })
        .await
    {
        let id = r.into_inner().container_id;
        if rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.is_ok() {
            let out = common::exec_sync(&mut rt, &id, &["ls", "/dev/e/sub/rkt/status"]).await;
            assert_ne!(
                out.exit_code,
                0,
                "the pod's root is in the container: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
    assert!(!pods_rkt.join("planted").exists());
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&data, &[pod]);
}

/// The first block device of the node (`/sys/block/*/dev`: `major:minor`).
fn first_block_device() -> Option<(u32, u32)> {
    let mut names: Vec<_> = std::fs::read_dir("/sys/block").ok()?.flatten().map(|e| e.path()).collect();
    names.sort();
    names.iter().find_map(|p| {
        let text = std::fs::read_to_string(p.join("dev")).ok()?;
        let (major, minor) = text.trim().split_once(':')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    })
}
