//! Unpacking one layer tar into a directory, safely: no entry may land
//! outside the root (`..` refused, absolute paths taken as relative to the
//! root, symlinks resolved inside the root and refused when they climb out of
//! it), whiteouts recorded rather than written, metadata kept (owner, mode with
//! setuid bits, xattrs, times, hard links, device nodes when permitted).
//!
//! Layers are unpacked concurrently, each into its own staging directory, then
//! [`merge`]d in order into the tree (renames, so no data is copied). The bottom
//! layer is unpacked straight into the tree.

use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsStr};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub use super::tar_entry::ExtractError;
use super::tar_entry::{PadLastBlock, clean, unsafe_entry};

fn io_ctx(context: impl Into<String>) -> impl FnOnce(io::Error) -> ExtractError {
    let context = context.into();
    move |source| ExtractError::Io { context, source }
}

/// Metadata applied to a directory once everything below it is in place.
#[derive(Debug, Clone)]
pub struct DirMeta {
    /// The directory, relative to the root.
    pub path: PathBuf,
    /// Its mode (permission, setuid, setgid and sticky bits).
    pub mode: u32,
    /// Its owner.
    pub uid: u64,
    /// Its group.
    pub gid: u64,
    /// Its modification time, seconds since the epoch.
    pub mtime: i64,
}

/// What unpacking one layer left to do for [`merge`] and the final passes.
#[derive(Debug, Default)]
pub struct Unpacked {
    /// Paths (relative to the root) the layer deletes from the layers below.
    pub whiteouts: Vec<PathBuf>,
    /// Directories whose content from the layers below is hidden.
    pub opaque: Vec<PathBuf>,
    /// Directories that had their own tar entry (vs. created as parents).
    pub explicit_dirs: HashSet<PathBuf>,
    /// Every directory entry's metadata, for [`apply_dir_meta`].
    pub dir_meta: Vec<DirMeta>,
    /// Hard links (link, target) to files of a lower layer, made at merge.
    pub deferred_links: Vec<(PathBuf, PathBuf)>,
    /// Regular files written (relative), to be synced before the tree is marked rendered.
    pub files: Vec<PathBuf>,
    /// Device nodes skipped for lack of privilege.
    pub skipped_devices: usize,
    /// Every entry's path but whiteouts', `/` + the cleaned path.
    pub paths: Vec<String>,
    /// rkt's key and the size of the layer's ACI rendition, when it was
    /// made ([`Unpacker::with_aci`]).
    pub aci: Option<(String, u64)>,
}

impl Unpacked {
    /// What the layer holds and deletes, for the image's `pathWhitelist`.
    pub fn layer_paths(&self) -> super::layer_aci::LayerPaths {
        let abs = |p: &PathBuf| super::layer_aci::LayerPaths::absolute(p);
        super::layer_aci::LayerPaths {
            paths: self.paths.clone(),
            whiteouts: self.whiteouts.iter().map(abs).collect(),
            opaque: self.opaque.iter().map(abs).collect(),
        }
    }
}

/// Resolves `rel` (already cleaned) under `root` following symlinks as if
/// `root` were `/`. Missing components are appended as they are. A symlink
/// that climbs above the root is refused.
pub(crate) fn resolve_in_root(root: &Path, rel: &Path, entry: &Path) -> Result<PathBuf, ExtractError> {
    let mut stack: Vec<std::ffi::OsString> = Vec::new();
    let mut pending: Vec<std::ffi::OsString> = rel.iter().rev().map(|c| c.to_os_string()).collect();
    let mut links = 0;
    let mut missing = false;
    while let Some(c) = pending.pop() {
        if c == "." || c.is_empty() {
            continue;
        }
        if c == ".." {
            if stack.pop().is_none() {
                return Err(unsafe_entry(entry, "goes through a symlink that points outside the root"));
            }
            continue;
        }
        stack.push(c);
        if missing {
            continue;
        }
        let here: PathBuf = root.join(stack.iter().collect::<PathBuf>());
        match fs::symlink_metadata(&here) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > 40 {
                    return Err(unsafe_entry(entry, "has too many levels of symlinks"));
                }
                let target = fs::read_link(&here).map_err(io_ctx(format!("reading link {}", here.display())))?;
                stack.pop();
                if target.is_absolute() {
                    stack.clear();
                }
                for t in target.iter().rev() {
                    if t != "/" {
                        pending.push(t.to_os_string());
                    }
                }
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => missing = true,
            Err(e) => return Err(io_ctx(format!("checking {}", here.display()))(e)),
        }
    }
    Ok(root.join(stack.iter().collect::<PathBuf>()))
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Removes whatever is at `path` (file, symlink or directory tree); missing is fine.
fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn lchown(path: &Path, uid: u64, gid: u64) -> io::Result<()> {
    let c = cstr(path)?;
    // SAFETY: lchown(2) with a valid NUL-terminated path.
    let rc = unsafe { libc::lchown(c.as_ptr(), uid as libc::uid_t, gid as libc::gid_t) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

fn set_times(path: &Path, mtime: i64) -> io::Result<()> {
    let c = cstr(path)?;
    let ts = libc::timespec { tv_sec: mtime as libc::time_t, tv_nsec: 0 };
    let times = [ts, ts];
    // SAFETY: utimensat(2) with a valid path and a two-element timespec array.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

fn lsetxattr(path: &Path, name: &[u8], value: &[u8]) -> io::Result<()> {
    let p = cstr(path)?;
    let n = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: lsetxattr(2) with valid NUL-terminated strings and a value slice.
    let rc = unsafe { libc::lsetxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

fn mknod(path: &Path, mode: libc::mode_t, major: u32, minor: u32) -> io::Result<()> {
    let c = cstr(path)?;
    // SAFETY: mknod(2) with a valid path; makedev is a pure computation.
    let rc = unsafe { libc::mknod(c.as_ptr(), mode, libc::makedev(major, minor)) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Starts writeback of a freshly written file so the final sync mostly waits for I/O already in flight.
pub fn start_writeback(f: &File) {
    // SAFETY: sync_file_range(2) on an fd we own; a failure only loses the head start.
    unsafe { libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
}

/// What a tar entry says of its owner, mode and times.
#[derive(Clone, Copy)]
struct EntryMeta {
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: i64,
}

/// Unpacks one layer.
pub struct Unpacker<'a> {
    root: &'a Path,
    /// Hard links whose target is missing here point into a lower layer (staging mode).
    staged: bool,
    as_root: bool,
    /// Resolved parent directories, dropped whenever a symlink or directory changes.
    parents: HashMap<PathBuf, PathBuf>,
    out: Unpacked,
    buf: Vec<u8>,
    /// The layer's ACI rendition, made while it is unpacked.
    aci: Option<super::layer_aci::AciWriter<super::layer_aci::HashOut>>,
    /// The tar is an ACI: `manifest` is skipped, the rest must be under `rootfs/`.
    from_aci: bool,
}

impl<'a> Unpacker<'a> {
    /// Unpacks into `root`; `staged`: `root` is a staging directory to be
    /// [`merge`]d over the layers below (hard links to their files wait).
    pub fn new(root: &'a Path, staged: bool) -> Self {
        Unpacker {
            root,
            staged,
            // SAFETY: geteuid(2) has no preconditions.
            as_root: unsafe { libc::geteuid() } == 0,
            parents: HashMap::new(),
            out: Unpacked::default(),
            buf: vec![0; 256 * 1024],
            aci: None,
            from_aci: false,
        }
    }

    /// Also makes the layer's ACI rendition (`layer_aci`) with `manifest`,
    /// into a hasher: [`Unpacked::aci`] gets its key and size.
    pub fn with_aci(mut self, manifest: &[u8]) -> Result<Self, ExtractError> {
        let w = super::layer_aci::AciWriter::new(super::layer_aci::HashOut::new(), manifest)
            .map_err(io_ctx("starting the layer's ACI"))?;
        self.aci = Some(w);
        Ok(self)
    }

    /// The tar is an ACI (`manifest` and `rootfs/`): its rootfs is unpacked.
    pub fn from_aci(mut self) -> Self {
        self.from_aci = true;
        self
    }

    /// Unpacks every entry of `tar`; returns what the merge needs.
    pub fn unpack(mut self, tar: impl Read) -> Result<Unpacked, ExtractError> {
        let mut archive = tar::Archive::new(PadLastBlock::new(tar));
        for entry in archive.entries().map_err(ExtractError::Tar)? {
            let entry = entry.map_err(ExtractError::Tar)?;
            self.entry(entry)?;
        }
        if let Some(w) = self.aci.take() {
            let out = w.finish().map_err(io_ctx("finishing the layer's ACI"))?;
            self.out.aci = Some(out.key());
        }
        Ok(self.out)
    }

    /// An ACI entry's path below `rootfs/`; `None` for the manifest and
    /// the rootfs itself.
    fn in_rootfs(&self, rel: PathBuf, raw: &Path) -> Result<Option<PathBuf>, ExtractError> {
        if !self.from_aci {
            return Ok(Some(rel));
        }
        if rel == Path::new("manifest") || rel == Path::new("rootfs") {
            return Ok(None);
        }
        match rel.strip_prefix("rootfs") {
            Ok(r) => Ok(Some(r.to_path_buf())),
            Err(_) => Err(unsafe_entry(raw, "is outside the ACI's rootfs/")),
        }
    }

    fn parent_dir(&mut self, rel_parent: &Path, entry: &Path) -> Result<PathBuf, ExtractError> {
        if let Some(p) = self.parents.get(rel_parent) {
            return Ok(p.clone());
        }
        let resolved = resolve_in_root(self.root, rel_parent, entry)?;
        match fs::symlink_metadata(&resolved) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(unsafe_entry(entry, "has a parent that is not a directory")),
            Err(_) => fs::create_dir_all(&resolved).map_err(io_ctx(format!("creating {}", resolved.display())))?,
        }
        self.parents.insert(rel_parent.to_path_buf(), resolved.clone());
        Ok(resolved)
    }

    fn entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> Result<(), ExtractError> {
        let raw_path = entry.path().map_err(ExtractError::Tar)?.into_owned();
        let Some(rel) = self.in_rootfs(clean(&raw_path)?, &raw_path)? else { return Ok(()) };
        let mut aci_data = false;
        if let Some(w) = &mut self.aci {
            aci_data =
                w.entry(&mut entry, &rel).map_err(io_ctx(format!("rendering {} as an ACI", raw_path.display())))?;
        }
        let Some(name) = rel.file_name().map(OsStr::to_os_string) else {
            return Ok(()); // the root itself
        };
        let rel_parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
        let header = entry.header().clone();
        let kind = header.entry_type();

        if let Some(hidden) = name.as_bytes().strip_prefix(b".wh.") {
            self.whiteout(rel_parent, hidden);
            if aci_data && let Some(w) = &mut self.aci {
                // a whiteout with content: the rendition keeps it as it is
                loop {
                    let n = entry.read(&mut self.buf).map_err(ExtractError::Tar)?;
                    if n == 0 {
                        break;
                    }
                    w.data(&self.buf[..n]).map_err(io_ctx("rendering a whiteout as an ACI"))?;
                }
            }
            return Ok(());
        }

        if !matches!(kind, tar::EntryType::XGlobalHeader | tar::EntryType::XHeader) {
            self.out.paths.push(super::layer_aci::LayerPaths::absolute(&rel));
        }
        let parent = self.parent_dir(&rel_parent, &raw_path)?;
        let target = parent.join(&name);
        let meta = EntryMeta {
            mode: header.mode().map_err(ExtractError::Tar)? & 0o7777,
            uid: header.uid().map_err(ExtractError::Tar)?,
            gid: header.gid().map_err(ExtractError::Tar)?,
            mtime: header.mtime().map_err(ExtractError::Tar)? as i64,
        };

        let made = match kind {
            tar::EntryType::Directory => {
                self.directory(rel, &target, &meta)?;
                false // owner, mode and times once the tree is complete
            }
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                self.regular(&mut entry, rel, &target, &meta)?;
                true
            }
            tar::EntryType::Symlink => {
                self.symlink(&entry, &raw_path, &target)?;
                true
            }
            tar::EntryType::Link => {
                self.hard_link(&entry, &raw_path, rel, &target)?;
                false // shares the target's inode and metadata
            }
            tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => {
                self.node(kind, &header, &target, &meta)?
            }
            tar::EntryType::XGlobalHeader
            | tar::EntryType::XHeader
            | tar::EntryType::GNULongName
            | tar::EntryType::GNULongLink => false,
            other => {
                tracing::debug!(entry = %raw_path.display(), kind = ?other, "skipping unsupported tar entry type");
                false
            }
        };
        if made {
            self.finish_entry(&mut entry, kind, &target, &meta)?;
        }
        Ok(())
    }

    /// A whiteout (`.wh.<name>`) in `rel_parent`: an opaque directory
    /// (`.wh..wh..opq`) or a hidden entry, recorded for the merge.
    fn whiteout(&mut self, rel_parent: PathBuf, hidden: &[u8]) {
        if hidden == b".wh..opq" {
            self.out.opaque.push(rel_parent);
        } else if !hidden.starts_with(b".wh.") {
            self.out.whiteouts.push(rel_parent.join(OsStr::from_bytes(hidden)));
        }
    }

    /// A directory, made (replacing a non-directory) and recorded; its owner,
    /// mode and times are set once the tree is complete.
    fn directory(&mut self, rel: PathBuf, target: &Path, meta: &EntryMeta) -> Result<(), ExtractError> {
        let ctx = |what: &str| format!("{what} {}", target.display());
        match fs::symlink_metadata(target) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                fs::remove_file(target).map_err(io_ctx(ctx("replacing")))?;
                self.parents.clear();
                fs::create_dir(target).map_err(io_ctx(ctx("creating directory")))?;
            }
            Err(_) => fs::create_dir(target).map_err(io_ctx(ctx("creating directory")))?,
        }
        self.out.explicit_dirs.insert(rel.clone());
        let EntryMeta { mode, uid, gid, mtime } = *meta;
        self.out.dir_meta.push(DirMeta { path: rel, mode, uid, gid, mtime });
        Ok(())
    }

    /// A regular file, written from the entry, then its owner and mode.
    fn regular<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        rel: PathBuf,
        target: &Path,
        meta: &EntryMeta,
    ) -> Result<(), ExtractError> {
        let ctx = |what: &str| format!("{what} {}", target.display());
        self.replace(target)?;
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(target)
            .map_err(io_ctx(ctx("creating")))?;
        loop {
            let n = entry.read(&mut self.buf).map_err(ExtractError::Tar)?;
            if n == 0 {
                break;
            }
            f.write_all(&self.buf[..n]).map_err(io_ctx(ctx("writing")))?;
            if let Some(w) = &mut self.aci {
                w.data(&self.buf[..n]).map_err(io_ctx(ctx("rendering as an ACI")))?;
            }
        }
        if self.as_root {
            std::os::unix::fs::fchown(&f, Some(meta.uid as u32), Some(meta.gid as u32))
                .map_err(io_ctx(ctx("chown")))?;
        }
        // after chown, which clears setuid/setgid bits
        f.set_permissions(fs::Permissions::from_mode(meta.mode)).map_err(io_ctx(ctx("chmod")))?;
        self.out.files.push(rel);
        Ok(())
    }

    /// A symlink, as the entry names its target.
    fn symlink<R: Read>(
        &mut self,
        entry: &tar::Entry<'_, R>,
        raw_path: &Path,
        target: &Path,
    ) -> Result<(), ExtractError> {
        let link = entry
            .link_name()
            .map_err(ExtractError::Tar)?
            .ok_or_else(|| unsafe_entry(raw_path, "is a symlink without a target"))?;
        self.replace(target)?;
        std::os::unix::fs::symlink(&link, target).map_err(io_ctx(format!("creating symlink {}", target.display())))?;
        self.parents.clear();
        Ok(())
    }

    /// A hard link to an entry of this layer's tree; in staging mode, one to
    /// an entry not here (a lower layer's) is deferred to the merge.
    fn hard_link<R: Read>(
        &mut self,
        entry: &tar::Entry<'_, R>,
        raw_path: &Path,
        rel: PathBuf,
        target: &Path,
    ) -> Result<(), ExtractError> {
        let link = entry
            .link_name()
            .map_err(ExtractError::Tar)?
            .ok_or_else(|| unsafe_entry(raw_path, "is a hard link without a target"))?;
        let link_rel = clean(&link)?;
        let link_rel = match self.from_aci {
            true => link_rel
                .strip_prefix("rootfs")
                .map(Path::to_path_buf)
                .map_err(|_| unsafe_entry(raw_path, "links outside the ACI's rootfs/"))?,
            false => link_rel,
        };
        let src = resolve_in_root(self.root, link_rel.parent().unwrap_or(Path::new("")), raw_path)?
            .join(link_rel.file_name().unwrap_or_default());
        if fs::symlink_metadata(&src).is_err() {
            if self.staged {
                self.out.deferred_links.push((rel, link_rel));
                return Ok(());
            }
            return Err(unsafe_entry(raw_path, format!("links to {} which does not exist", link.display())));
        }
        if src == target {
            return Ok(());
        }
        self.replace(target)?;
        fs::hard_link(&src, target).map_err(io_ctx(format!("hard-linking {}", target.display())))?;
        Ok(())
    }

    /// A device node or FIFO, and its owner. Returns false when a device
    /// node was skipped (no CAP_MKNOD).
    fn node(
        &mut self,
        kind: tar::EntryType,
        header: &tar::Header,
        target: &Path,
        meta: &EntryMeta,
    ) -> Result<bool, ExtractError> {
        let ctx = |what: &str| format!("{what} {}", target.display());
        self.replace(target)?;
        let ftype = match kind {
            tar::EntryType::Char => libc::S_IFCHR,
            tar::EntryType::Block => libc::S_IFBLK,
            _ => libc::S_IFIFO,
        };
        let major = header.device_major().ok().flatten().unwrap_or(0);
        let minor = header.device_minor().ok().flatten().unwrap_or(0);
        match mknod(target, ftype | meta.mode as libc::mode_t, major, minor) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EPERM) && ftype != libc::S_IFIFO => {
                // policy: without CAP_MKNOD device nodes are skipped (the pod's /dev is provided anyway)
                self.out.skipped_devices += 1;
                return Ok(false);
            }
            Err(e) => return Err(io_ctx(ctx("creating device node"))(e)),
        }
        if self.as_root {
            lchown(target, meta.uid, meta.gid).map_err(io_ctx(ctx("chown")))?;
        }
        Ok(true)
    }

    /// What every made entry but a directory or hard link gets last: a
    /// symlink's owner, the entry's extended attributes, its times.
    fn finish_entry<R: Read>(
        &self,
        entry: &mut tar::Entry<'_, R>,
        kind: tar::EntryType,
        target: &Path,
        meta: &EntryMeta,
    ) -> Result<(), ExtractError> {
        let ctx = |what: &str| format!("{what} {}", target.display());
        if kind == tar::EntryType::Symlink && self.as_root {
            lchown(target, meta.uid, meta.gid).map_err(io_ctx(ctx("chown")))?;
        }
        if let Ok(Some(exts)) = entry.pax_extensions() {
            for ext in exts.flatten() {
                if let Some(name) = ext.key_bytes().strip_prefix(b"SCHILY.xattr.")
                    && let Err(e) = lsetxattr(target, name, ext.value_bytes())
                {
                    tracing::warn!(path = %target.display(), xattr = %String::from_utf8_lossy(name), error = %e, "cannot set xattr");
                }
            }
        }
        set_times(target, meta.mtime).map_err(io_ctx(ctx("setting times of")))?;
        Ok(())
    }

    /// Makes room for a new non-directory entry at `target`.
    fn replace(&mut self, target: &Path) -> Result<(), ExtractError> {
        match fs::symlink_metadata(target) {
            Ok(m) => {
                if m.is_dir() || m.file_type().is_symlink() {
                    self.parents.clear();
                }
                remove_any(target).map_err(io_ctx(format!("replacing {}", target.display())))
            }
            Err(_) => Ok(()),
        }
    }
}

/// Applies a staged layer on top of `root`: whiteouts and opaque directories
/// first (they hide lower content), then every staged entry moved in by rename.
pub fn merge(root: &Path, stage: &Path, layer: &Unpacked) -> Result<(), ExtractError> {
    for w in &layer.whiteouts {
        let parent = resolve_in_root(root, w.parent().unwrap_or(Path::new("")), w)?;
        let path = parent.join(w.file_name().unwrap_or_default());
        remove_any(&path).map_err(io_ctx(format!("applying whiteout {}", path.display())))?;
    }
    for d in &layer.opaque {
        let dir = resolve_in_root(root, d, d)?;
        if let Ok(entries) = fs::read_dir(&dir) {
            for e in entries.flatten() {
                remove_any(&e.path()).map_err(io_ctx(format!("applying opaque whiteout in {}", dir.display())))?;
            }
        }
    }
    merge_dir(root, root, stage, Path::new(""), layer)?;
    for (link, target) in &layer.deferred_links {
        let src = resolve_in_root(root, target.parent().unwrap_or(Path::new("")), link)?
            .join(target.file_name().unwrap_or_default());
        let parent = resolve_in_root(root, link.parent().unwrap_or(Path::new("")), link)?;
        fs::create_dir_all(&parent).map_err(io_ctx(format!("creating {}", parent.display())))?;
        let dst = parent.join(link.file_name().unwrap_or_default());
        remove_any(&dst).map_err(io_ctx(format!("replacing {}", dst.display())))?;
        fs::hard_link(&src, &dst).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                unsafe_entry(link, format!("links to {} which does not exist", target.display()))
            }
            _ => io_ctx(format!("hard-linking {}", dst.display()))(e),
        })?;
    }
    Ok(())
}

fn merge_dir(root: &Path, dst: &Path, src: &Path, rel: &Path, layer: &Unpacked) -> Result<(), ExtractError> {
    let entries = fs::read_dir(src).map_err(io_ctx(format!("reading {}", src.display())))?;
    for e in entries {
        let e = e.map_err(io_ctx(format!("reading {}", src.display())))?;
        let s = e.path();
        let d = dst.join(e.file_name());
        let r = rel.join(e.file_name());
        let s_is_dir = e.file_type().map_err(io_ctx(format!("checking {}", s.display())))?.is_dir();
        let existing = fs::symlink_metadata(&d).ok();
        let move_in =
            |d: &Path| fs::rename(&s, d).map_err(io_ctx(format!("moving {} to {}", s.display(), d.display())));
        match existing {
            None => move_in(&d)?,
            Some(m) if s_is_dir && m.is_dir() => merge_dir(root, &d, &s, &r, layer)?,
            Some(m) if s_is_dir && m.file_type().is_symlink() && !layer.explicit_dirs.contains(&r) => {
                // a parent created implicitly goes where the lower layer's symlink points
                let resolved = resolve_in_root(root, &r, &r)?;
                fs::create_dir_all(&resolved).map_err(io_ctx(format!("creating {}", resolved.display())))?;
                merge_dir(root, &resolved, &s, &r, layer)?;
            }
            Some(_) => {
                remove_any(&d).map_err(io_ctx(format!("replacing {}", d.display())))?;
                move_in(&d)?;
            }
        }
    }
    Ok(())
}

/// Final pass over the rendered tree: every layer's directory owner, mode and
/// times, in layer order (upper layers win).
pub fn apply_dir_meta(root: &Path, layers: &[&Unpacked]) -> Result<(), ExtractError> {
    // SAFETY: geteuid(2) has no preconditions.
    let as_root = unsafe { libc::geteuid() } == 0;
    let mut last: HashMap<&Path, &DirMeta> = HashMap::new();
    for layer in layers {
        for m in &layer.dir_meta {
            last.insert(&m.path, m);
        }
    }
    let mut metas: Vec<&DirMeta> = last.into_values().collect();
    metas.sort_by_key(|m| std::cmp::Reverse(m.path.components().count()));
    for m in metas {
        let Ok(path) = resolve_in_root(root, &m.path, &m.path) else { continue };
        if !fs::symlink_metadata(&path).is_ok_and(|md| md.is_dir()) {
            continue; // removed or replaced by an upper layer
        }
        if as_root {
            lchown(&path, m.uid, m.gid).map_err(io_ctx(format!("chown {}", path.display())))?;
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(m.mode))
            .map_err(io_ctx(format!("chmod {}", path.display())))?;
        set_times(&path, m.mtime).map_err(io_ctx(format!("setting times of {}", path.display())))?;
    }
    Ok(())
}

/// Disk usage of a tree: bytes (allocated blocks) and inodes.
pub fn usage(path: &Path) -> (u64, u64) {
    let mut bytes = 0;
    let mut inodes = 0;
    let mut stack = vec![path.to_path_buf()];
    let mut seen = HashSet::new();
    while let Some(p) = stack.pop() {
        let Ok(m) = fs::symlink_metadata(&p) else { continue };
        if m.nlink() > 1 && !m.is_dir() && !seen.insert((m.dev(), m.ino())) {
            continue;
        }
        inodes += 1;
        bytes += m.blocks() * 512;
        if m.is_dir()
            && let Ok(rd) = fs::read_dir(&p)
        {
            stack.extend(rd.flatten().map(|e| e.path()));
        }
    }
    (bytes, inodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, tar::EntryType, &[u8], &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, data, link) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(if *kind == tar::EntryType::Directory { 0o755 } else { 0o644 });
            h.set_size(data.len() as u64);
            h.set_mtime(1_000_000);
            h.set_uid(0);
            h.set_gid(0);
            // raw names: the builder's own path setter refuses '..', which these tests need
            let name = h.as_old_mut().name.as_mut();
            name[..path.len()].copy_from_slice(path.as_bytes());
            if !link.is_empty() {
                h.set_link_name(link).expect("link");
            }
            h.set_cksum();
            b.append(&h, *data).expect("append");
        }
        b.into_inner().expect("finish")
    }

    use tar::EntryType as T;

    #[test]
    fn a_layer_without_its_last_padding_and_end_blocks_unpacks() {
        let full = tar_of(&[("a", T::Regular, b"first", ""), ("b", T::Regular, b"last file", "")]);
        // the last entry's data ends 512 (header a) + 512 (data a) + 512 (header b) + 9 bytes in
        let cut = &full[..512 * 3 + 9];
        let root = tempfile::tempdir().expect("root");
        Unpacker::new(root.path(), false).unpack(cut).expect("unpacks as Go's archive/tar would");
        assert_eq!(fs::read(root.path().join("b")).expect("b"), b"last file");
        // cut inside the last file's data: still an error
        let root = tempfile::tempdir().expect("root");
        let short = tar_of(&[("big", T::Regular, &[7u8; 2000], "")]);
        let err = Unpacker::new(root.path(), false).unpack(&short[..512 + 700]).expect_err("truncated data");
        assert!(err.to_string().contains("reading the layer tar"), "{err}");
    }

    #[test]
    fn refuses_parent_traversal() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().join("root");
        fs::create_dir(&root).expect("mkdir");
        let layer = tar_of(&[("../evil", T::Regular, b"x", "")]);
        let err = Unpacker::new(&root, false).unpack(&layer[..]).expect_err("refused");
        assert!(err.to_string().contains("refusing layer"), "{err}");
        assert!(!t.path().join("evil").exists());
    }

    #[test]
    fn symlink_escape_is_refused_and_absolute_links_stay_inside() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().join("root");
        fs::create_dir(&root).expect("mkdir");
        let layer = tar_of(&[("up", T::Symlink, b"", "../../.."), ("up/escaped", T::Regular, b"x", "")]);
        let err = Unpacker::new(&root, false).unpack(&layer[..]).expect_err("refused");
        assert!(err.to_string().contains("outside the root"), "{err}");
        let root2 = t.path().join("root2");
        fs::create_dir(&root2).expect("mkdir");
        let outside = t.path().join("outside");
        let layer =
            tar_of(&[("abs", T::Symlink, b"", outside.to_str().expect("utf8")), ("abs/f", T::Regular, b"x", "")]);
        Unpacker::new(&root2, false).unpack(&layer[..]).expect("contained");
        assert!(!outside.join("f").exists());
        assert!(root2.join(outside.strip_prefix("/").expect("abs")).join("f").exists());
    }

    #[test]
    fn staged_layers_merge_with_whiteouts_and_links() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().join("root");
        let stage = t.path().join("stage");
        fs::create_dir(&root).expect("mkdir");
        fs::create_dir(&stage).expect("mkdir");
        let lower = tar_of(&[
            ("a/", T::Directory, b"", ""),
            ("a/keep", T::Regular, b"k", ""),
            ("a/gone", T::Regular, b"g", ""),
            ("o/", T::Directory, b"", ""),
            ("o/x", T::Regular, b"x", ""),
            ("lib", T::Symlink, b"", "usr/lib"),
            ("usr/lib/", T::Directory, b"", ""),
        ]);
        let l0 = Unpacker::new(&root, false).unpack(&lower[..]).expect("lower");
        let upper = tar_of(&[
            ("a/.wh.gone", T::Regular, b"", ""),
            ("o/.wh..wh..opq", T::Regular, b"", ""),
            ("o/z", T::Regular, b"z", ""),
            ("lib/libx.so", T::Regular, b"so", ""),
            ("a/keep-link", T::Link, b"", "a/keep"),
        ]);
        let l1 = Unpacker::new(&stage, true).unpack(&upper[..]).expect("upper");
        merge(&root, &stage, &l1).expect("merge");
        apply_dir_meta(&root, &[&l0, &l1]).expect("meta");
        assert!(root.join("a/keep").exists());
        assert!(!root.join("a/gone").exists());
        assert!(!root.join("o/x").exists());
        assert_eq!(fs::read(root.join("o/z")).expect("z"), b"z");
        assert!(root.join("lib").symlink_metadata().expect("lib").file_type().is_symlink());
        assert_eq!(fs::read(root.join("usr/lib/libx.so")).expect("so"), b"so");
        let a = fs::metadata(root.join("a/keep")).expect("m");
        let b = fs::metadata(root.join("a/keep-link")).expect("m");
        assert_eq!(a.ino(), b.ino());
        assert_eq!(fs::metadata(root.join("a")).expect("m").mtime(), 1_000_000);
    }
}
