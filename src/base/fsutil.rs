//! Small file helpers of the daemon (the durable writes of the on-disk
//! stores are `rkt::fs`'s).

use std::fs;
use std::io;
use std::path::Path;

/// A regular file with an execute bit set (a program `$PATH` or a CNI
/// plugin directory may offer).
pub(crate) fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// Whether two paths, links followed (`/proc/<pid>/exe`, `/proc/<pid>/root`,
/// a namespace file), are the same file: the same device and inode.
pub(crate) fn same_file(a: &Path, b: &Path) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let (a, b) = (fs::metadata(a)?, fs::metadata(b)?);
    Ok((a.dev(), a.ino()) == (b.dev(), b.ino()))
}

/// A `kB` field (`"Pss:"`, `"VmRSS:"`) of a /proc file's text, in KiB.
pub(crate) fn kib_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse().ok())
}

/// ext4's `FS_TOPDIR_FL` (`chattr +T`; linux/fs.h).
const FS_TOPDIR_FL: libc::c_int = 0x0002_0000;

/// Spreads the directories made in `dir` over the file system's block
/// groups where that pays: marks `dir` as the top of directory hierarchies
/// (`chattr +T`), so ext4 places each directory made in it as it places
/// those of its root, with the Orlov allocator: in the flex group with the
/// fewest directories among those emptier than average, picked anew for
/// each; the files made below follow their directory.
///
/// Why: on an ext4 without a journal, allocating an inode walks past every
/// inode of its block group freed in the last half minute or more (the
/// kernel's `recently_deleted`, a buffer lookup each). Pods and apps made
/// and removed by the hundred all in one group made that walk about an
/// eighth of the node's CPU time while pods started; spread out, each walks
/// past few. With a journal there is no such walk, and the directories
/// stay where ext4 would put them.
///
/// Returns whether `dir` is marked.
pub(crate) fn spread_subdirectories(dir: &Path) -> io::Result<bool> {
    if !walks_freed_inodes(dir)? {
        return Ok(false);
    }
    mark_top_of_hierarchies(dir)
}

/// Whether allocating an inode on `dir`'s file system walks past the
/// inodes its block group freed lately: ext4 without a journal (an ext2 or
/// ext3 mounted by the ext4 driver too). Asked once per device.
pub(crate) fn walks_freed_inodes(dir: &Path) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    static ASKED: std::sync::Mutex<Vec<(u64, bool)>> = std::sync::Mutex::new(Vec::new());
    let dev = fs::metadata(dir)?.dev();
    let mut asked = ASKED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(&(_, walks)) = asked.iter().find(|(d, _)| *d == dev) {
        return Ok(walks);
    }
    let ext4 = nix::sys::statfs::statfs(dir)?.filesystem_type() == nix::sys::statfs::EXT4_SUPER_MAGIC;
    let walks = ext4 && !journaled(dev);
    asked.push((dev, walks));
    Ok(walks)
}

/// Whether the ext4 on block device `dev` has a journal, as ext4 itself
/// says in `/sys/fs/ext4/<device>/journal_task` (`<none>` without one; the
/// device named as the kernel names it, the last part of the link
/// `/sys/dev/block/<major>:<minor>`). A journal on a device of its own
/// counts too. What cannot be read counts as journaled: the directories
/// then stay where ext4 puts them.
fn journaled(dev: u64) -> bool {
    let link = fs::read_link(format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev)));
    let Some(name) = link.ok().and_then(|l| l.file_name().map(std::ffi::OsStr::to_os_string)) else {
        return true;
    };
    fs::read_to_string(Path::new("/sys/fs/ext4").join(name).join("journal_task"))
        .map_or(true, |task| task.trim() != "<none>")
}

/// Marks `dir` as the top of directory hierarchies (`chattr +T`). Returns
/// whether the file system keeps the mark: ext2/3/4 do; others refuse it.
/// (A mark stays if the file system later gets a journal: harmless.)
fn mark_top_of_hierarchies(dir: &Path) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let file = fs::File::open(dir)?;
    let flags = match inode_flags(&file) {
        Ok(flags) if flags & FS_TOPDIR_FL != 0 => return Ok(true),
        Ok(flags) => flags | FS_TOPDIR_FL,
        Err(e) => return refused(e),
    };
    // SAFETY: FS_IOC_SETFLAGS reads one int from `flags`.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags) } < 0 {
        return refused(io::Error::last_os_error());
    }
    Ok(true)
}

/// Whether `dir` is marked as the top of directory hierarchies
/// ([`spread_subdirectories`]; `lsattr -d` shows a `T`).
#[cfg(test)]
pub(crate) fn spreads_subdirectories(dir: &Path) -> io::Result<bool> {
    match inode_flags(&fs::File::open(dir)?) {
        Ok(flags) => Ok(flags & FS_TOPDIR_FL != 0),
        Err(e) => refused(e),
    }
}

/// The inode flags of an open file (`FS_IOC_GETFLAGS`, as `lsattr` reads them).
fn inode_flags(file: &fs::File) -> io::Result<libc::c_int> {
    use std::os::fd::AsRawFd;
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one int (the kernel's size, whatever the macro says) into `flags`.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags)
}

/// A file system without inode flags (or without this one) is not an error.
fn refused(e: io::Error) -> io::Result<bool> {
    match e.raw_os_error() {
        Some(libc::ENOTTY | libc::EOPNOTSUPP) => Ok(false),
        _ => Err(e),
    }
}

/// `inner` joined under `root` as a chroot into `root` would resolve it:
/// symlinks are followed inside `root` (an absolute one starts again at
/// `root`, `..` stops at it), so an image's symlink cannot lead to the
/// host's files. Missing components are taken as they are (the caller may
/// create them). Used on trees no process runs in yet (an image's tree, a
/// new app's rootfs), so nothing changes them between this and its use.
pub(crate) fn resolve_in_root(root: &Path, inner: &Path) -> io::Result<std::path::PathBuf> {
    use std::collections::VecDeque;
    use std::ffi::OsString;
    use std::path::Component;
    const MAX_LINKS: usize = 40;
    let mut resolved: Vec<OsString> = Vec::new();
    let mut todo: VecDeque<OsString> = VecDeque::new();
    let mut links = 0;
    let push_front = |todo: &mut VecDeque<OsString>, path: &Path| {
        for c in path.components().rev() {
            match c {
                Component::Normal(n) => todo.push_front(n.to_os_string()),
                Component::ParentDir => todo.push_front("..".into()),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
    };
    push_front(&mut todo, inner);
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            resolved.pop();
            continue;
        }
        let mut here: std::path::PathBuf = root.to_path_buf();
        here.extend(&resolved);
        here.push(&name);
        match fs::symlink_metadata(&here) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                let target = fs::read_link(&here)?;
                if target.is_absolute() {
                    resolved.clear();
                }
                push_front(&mut todo, &target);
            }
            _ => resolved.push(name),
        }
    }
    let mut out = root.to_path_buf();
    out.extend(resolved);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_file_and_a_link_to_it_are_the_same_file_and_a_copy_is_not() {
        let t = tempfile::tempdir().expect("tempdir");
        let (a, link, copy) = (t.path().join("a"), t.path().join("link"), t.path().join("copy"));
        fs::write(&a, b"x").expect("a");
        fs::write(&copy, b"x").expect("copy");
        symlink(&a, &link).expect("link");
        assert!(same_file(&a, &link).expect("both there"));
        assert!(!same_file(&a, &copy).expect("both there"));
        assert!(same_file(&a, &t.path().join("gone")).is_err());
    }

    fn flags(dir: &Path) -> libc::c_int {
        inode_flags(&fs::File::open(dir).expect("open")).expect("flags")
    }

    #[test]
    fn an_ext4_directory_is_marked_as_a_top_of_hierarchies_once() {
        // /tmp here is ext4, as the data dir is; elsewhere it may be a tmpfs
        let t = tempfile::tempdir().expect("tempdir");
        let fs_type = nix::sys::statfs::statfs(t.path()).expect("statfs").filesystem_type();
        if fs_type != nix::sys::statfs::EXT4_SUPER_MAGIC {
            let reason = format!("{} is not on ext4 ({fs_type:?}): no Orlov allocator to steer", t.path().display());
            crate::base::skipped("an_ext4_directory_is_marked_as_a_top_of_hierarchies_once", &reason);
            return;
        }
        let dir = t.path().join("embryo");
        fs::create_dir(&dir).expect("mkdir");
        assert!(!spreads_subdirectories(&dir).expect("read"), "a new directory is not marked");
        assert!(mark_top_of_hierarchies(&dir).expect("mark"));
        assert!(spreads_subdirectories(&dir).expect("read"));
        let marked = flags(&dir);
        assert_ne!(marked & FS_TOPDIR_FL, 0, "chattr +T");
        assert!(mark_top_of_hierarchies(&dir).expect("again"), "marking again is fine");
        assert_eq!(flags(&dir), marked, "and changes nothing more");
        fs::create_dir(dir.join("pod")).expect("a directory in it");
        assert_eq!(flags(&dir.join("pod")) & FS_TOPDIR_FL, 0, "its directories are not tops themselves");
    }

    #[test]
    fn directories_are_spread_only_where_ext4_walks_freed_inodes() {
        let t = tempfile::tempdir().expect("tempdir");
        let walks = walks_freed_inodes(t.path()).expect("asked");
        // this machine's root: ext4 without a journal (no /proc/fs/jbd2/vda-8)
        let ext4 =
            nix::sys::statfs::statfs(t.path()).expect("statfs").filesystem_type() == nix::sys::statfs::EXT4_SUPER_MAGIC;
        let journals: Vec<String> = fs::read_dir("/proc/fs/jbd2")
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        if !ext4 {
            assert!(!walks, "only ext4 walks freed inodes");
        } else if journals.is_empty() {
            assert!(walks, "ext4 and no journal anywhere: the walk is there");
        }
        assert_eq!(spread_subdirectories(t.path()).expect("spread"), walks);
        assert_eq!(spreads_subdirectories(t.path()).expect("read"), walks, "marked where it pays, only there");
        if !walks {
            let reason = format!("{} walks no freed inodes here (a journal, or not ext4)", t.path().display());
            crate::base::skipped("directories_are_spread_only_where_ext4_walks_freed_inodes", &reason);
        }
    }

    #[test]
    fn a_file_system_without_the_flag_is_not_an_error_and_a_missing_directory_is() {
        let shm = Path::new("/dev/shm");
        if nix::sys::statfs::statfs(shm).map(|s| s.filesystem_type()) != Ok(nix::sys::statfs::TMPFS_MAGIC) {
            crate::base::skipped(
                "a_file_system_without_the_flag_is_not_an_error_and_a_missing_directory_is",
                "/dev/shm is not a tmpfs here",
            );
        } else {
            let t = tempfile::tempdir_in(shm).expect("tempdir");
            assert!(!walks_freed_inodes(t.path()).expect("asked"), "a tmpfs has no block groups");
            assert!(!spread_subdirectories(t.path()).expect("not spread"));
            assert!(!mark_top_of_hierarchies(t.path()).expect("tmpfs refuses the flag"), "tmpfs keeps no such mark");
            assert!(!spreads_subdirectories(t.path()).expect("read"));
        }
        let t = tempfile::tempdir().expect("tempdir");
        let e = spread_subdirectories(&t.path().join("gone")).expect_err("missing");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn symlinks_resolve_inside_the_root() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("root");
        fs::create_dir_all(root.join("usr/bin")).expect("mkdir");
        fs::create_dir_all(root.join("etc")).expect("mkdir");
        symlink("/usr/bin", root.join("bin")).expect("symlink");
        symlink("/run/systemd/resolve/stub-resolv.conf", root.join("etc/resolv.conf")).expect("symlink");
        symlink("../../../../../../outside", root.join("etc/up")).expect("symlink");
        symlink("loop2", root.join("loop1")).expect("symlink");
        symlink("loop1", root.join("loop2")).expect("symlink");
        symlink("bin/sh", root.join("relative")).expect("symlink");
        let at = |p: &str| resolve_in_root(&root, Path::new(p)).expect(p);
        assert_eq!(at("/bin/sh"), root.join("usr/bin/sh"), "absolute link: from the root, not the host");
        assert_eq!(at("/etc/resolv.conf"), root.join("run/systemd/resolve/stub-resolv.conf"), "dangling link");
        assert_eq!(at("/etc/up/x"), root.join("outside/x"), "`..` stops at the root");
        assert_eq!(at("/../../etc/hosts"), root.join("etc/hosts"));
        assert_eq!(at("relative"), root.join("usr/bin/sh"), "relative link, then an absolute one");
        assert_eq!(at("/"), root);
        let e = resolve_in_root(&root, Path::new("/loop1/x")).expect_err("a loop");
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
    }
}
