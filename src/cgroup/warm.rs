//! Keeps the kernel's cgroup-migration lock open while pods and containers
//! start, so that the migrations of one start do not each wait for an RCU
//! grace period.
//!
//! Every cgroup migration takes `cgroup_threadgroup_rwsem` for writing. The
//! first writer after a quiet spell waits for an RCU grace period
//! (`rcu_sync_enter`: about 8 ms on an idle 2-CPU node, more when busy);
//! writers within about one grace period of the last one do not. A cold pod
//! start on a cgroup v1 node has four such migrations 5-15 ms apart (the
//! sandbox placed by the daemon, nspawn's `payload/` and `supervisor/`, the
//! pod's systemd into `init.scope`), and a container start two (the pod's
//! systemd places the unit's process, the daemon then its v1 controllers):
//! each paid a grace period when the one before it had gone quiet. While
//! [`hold`] asks for it, a thread of the daemon writes its own thread id
//! into the v1 cgroup it is in already, every [`PERIOD`]: a migration that
//! moves nothing and keeps the lock in its slow mode, as the kernel's
//! `favordynmods` cgroup mount option does for good. Meanwhile forks and
//! exits on the node take that lock's slow path (one shared atomic count),
//! the cost `favordynmods` accepts all the time. Nodes with no v1
//! hierarchy: nothing is done (there the daemon moves no process itself).

use std::fs;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often the lock is taken while held open: well inside a grace period.
pub(crate) const PERIOD: Duration = Duration::from_millis(3);

/// How long a pod start keeps the lock open (its boot's migrations are
/// within the first 50 ms; longer on a busy node).
pub(crate) const POD_START: Duration = Duration::from_millis(100);

/// How long a container start keeps it open.
pub(crate) const CONTAINER_START: Duration = Duration::from_millis(40);

/// How long a container's creation keeps it open: kubelet starts a
/// container right after creating it, so the first migration's grace period
/// is waited for while the container is created (by this thread, not the
/// start, whose first step takes the cgroup lock the waiting write holds).
pub(crate) const CONTAINER_CREATE: Duration = Duration::from_millis(100);

/// `RKTLET_CGROUP_WARM=0` in the daemon's environment turns this off.
pub(crate) const OFF_ENV: &str = "RKTLET_CGROUP_WARM";

struct Warmer {
    until: Mutex<Option<Instant>>,
    wake: Condvar,
}

/// Keeps the migration lock open for `d` from now (longer if already asked).
pub(crate) fn hold(d: Duration) {
    let Some(w) = warmer() else { return };
    let Ok(mut until) = w.until.lock() else { return };
    let want = Instant::now() + d;
    if until.is_none_or(|u| u < want) {
        *until = Some(want);
        w.wake.notify_one();
    }
}

fn warmer() -> Option<&'static Warmer> {
    static WARMER: OnceLock<Option<&'static Warmer>> = OnceLock::new();
    *WARMER.get_or_init(|| {
        // an operator's switch, and the A/B of `rktlet bench`
        if std::env::var_os(OFF_ENV).is_some_and(|v| v == "0") {
            return None;
        }
        // the node keeps the lock in its slow mode for good
        if fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| super::favors_dynmods(&m)) {
            tracing::debug!("cgroups mounted with favordynmods: no cgroup warm thread");
            return None;
        }
        own_tasks_file()?;
        let w: &'static Warmer = Box::leak(Box::new(Warmer { until: Mutex::new(None), wake: Condvar::new() }));
        match std::thread::Builder::new().name("cgroup-warm".into()).spawn(move || run(w)) {
            Ok(_) => Some(w),
            Err(e) => {
                tracing::debug!(error = %e, "no cgroup warm thread");
                None
            }
        }
    })
}

fn run(w: &Warmer) {
    // SAFETY: gettid(2) takes no arguments and cannot fail.
    let tid = unsafe { libc::gettid() }.to_string();
    // the tasks file stays open while a hold lasts: a wake-up is then one
    // write (a cgroup file takes each write whole, whatever its offset).
    // It is found again at each new hold and after a failed write: the
    // node's systemd may have moved the daemon meanwhile, and a write to
    // the old cgroup's file would move this thread back there
    let mut tasks: Option<fs::File> = None;
    loop {
        {
            let Ok(mut until) = w.until.lock() else { return };
            loop {
                match *until {
                    Some(u) if u > Instant::now() => break,
                    _ => {
                        *until = None;
                        tasks = None;
                        until = match w.wake.wait(until) {
                            Ok(g) => g,
                            Err(_) => return,
                        };
                    }
                }
            }
        }
        // the cgroup this thread is in (as of the hold's start), so that the write moves nothing
        if tasks.is_none() {
            tasks = own_tasks_file().and_then(|f| fs::OpenOptions::new().write(true).open(f).ok());
        }
        if let Some(f) = &mut tasks
            && let Err(e) = std::io::Write::write_all(f, tid.as_bytes())
        {
            tracing::debug!(error = %e, "cgroup warm write");
            tasks = None;
        }
        std::thread::sleep(PERIOD);
    }
}

/// The `tasks` file of this thread's cgroup in the first mounted v1
/// hierarchy (a thread id written there moves only that thread).
fn own_tasks_file() -> Option<PathBuf> {
    let layout = super::Layout::cached().ok()?;
    let own = fs::read_to_string("/proc/thread-self/cgroup").ok()?;
    layout.cgroups_of(&own).into_iter().filter(|(h, _)| h.id != 0).find_map(|(_, dir)| {
        let file = dir.join("tasks");
        file.exists().then_some(file)
    })
}

/// How long this thread's move into its own v1 cgroup takes after `quiet`
/// without one (the median of three): about an RCU grace period where the
/// migration lock went back to its fast mode meanwhile, microseconds where
/// the node keeps it slow (`favordynmods`; on Linux 6.18 also once it was
/// ever turned on, as seen here). None without a v1 hierarchy. For the
/// context of benchmark figures.
pub(crate) fn probe_after_quiet(quiet: Duration) -> Option<Duration> {
    let tasks = own_tasks_file()?;
    // SAFETY: gettid(2) takes no arguments and cannot fail.
    let tid = unsafe { libc::gettid() }.to_string();
    let mut took: Vec<Duration> = (0..3)
        .map(|_| {
            std::thread::sleep(quiet);
            let t = Instant::now();
            fs::write(&tasks, &tid).map(|()| t.elapsed())
        })
        .collect::<std::io::Result<_>>()
        .ok()?;
    took.sort();
    took.get(1).copied()
}

/// Whether the warm thread runs on this node.
#[cfg(test)]
pub(crate) fn available() -> bool {
    warmer().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holding_moves_nothing() {
        let before = fs::read_to_string("/proc/self/cgroup").expect("cgroup");
        hold(Duration::from_millis(30));
        std::thread::sleep(Duration::from_millis(50));
        hold(Duration::from_millis(10));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(fs::read_to_string("/proc/self/cgroup").expect("cgroup"), before);
        if !available() {
            crate::base::skipped(
                "holding_moves_nothing",
                "no mounted cgroup v1 hierarchy, or favordynmods: nothing to keep open",
            );
        }
    }

    #[test]
    fn the_probe_moves_nothing() {
        let before = fs::read_to_string("/proc/thread-self/cgroup").expect("cgroup");
        let took = probe_after_quiet(Duration::from_millis(5));
        assert_eq!(fs::read_to_string("/proc/thread-self/cgroup").expect("cgroup"), before);
        match took {
            Some(t) => assert!(t > Duration::ZERO),
            None => crate::base::skipped("the_probe_moves_nothing", "no mounted cgroup v1 hierarchy to probe"),
        }
    }
}
