//! The limits the CRI can ask of a container's or a pod's cgroups, and
//! their checks: what the v1 and v2 writers (`app`, `v2`) take.

use super::Layout;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The limits CRI can ask for, as the cgroup v1 files take them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Limits {
    pub memory_bytes: Option<i64>,
    pub cpu_shares: Option<u64>,
    pub cpu_quota_us: Option<i64>,
    pub cpu_period_us: Option<u64>,
    pub pids: Option<i64>,
    /// CRI's memory plus swap (v1 `memsw`); on v2 `memory.swap.max` gets the swap part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_swap_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuset_cpus: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuset_mems: Option<String>,
    /// Hugepage size (`2MB`) to limit in bytes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hugepages: BTreeMap<String, u64>,
    /// CRI's `unified` map: cgroup v2 files written as given (checked by [`validate_unified`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unified: BTreeMap<String, String>,
    /// Not a cgroup file: the OOM score adjustment the app's unit starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<i64>,
}

impl Limits {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    /// Whether any of them is a cgroup's (the OOM score adjustment is not).
    pub(crate) fn in_cgroups(&self) -> bool {
        !Limits { oom_score_adj: None, ..self.clone() }.is_empty()
    }

    /// Refuses what no host could apply: unknown or path-like `unified`
    /// keys, `unified` on a host without cgroup v2 controllers, malformed
    /// cpusets and hugepage sizes; and on cgroup v1, a cpuset or a hugepage
    /// limit the host has no controller for (a limit of 0, which kubelet
    /// sends for every page size the node has, is kept where nothing is).
    pub(crate) fn validate(&self) -> Result<(), String> {
        self.validate_on(Layout::cached().ok())
    }

    pub(crate) fn validate_on(&self, layout: Option<&Layout>) -> Result<(), String> {
        validate_unified(&self.unified)?;
        let v2 = layout.and_then(|l| l.v2_root()).is_some();
        if !self.unified.is_empty() && !v2 {
            return Err("unified (cgroup v2) resources were given, but this host has no cgroup v2 controllers".into());
        }
        let v1_has = |c: &str| {
            layout.is_some_and(|l| {
                l.hierarchies.iter().any(|h| h.mount.is_some() && h.controllers.iter().any(|x| x == c))
            })
        };
        if let Some(l) = layout
            && !v2
            && !l.hierarchies.is_empty()
        {
            if (self.cpuset_cpus.is_some() || self.cpuset_mems.is_some()) && !v1_has("cpuset") {
                return Err("cpuset_cpus/cpuset_mems were given, but this host has no cpuset cgroup controller".into());
            }
            if self.hugepages.values().any(|l| *l > 0) && !v1_has("hugetlb") {
                return Err("hugepage_limits were given, but this host has no hugetlb cgroup controller mounted".into());
            }
        }
        for (what, v) in [("cpuset_cpus", &self.cpuset_cpus), ("cpuset_mems", &self.cpuset_mems)] {
            if let Some(v) = v
                && !v.bytes().all(|b| b.is_ascii_digit() || b == b',' || b == b'-')
            {
                return Err(format!("{what} {v:?} is not a list of numbers and ranges"));
            }
        }
        if let Some(size) = self.hugepages.keys().find(|s| !valid_page_size(s)) {
            return Err(format!("hugepage size {size:?} is not one the kernel names (2MB, 1GB, ...)"));
        }
        Ok(())
    }
}

/// `unified` keys rktlet writes: controller interface files that set a
/// limit or a weight. Anything else (core `cgroup.*` files, read-only
/// statistics, paths) is refused.
const UNIFIED_FILES: [&str; 24] = [
    "cpu.weight",
    "cpu.weight.nice",
    "cpu.max",
    "cpu.max.burst",
    "cpu.idle",
    "cpu.uclamp.min",
    "cpu.uclamp.max",
    "cpuset.cpus",
    "cpuset.mems",
    "io.weight",
    "io.bfq.weight",
    "io.max",
    "io.latency",
    "memory.min",
    "memory.low",
    "memory.high",
    "memory.max",
    "memory.swap.high",
    "memory.swap.max",
    "memory.zswap.max",
    "memory.oom.group",
    "pids.max",
    "rdma.max",
    "misc.max",
];

/// Checks a CRI `unified` map: known controller files only (hugetlb ones by
/// pattern), no path, values on one line.
pub(crate) fn validate_unified<'a>(map: impl IntoIterator<Item = (&'a String, &'a String)>) -> Result<(), String> {
    for (k, v) in map {
        let known = UNIFIED_FILES.contains(&k.as_str()) || is_hugetlb_file(k);
        if !known {
            return Err(format!(
                "unified resource {k:?} is not a cgroup v2 limit rktlet writes (one of {} or hugetlb.<size>.max)",
                UNIFIED_FILES.join(", ")
            ));
        }
        if v.contains('\n') || v.contains('\0') || v.len() > 4096 {
            return Err(format!("unified resource {k:?}: the value must be one line"));
        }
    }
    Ok(())
}

fn is_hugetlb_file(k: &str) -> bool {
    let Some(rest) = k.strip_prefix("hugetlb.") else { return false };
    let Some(size) = rest.strip_suffix(".max").or_else(|| rest.strip_suffix(".rsvd.max")) else { return false };
    valid_page_size(size)
}

/// A hugepage size as the kernel names it (`2MB`, `1GB`, `64KB`).
pub(crate) fn valid_page_size(size: &str) -> bool {
    let digits = size.trim_end_matches(['K', 'M', 'G', 'B']);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && ["KB", "MB", "GB"].iter().any(|u| size.strip_prefix(digits) == Some(u))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unified_keys_are_checked() {
        let ok: BTreeMap<String, String> =
            [("memory.high", "1000000"), ("pids.max", "20"), ("hugetlb.2MB.max", "0"), ("io.weight", "default 50")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(validate_unified(&ok), Ok(()));
        for bad in [
            "../memory.max",
            "memory.max/../../x",
            "cgroup.procs",
            "cgroup.subtree_control",
            "memory.current",
            "memory.reclaim",
            "hugetlb.2XB.max",
            "hugetlb..max",
            "",
        ] {
            let m: BTreeMap<String, String> = [(bad.to_string(), "1".to_string())].into();
            assert!(validate_unified(&m).is_err(), "{bad:?} accepted");
        }
        let m: BTreeMap<String, String> = [("memory.max".to_string(), "1\n2".to_string())].into();
        assert!(validate_unified(&m).is_err(), "a second line accepted");
    }
}
