//! Memory figures read from /proc: a CRI daemon's RSS (the daemon found as
//! the peer of a connection to its socket, so any runtime can be measured),
//! and the processes that appeared on the host while pods were started.

use std::collections::BTreeSet;
use std::os::unix::net::UnixStream;
use std::path::Path;

/// The pid of the process listening on a unix socket (SO_PEERCRED).
pub(crate) fn server_pid(socket: &Path) -> std::io::Result<i32> {
    let stream = UnixStream::connect(socket)?;
    let creds = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(std::io::Error::from)?;
    Ok(creds.pid())
}

/// A `kB` field of a /proc file, in KiB.
fn kib_field(path: &Path, field: &str) -> Option<u64> {
    crate::base::fsutil::kib_field(&std::fs::read_to_string(path).ok()?, field)
}

/// How long a daemon is left without calls before its RSS is read: the
/// figure is of an idle daemon, after whatever it does once calls stop
/// (rktlet trims its heap after half a second of quiet; Go's runtime
/// returns memory on its own schedule). The same wait for every endpoint.
pub(crate) const SETTLE: std::time::Duration = std::time::Duration::from_millis(1500);

/// Resident set size of `pid`, MiB.
pub(crate) fn rss_mib(pid: i32) -> Option<f64> {
    kib_field(&Path::new("/proc").join(pid.to_string()).join("status"), "VmRSS:").map(|k| k as f64 / 1024.0)
}

/// Proportional set size of `pid`, KiB (shared pages divided among their users).
pub(crate) fn pss_kib(pid: i32) -> Option<u64> {
    kib_field(&Path::new("/proc").join(pid.to_string()).join("smaps_rollup"), "Pss:")
}

/// Every process on the host now.
pub(crate) fn pids() -> BTreeSet<i32> {
    std::fs::read_dir("/proc")
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

/// Processes present now that were not in `before` (kernel threads, which
/// have no memory of their own, excluded), and their summed PSS in MiB.
pub(crate) fn new_processes(before: &BTreeSet<i32>) -> (usize, f64) {
    let mut count = 0;
    let mut kib = 0;
    for pid in pids().difference(before) {
        // kernel threads have an empty cmdline and no smaps_rollup figures
        if let Some(pss) = pss_kib(*pid) {
            count += 1;
            kib += pss;
        }
    }
    (count, kib as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_rss_and_a_new_child_are_seen() {
        let me = std::process::id() as i32;
        assert!(rss_mib(me).is_some_and(|m| m > 0.0));
        let before = pids();
        let mut child = std::process::Command::new("sleep").arg("5").spawn().expect("spawn sleep");
        // the child's smaps_rollup is readable once it has exec'd
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (count, pss) = new_processes(&before);
        let _ = child.kill();
        let _ = child.wait();
        assert!(count >= 1, "the child was not seen");
        assert!(pss > 0.0);
    }

    #[test]
    fn peer_of_a_socket_is_its_listener() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        assert_eq!(server_pid(&path).expect("peer"), std::process::id() as i32);
    }
}
