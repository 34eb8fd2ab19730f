//! A pod's trash (`<pod>/trash/`): the directories of a removed app, each
//! moved out of its place by one rename and deleted after the removal has
//! been answered. Deleting them took about 2 ms of RemoveContainer here
//! (each inode freed is a journaled write on ext4), a rename ~30 µs; the
//! app's places are free at once, so an app of the same name can be added
//! right after. The trash goes with the pod's directory; whatever a removal
//! leaves in it (a crash, a CLI that exits first) the next one deletes.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The trash of the pod in `pod_dir`.
#[derive(Debug)]
pub(crate) struct Trash {
    dir: PathBuf,
    made: bool,
}

impl Trash {
    pub(crate) fn of(pod_dir: &Path) -> Trash {
        Trash { dir: pod_dir.join("trash"), made: false }
    }

    /// Moves `path` into the trash: Ok(true) when moved, Ok(false) when
    /// there was nothing; an error (another file system, say) leaves it in
    /// place for the caller to delete.
    pub(crate) fn put(&mut self, path: &Path) -> io::Result<bool> {
        if !self.made {
            match fs::create_dir(&self.dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            self.made = true;
        }
        let to = self.dir.join(uuid::Uuid::new_v4().simple().to_string());
        match fs::rename(path, to) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes what the trash holds: in the daemon after the call, as a
    /// removed pod's directory is (`stop::after_the_call`, which the daemon
    /// waits for before it exits); at once in the CLI (no runtime there) or
    /// where no thread can be had.
    pub(crate) fn empty_later(self) {
        if !self.made {
            return;
        }
        let dir = self.dir;
        if tokio::runtime::Handle::try_current().is_ok() {
            let later = dir.clone();
            match super::stop::after_the_call("app-trash", move || empty(&later)) {
                Ok(()) => return,
                Err(e) => tracing::warn!(error = %e, "no thread to empty a pod's trash: emptied now"),
            }
        }
        empty(&dir);
    }
}

/// Deletes every entry of `dir` (two removals may race over one entry:
/// each deletes what it finds).
fn empty(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let removed = match entry.file_type() {
            Ok(t) if t.is_dir() => fs::remove_dir_all(&path),
            _ => fs::remove_file(&path),
        };
        if let Err(e) = removed
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), error = %e, "removing a removed app's files");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_put_leaves_its_place_at_once_and_is_deleted_after() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let pod = tmp.path().join("pod");
        let app = pod.join("stage1/rootfs/opt/stage2/web");
        fs::create_dir_all(app.join("rootfs/etc")).expect("mkdir");
        fs::write(app.join("rootfs/etc/hosts"), b"x").expect("file");
        let mut trash = Trash::of(&pod);
        assert!(trash.put(&app).expect("put"));
        assert!(!trash.put(&pod.join("missing")).expect("nothing there"));
        assert!(!app.exists(), "its place is free before the trash is emptied");
        // the same name again meanwhile: a new directory, not touched by the emptying
        fs::create_dir_all(app.join("rootfs")).expect("again");
        assert_eq!(fs::read_dir(pod.join("trash")).expect("trash").count(), 1);
        trash.empty_later();
        assert_eq!(fs::read_dir(pod.join("trash")).expect("trash").count(), 0, "emptied (no runtime: at once)");
        assert!(app.join("rootfs").is_dir(), "the new app's directory stays");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn in_the_daemon_it_is_emptied_after_the_caller_goes_on() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let pod = tmp.path().join("pod");
        // what an earlier removal left behind goes too
        fs::create_dir_all(pod.join("trash/left/upper")).expect("mkdir");
        fs::create_dir_all(pod.join("appsinfo/web")).expect("mkdir");
        let mut trash = Trash::of(&pod);
        assert!(trash.put(&pod.join("appsinfo/web")).expect("put"));
        trash.empty_later();
        let waited = std::time::Instant::now();
        while fs::read_dir(pod.join("trash")).expect("trash").count() > 0 {
            assert!(waited.elapsed() < std::time::Duration::from_secs(10), "the trash is emptied");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(pod.join("appsinfo").is_dir() && !pod.join("appsinfo/web").exists());
    }
}
