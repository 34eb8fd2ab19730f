//! Apps of a mutable pod (rkt's `app add` / `app rm`), done in-process:
//! the app's overlay rootfs and volumes are mounted into the running pod,
//! its files written (`appsinfo/<app>`, `/rkt/env/<app>`, status files) and
//! the pod manifest rewritten under `pod.lck`.
//!
//! Runs in: the daemon (and the CLI). Mounts enter the pod through
//! [`super::inject`].

pub(crate) use super::app_status::*;
use super::inject::{self, Attach, Propagation};
use super::spare::Spare;
use super::trash::Trash;
use crate::pod::cache::ManifestCache;
use rkt::pod::{Pod, PodError, PodState};
use rkt::schema::{
    App as AppSection, ImageManifest, Mount as PodMount, NameValue, PodManifest, RuntimeApp, RuntimeImage, Volume,
};
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Pod(#[from] PodError),
    #[error("pod {pod} already has an app named {app}")]
    Exists { pod: String, app: String },
    #[error("pod {pod} has no app named {app}")]
    NotFound { pod: String, app: String },
    #[error("pod {pod} is not running ({state})")]
    PodNotRunning { pod: String, state: PodState },
    #[error("invalid app: {0}")]
    Invalid(String),
    #[error("app {app} of pod {pod}: {context}: {source}")]
    Io { pod: String, app: String, context: String, source: io::Error },
}

/// A volume to bind into the app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VolumeSpec {
    pub host_path: PathBuf,
    pub container_path: PathBuf,
    pub read_only: bool,
    pub propagation: Propagation,
    /// Recorded only (see `manifest::Volume::selinux_relabel`).
    pub selinux_relabel: bool,
    /// An image volume: the image's id and tree id (`host_path` is in the
    /// tree), recorded so the image is kept while the app has it.
    pub image: Option<(String, String)>,
    /// Asked for explicitly (see `manifest::Volume::recursive_read_only`):
    /// the volume must be read-only and private; its tree is made read-only
    /// as a whole, as any read-only volume's.
    pub recursive_read_only: bool,
}

/// Everything `App::add` needs; the caller has resolved the image.
#[derive(Debug, Clone)]
pub(crate) struct AppSpec {
    pub name: String,
    /// Image id (`sha512-...`) and name as recorded in the pod manifest.
    pub image_id: String,
    pub image_name: String,
    pub image_manifest: ImageManifest,
    /// The rendered tree: lowerdir of the app's overlay.
    pub tree_id: String,
    pub tree_rootfs: PathBuf,
    /// The app section (exec, env, user, group, working dir, isolators...).
    pub app: AppSection,
    pub volumes: Vec<VolumeSpec>,
    pub read_only_rootfs: bool,
    /// The rootfs is mounted read-only in the pod, for an app whose mount
    /// namespace the pod's systemd makes (one in the pod's PID namespace):
    /// systemd 252 leaves a `RootDirectory=` that is a mount of its own
    /// writable under `ReadOnlyPaths=/`. (appexec remounts its apps' roots.)
    pub mount_read_only: bool,
    pub annotations: Vec<NameValue>,
}

/// Joins `inner` (absolute, inside the app) under `root`, refusing `..`.
pub(crate) fn under(root: &Path, inner: &Path) -> Result<PathBuf, AppError> {
    let mut out = root.to_path_buf();
    for c in inner.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::CurDir => {}
            _ => return Err(AppError::Invalid(format!("path {} leaves the container", inner.display()))),
        }
    }
    Ok(out)
}

/// Where `inner` (absolute, inside the app) is in the tree `root` (an
/// image's tree or a new app's rootfs): `..` refused, the image's symlinks
/// followed inside `root` ([`crate::base::fsutil::resolve_in_root`]), so an
/// image's link cannot make the daemon read or create a node's file.
pub(crate) fn target_in(root: &Path, inner: &Path) -> Result<PathBuf, AppError> {
    under(root, inner)?;
    crate::base::fsutil::resolve_in_root(root, inner)
        .map_err(|e| AppError::Invalid(format!("path {} in the image: {e}", inner.display())))
}

/// Environment file content, rkt's `/rkt/env/<app>` (one `KEY=VALUE` per line).
pub(crate) fn env_file(env: &[NameValue]) -> String {
    env.iter().map(|nv| format!("{}={}\n", nv.name, nv.value.replace('\n', " "))).collect()
}

impl AppSpec {
    /// Adds the app to a running pod: overlay + volumes mounted in the pod,
    /// files written, manifest rewritten. On failure nothing of the app stays.
    /// Adds the app under the pod's manifest lock; `manifests` gives the
    /// manifest as last parsed and keeps the one written.
    /// `spare`: directories made ahead for it ([`super::spare`]), if any.
    pub(crate) fn add(&self, pod: &mut Pod, manifests: &ManifestCache, spare: Option<Spare>) -> Result<(), AppError> {
        let began = std::time::Instant::now();
        let uuid = pod.uuid().to_string();
        if !rkt::schema::is_ac_name(&self.name) {
            return Err(AppError::Invalid(format!("app name {:?} is not an ACName", self.name)));
        }
        let state = pod.state()?;
        if state != PodState::Running {
            return Err(AppError::PodNotRunning { pod: uuid, state });
        }
        let _guard = pod.lock_manifest()?;
        let manifest = (*manifests.read(pod)?).clone();
        if manifest.app(&self.name).is_some() {
            return Err(AppError::Exists { pod: uuid, app: self.name.clone() });
        }
        let paths = AppPaths::new(pod, &self.name);
        // Recovery rule: the manifest is written last, so files or mounts of
        // an app the manifest does not name are what an add interrupted by a
        // crash left; they go before this add starts over.
        if paths.appsinfo().exists() || paths.rootfs().exists() {
            let tree = fs::read_to_string(paths.appsinfo().join("treeStoreID")).ok();
            tracing::info!(pod = %uuid, app = %self.name, "removing what an interrupted add left");
            remove_files(pod, &paths, tree.as_deref().map(str::trim), None);
        }
        let checked = began.elapsed();
        if let Some(spare) = spare
            && let Err(e) = spare.place(&paths, &self.tree_id)
        {
            // what was not placed is made below, as without a spare
            tracing::debug!(pod = %uuid, app = %self.name, error = %e, "spare app directories not placed");
        }
        let steps = (began, checked, began.elapsed());
        let result = self.materialize(pod, &paths, manifest, manifests, steps);
        if result.is_err() {
            remove_files(pod, &paths, Some(&self.tree_id), None);
        }
        result
    }

    fn materialize(
        &self,
        pod: &Pod,
        paths: &AppPaths,
        mut manifest: PodManifest,
        manifests: &ManifestCache,
        (began, checked, placed): (std::time::Instant, std::time::Duration, std::time::Duration),
    ) -> Result<(), AppError> {
        let uuid = pod.uuid().to_string();
        let io = |context: &str| {
            let (pod, app, context) = (uuid.clone(), self.name.clone(), context.to_string());
            move |source| AppError::Io { pod, app, context, source }
        };
        let info = paths.appsinfo();
        fs::create_dir_all(&info).map_err(io("creating appsinfo"))?;
        let image_manifest = serde_json::to_vec(&self.image_manifest).map_err(|e| AppError::Invalid(e.to_string()))?;
        fs::write(info.join("manifest"), image_manifest).map_err(io("writing appsinfo manifest"))?;
        fs::write(info.join("treeStoreID"), &self.tree_id).map_err(io("writing treeStoreID"))?;
        let image_volumes: String = self
            .volumes
            .iter()
            .filter_map(|v| v.image.as_ref())
            .map(|(image, tree)| format!("{image} {tree}\n"))
            .collect();
        if !image_volumes.is_empty() {
            fs::write(info.join(crate::image::IMAGE_VOLUMES), image_volumes).map_err(io("writing imageVolumes"))?;
        }

        let (upper, work, rootfs) =
            (paths.overlay_upper(&self.tree_id), paths.overlay_work(&self.tree_id), paths.rootfs());
        for d in [&upper, &work, &rootfs] {
            fs::create_dir_all(d).map_err(io("creating overlay directories"))?;
        }
        let files_done = began.elapsed();
        let pid1 = pod_pid1(pod)?;
        // a pod in a user namespace: its layers and volumes are id-mapped into it
        let userns = match super::userns::of_manifest(&manifest).map_err(|e| AppError::Invalid(e.to_string()))? {
            Some(map) => Some((
                super::userns::foreign_userns(pid1)
                    .map_err(io("opening the pod's user namespace"))?
                    .ok_or_else(|| AppError::Invalid("the pod's systemd is not in a user namespace".into()))?,
                map,
            )),
            None => None,
        };
        self.mount_rootfs(paths, userns.as_ref(), (&upper, &work, &rootfs)).map_err(io("mounting overlay"))?;
        let overlay_done = began.elapsed();

        // the rootfs, then the volumes on top of it; the pod's identity files
        // are bound by the app's unit (container_start.rs), where they cost
        // other apps nothing
        if self.mount_read_only {
            // what the unit mounts or enters must be there before the root is
            // read-only (systemd's own: where it propagates mounts to the unit)
            let cwd = Some(self.app.working_directory.as_str()).filter(|w| w.starts_with('/')).unwrap_or("/");
            for dir in ["/proc", "/sys", "/dev", "/run/systemd/incoming", cwd] {
                ensure_target(&target_in(&rootfs, Path::new(dir))?, true).map_err(io("creating mount target"))?;
            }
        }
        let mut mounts = vec![
            Attach::new(
                inject::clone_tree(&rootfs, false, self.mount_read_only, Propagation::Private)
                    .map_err(io("cloning app rootfs"))?,
                &paths.rootfs_in_pod(),
            )
            .map_err(io("rootfs path"))?,
        ];
        let has = |p: &str| self.volumes.iter().any(|v| v.container_path == Path::new(p));
        for file in IDENTITY_FILES {
            if !has(file) {
                ensure_target(&target_in(&rootfs, Path::new(file))?, false).map_err(io("creating mount target"))?;
            }
        }
        for v in &self.volumes {
            if !v.host_path.exists() {
                fs::create_dir_all(&v.host_path)
                    .map_err(io(&format!("creating host path {}", v.host_path.display())))?;
            }
            let target = target_in(&rootfs, &v.container_path)?;
            ensure_target(&target, v.host_path.is_dir()).map_err(io("creating mount target"))?;
            // the volume with the mounts below it, the same tree the app's unit
            // or appexec later sees: `readonly` makes its own mount read-only,
            // `recursive_read_only` every mount of it (mount_setattr's AT_RECURSIVE)
            let tree = inject::clone_volume(&v.host_path, v.read_only, v.recursive_read_only, v.propagation)
                .map_err(io(&format!("cloning {}", v.host_path.display())))?;
            if let Some((ns, _)) = &userns {
                super::userns::idmap_tree(&tree, ns, true, &v.host_path).map_err(io("volume"))?;
            }
            // resolved again in the pod, inside the app's root: there the
            // volumes mounted before are in the way, and their links too
            mounts.push(Attach::in_root(tree, &paths.rootfs_in_pod(), &v.container_path).map_err(io("target"))?);
        }
        let targets_done = began.elapsed();
        inject::attach(pid1, &mounts).map_err(io("mounting into the pod"))?;
        let attach_done = began.elapsed();

        let env = self.app.environment.clone();
        fs::write(paths.env_file(), env_file(&env)).map_err(io("writing env file"))?;
        fs::write(paths.status_file("-created"), b"").map_err(io("writing created marker"))?;

        manifest.apps.push(RuntimeApp {
            name: self.name.clone(),
            image: RuntimeImage {
                name: Some(self.image_name.clone()),
                id: self.image_id.clone(),
                labels: self.image_manifest.labels.clone(),
            },
            app: Some(self.app.clone()),
            read_only_root_fs: self.read_only_rootfs,
            mounts: self
                .volumes
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let name = format!("{}-vol{i}", self.name);
                    PodMount {
                        volume: name.clone(),
                        path: v.container_path.display().to_string(),
                        app_volume: Some(Volume {
                            name,
                            kind: "host".into(),
                            source: v.host_path.display().to_string(),
                            read_only: Some(v.read_only),
                            recursive: Some(true),
                            mode: None,
                            uid: None,
                            gid: None,
                            propagation: Some(v.propagation.as_str().to_string()),
                            selinux_relabel: v.selinux_relabel.then_some(true),
                            recursive_read_only: v.recursive_read_only.then_some(true),
                        }),
                    }
                })
                .collect(),
            annotations: self.annotations.clone(),
        });
        crate::base::fault::point("create-before-manifest");
        manifests.write(pod, manifest)?;
        let micros = |d: std::time::Duration| d.as_micros() as u64;
        tracing::debug!(
            pod = %uuid,
            app = %self.name,
            checks_micros = micros(checked),
            spare_micros = micros(placed - checked),
            files_micros = micros(files_done - placed),
            overlay_micros = micros(overlay_done - files_done),
            targets_micros = micros(targets_done - overlay_done),
            attach_micros = micros(attach_done - targets_done),
            manifest_micros = micros(began.elapsed() - attach_done),
            "app added"
        );
        Ok(())
    }
}

/// The pod's files every app sees as its own (unless a volume provides them).
pub(crate) const IDENTITY_FILES: [&str; 3] = ["/etc/hosts", "/etc/resolv.conf", "/etc/hostname"];

/// Creates a mount target: a directory, or an empty file for file mounts.
/// The host pid of the pod's systemd.
fn pod_pid1(pod: &Pod) -> Result<i32, AppError> {
    let sandbox = pod.sandbox_pid()?.ok_or_else(|| AppError::Invalid("pod has no sandbox pid".into()))?;
    inject::pod_pid1(sandbox).map_err(|source| AppError::Io {
        pod: pod.uuid().to_string(),
        app: String::new(),
        context: "finding the pod's systemd".into(),
        source,
    })
}

impl AppSpec {
    /// Mounts the app's rootfs overlay (`upper`, `work`, `rootfs`) on the
    /// node; with the pod's user namespace `userns`, of id-mapped layers.
    fn mount_rootfs(
        &self,
        paths: &AppPaths,
        userns: Option<&(std::os::fd::OwnedFd, super::userns::IdMap)>,
        (upper, work, rootfs): (&Path, &Path, &Path),
    ) -> io::Result<()> {
        let Some((ns, map)) = userns else {
            return inject::mount_overlay(&self.tree_rootfs, upper, work, rootfs);
        };
        let staging = paths.pod_path.join("idmap").join(&self.name);
        super::userns::idmapped_overlay(ns, *map, &self.tree_rootfs, upper, work, &staging, rootfs)
    }
}

fn ensure_target(target: &Path, dir: bool) -> io::Result<()> {
    if target.exists() {
        return Ok(());
    }
    if dir {
        return fs::create_dir_all(target);
    }
    if let Some(parent) = target.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::write(target, b"")
}

/// Unmounts an app inside the pod (volumes first) and on the host, and
/// deletes its files. Best effort: used on failure paths and by `rm`. With
/// `trash` its directories and files are moved there (deleted after, by
/// the caller's `Trash::empty_later`), else deleted here.
fn remove_files(pod: &Pod, paths: &AppPaths, tree_id: Option<&str>, mut trash: Option<&mut Trash>) {
    let mut remove = |path: &Path| {
        if let Some(t) = trash.as_deref_mut()
            && t.put(path).is_ok()
        {
            return;
        }
        let _ = fs::remove_dir_all(path).or_else(|_| fs::remove_file(path));
    };
    let mut steps = crate::base::steps::Steps::new();
    let in_pod = paths.rootfs_in_pod();
    if let Ok(Some(pid)) = pod.sandbox_pid()
        && let Ok(pid1) = inject::pod_pid1(pid)
        && let Ok(target) = CString::new(in_pod.as_os_str().as_bytes())
    {
        // MNT_DETACH on the rootfs takes the volumes and files below it along
        let _ = inject::detach(pid1, &[target]);
        // a host-PID app's copy of the node's /proc
        let host_proc = format!("/rkt/hostproc/{}", paths.name);
        if let Ok(target) = CString::new(host_proc.as_bytes())
            && Path::new(&format!("/proc/{pid1}/root{host_proc}")).exists()
        {
            let _ = inject::detach(pid1, &[target]);
            let _ = fs::remove_dir(format!("/proc/{pid1}/root{host_proc}"));
        }
    }
    steps.mark("in-pod");
    let _ = super::stop::unmount_below(&paths.rootfs());
    steps.mark("host-umount");
    remove(paths.rootfs().parent().unwrap_or(&paths.rootfs()));
    steps.mark("rootfs-dir");
    remove(&paths.appsinfo());
    remove(&paths.env_file());
    remove(&paths.devices());
    remove(&paths.checkpoint());
    // (a start interrupted by a crash leaves its FIFO)
    remove(&paths.started_fifo());
    for suffix in ["", "-created", "-started", STARTED_SPARE, "-stopping", START_ERROR, OOM_KILLED, HOST_PID] {
        remove(&paths.status_file(suffix));
    }
    steps.mark("files");
    if let Some(id) = tree_id {
        let (upper, work) = (paths.overlay_upper(id), paths.overlay_work(id));
        remove(&upper);
        remove(&work);
        // the shared directories above them, where no other app is left
        // (remove_dir leaves one that is not empty)
        let tree = upper.parent().and_then(Path::parent);
        for dir in [upper.parent(), work.parent(), tree, tree.and_then(Path::parent)].into_iter().flatten() {
            let _ = fs::remove_dir(dir);
        }
    }
    steps.mark("overlay-dirs");
    if let Some(appsinfo) = paths.appsinfo().parent() {
        let _ = fs::remove_dir(appsinfo);
    }
    tracing::debug!(app = %paths.name, steps = %steps.line(), "app files removed");
}

/// Removes an app from a pod (it must be stopped): mounts, files, manifest entry.
pub(crate) fn remove(pod: &mut Pod, name: &str, manifests: &ManifestCache) -> Result<(), AppError> {
    let uuid = pod.uuid().to_string();
    let _guard = pod.lock_manifest()?;
    let mut manifest = (*manifests.read(pod)?).clone();
    let Some(index) = manifest.apps.iter().position(|a| a.name == name) else {
        return Err(AppError::NotFound { pod: uuid, app: name.to_string() });
    };
    let paths = AppPaths::new(pod, name);
    let tree_id = fs::read_to_string(paths.appsinfo().join("treeStoreID")).ok();
    let mut trash = Trash::of(&pod.path());
    remove_files(pod, &paths, tree_id.as_deref().map(str::trim), Some(&mut trash));
    manifest.apps.remove(index);
    let written = manifests.write(pod, manifest);
    trash.empty_later();
    written?;
    Ok(())
}

/// Bytes and inodes of all writable layers of a pod (its overlay directory).
pub(crate) fn pod_writable_usage(pod: &Pod) -> (u64, u64) {
    rkt::extract::usage(&pod.path().join("overlay"))
}

/// Makes sure the pod's `/etc/passwd` and `/etc/group` name `uid` and the
/// `gids`: the pod's systemd resolves `User=`/`Group=` there, before it
/// enters the app's root, and refuses ids it cannot name.
pub(crate) fn ensure_ids(stage1: &Path, uid: u32, gids: &[u32]) -> io::Result<()> {
    let add = |file: &str, id: u32, line: String| -> io::Result<()> {
        let path = stage1.join("etc").join(file);
        let text = fs::read_to_string(&path).unwrap_or_default();
        let known = text.lines().any(|l| l.split(':').nth(2).and_then(|f| f.parse::<u32>().ok()) == Some(id));
        if !known {
            let mut f = fs::OpenOptions::new().append(true).open(&path)?;
            io::Write::write_all(&mut f, line.as_bytes())?;
        }
        Ok(())
    };
    let gid = gids.first().copied().unwrap_or(0);
    add("passwd", uid, format!("rktlet-{uid}:x:{uid}:{gid}::/:/usr/sbin/nologin\n"))?;
    for g in gids {
        add("group", *g, format!("rktlet-{g}:x:{g}:\n"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside() {
        let root = Path::new("/r");
        assert_eq!(under(root, Path::new("/etc/hosts")).expect("ok"), PathBuf::from("/r/etc/hosts"));
        assert_eq!(under(root, Path::new("a/./b")).expect("ok"), PathBuf::from("/r/a/b"));
        assert!(under(root, Path::new("/a/../../etc")).is_err());
    }

    #[test]
    fn env_file_format() {
        let env = vec![NameValue::new("A", "1"), NameValue::new("B", "x\ny")];
        assert_eq!(env_file(&env), "A=1\nB=x y\n");
    }
}
