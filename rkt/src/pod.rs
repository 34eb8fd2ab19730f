//! The rkt pod directory: the data dir layout, a pod's state (which parent
//! directory it sits in plus whether its directory lock is held), the
//! transitions between states, and the `pod` manifest with its `pod.lck`.
//!
//! This module is the only writer of pod directories. Any process (daemon,
//! CLI, gc) can read a pod's state from disk; nothing is cached here.
//!
//! Durability: every change is atomic (rename), so a killed process leaves
//! each file and each state either before or after the change. Nothing is
//! fsync'ed: a pod does not survive a reboot, so after a power loss its
//! directory is garbage whatever it says, and fsyncs would cost the pod start
//! milliseconds each (rkt fsynced the parent on every state rename).

use crate::fs as fsutil;
use crate::lock::{self, HeldLock};
use crate::schema::PodManifest;
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use uuid::Uuid;

/// The kernel's limit on a hostname, in bytes (`HOST_NAME_MAX`).
pub const HOST_NAME_MAX: usize = 64;

/// The hostname of a pod that names none: its name, cut to 63 bytes with
/// trailing `-` and `.` removed, as kubelet cuts a long pod name (the kernel
/// takes at most [`HOST_NAME_MAX`]).
pub fn hostname_from_name(name: &str) -> &str {
    let mut end = name.len().min(63);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].trim_end_matches(['-', '.'])
}

/// Where a pod is, relative to each cgroup hierarchy's root (its
/// `subcgroup` file): its v1 controller cgroups and its process-tracking ones
/// (unified, `name=systemd`). They differ only for a pod booted ahead of its
/// use, whose tracking cgroup it cannot leave (rktlet's pod pool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subcgroups {
    /// The path in the v1 controller hierarchies (`subcgroup`).
    pub controllers: String,
    /// The path in the process-tracking hierarchies (`subcgroup-tracking`,
    /// else `subcgroup`).
    pub tracking: String,
}

/// Name of the pod manifest file in a pod directory.
pub const MANIFEST_FILE: &str = "pod";
/// Lock file serialising manifest rewrites (`app add` / `app rm`).
pub(crate) const MANIFEST_LOCK_FILE: &str = "pod.lck";
/// Empty file whose mtime is the pod's creation time.
pub const CREATED_FILE: &str = "pod-created";
/// PID of the sandbox process (systemd-nspawn), decimal + newline.
pub const PPID_FILE: &str = "ppid";
/// The pod's cgroup path relative to each hierarchy root: in the v1
/// controller hierarchies, where limits and accounting live, always.
pub const SUBCGROUP_FILE: &str = "subcgroup";
/// rktlet's addition: the pod's path in the process-tracking hierarchies
/// (unified, `name=systemd`), where its systemd's own tree is. The same as
/// `subcgroup` unless the pod was booted ahead in the pod pool, whose pods
/// cannot leave their tracking cgroup (rktlet's pod pool).
pub const TRACKING_SUBCGROUP_FILE: &str = "subcgroup-tracking";
/// Path of the pod's bind-mounted network namespace.
pub const NETNS_FILE: &str = "netns";
/// CNI results: rkt's JSON array of `{netName, netConf, pluginPath, ifName, ip, args, mask}`.
pub const NET_INFO_FILE: &str = "net-info.json";
/// Runtime options the sandbox was started with (JSON).
pub const RUNTIME_CONFIG_FILE: &str = "runtime-config";
/// rkt's readiness link, relative to a pod's stage1 root: `ready` once the
/// pod's stage1 takes apps.
pub const SUPERVISOR_STATUS: &str = "rkt/supervisor-status";

/// Whether the stage1 root `stage1_rootfs` says its pod is ready
/// ([`SUPERVISOR_STATUS`] reads `ready`).
pub fn stage1_is_ready(stage1_rootfs: &Path) -> bool {
    fs::read_link(stage1_rootfs.join(SUPERVISOR_STATUS)).is_ok_and(|t| t == Path::new("ready"))
}
/// nspawn's and the pod systemd's console output.
pub const SANDBOX_LOG_FILE: &str = "sandbox.log";

/// Errors of the pod directory layer; each names the pod it concerns.
#[derive(Debug, thiserror::Error)]
pub enum PodError {
    /// No pod has this id (or id prefix).
    #[error("pod {0} not found")]
    NotFound(String),
    /// The id prefix matches more than one pod.
    #[error("pod id prefix {0:?} matches more than one pod")]
    Ambiguous(String),
    /// The id is neither a uuid nor a prefix of one.
    #[error("invalid pod id {0:?}: expected a UUID or a UUID prefix")]
    InvalidId(String),
    /// The pod's state does not allow the operation.
    #[error("pod {uuid} is {state}, cannot {op}")]
    WrongState {
        /// The pod.
        uuid: Uuid,
        /// Its state when the operation was refused.
        state: PodState,
        /// The operation refused.
        op: &'static str,
    },
    /// A pod with this uuid exists already.
    #[error("pod {0} already exists")]
    Exists(Uuid),
    /// Another process holds the pod's lock.
    #[error("pod {0} is locked by another process")]
    Busy(Uuid),
    /// The pod manifest cannot be parsed (or serialized).
    #[error("pod {uuid}: invalid pod manifest: {source}")]
    Manifest {
        /// The pod.
        uuid: Uuid,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// A file system operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: io::Error,
    },
}

/// The result of a pod directory operation.
pub type Result<T> = std::result::Result<T, PodError>;

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> PodError {
    let context = context.into();
    move |source| PodError::Io { context, source }
}

/// The six parent directories under `pods/`; the one holding a pod is half its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodDir {
    /// `pods/embryo`: created, not being prepared yet.
    Embryo,
    /// `pods/prepare`: being prepared (locked), or its preparation aborted.
    Prepare,
    /// `pods/prepared`: prepared, not run yet.
    Prepared,
    /// `pods/run`: running (locked) or exited.
    Run,
    /// `pods/exited-garbage`: exited, marked as garbage (locked while deleted).
    ExitedGarbage,
    /// `pods/garbage`: never run, marked as garbage (locked while deleted).
    Garbage,
}

impl PodDir {
    /// In rkt's lookup order: the first directory holding the uuid wins.
    pub const ALL: [PodDir; 6] =
        [PodDir::Embryo, PodDir::Prepare, PodDir::Prepared, PodDir::Run, PodDir::ExitedGarbage, PodDir::Garbage];

    /// The directory's name under `pods/`.
    fn name(self) -> &'static str {
        match self {
            PodDir::Embryo => "embryo",
            PodDir::Prepare => "prepare",
            PodDir::Prepared => "prepared",
            PodDir::Run => "run",
            PodDir::ExitedGarbage => "exited-garbage",
            PodDir::Garbage => "garbage",
        }
    }

    /// Whether CRI lists the pods of this directory: those that ran, until
    /// removed (`run`, and `exited-garbage` where `rkt gc` marks exited pods).
    pub fn is_listed(self) -> bool {
        matches!(self, PodDir::Run | PodDir::ExitedGarbage)
    }

    /// The state of a pod in this directory, given whether its lock is held.
    fn state(self, locked: bool) -> PodState {
        match (self, locked) {
            (PodDir::Embryo, _) => PodState::Embryo,
            (PodDir::Prepare, true) => PodState::Preparing,
            (PodDir::Prepare, false) => PodState::AbortedPrepare,
            (PodDir::Prepared, _) => PodState::Prepared,
            (PodDir::Run, true) => PodState::Running,
            (PodDir::Run, false) => PodState::Exited,
            (PodDir::ExitedGarbage, true) => PodState::ExitedDeleting,
            (PodDir::ExitedGarbage, false) => PodState::ExitedGarbage,
            (PodDir::Garbage, true) => PodState::Deleting,
            (PodDir::Garbage, false) => PodState::Garbage,
        }
    }

    /// Embryo and prepared pods carry no meaningful lock (rkt does not probe them).
    fn lock_matters(self) -> bool {
        !matches!(self, PodDir::Embryo | PodDir::Prepared)
    }
}

/// A pod's state, with rkt's names (`rkt list`/`status` JSON `state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodState {
    /// In `embryo`.
    Embryo,
    /// In `prepare`, locked: being prepared.
    Preparing,
    /// In `prepare`, unlocked: its preparer is gone.
    AbortedPrepare,
    /// In `prepared`.
    Prepared,
    /// In `run`, locked: its sandbox process lives.
    Running,
    /// In `garbage`, locked: being deleted.
    Deleting,
    /// In `exited-garbage`, locked: being deleted.
    ExitedDeleting,
    /// In `run`, unlocked: it ran and its sandbox process is gone.
    Exited,
    /// In `exited-garbage`, unlocked.
    ExitedGarbage,
    /// In `garbage`, unlocked.
    Garbage,
}

impl PodState {
    /// rkt's name of the state: `running`, `exited garbage`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            PodState::Embryo => "embryo",
            PodState::Preparing => "preparing",
            PodState::AbortedPrepare => "aborted prepare",
            PodState::Prepared => "prepared",
            PodState::Running => "running",
            PodState::Deleting => "deleting",
            PodState::ExitedDeleting => "exited deleting",
            PodState::Exited => "exited",
            PodState::ExitedGarbage => "exited garbage",
            PodState::Garbage => "garbage",
        }
    }
}

impl fmt::Display for PodState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// rkt's data directory (`--dir`): pods, the image store, locks and scratch space.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// The data dir at `root`; nothing is created.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The data dir itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `pods/`, the parent of the state directories.
    fn pods(&self) -> PathBuf {
        self.root.join("pods")
    }

    /// The state directory `pods/<dir>`.
    pub fn pod_parent(&self, dir: PodDir) -> PathBuf {
        self.pods().join(dir.name())
    }

    /// The image store, `cas/`.
    pub fn cas(&self) -> PathBuf {
        self.root.join("cas")
    }

    /// `locks/`: lock files shared with rkt (such as its `prepareLock`).
    pub fn locks(&self) -> PathBuf {
        self.root.join("locks")
    }

    /// Scratch space, `tmp/`.
    pub fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// Where the daemon moves removed pods' directories to delete them after
    /// the call that removed them (rkt never looks there).
    pub(crate) fn trash(&self) -> PathBuf {
        self.tmp().join("rktlet-trash")
    }

    /// Deletes whatever is in the trash (what a daemon that died left there).
    pub fn empty_trash(&self) -> usize {
        let Ok(entries) = fs::read_dir(self.trash()) else { return 0 };
        let mut emptied = 0;
        for e in entries.flatten() {
            match fs::remove_dir_all(e.path()) {
                Ok(()) => emptied += 1,
                Err(err) => {
                    tracing::warn!(path = %e.path().display(), error = %err, "cannot delete a removed pod's directory")
                }
            }
        }
        emptied
    }

    /// Creates the layout (0750 directories, as rkt does when they are missing). Idempotent.
    pub fn ensure(&self) -> Result<()> {
        let mut dirs = vec![self.root.clone(), self.tmp(), self.locks(), self.cas(), self.pods()];
        dirs.extend(PodDir::ALL.iter().map(|d| self.pod_parent(*d)));
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true).mode(0o750);
        for dir in dirs {
            builder.create(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        }
        Ok(())
    }

    /// Every pod directory, in lookup order. A uuid seen twice (mid-rename) is reported once.
    pub fn list_pods(&self) -> Result<Vec<(Uuid, PodDir)>> {
        let mut out: Vec<(Uuid, PodDir)> = Vec::new();
        for dir in PodDir::ALL {
            let parent = self.pod_parent(dir);
            let entries = match fs::read_dir(&parent) {
                Ok(e) => e,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(format!("listing {}", parent.display()))(e)),
            };
            for entry in entries {
                let entry = entry.map_err(io_err(format!("listing {}", parent.display())))?;
                let Some(uuid) = entry.file_name().to_str().and_then(|n| Uuid::parse_str(n).ok()) else {
                    continue;
                };
                if !out.iter().any(|(u, _)| *u == uuid) {
                    out.push((uuid, dir));
                }
            }
        }
        Ok(out)
    }

    /// Resolves a full uuid or a unique prefix of one (case-insensitive, dashes optional).
    pub fn resolve(&self, id: &str) -> Result<Uuid> {
        if let Ok(uuid) = Uuid::parse_str(id) {
            return Ok(uuid);
        }
        self.resolve_in(id, self.list_pods()?.into_iter().map(|(uuid, _)| uuid))
    }

    /// Resolves a pod id prefix among `uuids` (a listing already made).
    pub fn resolve_in(&self, id: &str, uuids: impl Iterator<Item = Uuid>) -> Result<Uuid> {
        let want: String = id.chars().filter(|c| *c != '-').collect::<String>().to_ascii_lowercase();
        if want.is_empty() || !want.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(PodError::InvalidId(id.to_string()));
        }
        let mut found = None;
        for uuid in uuids {
            if uuid.simple().to_string().starts_with(&want) {
                if found.is_some() {
                    return Err(PodError::Ambiguous(id.to_string()));
                }
                found = Some(uuid);
            }
        }
        found.ok_or_else(|| PodError::NotFound(id.to_string()))
    }
}

/// A pod directory. Holds the pod's exclusive lock while this process is the
/// pod's creator (preparing) or runner; otherwise it is only a handle.
#[derive(Debug)]
pub struct Pod {
    data: DataDir,
    uuid: Uuid,
    dir: PodDir,
    lock: Option<HeldLock>,
}

impl Pod {
    /// Creates a new embryo pod with a random uuid (`pods/embryo/<uuid>`, 0750).
    pub fn create(data: &DataDir) -> Result<Pod> {
        Self::create_with_uuid(data, Uuid::new_v4())
    }

    /// Creates a new embryo pod with a uuid chosen by the caller (the daemon
    /// picks it so it can name the netns and cgroup before the sandbox runs).
    pub fn create_with_uuid(data: &DataDir, uuid: Uuid) -> Result<Pod> {
        data.ensure()?;
        if Self::locate(data, uuid)?.is_some() {
            return Err(PodError::Exists(uuid));
        }
        let parent = data.pod_parent(PodDir::Embryo);
        let path = parent.join(uuid.to_string());
        fs::DirBuilder::new()
            .mode(0o750)
            .create(&path)
            .map_err(io_err(format!("creating pod directory {}", path.display())))?;
        Ok(Pod { data: data.clone(), uuid, dir: PodDir::Embryo, lock: None })
    }

    /// Opens an existing pod by uuid or unique uuid prefix.
    pub fn open(data: &DataDir, id: &str) -> Result<Pod> {
        let uuid = data.resolve(id)?;
        let dir = Self::locate(data, uuid)?.ok_or_else(|| PodError::NotFound(id.to_string()))?;
        Ok(Pod { data: data.clone(), uuid, dir, lock: None })
    }

    fn locate(data: &DataDir, uuid: Uuid) -> Result<Option<PodDir>> {
        let name = uuid.to_string();
        for dir in PodDir::ALL {
            let path = data.pod_parent(dir).join(&name);
            match fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => return Ok(Some(dir)),
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(format!("reading {}", path.display()))(e)),
            }
        }
        Ok(None)
    }

    /// The pod's uuid.
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    /// The data dir the pod is in.
    pub fn data_dir(&self) -> &DataDir {
        &self.data
    }

    /// The directory the pod was last seen in.
    pub fn dir(&self) -> PodDir {
        self.dir
    }

    /// The pod directory (`$P`).
    pub fn path(&self) -> PathBuf {
        self.data.pod_parent(self.dir).join(self.uuid.to_string())
    }

    /// The pod manifest, `$P/pod`.
    pub fn manifest_path(&self) -> PathBuf {
        self.path().join(MANIFEST_FILE)
    }

    /// Whether this handle holds the pod's exclusive lock.
    #[cfg(test)]
    pub(crate) fn holds_lock(&self) -> bool {
        self.lock.is_some()
    }

    /// Re-reads where the pod is and whether its lock is held, and returns its state.
    /// The pod may move between the directory lookup and the lock probe, so the
    /// probe is retried a few times.
    pub(crate) fn refresh(&mut self) -> Result<PodState> {
        // the directory the pod was last seen in is nearly always still right:
        // probing it first saves the lookup through every state directory
        if let Some(state) = self.probe(self.dir)? {
            return Ok(state);
        }
        for _ in 0..3 {
            let Some(dir) = Self::locate(&self.data, self.uuid)? else {
                return Err(PodError::NotFound(self.uuid.to_string()));
            };
            self.dir = dir;
            if let Some(state) = self.probe(dir)? {
                return Ok(state);
            }
        }
        Err(PodError::NotFound(self.uuid.to_string()))
    }

    /// The pod's state if it is in `dir`; `None` if it is not there.
    fn probe(&mut self, dir: PodDir) -> Result<Option<PodState>> {
        let path = self.data.pod_parent(dir).join(self.uuid.to_string());
        if !dir.lock_matters() || self.lock.is_some() {
            return match fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => {
                    self.dir = dir;
                    Ok(Some(dir.state(self.lock.is_some())))
                }
                Ok(_) => Ok(None),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io_err(format!("reading {}", path.display()))(e)),
            };
        }
        match lock::is_held(&path) {
            Ok(held) => {
                self.dir = dir;
                Ok(Some(dir.state(held)))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => Ok(None),
            Err(e) => Err(io_err(format!("probing lock of pod {}", self.uuid))(e)),
        }
    }

    /// A handle on a pod known to be in `dir` (from a listing), without a lookup.
    pub fn at(data: &DataDir, uuid: Uuid, dir: PodDir) -> Pod {
        Pod { data: data.clone(), uuid, dir, lock: None }
    }

    /// The pod's current state, read from disk.
    pub fn state(&mut self) -> Result<PodState> {
        self.refresh()
    }

    fn wrong_state(&mut self, op: &'static str) -> PodError {
        match self.refresh() {
            Ok(state) => PodError::WrongState { uuid: self.uuid, state, op },
            Err(e) => e,
        }
    }

    /// Takes the pod's lock for a state change. Another reader's state
    /// probe holds it for a moment (a status or an event handler of the
    /// daemon as the pod stops, seen once in CI as a Busy RemovePodSandbox),
    /// so a lock held is tried again for up to 50 ms; a pod still running
    /// holds it for good and stays Busy.
    fn take_lock(&mut self) -> Result<()> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(50);
        while self.lock.is_none() {
            match lock::try_exclusive_dir(&self.path()).map_err(io_err(format!("locking pod {}", self.uuid)))? {
                Some(lock) => self.lock = Some(lock),
                None if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(1)),
                None => return Err(PodError::Busy(self.uuid)),
            }
        }
        Ok(())
    }

    fn rename_to(&mut self, to: PodDir) -> Result<()> {
        let from_path = self.path();
        let to_parent = self.data.pod_parent(to);
        let to_path = to_parent.join(self.uuid.to_string());
        fs::rename(&from_path, &to_path).map_err(io_err(format!("moving pod {} to {}", self.uuid, to.name())))?;
        self.dir = to;
        Ok(())
    }

    /// embryo -> prepare: takes the pod lock first and keeps it.
    pub fn to_preparing(&mut self) -> Result<()> {
        if self.refresh()? != PodState::Embryo {
            return Err(self.wrong_state("start preparing"));
        }
        self.take_lock()?;
        self.rename_to(PodDir::Prepare)
    }

    /// prepare -> prepared: the preparer releases the lock.
    pub fn to_prepared(&mut self) -> Result<()> {
        if self.refresh()? != PodState::Preparing || self.lock.is_none() {
            return Err(self.wrong_state("mark prepared"));
        }
        self.rename_to(PodDir::Prepared)?;
        self.lock = None;
        Ok(())
    }

    /// prepare (held by us) or prepared -> run. The lock stays held: hand it to
    /// the sandbox process through [`Pod::lock_fd`] so the pod reads as running
    /// exactly while that process lives.
    pub fn to_run(&mut self) -> Result<()> {
        match self.refresh()? {
            PodState::Preparing if self.lock.is_some() => {}
            PodState::Prepared => self.take_lock()?,
            _ => return Err(self.wrong_state("run")),
        }
        self.rename_to(PodDir::Run)
    }

    /// run (exited) -> exited-garbage; refused while the pod runs.
    pub fn to_exited_garbage(&mut self) -> Result<()> {
        if self.refresh()? != PodState::Exited {
            return Err(self.wrong_state("mark exited pod as garbage"));
        }
        self.rename_to(PodDir::ExitedGarbage)
    }

    /// aborted prepare, prepared or embryo -> garbage.
    pub fn to_garbage(&mut self) -> Result<()> {
        match self.refresh()? {
            PodState::AbortedPrepare | PodState::Prepared | PodState::Embryo => {}
            PodState::Preparing if self.lock.is_some() => {}
            _ => return Err(self.wrong_state("mark as garbage")),
        }
        self.rename_to(PodDir::Garbage)
    }

    /// Deletes a garbage pod's directory under its exclusive lock. Unmounting
    /// what stage1 mounted is the caller's job (stage1 gc) before this.
    pub fn delete(mut self) -> Result<()> {
        self.lock_for_deletion()?;
        let path = self.path();
        fs::remove_dir_all(&path).map_err(io_err(format!("removing {}", path.display())))
    }

    /// A garbage pod (or one this handle is deleting), locked for its deletion.
    fn lock_for_deletion(&mut self) -> Result<()> {
        match self.refresh()? {
            PodState::ExitedGarbage | PodState::Garbage => {}
            PodState::ExitedDeleting | PodState::Deleting if self.lock.is_some() => {}
            _ => return Err(self.wrong_state("delete")),
        }
        self.take_lock()?;
        Ok(())
    }

    /// What [`Pod::delete`] does, in two steps: the directory leaves the pod
    /// tree at once (a rename into `DataDir::trash`, under the pod lock), and
    /// the returned path is the caller's to delete when it has time. Deleting a
    /// pod's few dozen directories took 4 to 100 ms of RemovePodSandbox here.
    pub fn discard(mut self) -> Result<PathBuf> {
        self.lock_for_deletion()?;
        let trash = self.data.trash();
        fs::create_dir_all(&trash).map_err(io_err(format!("creating {}", trash.display())))?;
        let to = trash.join(self.uuid.to_string());
        fs::rename(self.path(), &to).map_err(io_err(format!("moving pod {} to {}", self.uuid, trash.display())))?;
        Ok(to)
    }

    /// The locked pod-directory descriptor (still close-on-exec), for
    /// `RKT_LOCK_FD=<fd>`: the sandbox child calls [`lock::keep_across_exec`]
    /// on it after fork, so the pod reads as running while that process lives.
    pub fn lock_fd(&self) -> Result<i32> {
        let lock = self.lock.as_ref().ok_or(PodError::WrongState {
            uuid: self.uuid,
            state: self.dir.state(false),
            op: "pass its lock on",
        })?;
        Ok(lock.raw_fd())
    }

    /// Drops this handle's copy of the pod lock (after a child inherited it).
    pub fn release_lock(&mut self) {
        self.lock = None;
    }

    /// Reads and parses the `pod` manifest.
    pub fn read_manifest(&self) -> Result<PodManifest> {
        let path = self.manifest_path();
        let bytes = fs::read(&path).map_err(io_err(format!("reading {}", path.display())))?;
        serde_json::from_slice(&bytes).map_err(|source| PodError::Manifest { uuid: self.uuid, source })
    }

    /// Replaces the `pod` manifest atomically (temp file, rename), keeping the old file's mode (0640 for a new one). Callers that
    /// read-modify-write hold [`Pod::lock_manifest`].
    /// Returns the bytes written.
    pub fn write_manifest(&self, manifest: &PodManifest) -> Result<Vec<u8>> {
        let bytes = serde_json::to_vec(manifest).map_err(|source| PodError::Manifest { uuid: self.uuid, source })?;
        let path = self.manifest_path();
        let mode = match fs::metadata(&path) {
            Ok(m) => m.permissions().mode() & 0o7777,
            Err(_) => 0o640,
        };
        fsutil::write_volatile(&path, &bytes, mode).map_err(io_err(format!("writing {}", path.display())))?;
        Ok(bytes)
    }

    /// Takes `pod.lck` exclusively (blocking), serialising manifest rewrites
    /// between processes. Created on first use.
    pub fn lock_manifest(&self) -> Result<HeldLock> {
        let path = self.path().join(MANIFEST_LOCK_FILE);
        lock::exclusive_file(&path).map_err(io_err(format!("locking {}", path.display())))
    }

    /// Writes the initial files of a pod being prepared: `pod`, `pod.lck`, `pod-created`.
    pub fn write_initial(&self, manifest: &PodManifest) -> Result<()> {
        let dir = self.path();
        for (name, mode) in [(MANIFEST_LOCK_FILE, 0o600), (CREATED_FILE, 0o640)] {
            let p = dir.join(name);
            fsutil::create_empty(&p, mode).map_err(io_err(format!("creating {}", p.display())))?;
        }
        self.write_manifest(manifest).map(drop)
    }

    /// The stage1 rootfs (`$P/stage1/rootfs`; rktlet's stage1 is a plain
    /// directory, so the merged view and the upper dir are the same).
    pub fn stage1_rootfs(&self) -> PathBuf {
        self.path().join("stage1/rootfs")
    }

    /// True once the pod's stage1 says its apps may be added: rkt's
    /// `rkt/supervisor-status` link in the stage1 root reads `ready` (its
    /// readiness unit makes it once the pod's systemd is up).
    pub fn is_ready(&self) -> bool {
        stage1_is_ready(&self.stage1_rootfs())
    }

    /// Reads a small text file of the pod directory, trimmed; `None` if missing.
    pub fn read_file(&self, name: &str) -> Result<Option<String>> {
        let path = self.path().join(name);
        match fs::read_to_string(&path) {
            Ok(s) => Ok(Some(s.trim().to_string())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(format!("reading {}", path.display()))(e)),
        }
    }

    /// Writes a small file of the pod directory atomically (0640).
    pub fn write_file(&self, name: &str, content: &[u8]) -> Result<()> {
        let path = self.path().join(name);
        fsutil::write_volatile(&path, content, 0o640).map_err(io_err(format!("writing {}", path.display())))
    }

    /// The pod's cgroup paths, from `subcgroup` (and `subcgroup-tracking`
    /// when it differs); `None` for a pod without a cgroup or with an
    /// unusable path.
    pub fn subcgroups(&self) -> Result<Option<Subcgroups>> {
        let valid = |s: &String| !s.is_empty() && !s.split('/').any(|c| c == "..");
        let Some(controllers) = self.read_file(SUBCGROUP_FILE)?.filter(valid) else { return Ok(None) };
        let tracking = self.read_file(TRACKING_SUBCGROUP_FILE)?.filter(valid).unwrap_or_else(|| controllers.clone());
        Ok(Some(Subcgroups { controllers, tracking }))
    }

    /// PID of the sandbox process from `ppid`.
    pub fn sandbox_pid(&self) -> Result<Option<i32>> {
        Ok(self.read_file(PPID_FILE)?.and_then(|s| s.parse().ok()))
    }

    /// Creation time: mtime of `pod-created`, falling back to the manifest's.
    pub fn created_at(&self) -> Result<SystemTime> {
        let dir = self.path();
        let meta = fs::metadata(dir.join(CREATED_FILE))
            .or_else(|_| fs::metadata(dir.join(MANIFEST_FILE)))
            .map_err(io_err(format!("reading creation time of pod {}", self.uuid)))?;
        meta.modified().map_err(io_err(format!("reading creation time of pod {}", self.uuid)))
    }
}

#[cfg(test)]
mod tests;
