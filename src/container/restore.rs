//! A container restored from a checkpoint archive (`container::checkpoint`):
//! CreateContainer whose image is the archive's path, as CRI-O takes it.
//! The container is created from the archive's base image (which must be
//! in the store) with the archive's command, environment and working
//! directory, the request's name, log, labels, annotations, mounts and
//! security context; its writable layer gets the archive's changes and
//! CRIU's images wait in the pod (`/rkt/checkpoint/<app>`) for
//! StartContainer, which restores them instead of exec'ing the command
//! (`container::start`).

use super::checkpoint::{self, ConfigDump, DumpFacts};
use super::create::{self, PidAsked};
use super::{ContainerError, meta, open};
use crate::runtime::Runtime;
use crate::stage1::app::{self, AppPaths};
use std::path::{Path, PathBuf};

/// Whether a CreateContainer image names a checkpoint archive: a path
/// (no image reference starts with `/`).
pub(crate) fn is_archive(image: &str) -> bool {
    image.starts_with('/')
}

/// Creates a container from the checkpoint archive at `req.image`; its id.
pub(crate) async fn create(rt: &std::sync::Arc<Runtime>, req: create::Request) -> Result<String, ContainerError> {
    let staged = rt.data.root().join("tmp").join(format!("restore-{}", uuid::Uuid::new_v4().simple()));
    let result = create_staged(rt, req, &staged).await;
    let _ = std::fs::remove_dir_all(&staged);
    result
}

/// What an archive holds, read and checked.
struct Archive {
    config: ConfigDump,
    spec: serde_json::Value,
    facts: DumpFacts,
}

fn bad(archive: &Path, what: impl std::fmt::Display) -> ContainerError {
    ContainerError::InvalidArgument(format!("checkpoint archive {}: {what}", archive.display()))
}

/// Unpacks the archive in `staged` and reads its JSON files.
fn unpack(archive: &Path, staged: &Path) -> Result<Archive, ContainerError> {
    let file = std::fs::File::open(archive).map_err(|e| bad(archive, e))?;
    std::fs::create_dir_all(staged).map_err(ContainerError::io(format!("creating {}", staged.display())))?;
    tar::Archive::new(std::io::BufReader::new(file)).unpack(staged).map_err(|e| bad(archive, e))?;
    let read = |name: &str| -> Result<serde_json::Value, ContainerError> {
        let bytes = std::fs::read(staged.join(name)).map_err(|e| bad(archive, format!("{name}: {e}")))?;
        serde_json::from_slice(&bytes).map_err(|e| bad(archive, format!("{name}: {e}")))
    };
    let config: ConfigDump = serde_json::from_value(read(checkpoint::CONFIG_DUMP)?)
        .map_err(|e| bad(archive, format!("config.dump: {e}")))?;
    let spec = read(checkpoint::SPEC_DUMP)?;
    let facts: DumpFacts = serde_json::from_value(read(checkpoint::RKTLET_JSON)?)
        .map_err(|e| bad(archive, format!("{}: {e} (not a checkpoint made by rktlet)", checkpoint::RKTLET_JSON)))?;
    if !staged.join(checkpoint::CHECKPOINT_DIR).join("inventory.img").is_file() {
        return Err(bad(archive, "no CRIU images (checkpoint/inventory.img)"));
    }
    if config.rootfs_image_name.is_empty() && config.rootfs_image_ref.is_empty() {
        return Err(bad(archive, "config.dump names no image"));
    }
    Ok(Archive { config, spec, facts })
}

async fn create_staged(
    rt: &std::sync::Arc<Runtime>,
    mut req: create::Request,
    staged: &Path,
) -> Result<String, ContainerError> {
    let archive = PathBuf::from(&req.image);
    let pod = rkt::pod::Pod::open(&rt.data, &req.pod_id)?;
    checkpoint::refuse_user_namespace(rt, &pod, &format!("pod {}", pod.uuid()))?;
    let a = tokio::task::block_in_place(|| unpack(&archive, staged))?;
    // the base image, by the name it was pulled as, else by id
    let base = [&a.config.rootfs_image_name, &a.config.rootfs_image_ref]
        .into_iter()
        .find(|r| !r.is_empty() && tokio::task::block_in_place(|| rt.images.tree(r)).is_ok())
        .cloned()
        .ok_or_else(|| {
            ContainerError::NotFound(format!(
                "image {} of checkpoint archive {} is not in the image store: pull it first",
                a.config.rootfs_image_name,
                archive.display()
            ))
        })?;
    let process = &a.spec["process"];
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
    };
    let command = strings(&process["args"]);
    if command.is_empty() {
        return Err(bad(&archive, "spec.dump has no process.args"));
    }
    // every volume of the checkpointed container must be given again (CRI-O's rule)
    let missing: Vec<String> = a.spec["mounts"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["destination"].as_str().map(str::to_string)).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|d| !req.mounts.iter().any(|m| &m.container_path == d))
        .collect();
    if !missing.is_empty() {
        return Err(bad(&archive, format!("the restored container needs its mounts at {}", missing.join(", "))));
    }
    req.image = base;
    req.command = command;
    req.args = Vec::new();
    req.envs = strings(&process["env"])
        .into_iter()
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
    req.working_dir = process["cwd"].as_str().unwrap_or("/").to_string();
    // the confinement of the restored processes comes from CRIU's images;
    // the ids recorded for ContainerStatus are the checkpoint's
    let id = |k: &str| process["user"][k].as_i64();
    req.identity.run_as_user = id("uid").or(req.identity.run_as_user);
    req.identity.run_as_group = id("gid").or(req.identity.run_as_group);
    req.identity.run_as_username.clear();
    req.pid_namespace = PidAsked::Container;
    req.tty = false;
    let name = meta::app_name_of(&req.name, req.attempt);
    let pod_id = req.pod_id.clone();
    req.restore = Some(AppPaths::new(&pod, &name).checkpoint_in_pod().display().to_string());
    let container = create::create(rt, req).await?;
    if let Err(e) = tokio::task::block_in_place(|| place(rt, &container, staged, &a.facts)) {
        tracing::warn!(pod = %pod_id, container = %container, error = %e, "restore: removing the container made");
        let _ = super::remove::remove(rt, &container).await;
        return Err(e);
    }
    Ok(container)
}

/// Where a path the archive says was deleted is in the new container's
/// root: its directory resolved as the container would (the image's
/// symlinks followed inside `rootfs`, never onto the node's files: an
/// archive is the caller's input), its last component itself (a link is
/// removed, not followed). None for `/` or a path leaving the root.
fn deletion_target(rootfs: &Path, path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    let dir = app::target_in(rootfs, path.parent()?).ok()?;
    Some(dir.join(name))
}

/// Puts CRIU's images (and rktlet's facts) where the container's start
/// finds them, and the archive's changes in its writable layer.
fn place(rt: &Runtime, id: &str, staged: &Path, facts: &DumpFacts) -> Result<(), ContainerError> {
    let t = open(rt, id)?;
    let paths = AppPaths::new(&t.pod, &t.app.name);
    let images = paths.checkpoint();
    if let Some(parent) = images.parent() {
        std::fs::create_dir_all(parent).map_err(ContainerError::io(format!("creating {}", parent.display())))?;
    }
    std::fs::rename(staged.join(checkpoint::CHECKPOINT_DIR), &images)
        .map_err(ContainerError::io(format!("moving CRIU's images to {}", images.display())))?;
    let json = serde_json::to_vec(facts).map_err(|e| ContainerError::Internal(e.to_string()))?;
    std::fs::write(images.join(checkpoint::RKTLET_JSON), json)
        .map_err(ContainerError::io(format!("writing {}", images.display())))?;
    // the writable layer: what the container deleted, then what it wrote
    let rootfs = paths.rootfs();
    let deleted: Vec<String> = std::fs::read(staged.join(checkpoint::DELETED_FILES))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    for path in deleted {
        if checkpoint::mounted_over(&t.app, Path::new(&path)) {
            continue;
        }
        let Some(at) = deletion_target(&rootfs, Path::new(&path)) else { continue };
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => drop(std::fs::remove_dir_all(&at)),
            Ok(_) => drop(std::fs::remove_file(&at)),
            Err(_) => {}
        }
    }
    let diff = staged.join(checkpoint::ROOTFS_DIFF);
    if diff.is_file() {
        let file = std::fs::File::open(&diff).map_err(ContainerError::io("opening rootfs-diff.tar"))?;
        let mut tar = tar::Archive::new(std::io::BufReader::new(file));
        tar.set_preserve_permissions(true);
        tar.set_preserve_ownerships(true);
        tar.set_overwrite(true);
        let invalid = |e: std::io::Error| ContainerError::InvalidArgument(format!("rootfs-diff.tar: {e}"));
        for entry in tar.entries().map_err(invalid)? {
            let mut entry = entry.map_err(invalid)?;
            let inner = Path::new("/").join(entry.path().map_err(invalid)?);
            // (what a volume or the pod provides stays theirs)
            if checkpoint::mounted_over(&t.app, &inner) {
                continue;
            }
            // (refuses a path leading out of the root, through `..` or a link)
            entry.unpack_in(&rootfs).map_err(invalid)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletions_stay_inside_the_root() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("usr/lib")).unwrap();
        // an image's absolute link to a directory, and one that names the node's
        std::os::unix::fs::symlink("/usr/lib", root.path().join("lib")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("escape")).unwrap();
        let at = |p: &str| deletion_target(root.path(), Path::new(p));
        assert_eq!(at("/lib/x"), Some(root.path().join("usr/lib/x")));
        assert_eq!(at("/lib"), Some(root.path().join("lib")), "the link itself, not its target");
        let inside = outside.path().strip_prefix("/").unwrap();
        assert_eq!(at("/escape/victim"), Some(root.path().join(inside).join("victim")));
        assert_eq!(at("/../etc/passwd"), None);
        assert_eq!(at("/"), None);
    }
}
