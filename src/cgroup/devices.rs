//! Which device nodes a container may open or make, as the kernel's device
//! controller checks them: a cgroup v1 `devices` allow-list, or on cgroup v2
//! a BPF program attached to the container's cgroup (which the pod's systemd
//! loads for `DevicePolicy=closed` and `DeviceAllow=`).
//!
//! The list is the one runc gives a container (the pseudo devices, the
//! terminals, `/dev/net/tun`, the making of any node), the devices its CRI
//! config names with exactly their permissions, or everything for a
//! privileged container. Capabilities do not enter into it: root in a
//! container with `CAP_MKNOD` may make a node of the node's disk, and the
//! kernel refuses its open.

use std::fmt;
use std::fs;
use std::io;
use std::path::Path;

/// What holds containers to their devices on a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mechanism {
    /// cgroup v1: each app's own cgroup in the `devices` hierarchy, written
    /// by the daemon before the app runs.
    V1Cgroup,
    /// Pure cgroup v2: a BPF program on each app's unit cgroup, attached
    /// by the pod's systemd (`DevicePolicy=closed`, `DeviceAllow=`).
    V2Bpf,
    /// A v1 host without a mounted `devices` hierarchy: nothing can.
    Nothing,
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mechanism::V1Cgroup => {
                "each container's cgroup v1 devices allow-list, written by rktlet before it runs, and one for the \
                 pod's own processes"
            }
            Mechanism::V2Bpf => {
                "a BPF device program on each container's cgroup v2, attached by its pod's systemd \
                 (DevicePolicy=closed), and rktlet's own on the pod's processes"
            }
            Mechanism::Nothing => "nothing: this cgroup v1 host has no devices hierarchy mounted",
        })
    }
}

/// `c` or `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Char,
    Block,
}

impl Kind {
    fn letter(self) -> char {
        match self {
            Kind::Char => 'c',
            Kind::Block => 'b',
        }
    }
}

/// One allow rule: a kind, a major and a minor (`None`: any), and the
/// access (`r` read, `w` write, `m` mknod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    pub kind: Kind,
    pub major: Option<u64>,
    pub minor: Option<u64>,
    pub access: String,
}

/// The rules of every container that is not privileged (runc's default
/// list, as containerd 1.6 with runc 1.1 gives it): making any node, the
/// pseudo devices null, zero, full, random and urandom, `/dev/tty`,
/// `/dev/ptmx` and the pts terminals (a container's console is one), and
/// `/dev/net/tun`. Not the node's consoles (5:1, 4:n), disks, loop,
/// fuse, kvm or anything else.
const DEFAULT: [(Kind, Option<u64>, Option<u64>, &str); 11] = [
    (Kind::Char, None, None, "m"),
    (Kind::Block, None, None, "m"),
    (Kind::Char, Some(1), Some(3), "rwm"),
    (Kind::Char, Some(1), Some(5), "rwm"),
    (Kind::Char, Some(1), Some(7), "rwm"),
    (Kind::Char, Some(1), Some(8), "rwm"),
    (Kind::Char, Some(1), Some(9), "rwm"),
    (Kind::Char, Some(5), Some(0), "rwm"),
    (Kind::Char, Some(5), Some(2), "rwm"),
    (Kind::Char, Some(136), None, "rwm"),
    (Kind::Char, Some(10), Some(200), "rwm"),
];

/// What a container may do with device nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Allowed {
    /// A privileged container: every device.
    Everything,
    /// Only these.
    Only(Vec<Rule>),
}

impl Allowed {
    /// The default list plus `devices` (kind `c` or `b`, major, minor, the
    /// CRI permissions), or everything when `privileged`.
    pub(crate) fn for_container<'a>(
        privileged: bool,
        devices: impl IntoIterator<Item = (char, u64, u64, &'a str)>,
    ) -> Self {
        if privileged {
            return Allowed::Everything;
        }
        let mut rules: Vec<Rule> = DEFAULT
            .iter()
            .map(|(kind, major, minor, access)| Rule {
                kind: *kind,
                major: *major,
                minor: *minor,
                access: access.to_string(),
            })
            .collect();
        for (kind, major, minor, access) in devices {
            let kind = if kind == 'b' { Kind::Block } else { Kind::Char };
            let access: String = "rwm".chars().filter(|c| access.contains(*c)).collect();
            if !access.is_empty() {
                rules.push(Rule { kind, major: Some(major), minor: Some(minor), access });
            }
        }
        Allowed::Only(rules)
    }

    /// The devices the pod's own processes use once it runs (its systemd,
    /// nspawn, the log writer; commands they start before the daemon moves
    /// them into an app's cgroup): the pseudo devices, terminals and the
    /// making of character nodes; no block device, no `/dev/net/tun`.
    pub(crate) fn pod_own() -> Self {
        match Allowed::for_container(false, []) {
            Allowed::Only(rules) => Allowed::Only(
                rules
                    .into_iter()
                    .filter(|r| r.kind == Kind::Char && !(r.major == Some(10) && r.minor == Some(200)))
                    .collect(),
            ),
            all => all,
        }
    }

    /// The lines a v1 `devices` cgroup takes, in order: first
    /// `devices.deny` `a` (nothing), then each `devices.allow` line.
    pub(crate) fn v1_writes(&self) -> Vec<(&'static str, String)> {
        match self {
            Allowed::Everything => vec![("devices.allow", "a".to_string())],
            Allowed::Only(rules) => std::iter::once(("devices.deny", "a".to_string()))
                .chain(rules.iter().map(|r| ("devices.allow", r.to_string())))
                .collect(),
        }
    }

    /// Writes the list into a v1 `devices` cgroup (`dir`), which must not
    /// hold a process yet: between the deny and the last allow the cgroup
    /// allows less than it will.
    pub(crate) fn write_v1(&self, dir: &Path) -> io::Result<()> {
        for (file, line) in self.v1_writes() {
            fs::write(dir.join(file), &line)
                .map_err(|e| io::Error::new(e.kind(), format!("{}/{file} {line:?}: {e}", dir.display())))?;
        }
        Ok(())
    }

    /// The unit properties a systemd takes for the list (cgroup v2, where it
    /// attaches a BPF program to the unit's cgroup): `DevicePolicy=closed`
    /// and a `DeviceAllow=` pair per rule (`/dev/char/M:N` names a device
    /// by number, `char-pts` and `char-*` by the drivers of
    /// `/proc/devices`). None for everything (`DevicePolicy=auto`, no
    /// program).
    pub(crate) fn systemd(&self) -> Option<(&'static str, Vec<(String, String)>)> {
        let Allowed::Only(rules) = self else { return None };
        let pairs = rules
            .iter()
            .map(|r| {
                let class = if r.kind == Kind::Block { "block" } else { "char" };
                let what = match (r.major, r.minor) {
                    (Some(major), Some(minor)) => format!("/dev/{class}/{major}:{minor}"),
                    // the Unix98 terminals' driver in /proc/devices
                    (Some(136), None) => "char-pts".to_string(),
                    (Some(major), None) => format!("/dev/{class}/{major}:*"),
                    (None, _) => format!("{class}-*"),
                };
                (what, r.access.clone())
            })
            .collect();
        Some(("closed", pairs))
    }
}

impl fmt::Display for Rule {
    /// As a v1 `devices.allow` line: `c 1:3 rwm`, `b *:* m`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let num = |n: Option<u64>| n.map_or("*".to_string(), |n| n.to_string());
        write!(f, "{} {}:{} {}", self.kind.letter(), num(self.major), num(self.minor), self.access)
    }
}

/// Whether a v1 `devices.list` (its text) allows everything.
#[cfg(test)]
pub(crate) fn v1_allows_everything(list: &str) -> bool {
    list.lines().any(|l| l.trim() == "a *:* rwm")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_list_is_runcs_and_nothing_of_the_nodes() {
        let a = Allowed::for_container(false, []);
        let w = a.v1_writes();
        assert_eq!(w[0], ("devices.deny", "a".to_string()), "deny everything first");
        let lines: Vec<&str> = w[1..]
            .iter()
            .map(|(f, l)| {
                assert_eq!(*f, "devices.allow");
                l.as_str()
            })
            .collect();
        for want in
            ["c *:* m", "b *:* m", "c 1:3 rwm", "c 1:9 rwm", "c 5:0 rwm", "c 5:2 rwm", "c 136:* rwm", "c 10:200 rwm"]
        {
            assert!(lines.contains(&want), "{want} missing from {lines:?}");
        }
        // the node's console, ttys, loop, fuse, kvm, disks: never by default
        for line in &lines {
            for not in ["5:1 ", "4:", "7:", "10:229", "10:232", "10:237", "8:", "253:", "259:"] {
                assert!(!line.contains(not), "{line} allows {not}");
            }
            assert!(!line.starts_with("b ") || line.ends_with(" m"), "{line}: a block device opened");
        }
    }

    #[test]
    fn cri_devices_get_exactly_their_permissions() {
        let a = Allowed::for_container(false, [('b', 7, 3, "r"), ('c', 10, 229, "rw"), ('c', 1, 1, "")]);
        let w: Vec<String> = a.v1_writes().into_iter().map(|(_, l)| l).collect();
        assert!(w.contains(&"b 7:3 r".to_string()), "{w:?}");
        assert!(w.contains(&"c 10:229 rw".to_string()), "{w:?}");
        assert!(!w.iter().any(|l| l.contains("1:1 ")), "no permission, no rule: {w:?}");
        assert_eq!(Allowed::for_container(true, [('b', 7, 3, "r")]).v1_writes(), [("devices.allow", "a".to_string())]);
    }

    #[test]
    fn as_systemd_properties() {
        assert_eq!(Allowed::Everything.systemd(), None);
        let (policy, pairs) = Allowed::for_container(false, [('b', 8, 0, "rw")]).systemd().expect("a list");
        assert_eq!(policy, "closed");
        let has = |p: &str, a: &str| pairs.iter().any(|(x, y)| x == p && y == a);
        assert!(has("char-*", "m") && has("block-*", "m"), "{pairs:?}");
        assert!(has("/dev/char/1:3", "rwm") && has("char-pts", "rwm") && has("/dev/char/10:200", "rwm"), "{pairs:?}");
        assert!(has("/dev/block/8:0", "rw"), "{pairs:?}");
    }

    #[test]
    fn the_pods_own_processes_get_less() {
        let w: Vec<String> = Allowed::pod_own().v1_writes().into_iter().map(|(_, l)| l).collect();
        assert_eq!(w[0], "a");
        assert!(w.contains(&"c 1:3 rwm".to_string()) && w.contains(&"c 136:* rwm".to_string()), "{w:?}");
        assert!(!w.iter().any(|l| l.starts_with("b ") || l.contains("10:200")), "{w:?}");
    }

    #[test]
    fn reads_an_open_list() {
        assert!(v1_allows_everything("a *:* rwm\n"));
        assert!(!v1_allows_everything("c 1:3 rwm\nc *:* m\n"));
    }
}
