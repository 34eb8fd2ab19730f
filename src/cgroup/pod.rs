//! A pod's own cgroup on the host, named after the CRI cgroup parent.
//!
//! cgroupfs driver: `<parent>/rktlet-<uuid>` in every mounted hierarchy
//! (v1 controllers, `name=systemd`, the unified one). The sandbox process
//! joins it before exec'ing nspawn, so nspawn's `payload/` and `supervisor/`
//! split and everything in the pod land under it. Hierarchies that are listed
//! but mounted nowhere are skipped.
//!
//! systemd driver: the unit `rktlet-<uuid>.service` in `Slice=<parent>`
//! places the pod; here we only compute the resulting path.

use super::{Hierarchy, Layout};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Parent used when the request names none (CLI use).
pub(crate) const DEFAULT_PARENT: &str = "rktlet";

/// The unit name a pod runs under with the systemd driver.
pub(crate) fn unit_name(uuid: &str) -> String {
    format!("rktlet-{uuid}.service")
}

/// Expands a systemd slice name into its cgroup path, as systemd nests
/// dashed slices: `kubepods-besteffort-pod1.slice` ->
/// `kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice`.
pub(crate) fn expand_slice(slice: &str) -> Result<String, String> {
    let name = slice.strip_suffix(".slice").ok_or_else(|| format!("{slice:?} is not a systemd slice name"))?;
    if name == "-" || name.is_empty() {
        return Ok(String::new());
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") || name.contains('/') {
        return Err(format!("invalid slice name {slice:?}"));
    }
    let mut path = Vec::new();
    let mut prefix = String::new();
    for part in name.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        path.push(format!("{prefix}.slice"));
    }
    Ok(path.join("/"))
}

/// The pod's cgroup path relative to each hierarchy root (rkt's `subcgroup`).
pub(crate) fn subcgroup(parent: &str, uuid: &str, systemd_driver: bool) -> Result<String, String> {
    if systemd_driver {
        let slice = if parent.is_empty() { "system.slice" } else { base_name(parent) };
        let base = expand_slice(slice)?;
        return Ok(join_rel(&base, &unit_name(uuid)));
    }
    let parent = parent.trim_matches('/');
    if parent.split('/').any(|c| c == ".." || c == ".") {
        return Err(format!("invalid cgroup parent {parent:?}"));
    }
    let parent = if parent.is_empty() { DEFAULT_PARENT } else { parent };
    Ok(join_rel(parent, &format!("rktlet-{uuid}")))
}

/// The slice a systemd-driver cgroup parent names: kubelet sends the slice
/// itself (`kubepods-burstable-pod1.slice`), critest a path (`/test.slice`);
/// systemd's `Slice=` needs the name (a path would be read as a mount unit).
pub(crate) fn slice_name(parent: &str) -> &str {
    base_name(parent)
}

fn base_name(p: &str) -> &str {
    p.trim_end_matches('/').rsplit('/').next().unwrap_or(p)
}

fn join_rel(a: &str, b: &str) -> String {
    if a.is_empty() { b.to_string() } else { format!("{a}/{b}") }
}

pub(crate) use rkt::pod::Subcgroups;

/// The pod's cgroup directories, one per mounted hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodCgroup {
    pub subcgroup: String,
    pub dirs: Vec<PathBuf>,
}

impl PodCgroup {
    /// The directories of `subcgroup` in every mounted hierarchy of `layout`.
    pub(crate) fn new(layout: &Layout, subcgroup: &str) -> Self {
        let dirs =
            layout.hierarchies.iter().filter_map(|h: &Hierarchy| h.mount.as_ref().map(|m| m.join(subcgroup))).collect();
        PodCgroup { subcgroup: subcgroup.to_string(), dirs }
    }

    /// Every hierarchy, each at the pod's path for its kind.
    pub(crate) fn of_pod(layout: &Layout, subs: &Subcgroups) -> Self {
        let mut cg = Self::select(layout, &subs.controllers, false);
        cg.dirs.extend(Self::select(layout, &subs.tracking, true).dirs);
        cg
    }

    /// Only the hierarchies that track processes without controllers (the
    /// unified one and `name=systemd`): what nspawn needs before it starts.
    pub(crate) fn tracking(layout: &Layout, subcgroup: &str) -> Self {
        Self::select(layout, subcgroup, true)
    }

    /// Only the v1 controller hierarchies (cpu, memory, pids, ...): where
    /// limits and accounting live. A pod can be moved into these after it
    /// booted without disturbing its systemd (pod-boot-fast.md §5.3).
    pub(crate) fn controllers(layout: &Layout, subcgroup: &str) -> Self {
        Self::select(layout, subcgroup, false)
    }

    fn select(layout: &Layout, subcgroup: &str, tracking: bool) -> Self {
        let dirs = layout
            .hierarchies
            .iter()
            .filter(|h| (h.is_unified() || h.controllers.iter().any(|c| c == "name=systemd")) == tracking)
            .filter_map(|h| h.mount.as_ref().map(|m| m.join(subcgroup)))
            .collect();
        PodCgroup { subcgroup: subcgroup.to_string(), dirs }
    }

    /// Moves processes into every directory (a process that exited meanwhile is skipped).
    pub(crate) fn adopt(&self, pids: &[i32]) -> io::Result<()> {
        for dir in &self.dirs {
            let procs = dir.join("cgroup.procs");
            for pid in pids {
                match fs::write(&procs, pid.to_string()) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => {
                        return Err(io::Error::new(e.kind(), format!("moving {pid} into {}: {e}", dir.display())));
                    }
                }
            }
        }
        Ok(())
    }

    /// Creates the directories (and parents), filling empty cpuset files from
    /// the parent so tasks can join.
    pub(crate) fn create(&self) -> io::Result<()> {
        for dir in &self.dirs {
            create_with_cpuset(dir)?;
        }
        Ok(())
    }

    /// Moves the calling process into the pod cgroup in every hierarchy.
    /// Async-signal-safe enough for `pre_exec`: only open/write/close.
    pub(crate) fn join_self(&self) -> io::Result<()> {
        for dir in &self.dirs {
            fs::write(dir.join("cgroup.procs"), b"0")
                .map_err(|e| io::Error::new(e.kind(), format!("joining {}: {e}", dir.display())))?;
        }
        Ok(())
    }

    /// Every pid in the pod cgroup tree, from the first hierarchy that has any.
    pub(crate) fn pids(&self) -> Vec<i32> {
        for dir in &self.dirs {
            let mut pids = Vec::new();
            collect_pids(dir, &mut pids);
            if !pids.is_empty() {
                return pids;
            }
        }
        Vec::new()
    }

    /// SIGKILLs every process in the pod cgroup tree (all hierarchies).
    pub(crate) fn kill_all(&self) {
        for pid in self.pids() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// Removes the pod cgroup trees, deepest first. Missing dirs are fine;
    /// a dir still holding processes fails with EBUSY.
    pub(crate) fn remove(&self) -> io::Result<()> {
        // (no app of the pod is put back meanwhile)
        let _held = super::writes();
        let mut first_err = None;
        for dir in &self.dirs {
            if let Err(e) = remove_tree(dir)
                && e.kind() != io::ErrorKind::NotFound
            {
                first_err.get_or_insert(io::Error::new(e.kind(), format!("removing {}: {e}", dir.display())));
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

fn collect_pids(dir: &Path, out: &mut Vec<i32>) {
    if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                collect_pids(&e.path(), out);
            }
        }
    }
}

fn remove_tree(dir: &Path) -> io::Result<()> {
    for e in fs::read_dir(dir)?.flatten() {
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            remove_tree(&e.path())?;
        }
    }
    fs::remove_dir(dir)
}

/// `mkdir -p` for a cgroup, copying `cpuset.cpus`/`cpuset.mems` down from the
/// parent into every level that has them empty (v1 cpuset starts them
/// empty). A level another process made just now (the daemon and a sandbox
/// make the same pod cgroup) is filled here too: a process cannot join a
/// cpuset cgroup before both files are (ENOSPC).
pub(super) fn create_with_cpuset(dir: &Path) -> io::Result<()> {
    if !dir.is_dir() {
        let parent = dir.parent().ok_or_else(|| io::Error::other("cgroup dir without parent"))?;
        create_with_cpuset(parent)?;
        match fs::create_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io::Error::new(e.kind(), format!("creating {}: {e}", dir.display()))),
        }
    }
    fill_cpuset(dir)
}

/// Copies the parent's `cpuset.cpus`/`cpuset.mems` into `dir` where they are
/// empty (filling empty ancestors first); nothing outside v1 cpuset.
fn fill_cpuset(dir: &Path) -> io::Result<()> {
    // cgroup v2: an empty cpuset means the parent's (and the root has none to copy)
    if dir.join("cgroup.controllers").exists() {
        return Ok(());
    }
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let own = dir.join(file);
        if !own.exists() || !fs::read_to_string(&own).map(|s| s.trim().is_empty()).unwrap_or(false) {
            continue;
        }
        let parent = dir.parent().ok_or_else(|| io::Error::other("cgroup dir without parent"))?;
        let mut from_parent = fs::read_to_string(parent.join(file))?;
        if from_parent.trim().is_empty() {
            fill_cpuset(parent)?;
            from_parent = fs::read_to_string(parent.join(file))?;
        }
        fs::write(&own, from_parent.trim())?;
    }
    Ok(())
}

/// Moves a pod's sandbox process `pid` into the pod's cgroup (made first),
/// as `app sandbox` would move itself: only the tracking hierarchies when
/// `tracking_only` (the daemon adds the controllers while the pod boots).
pub(crate) fn place_sandbox(parent: &str, uuid: &str, tracking_only: bool, pid: i32) -> io::Result<()> {
    let cg = sandbox_cgroup(parent, uuid, tracking_only)?;
    cg.create()?;
    cg.adopt(&[pid])
}

/// Removes what [`place_sandbox`] made, for a sandbox that failed before
/// nspawn (its process gone): it may have moved in after the sandbox took
/// its cgroup down.
pub(crate) fn unplace_sandbox(parent: &str, uuid: &str, tracking_only: bool) -> io::Result<()> {
    sandbox_cgroup(parent, uuid, tracking_only)?.remove()
}

fn sandbox_cgroup(parent: &str, uuid: &str, tracking_only: bool) -> io::Result<PodCgroup> {
    let layout = Layout::cached()?;
    let sub = subcgroup(parent, uuid, false).map_err(io::Error::other)?;
    Ok(if tracking_only { PodCgroup::tracking(layout, &sub) } else { PodCgroup::new(layout, &sub) })
}

/// The cgroup below a pod's own, in the v1 devices hierarchy, that holds the
/// pod's own processes (nspawn, its systemd, the log writer) to the devices
/// they use; the pod's cgroup keeps the node's list for its apps'.
pub(crate) const OWN_DEVICES: &str = "rktlet-pod";

/// Holds the pod's own processes (nspawn, its systemd, the log writer) to
/// the devices they use (`super::devices::Allowed::pod_own`), leaving the
/// pod's cgroup as it is for its apps. On cgroup v1: those in its devices
/// cgroup itself (at `subs.controllers`) move into [`OWN_DEVICES`], made
/// with the list before any process is in it. On pure cgroup v2: the log
/// writer joins nspawn in `supervisor/`, and that cgroup and the pod
/// systemd's `payload/init.scope` get rktlet's device program
/// (`super::device_program`; a process the pod's systemd starts for an app
/// leaves it for the app's unit before it runs).
pub(crate) fn hold_own_devices(layout: &Layout, subs: &Subcgroups) -> io::Result<()> {
    if layout.is_pure_v2() {
        return hold_own_devices_v2(layout, &subs.tracking);
    }
    let controllers = subs.controllers.as_str();
    let Some(mount) =
        layout.v1_controllers().find(|h| h.controllers.iter().any(|c| c == "devices")).and_then(|h| h.mount.as_ref())
    else {
        return Ok(());
    };
    let pod = mount.join(controllers);
    let own = pod.join(OWN_DEVICES);
    match fs::create_dir(&own) {
        Ok(()) => super::devices::Allowed::pod_own().write_v1(&own)?,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io::Error::new(e.kind(), format!("creating {}: {e}", own.display()))),
    }
    move_all(&pod, &own)
}

fn hold_own_devices_v2(layout: &Layout, tracking: &str) -> io::Result<()> {
    let Some(root) = layout.hierarchies.first().and_then(|h| h.mount.as_ref()) else { return Ok(()) };
    let pod = root.join(tracking);
    let supervisor = pod.join("supervisor");
    let init = pod.join("payload/init.scope");
    for dir in [&supervisor, &init] {
        if !dir.is_dir() {
            return Err(io::Error::other(format!("{} is missing: the pod's cgroups are not nspawn's", dir.display())));
        }
    }
    let program = super::device_program::load(&super::devices::Allowed::pod_own())?;
    for dir in [&supervisor, &init] {
        super::device_program::attach(&program, dir)?;
    }
    // the log writer, in the pod's cgroup itself
    move_all(&pod, &supervisor)
}

/// Moves the processes of cgroup `from` itself into `to` until none is left
/// (a process forked meanwhile shows on the next pass; one that exited is skipped).
fn move_all(from: &Path, to: &Path) -> io::Result<()> {
    for _ in 0..20 {
        let pids = fs::read_to_string(from.join("cgroup.procs"))
            .map_err(|e| io::Error::new(e.kind(), format!("{}/cgroup.procs: {e}", from.display())))?;
        let pids: Vec<&str> = pids.lines().map(str::trim).filter(|p| !p.is_empty()).collect();
        if pids.is_empty() {
            return Ok(());
        }
        for pid in pids {
            match fs::write(to.join("cgroup.procs"), pid) {
                Err(e) if e.raw_os_error() != Some(libc::ESRCH) => {
                    return Err(io::Error::new(e.kind(), format!("moving {pid} into {}: {e}", to.display())));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Moves every process of a pod (found in its tracking cgroup) into its v1
/// controller cgroups below `parent`, repeating until no newcomer is left
/// behind (processes forked later inherit the controllers of their parent).
/// For a pod in a systemd unit (`systemd_unit`), the unit's cgroup below the
/// `parent` slice: systemd has placed it in the controllers it manages
/// (Delegate=yes), this adds those it leaves alone (cpuset, freezer,
/// hugetlb, ...), as runc's systemd driver joins them.
pub(crate) fn adopt_controllers(parent: &str, uuid: uuid::Uuid, systemd_unit: bool) -> io::Result<()> {
    let layout = Layout::cached()?;
    if layout.v1_controllers().next().is_none() {
        // pure v2: the pod's one cgroup is already its controllers' cgroup
        return Ok(());
    }
    let sub = subcgroup(parent, &uuid.to_string(), systemd_unit).map_err(io::Error::other)?;
    move_controllers(layout, &sub, &sub)
}

/// Creates the pod's controller cgroups at `to` and moves into them every
/// process of the pod's tracking cgroup at `tracking`.
pub(crate) fn move_controllers(layout: &Layout, tracking: &str, to: &str) -> io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_expand_like_systemd() {
        assert_eq!(
            expand_slice("kubepods-besteffort-pod12.slice").as_deref(),
            Ok("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12.slice")
        );
        assert_eq!(expand_slice("system.slice").as_deref(), Ok("system.slice"));
        assert_eq!(expand_slice("-.slice").as_deref(), Ok(""));
        assert!(expand_slice("kubepods").is_err());
        assert!(expand_slice("a--b.slice").is_err());
    }

    #[test]
    fn slice_name_from_a_path_or_a_name() {
        assert_eq!(slice_name("/test.slice"), "test.slice");
        assert_eq!(slice_name("/kubepods.slice/kubepods-burstable.slice/"), "kubepods-burstable.slice");
        assert_eq!(slice_name("kubepods-besteffort-pod1.slice"), "kubepods-besteffort-pod1.slice");
    }

    #[test]
    fn subcgroup_per_driver() {
        let u = "0b9e5c1e-0000-4000-8000-000000000001";
        assert_eq!(
            subcgroup("/kubepods/burstable/pod1", u, false).as_deref(),
            Ok("kubepods/burstable/pod1/rktlet-0b9e5c1e-0000-4000-8000-000000000001")
        );
        assert_eq!(subcgroup("", u, false).map(|s| s.starts_with("rktlet/rktlet-")), Ok(true));
        assert!(subcgroup("/a/../b", u, false).is_err());
        assert_eq!(
            subcgroup("kubepods-burstable-pod1.slice", u, true).as_deref(),
            Ok(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/rktlet-0b9e5c1e-0000-4000-8000-000000000001.service"
            )
        );
    }

    #[test]
    fn tracking_and_controller_hierarchies() {
        let layout = Layout::parse(
            "9:name=systemd:/\n4:memory:/\n2:cpu,cpuacct:/\n0::/\n",
            "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n\
             35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
             32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
             41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
        );
        let t = PodCgroup::tracking(&layout, "p");
        assert_eq!(t.dirs, [PathBuf::from("/sys/fs/cgroup/systemd/p"), PathBuf::from("/sys/fs/cgroup/unified/p")]);
        let c = PodCgroup::controllers(&layout, "p");
        assert_eq!(c.dirs, [PathBuf::from("/sys/fs/cgroup/memory/p"), PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/p")]);
        assert_eq!(PodCgroup::new(&layout, "p").dirs.len(), 4);
    }

    #[test]
    fn pod_cgroup_skips_unmounted_hierarchies() {
        let layout = Layout::parse(
            "4:memory:/\n3:net_cls:/\n0::/\n",
            "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
        );
        let pc = PodCgroup::new(&layout, "rktlet/rktlet-x");
        assert_eq!(
            pc.dirs,
            [
                PathBuf::from("/sys/fs/cgroup/memory/rktlet/rktlet-x"),
                PathBuf::from("/sys/fs/cgroup/unified/rktlet/rktlet-x")
            ]
        );
    }
}
