//! Spare app directories: the directories and files an `app add` needs
//! (appsinfo, overlay upper and work, the rootfs mount point, the env file
//! and the created marker) and the started marker its start takes
//! (`app_status::STARTED_SPARE`), made ahead in `<pod>/spares/<id>/` and
//! renamed into place by the next add in the pod.
//!
//! Why: on an ext4 without a journal, allocating an inode walks past the
//! inodes its block group freed lately, so its cost swings (from 20 µs to
//! over 300 µs per file on this machine's VM disk, while a rename stays
//! near 10 µs). An add allocates about ten; a spare moves them off the
//! request path, as the pod pool does for pods. There `spares/` carries
//! `chattr +T`, so ext4 places each spare in a flex group it picks anew,
//! away from the apps removed before (`fsutil::spread_subdirectories`).
//!
//! The disk is the registry: a spare is complete once it has its final name
//! (it is built under a dot name), and whoever renames it to a dot name
//! first owns it, so two adds, the daemon and the CLI, or a daemon after a
//! restart all share them safely. Spares go with the pod's directory.

use super::app_status::AppPaths;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// How many spares a pod keeps ready.
pub(crate) const KEEP: usize = 1;

/// The parts of a spare: directories, then files (empty until the add
/// writes them; the created marker gets its time then too, the started
/// marker at the start).
const DIRS: [&str; 5] = ["appsinfo", "upper", "work", "stage2", "stage2/rootfs"];
const FILES: [&str; 5] = ["appsinfo/manifest", "appsinfo/treeStoreID", "env", "created", "started"];

fn spares_dir(pod_dir: &Path) -> PathBuf {
    pod_dir.join("spares")
}

/// A spare taken for one add.
#[derive(Debug)]
pub(crate) struct Spare {
    dir: PathBuf,
}

impl Spare {
    /// Takes one of the pod's spares, if it has one ready.
    pub(crate) fn take(pod_dir: &Path) -> Option<Spare> {
        let dir = spares_dir(pod_dir);
        for entry in fs::read_dir(&dir).ok()?.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|n| !n.starts_with('.')) else { continue };
            let taken = dir.join(format!(".taken-{name}"));
            // the rename is the claim: of two takers, one finds it gone
            if fs::rename(entry.path(), &taken).is_ok() {
                return Some(Spare { dir: taken });
            }
        }
        None
    }

    /// Renames the spare's parts to the app's places. On error the parts
    /// not yet moved are deleted; the caller makes what is missing. The
    /// emptied spare directory stays for [`replenish`] to remove: an rmdir
    /// frees an inode (ext4 puts it on its orphan list, a journaled write to
    /// the superblock), 0.5-1.2 ms measured here on the add's path.
    pub(crate) fn place(self, paths: &AppPaths, tree_id: &str) -> io::Result<()> {
        let stage2 = paths.rootfs().parent().map(Path::to_path_buf).unwrap_or_default();
        let moves = [
            ("appsinfo", paths.appsinfo()),
            ("upper", paths.overlay_upper(tree_id)),
            ("work", paths.overlay_work(tree_id)),
            ("stage2", stage2),
            ("env", paths.env_file()),
            ("created", paths.status_file("-created")),
        ];
        let result = moves.iter().try_for_each(|(part, to)| {
            if let Some(parent) = to.parent() {
                fs::create_dir_all(parent)?;
            }
            fs::rename(self.dir.join(part), to)
        });
        match result {
            Ok(()) => {
                // the started marker, for the app's start (none in a spare of an older rktlet)
                let started = self.dir.join("started");
                if fs::rename(&started, paths.status_file(super::app_status::STARTED_SPARE)).is_err() {
                    let _ = fs::remove_file(&started);
                }
                Ok(())
            }
            Err(e) => {
                let _ = fs::remove_dir_all(&self.dir);
                Err(e)
            }
        }
    }
}

/// Makes spares until the pod has [`KEEP`] (a spare is only an
/// optimisation: callers log a failure and go on). Returns how many it made.
///
/// Only ever one directory level at a time: a pod removed meanwhile (moved
/// to the garbage directory, then deleted) makes this fail with `NotFound`
/// and is never made again by it.
pub(crate) fn replenish(pod_dir: &Path) -> io::Result<usize> {
    let dir = spares_dir(pod_dir);
    match fs::create_dir(&dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        Err(_) => {}
        // each spare in a flex group ext4 picks anew, not the pod's, where
        // the apps removed before it were (`fsutil::spread_subdirectories`)
        Ok(()) => {
            if let Err(e) = crate::base::fsutil::spread_subdirectories(&dir) {
                tracing::debug!(dir = %dir.display(), error = %e, "spares not spread over block groups");
            }
        }
    }
    let mut ready = 0;
    for entry in fs::read_dir(&dir)?.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(".taken-") {
            // emptied by `Spare::place`; one still being placed is not
            // empty and stays (as does one an add left when it died)
            let _ = fs::remove_dir(entry.path());
        } else if !name.starts_with('.') {
            ready += 1;
        }
    }
    let mut made = 0;
    for _ in ready..KEEP {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let building = dir.join(format!(".new-{id}"));
        let built = (|| {
            fs::create_dir(&building)?;
            for d in DIRS {
                fs::create_dir(building.join(d))?;
            }
            for f in FILES {
                fs::File::create(building.join(f))?;
            }
            fs::rename(&building, dir.join(&id))
        })();
        if let Err(e) = built {
            let _ = fs::remove_dir_all(&building);
            return Err(e);
        }
        made += 1;
    }
    Ok(made)
}

/// [`replenish`] on a blocking thread, not waited for.
pub(crate) fn replenish_later(pod_dir: PathBuf) {
    tokio::task::spawn_blocking(move || {
        if let Err(e) = replenish(&pod_dir) {
            tracing::debug!(pod = %pod_dir.display(), error = %e, "no spare app directories made");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkt::pod::{DataDir, Pod};

    /// A pod (in a temporary data dir) whose stage1 root has `rkt/status`.
    fn pod_with_status_dir() -> (tempfile::TempDir, Pod) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = DataDir::new(tmp.path().join("data"));
        let pod = Pod::create(&data).expect("create");
        fs::create_dir_all(pod.stage1_rootfs().join("rkt/status")).expect("mkdir");
        (tmp, pod)
    }

    #[test]
    fn a_spare_is_taken_once_and_lands_in_the_apps_places() {
        let (tmp, pod) = pod_with_status_dir();
        assert!(Spare::take(&pod.path()).is_none(), "none made yet");
        let gone = tmp.path().join("gone");
        assert_eq!(replenish(&gone).expect_err("no pod").kind(), io::ErrorKind::NotFound);
        assert!(!gone.exists(), "a removed pod's directory is not made again");
        assert_eq!(replenish(&pod.path()).expect("replenish"), KEEP);
        assert_eq!(replenish(&pod.path()).expect("replenish"), 0, "enough are ready");
        // (here /tmp is an ext4 without a journal, as the data dir is: each
        // spare placed anew)
        let walks = crate::base::fsutil::walks_freed_inodes(tmp.path()).expect("asked");
        let spread = crate::base::fsutil::spreads_subdirectories(&spares_dir(&pod.path())).expect("flags");
        assert_eq!(spread, walks, "chattr +T on the spares directory where ext4 walks freed inodes");
        if !walks {
            let reason = format!("{} walks no freed inodes: spares stay where ext4 puts them", tmp.path().display());
            crate::base::skipped("a_spare_is_taken_once_and_lands_in_the_apps_places", &reason);
        }

        let spare = Spare::take(&pod.path()).expect("a spare");
        assert!(Spare::take(&pod.path()).is_none(), "taken: nobody else gets it");
        let paths = AppPaths::new(&pod, "web");
        spare.place(&paths, "deps-sha512-x").expect("place");
        for dir in [paths.appsinfo(), paths.overlay_upper("deps-sha512-x"), paths.overlay_work("deps-sha512-x")] {
            assert!(dir.is_dir(), "{}", dir.display());
        }
        assert!(paths.rootfs().is_dir());
        let started = paths.status_file(crate::stage1::app_status::STARTED_SPARE);
        for file in [paths.appsinfo().join("treeStoreID"), paths.env_file(), paths.status_file("-created"), started] {
            assert_eq!(fs::read(&file).expect("file"), b"", "{}", file.display());
        }
        assert!(!paths.status_file("-started").exists(), "made ahead, not started");
        let names = || -> Vec<String> {
            let entries = fs::read_dir(spares_dir(&pod.path())).expect("spares").flatten();
            let mut names: Vec<String> = entries.map(|e| e.file_name().to_string_lossy().into_owned()).collect();
            names.sort();
            names
        };
        let left = names();
        assert!(left.len() == 1 && left[0].starts_with(".taken-"), "the emptied spare, for replenish: {left:?}");
        assert!(fs::read_dir(spares_dir(&pod.path()).join(&left[0])).expect("taken").next().is_none());

        // a spare another add is placing (not empty yet) is left alone
        let busy = spares_dir(&pod.path()).join(".taken-busy");
        fs::create_dir_all(busy.join("upper")).expect("mkdir");
        assert_eq!(replenish(&pod.path()).expect("replenish"), KEEP);
        let left = names();
        assert_eq!(left.len(), 1 + KEEP, "{left:?}");
        assert_eq!(left[0], ".taken-busy", "{left:?}");
        assert!(left[1..].iter().all(|n| !n.starts_with('.')), "the emptied spare removed: {left:?}");
    }

    #[test]
    fn a_start_takes_the_spares_started_marker_with_the_starts_time() {
        let (_tmp, pod) = pod_with_status_dir();
        replenish(&pod.path()).expect("replenish");
        let paths = AppPaths::new(&pod, "web");
        Spare::take(&pod.path()).expect("a spare").place(&paths, "t").expect("place");
        let made = std::time::SystemTime::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        crate::stage1::app_status::mark_started(&paths).expect("mark");
        let started = fs::metadata(paths.status_file("-started")).expect("started");
        assert!(started.modified().expect("mtime") > made, "StartedAt is the start's time");
        assert!(!paths.status_file(crate::stage1::app_status::STARTED_SPARE).exists(), "renamed");
        // without one (an app added without a spare): made then
        let other = AppPaths::new(&pod, "db");
        crate::stage1::app_status::mark_started(&other).expect("mark");
        assert!(other.status_file("-started").is_file());
    }

    #[test]
    fn a_spare_that_cannot_be_placed_is_deleted() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = DataDir::new(tmp.path().join("data"));
        let pod = Pod::create(&data).expect("create");
        replenish(&pod.path()).expect("replenish");
        let paths = AppPaths::new(&pod, "web");
        // the stage1 rootfs's /rkt is a file: the env file has no place
        fs::create_dir_all(pod.stage1_rootfs()).expect("mkdir");
        fs::write(pod.stage1_rootfs().join("rkt"), b"").expect("file");
        assert!(Spare::take(&pod.path()).expect("spare").place(&paths, "t").is_err());
        let left: Vec<_> = fs::read_dir(spares_dir(&pod.path())).expect("spares").flatten().collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
