//! The work directories of rktlet's pulls and renders in `cas/tmp`, and the
//! cleaning of what killed ones left there.

use super::{ImageError, io_ctx};
use rkt::cas::Cas;
use rkt::lock::{self, HeldLock};
use std::fs;
use std::path::{Path, PathBuf};

/// `cas/tmp/pull-<uuid>/`, locked while in use; removed on drop.
pub(super) struct WorkDir {
    pub(super) path: PathBuf,
    lock_path: PathBuf,
    _lock: HeldLock,
}

impl WorkDir {
    pub(super) fn new(cas: &Cas) -> Result<WorkDir, ImageError> {
        // creators and cleaners take turns, so a cleaner never sees a lock
        // file that exists but is not held yet, or a directory before its lock
        let guard_path = cas.tmp().join(CREATE_GUARD);
        let _guard = lock::exclusive_file(&guard_path).map_err(io_ctx(format!("locking {}", guard_path.display())))?;
        let stale = clean_tmp_locked(cas);
        if stale > 0 {
            tracing::info!(stale, "removed leftovers of interrupted pulls");
        }
        let name = format!("{WORK_PREFIX}{}", uuid::Uuid::new_v4().simple());
        let path = cas.tmp().join(&name);
        let lock_path = cas.tmp().join(format!("{name}.lock"));
        let lock = lock::exclusive_file(&lock_path).map_err(io_ctx(format!("locking {}", lock_path.display())))?;
        fs::create_dir(&path).map_err(io_ctx(format!("creating {}", path.display())))?;
        fs::create_dir_all(path.join("tree/rootfs")).map_err(io_ctx(format!("creating {}", path.display())))?;
        Ok(WorkDir { path, lock_path, _lock: lock })
    }

    pub(super) fn rootfs(&self) -> PathBuf {
        self.path.join("tree/rootfs")
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
        let _ = fs::remove_file(&self.lock_path);
    }
}

/// Serialises making work directories with cleaning them up.
const CREATE_GUARD: &str = ".create.lock";

/// Prefix of the work directories (and their locks) of rktlet's pulls, the
/// only `cas/tmp` entries rktlet ever removes: the directory is shared with
/// rkt, whose temporary entries (`docker2aci-*`, ...) are not ours to judge.
pub(super) const WORK_PREFIX: &str = "pull-";

/// Removes `cas/tmp` leftovers of rktlet's pulls whose lock nobody holds (a
/// killed pull). Returns how many.
pub(super) fn clean_tmp(cas: &Cas) -> usize {
    match lock::exclusive_file(&cas.tmp().join(CREATE_GUARD)) {
        Ok(_guard) => clean_tmp_locked(cas),
        Err(e) => {
            tracing::warn!(error = %e, "cannot lock cas/tmp for cleaning");
            0
        }
    }
}

fn clean_tmp_locked(cas: &Cas) -> usize {
    let mut n = 0;
    let Ok(entries) = fs::read_dir(cas.tmp()) else { return 0 };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(WORK_PREFIX) {
            continue;
        }
        if let Some(base) = name.strip_suffix(".lock") {
            // a pull killed between taking its lock and making its directory
            if !cas.tmp().join(base).exists()
                && let Ok(Some(_held)) = lock::try_exclusive_file(&e.path())
            {
                let _ = fs::remove_file(e.path());
                n += 1;
            }
            continue;
        }
        let lock_path = cas.tmp().join(format!("{name}.lock"));
        if let Ok(Some(_held)) = lock::try_exclusive_file(&lock_path) {
            let _ = fs::remove_dir_all(e.path()).or_else(|_| fs::remove_file(e.path()));
            let _ = fs::remove_file(&lock_path);
            n += 1;
        }
    }
    n
}

/// Whether the `cas/tmp` entry `name` belongs to a pull that is running
/// (its lock is held).
pub(super) fn tmp_in_use(cas: &Cas, name: &str) -> bool {
    let lock_path = cas.tmp().join(format!("{name}.lock"));
    // no lock file: nobody made it (and a check must not create one)
    lock_path.exists() && !matches!(lock::try_exclusive_file(&lock_path), Ok(Some(_)))
}
