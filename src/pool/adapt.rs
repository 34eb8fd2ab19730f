//! Host-side steps that turn a booted pod into the pod a request asked for,
//! each cheap and idempotent (pod-boot-fast.md §5.2: 0.1-0.6 ms apiece):
//! its hostname, its v1 controller cgroups, its CPU priority and its
//! creation time. (The controller move of a pod that is still booting,
//! which the cold start shares, is `cgroup::pod::adopt_controllers`.)
//!
//! Runs in: the daemon, on blocking threads.

use crate::cgroup::{Layout, pod::PodCgroup, pod::move_controllers};
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::SystemTime;

/// Moves a pool pod's controller cgroups from the pool to `to` (its tracking
/// cgroup stays) and removes the emptied pool ones.
pub(crate) fn move_pod(layout: &Layout, pool_sub: &str, to: &str) -> io::Result<()> {
    move_controllers(layout, pool_sub, to)?;
    PodCgroup::controllers(layout, pool_sub).remove()
}

/// Sets the hostname of the UTS namespace `pid` is in. A fresh thread
/// joins that namespace and ends with it (UTS is per thread, so the
/// daemon's other threads are untouched).
pub(crate) fn set_hostname(pid: i32, name: &str) -> io::Result<()> {
    let ns = fs::File::open(format!("/proc/{pid}/ns/uts"))?;
    let name = name.to_string();
    std::thread::Builder::new()
        .name("set-hostname".into())
        .spawn(move || -> io::Result<()> {
            // SAFETY: setns(2) on an open namespace fd; it changes only this thread, which exits next.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWUTS) } < 0 {
                return Err(io::Error::last_os_error());
            }
            nix::unistd::sethostname(&name).map_err(io::Error::from)
        })?
        .join()
        .map_err(|_| io::Error::other("hostname thread panicked"))?
}

/// Resets every thread of `pids` to nice 0 (a pool pod booted at a lower
/// priority; apps started later inherit the pod systemd's value).
pub(crate) fn renice(pids: &[i32]) -> io::Result<()> {
    for pid in pids {
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for tid in tasks.flatten().filter_map(|t| t.file_name().to_str().and_then(|s| s.parse::<u32>().ok())) {
            // SAFETY: setpriority(2) on one thread id; no memory is passed.
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 0) } < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::ESRCH) {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Makes `now` the pod's creation time (`pod-created`'s mtime): a taken pool
/// pod was created, as far as anyone can tell, when the request was served.
pub(crate) fn set_created(pod_dir: &Path, now: SystemTime) -> io::Result<()> {
    fs::File::options().write(true).open(pod_dir.join(rkt::pod::CREATED_FILE))?.set_modified(now)
}

/// CPU time the processes of a tracking cgroup used so far (cgroup2's
/// `cpu.stat` exists without the cpu controller), in microseconds.
pub(crate) fn cpu_micros(layout: &Layout, tracking: &str) -> Option<u64> {
    let unified = layout.hierarchies.iter().find(|h| h.is_unified())?.mount.as_ref()?;
    let text = fs::read_to_string(unified.join(tracking).join("cpu.stat")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("usage_usec ")).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creation_time_is_set() {
        let t = tempfile::tempdir().expect("tempdir");
        fs::write(t.path().join(rkt::pod::CREATED_FILE), b"").expect("w");
        let when = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_900_000_000);
        set_created(t.path(), when).expect("set");
        let m = fs::metadata(t.path().join(rkt::pod::CREATED_FILE)).expect("meta");
        assert_eq!(m.modified().expect("mtime"), when);
        assert!(set_created(&t.path().join("missing"), when).is_err());
    }

    #[test]
    fn renice_resets_a_lowered_child() {
        let mut child = std::process::Command::new("sleep").arg("10").spawn().expect("sleep");
        let pid = child.id();
        // SAFETY: setpriority(2) on our own child.
        assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, pid, 7) }, 0);
        renice(&[pid as i32]).expect("renice");
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        // field 19 is nice; fields after the ")" of comm start at 3
        let nice = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().nth(16).unwrap_or("").to_string());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(nice.as_deref(), Some("0"));
    }
}
