//! rkt's tree store rules that rktlet follows for `cas/tree/<id>/`, and the
//! background step that makes a tree rktlet rendered durable.
//!
//! A finished tree holds `rootfs/`, `manifest`, `image`, `hash` (rkt's tree
//! hash, [`tree_hash`]) and an empty `rendered`: rkt trusts any tree with
//! `rendered` (it creates the file after a syncfs). rktlet renders without
//! syncing (a pull must not wait for the disk), so its fresh trees also
//! hold [`UNSYNCED`], naming the boot they were rendered in. A background
//! task ([`settle_later`]) computes the hash, syncs the store's filesystem
//! and removes the marker; from then on the tree is exactly what rkt leaves.
//! A tree whose marker names another boot may have lost files in a crash
//! and is rendered again when used; a tree without one (rkt's, or settled)
//! is trusted. Releases before this one wrote the boot id into `rendered`
//! itself; such a tree is trusted in its boot only, and settled like a marked one.

use crate::cas::Cas;
pub use crate::cas::{TreeState, UNSYNCED, state};
use std::collections::HashMap;
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The tree's own files, not part of its hash (rkt's list, and rktlet's marker).
const NOT_HASHED: [&str; 5] = ["manifest", "hash", "rendered", "image", UNSYNCED];

/// How a header's `Mode` is formed: Go's `archive/tar.FileInfoHeader` put
/// the file type bits (`c_ISREG`, `c_ISDIR`, ...) into it up to Go 1.9 and
/// only the permission, setuid, setgid and sticky bits from Go 1.10 on. rkt
/// 1.30's release was built with a Go 1.8 builder (rkt-builder 1.3.0): that
/// binary's hashes carry the type bits, a rkt built with a newer Go's do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeRule {
    /// Go 1.9 and older: the whole `st_mode`.
    WithTypeBits,
    /// Go 1.10 and newer: `st_mode & 0o7777`.
    PermissionsOnly,
}

/// The rule rktlet writes with: that of rkt 1.30's released binary.
pub const WRITTEN_RULE: ModeRule = ModeRule::WithTypeBits;

/// rkt's tree store hash of the tree directory `dir` (`treestore.Hash`):
/// SHA-512 over every entry below `dir`, walked depth first with each
/// directory's names in byte order, except the tree's own top-level files
/// and sockets. Each entry contributes the JSON of its header (name relative
/// to `dir`, mode, owner, size, tar type flag, link target, device numbers
/// and an always empty xattr list) followed, for a regular file, by its
/// bytes; a later path to an inode already seen is a hard link (type `1`,
/// size 0, the first path as its target, no bytes). The result is `sha512-`
/// and the first 64 hex digits.
pub fn tree_hash(dir: &Path, rule: ModeRule) -> io::Result<String> {
    let mut hasher = crate::digest::Hasher::new(crate::digest::Algorithm::Sha512);
    let mut seen: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut buf = vec![0u8; 256 * 1024];
    // (path, relative name); pushed in reverse order so names pop in order
    let mut stack: Vec<(PathBuf, Vec<u8>)> = children(dir, &[])?;
    while let Some((path, rel)) = stack.pop() {
        let m = fs::symlink_metadata(&path)?;
        let t = m.file_type();
        if t.is_dir() {
            stack.extend(children(&path, &rel)?);
        }
        let top_level_own = !rel.contains(&b'/') && NOT_HASHED.iter().any(|n| n.as_bytes() == rel.as_slice());
        if top_level_own || t.is_socket() {
            continue;
        }
        let (flag, type_bits) = if t.is_dir() {
            (b'5', 0o040000)
        } else if t.is_symlink() {
            (b'2', 0o120000)
        } else if t.is_char_device() {
            (b'3', 0o020000)
        } else if t.is_block_device() {
            (b'4', 0o060000)
        } else if t.is_fifo() {
            (b'6', 0o010000)
        } else {
            (b'0', 0o100000)
        };
        let mut mode = m.mode() & 0o7777;
        if rule == ModeRule::WithTypeBits {
            mode |= type_bits;
        }
        let mut h = Header {
            name: &rel,
            mode,
            uid: m.uid(),
            gid: m.gid(),
            size: if flag == b'0' { m.size() } else { 0 },
            flag,
            link: Vec::new(),
            dev: (0, 0),
        };
        if t.is_symlink() {
            h.link = fs::read_link(&path)?.as_os_str().as_bytes().to_vec();
        }
        if t.is_char_device() || t.is_block_device() {
            h.dev = (libc::major(m.rdev()) as u64, libc::minor(m.rdev()) as u64);
        }
        let mut data = t.is_file();
        match seen.get(&m.ino()) {
            Some(first) => {
                h.flag = b'1';
                h.link = first.clone();
                h.size = 0;
                data = false;
            }
            None => {
                seen.insert(m.ino(), rel.clone());
            }
        }
        hasher.update(&h.json());
        if data {
            let mut f = fs::File::open(&path)?;
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
            }
        }
    }
    Ok(crate::digest::cas_key(&hasher.finish()))
}

/// The entries of `dir` as (path, name relative to the tree), last name first.
fn children(dir: &Path, rel: &[u8]) -> io::Result<Vec<(PathBuf, Vec<u8>)>> {
    let mut names: Vec<Vec<u8>> =
        fs::read_dir(dir)?.map(|e| e.map(|e| e.file_name().as_bytes().to_vec())).collect::<io::Result<_>>()?;
    names.sort();
    Ok(names
        .into_iter()
        .rev()
        .map(|n| {
            let path = dir.join(std::ffi::OsStr::from_bytes(&n));
            let r = if rel.is_empty() { n } else { [rel, b"/", &n].concat() };
            (path, r)
        })
        .collect())
}

/// One entry's header as rkt hashes it.
struct Header<'a> {
    name: &'a [u8],
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    flag: u8,
    link: Vec<u8>,
    dev: (u64, u64),
}

impl Header<'_> {
    /// Go's `encoding/json` of rkt's `fileInfo` struct, fields in its order.
    fn json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(160 + self.name.len());
        out.extend_from_slice(b"{\"Name\":");
        go_json_string(&mut out, self.name);
        out.extend_from_slice(
            format!(
                ",\"Mode\":{},\"UID\":{},\"GID\":{},\"Size\":{},\"Typeflag\":{},\"Linkname\":",
                self.mode, self.uid, self.gid, self.size, self.flag
            )
            .as_bytes(),
        );
        go_json_string(&mut out, &self.link);
        out.extend_from_slice(
            format!(",\"Devmajor\":{},\"Devminor\":{},\"Xattrs\":[]}}", self.dev.0, self.dev.1).as_bytes(),
        );
        out
    }
}

/// A string as Go's `encoding/json` writes it: `"` and `\` escaped, `\n`
/// `\r` `\t` short, other control characters and `<` `>` `&` as `\u00xx`,
/// U+2028 and U+2029 as `\u2028`/`\u2029`, each byte that is not part of
/// valid UTF-8 as `\ufffd`; everything else as is.
fn go_json_string(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if b < 0x80 {
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                0..=0x1f | b'<' | b'>' | b'&' => out.extend_from_slice(format!("\\u00{b:02x}").as_bytes()),
                _ => out.push(b),
            }
            i += 1;
            continue;
        }
        let width = match b {
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => 0,
        };
        match s.get(i..i + width).filter(|_| width > 0).and_then(|c| std::str::from_utf8(c).ok()) {
            Some("\u{2028}") => out.extend_from_slice(b"\\u2028"),
            Some("\u{2029}") => out.extend_from_slice(b"\\u2029"),
            Some(c) => out.extend_from_slice(c.as_bytes()),
            None => {
                out.extend_from_slice(b"\\ufffd");
                i += 1;
                continue;
            }
        }
        i += width;
    }
    out.push(b'"');
}

/// Makes tree `id` durable if it is this boot's unsynced render: writes
/// its `hash`, syncs the filesystem, then drops the marker (an older
/// release's boot id in `rendered` becomes the empty file rkt writes).
/// Returns whether it did.
///
/// A rendered tree's files never change, so the hash and the syncfs, the
/// long part, run without the tree's lock: removing the image (which takes
/// it) does not wait for them. The lock is taken for the last steps, which
/// find out whether the tree is still there to be finished.
pub(crate) fn settle(cas: &Cas, id: &str) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let dir = cas.tree(id);
    let boot = crate::cas::boot_id();
    // which render this is: a tree removed and rendered again meanwhile is another one
    let render = |dir: &Path| fs::metadata(dir.join("rendered")).map(|m| (m.dev(), m.ino())).ok();
    let this_render = render(&dir);
    if state(&dir, boot) != TreeState::Unsynced {
        return Ok(false);
    }
    let work = tree_hash(&dir, WRITTEN_RULE).and_then(|hash| crate::fs::syncfs(&dir).map(|()| hash));
    let _lock = cas.lock_tree(id)?;
    if state(&dir, boot) != TreeState::Unsynced || render(&dir) != this_render {
        // removed, settled or rendered again meanwhile (that render settles
        // itself): what failed was reading a tree going away
        return Ok(false);
    }
    let hash = work?;
    let mut file = fs::File::create(dir.join("hash"))?;
    io::Write::write_all(&mut file, hash.as_bytes())?;
    file.sync_all()?;
    if dir.join(UNSYNCED).exists() {
        fs::remove_file(dir.join(UNSYNCED))?;
    } else {
        fs::File::create(dir.join("rendered"))?.sync_all()?;
    }
    crate::fs::sync_dir(&dir)?;
    // rkt's treestoresize counts the finished tree, `hash` included
    let image = fs::read_to_string(dir.join("image")).unwrap_or_default();
    let size = tree_size(&dir);
    cas.update_index(|i| {
        if let Some(a) = i.aciinfo.iter_mut().find(|a| a.blobkey == image.trim()) {
            a.treestoresize = size;
        }
    })?;
    Ok(true)
}

/// Set in a CLI command's environment by a daemon that settles the trees
/// the command renders itself (exec mode): the command then leaves them
/// unsynced and exits without waiting for a sync.
pub const SYNC_LATER_ENV: &str = "RKTLET_TREE_SYNC_LATER";

/// Trees being settled on threads of their own.
static SETTLING: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>> = std::sync::Mutex::new(Vec::new());

/// How many background threads run, for [`finish_settling`] (another
/// caller may have taken their handles).
static RUNNING: (std::sync::Mutex<usize>, std::sync::Condvar) = (std::sync::Mutex::new(0), std::sync::Condvar::new());

/// Counts a background thread as running until dropped.
struct Running;

impl Running {
    fn start() -> Running {
        if let Ok(mut n) = RUNNING.0.lock() {
            *n += 1;
        }
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(mut n) = RUNNING.0.lock() {
            *n = n.saturating_sub(1);
        }
        RUNNING.1.notify_all();
    }
}

/// Settles tree `id` on a thread of its own, after the call that rendered
/// it ([`finish_settling`] waits for it). Without a thread, it stays
/// unsynced: usable in this boot, rendered again after a reboot.
pub fn settle_later(cas: &Cas, id: &str) {
    if std::env::var_os(SYNC_LATER_ENV).is_some() {
        return;
    }
    let (cas, id) = (cas.clone(), id.to_string());
    background("tree-sync", move || {
        if let Err(e) = settle(&cas, &id) {
            tracing::warn!(tree = %id, error = %e, "cannot sync a rendered tree (it is rendered again after a reboot)")
        }
    });
}

/// Runs `work` on a thread of its own at nice 10, after the call that asked
/// for it ([`finish_settling`] waits for it).
pub fn background(name: &str, work: impl FnOnce() + Send + 'static) {
    let running = Running::start();
    let spawned = std::thread::Builder::new().name(name.into()).spawn(move || {
        let _running = running;
        // background work: the calls that come next (on 2 CPUs, the next
        // pull or container start) go first; nice is per thread on Linux
        // SAFETY: setpriority(2) on the calling thread (who 0), no memory passed.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
        work();
    });
    match spawned {
        Ok(handle) => {
            if let Ok(mut pending) = SETTLING.lock() {
                pending.retain(|h| !h.is_finished());
                pending.push(handle);
            }
        }
        Err(e) => tracing::warn!(error = %e, "no thread for background work on the image store"),
    }
}

/// Waits for the trees [`settle_later`] is settling (before a process exits).
pub fn finish_settling() {
    let pending = SETTLING.lock().map(|mut p| std::mem::take(&mut *p)).unwrap_or_default();
    for handle in pending {
        let _ = handle.join();
    }
    // and those whose handles another caller took
    if let Ok(mut n) = RUNNING.0.lock() {
        while *n > 0 {
            match RUNNING.1.wait(n) {
                Ok(next) => n = next,
                Err(_) => return,
            }
        }
    }
}

/// Settles, in the background, every tree of this boot that is not synced
/// yet (a process that rendered it ended first); returns how many.
pub fn settle_unsynced(cas: &Cas) -> usize {
    let mut n = 0;
    for e in fs::read_dir(cas.trees()).into_iter().flatten().flatten() {
        let id = e.file_name().to_string_lossy().into_owned();
        if state(&e.path(), crate::cas::boot_id()) == TreeState::Unsynced {
            settle_later(cas, &id);
            n += 1;
        }
    }
    n
}

/// rkt's `treestoresize`: the apparent sizes of everything in the tree
/// directory (itself included), each hard-linked inode once; rktlet's
/// not-synced marker is not counted.
pub fn tree_size(dir: &Path) -> i64 {
    let mut total = 0u64;
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![dir.to_path_buf()];
    let marker = dir.join(UNSYNCED);
    while let Some(p) = stack.pop() {
        if p == marker {
            continue;
        }
        let Ok(m) = fs::symlink_metadata(&p) else { continue };
        if m.is_dir() {
            stack.extend(fs::read_dir(&p).into_iter().flatten().flatten().map(|e| e.path()));
        }
        use std::os::unix::fs::MetadataExt;
        if m.nlink() > 1 && !m.is_dir() && !seen.insert(m.ino()) {
            continue;
        }
        total += m.len();
    }
    total as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_json_strings() {
        let enc = |s: &[u8]| {
            let mut v = Vec::new();
            go_json_string(&mut v, s);
            String::from_utf8(v).expect("utf8")
        };
        assert_eq!(enc(b"rootfs/a b"), r#""rootfs/a b""#);
        assert_eq!(enc(b"a\"b\\c\nd\te\x01<&>\x7f"), "\"a\\\"b\\\\c\\nd\\te\\u0001\\u003c\\u0026\\u003e\x7f\"");
        assert_eq!(enc("é\u{2028}".as_bytes()), "\"é\\u2028\"");
        assert_eq!(enc(b"x\xffy\xc3"), r#""x\ufffdy\ufffd""#);
    }

    #[test]
    fn marker_states() {
        let t = tempfile::tempdir().expect("tmp");
        let d = t.path();
        assert_eq!(state(d, "boot-a"), TreeState::NotRendered);
        fs::write(d.join("rendered"), "").expect("rendered");
        assert_eq!(state(d, "boot-a"), TreeState::Settled, "rkt's layout: empty rendered, no marker");
        fs::write(d.join(UNSYNCED), "boot-a\n").expect("marker");
        assert_eq!(state(d, "boot-a"), TreeState::Unsynced);
        assert_eq!(state(d, "boot-b"), TreeState::OtherBoot);
        fs::remove_file(d.join(UNSYNCED)).expect("rm");
        fs::write(d.join("rendered"), "boot-a").expect("legacy");
        assert_eq!(state(d, "boot-a"), TreeState::Unsynced, "an older release's boot id in rendered");
        assert_eq!(state(d, "boot-b"), TreeState::OtherBoot);
    }

    /// A tree with every kind of entry rkt's hash treats apart. Needs root
    /// (owners, a device node).
    fn fixture(d: &Path) {
        use std::os::unix::fs::{PermissionsExt, chown, symlink};
        let perm = |p: &Path, mode: u32| fs::set_permissions(p, fs::Permissions::from_mode(mode)).expect("chmod");
        let dir = |rel: &str, mode: u32| {
            fs::create_dir_all(d.join(rel)).expect("mkdir");
            perm(&d.join(rel), mode);
        };
        let file = |rel: &[u8], content: &[u8], mode: u32| {
            let p = d.join(std::ffi::OsStr::from_bytes(rel));
            fs::write(&p, content).expect("write");
            perm(&p, mode);
        };
        for (name, content) in [("manifest", "{}"), ("hash", "sha512-x"), ("rendered", ""), ("image", "sha512-k")] {
            fs::write(d.join(name), content).expect("own file");
        }
        dir("rootfs", 0o755);
        dir("rootfs/bin", 0o755);
        file(b"rootfs/bin/sh", b"#!/bin/sh\necho hi\n", 0o755);
        fs::hard_link(d.join("rootfs/bin/sh"), d.join("rootfs/bin/zz-same-inode")).expect("hard link");
        dir("rootfs/etc", 0o750);
        file(b"rootfs/etc/passwd", b"root:x:0:0::/root:/bin/sh\n", 0o644);
        file(b"rootfs/etc/shadow", b"root:*:1::::::\n", 0o600);
        chown(d.join("rootfs/etc/shadow"), Some(1000), Some(2000)).expect("chown");
        dir("rootfs/usr/bin", 0o755);
        dir("rootfs/usr/lib", 0o755);
        file(b"rootfs/usr/bin/su", b"su", 0o4755);
        file(b"rootfs/usr/bin/wall", b"wall", 0o2711);
        dir("rootfs/tmp", 0o1777);
        symlink("usr/lib", d.join("rootfs/lib")).expect("symlink");
        dir("rootfs/run", 0o755);
        dir("rootfs/dev", 0o755);
        let c = |p: &str| std::ffi::CString::new(d.join(p).as_os_str().as_bytes()).expect("cstring");
        // SAFETY: mkfifo(3) and mknod(2) with valid NUL-terminated paths.
        unsafe {
            assert_eq!(libc::mkfifo(c("rootfs/run/fifo").as_ptr(), 0o640), 0);
            assert_eq!(libc::mknod(c("rootfs/dev/null").as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)), 0);
            assert_eq!(libc::mknod(c("rootfs/dev/loop9").as_ptr(), libc::S_IFBLK | 0o660, libc::makedev(7, 9)), 0);
        }
        let _socket = std::os::unix::net::UnixListener::bind(d.join("rootfs/run/sock")).expect("socket");
        dir("rootfs/odd", 0o755);
        file(b"rootfs/odd/a<b>&c\"d\\e", b"", 0o644);
        file(b"rootfs/odd/x\xffy", b"not utf-8", 0o644);
        file("rootfs/odd/\u{e9}\u{2028}".as_bytes(), b"line separator", 0o644);
        file(b"rootfs/odd/tab\there", b"", 0o644);
        file(b"rootfs/empty", b"", 0o644);
        fs::write(d.join(UNSYNCED), "boot").expect("marker");
    }

    /// rkt's hash of [`fixture`]. The expected values were printed by rkt's
    /// own `treestore.Hash` (rkt's store/treestore/tree.go with appc's
    /// tarheader, built with Go 1.19) run on this fixture without the marker
    /// (rkt would hash it): `PermissionsOnly` is that Go's output; for
    /// `WithTypeBits` the same program added Go 1.9's type bits to each
    /// header's mode after `FileInfoHeader`, as Go 1.9 does itself.
    /// `RKTLET_HASH_FIXTURE=<new dir>` builds the fixture there to check again.
    #[test]
    fn rkts_tree_hash_of_a_fixture() {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            println!("SKIPPED: rkts_tree_hash_of_a_fixture needs root (owners, device nodes)");
            return;
        }
        let t = tempfile::tempdir().expect("tmp");
        let d = match std::env::var_os("RKTLET_HASH_FIXTURE") {
            Some(p) => PathBuf::from(p),
            None => t.path().join("tree"),
        };
        fs::create_dir(&d).expect("fixture dir");
        fixture(&d);
        let with = tree_hash(&d, ModeRule::WithTypeBits).expect("hash");
        let without = tree_hash(&d, ModeRule::PermissionsOnly).expect("hash");
        assert_eq!(with, "sha512-9553235b67ad4d528fa7274719a50401d13cbf86a25bcc0a5720cfa00a4c2422");
        assert_eq!(without, "sha512-9c629522732c992b10107f30d649c7696b9fe1ddf881548e6549cc19e7fa6439");
    }

    /// What a daemon start does with a tree a process left unsynced in this
    /// boot: hashes it, syncs and drops the marker; another boot's tree and
    /// rkt's are left alone.
    #[test]
    fn unsynced_trees_of_this_boot_are_settled() {
        let t = tempfile::tempdir().expect("tmp");
        let cas = Cas::new(t.path());
        cas.ensure().expect("cas");
        let make = |id: &str, marker: Option<&str>| {
            let d = cas.tree(id);
            fs::create_dir_all(d.join("rootfs/etc")).expect("tree");
            fs::write(d.join("rootfs/etc/hostname"), id).expect("file");
            fs::write(d.join("rendered"), "").expect("rendered");
            if let Some(m) = marker {
                fs::write(d.join(UNSYNCED), m).expect("marker");
            }
            d
        };
        let mine = make("deps-mine", Some(crate::cas::boot_id()));
        let other = make("deps-other", Some("another-boot"));
        let rkts = make("deps-rkt", None);
        assert_eq!(settle_unsynced(&cas), 1);
        finish_settling();
        assert!(!mine.join(UNSYNCED).exists());
        assert_eq!(
            fs::read_to_string(mine.join("hash")).expect("hash"),
            tree_hash(&mine, WRITTEN_RULE).expect("computed")
        );
        assert_eq!(state(&mine, crate::cas::boot_id()), TreeState::Settled);
        assert!(other.join(UNSYNCED).exists() && !other.join("hash").exists());
        assert!(!rkts.join("hash").exists(), "rkt's tree is not touched");
    }
}
