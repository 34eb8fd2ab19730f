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
