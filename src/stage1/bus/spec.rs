//! What a transient service is made of: typed unit properties (name plus a
//! value that knows its D-Bus signature) and `ServiceSpec`, the app's unit
//! as the containers layer describes it.

use super::sdbus::{Basic, Message, SdResult};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// `MS_REC`, the only mount flag BindPaths= takes.
const MS_REC: u64 = libc::MS_REC;

/// One command line of `ExecStart=` and friends: `(sasb)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecCommand {
    /// Absolute path of the program (inside the RootDirectory, if any).
    pub path: String,
    /// Full argv, including `argv[0]`, as the program gets it: systemd would
    /// expand `$NAME` and `$$` in it, so every `$` is sent doubled.
    pub argv: Vec<String>,
    /// systemd's `-` prefix: a failing command is not a failure of the unit.
    pub ignore_failure: bool,
}

impl ExecCommand {
    /// `path` with `argv = [path, args...]`.
    pub fn new(path: impl Into<String>, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let path = path.into();
        let mut argv = vec![path.clone()];
        argv.extend(args.into_iter().map(Into::into));
        ExecCommand { path, argv, ignore_failure: false }
    }
}

/// One bind mount of `BindPaths=`/`BindReadOnlyPaths=`: `(ssbt)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindPath {
    /// Path in the pod's mount namespace.
    pub source: String,
    /// Path inside the unit's RootDirectory.
    pub destination: String,
    /// systemd's `-` prefix: skip a missing source instead of failing.
    pub ignore_missing: bool,
    pub recursive: bool,
}

/// A property value with its D-Bus signature.
#[derive(Debug)]
pub enum Value {
    Str(String),
    Bool(bool),
    U32(u32),
    I32(i32),
    U64(u64),
    Strs(Vec<String>),
    /// `(bas)`: an allow (true) or deny (false) list, as `SystemCallFilter` takes it.
    FilterList(bool, Vec<String>),
    Exec(Vec<ExecCommand>),
    Binds(Vec<BindPath>),
    /// A unix fd passed to the pod's systemd; the message carries a duplicate.
    Fd(OwnedFd),
    /// `a(ss)`: pairs, as `DeviceAllow` takes them (a device, its access).
    Pairs(Vec<(String, String)>),
}

impl Value {
    pub(crate) fn signature(&self) -> &'static str {
        match self {
            Value::Str(_) => "s",
            Value::Bool(_) => "b",
            Value::U32(_) => "u",
            Value::I32(_) => "i",
            Value::U64(_) => "t",
            Value::Strs(_) => "as",
            Value::FilterList(..) => "(bas)",
            Value::Exec(_) => "a(sasb)",
            Value::Binds(_) => "a(ssbt)",
            Value::Fd(_) => "h",
            Value::Pairs(_) => "a(ss)",
        }
    }

    fn append_to(&self, m: &mut Message) -> SdResult<()> {
        match self {
            Value::Str(s) => m.append(Basic::Str(s)),
            Value::Bool(b) => m.append(Basic::Bool(*b)),
            Value::U32(x) => m.append(Basic::U32(*x)),
            Value::I32(x) => m.append(Basic::I32(*x)),
            Value::U64(x) => m.append(Basic::U64(*x)),
            Value::Fd(fd) => m.append(Basic::Fd(fd.as_raw_fd())),
            Value::Strs(v) => append_strs(m, v),
            Value::FilterList(allow, v) => {
                m.open(b'r', "bas")?;
                m.append(Basic::Bool(*allow))?;
                append_strs(m, v)?;
                m.close()
            }
            Value::Exec(cmds) => {
                m.open(b'a', "(sasb)")?;
                for c in cmds {
                    m.open(b'r', "sasb")?;
                    m.append(Basic::Str(&c.path))?;
                    let verbatim: Vec<String> = c.argv.iter().map(|a| a.replace('$', "$$")).collect();
                    append_strs(m, &verbatim)?;
                    m.append(Basic::Bool(c.ignore_failure))?;
                    m.close()?;
                }
                m.close()
            }
            Value::Pairs(pairs) => {
                m.open(b'a', "(ss)")?;
                for (a, b) in pairs {
                    m.open(b'r', "ss")?;
                    m.append(Basic::Str(a))?;
                    m.append(Basic::Str(b))?;
                    m.close()?;
                }
                m.close()
            }
            Value::Binds(binds) => {
                m.open(b'a', "(ssbt)")?;
                for b in binds {
                    m.open(b'r', "ssbt")?;
                    m.append(Basic::Str(&b.source))?;
                    m.append(Basic::Str(&b.destination))?;
                    m.append(Basic::Bool(b.ignore_missing))?;
                    m.append(Basic::U64(if b.recursive { MS_REC } else { 0 }))?;
                    m.close()?;
                }
                m.close()
            }
        }
    }
}

fn append_strs(m: &mut Message, v: &[String]) -> SdResult<()> {
    m.open(b'a', "s")?;
    for s in v {
        m.append(Basic::Str(s))?;
    }
    m.close()
}

/// One unit property: `(sv)` in StartTransientUnit's `a(sv)`.
#[derive(Debug)]
pub struct Property {
    pub name: String,
    pub value: Value,
}

impl Property {
    pub(crate) fn new(name: impl Into<String>, value: Value) -> Self {
        Property { name: name.into(), value }
    }

    pub fn str(name: &str, v: impl Into<String>) -> Self {
        Self::new(name, Value::Str(v.into()))
    }

    pub(crate) fn bool(name: &str, v: bool) -> Self {
        Self::new(name, Value::Bool(v))
    }

    pub fn u64(name: &str, v: u64) -> Self {
        Self::new(name, Value::U64(v))
    }

    pub(crate) fn strs(name: &str, v: &[String]) -> Self {
        Self::new(name, Value::Strs(v.to_vec()))
    }

    /// Passes a duplicate of `fd` (the caller keeps its own).
    pub(crate) fn fd(name: &str, fd: BorrowedFd<'_>) -> io::Result<Self> {
        Ok(Self::new(name, Value::Fd(fd.try_clone_to_owned()?)))
    }
}

/// Appends `a(sv)` for `props`.
pub(crate) fn append_properties(m: &mut Message, props: &[Property]) -> SdResult<()> {
    m.open(b'a', "(sv)")?;
    for p in props {
        m.open(b'r', "sv")?;
        m.append(Basic::Str(&p.name))?;
        m.open(b'v', p.value.signature())?;
        p.value.append_to(m)?;
        m.close()?;
        m.close()?;
    }
    m.close()
}

/// Where an app's stdout or stderr goes. The pod has no journald, so the
/// default (`Inherit`: systemd's default, the journal) loses the output.
#[derive(Debug, Default)]
pub enum Output {
    #[default]
    Inherit,
    Null,
    /// An fd opened by the daemon (a log file or pipe on the host).
    Fd(OwnedFd),
    /// A file in the pod's mount namespace, opened by the pod's systemd.
    Append(String),
}

/// The transient service of one app.
#[derive(Debug, Default)]
pub struct ServiceSpec {
    /// Unit name, with its `.service` suffix.
    pub name: String,
    pub description: String,
    pub exec_start: ExecCommand,
    /// The app's rootfs inside the pod (`/opt/stage2/<app>/rootfs`).
    pub root_directory: Option<String>,
    /// /proc, /sys, /dev inside the RootDirectory.
    pub mount_api_vfs: bool,
    pub environment: Vec<String>,
    pub working_directory: Option<String>,
    /// uid or name, resolved in the pod's (stage1) /etc, not the app's:
    /// even a numeric id needs an entry there, else the start fails (217/USER).
    pub user: Option<String>,
    pub group: Option<String>,
    pub supplementary_groups: Vec<String>,
    /// Keeps an exited app's status readable until it is stopped.
    pub remain_after_exit: bool,
    /// The main process says when it has started (`Type=notify`,
    /// `NotifyAccess=main`): the start job waits for it, and fails if the
    /// process ends first. Else the job is done once it was exec'd.
    pub notify_ready: bool,
    pub stdout: Output,
    pub stderr: Output,
    /// `control-group`, `mixed`, `process`, `none`.
    pub kill_mode: Option<String>,
    /// Time between the stop signal and SIGKILL.
    pub timeout_stop: Option<Duration>,
    pub bind_paths: Vec<BindPath>,
    pub bind_read_only_paths: Vec<BindPath>,
    pub read_only_paths: Vec<String>,
    pub no_new_privileges: Option<bool>,
    /// Capability bit mask (bit n = capability n).
    pub capability_bounding_set: Option<u64>,
    pub ambient_capabilities: Option<u64>,
    /// Anything else, appended last.
    pub extra: Vec<Property>,
}

impl ServiceSpec {
    /// An app unit with rkt's choices: no default dependencies (they would
    /// pull the host's sysinit units into the pod), API filesystems mounted,
    /// status kept after exit.
    pub fn new(name: impl Into<String>, exec_start: ExecCommand) -> Self {
        let name = name.into();
        ServiceSpec {
            description: format!("Application={}", name.trim_end_matches(".service")),
            name,
            exec_start,
            mount_api_vfs: true,
            remain_after_exit: true,
            ..Default::default()
        }
    }

    /// The unit's properties, in the order systemd applies them. Fds are
    /// duplicated, so the spec stays usable.
    pub(crate) fn properties(&self) -> io::Result<Vec<Property>> {
        let mut p = vec![
            Property::str("Description", &self.description),
            Property::bool("DefaultDependencies", false),
            // `exec`: the start job fails when the program cannot be executed
            Property::str("Type", if self.notify_ready { "notify" } else { "exec" }),
            Property::bool("RemainAfterExit", self.remain_after_exit),
            // SIGPIPE as the program would have it anywhere else (runc's way), not ignored
            Property::bool("IgnoreSIGPIPE", false),
            Property::new("ExecStart", Value::Exec(vec![self.exec_start.clone()])),
        ];
        if self.notify_ready {
            p.push(Property::str("NotifyAccess", "main"));
            // below the daemon's wait for the job (bus::START_TIMEOUT): a start
            // that never says ready fails in systemd too, rather than later
            p.push(Property::u64("TimeoutStartUSec", 20_000_000));
            // and then killed, not asked to stop: appexec and a PID 1 ignore SIGTERM
            p.push(Property::str("TimeoutStartFailureMode", "kill"));
        }
        if let Some(root) = &self.root_directory {
            p.push(Property::str("RootDirectory", root));
        }
        p.push(Property::bool("MountAPIVFS", self.mount_api_vfs));
        if !self.environment.is_empty() {
            p.push(Property::strs("Environment", &self.environment));
        }
        let optional = [
            ("WorkingDirectory", &self.working_directory),
            ("User", &self.user),
            ("Group", &self.group),
            ("KillMode", &self.kill_mode),
        ];
        p.extend(optional.into_iter().filter_map(|(k, v)| v.as_ref().map(|v| Property::str(k, v))));
        if !self.supplementary_groups.is_empty() {
            p.push(Property::strs("SupplementaryGroups", &self.supplementary_groups));
        }
        p.extend(output_property("StandardOutput", &self.stdout)?);
        p.extend(output_property("StandardError", &self.stderr)?);
        if let Some(t) = self.timeout_stop {
            p.push(Property::u64("TimeoutStopUSec", u64::try_from(t.as_micros()).unwrap_or(u64::MAX)));
        }
        if !self.bind_paths.is_empty() {
            p.push(Property::new("BindPaths", Value::Binds(self.bind_paths.clone())));
        }
        if !self.bind_read_only_paths.is_empty() {
            p.push(Property::new("BindReadOnlyPaths", Value::Binds(self.bind_read_only_paths.clone())));
        }
        if !self.read_only_paths.is_empty() {
            p.push(Property::strs("ReadOnlyPaths", &self.read_only_paths));
        }
        if let Some(b) = self.no_new_privileges {
            p.push(Property::bool("NoNewPrivileges", b));
        }
        if let Some(c) = self.capability_bounding_set {
            p.push(Property::u64("CapabilityBoundingSet", c));
        }
        if let Some(c) = self.ambient_capabilities {
            p.push(Property::u64("AmbientCapabilities", c));
        }
        for e in &self.extra {
            p.push(Property::new(e.name.clone(), duplicate(&e.value)?));
        }
        Ok(p)
    }
}

/// `StandardOutput*`/`StandardError*` for one stream.
fn output_property(stream: &str, out: &Output) -> io::Result<Option<Property>> {
    Ok(match out {
        Output::Inherit => None,
        Output::Null => Some(Property::str(stream, "null")),
        Output::Fd(fd) => Some(Property::fd(&format!("{stream}FileDescriptor"), fd.as_fd())?),
        Output::Append(path) => Some(Property::str(&format!("{stream}FileToAppend"), path)),
    })
}

fn duplicate(v: &Value) -> io::Result<Value> {
    Ok(match v {
        Value::Str(s) => Value::Str(s.clone()),
        Value::Bool(b) => Value::Bool(*b),
        Value::U32(x) => Value::U32(*x),
        Value::I32(x) => Value::I32(*x),
        Value::U64(x) => Value::U64(*x),
        Value::Strs(v) => Value::Strs(v.clone()),
        Value::FilterList(a, v) => Value::FilterList(*a, v.clone()),
        Value::Exec(v) => Value::Exec(v.clone()),
        Value::Binds(v) => Value::Binds(v.clone()),
        Value::Fd(fd) => Value::Fd(fd.try_clone()?),
        Value::Pairs(v) => Value::Pairs(v.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(p: &[Property]) -> Vec<&str> {
        p.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn defaults_are_rkt_like() {
        let spec = ServiceSpec::new("app1.service", ExecCommand::new("/bin/sh", ["-c", "true"]));
        let p = spec.properties().expect("props");
        assert_eq!(
            names(&p),
            [
                "Description",
                "DefaultDependencies",
                "Type",
                "RemainAfterExit",
                "IgnoreSIGPIPE",
                "ExecStart",
                "MountAPIVFS"
            ]
        );
        assert!(matches!(&p[0].value, Value::Str(d) if d == "Application=app1"));
        assert!(matches!(&p[5].value, Value::Exec(c) if c[0].argv == ["/bin/sh", "-c", "true"]));
    }

    #[test]
    fn every_field_becomes_a_property_with_its_signature() {
        let (r, _w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let mut spec = ServiceSpec::new("a.service", ExecCommand::new("/bin/true", Vec::<String>::new()));
        spec.root_directory = Some("/opt/stage2/a/rootfs".into());
        spec.environment = vec!["A=1".into()];
        spec.working_directory = Some("/".into());
        spec.user = Some("1000".into());
        spec.group = Some("1000".into());
        spec.supplementary_groups = vec!["10".into()];
        spec.stdout = Output::Fd(r);
        spec.stderr = Output::Append("/log".into());
        spec.kill_mode = Some("mixed".into());
        spec.timeout_stop = Some(Duration::from_secs(2));
        let bind = BindPath { source: "/s".into(), destination: "/d".into(), ignore_missing: false, recursive: true };
        spec.bind_paths = vec![bind.clone()];
        spec.bind_read_only_paths = vec![bind];
        spec.read_only_paths = vec!["/proc/sys".into()];
        spec.no_new_privileges = Some(true);
        spec.capability_bounding_set = Some(1 << 21);
        spec.ambient_capabilities = Some(0);
        spec.extra = vec![Property::str("SyslogIdentifier", "a")];
        let p = spec.properties().expect("props");
        let sig = |n: &str| p.iter().find(|p| p.name == n).map(|p| p.value.signature());
        assert_eq!(sig("StandardOutputFileDescriptor"), Some("h"));
        assert_eq!(sig("StandardErrorFileToAppend"), Some("s"));
        assert_eq!(sig("BindPaths"), Some("a(ssbt)"));
        assert_eq!(sig("BindReadOnlyPaths"), Some("a(ssbt)"));
        assert_eq!(sig("TimeoutStopUSec"), Some("t"));
        assert_eq!(sig("SupplementaryGroups"), Some("as"));
        assert_eq!(sig("CapabilityBoundingSet"), Some("t"));
        assert_eq!(sig("SyslogIdentifier"), Some("s"));
        assert_eq!(p.len(), 24);
        // the spec keeps its own fd: a second rendering works
        assert!(spec.properties().is_ok());
    }
}
