//! Resource usage read from cgroup files (v1 and v2), for ContainerStats and
//! PodSandboxStats. No process is started and nothing is written.

use super::Layout;
use std::fs;
use std::path::PathBuf;

/// Memory figures as CRI reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Memory {
    pub usage_bytes: u64,
    /// Usage minus inactive file pages (what the kubelet evicts on).
    pub working_set_bytes: u64,
    pub rss_bytes: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
    /// Limit minus working set, when there is a limit.
    pub available_bytes: Option<u64>,
}

/// One cgroup's usage; `None` where the controller is not mounted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub cpu_ns: Option<u64>,
    pub memory: Option<Memory>,
    pub processes: Option<u64>,
}

/// Where a cgroup's controller files are: per controller (v1), or one
/// directory for all (v2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StatDirs {
    pub cpu: Option<PathBuf>,
    pub memory: Option<PathBuf>,
    pub pids: Option<PathBuf>,
    /// cgroup v2: the files are `cpu.stat`, `memory.current`, ...
    pub v2: bool,
}

impl StatDirs {
    /// The directories of cgroup `path` (relative to the hierarchies' roots):
    /// v1 controller hierarchies where mounted, else the unified hierarchy
    /// when it has the controllers (pure v2).
    pub(crate) fn of(layout: &Layout, path: &str) -> StatDirs {
        let v1 = |c: &str| {
            layout
                .hierarchies
                .iter()
                .find(|h| h.controllers.iter().any(|x| x == c))
                .and_then(|h| h.mount.as_ref())
                .map(|m| m.join(path))
        };
        if layout.is_pure_v2() {
            let dir = layout.hierarchies[0].mount.as_ref().map(|m| m.join(path));
            return StatDirs { cpu: dir.clone(), memory: dir.clone(), pids: dir, v2: true };
        }
        StatDirs { cpu: v1("cpuacct"), memory: v1("memory"), pids: v1("pids"), v2: false }
    }

    /// An app's directories: its unit's cgroup on a cgroup v2 host with
    /// controllers, else its own `app-<name>` v1 cgroups below the pod's.
    pub(crate) fn of_app(layout: &Layout, pod: &str, app: &str) -> StatDirs {
        if layout.v2_root().is_some() {
            return StatDirs::of(layout, &super::unit_subpath(pod, app));
        }
        StatDirs::of(layout, &format!("{pod}/app-{app}"))
    }

    pub(crate) fn read(&self) -> Usage {
        let file = |dir: &Option<PathBuf>, name: &str| dir.as_ref().and_then(|d| fs::read_to_string(d.join(name)).ok());
        let cpu_ns = if self.v2 {
            file(&self.cpu, "cpu.stat").and_then(|s| field(&s, "usage_usec")).map(|us| us * 1000)
        } else {
            file(&self.cpu, "cpuacct.usage").and_then(|s| s.trim().parse().ok())
        };
        let k = if self.v2 { &MEMORY_V2 } else { &MEMORY_V1 };
        Usage {
            cpu_ns,
            memory: memory(
                k,
                file(&self.memory, k.usage).as_deref(),
                file(&self.memory, "memory.stat").as_deref(),
                file(&self.memory, k.limit).as_deref(),
            ),
            processes: file(&self.pids, "pids.current").and_then(|s| s.trim().parse().ok()),
        }
    }
}

/// The previous CPU sample per container or pod, for `usage_nano_cores`.
#[derive(Debug, Default)]
pub(crate) struct CpuRates {
    last: std::sync::Mutex<std::collections::HashMap<String, (i64, u64)>>,
}

impl CpuRates {
    /// Nanoseconds of CPU per second since the previous sample of `key`
    /// (none for the first sample, or when the counter went back: a new
    /// cgroup under the same name). Keeps at most a few thousand keys.
    pub(crate) fn rate(&self, key: &str, now_ns: i64, usage_ns: u64) -> Option<u64> {
        let mut last = self.last.lock().ok()?;
        if last.len() > 4096 {
            last.clear();
        }
        let prev = last.insert(key.to_string(), (now_ns, usage_ns))?;
        let (dt, du) = (now_ns.checked_sub(prev.0)?, usage_ns.checked_sub(prev.1)?);
        (dt > 0).then(|| (du as u128 * 1_000_000_000 / dt as u128) as u64)
    }
}

/// `key value` lines (memory.stat, cpu.stat).
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The file and `memory.stat` key names of one cgroup version.
struct MemoryFiles {
    usage: &'static str,
    limit: &'static str,
    inactive_file: &'static str,
    rss: &'static str,
    pgfault: &'static str,
    pgmajfault: &'static str,
}

const MEMORY_V1: MemoryFiles = MemoryFiles {
    usage: "memory.usage_in_bytes",
    limit: "memory.limit_in_bytes",
    inactive_file: "total_inactive_file",
    rss: "total_rss",
    pgfault: "total_pgfault",
    pgmajfault: "total_pgmajfault",
};

const MEMORY_V2: MemoryFiles = MemoryFiles {
    usage: "memory.current",
    limit: "memory.max",
    inactive_file: "inactive_file",
    rss: "anon",
    pgfault: "pgfault",
    pgmajfault: "pgmajfault",
};

/// A v1 limit that is really "none" is a huge number rounded to a page
/// (v2 writes `max`, which does not parse).
const NO_LIMIT_V1: u64 = 1 << 62;

/// Memory figures from the texts of the usage, `memory.stat` and limit files.
fn memory(k: &MemoryFiles, usage: Option<&str>, stat: Option<&str>, limit: Option<&str>) -> Option<Memory> {
    let usage: u64 = usage?.trim().parse().ok()?;
    let stat = stat.unwrap_or_default();
    let working_set = usage.saturating_sub(field(stat, k.inactive_file).unwrap_or(0));
    let limit = limit.and_then(|l| l.trim().parse::<u64>().ok()).filter(|l| *l < NO_LIMIT_V1);
    Some(Memory {
        usage_bytes: usage,
        working_set_bytes: working_set,
        rss_bytes: field(stat, k.rss).unwrap_or(0),
        page_faults: field(stat, k.pgfault).unwrap_or(0),
        major_page_faults: field(stat, k.pgmajfault).unwrap_or(0),
        available_bytes: limit.map(|l| l.saturating_sub(working_set)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_memory_working_set_and_limit() {
        let stat = "cache 100\nrss 5\ntotal_rss 4096\ntotal_inactive_file 1000\ntotal_pgfault 7\ntotal_pgmajfault 2\n";
        let m = memory(&MEMORY_V1, Some("5000\n"), Some(stat), Some("9223372036854771712\n")).expect("memory");
        assert_eq!(
            m,
            Memory {
                usage_bytes: 5000,
                working_set_bytes: 4000,
                rss_bytes: 4096,
                page_faults: 7,
                major_page_faults: 2,
                available_bytes: None
            }
        );
        let m = memory(&MEMORY_V1, Some("5000"), Some(stat), Some("10000")).expect("memory");
        assert_eq!(m.available_bytes, Some(6000));
        assert!(memory(&MEMORY_V1, None, Some(stat), None).is_none());
    }

    #[test]
    fn v2_memory_and_cpu() {
        let m = memory(
            &MEMORY_V2,
            Some("8192"),
            Some("anon 4096\ninactive_file 192\npgfault 3\npgmajfault 1\n"),
            Some("max\n"),
        )
        .expect("memory");
        assert_eq!((m.working_set_bytes, m.rss_bytes, m.page_faults, m.available_bytes), (8000, 4096, 3, None));
        assert_eq!(field("usage_usec 1500\nuser_usec 1000\n", "usage_usec"), Some(1500));
        assert_eq!(field("usage_usec_x 1\n", "usage_usec"), None);
    }

    #[test]
    fn cpu_rate_between_samples() {
        let r = CpuRates::default();
        assert_eq!(r.rate("c", 1_000_000_000, 100), None, "first sample");
        assert_eq!(r.rate("c", 2_000_000_000, 500_000_100), Some(500_000_000), "half a core");
        assert_eq!(r.rate("c", 3_000_000_000, 10), None, "counter went back");
    }

    #[test]
    fn this_process_cgroup_is_readable() {
        let layout = Layout::read().expect("layout");
        let me = layout.hierarchies.iter().find(|h| h.controllers.iter().any(|c| c == "memory"));
        if let Some(h) = me {
            let usage = StatDirs::of(&layout, h.path.trim_start_matches('/')).read();
            assert!(usage.memory.is_some_and(|m| m.usage_bytes > 0), "{usage:?}");
        }
    }
}
