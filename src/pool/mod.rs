//! The pod pool: pods booted ahead of any request, so that RunPodSandbox
//! adapts one (hostname, DNS files, cgroup move, CNI ADD: about 10 ms)
//! instead of booting one (about 50 ms). Reference: pod-boot-fast.md §3-5.
//!
//! A pool pod is an ordinary rkt pod in `run/` booted with the cold
//! configuration and a pre-made network namespace, but without CNI, under
//! the cgroup parent [`POOL_PARENT`], at a low CPU priority, and with the pod
//! annotation [`POOL_ANNOTATION`] (its value: what it was booted with, see
//! `sandbox::pool::boot::fingerprint`). That annotation is what keeps it out of ListPodSandbox,
//! `rktlet list` and gc, and what a restarted daemon finds it by. Taking a
//! pod rewrites its manifest without the annotation, as the last step, so a
//! crash in the middle of an adaptation leaves a pool pod that is discarded
//! on restart (CNI DEL included), never a half-made CRI pod.
//!
//! Runs in: the daemon. One refill task boots one pod at a time after a
//! short pause (requests go first; the boot runs at nice 10); takes are a
//! mutex pop. The pool only works where the daemon places pods in cgroups
//! itself and the host has v1 controller hierarchies: a pool pod's systemd
//! cannot leave its tracking cgroup (unified, `name=systemd`), so it keeps
//! that one and only its v1 controller cgroups move to the requested parent.

pub(crate) mod adapt;

use serde::Serialize;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use uuid::Uuid;

/// Pod annotation of a pool pod not taken yet; its value is the
/// `sandbox::pool::boot::fingerprint` of the daemon that booted it.
pub(crate) const POOL_ANNOTATION: &str = "rktlet.io/pool";
/// File in a pool pod's directory while a take adapts it (a crash then
/// leaves a pod that is neither a pool pod nor the requested one).
pub(crate) const TAKING_FILE: &str = "pool-taking";
/// cgroup parent of pool pods while they wait.
pub(crate) const POOL_PARENT: &str = "rktlet-pool";
/// Nice value of a pool pod while it boots and waits.
pub(crate) const POOL_NICE: i32 = 10;

/// A pool pod's cgroup below the hierarchies' roots while it waits.
pub(crate) fn subcgroup(uuid: Uuid) -> Result<String, String> {
    crate::cgroup::pod::subcgroup(POOL_PARENT, &uuid.to_string(), false)
}

/// A booted pool pod, ready to be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub uuid: Uuid,
    /// Its network namespace (made before boot, no interface but `lo`).
    pub netns: PathBuf,
}

#[derive(Debug, Default)]
struct Members {
    ready: VecDeque<Member>,
    booting: usize,
    closed: bool,
}

/// Counters of what the pool did, since the daemon started.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) takes: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) discarded: AtomicU64,
    pub(crate) boots: AtomicU64,
    pub(crate) boot_failures: AtomicU64,
    pub(crate) boot_micros: AtomicU64,
    pub(crate) boot_cpu_micros: AtomicU64,
}

/// The pool's state; the refill task and RunPodSandbox share it.
#[derive(Debug)]
pub(crate) struct Pool {
    size: usize,
    /// Why the pool is off although a size was configured.
    pub(crate) disabled: Option<String>,
    members: Mutex<Members>,
    /// Wakes the refill (a take, the close).
    pub(crate) wake: tokio::sync::Notify,
    pub(crate) counters: Counters,
}

/// Memory of the idle pool pods, summed over their processes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct IdleMemory {
    pub pods: usize,
    pub processes: usize,
    pub rss_kib: u64,
    pub pss_kib: u64,
    /// Pages no other process shares: what removing the pods would free.
    pub private_kib: u64,
}

/// What `Status` (verbose) and the metrics report about the pool.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PoolInfo {
    pub size: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled: Option<String>,
    pub ready: usize,
    pub booting: usize,
    pub takes: u64,
    /// Requests that found the pool empty and cold-started.
    pub misses: u64,
    /// Pool pods found dead or failing to adapt, thrown away.
    pub discarded: u64,
    pub boots: u64,
    pub boot_failures: u64,
    /// Mean boot time of a pool pod (launch to ready), ms.
    pub boot_ms_mean: f64,
    /// Mean CPU time one pool boot used (nspawn and the pod's systemd), ms.
    pub boot_cpu_ms_mean: f64,
}

impl Pool {
    /// A pool of `size` pods, or an empty one with the reason when this
    /// host or mode cannot use one.
    pub(crate) fn new(size: usize, rt_config: &crate::config::Config, host: &crate::stage1::host::Host) -> Self {
        let disabled = if size == 0 {
            None
        } else if rt_config.exec_mode {
            Some("exec mode starts every pod through the CLI".to_string())
        } else if host.pid1_is_systemd {
            Some("pods are placed by the node's systemd on this host; a pool pod cannot change units".to_string())
        } else {
            match crate::cgroup::Layout::cached() {
                Ok(l) if !crate::cgroup::pod::PodCgroup::controllers(l, "").dirs.is_empty() => None,
                Ok(_) => Some("no cgroup v1 controller hierarchy: a pool pod could not be moved".to_string()),
                Err(e) => Some(format!("cannot read the cgroup layout: {e}")),
            }
        };
        Pool {
            size: if disabled.is_some() { 0 } else { size },
            disabled,
            members: Mutex::new(Members::default()),
            wake: tokio::sync::Notify::new(),
            counters: Counters::default(),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.size > 0
    }

    /// Takes the oldest ready pod (and wakes the refill), or counts a miss.
    pub(crate) fn take(&self) -> Option<Member> {
        if !self.enabled() {
            return None;
        }
        let taken = self.members.lock().ok().and_then(|mut m| if m.closed { None } else { m.ready.pop_front() });
        let counter = if taken.is_some() { &self.counters.takes } else { &self.counters.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        self.wake.notify_one();
        taken
    }

    /// Counts a taken pod that could not be used (dead, or its adaptation failed).
    pub(crate) fn discarded(&self) {
        self.counters.discarded.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn info(&self) -> PoolInfo {
        let (ready, booting) = self.members.lock().map(|m| (m.ready.len(), m.booting)).unwrap_or_default();
        let c = &self.counters;
        let boots = c.boots.load(Ordering::Relaxed);
        let mean = |total: &AtomicU64| {
            if boots == 0 { 0.0 } else { total.load(Ordering::Relaxed) as f64 / boots as f64 / 1000.0 }
        };
        PoolInfo {
            size: self.size,
            disabled: self.disabled.clone(),
            ready,
            booting,
            takes: c.takes.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            discarded: c.discarded.load(Ordering::Relaxed),
            boots,
            boot_failures: c.boot_failures.load(Ordering::Relaxed),
            boot_ms_mean: mean(&c.boot_micros),
            boot_cpu_ms_mean: mean(&c.boot_cpu_micros),
        }
    }

    /// What the idle pool pods hold in memory now (their processes'
    /// `smaps_rollup`: nspawn, the pod's systemd, the log writer).
    pub(crate) fn idle_memory(&self) -> IdleMemory {
        let uuids: Vec<Uuid> =
            self.members.lock().map(|m| m.ready.iter().map(|x| x.uuid).collect()).unwrap_or_default();
        let mut mem = IdleMemory { pods: uuids.len(), ..Default::default() };
        let Ok(layout) = crate::cgroup::Layout::cached() else { return mem };
        for uuid in uuids {
            let Ok(sub) = crate::cgroup::pod::subcgroup(POOL_PARENT, &uuid.to_string(), false) else { continue };
            for pid in crate::cgroup::pod::PodCgroup::tracking(layout, &sub).pids() {
                let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) else { continue };
                let kib = |f: &str| crate::base::fsutil::kib_field(&text, f).unwrap_or(0);
                mem.processes += 1;
                mem.rss_kib += kib("Rss:");
                mem.pss_kib += kib("Pss:");
                mem.private_kib += kib("Private_Clean:") + kib("Private_Dirty:");
            }
        }
        mem
    }

    /// Room for one more boot: reserves it.
    pub(crate) fn reserve_boot(&self) -> Option<bool> {
        let mut m = self.members.lock().ok()?;
        if m.closed {
            return None;
        }
        if m.ready.len() + m.booting >= self.size {
            return Some(false);
        }
        m.booting += 1;
        Some(true)
    }

    /// Ends a reserved boot; returns the member back if the pool closed meanwhile.
    pub(crate) fn boot_done(&self, member: Option<Member>) -> Option<Member> {
        let Ok(mut m) = self.members.lock() else { return member };
        m.booting = m.booting.saturating_sub(1);
        match member {
            Some(x) if !m.closed && m.ready.len() < self.size => {
                m.ready.push_back(x);
                None
            }
            other => other,
        }
    }

    /// Stops refilling and hands out every ready member (for draining).
    pub(crate) fn close(&self) -> Vec<Member> {
        let drained = self.members.lock().map(|mut m| {
            m.closed = true;
            m.ready.drain(..).collect()
        });
        self.wake.notify_one();
        drained.unwrap_or_default()
    }
}

impl Pool {
    /// Adds an already-booted member if there is room; hands it back otherwise.
    pub(crate) fn boot_reserved_or_full(&self, member: Member) -> Option<Member> {
        match self.reserve_boot() {
            Some(true) => self.boot_done(Some(member)),
            _ => Some(member),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(size: usize) -> Pool {
        Pool {
            size,
            disabled: None,
            members: Mutex::new(Members::default()),
            wake: tokio::sync::Notify::new(),
            counters: Counters::default(),
        }
    }

    fn member() -> Member {
        Member { uuid: Uuid::new_v4(), netns: "/var/run/netns/x".into() }
    }

    #[test]
    fn boots_up_to_the_size_and_takes_in_order() {
        let p = pool(2);
        assert_eq!(p.reserve_boot(), Some(true));
        assert_eq!(p.reserve_boot(), Some(true));
        assert_eq!(p.reserve_boot(), Some(false), "two boots fill a pool of two");
        let (a, b) = (member(), member());
        assert_eq!(p.boot_done(Some(a.clone())), None);
        assert_eq!(p.boot_done(Some(b.clone())), None);
        assert_eq!(p.info().ready, 2);
        assert_eq!(p.take(), Some(a));
        assert_eq!(p.take(), Some(b));
        assert_eq!(p.take(), None);
        let info = p.info();
        assert_eq!((info.takes, info.misses, info.ready), (2, 1, 0));
    }

    #[test]
    fn a_closed_pool_hands_back_what_finishes_booting() {
        let p = pool(1);
        assert_eq!(p.reserve_boot(), Some(true));
        assert!(p.close().is_empty());
        let m = member();
        assert_eq!(p.boot_done(Some(m.clone())), Some(m), "the caller must remove it");
        assert_eq!(p.reserve_boot(), None, "no boots after close");
        assert_eq!(p.take(), None);
    }

    #[test]
    fn readopted_members_do_not_overfill() {
        let p = pool(1);
        assert_eq!(p.boot_reserved_or_full(member()), None);
        let extra = member();
        assert_eq!(p.boot_reserved_or_full(extra.clone()), Some(extra));
        assert_eq!(p.info().ready, 1);
    }

    #[test]
    fn a_pool_of_zero_never_hands_out_pods() {
        let p = pool(0);
        assert!(!p.enabled());
        assert_eq!(p.take(), None);
        assert_eq!(p.info().misses, 0, "a disabled pool counts no misses");
    }
}
