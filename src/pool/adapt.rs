//! Host-side steps that turn a booted pod into the pod a request asked for,
//! each cheap and idempotent (pod-boot-fast.md §5.2: 0.1-0.6 ms apiece):
//! its hostname, its v1 controller cgroups, its CPU priority and its
//! creation time. Also the controller move of a pod that is still booting,
//! which the cold start shares.
//!
//! Runs in: the daemon, on blocking threads.

use crate::cgroup::{Layout, pod::PodCgroup};
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::SystemTime;
use uuid::Uuid;

/// Moves every process of a pod (found in its tracking cgroup) into its v1
/// controller cgroups below `parent`, repeating until no newcomer is left
/// behind (processes forked later inherit the controllers of their parent).
/// For a pod in a systemd unit (`systemd_unit`), the unit's cgroup below the
/// `parent` slice: systemd has placed it in the controllers it manages
/// (Delegate=yes), this adds those it leaves alone (cpuset, freezer,
/// hugetlb, ...), as runc's systemd driver joins them.
pub fn adopt_controllers(parent: &str, uuid: Uuid, systemd_unit: bool) -> io::Result<()> {
    let layout = Layout::cached()?;
    if layout.v1_controllers().next().is_none() {
        // pure v2: the pod's one cgroup is already its controllers' cgroup
        return Ok(());
    }
    let sub = crate::cgroup::pod::subcgroup(parent, &uuid.to_string(), systemd_unit).map_err(io::Error::other)?;
    move_controllers(layout, &sub, &sub)
}

/// Creates the pod's controller cgroups at `to` and moves into them every
/// process of the pod's tracking cgroup at `tracking`.
pub fn move_controllers(layout: &Layout, tracking: &str, to: &str) -> io::Result<()> {
    let tracking = PodCgroup::tracking(layout, tracking);
    let controllers = PodCgroup::controllers(layout, to);
    controllers.create()?;
    let mut moved: Vec<i32> = Vec::new();
    for _ in 0..20 {
        let pids: Vec<i32> = tracking.pids().into_iter().filter(|p| !moved.contains(p)).collect();
        if pids.is_empty() {
            break;
        }
        controllers.adopt(&pids)?;
        moved.extend(pids);
    }
    Ok(())
}

/// Moves a pool pod's controller cgroups from the pool to `to` (its tracking
/// cgroup stays) and removes the emptied pool ones.
pub fn move_pod(layout: &Layout, pool_sub: &str, to: &str) -> io::Result<()> {
    move_controllers(layout, pool_sub, to)?;
    PodCgroup::controllers(layout, pool_sub).remove()
}

/// Sets the hostname of the UTS namespace `pid` is in. A fresh thread
/// joins that namespace and ends with it (UTS is per thread, so the
/// daemon's other threads are untouched).
pub fn set_hostname(pid: i32, name: &str) -> io::Result<()> {
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
pub fn renice(pids: &[i32]) -> io::Result<()> {
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
pub fn set_created(pod_dir: &Path, now: SystemTime) -> io::Result<()> {
    fs::File::options().write(true).open(pod_dir.join(crate::pod::CREATED_FILE))?.set_modified(now)
}

/// CPU time the processes of a tracking cgroup used so far (cgroup2's
/// `cpu.stat` exists without the cpu controller), in microseconds.
pub fn cpu_micros(layout: &Layout, tracking: &str) -> Option<u64> {
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
        fs::write(t.path().join(crate::pod::CREATED_FILE), b"").expect("w");
        let when = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_900_000_000);
        set_created(t.path(), when).expect("set");
        let m = fs::metadata(t.path().join(crate::pod::CREATED_FILE)).expect("meta");
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
