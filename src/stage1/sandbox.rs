//! `rktlet app sandbox`: stage0 prepare + stage1 run for the host flavor, in
//! the sandbox process itself (the one exec of a pod start).
//!
//! Runs in: the sandbox process, single-threaded, started by the daemon (or
//! by an operator). It creates the pod directory, holds the pod lock, builds
//! the stage1 rootfs, joins the pod cgroup and finally execs systemd-nspawn,
//! which inherits the lock, so the pod reads as running exactly while nspawn
//! lives. Until that exec, errors go to stderr (the daemon reads them from a
//! pipe); from the exec on, output goes to `$P/sandbox.log`.

use super::nspawn::{NspawnSpec, PodNet};
use super::rootfs::{Identity, Stage1Root};
use crate::cgroup::{Layout, pod::PodCgroup};
use rkt::lock;
use rkt::pod::{self, DataDir, Pod, PodError};
use rkt::schema::PodManifest;
use std::convert::Infallible;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub(crate) enum SandboxError {
    #[error(transparent)]
    Pod(#[from] PodError),
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("systemd-nspawn not found (install the systemd-container package)")]
    NoNspawn,
    #[error("invalid sandbox option: {0}")]
    Invalid(String),
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> SandboxError {
    let context = context.into();
    move |source| SandboxError::Io { context, source }
}

/// What `app sandbox` was asked to run.
#[derive(Debug, Clone)]
pub(crate) struct SandboxOptions {
    pub data: DataDir,
    pub uuid: Option<Uuid>,
    pub manifest: PodManifest,
    pub hostname: Option<String>,
    pub resolv_conf: String,
    /// Extra `/etc/hosts` lines (`ip name...`).
    pub hosts_entries: Vec<String>,
    pub net: PodNet,
    pub host_ipc: bool,
    /// The pod's user namespace (recorded in its manifest); none: the node's.
    pub userns: Option<super::userns::IdMap>,
    pub cgroup_parent: String,
    /// The pod was placed in its cgroup by its systemd unit; do not move it.
    pub systemd_unit: bool,
    /// Join only the unified and name=systemd hierarchies; the caller moves
    /// the pod into the v1 controllers while it boots.
    pub defer_controllers: bool,
    /// The caller places this process in the pod cgroup and says so on
    /// stdin (`--cgroup-from-caller`).
    pub cgroup_from_caller: bool,
    /// The caller hears READY=1 and marks the pod ready (`--ready-by-notify`).
    pub ready_by_notify: bool,
    /// nspawn's `$NOTIFY_SOCKET` (else the one this process was given).
    pub notify_socket: Option<PathBuf>,
    /// Nice value for the pod's processes (pool pods boot at a low priority).
    pub nice: Option<i32>,
    pub uuid_file_save: Option<PathBuf>,
}

/// Runs the sandbox: returns only on failure (success is an exec).
pub(crate) fn run(opts: SandboxOptions) -> Result<Infallible, SandboxError> {
    let nspawn = super::host::find_in_path("systemd-nspawn").ok_or(SandboxError::NoNspawn)?;
    let uuid = opts.uuid.unwrap_or_else(Uuid::new_v4);
    let mut pod = Pod::create_with_uuid(&opts.data, uuid)?;
    let mut cgroup = None;
    match prepare(&opts, &mut pod, &mut cgroup) {
        Ok(spec_rootfs) => exec_nspawn(&opts, &mut pod, nspawn, spec_rootfs),
        Err(e) => {
            abort(&mut pod, cgroup.as_ref());
            Err(e)
        }
    }
}

fn prepare(opts: &SandboxOptions, pod: &mut Pod, cgroup_out: &mut Option<PodCgroup>) -> Result<PathBuf, SandboxError> {
    let uuid = pod.uuid();
    pod.to_preparing()?;
    let mut manifest = opts.manifest.clone();
    manifest.set_annotation(rkt::schema::ANNOTATION_MUTABLE, "true");
    pod.write_initial(&manifest)?;

    let hostname = opts.hostname.clone().unwrap_or_else(|| format!("rkt-{uuid}"));
    let mut hosts = crate::net::dns::hosts(&hostname, &[]);
    for line in &opts.hosts_entries {
        hosts.push_str(line);
        hosts.push('\n');
    }
    let root = Stage1Root::new(pod.stage1_rootfs());
    let identity = Identity {
        machine_id: uuid.simple().to_string(),
        hostname: hostname.clone(),
        resolv_conf: opts.resolv_conf.clone(),
        hosts,
    };
    root.build(&identity, !opts.ready_by_notify).map_err(io_err(format!("building stage1 rootfs of pod {uuid}")))?;
    // rkt's stage0 finds `rkt stop`'s and `rkt gc`'s programs through these
    let binary = std::env::current_exe().map_err(io_err("finding the rktlet binary"))?;
    super::entrypoints::install(&pod.path(), &binary, opts.data.root())
        .map_err(io_err(format!("writing the stage1 manifest of pod {uuid}")))?;

    if let PodNet::Netns(path) = &opts.net {
        pod.write_file(pod::NETNS_FILE, path.as_os_str().as_encoded_bytes())?;
        // the pod's systemd does not bring `lo` up under nspawn, and apps and
        // port-forwarding expect 127.0.0.1 to work: done here, for every pod
        // on a pre-made namespace (the daemon's or a CLI user's)
        crate::net::netns::Netns::open(path)
            .and_then(|ns| ns.set_link_up("lo"))
            .map_err(|e| SandboxError::Invalid(format!("network namespace {}: {e}", path.display())))?;
    }
    pod.write_file(pod::RUNTIME_CONFIG_FILE, runtime_config(&hostname, &opts.net, opts.host_ipc).as_bytes())?;

    let layout = Layout::read().map_err(io_err("reading the host's cgroup layout"))?;
    let sub = crate::cgroup::pod::subcgroup(&opts.cgroup_parent, &uuid.to_string(), opts.systemd_unit)
        .map_err(SandboxError::Invalid)?;
    if !opts.systemd_unit {
        let cg =
            if opts.defer_controllers { PodCgroup::tracking(&layout, &sub) } else { PodCgroup::new(&layout, &sub) };
        cg.create().map_err(io_err(format!("creating cgroup {sub}")))?;
        *cgroup_out = Some(cg.clone());
        if !(opts.cgroup_from_caller && placed_by_caller()) {
            cg.join_self().map_err(io_err(format!("joining cgroup {sub}")))?;
        }
    }
    // cgroup v2 with controllers: the pod's cgroup may hold no process of its
    // own, or nspawn cannot pass the controllers on to the pod's systemd
    // ("no internal processes"); the log writer goes to `supervisor/`, where
    // nspawn moves itself
    let supervisor = match layout.v2_root() {
        Some(root) => {
            if !opts.systemd_unit {
                crate::cgroup::v2::enable_down(root, &sub, false)
                    .map_err(|e| SandboxError::Invalid(format!("cgroup controllers for pod {uuid}: {e}")))?;
            }
            let dir = root.join(&sub).join("supervisor");
            fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
            Some(dir)
        }
        None => None,
    };
    pod.write_file(pod::SUBCGROUP_FILE, sub.as_bytes())?;
    pod.write_file(pod::TRACKING_SUBCGROUP_FILE, sub.as_bytes())?;
    lower_oom_score();
    if let Some(n) = opts.nice {
        set_nice(n).map_err(io_err(format!("setting nice {n}")))?;
    }

    pod.to_run()?;
    pod.write_file(pod::PPID_FILE, format!("{}\n", std::process::id()).as_bytes())?;
    let program = super::logwriter::installed(&opts.data);
    spawn_log_writer(pod, supervisor.as_deref(), &program)
        .map_err(io_err(format!("starting the log writer of pod {uuid}")))?;
    if let Some(path) = &opts.uuid_file_save {
        // whole or not there: a script polls for the file, then reads it
        rkt::fs::write_volatile(path, uuid.to_string().as_bytes(), 0o644)
            .map_err(io_err(format!("writing {}", path.display())))?;
    }
    // the rootfs moved with the pod directory from prepare/ to run/
    Ok(pod.stage1_rootfs())
}

/// Whether the caller says (one byte on stdin) that it moved this process
/// into the pod cgroup; EOF or an error: it did not.
fn placed_by_caller() -> bool {
    use std::io::Read;
    let mut byte = [0u8; 1];
    std::io::stdin().read(&mut byte).is_ok_and(|n| n == 1)
}

/// The pod's `runtime-config`: rkt's record of the options it ran with.
pub(crate) fn runtime_config(hostname: &str, net: &PodNet, host_ipc: bool) -> String {
    serde_json::json!({
        "Hostname": hostname,
        "Mutable": true,
        "NetList": match net { PodNet::Host => vec!["host"], PodNet::None => vec!["none"], PodNet::Netns(_) => vec!["default"] },
        "IPCMode": if host_ipc { "parent" } else { "" },
        "ResolvConfMode": "stage0",
        "EtcHostsMode": "stage0",
    })
    .to_string()
}

/// Forks the pod's CRI log writer (see `super::crilog`): a grandchild,
/// so it is not nspawn's child, in the pod cgroup, without the pod lock, that
/// exits with the sandbox process (watched through a pidfd made here). It
/// execs `program` (the `logwriter` program), unless the pod shares the
/// node's PID namespace or the exec fails: then it serves as it is.
fn spawn_log_writer(pod: &Pod, cgroup: Option<&Path>, program: &Path) -> io::Result<()> {
    use nix::unistd::{ForkResult, fork};
    let listener = std::os::unix::net::UnixListener::bind(pod.path().join(super::crilog::SOCKET_FILE))?;
    let me = crate::base::sys::pidfd_open(std::process::id() as i32)?;
    let lock_fd = pod.lock_fd().ok();
    let host_pid =
        pod.read_manifest().ok().and_then(|m| m.annotation(rkt::schema::ANNOTATION_PID_MODE).map(str::to_string))
            == Some("node".to_string());
    // the pod directory as a descriptor: its path through /proc/self/fd holds
    // across the renames of the directory (host-PID apps' exits are recorded there)
    let dir = nix::fcntl::open(
        &pod.path(),
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    // SAFETY: the sandbox process is single-threaded, so the child may run any code.
    match unsafe { fork() }? {
        ForkResult::Parent { child } => {
            nix::sys::wait::waitpid(child, None)?;
            Ok(())
        }
        ForkResult::Child => {
            let code = (|| -> io::Result<()> {
                nix::unistd::setsid()?;
                if let Some(dir) = cgroup {
                    fs::write(dir.join("cgroup.procs"), b"0")?;
                }
                // SAFETY: still single-threaded after the first fork.
                if let ForkResult::Parent { .. } = unsafe { fork() }? {
                    return Ok(());
                }
                if let Some(fd) = lock_fd {
                    // SAFETY: closing our copy of the pod lock, which only nspawn may hold.
                    unsafe { libc::close(fd) };
                }
                let null = fs::OpenOptions::new().read(true).write(true).open("/dev/null")?;
                for target in [libc::STDIN_FILENO, libc::STDOUT_FILENO, libc::STDERR_FILENO] {
                    // SAFETY: dup2 of a valid descriptor onto a standard stream.
                    unsafe { libc::dup2(null.as_raw_fd(), target) };
                }
                // any pod but a host-PID one: the small program (what it
                // keeps resident is a fraction of this process's); should
                // its exec fail, this process serves instead
                if !host_pid {
                    let e = exec_log_writer(program, &listener, &me, &pod.uuid());
                    tracing::debug!(program = %program.display(), error = %e, "the log writer program did not start");
                }
                // only a host-PID pod's writer starts apps (`run`): in any
                // other pod nothing may reach the node's PID namespace
                let dir = host_pid.then(|| PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())));
                // what the sandbox process used before the fork stays resident
                // in this one, for the pod's life, unless let go: its heap,
                // stack and the program's pages (each pod pays for them)
                crate::base::heap::trim();
                crate::base::heap::release_unused_stack();
                crate::base::program_pages::release_all();
                super::crilog::serve_pod(listener, Some(me), dir)
            })();
            // SAFETY: leave without running the parent's atexit handlers or destructors.
            unsafe { libc::_exit(i32::from(code.is_err())) }
        }
    }
}

/// Execs the log writer program (`stage1::logwriter`) with the pod's
/// listening socket and the pidfd of the process to outlive (nspawn) open
/// across the exec; returns only when it could not, with both descriptors
/// close-on-exec again.
fn exec_log_writer(program: &Path, listener: &impl AsRawFd, me: &impl AsRawFd, uuid: &Uuid) -> io::Error {
    let (listen, pidfd) = (listener.as_raw_fd(), me.as_raw_fd());
    if let Err(e) = lock::keep_across_exec(listen).and_then(|()| lock::keep_across_exec(pidfd)) {
        return e;
    }
    let e = std::process::Command::new(program)
        .args([format!("listen={listen}"), format!("pidfd={pidfd}"), format!("--uuid={uuid}")])
        .env_clear()
        .exec();
    for fd in [listen, pidfd] {
        // SAFETY: F_SETFD on descriptors this process owns.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    e
}

/// Lowers the priority of this process and so of nspawn and the pod's
/// systemd (a pool pod booting in the background); the daemon resets it
/// when the pod is taken.
fn set_nice(n: i32) -> io::Result<()> {
    // SAFETY: setpriority(2) on this process only; no memory is passed.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, n) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Pods should outlive their apps under memory pressure, like containerd's
/// sandbox at -998. Nodes without CAP_SYS_RESOURCE refuse a negative value
/// (EPERM); then the inherited value stays, which must not fail the pod.
fn lower_oom_score() {
    if let Err(e) = fs::write("/proc/self/oom_score_adj", b"-998") {
        tracing::debug!(error = %e, "keeping the inherited oom_score_adj");
    }
}

fn exec_nspawn(
    opts: &SandboxOptions,
    pod: &mut Pod,
    nspawn: PathBuf,
    rootfs: PathBuf,
) -> Result<Infallible, SandboxError> {
    let net = match (&opts.net, opts.userns) {
        // nspawn joins a given network namespace from inside the pod's user
        // namespace, where it has no rights over one the node made: this
        // process enters it instead, and nspawn keeps the namespace it runs in
        (PodNet::Netns(path), Some(_)) => {
            let ns = fs::File::open(path).map_err(io_err(format!("opening {}", path.display())))?;
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| io_err(format!("entering {}", path.display()))(e.into()))?;
            PodNet::Host
        }
        (net, _) => net.clone(),
    };
    let netns = match &net {
        PodNet::Netns(path) => Some(path.as_path()),
        _ => None,
    };
    let pods = pod.path().parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
    super::sandbox_ns::isolate(&pods, &pod.path(), netns)
        .map_err(io_err("giving the pod a mount namespace of its own"))?;
    let spec = NspawnSpec {
        nspawn,
        uuid: pod.uuid().to_string(),
        rootfs,
        net,
        host_ipc: opts.host_ipc,
        userns: opts.userns,
        notify_ready: opts.systemd_unit || opts.ready_by_notify,
    };
    let log_path = pod.path().join(pod::SANDBOX_LOG_FILE);
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(io_err(format!("opening {}", log_path.display())))?;
    let fd = pod.lock_fd()?;
    let mut cmd = std::process::Command::new(&spec.nspawn);
    cmd.args(spec.args()).envs(spec.env()).env("RKT_LOCK_FD", fd.to_string()).stdin(std::process::Stdio::null());
    if let Some(path) = &opts.notify_socket {
        cmd.env("NOTIFY_SOCKET", path);
    }
    // from here on the pod's console goes to its log; the daemon sees EOF on our stderr pipe
    redirect_output(&log).map_err(io_err("redirecting output to the pod log"))?;
    lock::keep_across_exec(fd).map_err(io_err("passing the pod lock to nspawn"))?;
    let err = cmd.exec();
    Err(SandboxError::Io { context: format!("exec {}", spec.nspawn.display()), source: err })
}

fn redirect_output(log: &fs::File) -> io::Result<()> {
    for target in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        // SAFETY: dup2 of a valid open descriptor onto a standard stream.
        if unsafe { libc::dup2(log.as_raw_fd(), target) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Undoes a failed prepare: leave the cgroup and remove it, drop the pod dir.
fn abort(pod: &mut Pod, cgroup: Option<&PodCgroup>) {
    if let Some(cg) = cgroup {
        for dir in &cg.dirs {
            // back to the hierarchy root so the pod cgroup can be removed
            if let Some(root) = dir.to_str().and_then(|d| d.strip_suffix(&cg.subcgroup)) {
                let _ = fs::write(PathBuf::from(root).join("cgroup.procs"), b"0");
            }
        }
        let _ = cg.remove();
    }
    let moved = if pod.dir() == pod::PodDir::Run {
        pod.release_lock();
        pod.to_exited_garbage()
    } else {
        pod.to_garbage()
    };
    pod.release_lock();
    if moved.is_ok()
        && let Ok(p) = Pod::open(pod.data_dir(), &pod.uuid().to_string())
    {
        let _ = p.delete();
    }
}

/// What a standby sandbox process (`--standby`) reads on stdin: its
/// arguments, each ended by a NUL byte, and an empty one after the last.
/// The caller may write the cgroup byte (`--cgroup-from-caller`) after it.
pub(crate) fn standby_message(args: &SandboxArgs) -> Vec<u8> {
    let mut msg = Vec::new();
    for a in args.to_argv() {
        msg.extend_from_slice(a.as_encoded_bytes());
        msg.push(0);
    }
    msg.push(0);
    msg
}

/// The arguments a standby sandbox process waits for ([`standby_message`]),
/// read from `input`; `None` at EOF before the first one (the daemon left
/// without using this process).
pub(crate) fn read_standby(input: &mut impl io::BufRead) -> Result<Option<SandboxArgs>, SandboxError> {
    use clap::Parser;
    #[derive(Parser)]
    struct Argv {
        #[command(flatten)]
        args: SandboxArgs,
    }
    let mut argv: Vec<std::ffi::OsString> = vec!["sandbox".into()];
    loop {
        let mut arg = Vec::new();
        let n = input.read_until(0, &mut arg).map_err(io_err("reading the standby arguments"))?;
        match arg.pop() {
            None if n == 0 && argv.len() == 1 => return Ok(None),
            Some(0) if arg.is_empty() => break,
            Some(0) => argv.push(std::ffi::OsString::from_vec(arg)),
            _ => return Err(SandboxError::Invalid("standby arguments cut short".into())),
        }
    }
    let args = Argv::try_parse_from(argv).map_err(|e| SandboxError::Invalid(e.to_string()))?.args;
    if args.standby {
        return Err(SandboxError::Invalid("--standby among the standby arguments".into()));
    }
    Ok(Some(args))
}

impl SandboxArgs {
    /// The arguments to run with: these, or for a standby process
    /// (`--standby`) those read from `input`, which must be for its own pod
    /// (`--uuid`); `None`: none came (EOF).
    pub(crate) fn resolve_standby(self, input: &mut impl io::BufRead) -> Result<Option<SandboxArgs>, SandboxError> {
        if !self.standby {
            return Ok(Some(self));
        }
        let Some(args) = read_standby(input)? else { return Ok(None) };
        if self.uuid.is_some() && args.uuid != self.uuid {
            return Err(SandboxError::Invalid(format!(
                "standby for pod {:?} was sent the arguments of pod {:?}",
                self.uuid, args.uuid
            )));
        }
        Ok(Some(args))
    }
}

/// The `app sandbox` command line, shared by the CLI parser and the daemon
/// that builds it (so the two cannot drift apart).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub(crate) struct SandboxArgs {
    /// Use this pod UUID instead of a random one.
    #[arg(long)]
    pub uuid: Option<Uuid>,
    /// Pod manifest (JSON) to start from; its apps must be empty.
    #[arg(long)]
    pub pod_manifest: Option<PathBuf>,
    /// Pod hostname [default: rkt-<uuid>].
    #[arg(long)]
    pub hostname: Option<String>,
    /// DNS server for the pod's resolv.conf (repeatable).
    #[arg(long)]
    pub dns: Vec<String>,
    /// DNS search domain (repeatable).
    #[arg(long)]
    pub dns_search: Vec<String>,
    /// resolv.conf option (repeatable).
    #[arg(long)]
    pub dns_opt: Vec<String>,
    /// Extra /etc/hosts line, `IP=NAME[,NAME...]` (repeatable).
    #[arg(long)]
    pub hosts_entry: Vec<String>,
    /// `host` (node network), `none` (only lo), or `default` (the netns given by --netns).
    #[arg(long, default_value = "default")]
    pub net: String,
    /// Pre-made network namespace to use with --net=default.
    #[arg(long)]
    pub netns: Option<PathBuf>,
    /// `parent` shares the node's IPC namespace.
    #[arg(long)]
    pub ipc: Option<String>,
    /// `HOST:LENGTH`: the pod runs in a user namespace whose ids 0..LENGTH
    /// are the node's HOST..HOST+LENGTH (uids and gids alike).
    #[arg(long)]
    pub private_users: Option<String>,
    /// cgroup parent (cgroupfs path, or a slice name under systemd).
    #[arg(long)]
    pub cgroup_parent: Option<String>,
    /// Set when started in a unit of the node's systemd: the unit already placed the pod's cgroup.
    #[arg(long)]
    pub in_systemd_unit: bool,
    /// Join only the unified and name=systemd cgroups; the caller (the daemon)
    /// moves the pod into the v1 controller cgroups while it boots.
    #[arg(long)]
    pub defer_cgroup_controllers: bool,
    /// The caller moves this process into the pod's cgroup as soon as it
    /// exists and then writes one byte to stdin; at EOF without it, the
    /// process joins the cgroup itself. (The first cgroup migration after a
    /// quiet spell waits for an RCU grace period, about 8 ms: the daemon's
    /// passes while this process starts and writes the pod directory.)
    #[arg(long)]
    pub cgroup_from_caller: bool,
    /// nspawn passes the pod's systemd's READY=1 on to `$NOTIFY_SOCKET`,
    /// whose owner marks the pod ready; no unit in the pod does (it would
    /// cost the boot a process start).
    #[arg(long)]
    pub ready_by_notify: bool,
    /// The socket nspawn tells about the pod (`$NOTIFY_SOCKET`), when it is
    /// not this process's own.
    #[arg(long)]
    pub notify_socket: Option<PathBuf>,
    /// Wait for the other arguments on stdin (see [`read_standby`]): the
    /// daemon starts a sandbox process ahead, so a cold pod start does not
    /// wait for an exec of this program and its start-up (about 4 ms).
    #[arg(long)]
    pub standby: bool,
    /// Run nspawn and the pod's systemd at this nice value (rktlet's pod
    /// pool boots its pods at a low priority and resets it when one is taken).
    #[arg(long, allow_hyphen_values = true)]
    pub nice: Option<i32>,
    /// Pod annotation `NAME=VALUE` (repeatable; without --pod-manifest).
    #[arg(long)]
    pub annotation: Vec<String>,
    /// Pod user annotation `KEY=VALUE` (repeatable).
    #[arg(long)]
    pub user_annotation: Vec<String>,
    /// Pod user label `KEY=VALUE` (repeatable).
    #[arg(long)]
    pub user_label: Vec<String>,
    /// Write the pod UUID to this file.
    #[arg(long)]
    pub uuid_file_save: Option<PathBuf>,
}

fn split_kv(s: &str) -> Result<(String, String), SandboxError> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| SandboxError::Invalid(format!("{s:?} is not KEY=VALUE")))
}

impl SandboxArgs {
    /// The arguments after `app sandbox` that parse back into `self`.
    pub(crate) fn to_argv(&self) -> Vec<std::ffi::OsString> {
        let mut a: Vec<std::ffi::OsString> = Vec::new();
        let mut push = |flag: &str, v: &dyn AsRef<std::ffi::OsStr>| {
            let mut s = std::ffi::OsString::from(format!("--{flag}="));
            s.push(v);
            a.push(s);
        };
        if let Some(u) = &self.uuid {
            push("uuid", &u.to_string());
        }
        if let Some(p) = &self.pod_manifest {
            push("pod-manifest", p);
        }
        if let Some(h) = &self.hostname {
            push("hostname", h);
        }
        for (flag, list) in [
            ("dns", &self.dns),
            ("dns-search", &self.dns_search),
            ("dns-opt", &self.dns_opt),
            ("hosts-entry", &self.hosts_entry),
            ("annotation", &self.annotation),
            ("user-annotation", &self.user_annotation),
            ("user-label", &self.user_label),
        ] {
            for v in list {
                push(flag, v);
            }
        }
        push("net", &self.net);
        if let Some(p) = &self.netns {
            push("netns", p);
        }
        if let Some(i) = &self.ipc {
            push("ipc", i);
        }
        if let Some(u) = &self.private_users {
            push("private-users", u);
        }
        if let Some(c) = &self.cgroup_parent {
            push("cgroup-parent", c);
        }
        if let Some(p) = &self.uuid_file_save {
            push("uuid-file-save", p);
        }
        if let Some(n) = self.nice {
            push("nice", &n.to_string());
        }
        if let Some(p) = &self.notify_socket {
            push("notify-socket", p);
        }
        if self.in_systemd_unit {
            a.push("--in-systemd-unit".into());
        }
        if self.defer_cgroup_controllers {
            a.push("--defer-cgroup-controllers".into());
        }
        if self.cgroup_from_caller {
            a.push("--cgroup-from-caller".into());
        }
        if self.ready_by_notify {
            a.push("--ready-by-notify".into());
        }
        if self.standby {
            a.push("--standby".into());
        }
        a
    }

    /// Turns the flags into sandbox options on `data`.
    pub(crate) fn into_options(self, data: DataDir) -> Result<SandboxOptions, SandboxError> {
        let mut manifest = match &self.pod_manifest {
            Some(path) => {
                let bytes = fs::read(path).map_err(io_err(format!("reading {}", path.display())))?;
                let m: PodManifest = serde_json::from_slice(&bytes)
                    .map_err(|e| SandboxError::Invalid(format!("pod manifest {}: {e}", path.display())))?;
                if !m.apps.is_empty() {
                    return Err(SandboxError::Invalid("a sandbox starts without apps".into()));
                }
                m
            }
            None => PodManifest::mutable(),
        };
        for a in &self.annotation {
            let (k, v) = split_kv(a)?;
            manifest.set_annotation(&k, v);
        }
        for a in &self.user_annotation {
            let (k, v) = split_kv(a)?;
            manifest.user_annotations.insert(k, v);
        }
        for l in &self.user_label {
            let (k, v) = split_kv(l)?;
            manifest.user_labels.insert(k, v);
        }
        if let Some(u) = &self.private_users {
            let map = super::userns::IdMap::parse(u)
                .map_err(|e| SandboxError::Invalid(format!("--private-users={u}: {e}")))?;
            manifest.set_annotation(rkt::schema::ANNOTATION_USERNS, map.to_string());
        }
        let userns = super::userns::of_manifest(&manifest).map_err(|e| SandboxError::Invalid(e.to_string()))?;
        let net = match self.net.as_str() {
            "host" => PodNet::Host,
            "none" => PodNet::None,
            "default" => match self.netns {
                Some(p) => PodNet::Netns(p),
                None => {
                    return Err(SandboxError::Invalid(
                        "--net=default needs --netns=PATH (a pre-made namespace)".into(),
                    ));
                }
            },
            other => return Err(SandboxError::Invalid(format!("unknown --net={other}: use host, none or default"))),
        };
        let host_ipc = match self.ipc.as_deref() {
            None | Some("" | "private" | "auto") => false,
            Some("parent" | "host") => true,
            Some(other) => return Err(SandboxError::Invalid(format!("unknown --ipc={other}: use private or parent"))),
        };
        let mut hosts_entries = Vec::new();
        for e in &self.hosts_entry {
            let (ip, names) = split_kv(e)?;
            hosts_entries.push(format!("{ip}\t{}", names.replace(',', " ")));
        }
        // explicit settings, or the node's own file without loopback resolvers
        let dns = crate::net::dns::DnsConfig {
            servers: self.dns.clone(),
            searches: self.dns_search.clone(),
            options: self.dns_opt.clone(),
        };
        let host = std::fs::read_to_string(crate::net::dns::HOST_RESOLV_CONF).unwrap_or_default();
        let resolv_conf = crate::net::dns::resolv_conf(Some(&dns), &host);
        Ok(SandboxOptions {
            data,
            uuid: self.uuid,
            manifest,
            hostname: self.hostname,
            resolv_conf,
            hosts_entries,
            net,
            host_ipc,
            userns,
            cgroup_parent: self.cgroup_parent.unwrap_or_default(),
            systemd_unit: self.in_systemd_unit,
            defer_controllers: self.defer_cgroup_controllers,
            cgroup_from_caller: self.cgroup_from_caller,
            ready_by_notify: self.ready_by_notify,
            notify_socket: self.notify_socket,
            nice: self.nice,
            uuid_file_save: self.uuid_file_save,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: SandboxArgs,
    }

    #[test]
    fn argv_round_trips() {
        let args = SandboxArgs {
            uuid: Some(Uuid::new_v4()),
            pod_manifest: Some("/tmp/m.json".into()),
            hostname: Some("web".into()),
            dns: vec!["10.0.0.10".into(), "10.0.0.11".into()],
            dns_search: vec!["svc.cluster.local".into()],
            dns_opt: vec!["ndots:5".into()],
            hosts_entry: vec!["10.1.1.1=a,b".into()],
            net: "default".into(),
            netns: Some("/var/run/netns/x".into()),
            ipc: Some("parent".into()),
            private_users: Some("2000000:65536".into()),
            cgroup_parent: Some("/kubepods/pod1".into()),
            in_systemd_unit: true,
            defer_cgroup_controllers: true,
            cgroup_from_caller: true,
            ready_by_notify: true,
            notify_socket: Some("/d/tmp/u.notify".into()),
            standby: true,
            nice: Some(10),
            annotation: vec!["a=b=c".into()],
            user_annotation: vec!["k=v".into()],
            user_label: vec!["app=web".into()],
            uuid_file_save: Some("/tmp/u".into()),
        };
        let mut argv: Vec<std::ffi::OsString> = vec!["sandbox".into()];
        argv.extend(args.to_argv());
        assert_eq!(Wrap::parse_from(argv).args, args);
    }

    #[test]
    fn standby_arguments_come_on_stdin() {
        let args = SandboxArgs {
            uuid: Some(Uuid::new_v4()),
            hostname: Some("web 1\nx".into()),
            dns: vec!["10.0.0.10".into()],
            net: "default".into(),
            netns: Some("/var/run/netns/x".into()),
            cgroup_from_caller: true,
            notify_socket: Some("/d/tmp/u.notify".into()),
            ..Default::default()
        };
        // the cgroup byte may follow in the same stream, unread
        let mut input = std::io::Cursor::new([standby_message(&args), b"1".to_vec()].concat());
        assert_eq!(read_standby(&mut input).expect("read"), Some(args.clone()));
        assert_eq!(input.position() as usize, standby_message(&args).len());
        assert_eq!(read_standby(&mut std::io::Cursor::new(Vec::new())).expect("eof"), None);
        let cut = standby_message(&args);
        let cut = &cut[..cut.len() - 1];
        assert!(matches!(read_standby(&mut std::io::Cursor::new(cut)), Err(SandboxError::Invalid(_))));
        let nested = SandboxArgs { standby: true, ..args.clone() };
        assert!(matches!(
            read_standby(&mut std::io::Cursor::new(standby_message(&nested))),
            Err(SandboxError::Invalid(_))
        ));
        let own = SandboxArgs { standby: true, uuid: args.uuid, ..Default::default() };
        let other = SandboxArgs { uuid: Some(Uuid::new_v4()), ..args.clone() };
        assert!(matches!(
            own.clone().resolve_standby(&mut std::io::Cursor::new(standby_message(&other))),
            Err(SandboxError::Invalid(_))
        ));
        let resolved = own.resolve_standby(&mut std::io::Cursor::new(standby_message(&args))).expect("own pod");
        assert_eq!(resolved, Some(args.clone()));
        let plain = SandboxArgs { net: "host".into(), ..Default::default() };
        assert_eq!(plain.clone().resolve_standby(&mut std::io::empty()).expect("plain"), Some(plain));
        let unknown = b"--no-such-flag\0\0".to_vec();
        assert!(matches!(read_standby(&mut std::io::Cursor::new(unknown)), Err(SandboxError::Invalid(_))));
    }

    #[test]
    fn options_from_flags() {
        let data = DataDir::new("/nonexistent");
        let args = SandboxArgs {
            net: "default".into(),
            netns: Some("/var/run/netns/p".into()),
            hosts_entry: vec!["10.1.1.1=a,b".into()],
            user_label: vec!["app=web".into()],
            annotation: vec!["x.io/y=z".into()],
            dns: vec!["10.0.0.10".into()],
            ..Default::default()
        };
        let o = args.into_options(data.clone()).expect("options");
        assert_eq!(o.net, PodNet::Netns("/var/run/netns/p".into()));
        assert_eq!(o.hosts_entries, ["10.1.1.1\ta b"]);
        assert_eq!(o.manifest.user_labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(o.manifest.annotation("x.io/y"), Some("z"));
        assert!(o.manifest.is_mutable());
        assert!(o.resolv_conf.contains("nameserver 10.0.0.10"));
        let bad = SandboxArgs { net: "default".into(), ..Default::default() };
        assert!(matches!(bad.into_options(data.clone()), Err(SandboxError::Invalid(_))));
        let bad = SandboxArgs { net: "host".into(), user_label: vec!["novalue".into()], ..Default::default() };
        assert!(matches!(bad.into_options(data.clone()), Err(SandboxError::Invalid(_))));
        // a user namespace is recorded in the manifest, where apps and execs find it
        let userns =
            SandboxArgs { net: "none".into(), private_users: Some("65536:65536".into()), ..Default::default() };
        let o = userns.into_options(data.clone()).expect("options");
        assert_eq!(o.userns, Some(crate::stage1::userns::IdMap { host: 65536, len: 65536 }));
        assert_eq!(o.manifest.annotation(rkt::schema::ANNOTATION_USERNS), Some("65536:65536"));
        for bad in ["0:65536", "65536", "65536:0"] {
            let args = SandboxArgs { net: "none".into(), private_users: Some(bad.into()), ..Default::default() };
            assert!(matches!(args.into_options(data.clone()), Err(SandboxError::Invalid(_))), "{bad}");
        }
    }
}
