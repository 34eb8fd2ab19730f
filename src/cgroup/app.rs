//! An app's own v1 controller cgroups on the host, below its pod's.
//!
//! Inside the pod the v1 controllers are read-only, so systemd there cannot
//! enforce limits. The host makes `<pod>/app-<app>` in the memory, cpu,
//! cpuacct, pids, cpuset, hugetlb and devices hierarchies, writes the limits
//! and the device list, and moves the unit's first process there while its
//! unit starts (found in the unit's unified cgroup; appexec waits for it),
//! then whatever else the unit has; later processes inherit the app cgroup.
//! A node's systemd may move them out again (the cgroupfs driver beside its
//! units): [`AppCgroup::strays`] tells, [`AppCgroup::restore`] puts them back.

use super::Layout;
pub(crate) use super::limits::Limits;
use cgroups_rs::fs::MaxValue;
use cgroups_rs::fs::cpu::CpuController;
use cgroups_rs::fs::memory::MemController;
use cgroups_rs::fs::pid::PidController;
use std::fs;
use std::io;
use std::path::PathBuf;

/// The controllers an app cgroup is made in (cpuacct for its CPU usage;
/// often co-mounted with cpu, then one directory serves both; devices for
/// the nodes it may open, `super::devices`).
const CONTROLLERS: [&str; 7] = ["memory", "cpu", "cpuacct", "pids", "cpuset", "hugetlb", "devices"];

/// An app's cgroup directories, one per controller that is mounted.
#[derive(Debug, Clone)]
pub(crate) struct AppCgroup {
    dirs: Vec<(&'static str, PathBuf)>,
    /// The unit's cgroup in the unified hierarchy, where its processes are found.
    unit: Option<PathBuf>,
    /// Pure cgroup v2 with controllers: the unified hierarchy's root and the
    /// unit's cgroup relative to it, which is the app's cgroup (no `dirs`).
    v2: Option<(PathBuf, String)>,
}

/// Where an app's limits are written: its cgroups ([`AppCgroup`]); a test
/// gives a fake that records the writes and refuses those it is told to.
pub(crate) trait LimitsWriter {
    /// Writes `limits` and moves the app's processes under them.
    fn write_limits(&self, limits: &Limits) -> io::Result<()>;
}

impl LimitsWriter for AppCgroup {
    fn write_limits(&self, limits: &Limits) -> io::Result<()> {
        self.apply(limits)?;
        self.adopt_unit_processes()
    }
}

impl AppCgroup {
    pub(crate) fn new(layout: &Layout, pod: &super::pod::Subcgroups, app: &str) -> Self {
        if let Some(root) = layout.v2_root() {
            let rel = super::unit_subpath(&pod.tracking, app);
            let unit = Some(root.join(&rel));
            return AppCgroup { dirs: Vec::new(), unit, v2: Some((root.to_path_buf(), rel)) };
        }
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
            .map(|m| m.join(super::unit_subpath(&pod.tracking, app)));
        AppCgroup { dirs, unit, v2: None }
    }

    fn dir(&self, controller: &str) -> Option<&PathBuf> {
        self.dirs.iter().find(|(c, _)| *c == controller).map(|(_, d)| d)
    }

    /// Creates the directories and writes `limits`. On cgroup v2 the unit's
    /// cgroup exists (the pod's systemd made it): the controllers are enabled
    /// down to it and the limits written into it.
    pub(crate) fn apply(&self, limits: &Limits) -> io::Result<()> {
        if let Some((root, rel)) = &self.v2 {
            let parent = rel.rsplit_once('/').map_or("", |(p, _)| p);
            super::v2::enable_down(root, parent, true).map_err(io::Error::other)?;
            return super::v2::apply(&root.join(rel), limits).map_err(io::Error::other);
        }
        // (the devices cgroup is made with its list, `apply_devices`: a new
        // one inherits its parent's, the node's)
        for (_, d) in self.dirs.iter().filter(|(c, _)| *c != "devices") {
            // a v1 cpuset cgroup takes tasks only once its cpus and mems are set
            super::pod::create_with_cpuset(d)?;
        }
        let context = |c: &str, file: &'static str| {
            let d = self.dir(c).map(|d| d.display().to_string()).unwrap_or_default();
            move |e: cgroups_rs::fs::error::Error| io::Error::other(format!("{d}/{file}: {e}"))
        };
        if let Some(d) = self.dir("cpu") {
            let cpu = CpuController::new(d.clone(), PathBuf::new(), false);
            if let Some(p) = limits.cpu_period_us {
                cpu.set_cfs_period(p).map_err(context("cpu", "cpu.cfs_period_us"))?;
            }
            cpu.set_cfs_quota(limits.cpu_quota_us.filter(|q| *q > 0).unwrap_or(-1))
                .map_err(context("cpu", "cpu.cfs_quota_us"))?;
            if let Some(s) = limits.cpu_shares {
                cpu.set_shares(s.max(2)).map_err(context("cpu", "cpu.shares"))?;
            }
        }
        if let Some(d) = self.dir("memory") {
            // memory plus swap: `memory.memsw.limit_in_bytes` exists with swap
            // accounting; without it the swap limit is dropped, as containerd
            // drops it where the kernel has no swap controller
            let memsw = d.join("memory.memsw.limit_in_bytes");
            let swap = limits.memory_swap_bytes.filter(|_| memsw.exists()).map(|s| if s > 0 { s } else { -1 });
            // memsw may never be below the memory limit: raised first when
            // it grows (a failure then means it shrinks: it goes after)
            if let Some(s) = swap {
                let _ = fs::write(&memsw, s.to_string());
            }
            MemController::new(d.clone(), PathBuf::new(), false)
                .set_limit(limits.memory_bytes.filter(|m| *m > 0).unwrap_or(-1))
                .map_err(context("memory", "memory.limit_in_bytes"))?;
            if let Some(s) = swap {
                fs::write(&memsw, s.to_string())
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", memsw.display())))?;
            }
        }
        if let Some(d) = self.dir("cpuset") {
            for (file, value) in [("cpuset.cpus", &limits.cpuset_cpus), ("cpuset.mems", &limits.cpuset_mems)] {
                if let Some(v) = value {
                    fs::write(d.join(file), v)
                        .map_err(|e| io::Error::new(e.kind(), format!("{}/{file}: {e}", d.display())))?;
                }
            }
        }
        if let Some(d) = self.dir("hugetlb") {
            for (size, limit) in &limits.hugepages {
                let file = d.join(format!("hugetlb.{size}.limit_in_bytes"));
                fs::write(&file, limit.to_string())
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", file.display())))?;
            }
        }
        if let Some(d) = self.dir("pids") {
            PidController::new(d.clone(), PathBuf::new(), false)
                .set_pid_max(limits.pids.filter(|p| *p > 0).map_or(MaxValue::Max, MaxValue::Value))
                .map_err(context("pids", "pids.max"))?;
        }
        Ok(())
    }

    /// Holds the app to `allowed` in its v1 `devices` cgroup, made here when
    /// it is not there (written before any process of the app is in it; a
    /// cgroup made here whose list cannot be written is removed again, never
    /// left with its parent's). On cgroup v2 the unit's properties do it
    /// (`DeviceAllow=`); a v1 host without a devices hierarchy has nothing
    /// to hold devices with.
    pub(crate) fn apply_devices(&self, allowed: &super::devices::Allowed) -> io::Result<()> {
        let Some(d) = self.dir("devices") else { return Ok(()) };
        let made = !d.is_dir();
        if made {
            super::pod::create_with_cpuset(d)?;
        }
        allowed.write_v1(d).inspect_err(|_| {
            if made {
                let _ = fs::remove_dir(d);
            }
        })
    }

    /// Whether the app's devices are held by a v1 cgroup of its own (the
    /// app must then not run outside it).
    pub(crate) fn holds_devices(&self) -> bool {
        self.dir("devices").is_some()
    }

    /// The app's cgroup on cgroup v2 (its unit's), if this host is one.
    pub(crate) fn v2_dir(&self) -> Option<PathBuf> {
        self.v2.as_ref().map(|(root, rel)| root.join(rel))
    }

    /// On cgroup v1, where the daemon moves the app's processes into its
    /// cgroups: their directory name and how many hierarchies have one,
    /// for appexec to wait on before the app runs (`cgwait=`). None on v2
    /// (the unit's cgroup is the app's) or without a unified hierarchy to
    /// find the unit's processes in.
    pub(crate) fn placement(&self, app: &str) -> Option<(String, usize)> {
        (self.v2.is_none() && self.unit.is_some() && !self.dirs.is_empty())
            .then(|| (format!("app-{app}"), self.dirs.len()))
    }

    /// The v1 cgroups a process exec'd into the app joins, whatever its main
    /// process is in now: the app's own (or one the app made below its own).
    /// Empty on cgroup v2, where the unit's cgroup is the app's.
    pub(crate) fn exec_dirs(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|(_, d)| d.clone()).collect()
    }

    /// The controllers whose app cgroup a process is not in (nor below),
    /// from its `/proc/<pid>/cgroup` (`proc_cgroup`), or whose app cgroup is
    /// gone. On a node whose systemd manages the v1 hierarchies, pods made
    /// beside its units (the cgroupfs driver) have their processes moved to
    /// systemd's own cgroups when it turns a controller on or off for its
    /// slices, and the app's emptied cgroups removed.
    pub(crate) fn strays(&self, layout: &Layout, proc_cgroup: &str) -> Vec<&'static str> {
        let out = self.out_of(layout, proc_cgroup);
        self.dirs.iter().filter(|(c, d)| out.contains(c) || !d.is_dir()).map(|(c, _)| *c).collect()
    }

    /// The controllers whose app cgroup `proc_cgroup` (a process's
    /// `/proc/<pid>/cgroup`) does not have it in, nor below.
    fn out_of(&self, layout: &Layout, proc_cgroup: &str) -> Vec<&'static str> {
        let now = layout.cgroups_of(proc_cgroup);
        self.dirs.iter().filter(|(_, d)| !now.iter().any(|(_, at)| at.starts_with(d))).map(|(c, _)| *c).collect()
    }

    /// Puts the app back in its v1 cgroups: those gone made again with
    /// `limits` (its devices cgroup with `allowed`, before any process is in
    /// it), the limits of those still there written again, the unit's
    /// processes moved in.
    pub(crate) fn restore(&self, limits: &Limits, allowed: &super::devices::Allowed) -> io::Result<()> {
        if self.v2.is_some() {
            return Ok(());
        }
        self.apply(limits)?;
        self.apply_devices_if_gone(allowed)?;
        self.adopt_unit_processes()
    }

    /// [`AppCgroup::apply_devices`] when the devices cgroup is not there: a
    /// list in force is not written again (that would deny every device to
    /// the processes in it for a moment).
    fn apply_devices_if_gone(&self, allowed: &super::devices::Allowed) -> io::Result<()> {
        match self.dir("devices") {
            Some(d) if !d.is_dir() => self.apply_devices(allowed),
            _ => Ok(()),
        }
    }

    /// While the app's unit starts: moves its first processes into the app
    /// cgroups as soon as they appear (appexec waits for that, `placement`),
    /// while `starting` stays set. A process that cannot be moved is killed:
    /// it must not run without its limits. True once they were moved; false
    /// when none appeared while `starting` stayed set (or within 10 s).
    pub(crate) fn adopt_while_starting(&self, starting: &std::sync::atomic::AtomicBool) -> io::Result<bool> {
        if !self.first_processes(starting) {
            return Ok(false);
        }
        self.adopt_unit_processes().inspect_err(|_| self.kill_unit_processes()).map(|()| true)
    }

    /// While the app's unit starts: kills its first processes as soon as
    /// they appear, while `starting` stays set (its cgroups could not be
    /// made: nothing of it may run, and appexec would wait to be placed).
    pub(crate) fn kill_while_starting(&self, starting: &std::sync::atomic::AtomicBool) {
        if self.first_processes(starting) {
            self.kill_unit_processes();
        }
    }

    /// Waits until the unit has processes (true), or `starting` is cleared
    /// or 10 s passed without any (false).
    fn first_processes(&self, starting: &std::sync::atomic::AtomicBool) -> bool {
        use std::sync::atomic::Ordering;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while starting.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
            if !self.unit_processes().is_empty() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        false
    }

    /// SIGKILLs the processes of the unit found now.
    fn kill_unit_processes(&self) {
        for pid in self.unit_processes() {
            // SAFETY: kill(2) with a plain signal number; a pid that was reused meanwhile
            // would be one of the same unit cgroup's, which goes anyway.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    /// Moves the unit's processes into the app cgroups until none is left
    /// behind: each into those it is not in yet (nor below, where the app
    /// put it), as its `/proc/<pid>/cgroup` says; a process placed while
    /// the unit started, and what it forked since, costs one read and no
    /// migration.
    pub(crate) fn adopt_unit_processes(&self) -> io::Result<()> {
        let Some(unit) = &self.unit else { return Ok(()) };
        if self.v2.is_some() {
            // the unit's cgroup is the app's: its processes are where they belong
            return Ok(());
        }
        let layout = Layout::cached().ok();
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
            for pid in &pids {
                let out = match (&layout, fs::read_to_string(format!("/proc/{pid}/cgroup"))) {
                    (Some(layout), Ok(now)) => self.out_of(layout, &now),
                    // gone already: nothing to move
                    (_, Err(e)) if e.kind() == io::ErrorKind::NotFound => continue,
                    _ => self.dirs.iter().map(|(c, _)| *c).collect(),
                };
                for (_, d) in self.dirs.iter().filter(|(c, _)| out.contains(c)) {
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
    pub(crate) fn kill_unit(&self) -> io::Result<()> {
        let Some(unit) = &self.unit else { return Ok(()) };
        match fs::write(unit.join("cgroup.kill"), "1") {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Host pids of the processes in the app's unit (its unified cgroup).
    pub(crate) fn unit_processes(&self) -> Vec<i32> {
        let Some(unit) = &self.unit else { return Vec::new() };
        fs::read_to_string(unit.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Whether the kernel OOM-killed a process of this app (v1 `oom_kill` counter).
    pub(crate) fn oom_killed(&self) -> bool {
        if let Some(d) = self.v2_dir() {
            return super::v2::oom_kills(&d) > 0;
        }
        let Some(d) = self.dir("memory") else { return false };
        fs::read_to_string(d.join("memory.oom_control"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("oom_kill "))
            .any(|n| n.trim().parse::<u64>().unwrap_or(0) > 0)
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

    #[test]
    fn an_app_is_out_of_its_cgroups_where_its_process_is_not_in_them_nor_below() {
        let layout = Layout::parse(
            "4:memory:/\n3:cpu,cpuacct:/\n0::/\n",
            "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
             36 31 0:33 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
             41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
        );
        let subs =
            super::super::pod::Subcgroups { controllers: "rktlet/rktlet-u".into(), tracking: "rktlet/rktlet-u".into() };
        let a = AppCgroup::new(&layout, &subs, "0-web");
        let unit = "0::/rktlet/rktlet-u/payload/system.slice/0-web.service\n";
        let placed = format!("4:memory:/rktlet/rktlet-u/app-0-web\n3:cpu,cpuacct:/rktlet/rktlet-u/app-0-web\n{unit}");
        assert!(a.out_of(&layout, &placed).is_empty(), "in place");
        // a privileged app's own cgroup below its own (docker in docker): still in
        let nested = placed.replace("memory:/rktlet/rktlet-u/app-0-web", "memory:/rktlet/rktlet-u/app-0-web/inner");
        assert!(a.out_of(&layout, &nested).is_empty(), "below its own");
        // moved to the root by the node's systemd, or out of this namespace's view
        let moved = placed.replace("3:cpu,cpuacct:/rktlet/rktlet-u/app-0-web", "3:cpu,cpuacct:/");
        assert_eq!(a.out_of(&layout, &moved), ["cpu"]);
        let outside = placed.replace("4:memory:/rktlet/rktlet-u/app-0-web", "4:memory:/../..");
        assert_eq!(a.out_of(&layout, &outside), ["memory"]);
        // a sibling whose name begins with the app's is not the app's
        let sibling = placed.replace("memory:/rktlet/rktlet-u/app-0-web", "memory:/rktlet/rktlet-u/app-0-web2");
        assert_eq!(a.out_of(&layout, &sibling), ["memory"]);
        assert!(layout.cgroups_of("4:memory:/../x\n").is_empty(), "a path out of the namespace names nothing");
    }

    #[test]
    fn v1_refuses_what_it_has_no_controller_for() {
        let layout = Layout::parse(
            "4:memory:/\n3:cpuset:/\n0::/\n",
            "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
             39 31 0:36 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n\
             41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
        );
        let cpuset = Limits { cpuset_cpus: Some("0".into()), ..Default::default() };
        assert!(cpuset.validate_on(Some(&layout)).is_ok());
        // kubelet's zero limit for each page size of the node: nothing to limit, kept
        let zero = Limits { hugepages: [("2MB".to_string(), 0)].into(), ..Default::default() };
        assert!(zero.validate_on(Some(&layout)).is_ok());
        let huge = Limits { hugepages: [("2MB".to_string(), 4 << 20)].into(), ..Default::default() };
        let e = huge.validate_on(Some(&layout)).expect_err("no hugetlb");
        assert!(e.contains("hugepage_limits") && e.contains("hugetlb"), "{e}");
        let no_cpuset =
            Layout::parse("4:memory:/\n0::/\n", "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
        assert!(cpuset.validate_on(Some(&no_cpuset)).expect_err("no cpuset").contains("cpuset"));
        let a = AppCgroup::new(
            &layout,
            &super::super::pod::Subcgroups { controllers: "p".into(), tracking: "p".into() },
            "0-web",
        );
        assert_eq!(a.dir("cpuset"), Some(&PathBuf::from("/sys/fs/cgroup/cpuset/p/app-0-web")));
    }
}
