//! An app's own v1 controller cgroups on the host, below its pod's.
//!
//! Inside the pod the v1 controllers are read-only, so systemd there cannot
//! enforce limits (reference: stage1-on-this-machine §2.6). The host makes
//! `<pod>/<app>` in the memory, cpu and pids hierarchies, writes the limits,
//! and moves the app's processes there right after its unit started (found in
//! the unit's unified cgroup). A process forked before the move is moved by
//! the next pass; later ones inherit the app cgroup.

use super::Layout;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::PathBuf;

/// The limits CRI can ask for, as the cgroup v1 files take them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub memory_bytes: Option<i64>,
    pub cpu_shares: Option<u64>,
    pub cpu_quota_us: Option<i64>,
    pub cpu_period_us: Option<u64>,
    pub pids: Option<i64>,
    /// Not a cgroup file: the OOM score adjustment the app's unit starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<i64>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }
}

/// The controllers an app cgroup is made in (cpuacct for its CPU usage;
/// often co-mounted with cpu, then one directory serves both).
const CONTROLLERS: [&str; 4] = ["memory", "cpu", "cpuacct", "pids"];

/// An app's cgroup directories, one per controller that is mounted.
#[derive(Debug, Clone)]
pub struct AppCgroup {
    dirs: Vec<(&'static str, PathBuf)>,
    /// The unit's cgroup in the unified hierarchy, where its processes are found.
    unit: Option<PathBuf>,
}

impl AppCgroup {
    pub fn new(layout: &Layout, pod: &super::pod::Subcgroups, app: &str) -> Self {
        let mut dirs = Vec::new();
        for c in CONTROLLERS {
            if let Some(h) = layout.hierarchies.iter().find(|h| h.controllers.iter().any(|x| x == c))
                && let Some(m) = &h.mount
            {
                let dir = m.join(&pod.controllers).join(format!("app-{app}"));
                if !dirs.iter().any(|(_, d)| *d == dir) {
                    dirs.push((c, dir));
                }
            }
        }
        let unit = layout
            .hierarchies
            .iter()
            .find(|h| h.is_unified())
            .and_then(|h| h.mount.as_ref())
            .map(|m| m.join(&pod.tracking).join("payload/system.slice").join(format!("{app}.service")));
        AppCgroup { dirs, unit }
    }

    fn dir(&self, controller: &str) -> Option<&PathBuf> {
        self.dirs.iter().find(|(c, _)| *c == controller).map(|(_, d)| d)
    }

    /// Creates the directories and writes `limits`.
    pub fn apply(&self, limits: &Limits) -> io::Result<()> {
        for (_, d) in &self.dirs {
            fs::create_dir_all(d)?;
        }
        let write = |c: &str, file: &str, v: String| -> io::Result<()> {
            match self.dir(c) {
                Some(d) => fs::write(d.join(file), v)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}/{file}: {e}", d.display()))),
                None => Ok(()),
            }
        };
        if let Some(p) = limits.cpu_period_us {
            write("cpu", "cpu.cfs_period_us", p.to_string())?;
        }
        write("cpu", "cpu.cfs_quota_us", limits.cpu_quota_us.filter(|q| *q > 0).unwrap_or(-1).to_string())?;
        if let Some(s) = limits.cpu_shares {
            write("cpu", "cpu.shares", s.max(2).to_string())?;
        }
        write("memory", "memory.limit_in_bytes", limits.memory_bytes.filter(|m| *m > 0).unwrap_or(-1).to_string())?;
        write(
            "pids",
            "pids.max",
            limits.pids.filter(|p| *p > 0).map(|p| p.to_string()).unwrap_or_else(|| "max".into()),
        )?;
        Ok(())
    }

    /// Moves the unit's processes into the app cgroups until none is left behind.
    pub fn adopt_unit_processes(&self) -> io::Result<()> {
        let Some(unit) = &self.unit else { return Ok(()) };
        let mut moved: Vec<i32> = Vec::new();
        for _ in 0..20 {
            let pids: Vec<i32> = fs::read_to_string(unit.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .filter(|p| !moved.contains(p))
                .collect();
            if pids.is_empty() {
                break;
            }
            for (_, d) in &self.dirs {
                for pid in &pids {
                    match fs::write(d.join("cgroup.procs"), pid.to_string()) {
                        Ok(()) => {}
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            moved.extend(pids);
        }
        Ok(())
    }

    /// SIGKILLs every process of the app's unit (`cgroup.kill` of its
    /// unified cgroup), those the pod's systemd cannot see included.
    pub fn kill_unit(&self) -> io::Result<()> {
        let Some(unit) = &self.unit else { return Ok(()) };
        match fs::write(unit.join("cgroup.kill"), "1") {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Host pids of the processes in the app's unit (its unified cgroup).
    pub fn unit_processes(&self) -> Vec<i32> {
        let Some(unit) = &self.unit else { return Vec::new() };
        fs::read_to_string(unit.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Whether the kernel OOM-killed a process of this app (v1 `oom_kill` counter).
    pub fn oom_killed(&self) -> bool {
        let Some(d) = self.dir("memory") else { return false };
        fs::read_to_string(d.join("memory.oom_control"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("oom_kill "))
            .any(|n| n.trim().parse::<u64>().unwrap_or(0) > 0)
    }

    /// A limit as currently written, for status and tests.
    pub fn read(&self, controller: &str, file: &str) -> Option<String> {
        fs::read_to_string(self.dir(controller)?.join(file)).ok().map(|s| s.trim().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_dirs_follow_the_layout() {
        let layout = Layout::parse(
            "4:memory:/\n3:pids:/\n0::/\n",
            "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
             39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n\
             41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
        );
        let subs = super::super::pod::Subcgroups {
            controllers: "kubepods/pod1/rktlet-u".into(),
            tracking: "rktlet-pool/rktlet-u".into(),
        };
        let a = AppCgroup::new(&layout, &subs, "0-web");
        assert_eq!(a.dir("memory"), Some(&PathBuf::from("/sys/fs/cgroup/memory/kubepods/pod1/rktlet-u/app-0-web")));
        assert_eq!(a.dir("cpu"), None, "cpu is not mounted in this layout");
        // the unit is found where the pod's systemd is: its tracking cgroup
        assert_eq!(
            a.unit,
            Some(PathBuf::from("/sys/fs/cgroup/unified/rktlet-pool/rktlet-u/payload/system.slice/0-web.service"))
        );
        assert!(Limits::default().is_empty());
    }
}
