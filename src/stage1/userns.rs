//! User namespaces of pods (`hostUsers: false`, CRI `userns_options` in
//! POD mode).
//!
//! A pod with a mapping boots under `systemd-nspawn --private-users=H:L
//! --private-users-ownership=map`: its systemd is root in a user namespace
//! whose ids 0..L are the node's H..H+L, and nspawn id-maps the stage1 root
//! so its root-owned files are seen as root inside. The node's `/usr`, bound
//! read-only into the stage1, is seen as owned by `nobody`, which only reads
//! and runs it.
//!
//! Apps see their image and volumes with the owners they have on disk:
//! - an app's rootfs is an overlay whose lower layer (the image's tree) is
//!   id-mapped: the tree is cloned with the pod's mapping
//!   (`mount_setattr(MOUNT_ATTR_IDMAP)`) and attached at a staging point in
//!   the pod directory, the overlay is mounted on it, and the staging mount
//!   is taken off right away (overlayfs keeps a private copy of its
//!   layers). The writable layer keeps the node's view of the app's ids.
//! - volumes are cloned id-mapped before they are attached in the pod: a
//!   file the app writes there as its root is owned by the node's root on
//!   disk, as it would be without a user namespace.
//!
//! Every process of the pod (its systemd, the apps, and commands exec'd into
//! them, [`super::exec`]) runs in the user namespace; the daemon joins it
//! only in short-lived children (the bus connection, [`super::bus`]).
//!
//! Only one mapping is supported, the same for uids and gids (nspawn's
//! `--private-users` shifts both by one base), starting at container id 0:
//! what kubelet sends.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

/// `MOUNT_ATTR_IDMAP` of mount_setattr(2).
pub(crate) const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// A pod's user namespace: container ids `0..len` are the node's
/// `host..host + len`, for uids and gids alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdMap {
    pub host: u32,
    pub len: u32,
}

/// One mapping as the CRI gives it (`IDMapping`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub host_id: u32,
    pub container_id: u32,
    pub length: u32,
}

/// Why a mapping cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum MappingError {
    #[error("user namespace mode POD needs uid and gid mappings; none were given")]
    Missing,
    #[error("{0} mappings: rktlet supports exactly one uid and one gid mapping")]
    NotOne(&'static str),
    #[error("{0} mapping starts at container id {1}: it must map container id 0")]
    NotFromZero(&'static str, u32),
    #[error("{0} mapping has length 0")]
    Empty(&'static str),
    #[error("{0} mapping maps container root to the node's root (host id 0)")]
    HostRoot(&'static str),
    #[error("{0} mapping {1}+{2} runs past the largest id")]
    Overflow(&'static str, u32, u32),
    #[error("uid mapping {uids} and gid mapping {gids} differ: rktlet maps uids and gids alike")]
    Differ { uids: IdMap, gids: IdMap },
    #[error("user namespace annotation {0:?} is not HOST:LENGTH")]
    Annotation(String),
}

impl fmt::Display for IdMap {
    /// The form kept in the pod manifest and given to nspawn: `HOST:LENGTH`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.len)
    }
}

impl IdMap {
    /// The mapping of a pod from the CRI's uid and gid mappings.
    pub(crate) fn from_mappings(uids: &[Mapping], gids: &[Mapping]) -> Result<IdMap, MappingError> {
        if uids.is_empty() && gids.is_empty() {
            return Err(MappingError::Missing);
        }
        let one = |what: &'static str, list: &[Mapping]| -> Result<IdMap, MappingError> {
            let [m] = list else { return Err(MappingError::NotOne(what)) };
            if m.container_id != 0 {
                return Err(MappingError::NotFromZero(what, m.container_id));
            }
            if m.length == 0 {
                return Err(MappingError::Empty(what));
            }
            if m.host_id == 0 {
                return Err(MappingError::HostRoot(what));
            }
            if m.host_id.checked_add(m.length).is_none() {
                return Err(MappingError::Overflow(what, m.host_id, m.length));
            }
            Ok(IdMap { host: m.host_id, len: m.length })
        };
        let (u, g) = (one("uid", uids)?, one("gid", gids)?);
        if u != g {
            return Err(MappingError::Differ { uids: u, gids: g });
        }
        Ok(u)
    }

    /// Parses the `HOST:LENGTH` form.
    pub(crate) fn parse(s: &str) -> Result<IdMap, MappingError> {
        let bad = || MappingError::Annotation(s.to_string());
        let (h, l) = s.split_once(':').ok_or_else(bad)?;
        let m =
            Mapping { host_id: h.parse().map_err(|_| bad())?, container_id: 0, length: l.parse().map_err(|_| bad())? };
        IdMap::from_mappings(&[m], &[m])
    }
}

/// Whether this node can run pods in user namespaces: id-mapped mounts
/// (mount_setattr(2), Linux 5.12) and overlayfs over id-mapped layers
/// (Linux 5.19). Asked once.
pub(crate) fn supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
        let ok = super::inject::recursive_read_only_supported() && kernel_at_least(&release, (5, 19));
        if !ok {
            tracing::info!(kernel = %release, "no id-mapped overlay layers: pods in user namespaces are not offered");
        }
        ok
    })
}

/// Whether kernel release `release` (`6.1.0-18-amd64`) is at least `want`.
fn kernel_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse::<u32>().ok());
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor)) => (major, minor) >= want,
        _ => false,
    }
}

/// The user namespace a pod manifest records (`rktlet.io/userns`).
pub(crate) fn of_manifest(m: &rkt::schema::PodManifest) -> Result<Option<IdMap>, MappingError> {
    m.annotation(rkt::schema::ANNOTATION_USERNS).map(IdMap::parse).transpose()
}

/// Translates node ids to the ids of a process's user namespace, from the
/// contents of its `/proc/<pid>/uid_map` (or `gid_map`) as the node reads
/// it: lines `inside outside count`. An id outside every range is the
/// kernel's overflow id (65534), as the process itself would see it.
pub(crate) fn to_inside(map: &str, node_id: u32) -> u32 {
    for line in map.lines() {
        let f: Vec<u64> = line.split_whitespace().filter_map(|v| v.parse().ok()).collect();
        if let [inside, outside, count] = f[..]
            && (outside..outside + count).contains(&u64::from(node_id))
        {
            return (inside + u64::from(node_id) - outside) as u32;
        }
    }
    65534
}

/// The user namespace of process `pid`, when it is not the daemon's own.
pub(crate) fn foreign_userns(pid: i32) -> io::Result<Option<OwnedFd>> {
    let theirs = format!("/proc/{pid}/ns/user");
    if crate::base::fsutil::same_file(Path::new(&theirs), Path::new("/proc/self/ns/user"))? {
        return Ok(None);
    }
    Ok(Some(std::fs::File::open(&theirs)?.into()))
}

/// Gives a detached mount tree the mapping of user namespace `userns`
/// (recursively when `recursive`: every mount in it must allow it).
pub(crate) fn idmap_tree(tree: &OwnedFd, userns: &OwnedFd, recursive: bool, what: &Path) -> io::Result<()> {
    let attr = super::inject::MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    let at = if recursive { super::inject::AT_RECURSIVE } else { 0 } | libc::AT_EMPTY_PATH as libc::c_uint;
    // SAFETY: mount_setattr(2) on our detached tree descriptor with a properly sized struct.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            at,
            &attr,
            size_of::<super::inject::MountAttr>(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        let hint = if e.raw_os_error() == Some(libc::EINVAL) {
            " (its filesystem cannot be id-mapped, or it is already)"
        } else {
            ""
        };
        return Err(io::Error::new(e.kind(), format!("id-mapping {}: {e}{hint}", what.display())));
    }
    Ok(())
}

/// Mounts an overlay at `target` (on the node) whose lower layer is the
/// id-mapped view of `lower` (staged at `staging` for the length of the
/// mount). The writable layer is not id-mapped: what the app writes is
/// stored with the node's view of its ids, as under any runtime that
/// shifts ids, and `upper`'s own directory is given to the pod's root, so
/// the app's `/` is root's. (An id-mapped upper layer would need the
/// overlay mounted with the pod root's credentials: overlayfs makes its
/// work directory as its mounter, which the mapping cannot express.)
pub(crate) fn idmapped_overlay(
    userns: &OwnedFd,
    map: IdMap,
    lower: &Path,
    upper: &Path,
    work: &Path,
    staging: &Path,
    target: &Path,
) -> io::Result<()> {
    std::os::unix::fs::chown(upper, Some(map.host), Some(map.host))?;
    std::fs::create_dir_all(staging)?;
    let result = (|| {
        let tree = super::inject::clone_tree(lower, false, false, super::inject::Propagation::Private)?;
        idmap_tree(&tree, userns, false, lower)?;
        move_to(&tree, staging)?;
        let mounted = super::inject::mount_overlay(staging, upper, work, target)
            .map_err(|e| io::Error::new(e.kind(), format!("mounting overlay: {e}")));
        // the overlay holds its own copy of its lower layer: the staging mount goes
        let _ = nix::mount::umount2(staging, nix::mount::MntFlags::MNT_DETACH);
        mounted
    })();
    let _ = std::fs::remove_dir(staging);
    if let Some(parent) = staging.parent() {
        let _ = std::fs::remove_dir(parent);
    }
    result
}

/// Attaches a detached tree at `at` on the node.
fn move_to(tree: &OwnedFd, at: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(at.as_os_str().as_bytes()).map_err(|_| io::Error::other("NUL in path"))?;
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    // SAFETY: move_mount(2) of our detached tree to a C string path.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            path.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("attaching at {}: {e}", at.display())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(host_id: u32, container_id: u32, length: u32) -> Mapping {
        Mapping { host_id, container_id, length }
    }

    #[test]
    fn one_mapping_from_zero_alike_for_uids_and_gids() {
        let ok = IdMap::from_mappings(&[m(65536, 0, 65536)], &[m(65536, 0, 65536)]);
        assert_eq!(ok, Ok(IdMap { host: 65536, len: 65536 }));
        assert_eq!(IdMap::from_mappings(&[], &[]), Err(MappingError::Missing));
        assert_eq!(IdMap::from_mappings(&[m(1, 0, 5), m(9, 5, 5)], &[m(1, 0, 5)]), Err(MappingError::NotOne("uid")));
        assert_eq!(IdMap::from_mappings(&[m(1, 0, 5)], &[]), Err(MappingError::NotOne("gid")));
        assert_eq!(IdMap::from_mappings(&[m(100, 1, 5)], &[m(100, 1, 5)]), Err(MappingError::NotFromZero("uid", 1)));
        assert_eq!(IdMap::from_mappings(&[m(100, 0, 0)], &[m(100, 0, 0)]), Err(MappingError::Empty("uid")));
        assert_eq!(IdMap::from_mappings(&[m(0, 0, 65536)], &[m(0, 0, 65536)]), Err(MappingError::HostRoot("uid")));
        assert_eq!(
            IdMap::from_mappings(&[m(u32::MAX, 0, 2)], &[m(u32::MAX, 0, 2)]),
            Err(MappingError::Overflow("uid", u32::MAX, 2))
        );
        assert!(matches!(
            IdMap::from_mappings(&[m(65536, 0, 65536)], &[m(131072, 0, 65536)]),
            Err(MappingError::Differ { .. })
        ));
    }

    #[test]
    fn kernel_releases() {
        assert!(kernel_at_least("6.1.0-18-amd64", (5, 19)));
        assert!(kernel_at_least("5.19.0", (5, 19)));
        assert!(!kernel_at_least("5.15.0-91-generic", (5, 19)));
        assert!(!kernel_at_least("garbage", (5, 19)));
    }

    #[test]
    fn annotation_form_round_trips() {
        let map = IdMap { host: 2_000_000, len: 65536 };
        assert_eq!(map.to_string(), "2000000:65536");
        assert_eq!(IdMap::parse("2000000:65536"), Ok(map));
        for bad in ["", "2000000", "x:1", "0:65536", "5:0"] {
            assert!(IdMap::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn node_ids_to_the_namespace_ones() {
        let map = "         0    2000000      65536\n";
        assert_eq!(to_inside(map, 2_000_000), 0);
        assert_eq!(to_inside(map, 2_000_033), 33);
        assert_eq!(to_inside(map, 0), 65534);
        assert_eq!(to_inside(map, 2_065_536), 65534);
        // the node's own namespace: identity
        assert_eq!(to_inside("0 0 4294967295\n", 1000), 1000);
    }
}
