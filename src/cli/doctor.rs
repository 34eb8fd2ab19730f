//! `rktlet doctor`: checks a host for what rktlet needs and says how to fix
//! what is missing. Every check reads the host as the daemon would (same
//! cgroup layout parser, same CNI loader, same nspawn lookup) and a few try
//! the real thing (an overlay mount in the data dir).

use crate::config::Config;
use serde::Serialize;
use std::fs;
use std::path::Path;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Outcome {
    Ok,
    /// Works, with a limit the operator should know about.
    Warn,
    /// rktlet cannot run pods (or a part of them) until fixed.
    Fail,
}

/// One check: what was looked at, what was found, and the fix if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Check {
    pub name: &'static str,
    pub outcome: Outcome,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Check { name, outcome: Outcome::Ok, detail: detail.into(), fix: None }
    }
    fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Check { name, outcome: Outcome::Warn, detail: detail.into(), fix: Some(fix.into()) }
    }
    fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Check { name, outcome: Outcome::Fail, detail: detail.into(), fix: Some(fix.into()) }
    }
}

/// Below this much free space in the data dir a pull of a common image fails.
const MIN_FREE_BYTES: u64 = 1 << 30;

/// Runs every check against `config` (the daemon's effective configuration).
pub(crate) fn run(config: &Config) -> Vec<Check> {
    let mut out = vec![kernel_overlay(), namespaces()];
    out.extend(cgroups());
    out.push(nspawn());
    out.push(criu());
    out.push(init_system());
    out.push(cni(config));
    out.extend(data_dir(&config.data_dir));
    out.push(socket(&config.socket));
    out.push(privileges());
    out.push(own_seccomp(&fs::read_to_string("/proc/self/status").unwrap_or_default()));
    out.push(security_modules(crate::stage1::lsm::Lsms::detect(), crate::stage1::apparmor::parser().is_some()));
    out
}

/// What AppArmor and SELinux mean for containers on this host.
fn security_modules(host: crate::stage1::lsm::Lsms, parser: bool) -> Check {
    let name = "security modules";
    let selinux = if host.selinux {
        "; SELinux is enabled: rktlet does not label, containers asking for SELinux labels are refused"
    } else {
        ""
    };
    match (host.apparmor, parser) {
        (true, true) => Check::ok(
            name,
            format!(
                "AppArmor is enforced: containers that are not privileged or unconfined run under                  rktlet-default, or the Localhost profile they name{selinux}"
            ),
        ),
        (true, false) => Check::fail(
            name,
            format!(
                "AppArmor is enforced but apparmor_parser is missing: rktlet cannot load its default                  profile, so containers that name no profile cannot be created{selinux}"
            ),
            "install the apparmor package (apt-get install apparmor)",
        ),
        (false, _) => Check::ok(
            name,
            format!("AppArmor is not enabled: no profile applies, Localhost profiles are refused{selinux}"),
        ),
    }
}

fn kernel_overlay() -> Check {
    let fs = fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if fs.lines().any(|l| l.split_whitespace().last() == Some("overlay")) {
        Check::ok("kernel: overlayfs", "overlay is a known filesystem")
    } else {
        Check::fail(
            "kernel: overlayfs",
            "overlay is not in /proc/filesystems: containers' root filesystems are overlay mounts",
            "modprobe overlay (and add it to /etc/modules-load.d/), or use a kernel with CONFIG_OVERLAY_FS",
        )
    }
}

fn namespaces() -> Check {
    let missing: Vec<&str> = ["mnt", "uts", "ipc", "net", "pid", "cgroup"]
        .into_iter()
        .filter(|ns| !Path::new("/proc/self/ns").join(ns).exists())
        .collect();
    if missing.is_empty() {
        Check::ok("kernel: namespaces", "mnt, uts, ipc, net, pid and cgroup namespaces are available")
    } else {
        Check::fail(
            "kernel: namespaces",
            format!("missing namespace types: {}", missing.join(", ")),
            "use a kernel built with CONFIG_NAMESPACES and the missing CONFIG_*_NS options",
        )
    }
}

fn cgroups() -> Vec<Check> {
    let layout = match crate::cgroup::Layout::read() {
        Ok(l) => l,
        Err(e) => return vec![Check::fail("cgroups", format!("cannot read the cgroup layout: {e}"), "mount /proc")],
    };
    let mut out = Vec::new();
    let unified = layout.hierarchies.iter().find(|h| h.is_unified());
    let v1: Vec<&crate::cgroup::Hierarchy> = layout.hierarchies.iter().filter(|h| !h.is_unified()).collect();
    let mounted_controllers: Vec<String> =
        v1.iter().filter(|h| h.mount.is_some()).flat_map(|h| h.controllers.iter().cloned()).collect();
    let v2_controllers = unified
        .and_then(|h| h.mount.as_ref())
        .and_then(|m| fs::read_to_string(m.join("cgroup.controllers")).ok())
        .unwrap_or_default();
    let v2 = if v2_controllers.trim().is_empty() { "none".to_string() } else { v2_controllers.trim().to_string() };
    let kind = if v1.is_empty() {
        format!("cgroup v2 only (controllers: {v2})")
    } else {
        format!("v1 controllers mounted: {}; cgroup2 controllers: {v2}", mounted_controllers.join(","))
    };
    let needed = ["cpu", "cpuacct", "memory", "pids"];
    let missing: Vec<&str> = needed
        .into_iter()
        .filter(|c| !mounted_controllers.iter().any(|m| m == c) && !v2_controllers.split_whitespace().any(|v| v == *c))
        .filter(|c| !(*c == "cpuacct" && v2_controllers.split_whitespace().any(|v| v == "cpu")))
        .collect();
    if missing.is_empty() {
        out.push(Check::ok("cgroups: controllers", format!("{kind}; cpu, memory and pids are usable")));
    } else {
        out.push(Check::fail(
            "cgroups: controllers",
            format!("{kind}; not mounted: {}: limits and stats need them", missing.join(", ")),
            "mount the v1 controllers under /sys/fs/cgroup, or enable them in cgroup2's subtree_control",
        ));
    }
    if v1.is_empty() {
        out.push(if layout.v2_root().is_some() {
            Check::ok(
                "cgroups: limits",
                "cgroup v2: container limits are enforced in each container's own cgroup (its unit's in \
                 the pod's systemd: memory.max, memory.swap.max, cpu.weight from shares, cpu.max, \
                 cpuset, hugetlb, and pids, memory.high, io and others through CRI's `unified` map), \
                 updated live; stats and OOM kills (OOMKilled, 137) are read there; the pod pool is off",
            )
        } else {
            Check::fail(
                "cgroups: limits",
                "cgroup v2 without the memory controller at its root: container limits cannot be enforced",
                "enable the controllers in /sys/fs/cgroup/cgroup.subtree_control (systemd does at boot)",
            )
        });
    }
    let unmounted: Vec<String> = v1.iter().filter(|h| h.mount.is_none()).map(|h| h.controllers.join(",")).collect();
    if !unmounted.is_empty() {
        out.push(Check::warn(
            "cgroups: unmounted hierarchies",
            format!("listed in /proc/self/cgroup but mounted nowhere: {}; rktlet skips them", unmounted.join("; ")),
            "nothing needed; mount them under /sys/fs/cgroup if pods should be placed in them too",
        ));
    }
    out.push(devices(layout.devices_mechanism()));
    out.push(migrations(&fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(), !v1.is_empty()));
    if !v1.is_empty() && v1.iter().all(|h| h.mount.is_none()) && unified.is_none() {
        out.push(Check::fail("cgroups: mounts", "no cgroup hierarchy is mounted", "mount cgroup2 on /sys/fs/cgroup"));
    }
    out
}

/// What holds containers to their device nodes here.
fn devices(mechanism: crate::cgroup::devices::Mechanism) -> Check {
    const NAME: &str = "cgroups: devices";
    match mechanism {
        crate::cgroup::devices::Mechanism::Nothing => Check::fail(
            NAME,
            format!("{mechanism}: a container with CAP_MKNOD can make and open a node of the node's disks"),
            "mount the v1 devices controller under /sys/fs/cgroup/devices, or boot with cgroup v2 only",
        ),
        m => Check::ok(
            NAME,
            format!("{m}; a container opens only the pseudo devices, terminals, /dev/net/tun and what it is given"),
        ),
    }
}

/// Whether moving a process between cgroups can wait for an RCU grace
/// period (`mountinfo`: the mounts' text; `v1`: a v1 hierarchy is mounted,
/// where the daemon itself moves each app).
fn migrations(mountinfo: &str, v1: bool) -> Check {
    const NAME: &str = "cgroups: process moves";
    if crate::cgroup::favors_dynmods(mountinfo) {
        return Check::ok(
            NAME,
            "a cgroup is mounted with favordynmods: moving a process waits for no RCU grace period",
        );
    }
    let kept = if v1 { " (rktlet keeps it short while a pod or container starts, not always)" } else { "" };
    Check::ok(
        NAME,
        format!(
            "favordynmods is off: the first process move after a quiet spell waits for an RCU grace period, \
             a few ms{kept}; it was most of StartContainer's slowest 1% here. For the shortest starts, remount \
             the cgroup2 mount with its options plus favordynmods (Linux 6.1 and later; forks and exits then \
             share a counter; on Linux 6.18 the effect stays until reboot)"
        ),
    )
}

fn nspawn() -> Check {
    let Some(path) = crate::stage1::host::find_in_path("systemd-nspawn") else {
        return Check::fail(
            "systemd-nspawn",
            "not found: every pod is a systemd-nspawn container",
            "apt-get install systemd-container",
        );
    };
    let version = std::process::Command::new(&path)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_default();
    let number: Option<u32> = version.split_whitespace().nth(1).and_then(|v| v.trim_start_matches('(').parse().ok());
    match number {
        Some(n) if n < 245 => Check::warn(
            "systemd-nspawn",
            format!("{} is {version}: rktlet is tested with 252", path.display()),
            "upgrade systemd-container to 245 or later (--network-namespace-path, --console=pipe)",
        ),
        _ => Check::ok("systemd-nspawn", format!("{}: {version}", path.display())),
    }
}

/// CRIU, which CheckpointContainer and a restore run: optional, as only
/// nodes that checkpoint containers need it (`criu check` as it runs here).
fn criu() -> Check {
    let Ok(path) = crate::container::checkpoint::criu_binary() else {
        return Check::warn(
            "criu",
            "not found: CheckpointContainer and restores fail; nothing else needs it",
            CRIU_FIX,
        );
    };
    match std::process::Command::new(&path).arg("check").output() {
        Ok(o) if o.status.success() => Check::ok("criu", format!("{}: criu check passes", path.display())),
        Ok(o) => criu_check_failed(&path, &String::from_utf8_lossy(&o.stderr), &String::from_utf8_lossy(&o.stdout)),
        Err(e) => Check::warn("criu", format!("{}: {e}", path.display()), CRIU_FIX),
    }
}

/// How to get a CRIU that runs on this node's kernel.
const CRIU_FIX: &str =
    "scripts/install-deps.sh criu (Debian's CRIU, built from source where it cannot run on this kernel)";

/// A failed `criu check`: its first error line says why.
fn criu_check_failed(path: &Path, stderr: &str, stdout: &str) -> Check {
    let why = stderr.lines().chain(stdout.lines()).find(|l| !l.trim().is_empty()).unwrap_or("no reason given");
    Check::warn(
        "criu",
        format!("{}: criu check fails ({why}): CheckpointContainer and restores fail", path.display()),
        CRIU_FIX,
    )
}

fn init_system() -> Check {
    let pid1_is_systemd = crate::stage1::host::pid1_is_systemd(Path::new("/"));
    let v1 = crate::cgroup::Layout::cached().is_ok_and(|l| !l.is_pure_v2());
    init_system_of(pid1_is_systemd, crate::cgroup::Driver::chosen(pid1_is_systemd), v1)
}

/// The init system check: PID 1 and the cgroup driver chosen (`v1`: the
/// host has v1 controller hierarchies).
fn init_system_of(pid1_is_systemd: bool, driver: crate::cgroup::Driver, v1: bool) -> Check {
    use crate::cgroup::Driver;
    match (pid1_is_systemd, driver) {
        (true, Driver::Systemd) => Check::ok(
            "init system",
            "PID 1 is systemd: pods run as units of the node's systemd, the cgroup driver is systemd \
             (tell kubelet --cgroup-driver=systemd); the pod pool is off (a booted pod cannot change units)",
        ),
        (true, Driver::Cgroupfs) if v1 => Check::warn(
            "init system",
            "PID 1 is systemd and RKTLET_CGROUP_DRIVER=cgroupfs (as this environment sets it; the daemon's \
             may differ): pods' cgroups are made beside systemd's, \
             and on cgroup v1 the node's systemd moves their processes into its own cgroups (and removes \
             the emptied ones) when it turns a controller on or off for its slices; rktlet puts an app \
             back in its cgroups on each exec into it, but its limits and stats are off meanwhile",
            "unset RKTLET_CGROUP_DRIVER (the systemd driver) and tell kubelet --cgroup-driver=systemd",
        ),
        (true, Driver::Cgroupfs) => Check::ok(
            "init system",
            "PID 1 is systemd, RKTLET_CGROUP_DRIVER=cgroupfs: pods are placed in cgroups by rktlet \
             (tell kubelet --cgroup-driver=cgroupfs)",
        ),
        (false, _) => Check::warn(
            "init system",
            "PID 1 is not systemd: pods are started detached (own process group) and placed in \
             cgroups by rktlet; the cgroup driver is cgroupfs",
            "tell kubelet --cgroup-driver=cgroupfs; nothing else is needed",
        ),
    }
}

fn cni(config: &Config) -> Check {
    let dir = &config.cni_conf_dir;
    let net = match crate::net::cni::default_network(dir) {
        Ok(n) => n,
        Err(e) => {
            return Check::fail(
                "CNI network",
                format!("{e}: pods on the pod network cannot start (host-network pods can)"),
                format!(
                    "write a conflist into {} (scripts/install.sh installs contrib/cni/10-rktlet.conflist)",
                    dir.display()
                ),
            );
        }
    };
    match net.check_plugins(&config.cni_bin_dirs) {
        Ok(()) => {
            Check::ok("CNI network", format!("{} from {}; its plugins are installed", net.name, net.path.display()))
        }
        Err(e) => Check::fail(
            "CNI network",
            e.to_string(),
            "apt-get install containernetworking-plugins, or put the plugins into a --cni-bin-dir",
        ),
    }
}

fn data_dir(wanted: &Path) -> Vec<Check> {
    let mut out = Vec::new();
    // a check changes nothing: a data dir not made yet is probed on the
    // filesystem it will be made on (its nearest existing ancestor)
    let Some(dir) = wanted.ancestors().find(|a| a.is_dir()) else {
        out.push(Check::fail("data dir", format!("no existing parent of {}", wanted.display()), "check --data-dir"));
        return out;
    };
    if dir != wanted {
        out.push(Check::ok(
            "data dir",
            format!("{} does not exist yet: rktlet serve makes it (checked on {})", wanted.display(), dir.display()),
        ));
    }
    out.push(match overlay_works(dir) {
        Ok(()) => Check::ok("data dir: overlay", format!("an overlay mounts in {}", dir.display())),
        Err(e) => Check::fail(
            "data dir: overlay",
            format!("an overlay mount in {} failed: {e}", dir.display()),
            "put the data dir (--data-dir) on ext4, xfs or tmpfs; overlay cannot stack on overlay or NFS",
        ),
    });
    match nix::sys::statvfs::statvfs(dir) {
        Ok(st) => {
            let free = st.blocks_available() * st.fragment_size();
            let text = format!("{:.1} GiB free in {}", free as f64 / (1u64 << 30) as f64, dir.display());
            out.push(if free < MIN_FREE_BYTES {
                Check::warn("data dir: free space", text, "free space or move --data-dir: image pulls need room")
            } else {
                Check::ok("data dir: free space", text)
            });
        }
        Err(e) => out.push(Check::warn("data dir: free space", format!("statvfs: {e}"), "check the filesystem")),
    }
    out
}

/// Mounts a one-layer overlay in a scratch dir under `dir`, then removes it.
fn overlay_works(dir: &Path) -> std::io::Result<()> {
    let p = dir.join(format!(".doctor-{}", uuid::Uuid::new_v4().simple()));
    let result = overlay_in(&p);
    let _ = fs::remove_dir_all(&p);
    result
}

fn overlay_in(p: &Path) -> std::io::Result<()> {
    for d in ["", "lower", "upper", "work", "merged"] {
        fs::create_dir(p.join(d))?;
    }
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        p.join("lower").display(),
        p.join("upper").display(),
        p.join("work").display()
    );
    let merged = p.join("merged");
    nix::mount::mount(Some("overlay"), &merged, Some("overlay"), nix::mount::MsFlags::empty(), Some(opts.as_str()))
        .map_err(std::io::Error::from)?;
    let written = fs::write(merged.join("probe"), b"x");
    let _ = nix::mount::umount2(&merged, nix::mount::MntFlags::MNT_DETACH);
    written
}

fn socket(path: &Path) -> Check {
    if !path.exists() {
        return Check::warn(
            "CRI socket",
            format!("{} does not exist: no daemon is serving", path.display()),
            "start it: rktlet serve (or systemctl start rktlet)",
        );
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Check::ok("CRI socket", format!("a daemon accepts connections on {}", path.display())),
        Err(e) => Check::warn(
            "CRI socket",
            format!("{} exists but refuses connections ({e}): a stale socket", path.display()),
            "start the daemon; it replaces a stale socket",
        ),
    }
}

fn privileges() -> Check {
    privileges_of(&fs::read_to_string("/proc/self/status").unwrap_or_default())
}

/// The capability check on a `/proc/PID/status` text: what the effective set
/// (CapEff) and the bounding set (CapBnd, what any process here could ever
/// gain) hold of the capabilities rktlet needs, with their bits as read.
fn privileges_of(status: &str) -> Check {
    let set = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let (eff, bnd) = (set("CapEff:"), set("CapBnd:"));
    let bits = format!("CapEff={eff:016x} CapBnd={bnd:016x}");
    let has = |mask: u64, cap: u32| mask & (1u64 << cap) != 0;
    // why a capability is missing decides the fix: a process can be given
    // what the bounding set allows; what it lacks, nothing started here gets
    let missing = |cap: u32, name: &str| {
        if has(bnd, cap) {
            format!("{name} (bit {cap}) is in the bounding set but not in the effective set")
        } else {
            format!(
                "{name} (bit {cap}) is in neither the effective nor the bounding set: \
                 nothing started on this host (or in this container) can have it"
            )
        }
    };
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_SYS_RESOURCE: u32 = 24;
    if !has(eff, CAP_SYS_ADMIN) {
        return Check::fail(
            "privileges",
            format!("{}; mounts, namespaces and cgroups need it ({bits})", missing(CAP_SYS_ADMIN, "CAP_SYS_ADMIN")),
            "run rktlet as root with the full capability set",
        );
    }
    if !has(eff, CAP_SYS_RESOURCE) {
        let fix = if has(bnd, CAP_SYS_RESOURCE) {
            "run rktlet as root without dropping CAP_SYS_RESOURCE (e.g. not under a CapabilityBoundingSet= or --cap-drop that removes it)"
        } else {
            "start the container or VM that runs rktlet with CAP_SYS_RESOURCE (e.g. docker --cap-add SYS_RESOURCE, \
             or no CapabilityBoundingSet= removing it): it cannot be gained from inside"
        };
        return Check::warn(
            "privileges",
            format!(
                "{}; pods keep the inherited OOM score (a negative oom_score_adj is refused) ({bits})",
                missing(CAP_SYS_RESOURCE, "CAP_SYS_RESOURCE")
            ),
            fix,
        );
    }
    Check::ok("privileges", format!("CAP_SYS_ADMIN and CAP_SYS_RESOURCE are effective ({bits})"))
}

/// Whether rktlet itself runs under seccomp filters (a node in a container
/// that keeps its engine's, a service manager's `SystemCallFilter=`), read
/// from a `/proc/PID/status` text: then the kernel refuses it the filters of
/// an app, and a command exec'd into one gets filters built from the app's
/// profile (`stage1/filters.rs`).
fn own_seccomp(status: &str) -> Check {
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    match field("Seccomp:") {
        Some("0") | None => {
            Check::ok("own seccomp", "rktlet runs unfiltered: exec copies an app's filters as they are")
        }
        Some(mode) => Check::ok(
            "own seccomp",
            format!(
                "rktlet runs under {} seccomp filter(s) (mode {mode}), which every pod inherits: a command exec'd \
                 into an app gets filters built from the app's profile, as systemd built the app's",
                field("Seccomp_filters:").unwrap_or("?")
            ),
        ),
    }
}

/// The checks as text, one per line with its fix below.
pub(crate) fn to_text(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        let mark = match c.outcome {
            Outcome::Ok => "ok  ",
            Outcome::Warn => "warn",
            Outcome::Fail => "FAIL",
        };
        out.push_str(&format!("[{mark}] {}: {}\n", c.name, c.detail));
        if let Some(fix) = &c.fix {
            out.push_str(&format!("       fix: {fix}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_criu_check_says_why_and_how_to_get_one_that_runs() {
        let c = criu_check_failed(
            Path::new("/usr/sbin/criu"),
            "\nError (criu/vdso.c:211): vdso: Unexpected rt vDSO area bounds\n",
            "",
        );
        assert!(matches!(c.outcome, Outcome::Warn), "{c:?}");
        assert!(
            c.detail.contains("Unexpected rt vDSO area bounds") && c.detail.contains("CheckpointContainer"),
            "{c:?}"
        );
        assert!(c.fix.as_deref().is_some_and(|f| f.contains("install-deps.sh criu")), "{c:?}");
        assert!(criu_check_failed(Path::new("/c"), "", "").detail.contains("no reason given"));
    }

    #[test]
    fn the_cgroupfs_driver_under_systemd_on_v1_is_a_warning() {
        use crate::cgroup::Driver;
        let c = init_system_of(true, Driver::Cgroupfs, true);
        assert_eq!(c.outcome, Outcome::Warn, "{c:?}");
        assert!(c.detail.contains("moves their processes") && c.fix.as_deref().is_some_and(|f| f.contains("systemd")));
        assert_eq!(
            init_system_of(true, Driver::Cgroupfs, false).outcome,
            Outcome::Ok,
            "pure v2: systemd moves nothing"
        );
        assert_eq!(init_system_of(true, Driver::Systemd, true).outcome, Outcome::Ok);
        assert_eq!(init_system_of(false, Driver::Cgroupfs, true).outcome, Outcome::Warn);
        assert!(!c.detail.contains("  "), "{c:?}");
    }

    #[test]
    fn process_moves_say_whether_they_wait() {
        let off = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        let c = migrations(off, true);
        assert!(c.detail.contains("favordynmods is off") && c.detail.contains("rktlet keeps it short"), "{c:?}");
        assert!(!migrations(off, false).detail.contains("rktlet keeps"));
        let on = off.replace("cgroup2 rw", "cgroup2 rw,favordynmods");
        assert!(migrations(&on, true).detail.contains("waits for no RCU grace period"));
        // no runs of spaces where the source breaks the text into lines
        assert!(!c.detail.contains("  "), "{c:?}");
    }

    #[test]
    fn devices_say_what_holds_them() {
        use crate::cgroup::devices::Mechanism;
        let v1 = devices(Mechanism::V1Cgroup);
        assert!(matches!(v1.outcome, Outcome::Ok) && v1.detail.contains("cgroup v1 devices"), "{v1:?}");
        let v2 = devices(Mechanism::V2Bpf);
        assert!(matches!(v2.outcome, Outcome::Ok) && v2.detail.contains("BPF"), "{v2:?}");
        let none = devices(Mechanism::Nothing);
        assert!(matches!(none.outcome, Outcome::Fail) && none.fix.is_some(), "{none:?}");
        for c in [v1, v2, none] {
            assert!(!c.detail.contains("  "), "{c:?}");
        }
    }

    #[test]
    fn this_host_passes_what_the_tests_need() {
        let t = tempfile::tempdir().expect("tempdir");
        let config = Config {
            data_dir: t.path().join("data"),
            socket: t.path().join("none.sock"),
            cni_conf_dir: t.path().join("net.d"),
            ..Config::default()
        };
        let checks = run(&config);
        let by = |name: &str| checks.iter().find(|c| c.name == name).cloned().expect(name);
        for ok in ["kernel: overlayfs", "kernel: namespaces", "systemd-nspawn", "data dir: overlay"] {
            assert_eq!(by(ok).outcome, Outcome::Ok, "{:?}", by(ok));
        }
        // an empty CNI dir and no daemon are reported with their fixes
        let cni = by("CNI network");
        assert_eq!(cni.outcome, Outcome::Fail);
        assert!(cni.fix.as_deref().is_some_and(|f| f.contains("conflist")), "{cni:?}");
        assert_eq!(by("CRI socket").outcome, Outcome::Warn);
        // a check changes nothing: the data dir is not made, the overlay probe left nothing
        assert!(!config.data_dir.exists());
        assert_eq!(fs::read_dir(t.path()).expect("tmp").count(), 0);
        assert!(by("data dir").detail.contains("does not exist yet"), "{:?}", by("data dir"));
        let text = to_text(&checks);
        assert!(text.contains("[FAIL] CNI network") && text.contains("fix: write a conflist"), "{text}");
        let json = serde_json::to_value(&checks).expect("json");
        assert_eq!(json[0]["outcome"], "ok");
        // the capability check says what this process really has
        let status = fs::read_to_string("/proc/self/status").expect("status");
        let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).expect("CapEff").trim().to_string();
        let privileges = by("privileges");
        assert!(privileges.detail.contains(&format!("CapEff={eff}")), "{privileges:?} vs CapEff {eff}");
        let sys_resource = u64::from_str_radix(&eff, 16).expect("hex") & (1 << 24) != 0;
        assert_eq!(privileges.outcome == Outcome::Ok, sys_resource, "{privileges:?}");
    }

    #[test]
    fn security_modules_say_what_containers_get() {
        use crate::stage1::lsm::Lsms;
        let enforced = Lsms { apparmor: true, selinux: false };
        let c = security_modules(enforced, true);
        assert_eq!(c.outcome, Outcome::Ok);
        assert!(c.detail.contains("rktlet-default"), "{}", c.detail);
        let c = security_modules(enforced, false);
        assert_eq!(c.outcome, Outcome::Fail);
        assert!(c.detail.contains("apparmor_parser") && c.fix.as_deref().is_some_and(|f| f.contains("apparmor")));
        let c = security_modules(Lsms { apparmor: false, selinux: true }, false);
        assert_eq!(c.outcome, Outcome::Ok);
        assert!(c.detail.contains("not enabled") && c.detail.contains("SELinux"), "{}", c.detail);
    }

    #[test]
    fn own_seccomp_says_how_exec_gets_filters() {
        let free = own_seccomp("Name:\tx\nSeccomp:\t0\nSeccomp_filters:\t0\n");
        assert!(free.detail.contains("unfiltered"), "{free:?}");
        let held = own_seccomp("Name:\tx\nSeccomp:\t2\nSeccomp_filters:\t3\n");
        assert!(held.detail.contains("under 3 seccomp filter(s)") && held.detail.contains("profile"), "{held:?}");
    }

    #[test]
    fn capabilities_are_reported_as_read() {
        let status = |eff: &str, bnd: &str| format!("Name:\ttest\nCapPrm:\t{eff}\nCapEff:\t{eff}\nCapBnd:\t{bnd}\n");
        // every capability: ok, with the bits
        let all = privileges_of(&status("000001ffffffffff", "000001ffffffffff"));
        assert_eq!(all.outcome, Outcome::Ok, "{all:?}");
        assert!(all.detail.contains("CapEff=000001ffffffffff"), "{all:?}");
        // all but CAP_SYS_RESOURCE, also missing from the bounding set (a VM or container started without it)
        let bounded = privileges_of(&status("000001fffeffffff", "000001fffeffffff"));
        assert_eq!(bounded.outcome, Outcome::Warn);
        assert!(bounded.detail.contains("CAP_SYS_RESOURCE (bit 24) is in neither"), "{bounded:?}");
        assert!(bounded.fix.as_deref().is_some_and(|f| f.contains("cannot be gained from inside")), "{bounded:?}");
        // dropped from the effective set only
        let dropped = privileges_of(&status("000001fffeffffff", "000001ffffffffff"));
        assert!(dropped.detail.contains("in the bounding set but not in the effective set"), "{dropped:?}");
        // no CAP_SYS_ADMIN (not root): a failure
        let user = privileges_of(&status("0000000000000000", "000001ffffffffff"));
        assert_eq!(user.outcome, Outcome::Fail);
        assert!(user.detail.contains("CAP_SYS_ADMIN (bit 21)"), "{user:?}");
    }
}
