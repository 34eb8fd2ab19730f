//! Pod and app cgroups: which hierarchies the host has and where they are
//! mounted, and the cgroup driver kubelet must be told about.
//!
//! Hosts differ: pure cgroup v2, v1 "hybrid" (v1 controllers plus a
//! controller-less v2 at `unified`), and v1 hierarchies that a process is a
//! member of but that are mounted nowhere. Everything here is read from
//! `/proc/self/cgroup` and `/proc/self/mountinfo`; nothing is assumed.

pub(crate) mod app;
pub(crate) mod device_program;
pub(crate) mod devices;
pub(crate) mod limits;
pub(crate) mod pod;
pub(crate) mod pod_limits;
pub(crate) mod stats;
pub mod v2;
pub(crate) mod warm;

use std::fmt;
use std::fs;
use std::io;
use std::path::PathBuf;

/// How pod cgroups are named: systemd slices or plain cgroupfs paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Systemd,
    Cgroupfs,
}

impl Driver {
    /// systemd when the host's PID 1 is systemd, cgroupfs otherwise.
    pub(crate) fn detect(pid1_is_systemd: bool) -> Self {
        if pid1_is_systemd { Driver::Systemd } else { Driver::Cgroupfs }
    }

    /// [`Driver::detect`], unless `RKTLET_CGROUP_DRIVER=cgroupfs` asks for
    /// plain cgroup paths on a systemd host (pods then run detached, not
    /// in units of the node's systemd; kubelet must be told `--cgroup-driver=cgroupfs`).
    /// `systemd` is only honoured where PID 1 is systemd.
    pub fn chosen(pid1_is_systemd: bool) -> Self {
        match std::env::var("RKTLET_CGROUP_DRIVER").as_deref() {
            Ok("cgroupfs") => Driver::Cgroupfs,
            _ => Self::detect(pid1_is_systemd),
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Driver::Systemd => "systemd",
            Driver::Cgroupfs => "cgroupfs",
        }
    }
}

impl fmt::Display for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One hierarchy this process belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// Hierarchy id from `/proc/self/cgroup` (0 for the unified hierarchy).
    pub id: u32,
    /// Controllers (`cpu,cpuacct`, `name=systemd`); empty for the unified hierarchy.
    pub controllers: Vec<String>,
    /// This process's cgroup path inside the hierarchy.
    pub path: String,
    /// Where the hierarchy's root is mounted, if anywhere.
    pub mount: Option<PathBuf>,
}

impl Hierarchy {
    pub(crate) fn is_unified(&self) -> bool {
        self.id == 0 && self.controllers.is_empty()
    }
}

/// Held while an app is put back in its cgroups (an exec, the daemon's
/// periodic check), while an app's limits change (UpdateContainerResources)
/// and while a pod's cgroups are removed: of two that find an app moved
/// out, one puts it back (the other then finds it in place), none writes
/// limits an update is changing, and none makes again the cgroups of a pod
/// being removed.
static WRITES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`WRITES`] (a panic while it was held leaves nothing half done
/// that a later holder must know of).
pub(crate) fn writes() -> std::sync::MutexGuard<'static, ()> {
    WRITES.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The host's cgroup layout as seen by this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub hierarchies: Vec<Hierarchy>,
}

impl Layout {
    /// The layout read once per process, for request paths: cgroup
    /// hierarchies are mounted at boot, and reading `/proc/self/mountinfo`
    /// on every call grows with the mounts of every pod. A hierarchy mounted
    /// later is seen after a daemon restart.
    pub(crate) fn cached() -> io::Result<&'static Layout> {
        static LAYOUT: std::sync::OnceLock<Layout> = std::sync::OnceLock::new();
        if let Some(l) = LAYOUT.get() {
            return Ok(l);
        }
        let layout = Self::read()?;
        Ok(LAYOUT.get_or_init(|| layout))
    }

    pub fn read() -> io::Result<Self> {
        let cgroup = fs::read_to_string("/proc/self/cgroup")?;
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")?;
        Ok(Self::parse(&cgroup, &mountinfo))
    }

    /// Builds the layout from the text of `/proc/self/cgroup` and `/proc/self/mountinfo`.
    pub(crate) fn parse(cgroup: &str, mountinfo: &str) -> Self {
        let mounts = parse_cgroup_mounts(mountinfo);
        let hierarchies = cgroup
            .lines()
            .filter_map(|line| {
                let mut parts = line.splitn(3, ':');
                let id = parts.next()?.parse().ok()?;
                let ctrls = parts.next()?;
                let path = parts.next()?.to_string();
                let controllers: Vec<String> = ctrls.split(',').filter(|c| !c.is_empty()).map(str::to_string).collect();
                let mount = mounts
                    .iter()
                    .find(|m| {
                        if controllers.is_empty() {
                            m.v2
                        } else {
                            !m.v2 && controllers.iter().all(|c| m.options.iter().any(|o| o == c))
                        }
                    })
                    .map(|m| m.mount_point.clone());
                Some(Hierarchy { id, controllers, path, mount })
            })
            .collect();
        Layout { hierarchies }
    }

    /// Where a process is in each mounted hierarchy, from the text of its
    /// `/proc/<pid>/cgroup` as this process reads it: the hierarchy and the
    /// directory under its mount. A cgroup outside this process's cgroup
    /// namespace (its path climbs with `..`) names no directory of the
    /// mount and is left out.
    pub(crate) fn cgroups_of<'a>(&'a self, proc_cgroup: &str) -> Vec<(&'a Hierarchy, PathBuf)> {
        proc_cgroup
            .lines()
            .filter_map(|line| {
                let mut parts = line.splitn(3, ':');
                let id: u32 = parts.next()?.parse().ok()?;
                let controllers = parts.next()?;
                let path = parts.next()?.trim_start_matches('/');
                if path.split('/').any(|c| c == "..") {
                    return None;
                }
                let h = self.hierarchies.iter().find(|h| h.id == id && h.controllers.join(",") == controllers)?;
                Some((h, h.mount.as_ref()?.join(path)))
            })
            .collect()
    }

    /// Whether container limits are the business of the pods' systemd (unit
    /// properties): a host whose memory controller is on the unified
    /// hierarchy (pure cgroup v2), where nspawn delegates the pod's subtree.
    /// On v1 and hybrid hosts the controllers inside a pod are read-only and
    /// the daemon writes the limits itself (`app::AppCgroup`).
    pub(crate) fn limits_through_systemd(&self) -> bool {
        if self.v1_controllers().any(|h| h.controllers.iter().any(|c| c == "memory")) {
            return false;
        }
        self.hierarchies.iter().filter(|h| h.is_unified()).filter_map(|h| h.mount.as_ref()).any(|m| {
            std::fs::read_to_string(m.join("cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
        })
    }

    /// The unified hierarchy's mount on a pure cgroup v2 host whose root
    /// offers the memory controller (the host's controllers are on v2):
    /// where pod and app limits go.
    pub fn v2_root(&self) -> Option<&std::path::Path> {
        if !self.is_pure_v2() {
            return None;
        }
        let root = self.hierarchies[0].mount.as_deref()?;
        v2::available(root).iter().any(|c| c == "memory").then_some(root)
    }

    /// v1 controller hierarchies (not `name=` ones) that are mounted.
    pub fn v1_controllers(&self) -> impl Iterator<Item = &Hierarchy> {
        self.hierarchies.iter().filter(|h| h.mount.is_some() && h.controllers.iter().any(|c| !c.starts_with("name=")))
    }

    /// Hierarchies listed for this process but not mounted anywhere; callers skip them.
    #[cfg(test)]
    pub(crate) fn unmounted(&self) -> impl Iterator<Item = &Hierarchy> {
        self.hierarchies.iter().filter(|h| h.mount.is_none())
    }

    /// True when the unified hierarchy is the only one (pure cgroup v2).
    pub fn is_pure_v2(&self) -> bool {
        self.hierarchies.len() == 1 && self.hierarchies[0].is_unified()
    }

    /// What holds a container to its devices on this host (`devices`).
    pub(crate) fn devices_mechanism(&self) -> devices::Mechanism {
        if self.is_pure_v2() && self.hierarchies[0].mount.is_some() {
            devices::Mechanism::V2Bpf
        } else if self.v1_controllers().any(|h| h.controllers.iter().any(|c| c == "devices")) {
            devices::Mechanism::V1Cgroup
        } else {
            devices::Mechanism::Nothing
        }
    }
}

struct CgroupMount {
    mount_point: PathBuf,
    v2: bool,
    options: Vec<String>,
}

fn parse_cgroup_mounts(mountinfo: &str) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            let fstype = *post.first()?;
            let v2 = match fstype {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            // only mounts of a hierarchy's root describe where the whole hierarchy lives
            if pre.get(3) != Some(&"/") {
                return None;
            }
            let mount_point = PathBuf::from(unescape_mount(pre.get(4)?));
            let options = post.get(2).map(|o| o.split(',').map(str::to_string).collect()).unwrap_or_default();
            Some(CgroupMount { mount_point, v2, options })
        })
        .collect()
}

/// The app's unit cgroup relative to the hierarchy root, below the pod's
/// tracking cgroup (nspawn's `payload`, the pod systemd's `system.slice`).
pub fn unit_subpath(tracking: &str, app: &str) -> String {
    format!("{}/payload/system.slice/{app}.service", tracking.trim_end_matches('/'))
}

/// Whether a cgroup hierarchy in `mountinfo` (the text of
/// `/proc/self/mountinfo`) is mounted with the kernel's `favordynmods`
/// option (Linux 6.1 and later). It is global: with it, moving a process
/// between cgroups never waits for an RCU grace period (forks and exits pay
/// a shared counter instead), and [`warm`] has nothing to do.
pub(crate) fn favors_dynmods(mountinfo: &str) -> bool {
    parse_cgroup_mounts(mountinfo).iter().any(|m| m.options.iter().any(|o| o == "favordynmods"))
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
pub(crate) fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_CGROUP: &str = "9:name=systemd:/\n8:pids:/\n4:memory:/job/abc\n2:cpu,cpuacct:/\n1:net_cls:/\n0::/\n";
    const HYBRID_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:32 /job /mnt/some\\040dir rw - cgroup cgroup rw,memory
";

    #[test]
    fn hybrid_layout_with_an_unmounted_hierarchy() {
        let l = Layout::parse(HYBRID_CGROUP, HYBRID_MOUNTS);
        assert_eq!(l.hierarchies.len(), 6);
        let mem = l.hierarchies.iter().find(|h| h.controllers == ["memory"]).expect("memory");
        assert_eq!(mem.path, "/job/abc");
        assert_eq!(mem.mount.as_deref(), Some(std::path::Path::new("/sys/fs/cgroup/memory")));
        let cpu = l.hierarchies.iter().find(|h| h.id == 2).expect("cpu");
        assert_eq!(cpu.mount.as_deref(), Some(std::path::Path::new("/sys/fs/cgroup/cpu,cpuacct")));
        let unified = l.hierarchies.iter().find(|h| h.is_unified()).expect("unified");
        assert_eq!(unified.mount.as_deref(), Some(std::path::Path::new("/sys/fs/cgroup/unified")));
        let unmounted: Vec<_> = l.unmounted().map(|h| h.controllers.join(",")).collect();
        assert_eq!(unmounted, ["net_cls"]);
        let v1: Vec<_> = l.v1_controllers().map(|h| h.id).collect();
        assert_eq!(v1, [8, 4, 2]);
        assert!(!l.is_pure_v2());
    }

    #[test]
    fn pure_v2_layout() {
        let l = Layout::parse("0::/user.slice\n", "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n");
        assert!(l.is_pure_v2());
        assert_eq!(l.hierarchies[0].path, "/user.slice");
    }

    #[test]
    fn favordynmods_is_read_from_any_cgroup_mount() {
        assert!(!favors_dynmods(HYBRID_MOUNTS));
        let on = HYBRID_MOUNTS.replace("cgroup2 cgroup2 rw", "cgroup2 cgroup2 rw,favordynmods");
        assert!(favors_dynmods(&on));
        // the option of another file system does not count
        assert!(!favors_dynmods("60 23 0:50 / /mnt rw - tmpfs tmpfs rw,favordynmods\n"));
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mount("/mnt/some\\040dir"), "/mnt/some dir");
        assert_eq!(unescape_mount("/plain"), "/plain");
        assert_eq!(unescape_mount("/trail\\04"), "/trail\\04");
    }

    #[test]
    fn driver_follows_init() {
        assert_eq!(Driver::detect(true), Driver::Systemd);
        assert_eq!(Driver::detect(false).as_str(), "cgroupfs");
    }

    #[test]
    fn reads_this_host() {
        let l = Layout::read().expect("read /proc");
        assert!(!l.hierarchies.is_empty());
    }
}
