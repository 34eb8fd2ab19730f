//! Named network namespaces, made in-process the way `ip netns add` makes them:
//! a thread of the daemon unshares its network namespace and bind-mounts it
//! onto `/var/run/netns/<name>`, then exits. The daemon's other threads never
//! change namespace. Code that must run inside a netns runs on a short-lived
//! thread that `setns`es (see [`Netns::run`]).

use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::sys::statfs;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread;

/// Where named network namespaces live (iproute2's and rkt's choice).
pub(crate) const NETNS_RUN_DIR: &str = "/var/run/netns";

#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("invalid netns name {0:?}")]
    InvalidName(String),
    #[error("netns {path}: {what}: {source}")]
    Sys { path: PathBuf, what: &'static str, source: io::Error },
    #[error("{0} is not a network namespace")]
    NotNetns(PathBuf),
    #[error("netns {path}: interface {ifname}: {what}: {source}")]
    Link { path: PathBuf, ifname: String, what: &'static str, source: io::Error },
}

fn sys<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(nix::Error) -> NetnsError + 'a {
    move |e| NetnsError::Sys { path: path.to_path_buf(), what, source: io::Error::from(e) }
}

fn io_err<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(io::Error) -> NetnsError + 'a {
    move |source| NetnsError::Sys { path: path.to_path_buf(), what, source }
}

/// A network namespace pinned by a bind mount (or any nsfs file, e.g. `/proc/<pid>/ns/net`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netns {
    path: PathBuf,
}

/// One interface of a netns: its addresses and counters (`/proc/net/dev`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Interface {
    pub name: String,
    pub up: bool,
    /// Addresses with their prefix length.
    pub addrs: Vec<(IpAddr, u8)>,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
}

impl Netns {
    /// rkt's netns name: `cni-` and random hex in five groups (8-4-4-4-12).
    #[cfg(test)]
    pub(crate) fn random_name() -> String {
        format!("cni-{}", uuid::Uuid::new_v4().hyphenated())
    }

    /// Creates the netns `name` under [`NETNS_RUN_DIR`].
    pub(crate) fn create(name: &str) -> Result<Netns, NetnsError> {
        Self::create_in(Path::new(NETNS_RUN_DIR), name)
    }

    /// Creates a new network namespace pinned at `dir/name`; fails if that file exists.
    pub(crate) fn create_in(dir: &Path, name: &str) -> Result<Netns, NetnsError> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(NetnsError::InvalidName(name.into()));
        }
        ensure_shared_dir(dir)?;
        let path = dir.join(name);
        // The mount point: an empty file, created exclusively so two pods never share a name.
        OpenOptions::new().write(true).create_new(true).mode(0o444).open(&path).map_err(io_err(&path, "create"))?;
        let pinned = thread::scope(|s| {
            // Runs on its own thread: unsharing moves only this thread, which exits right after.
            s.spawn(|| -> Result<(), NetnsError> {
                nix::sched::unshare(CloneFlags::CLONE_NEWNET).map_err(sys(&path, "unshare(CLONE_NEWNET)"))?;
                nix::mount::mount(Some("/proc/thread-self/ns/net"), &path, None::<&str>, MsFlags::MS_BIND, None::<&str>)
                    .map_err(sys(&path, "bind mount"))
            })
            .join()
        });
        let pinned = match pinned {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        if let Err(e) = pinned {
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        tracing::debug!(netns = %path.display(), "created network namespace");
        Ok(Netns { path })
    }

    /// An existing network namespace file (a bind mount or `/proc/<pid>/ns/net`).
    pub fn open(path: impl Into<PathBuf>) -> Result<Netns, NetnsError> {
        let path = path.into();
        if !is_netns(&path) {
            return Err(NetnsError::NotNetns(path));
        }
        Ok(Netns { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The namespace's inode: equal inodes mean the same namespace.
    #[cfg(test)]
    pub(crate) fn inode(&self) -> Result<u64, NetnsError> {
        fs::metadata(&self.path).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).map_err(io_err(&self.path, "stat"))
    }

    /// Unpins the namespace (lazy unmount) and deletes the file. Idempotent:
    /// a missing file or a file that is no longer mounted is fine.
    #[cfg(test)]
    pub(crate) fn remove(&self) -> Result<(), NetnsError> {
        remove_path(&self.path)
    }

    /// Runs `f` on a short-lived thread that has joined this namespace; only
    /// that thread changes namespace. Sockets `f` opens belong to the netns.
    /// Blocks the caller until `f` returns (a thread spawn plus `f`).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
        let file = File::open(&self.path).map_err(io_err(&self.path, "open"))?;
        let joined = thread::scope(|s| {
            s.spawn(move || -> Result<T, NetnsError> {
                nix::sched::setns(&file, CloneFlags::CLONE_NEWNET).map_err(sys(&self.path, "setns"))?;
                Ok(f())
            })
            .join()
        });
        match joined {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Sets the link `ifname` up inside the namespace, e.g. `lo` (no CNI exec needed).
    pub(crate) fn set_link_up(&self, ifname: &str) -> Result<(), NetnsError> {
        let link = |what, source| NetnsError::Link { path: self.path.clone(), ifname: ifname.into(), what, source };
        self.run(|| set_link_up(ifname))?.map_err(|(what, e)| link(what, e))
    }

    /// The interfaces of the namespace with addresses and counters.
    #[cfg(test)]
    pub(crate) fn interfaces(&self) -> Result<Vec<Interface>, NetnsError> {
        self.run(read_interfaces)?.map_err(io_err(&self.path, "read interfaces"))
    }
}

/// Whether `path` is an nsfs file of a network namespace.
pub(crate) fn is_netns(path: &Path) -> bool {
    let Ok(file) = File::open(path) else { return false };
    let nsfs = statfs::fstatfs(&file).map(|s| s.filesystem_type() == statfs::NSFS_MAGIC).unwrap_or(false);
    // SAFETY: NS_GET_NSTYPE takes no argument and only reads the fd.
    nsfs && unsafe { libc::ioctl(file.as_raw_fd(), NS_GET_NSTYPE) } == libc::CLONE_NEWNET
}

/// `_IO(0xb7, 0x3)` from linux/nsfs.h.
const NS_GET_NSTYPE: libc::Ioctl = 0xb703;

/// Removes a pinned netns at `path` (see [`Netns::remove`]).
pub(crate) fn remove_path(path: &Path) -> Result<(), NetnsError> {
    match nix::mount::umount2(path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::Error::EINVAL) | Err(nix::Error::ENOENT) => {}
        Err(e) => return Err(sys(path, "umount")(e)),
    }
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(path, "unlink")(e)),
    }
    tracing::debug!(netns = %path.display(), "removed network namespace");
    Ok(())
}

/// Makes `dir` a shared mount point, like iproute2: a bind mount of itself if it
/// is not a mount point yet, so netns mounts propagate to pods' mount namespaces.
/// Done once per directory and process: with MS_REC the kernel walks every
/// netns mount below, which grows with the number of pods.
fn ensure_shared_dir(dir: &Path) -> Result<(), NetnsError> {
    static DONE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let mut done = DONE.lock().unwrap_or_else(|p| p.into_inner());
    if done.iter().any(|d| d == dir) && dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(io_err(dir, "mkdir"))?;
    let shared = MsFlags::MS_SHARED | MsFlags::MS_REC;
    match nix::mount::mount(None::<&str>, dir, None::<&str>, shared, None::<&str>) {
        Ok(()) => {}
        Err(nix::Error::EINVAL) => {
            // Not a mount point yet.
            let bind = MsFlags::MS_BIND | MsFlags::MS_REC;
            nix::mount::mount(Some(dir), dir, None::<&str>, bind, None::<&str>)
                .map_err(sys(dir, "bind onto itself"))?;
            nix::mount::mount(None::<&str>, dir, None::<&str>, shared, None::<&str>)
                .map_err(sys(dir, "make shared"))?;
        }
        Err(e) => return Err(sys(dir, "make shared")(e)),
    }
    done.push(dir.to_path_buf());
    Ok(())
}

/// Runs in the target netns: `SIOCGIFFLAGS` then `SIOCSIFFLAGS` with `IFF_UP`.
fn set_link_up(ifname: &str) -> Result<(), (&'static str, io::Error)> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};
    let sock = socket(AddressFamily::Inet, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None)
        .map_err(|e| ("socket", io::Error::from(e)))?;
    let name = ifname.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return Err(("name", io::Error::from(io::ErrorKind::InvalidInput)));
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS fills the flags of the ifreq we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(("get flags", io::Error::last_os_error()));
    }
    // SAFETY: SIOCGIFFLAGS just initialised the flags member of the union.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads the ifreq we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(("set up", io::Error::last_os_error()));
    }
    Ok(())
}

/// Runs in the target netns: addresses from netlink (`getifaddrs`), counters
/// from `/proc/thread-self/net/dev` (which follows the calling thread's netns).
#[cfg(test)]
fn read_interfaces() -> io::Result<Vec<Interface>> {
    let dev = fs::read_to_string("/proc/thread-self/net/dev")?;
    let mut out = parse_net_dev(&dev);
    for ifa in nix::ifaddrs::getifaddrs().map_err(io::Error::from)? {
        let Some(i) = out.iter().position(|i| i.name == ifa.interface_name) else { continue };
        let iface = &mut out[i];
        iface.up |= ifa.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP);
        let addr = ifa.address.as_ref();
        let mask = ifa.netmask.as_ref();
        if let Some(v4) = addr.and_then(|a| a.as_sockaddr_in()) {
            let prefix = mask.and_then(|m| m.as_sockaddr_in()).map(|m| m.ip().to_bits().count_ones() as u8);
            iface.addrs.push((IpAddr::V4(v4.ip()), prefix.unwrap_or(32)));
        } else if let Some(v6) = addr.and_then(|a| a.as_sockaddr_in6()) {
            let prefix = mask.and_then(|m| m.as_sockaddr_in6()).map(|m| m.ip().to_bits().count_ones() as u8);
            iface.addrs.push((IpAddr::V6(v6.ip()), prefix.unwrap_or(128)));
        }
    }
    Ok(out)
}

/// Counters (no addresses) of the netns a process is in, from its
/// `/proc/<pid>/net/dev`: no setns, for stats read on every call.
/// Loopback is left out.
pub(crate) fn counters_of(pid: i32) -> io::Result<Vec<Interface>> {
    let dev = fs::read_to_string(format!("/proc/{pid}/net/dev"))?;
    Ok(parse_net_dev(&dev).into_iter().filter(|i| i.name != "lo").collect())
}

/// Parses `/proc/net/dev`: two header lines, then `name: rx(8 fields) tx(8 fields)`.
fn parse_net_dev(text: &str) -> Vec<Interface> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, counters) = line.split_once(':')?;
            let n: Vec<u64> = counters.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
            let at = |i: usize| n.get(i).copied().unwrap_or(0);
            Some(Interface {
                name: name.trim().to_string(),
                rx_bytes: at(0),
                rx_packets: at(1),
                rx_errors: at(2),
                tx_bytes: at(8),
                tx_packets: at(9),
                tx_errors: at(10),
                ..Default::default()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_net_dev() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo:     140       2    0    0    0     0          0         0      140       2    0    0    0     0       0          0\n  \
eth0: 1234 10 1 0 0 0 0 0 5678 20 2 0 0 0 0 0\n";
        let ifs = parse_net_dev(text);
        assert_eq!(ifs.len(), 2);
        assert_eq!((ifs[0].name.as_str(), ifs[0].rx_bytes, ifs[0].tx_packets), ("lo", 140, 2));
        assert_eq!((ifs[1].name.as_str(), ifs[1].rx_errors, ifs[1].tx_bytes, ifs[1].tx_errors), ("eth0", 1, 5678, 2));
    }

    #[test]
    fn counters_of_this_process_leave_loopback_out() {
        let ifs = counters_of(std::process::id() as i32).expect("own net/dev");
        assert!(ifs.iter().all(|i| i.name != "lo"), "{ifs:?}");
    }

    #[test]
    fn names() {
        let n = Netns::random_name();
        let groups: Vec<_> = n.trim_start_matches("cni-").split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{n}");
        for bad in ["", "a/b", ".."] {
            assert!(matches!(Netns::create_in(Path::new("/nonexistent"), bad), Err(NetnsError::InvalidName(_))));
        }
        assert!(!is_netns(Path::new("/etc/hostname")));
        assert!(is_netns(Path::new("/proc/self/ns/net")));
        assert!(!is_netns(Path::new("/proc/self/ns/mnt")));
    }
}
