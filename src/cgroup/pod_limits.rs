//! A pod's own limits: what CRI's pod-level resources (the sum of the
//! containers' and the pod overhead) become on the pod's cgroup
//! (`<parent>/rktlet-<uuid>`, or the `rktlet-<uuid>.service` unit), at
//! RunPodSandbox and live on UpdatePodSandboxResources.
//!
//! kubelet owns the pod cgroup above rktlet's and sizes it itself; rktlet's
//! cgroup holds the whole pod (its systemd, nspawn, the log writer and every
//! app), so the same figures bound the sandbox's own processes too, and a pod
//! run without kubelet (crictl) gets them at all. Only what cannot fight
//! kubelet's writes is written:
//!
//! - memory: containers plus overhead, as kubelet's pod cgroup has it, and
//!   like kubelet only while every app in the pod has a memory limit (its
//!   figure counts only the containers with one: an app without one lifts the
//!   pod's before it starts);
//! - CPU shares (v2: the weight converted as kubelet converts it), summed.
//!
//! The CPU quota stays kubelet's pod cgroup's and the apps' own: on cgroup v1
//! a child's quota may not exceed its parent's, so a quota here would make
//! kubelet's shrink of its pod cgroup (which it does before it tells the
//! runtime) fail with EINVAL. Quota, cpusets, hugepages and the rest are
//! recorded and reported, not written.
//!
//! A change is all or nothing: a memory limit below what the pod uses now is
//! refused before anything is written (cgroup v1 would refuse it with EBUSY
//! after reclaiming, v2 would OOM-kill the pod's processes), and a write
//! that fails puts back what was written before it.

use super::Layout;
use super::app::Limits;
use super::pod::Subcgroups;
use cgroups_rs::fs::cpu::CpuController;
use cgroups_rs::fs::memory::MemController;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PodLimitsError {
    #[error("{0}")]
    Invalid(String),
    #[error(
        "the pod uses {usage} bytes of memory, more than the new limit of {limit} bytes: the limit stays as it was"
    )]
    BelowUsage { usage: u64, limit: i64 },
    #[error("{path}: {message}")]
    Write { path: PathBuf, message: String },
    #[error("systemctl set-property {unit}: {message}")]
    Systemd { unit: String, message: String },
}

/// CRI's pod-level resources as recorded for a pod: the sum of its
/// containers' (`resources`) and the pod overhead.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PodResources {
    #[serde(default)]
    pub resources: Limits,
    #[serde(default)]
    pub overhead: Limits,
}

/// What rktlet writes on the pod's own cgroup; `None`: no limit (memory),
/// the default weight (CPU).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct PodLimits {
    pub memory_bytes: Option<i64>,
    pub cpu_shares: Option<u64>,
}

/// The kernel's CFS bounds, in microseconds (`cpu.cfs_period_us`, quota minimum).
const PERIOD_US: std::ops::RangeInclusive<i64> = 1_000..=1_000_000;
const MIN_QUOTA_US: i64 = 1_000;
const MAX_SHARES: i64 = 262_144;

/// Checks one CRI `LinuxContainerResources` of a pod (`what` names it in
/// the message) as its numbers came: CRI's 0 is "not set", a negative memory
/// or share count, a quota or period the kernel refuses are errors.
pub(crate) fn check_cri_numbers(
    what: &str,
    memory: i64,
    shares: i64,
    quota: i64,
    period: i64,
) -> Result<(), PodLimitsError> {
    let bad = |m: String| Err(PodLimitsError::Invalid(format!("{what}: {m}")));
    if memory < 0 {
        return bad(format!("memory_limit_in_bytes {memory} is negative"));
    }
    if !(0..=MAX_SHARES).contains(&shares) {
        return bad(format!("cpu_shares {shares} is outside 0..{MAX_SHARES}"));
    }
    if quota < -1 || (quota > 0 && quota < MIN_QUOTA_US) {
        return bad(format!("cpu_quota {quota} is neither -1, 0 nor at least {MIN_QUOTA_US} µs"));
    }
    if period != 0 && !PERIOD_US.contains(&period) {
        return bad(format!("cpu_period {period} is outside {}..{} µs", PERIOD_US.start(), PERIOD_US.end()));
    }
    Ok(())
}

impl PodResources {
    pub(crate) fn is_empty(&self) -> bool {
        self.resources.is_empty() && self.overhead.is_empty()
    }

    /// The limits of the pod's cgroup while its apps have `app_limits`
    /// (module doc: memory only while every app has a memory limit).
    pub(crate) fn limits<'a>(&self, app_limits: impl IntoIterator<Item = &'a Limits>) -> PodLimits {
        let every_app_limits_memory = app_limits.into_iter().all(|l| l.memory_bytes.is_some_and(|m| m > 0));
        let memory = self
            .resources
            .memory_bytes
            .filter(|m| *m > 0 && every_app_limits_memory)
            .map(|m| m.saturating_add(self.overhead.memory_bytes.unwrap_or(0).max(0)));
        let cpu_shares = match (self.resources.cpu_shares, self.overhead.cpu_shares) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0)).clamp(2, MAX_SHARES as u64)),
        };
        PodLimits { memory_bytes: memory, cpu_shares }
    }
}

/// Where the pod's own limits are written.
#[derive(Debug, Clone)]
enum Target {
    /// cgroup v1: the pod's memory and cpu controller cgroups.
    V1 { memory: Option<PathBuf>, cpu: Option<PathBuf> },
    /// cgroup v2: the pod's cgroup.
    V2 { dir: PathBuf },
}

/// A pod's cgroup as far as its own limits go.
#[derive(Debug, Clone)]
pub(crate) struct PodCgroupLimits {
    target: Target,
    /// The pod's unit of the host's systemd (systemd driver): its
    /// properties are set, systemd writes the files (and keeps them across
    /// its reloads; on v1 it manages the unit's memory and cpu cgroups).
    unit: Option<String>,
}

/// The pod's limits as its cgroup files read now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CurrentLimits {
    /// `None`: unlimited.
    pub memory_limit_bytes: Option<u64>,
    /// The memory the pod uses now (v1 `memory.usage_in_bytes`, v2 `memory.current`).
    pub memory_usage_bytes: Option<u64>,
    /// cgroup v1 `cpu.shares`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_shares: Option<u64>,
    /// cgroup v2 `cpu.weight`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_weight: Option<u64>,
}

/// v1 reads an unlimited memory cgroup as the page counter's maximum.
const V1_UNLIMITED: u64 = 1 << 62;

fn read_trim(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn read_num(path: &Path) -> Option<u64> {
    read_trim(path)?.parse().ok()
}

impl PodCgroupLimits {
    /// The pod at `subs`; `unit` is its unit of the host's systemd when the
    /// pod runs under one (systemd driver).
    pub(crate) fn new(layout: &Layout, subs: &Subcgroups, unit: Option<String>) -> Self {
        if let Some(root) = layout.v2_root() {
            return PodCgroupLimits { target: Target::V2 { dir: root.join(&subs.tracking) }, unit };
        }
        let dir_of = |c: &str| {
            layout
                .v1_controllers()
                .find(|h| h.controllers.iter().any(|x| x == c))
                .and_then(|h| h.mount.as_ref())
                .map(|m| m.join(&subs.controllers))
        };
        PodCgroupLimits { target: Target::V1 { memory: dir_of("memory"), cpu: dir_of("cpu") }, unit }
    }

    fn memory_dir(&self) -> Option<&Path> {
        match &self.target {
            Target::V1 { memory, .. } => memory.as_deref(),
            Target::V2 { dir } => Some(dir),
        }
    }

    /// What the pod's cgroup files say now.
    pub(crate) fn read(&self) -> CurrentLimits {
        match &self.target {
            Target::V1 { memory, cpu } => CurrentLimits {
                memory_limit_bytes: memory
                    .as_ref()
                    .and_then(|d| read_num(&d.join("memory.limit_in_bytes")))
                    .filter(|l| *l < V1_UNLIMITED),
                memory_usage_bytes: memory.as_ref().and_then(|d| read_num(&d.join("memory.usage_in_bytes"))),
                cpu_shares: cpu.as_ref().and_then(|d| read_num(&d.join("cpu.shares"))),
                cpu_weight: None,
            },
            Target::V2 { dir } => CurrentLimits {
                memory_limit_bytes: read_num(&dir.join("memory.max")),
                memory_usage_bytes: read_num(&dir.join("memory.current")),
                cpu_shares: None,
                cpu_weight: read_num(&dir.join("cpu.weight")),
            },
        }
    }

    /// Writes `limits`, all or nothing: a memory limit lowered below the
    /// pod's usage is refused before any write; a failed write restores what
    /// was written before it.
    pub(crate) fn apply(&self, limits: PodLimits) -> Result<(), PodLimitsError> {
        let current = self.read().memory_limit_bytes;
        // only a shrink can be below usage (a limit kept or raised never is)
        let shrinks = |limit: i64| current.is_none_or(|c| u64::try_from(limit).is_ok_and(|l| l < c));
        if let Some(limit) = limits.memory_bytes.filter(|l| shrinks(*l))
            && let Some(dir) = self.memory_dir()
        {
            let usage = match &self.target {
                Target::V1 { .. } => read_num(&dir.join("memory.usage_in_bytes")),
                _ => read_num(&dir.join("memory.current")),
            };
            if let Some(usage) = usage.filter(|u| i64::try_from(*u).map_or(true, |u| u > limit)) {
                return Err(PodLimitsError::BelowUsage { usage, limit });
            }
        }
        if let Some(unit) = &self.unit {
            return self.apply_to_unit(unit, limits);
        }
        match &self.target {
            Target::V1 { memory, cpu } => {
                let mut files = Vec::new();
                if let Some(d) = memory {
                    files.push(FileWrite::v1_memory(d, limits.memory_bytes));
                }
                if let Some(d) = cpu {
                    files.push(FileWrite::v1_shares(d, limits.cpu_shares));
                }
                write_all(&files)
            }
            Target::V2 { dir } => write_all(&[
                FileWrite::v2_memory(dir, limits.memory_bytes),
                FileWrite::v2_weight(dir, limits.cpu_shares),
            ]),
        }
    }

    /// The systemd driver: `MemoryMax=` and `CPUShares=` (v1) or
    /// `CPUWeight=` (v2) of the pod's unit; on a failure the values read
    /// before are set again (systemd may have applied one of them).
    fn apply_to_unit(&self, unit: &str, limits: PodLimits) -> Result<(), PodLimitsError> {
        let (new, old) = self.unit_properties(limits);
        set_properties(unit, &new).inspect_err(|_| {
            if let Err(e) = set_properties(unit, &old) {
                tracing::warn!(unit, error = %e, "restoring the pod unit's limits");
            }
        })
    }

    /// The unit properties for `limits`, and those that give back what
    /// the files hold now.
    fn unit_properties(&self, limits: PodLimits) -> (Vec<String>, Vec<String>) {
        let memory = |v: Option<String>| {
            v.map(|m| match m.parse::<u64>() {
                Ok(n) if n < V1_UNLIMITED => format!("MemoryMax={n}"),
                _ => "MemoryMax=infinity".to_string(),
            })
        };
        let (old, cpu) = match &self.target {
            Target::V1 { memory: mem, cpu } => (
                [
                    memory(mem.as_ref().and_then(|d| read_trim(&d.join("memory.limit_in_bytes")))),
                    cpu.as_ref().and_then(|d| read_num(&d.join("cpu.shares"))).map(|s| format!("CPUShares={s}")),
                ],
                format!("CPUShares={}", limits.cpu_shares.unwrap_or(1024).max(2)),
            ),
            Target::V2 { dir } => (
                [
                    memory(read_trim(&dir.join("memory.max"))),
                    read_num(&dir.join("cpu.weight")).map(|w| format!("CPUWeight={w}")),
                ],
                format!("CPUWeight={}", limits.cpu_shares.map_or(100, super::v2::weight_from_shares).max(1)),
            ),
        };
        let memory = limits.memory_bytes.filter(|m| *m > 0).map_or("infinity".to_string(), |m| m.to_string());
        (vec![format!("MemoryMax={memory}"), cpu], old.into_iter().flatten().collect())
    }
}

/// One cgroup file to write, with cgroups-rs. A file that is missing (its
/// controller is not enabled there) is skipped when nothing is asked of it.
struct FileWrite {
    path: PathBuf,
    needed: bool,
    write: Box<dyn Fn() -> Result<(), cgroups_rs::fs::error::Error>>,
}

impl FileWrite {
    fn v1_memory(dir: &Path, bytes: Option<i64>) -> Self {
        let mem = MemController::new(dir.to_path_buf(), PathBuf::new(), false);
        let limit = bytes.filter(|m| *m > 0).unwrap_or(-1);
        FileWrite {
            path: dir.join("memory.limit_in_bytes"),
            needed: limit > 0,
            write: Box::new(move || mem.set_limit(limit)),
        }
    }

    fn v1_shares(dir: &Path, shares: Option<u64>) -> Self {
        let cpu = CpuController::new(dir.to_path_buf(), PathBuf::new(), false);
        let needed = shares.is_some();
        let shares = shares.unwrap_or(1024).max(2);
        FileWrite { path: dir.join("cpu.shares"), needed, write: Box::new(move || cpu.set_shares(shares)) }
    }

    fn v2_memory(dir: &Path, bytes: Option<i64>) -> Self {
        let mem = MemController::new(dir.to_path_buf(), PathBuf::new(), true);
        let limit = bytes.filter(|m| *m > 0).unwrap_or(-1);
        FileWrite { path: dir.join("memory.max"), needed: limit > 0, write: Box::new(move || mem.set_limit(limit)) }
    }

    fn v2_weight(dir: &Path, shares: Option<u64>) -> Self {
        let cpu = CpuController::new(dir.to_path_buf(), PathBuf::new(), true);
        let weight = shares.map_or(100, super::v2::weight_from_shares).max(1);
        FileWrite {
            path: dir.join("cpu.weight"),
            needed: shares.is_some(),
            write: Box::new(move || cpu.set_shares(weight)),
        }
    }
}

/// Writes each file in order; on a failure, writes back (last first) what
/// the files held before.
fn write_all(files: &[FileWrite]) -> Result<(), PodLimitsError> {
    let mut written: Vec<(&Path, String)> = Vec::new();
    let restore = |written: &[(&Path, String)]| {
        for (path, old) in written.iter().rev() {
            if let Err(e) = fs::write(path, old.trim()) {
                tracing::warn!(path = %path.display(), error = %e, "restoring a pod cgroup limit");
            }
        }
    };
    for f in files {
        let old = match fs::read_to_string(&f.path) {
            Ok(old) => old,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !f.needed => continue,
            Err(e) => {
                restore(&written);
                return Err(PodLimitsError::Write { path: f.path.clone(), message: e.to_string() });
            }
        };
        if let Err(e) = (f.write)() {
            restore(&written);
            return Err(PodLimitsError::Write { path: f.path.clone(), message: e.to_string() });
        }
        written.push((&f.path, old));
    }
    Ok(())
}

/// `systemctl set-property --runtime <unit> <props>`: the host's systemd
/// changes a running unit's cgroup settings.
fn set_properties(unit: &str, props: &[String]) -> Result<(), PodLimitsError> {
    if props.is_empty() {
        return Ok(());
    }
    let out = std::process::Command::new("systemctl")
        .args(["set-property", "--runtime", unit])
        .args(props)
        .output()
        .map_err(|e| PodLimitsError::Systemd { unit: unit.to_string(), message: e.to_string() })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(PodLimitsError::Systemd {
            unit: unit.to_string(),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(memory: Option<i64>, shares: Option<u64>) -> Limits {
        Limits { memory_bytes: memory, cpu_shares: shares, ..Default::default() }
    }

    #[test]
    fn pod_limits_follow_kubelets_rules() {
        let p = PodResources { resources: res(Some(100 << 20), Some(512)), overhead: res(Some(20 << 20), Some(102)) };
        // no app yet, or every app with a memory limit: containers plus overhead
        assert_eq!(p.limits([]), PodLimits { memory_bytes: Some(120 << 20), cpu_shares: Some(614) });
        let limited = res(Some(50 << 20), None);
        assert_eq!(p.limits([&limited]).memory_bytes, Some(120 << 20));
        // an app without one: kubelet's figure leaves it out, so no pod limit
        let unlimited = res(None, Some(2));
        assert_eq!(p.limits([&limited, &unlimited]), PodLimits { memory_bytes: None, cpu_shares: Some(614) });
        // overhead alone limits no memory (the containers are unlimited)
        let o = PodResources { resources: Limits::default(), overhead: res(Some(20 << 20), None) };
        assert_eq!(o.limits([]), PodLimits::default());
        assert!(PodResources::default().is_empty());
    }

    #[test]
    fn cri_numbers_are_checked() {
        assert!(check_cri_numbers("resources", 64 << 20, 1024, 50_000, 100_000).is_ok());
        assert!(check_cri_numbers("resources", 0, 0, 0, 0).is_ok());
        assert!(check_cri_numbers("resources", 0, 0, -1, 0).is_ok());
        for (m, s, q, p) in
            [(-1, 0, 0, 0), (0, -2, 0, 0), (0, 300_000, 0, 0), (0, 0, 500, 0), (0, 0, -5, 0), (0, 0, 0, 10)]
        {
            let e = check_cri_numbers("overhead", m, s, q, p).expect_err("accepted");
            assert!(e.to_string().starts_with("overhead: "), "{e}");
        }
    }

    fn v1_dirs() -> (tempfile::TempDir, PodCgroupLimits) {
        let t = tempfile::tempdir().expect("tempdir");
        let (mem, cpu) = (t.path().join("memory"), t.path().join("cpu"));
        for d in [&mem, &cpu] {
            fs::create_dir(d).expect("mkdir");
        }
        fs::write(mem.join("memory.limit_in_bytes"), "9223372036854771712").expect("seed");
        fs::write(mem.join("memory.usage_in_bytes"), "4096").expect("seed");
        fs::write(cpu.join("cpu.shares"), "1024").expect("seed");
        (t, PodCgroupLimits { target: Target::V1 { memory: Some(mem), cpu: Some(cpu) }, unit: None })
    }

    #[test]
    fn v1_files_written_and_read() {
        let (_t, cg) = v1_dirs();
        assert_eq!(cg.read().memory_limit_bytes, None, "the kernel's unlimited value is none");
        cg.apply(PodLimits { memory_bytes: Some(64 << 20), cpu_shares: Some(512) }).expect("apply");
        let now = cg.read();
        assert_eq!((now.memory_limit_bytes, now.cpu_shares), (Some(64 << 20), Some(512)));
        cg.apply(PodLimits::default()).expect("lift");
        assert_eq!(cg.read().cpu_shares, Some(1024), "the default weight");
    }

    #[test]
    fn below_usage_is_refused_before_any_write() {
        let (t, cg) = v1_dirs();
        cg.apply(PodLimits { memory_bytes: Some(64 << 20), cpu_shares: Some(512) }).expect("apply");
        fs::write(t.path().join("memory/memory.usage_in_bytes"), (40u64 << 20).to_string()).expect("usage");
        let e = cg.apply(PodLimits { memory_bytes: Some(32 << 20), cpu_shares: Some(256) }).expect_err("below usage");
        assert!(matches!(e, PodLimitsError::BelowUsage { usage, limit } if usage == 40 << 20 && limit == 32 << 20));
        assert_eq!((cg.read().memory_limit_bytes, cg.read().cpu_shares), (Some(64 << 20), Some(512)));
    }

    #[test]
    fn a_limit_kept_or_raised_is_not_checked_against_usage() {
        let (t, cg) = v1_dirs();
        cg.apply(PodLimits { memory_bytes: Some(64 << 20), cpu_shares: None }).expect("apply");
        // usage a shade above the limit, as v2's memory.current may read for a moment
        fs::write(t.path().join("memory/memory.usage_in_bytes"), ((64u64 << 20) + 4096).to_string()).expect("usage");
        cg.apply(PodLimits { memory_bytes: Some(64 << 20), cpu_shares: Some(512) }).expect("kept");
        cg.apply(PodLimits { memory_bytes: Some(65 << 20), cpu_shares: Some(512) }).expect("raised");
        assert!(cg.apply(PodLimits { memory_bytes: Some(63 << 20), cpu_shares: None }).is_err(), "shrunk");
    }

    #[test]
    fn a_failed_write_restores_the_earlier_ones() {
        let (t, cg) = v1_dirs();
        cg.apply(PodLimits { memory_bytes: Some(64 << 20), cpu_shares: Some(512) }).expect("apply");
        // the second file reads but cannot be written (a kernel file without a write handler)
        fs::remove_file(t.path().join("cpu/cpu.shares")).expect("rm");
        std::os::unix::fs::symlink("/proc/version", t.path().join("cpu/cpu.shares")).expect("symlink");
        let e = cg.apply(PodLimits { memory_bytes: Some(128 << 20), cpu_shares: Some(256) }).expect_err("fails");
        assert!(e.to_string().contains("cpu.shares"), "{e}");
        assert_eq!(cg.read().memory_limit_bytes, Some(64 << 20), "memory put back");
        // a file that is missing is an error only when a value is asked of it
        fs::remove_file(t.path().join("cpu/cpu.shares")).expect("rm");
        cg.apply(PodLimits { memory_bytes: Some(96 << 20), cpu_shares: None }).expect("no shares asked");
        assert!(cg.apply(PodLimits { memory_bytes: Some(96 << 20), cpu_shares: Some(2) }).is_err());
    }

    #[test]
    fn unit_properties_per_hierarchy() {
        let (_t, mut cg) = v1_dirs();
        cg.unit = Some("rktlet-u.service".into());
        let (new, old) = cg.unit_properties(PodLimits { memory_bytes: Some(64 << 20), cpu_shares: Some(612) });
        assert_eq!(new, ["MemoryMax=67108864", "CPUShares=612"]);
        assert_eq!(old, ["MemoryMax=infinity", "CPUShares=1024"], "v1's unlimited value is infinity");
        let t = tempfile::tempdir().expect("tempdir");
        fs::write(t.path().join("memory.max"), "335544320\n").expect("seed");
        fs::write(t.path().join("cpu.weight"), "24\n").expect("seed");
        let v2 = PodCgroupLimits { target: Target::V2 { dir: t.path().to_path_buf() }, unit: cg.unit.clone() };
        let (new, old) = v2.unit_properties(PodLimits { memory_bytes: None, cpu_shares: Some(1024) });
        assert_eq!(new, ["MemoryMax=infinity", "CPUWeight=39"]);
        assert_eq!(old, ["MemoryMax=335544320", "CPUWeight=24"]);
        fs::write(t.path().join("memory.max"), "max\n").expect("seed");
        assert_eq!(v2.unit_properties(PodLimits::default()).1[0], "MemoryMax=infinity");
    }

    #[test]
    fn v2_files_written_and_read() {
        let t = tempfile::tempdir().expect("tempdir");
        let d = t.path();
        for (f, v) in [("memory.max", "max"), ("memory.current", "8192"), ("cpu.weight", "100")] {
            fs::write(d.join(f), v).expect("seed");
        }
        let cg = PodCgroupLimits { target: Target::V2 { dir: d.to_path_buf() }, unit: None };
        assert_eq!(cg.read().memory_limit_bytes, None);
        cg.apply(PodLimits { memory_bytes: Some(64 << 20), cpu_shares: Some(1024) }).expect("apply");
        assert_eq!(read_trim(&d.join("memory.max")).as_deref(), Some("67108864"));
        assert_eq!(cg.read().cpu_weight, Some(39), "kubelet's conversion of 1024 shares");
        // v2 would OOM-kill below usage: refused first
        fs::write(d.join("memory.current"), (80u64 << 20).to_string()).expect("usage");
        assert!(matches!(
            cg.apply(PodLimits { memory_bytes: Some(32 << 20), cpu_shares: None }),
            Err(PodLimitsError::BelowUsage { .. })
        ));
        assert_eq!(read_trim(&d.join("memory.max")).as_deref(), Some("67108864"));
        cg.apply(PodLimits::default()).expect("lift");
        assert_eq!(read_trim(&d.join("memory.max")).as_deref(), Some("max"));
        assert_eq!(cg.read().cpu_weight, Some(100));
    }
}
