//! CheckpointContainer: a running container's processes dumped with CRIU
//! (the node's `criu`, found in `PATH`) while it keeps running, and its
//! writable layer, written as the CRI's checkpoint archive (the layout
//! CRI-O and checkpointctl use): `checkpoint/` (CRIU's images),
//! `config.dump` and `spec.dump` (JSON), `rootfs-diff.tar` and
//! `deleted.files` (the writable layer's changes), `dump.log`,
//! `stats-dump`, plus `rktlet.json`, what a restore by rktlet needs
//! (`container::restore`).
//!
//! The dump runs on the node, in the pod's network, UTS and IPC namespaces:
//! CRIU dumps only the namespaces of the container that differ from its
//! own, so these are left out of the images and a restore inside another
//! pod joins that pod's. The mounts the container got from its pod (its
//! /dev, /sys, identity files, volumes: every mount propagated from the
//! pod's namespace) are external, named by their path in the container.

use super::{ContainerError, Target, app_cgroup, meta, open};
use crate::runtime::Runtime;
use crate::stage1::app::{self, AppPaths, AppState};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Names in the archive (as checkpointctl reads them).
pub(crate) const CHECKPOINT_DIR: &str = "checkpoint";
pub(crate) const CONFIG_DUMP: &str = "config.dump";
pub(crate) const SPEC_DUMP: &str = "spec.dump";
pub(crate) const ROOTFS_DIFF: &str = "rootfs-diff.tar";
pub(crate) const DELETED_FILES: &str = "deleted.files";
pub(crate) const DUMP_LOG: &str = "dump.log";
pub(crate) const STATS_DUMP: &str = "stats-dump";
/// rktlet's own: the external mounts and stdio of the dump.
pub(crate) const RKTLET_JSON: &str = "rktlet.json";

/// `config.dump`: Podman's container config, the fields checkpointctl reads.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub(crate) struct ConfigDump {
    pub id: String,
    pub name: String,
    #[serde(rename = "rootfsImage", default)]
    pub rootfs_image: String,
    #[serde(rename = "rootfsImageRef", default)]
    pub rootfs_image_ref: String,
    #[serde(rename = "rootfsImageName", default)]
    pub rootfs_image_name: String,
    #[serde(rename = "runtime", default)]
    pub runtime: String,
    #[serde(rename = "createdTime", default)]
    pub created_time: String,
    #[serde(rename = "checkpointedTime", default)]
    pub checkpointed_time: String,
    #[serde(rename = "restoredTime", default)]
    pub restored_time: String,
    #[serde(default)]
    pub restored: bool,
}

/// What a restore needs besides CRIU's images: the mounts made external
/// (CRIU's key and the container's path) and the pipes the container's
/// stdio were (`pipe:[inode]` by fd), to hand it new ones.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub(crate) struct DumpFacts {
    pub external_mounts: Vec<String>,
    pub stdio: Vec<(i32, String)>,
    /// Those of `external_mounts` that are cgroup hierarchies under
    /// /sys/fs/cgroup: the restored container gets its own new cgroups
    /// there (appexec's `cgroupfs=` names them to CRIU).
    #[serde(default)]
    pub cgroup_mounts: Vec<String>,
}

/// Containers of a pod in a user namespace are neither checkpointed nor
/// restored: CRIU would have to dump and recreate the pod's user namespace,
/// whose mapping is the pod's, not the container's (not built).
pub(crate) fn refuse_user_namespace(rt: &Runtime, pod: &rkt::pod::Pod, id: &str) -> Result<(), ContainerError> {
    let manifest = rt.manifests.read(pod)?;
    match crate::stage1::userns::of_manifest(&manifest) {
        Ok(None) => Ok(()),
        _ => Err(ContainerError::FailedPrecondition(format!(
            "{id}: containers of pods with a user namespace are not checkpointed or restored by rktlet"
        ))),
    }
}

/// A pod taken from the pod pool on a cgroup v1 node was moved to its
/// cgroup parent after it booted, in the v1 controller hierarchies (its
/// `subcgroup` differs from `subcgroup-tracking`): its processes' cgroups
/// there lie outside the pod's cgroup namespace, which nspawn rooted where
/// the pod booted (inside they read `/../../...`), and CRIU refuses to dump
/// such a process. Refused up front, with the way round it.
fn refuse_moved_pod(pod: &rkt::pod::Pod, id: &str) -> Result<(), ContainerError> {
    let moved = pod.subcgroups()?.is_some_and(|s| s.controllers != s.tracking);
    let v1 = crate::cgroup::Layout::cached().is_ok_and(|l| l.v1_controllers().next().is_some());
    if moved && v1 {
        return Err(ContainerError::FailedPrecondition(format!(
            "{id}: its pod was taken from the pod pool and moved to its cgroup parent after it booted, so its \
             cgroups lie outside the pod's cgroup namespace, which CRIU cannot dump; a node that checkpoints \
             containers runs the daemon with pod_pool_size = 0"
        )));
    }
    Ok(())
}

/// The host path of the node's `criu`: the daemon's `PATH`, then the
/// directories Debian and a local build install it in.
pub fn criu_binary() -> Result<PathBuf, ContainerError> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"])
        .filter(|d| d.starts_with('/'))
        .map(|d| Path::new(d).join("criu"))
        .find(|p| p.is_file())
        .and_then(|p| p.canonicalize().ok())
        .ok_or_else(|| {
            ContainerError::FailedPrecondition(
                "criu is not installed on this node (scripts/install-deps.sh criu; `rktlet doctor` checks it)".into(),
            )
        })
}

/// Checkpoints running container `id` into an archive at `location`
/// (written beside it and renamed: nothing is left there on failure);
/// CRIU gets `timeout` (none: no limit). The container keeps running.
pub(crate) async fn checkpoint(
    rt: &Runtime,
    id: &str,
    location: &Path,
    timeout: Option<Duration>,
) -> Result<(), ContainerError> {
    if !location.is_absolute() {
        return Err(ContainerError::InvalidArgument(format!(
            "checkpoint location {:?} is not an absolute path",
            location.display()
        )));
    }
    let t = open(rt, id)?;
    let paths = AppPaths::new(&t.pod, &t.app.name);
    if !t.running || app::facts(&paths, true).state != AppState::Running {
        return Err(ContainerError::FailedPrecondition(format!("container {id} is not running")));
    }
    if meta::pid_namespace(&t.app) != meta::PidNamespace::Container {
        return Err(ContainerError::FailedPrecondition(format!(
            "container {id} shares a PID namespace: only a container with its own (kubelet's default) can be \
             checkpointed"
        )));
    }
    if meta::tty(&t.app) {
        return Err(ContainerError::FailedPrecondition(format!(
            "container {id} runs on a terminal, which rktlet cannot checkpoint"
        )));
    }
    refuse_user_namespace(rt, &t.pod, id)?;
    refuse_moved_pod(&t.pod, id)?;
    let criu = criu_binary()?;
    let pid1 = rt.pod_bus(&t.pod).map_err(ContainerError::Unavailable)?.pid1();
    let procs = app_cgroup(&t.pod, &t.app.name).map(|cg| cg.unit_processes()).unwrap_or_default();
    let app_pid = crate::stage1::appexec::app_pid(pid1, &procs, None)
        .ok_or_else(|| ContainerError::FailedPrecondition(format!("container {id} is not running")))?;
    let work = rt.data.root().join("tmp").join(format!("checkpoint-{}", uuid::Uuid::new_v4().simple()));
    let result = dump_and_write(rt, &t, id, &criu, pid1, app_pid, &work, location, timeout).await;
    let _ = std::fs::remove_dir_all(&work);
    result
}

#[allow(clippy::too_many_arguments)]
async fn dump_and_write(
    rt: &Runtime,
    t: &Target,
    id: &str,
    criu: &Path,
    pid1: i32,
    app_pid: i32,
    work: &Path,
    location: &Path,
    timeout: Option<Duration>,
) -> Result<(), ContainerError> {
    let images = work.join(CHECKPOINT_DIR);
    std::fs::create_dir_all(&images).map_err(ContainerError::io(format!("creating {}", images.display())))?;
    let facts = dump_facts(app_pid)?;
    dump(criu, pid1, app_pid, &images, &facts, timeout).await.map_err(|e| match e {
        DumpError::Timeout => ContainerError::DeadlineExceeded(format!("checkpoint of container {id} timed out")),
        DumpError::Failed(why) => ContainerError::Internal(format!(
            "criu dump of container {id} failed: {why}{}",
            log_errors(&images.join(DUMP_LOG))
        )),
    })?;
    // CRIU's log and statistics beside its images, where checkpointctl reads them
    for name in [DUMP_LOG, STATS_DUMP] {
        let _ = std::fs::rename(images.join(name), work.join(name));
    }
    let paths = AppPaths::new(&t.pod, &t.app.name);
    let tree = std::fs::read_to_string(paths.appsinfo().join("treeStoreID")).unwrap_or_default();
    let upper = paths.overlay_upper(tree.trim());
    let deleted = tokio::task::block_in_place(|| rootfs_diff(&upper, &work.join(ROOTFS_DIFF), &t.app))
        .map_err(ContainerError::io(format!("the writable layer of {id}")))?;
    let manifest = rt.manifests.read(&t.pod)?;
    write_json(&work.join(DELETED_FILES), &deleted)?;
    write_json(&work.join(CONFIG_DUMP), &config_dump(t, id, &paths))?;
    write_json(&work.join(SPEC_DUMP), &spec_dump(t, id, &manifest))?;
    write_json(&work.join(RKTLET_JSON), &facts)?;
    tokio::task::block_in_place(|| write_archive(work, location))
        .map_err(ContainerError::io(format!("writing checkpoint archive {}", location.display())))
}

/// The mounts to declare external and the stdio pipes of process `pid`.
fn dump_facts(pid: i32) -> Result<DumpFacts, ContainerError> {
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .map_err(ContainerError::io(format!("reading the mounts of process {pid}")))?;
    let mut facts = DumpFacts {
        external_mounts: external_mounts(&mountinfo),
        stdio: Vec::new(),
        cgroup_mounts: cgroup_mounts(&mountinfo),
    };
    // (CRIU's `mnt[KEY]:VALUE` cannot carry a `]` in the key)
    if let Some(odd) = facts.external_mounts.iter().find(|p| p.contains(']')) {
        return Err(ContainerError::FailedPrecondition(format!(
            "the container has a mount at {odd:?}, a path CRIU's options cannot name"
        )));
    }
    for fd in 0..3 {
        if let Ok(link) = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")) {
            let link = link.to_string_lossy().to_string();
            if link.starts_with("pipe:[") {
                facts.stdio.push((fd, link));
            }
        }
    }
    Ok(facts)
}

/// The mount points of a container's mount table that came from its pod
/// (propagated from it: `master:N`), but those under /proc (appexec's masks,
/// binds of the pod's /dev/null: CRIU finds their source among the others),
/// and its own cgroups (`cgroup_mounts`), each once.
pub(crate) fn external_mounts(mountinfo: &str) -> Vec<String> {
    let mut points: Vec<String> = Vec::new();
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(point) = fields.get(4) else { continue };
        let optional = fields.iter().skip(6).take_while(|f| **f != "-");
        let from_pod = optional.into_iter().any(|f| f.starts_with("master:"));
        let wanted = (from_pod && *point != "/" && *point != "/proc" && !point.starts_with("/proc/"))
            || cgroup_mount(&fields).is_some();
        let point = unescape(point);
        if wanted && !points.contains(&point) {
            points.push(point);
        }
    }
    points
}

/// The mount points of cgroup hierarchies at /sys/fs/cgroup and below it
/// (the pod's, and the container's own cgroups on top of them), each once.
pub(crate) fn cgroup_mounts(mountinfo: &str) -> Vec<String> {
    let mut points: Vec<String> = Vec::new();
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if let Some(point) = cgroup_mount(&fields).map(unescape)
            && !points.contains(&point)
        {
            points.push(point);
        }
    }
    points
}

/// The mount point of a mountinfo line (split at spaces) when it is a
/// cgroup hierarchy at /sys/fs/cgroup or below.
fn cgroup_mount<'a>(fields: &[&'a str]) -> Option<&'a str> {
    let point = *fields.get(4)?;
    let fstype = fields.iter().skip_while(|f| **f != "-").nth(1)?;
    let under = point == crate::stage1::api_vfs::CGROUP_FS
        || point.strip_prefix(crate::stage1::api_vfs::CGROUP_FS).is_some_and(|rest| rest.starts_with('/'));
    (under && (*fstype == "cgroup" || *fstype == "cgroup2")).then_some(point)
}

/// A mountinfo path with its octal escapes (`\040` for a space) undone.
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(v) = bytes.get(i + 1..i + 4).and_then(|d| std::str::from_utf8(d).ok())
            && let Ok(v) = u8::from_str_radix(v, 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

enum DumpError {
    Timeout,
    Failed(String),
}

/// `criu dump` of the tree of `pid`, left running, from the node's mount
/// and PID namespaces but the pod's network, UTS and IPC ones.
async fn dump(
    criu: &Path,
    pid1: i32,
    pid: i32,
    images: &Path,
    facts: &DumpFacts,
    timeout: Option<Duration>,
) -> Result<(), DumpError> {
    let namespaces: Vec<std::fs::File> = ["net", "uts", "ipc"]
        .iter()
        .map(|ns| std::fs::File::open(format!("/proc/{pid1}/ns/{ns}")))
        .collect::<Result<_, _>>()
        .map_err(|e| DumpError::Failed(format!("opening the pod's namespaces: {e}")))?;
    let mut cmd = tokio::process::Command::new(criu);
    cmd.arg("dump").arg("--tree").arg(pid.to_string()).arg("--images-dir").arg(images);
    cmd.args(["--log-file", DUMP_LOG, "-v4", "--leave-running", "--manage-cgroups=ignore"]);
    cmd.args(["--tcp-established", "--file-locks"]);
    for point in &facts.external_mounts {
        cmd.arg("--external").arg(format!("mnt[{point}]:{point}"));
    }
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    cmd.kill_on_drop(true);
    let fds: Vec<i32> = namespaces.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
    // SAFETY: only setns(2) between fork and exec, on descriptors opened above.
    unsafe {
        cmd.pre_exec(move || {
            for fd in &fds {
                if libc::setns(*fd, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| DumpError::Failed(format!("running {}: {e}", criu.display())))?;
    drop(namespaces);
    let waited = child.wait_with_output();
    let out = match timeout {
        Some(t) => tokio::time::timeout(t, waited).await.map_err(|_| DumpError::Timeout)?,
        None => waited.await,
    }
    .map_err(|e| DumpError::Failed(e.to_string()))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(DumpError::Failed(format!(
        "{}{}",
        out.status,
        if stderr.trim().is_empty() { String::new() } else { format!(": {}", stderr.trim()) }
    )))
}

/// The `Error` lines of a CRIU log (at most the last five), for a message.
pub(crate) fn log_errors(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("Error (")).collect();
    let last = &errors[errors.len().saturating_sub(5)..];
    if last.is_empty() { String::new() } else { format!(" ({})", last.join("; ")) }
}

/// Writes the changes of an overlay upper directory as a tar (paths
/// relative to the root) and returns the deleted paths (whiteouts:
/// character devices 0/0), absolute in the container.
fn rootfs_diff(upper: &Path, tar_path: &Path, app: &rkt::schema::RuntimeApp) -> std::io::Result<Vec<String>> {
    let file = std::fs::File::create(tar_path)?;
    let mut tar = tar::Builder::new(std::io::BufWriter::new(file));
    tar.follow_symlinks(false);
    let mut deleted = Vec::new();
    if upper.is_dir() {
        walk(upper, upper, &mut tar, &mut deleted, app)?;
    }
    tar.into_inner()?.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    deleted.sort();
    Ok(deleted)
}

fn walk(
    root: &Path,
    dir: &Path,
    tar: &mut tar::Builder<std::io::BufWriter<std::fs::File>>,
    deleted: &mut Vec<String>,
    app: &rkt::schema::RuntimeApp,
) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let rel = path.strip_prefix(root).map_err(std::io::Error::other)?;
        if mounted_over(app, &Path::new("/").join(rel)) {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.file_type().is_char_device() && meta.rdev() == 0 {
            deleted.push(format!("/{}", rel.display()));
            continue;
        }
        tar.append_path_with_name(&path, rel)?;
        if meta.is_dir() {
            walk(root, &path, tar, deleted, app)?;
        }
    }
    Ok(())
}

/// Whether `path` (absolute in the container) is where something is
/// mounted over its root, or below: a volume, an identity file, the API
/// file systems. Such paths are not the container's own files: no
/// checkpoint records them, no restore writes or deletes them (that would
/// reach the volume's files on the node).
pub(crate) fn mounted_over(app: &rkt::schema::RuntimeApp, path: &Path) -> bool {
    let fixed = crate::stage1::app::IDENTITY_FILES.iter().copied().chain(["/dev", "/proc", "/sys"]);
    fixed.map(Path::new).chain(app.mounts.iter().map(|m| Path::new(&m.path))).any(|m| path.starts_with(m))
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), ContainerError> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| ContainerError::Internal(e.to_string()))?;
    std::fs::write(path, bytes).map_err(ContainerError::io(format!("writing {}", path.display())))
}

fn rfc3339(nanos: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_nanos(u64::try_from(nanos).unwrap_or(0));
    crate::base::time::rfc3339_nano(t)
}

fn config_dump(t: &Target, id: &str, paths: &AppPaths) -> ConfigDump {
    ConfigDump {
        id: id.to_string(),
        name: meta::metadata(&t.app).name,
        rootfs_image: meta::image(&t.app),
        rootfs_image_ref: t.app.image.id.clone(),
        rootfs_image_name: meta::image(&t.app),
        runtime: "rktlet".into(),
        created_time: rfc3339(app::facts(paths, true).created_at),
        checkpointed_time: rfc3339(crate::base::time::now_nanos()),
        // (Go's zero time, as Podman writes a checkpoint never restored)
        restored_time: "0001-01-01T00:00:00Z".into(),
        // (a container made from a checkpoint keeps the annotation saying so)
        restored: meta::restore_images(&t.app).is_some(),
    }
}

/// `spec.dump`: the container as an OCI runtime spec (process, mounts,
/// masked and read-only paths), with the CRI names as containerd's
/// annotations, which checkpointctl shows.
fn spec_dump(t: &Target, id: &str, pod: &rkt::schema::PodManifest) -> serde_json::Value {
    use rkt::schema::{USER_ANNOTATION_POD_NAME, USER_ANNOTATION_POD_NAMESPACE, USER_ANNOTATION_POD_UID};
    let section = t.app.app.clone().unwrap_or_default();
    let pod_get = |k: &str| pod.user_annotations.get(k).cloned().unwrap_or_default();
    let mut annotations: serde_json::Map<String, serde_json::Value> =
        meta::annotations(&t.app).into_iter().map(|(k, v)| (k, v.into())).collect();
    for (k, v) in [
        ("io.kubernetes.cri.container-type", "container".to_string()),
        ("io.kubernetes.cri.container-name", meta::metadata(&t.app).name),
        ("io.kubernetes.cri.sandbox-id", t.pod.uuid().to_string()),
        ("io.kubernetes.cri.sandbox-name", pod_get(USER_ANNOTATION_POD_NAME)),
        ("io.kubernetes.cri.sandbox-namespace", pod_get(USER_ANNOTATION_POD_NAMESPACE)),
        ("io.kubernetes.cri.sandbox-uid", pod_get(USER_ANNOTATION_POD_UID)),
        ("io.kubernetes.cri.image-name", meta::image(&t.app)),
        ("io.rktlet.container-id", id.to_string()),
    ] {
        annotations.insert(k.into(), v.into());
    }
    let (masked, readonly) = meta::path_lists(&t.app);
    let mounts: Vec<serde_json::Value> = t
        .app
        .mounts
        .iter()
        .map(|m| {
            let volume = m.app_volume.as_ref();
            let ro = volume.and_then(|v| v.read_only).unwrap_or(false);
            serde_json::json!({
                "destination": m.path,
                "type": "bind",
                "source": volume.map(|v| v.source.clone()).unwrap_or_default(),
                "options": if ro { vec!["rbind", "ro"] } else { vec!["rbind", "rw"] },
            })
        })
        .collect();
    serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {
                "uid": section.user.parse::<u32>().unwrap_or(0),
                "gid": section.group.parse::<u32>().unwrap_or(0),
                "additionalGids": section.supplementary_gids,
            },
            "args": section.exec.clone().unwrap_or_default(),
            "env": section.environment.iter().map(|e| format!("{}={}", e.name, e.value)).collect::<Vec<_>>(),
            "cwd": if section.working_directory.is_empty() { "/".to_string() } else { section.working_directory.clone() },
        },
        "root": { "path": "rootfs", "readonly": t.app.read_only_root_fs },
        "mounts": mounts,
        "annotations": annotations,
        "linux": {
            "maskedPaths": masked.unwrap_or_default(),
            "readonlyPaths": readonly.unwrap_or_default(),
        },
    })
}

/// The archive: every file of `work` (CRIU's images under `checkpoint/`),
/// written beside `location` and renamed onto it once complete and synced.
fn write_archive(work: &Path, location: &Path) -> std::io::Result<()> {
    let parent = location.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("/"));
    let name = location.file_name().ok_or_else(|| std::io::Error::other("the location names no file"))?;
    let tmp = parent.join(format!(".{}.tmp-{}", name.to_string_lossy(), uuid::Uuid::new_v4().simple()));
    let written = (|| {
        let file = std::fs::OpenOptions::new().create_new(true).write(true).open(&tmp)?;
        let mut tar = tar::Builder::new(std::io::BufWriter::new(file));
        tar.follow_symlinks(false);
        let mut entries: Vec<_> = std::fs::read_dir(work)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            if path.is_dir() {
                tar.append_dir_all(entry.file_name(), &path)?;
            } else {
                tar.append_path_with_name(&path, entry.file_name())?;
            }
        }
        tar.into_inner()?.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, location)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mounts_from_the_pod_are_external_but_those_under_proc() {
        let info = "\
218 84 0:52 / / rw,relatime master:24 - overlay overlay rw
219 218 0:22 / /sys ro,nosuid master:9 - sysfs sysfs rw
221 218 0:43 / /dev rw,nosuid master:10 - tmpfs tmpfs rw
226 218 254:0 /x/etc/hosts /etc/hosts rw,relatime master:7 - ext4 /dev/vda rw
230 218 254:0 /vol /my\\040data rw,relatime shared:3 master:7 - ext4 /dev/vda rw
176 218 0:54 / /proc rw,nosuid - proc proc rw
178 176 0:43 /null /proc/keys rw,nosuid master:10 - tmpfs tmpfs rw
180 219 0:56 / /sys/firmware ro,nosuid - tmpfs tmpfs ro";
        assert_eq!(external_mounts(info), ["/sys", "/dev", "/etc/hosts", "/my data"]);
        assert!(cgroup_mounts(info).is_empty());
        // the pod's hierarchies and the container's own cgroups on top of them: each point once
        let cgroups = "\
219 218 0:22 / /sys ro,nosuid master:9 - sysfs sysfs rw
240 219 0:25 / /sys/fs/cgroup ro,nosuid master:11 - tmpfs tmpfs ro
241 240 0:30 / /sys/fs/cgroup/memory ro,nosuid master:12 - cgroup cgroup rw,memory
242 240 0:31 / /sys/fs/cgroup/cpu,cpuacct ro,nosuid master:13 - cgroup cgroup rw,cpu,cpuacct
250 241 0:30 /pod/app-0-a /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory
251 242 0:31 /pod/app-0-a /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct
252 219 0:32 / /sys/fs/cgroupx rw - cgroup2 cgroup2 rw";
        assert_eq!(
            external_mounts(cgroups),
            ["/sys", "/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu,cpuacct"]
        );
        assert_eq!(cgroup_mounts(cgroups), ["/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu,cpuacct"]);
        let v2 = "260 219 0:26 /system.slice/a.service /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw";
        assert_eq!(cgroup_mounts(v2), ["/sys/fs/cgroup"]);
        // an escape cut short or before a multi-byte character stays as it is
        assert_eq!(unescape("/a\\04"), "/a\\04");
    }

    #[test]
    fn volumes_identity_files_and_api_file_systems_are_not_the_containers_files() {
        let mut app: rkt::schema::RuntimeApp =
            serde_json::from_value(serde_json::json!({"name": "a", "image": {"id": "sha512-x"}})).unwrap();
        app.mounts.push(rkt::schema::Mount { volume: "v".into(), path: "/data".into(), app_volume: None });
        for path in ["/data", "/data/x", "/etc/hosts", "/dev/termination-log", "/proc", "/sys/fs"] {
            assert!(mounted_over(&app, Path::new(path)), "{path}");
        }
        for path in ["/made", "/database", "/etc/hosts.allow", "/etc", "/bin/dmesg"] {
            assert!(!mounted_over(&app, Path::new(path)), "{path}");
        }
        assert_eq!(unescape("/\\é1"), "/\\é1");
    }
}
