//! Limits on the unified hierarchy (cgroup v2 with its controllers: pure v2
//! hosts), written with cgroups-rs's controllers.
//!
//! A process is in exactly one v2 cgroup, so an app's cgroup is its unit's
//! cgroup in the pod's systemd tree, `<pod>/payload/system.slice/<app>.service`:
//! the processes are already there, and systemd keeps tracking them. Only a
//! cgroup whose parent lists a controller in `cgroup.subtree_control` has that
//! controller's files, and a cgroup that holds processes cannot enable any
//! for its children ("no internal processes"): the pod's own cgroup only
//! holds the `payload` (the pod's systemd) and `supervisor` (nspawn and the
//! pod's log writer) cgroups, and controllers are enabled down every level.
//!
//! What cgroups-rs 0.5 does not cover, done here in a few lines: it finds the
//! unified hierarchy only at `/sys/fs/cgroup` (its `V2` hierarchy and its
//! controller list are fixed there), its cgroup creation enables controllers
//! from the root down but ignores every error (EBUSY of a cgroup with
//! processes goes unseen), it writes io weight only to `io.bfq.weight`, and
//! it reads no `memory.events` on v2 (its OOM counters are v1 ones). So the
//! directories and `cgroup.subtree_control` are ours, the controller files
//! go through its controllers constructed at the directory, and
//! `memory.events` and the `unified` map are written and read here.

use super::limits::Limits;
use cgroups_rs::fs::cpu::CpuController;
use cgroups_rs::fs::cpuset::CpuSetController;
use cgroups_rs::fs::hugetlb::HugeTlbController;
use cgroups_rs::fs::memory::MemController;
use cgroups_rs::fs::pid::PidController;
use cgroups_rs::fs::{MaxValue, error::Error as CgError};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub(crate) enum V2Error {
    #[error("{dir}: enabling controller {controller}: {source}")]
    Enable { dir: PathBuf, controller: String, source: io::Error },
    #[error(
        "{dir} holds processes, so it cannot pass controllers to its children (cgroup v2 \"no internal processes\")"
    )]
    InternalProcesses { dir: PathBuf },
    #[error("{dir}: {what}: {source}")]
    Controller { dir: PathBuf, what: String, source: CgError },
    #[error("{dir}/{file}: {source}")]
    File { dir: PathBuf, file: String, source: io::Error },
    #[error("controller {controller} is not available in {dir} (the host does not delegate it)")]
    Missing { dir: PathBuf, controller: String },
}

/// The controllers rktlet enables for pods and apps, when the host has them.
pub(crate) const CONTROLLERS: [&str; 6] = ["cpuset", "cpu", "io", "memory", "hugetlb", "pids"];

/// Controllers listed in a cgroup's `cgroup.controllers` (what it may use).
pub(crate) fn available(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join("cgroup.controllers"))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn enabled(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join("cgroup.subtree_control"))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Enables [`CONTROLLERS`] (those available) in `cgroup.subtree_control` of
/// `root` and of every directory below it on the way to `rel` (`rel` itself
/// included when `including_last`), so that the cgroup at `rel` (or its
/// children) has their files. Directories must exist.
pub(crate) fn enable_down(root: &Path, rel: &str, including_last: bool) -> Result<(), V2Error> {
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    let mut dirs = vec![root.to_path_buf()];
    let mut dir = root.to_path_buf();
    let last = if including_last { parts.len() } else { parts.len().saturating_sub(1) };
    for p in &parts[..last] {
        dir.push(p);
        dirs.push(dir.clone());
    }
    for d in dirs {
        enable_in(&d)?;
    }
    Ok(())
}

/// Enables in one directory every wanted controller it has and has not enabled yet.
pub(crate) fn enable_in(dir: &Path) -> Result<(), V2Error> {
    let have = available(dir);
    let on = enabled(dir);
    for c in CONTROLLERS.iter().filter(|c| have.iter().any(|h| h == *c) && !on.iter().any(|o| o == *c)) {
        match fs::write(dir.join("cgroup.subtree_control"), format!("+{c}")) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                return Err(V2Error::InternalProcesses { dir: dir.to_path_buf() });
            }
            Err(source) => return Err(V2Error::Enable { dir: dir.to_path_buf(), controller: c.to_string(), source }),
        }
    }
    Ok(())
}

/// CPU shares (v1, 2..262144) as a v2 weight (1..10000), as kubelet and runc convert them.
pub fn weight_from_shares(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    let shares = shares.clamp(2, 262_144);
    1 + ((shares - 2) * 9999) / 262_142
}

fn ctl<T>(dir: &Path, what: &str, r: Result<T, CgError>) -> Result<T, V2Error> {
    r.map_err(|source| V2Error::Controller { dir: dir.to_path_buf(), what: what.to_string(), source })
}

fn has(dir: &Path, file: &str) -> bool {
    dir.join(file).exists()
}

fn need(dir: &Path, controller: &str, file: &str) -> Result<(), V2Error> {
    if has(dir, file) {
        Ok(())
    } else {
        Err(V2Error::Missing { dir: dir.to_path_buf(), controller: controller.to_string() })
    }
}

/// Writes `limits` into the cgroup at `dir` (its controller files must be
/// there: see [`enable_down`]). Limits not given are reset to none, so an
/// update that drops one takes it off; the `unified` entries go last and win,
/// and a file they set is not written from the fields first (the app would
/// see it reset meanwhile: the unit started with the unified value).
pub(crate) fn apply(dir: &Path, limits: &Limits) -> Result<(), V2Error> {
    let from_fields = |file: &str| !limits.unified.contains_key(file);
    let mem = MemController::new(dir.to_path_buf(), PathBuf::new(), true);
    if from_fields("memory.max") && (limits.memory_bytes.is_some() || has(dir, "memory.max")) {
        need(dir, "memory", "memory.max")?;
        ctl(dir, "memory.max", mem.set_limit(limits.memory_bytes.filter(|m| *m > 0).unwrap_or(-1)))?;
    }
    if let Some(swap) = limits.memory_swap_bytes.filter(|_| from_fields("memory.swap.max")) {
        need(dir, "memory", "memory.swap.max")?;
        // CRI's figure is memory plus swap (as v1's memsw), v2 limits swap alone
        let swap_only = match limits.memory_bytes {
            _ if swap < 0 => -1,
            Some(m) if m > 0 => (swap - m).max(0),
            _ => swap,
        };
        ctl(dir, "memory.swap.max", mem.set_memswap_limit(swap_only))?;
    }
    let cpu = CpuController::new(dir.to_path_buf(), PathBuf::new(), true);
    if let Some(shares) = limits.cpu_shares.filter(|s| *s > 0 && from_fields("cpu.weight")) {
        need(dir, "cpu", "cpu.weight")?;
        ctl(dir, "cpu.weight", cpu.set_shares(weight_from_shares(shares)))?;
    }
    if from_fields("cpu.max")
        && (limits.cpu_quota_us.is_some() || limits.cpu_period_us.is_some() || has(dir, "cpu.max"))
    {
        need(dir, "cpu", "cpu.max")?;
        let quota = limits.cpu_quota_us.filter(|q| *q > 0).unwrap_or(-1);
        let period = limits.cpu_period_us.filter(|p| *p > 0).unwrap_or(100_000);
        ctl(dir, "cpu.max", cpu.set_cfs_quota_and_period(Some(quota), Some(period)))?;
    }
    let cpuset = CpuSetController::new(dir.to_path_buf(), PathBuf::new(), true);
    if let Some(cpus) = limits.cpuset_cpus.as_deref().filter(|c| !c.is_empty()) {
        need(dir, "cpuset", "cpuset.cpus")?;
        ctl(dir, "cpuset.cpus", cpuset.set_cpus(cpus))?;
    }
    if let Some(mems) = limits.cpuset_mems.as_deref().filter(|c| !c.is_empty()) {
        need(dir, "cpuset", "cpuset.mems")?;
        ctl(dir, "cpuset.mems", cpuset.set_mems(mems))?;
    }
    let pids = PidController::new(dir.to_path_buf(), PathBuf::new(), true);
    if from_fields("pids.max") && (limits.pids.is_some() || has(dir, "pids.max")) {
        need(dir, "pids", "pids.max")?;
        let max = limits.pids.filter(|p| *p > 0).map_or(MaxValue::Max, MaxValue::Value);
        ctl(dir, "pids.max", pids.set_pid_max(max))?;
    }
    if !limits.hugepages.is_empty() {
        let huge = HugeTlbController::new(dir.to_path_buf(), PathBuf::new(), true);
        for (size, bytes) in &limits.hugepages {
            need(dir, "hugetlb", &format!("hugetlb.{size}.max"))?;
            ctl(dir, &format!("hugetlb.{size}.max"), huge.set_limit_in_bytes(size, *bytes))?;
        }
    }
    for (file, value) in &limits.unified {
        // validated when the container was created; a file the host lacks is a clear error
        let controller = file.split('.').next().unwrap_or(file);
        need(dir, controller, file)?;
        fs::write(dir.join(file), value).map_err(|source| V2Error::File {
            dir: dir.to_path_buf(),
            file: file.clone(),
            source,
        })?;
    }
    Ok(())
}

/// `oom_kill` of the cgroup's `memory.events` (0 when there is none).
pub(crate) fn oom_kills(dir: &Path) -> u64 {
    fs::read_to_string(dir.join("memory.events"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// A value as it reads now, for tests and status (`max` kept as is).
#[cfg(test)]
pub(crate) fn read(dir: &Path, file: &str) -> Option<String> {
    fs::read_to_string(dir.join(file)).ok().map(|s| s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_become_weights_as_kubelet_converts_them() {
        assert_eq!(weight_from_shares(2), 1);
        assert_eq!(weight_from_shares(1024), 39);
        assert_eq!(weight_from_shares(262_144), 10_000);
        assert_eq!(weight_from_shares(1), 1, "below the minimum share");
        assert_eq!(weight_from_shares(0), 0, "none asked");
    }

    /// A directory laid out as a v2 cgroup with the memory, cpu and pids
    /// files: shows what `apply` writes, file by file.
    #[test]
    fn apply_writes_the_v2_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        for (f, v) in
            [("memory.max", "max"), ("memory.swap.max", "max"), ("cpu.weight", "100"), ("cpu.max", "max 100000")]
        {
            fs::write(d.join(f), v).expect("seed");
        }
        fs::write(d.join("pids.max"), "max").expect("seed");
        fs::write(d.join("memory.high"), "max").expect("seed");
        let limits = Limits {
            memory_bytes: Some(64 << 20),
            memory_swap_bytes: Some(96 << 20),
            cpu_shares: Some(512),
            cpu_quota_us: Some(50_000),
            cpu_period_us: Some(100_000),
            pids: Some(30),
            unified: [("memory.high".to_string(), "50000000".to_string())].into(),
            ..Default::default()
        };
        apply(d, &limits).expect("apply");
        assert_eq!(read(d, "memory.max").as_deref(), Some("67108864"));
        assert_eq!(read(d, "memory.swap.max").as_deref(), Some("33554432"), "swap alone");
        assert_eq!(read(d, "cpu.weight").as_deref(), Some("20"));
        assert_eq!(read(d, "cpu.max").as_deref(), Some("50000 100000"));
        assert_eq!(read(d, "pids.max").as_deref(), Some("30"));
        assert_eq!(read(d, "memory.high").as_deref(), Some("50000000"));
        // a file `unified` sets wins over the field (and is written once, by it)
        let both = Limits {
            pids: Some(30),
            unified: [("pids.max".to_string(), "50".to_string())].into(),
            ..Default::default()
        };
        apply(d, &both).expect("apply");
        assert_eq!(read(d, "pids.max").as_deref(), Some("50"));
        // an update without a memory limit takes it off
        apply(d, &Limits { cpu_shares: Some(512), ..Default::default() }).expect("apply");
        assert_eq!(read(d, "memory.max").as_deref(), Some("max"));
        assert_eq!(read(d, "cpu.max").as_deref(), Some("max 100000"));
        // a controller the cgroup lacks is an error naming it
        let e = apply(d, &Limits { cpuset_cpus: Some("0".into()), ..Default::default() }).expect_err("no cpuset");
        assert!(e.to_string().contains("cpuset"), "{e}");
    }

    #[test]
    fn oom_kills_from_memory_events() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(oom_kills(dir.path()), 0);
        fs::write(dir.path().join("memory.events"), "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n")
            .expect("seed");
        assert_eq!(oom_kills(dir.path()), 1);
    }

    /// Where cgroups-rs 0.5 falls short, shown: the reasons for the few
    /// lines of our own in this module. If one of these starts failing,
    /// the crate grew the feature and our code can go.
    #[test]
    fn cgroups_rs_shortfalls() {
        use cgroups_rs::fs::Hierarchy;
        // its v2 hierarchy is always at /sys/fs/cgroup: a unified hierarchy
        // mounted elsewhere (hybrid hosts' /sys/fs/cgroup/unified) is out of reach
        assert_eq!(cgroups_rs::fs::hierarchies::V2::new().root(), PathBuf::from("/sys/fs/cgroup"));
        let hybrid = super::super::Layout::parse(
            "4:memory:/\n0::/\n",
            "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
             41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
        );
        let unified = hybrid.hierarchies.iter().find(|h| h.is_unified()).and_then(|h| h.mount.clone());
        assert_eq!(unified, Some(PathBuf::from("/sys/fs/cgroup/unified")));

        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().to_path_buf();
        // io weight on v2 goes to the BFQ file only, not io.weight
        fs::write(d.join("io.weight"), "default 100").expect("seed");
        cgroups_rs::fs::blkio::BlkIoController::new(d.clone(), PathBuf::new(), true).set_weight(50).expect("write");
        assert_eq!(read(&d, "io.weight").as_deref(), Some("default 100"));
        assert_eq!(read(&d, "io.bfq.weight").as_deref(), Some("50"));
        // its v2 memory statistics carry no OOM kill count: memory.events is ours
        fs::write(d.join("memory.events"), "oom 1\noom_kill 1\n").expect("seed");
        fs::write(d.join("memory.current"), "4096").expect("seed");
        let stat = MemController::new(d.clone(), PathBuf::new(), true).memory_stat();
        assert_eq!((stat.usage_in_bytes, stat.oom_control.oom_kill), (4096, 0));
        assert_eq!(oom_kills(&d), 1);
    }
}
