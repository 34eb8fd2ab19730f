//! StartContainer: the app's unit described (`stage1::bus::ServiceSpec`)
//! and started in the pod's systemd over the pod's private socket (no exec,
//! no reload): command, ids, capabilities, seccomp, masks, devices, stdio
//! through the pod's log writer or a terminal, limits; apps with a PID
//! namespace of their own (or other needs systemd cannot meet) run through
//! appexec (`stage1::appexec`), host-PID apps are started by the log writer.

use super::resources::apply_limits;
use super::stop::stop_app;
use super::{ContainerError, Target, app_cgroup, meta, open, unit, with_bus};
use crate::runtime::{EventKind, Runtime};
use crate::stage1::app::{self, AppPaths, AppState};
use crate::stage1::appexec::{Bind, PidMode, Plan, StartedFifo};
use crate::stage1::bus::{BindPath, BusError, ExecCommand, Output, Property, ServiceSpec, UnitBus, Value};
use crate::stage1::crilog::{self, Stream};
use crate::stage1::seccomp;
use crate::stage1::unit_spec;
use rkt::pod::Pod;
use rkt::schema::RuntimeApp;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The program to run: absolute as given, else found in the app's `PATH`.
fn resolve_program(rootfs: &Path, program: &str, env: &[rkt::schema::NameValue]) -> Result<String, ContainerError> {
    if program.starts_with('/') {
        return Ok(program.to_string());
    }
    let path = env.iter().find(|e| e.name == "PATH").map(|e| e.value.as_str()).unwrap_or("/usr/bin:/bin");
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| format!("{}/{program}", d.trim_end_matches('/')))
        .find(|p| app::target_in(rootfs, Path::new(p)).is_ok_and(|at| at.is_file()))
        .ok_or_else(|| ContainerError::InvalidArgument(format!("executable {program:?} not found in the image's PATH")))
}

/// A seccomp filter as the app's isolators ask for it: an allow list or a
/// deny list, its calls, the errno of a denied call.
type Filter = Option<(bool, Vec<String>, Option<i32>)>;

/// The app's cgroups when the daemon places it there (cgroup v1).
type Placed = Option<Placement>;

/// Where the daemon places the app (cgroup v1): its cgroups, what appexec
/// waits for before anything of the app runs (their name and number), and,
/// when they are made while its unit starts, the limits and devices they
/// are made with.
struct Placement {
    cg: crate::cgroup::app::AppCgroup,
    wait: (String, usize),
    make: Option<(crate::cgroup::app::Limits, crate::cgroup::devices::Allowed)>,
    /// Set once the unit's first processes were moved in while it started:
    /// appexec forks the app only after that, so what the unit runs is in
    /// the app's cgroups already, and no second look is needed after it.
    adopted: AtomicBool,
}

impl Placement {
    fn new(
        cg: crate::cgroup::app::AppCgroup,
        wait: (String, usize),
        make: Option<(crate::cgroup::app::Limits, crate::cgroup::devices::Allowed)>,
    ) -> Self {
        Placement { cg, wait, make, adopted: AtomicBool::new(false) }
    }

    /// While the unit starts (`starting`): the cgroups made, when they are
    /// not yet, then the unit's first processes moved in. Cgroups that
    /// cannot be made kill what of the unit started: it waits to be
    /// placed, and nothing of the app runs outside them.
    fn make_and_adopt(&self, starting: &AtomicBool) -> std::io::Result<()> {
        if let Some((limits, allowed)) = &self.make
            && let Err(e) = self.cg.apply(limits).and_then(|()| self.cg.apply_devices(allowed))
        {
            self.cg.kill_while_starting(starting);
            return Err(e);
        }
        let adopted = self.cg.adopt_while_starting(starting)?;
        self.adopted.store(adopted, Ordering::Release);
        Ok(())
    }
}

/// What the app's isolators and annotations leave for the rest of the start:
/// masked and read-only paths, and the seccomp filter.
struct Isolators {
    masked: Option<Vec<String>>,
    readonly: Option<Vec<String>>,
    filter: Filter,
}

/// Starts created container `id`: its unit described and started in the
/// pod's systemd; returns once the app runs (or failed to, recorded as its exit).
pub(crate) async fn start(rt: &std::sync::Arc<Runtime>, id: &str) -> Result<(), ContainerError> {
    // one blocking section for the whole start: each of its steps' own
    // (block_in_place) is then free, where each would hand the worker's
    // core to another thread and take it back
    let pod = tokio::task::block_in_place(|| start_blocking(rt, id))?;
    rt.warm_later(pod);
    Ok(())
}

/// Starts the container; its pod's UUID.
fn start_blocking(rt: &Runtime, id: &str) -> Result<uuid::Uuid, ContainerError> {
    let mut steps = crate::base::steps::Steps::new();
    // placing the unit's process and then its controllers wait for no RCU grace period each
    crate::cgroup::warm::hold(crate::cgroup::warm::CONTAINER_START);
    let (t, paths) = open_created(rt, id)?;
    steps.mark("open");
    // the pod's systemd, as its bus connection knows it (masks, OOM score and terminal need it)
    let pid1 = rt.pod_bus(&t.pod).map_err(ContainerError::Unavailable)?.pid1();
    steps.mark("bus");
    if let Some(images) = meta::restore_images(&t.app) {
        return start_restored(rt, &t, &paths, pid1, id, &images).map(|()| t.pod.uuid());
    }
    let section = t.app.app.clone().unwrap_or_default();
    let mut spec = base_spec(&t, &paths, id, &section)?;
    let isolators = isolators(&t, &section, &mut spec)?;
    steps.mark("spec");
    let (pid_mode, limits, placed, started) =
        plan_namespaces_and_cgroups(rt, &t, &paths, pid1, &mut spec, isolators, &mut steps)?;
    unit_properties(&t, pid1, &limits, &mut spec);
    let tty_slave = stdio(&t, pid1, id, &section, &mut spec)?;
    steps.mark("stdio");
    mark_before_start(&paths, &pid_mode)?;
    steps.mark("mark");
    if let Some(e) = start_unit(rt, &t, &paths, id, &spec, &placed, started.as_ref()) {
        if let Some(pty) = tty_slave {
            release_terminal(&t, pid1, pty);
        }
        return Err(e);
    }
    crate::base::fault::point("start-after-unit");
    rt.emit(t.pod.uuid(), &t.app.name, EventKind::Started);
    steps.mark("unit");
    let limits_result = place_in_cgroups(&t, &placed, &limits);
    // a host-PID app joins its template's cgroups: not before they hold it
    if pid_mode == PidMode::Host && (limits_result.is_ok() || !devices_held(&t)) {
        start_host_app(rt, &t, &paths, pid1, id)?;
    }
    steps.mark("cgroups");
    tracing::debug!(container = id, steps = %steps.line(), "started");
    settle_limits(rt, &t, id, &limits, limits_result)?;
    Ok(t.pod.uuid())
}

/// Starts a container created from a checkpoint (`container::restore`):
/// its unit runs appexec, which runs `criu restore` from the pod (CRIU's
/// images in `images`, the app's rootfs as the root, the pod's network,
/// UTS and IPC namespaces joined by inheritance, the mounts that came from
/// the old pod mapped to this one's, the new stdio pipes handed in for the
/// old ones) and then waits for the restored container, its child, as it
/// waits for an app it exec'd. The images are removed once used.
fn start_restored(
    rt: &Runtime,
    t: &Target,
    paths: &AppPaths,
    pid1: i32,
    id: &str,
    images: &str,
) -> Result<(), ContainerError> {
    let result = restore_unit(rt, t, paths, pid1, id, images);
    let _ = std::fs::remove_dir_all(paths.checkpoint());
    result
}

fn restore_unit(
    rt: &Runtime,
    t: &Target,
    paths: &AppPaths,
    pid1: i32,
    id: &str,
    images: &str,
) -> Result<(), ContainerError> {
    let criu = super::checkpoint::criu_binary()?;
    // the pod sees the node's /usr, nothing else of it
    if !criu.starts_with("/usr/") {
        return Err(ContainerError::FailedPrecondition(format!(
            "criu is at {}: pods see only the node's /usr",
            criu.display()
        )));
    }
    let facts: super::checkpoint::DumpFacts = std::fs::read(paths.checkpoint().join(super::checkpoint::RKTLET_JSON))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| ContainerError::FailedPrecondition(format!("the checkpoint of container {id} is gone")))?;
    tokio::task::block_in_place(|| crate::stage1::appexec::ensure(&rt.data, &t.pod.path(), pid1))
        .map_err(|e| ContainerError::Internal(format!("putting appexec in pod {}: {e}", t.pod.uuid())))?;
    let rootfs = paths.rootfs_in_pod().display().to_string();
    let pidfile = format!("{images}/restored.pid");
    let mut args: Vec<String> =
        ["restore", "--images-dir", images, "--log-file", "restore.log", "-v4", "--root", &rootfs]
            .iter()
            .map(|s| s.to_string())
            .collect();
    args.extend(
        ["--restore-detached", "--restore-sibling", "--manage-cgroups=ignore", "--tcp-established", "--file-locks"]
            .map(String::from),
    );
    args.extend(["--pidfile".to_string(), pidfile.clone()]);
    let is_volume = |point: &str| t.app.mounts.iter().any(|m| Path::new(&m.path) == Path::new(point));
    // the container's own cgroups are its new ones: appexec names them (`cgroupfs=`)
    for point in facts.external_mounts.iter().filter(|p| !facts.cgroup_mounts.contains(p)) {
        // a volume is in this app's root, where CreateContainer put it; the
        // rest (/dev, /sys, identity files...) is the pod's own
        let source = if is_volume(point) { format!("{rootfs}{point}") } else { point.clone() };
        args.extend(["--external".to_string(), format!("mnt[{point}]:{source}")]);
    }
    // a volume below one of the pod's own mounts (kubelet's
    // /dev/termination-log) needs its mount point there, as appexec makes it
    for point in facts.external_mounts.iter().filter(|p| is_volume(p)) {
        let below_pod_mount = facts
            .external_mounts
            .iter()
            .any(|q| !is_volume(q) && Path::new(point).starts_with(q) && Path::new(point) != Path::new(q));
        if below_pod_mount {
            mount_point_in_pod(pid1, point, &paths.rootfs()).map_err(|e| {
                ContainerError::Internal(format!("the mount point {point} in pod {}: {e}", t.pod.uuid()))
            })?;
        }
    }
    for (fd, pipe) in &facts.stdio {
        // the unit's new stdio for the old: stdout and stderr always, stdin when it has one
        if *fd > 0 || meta::stdin(&t.app).is_some() {
            args.extend(["--inherit-fd".to_string(), format!("fd[{fd}]:{pipe}")]);
        }
    }
    let criu_cmd = ExecCommand::new(criu.display().to_string(), args);
    let limits = meta::limits(&t.app);
    tokio::task::block_in_place(|| super::pod_resources::refresh_for_app(rt, &t.pod))?;
    // (v1) CRIU and what it restores run in the app's cgroups from the start
    let placed = place_before_start(t, &limits);
    let plan = Plan {
        restore: Some(pidfile),
        root: Some(rootfs.clone()),
        root_read_only: t.app.read_only_root_fs,
        cgroup_wait: placed.as_ref().map(|p| p.wait.clone()),
        oom_marker: Some(oom_marker(t)),
        // (a checkpoint without them, from an older rktlet, has its pod's at their places)
        cgroup_view: (!facts.cgroup_mounts.is_empty()).then(|| !meta::privileged(&t.app)),
        ..Default::default()
    };
    let mut spec = ServiceSpec::new(unit(&t.app.name), plan.command(&criu_cmd));
    spec.description = format!("container {} (restored)", id);
    spec.mount_api_vfs = false;
    spec.notify_ready = true;
    spec.extra.push(unit_spec::oom_policy_continue());
    unit_properties(t, pid1, &limits, &mut spec);
    let section = t.app.app.clone().unwrap_or_default();
    stdio(t, pid1, id, &section, &mut spec)?;
    mark_before_start(paths, &PidMode::Container)?;
    if let Some(e) = start_unit(rt, t, paths, id, &spec, &placed, None) {
        let why = super::checkpoint::log_errors(&paths.checkpoint().join("restore.log"));
        return Err(match e {
            ContainerError::Bus(b) => ContainerError::Internal(format!("restoring container {id}: {b}{why}")),
            e => e,
        });
    }
    rt.emit(t.pod.uuid(), &t.app.name, EventKind::Started);
    let limits_result = place_in_cgroups(t, &placed, &limits);
    settle_limits(rt, t, id, &limits, limits_result)?;
    Ok(())
}

/// Makes `point` in the pod (an empty file, or a directory, as the volume
/// at `point` in the app's root `rootfs` is), unless something is there;
/// its parent must be a directory of the pod already (nothing followed).
fn mount_point_in_pod(pid1: i32, point: &str, rootfs: &Path) -> std::io::Result<()> {
    let target = std::path::PathBuf::from(format!("/proc/{pid1}/root{point}"));
    if std::fs::symlink_metadata(&target).is_ok() {
        return Ok(());
    }
    let parent = target.parent().ok_or_else(|| std::io::Error::other("no parent"))?;
    if !std::fs::symlink_metadata(parent)?.is_dir() {
        return Err(std::io::Error::other("its parent is not a directory"));
    }
    let inner = crate::stage1::app::under(rootfs, Path::new(point)).map_err(std::io::Error::other)?;
    if std::fs::metadata(inner).is_ok_and(|m| m.is_dir()) {
        std::fs::create_dir(&target)
    } else {
        std::fs::OpenOptions::new().write(true).create_new(true).open(&target).map(drop)
    }
}

/// Opens container `id` and checks that its pod runs and that it was
/// created and not started yet.
fn open_created(rt: &Runtime, id: &str) -> Result<(Target, AppPaths), ContainerError> {
    let t = open(rt, id)?;
    if !t.running {
        return Err(ContainerError::FailedPrecondition(format!("pod of container {} is not running", id)));
    }
    let paths = AppPaths::new(&t.pod, &t.app.name);
    if app::facts(&paths, true).state != AppState::Created {
        return Err(ContainerError::FailedPrecondition(format!("container {} was already started", id)));
    }
    Ok((t, paths))
}

/// The unit with the app's command (its program found in the app's `PATH`),
/// root directory, environment, working directory and ids.
fn base_spec(
    t: &Target,
    paths: &AppPaths,
    id: &str,
    section: &rkt::schema::App,
) -> Result<ServiceSpec, ContainerError> {
    let argv = section.exec.clone().unwrap_or_default();
    let program = argv.first().ok_or_else(|| ContainerError::InvalidArgument("container has no command".into()))?;
    let path = resolve_program(&paths.rootfs(), program, &section.environment)?;
    let mut exec = ExecCommand::new(path, argv.iter().skip(1).cloned());
    // argv[0] as the container asked for it (multi-call binaries such as busybox dispatch on it)
    exec.argv[0] = program.clone();
    let mut spec = ServiceSpec::new(unit(&t.app.name), exec);
    spec.description = format!("container {}", id);
    spec.root_directory = Some(paths.rootfs_in_pod().display().to_string());
    // (what systemd refuses goes through appexec: `environment_file`)
    spec.environment = section
        .environment
        .iter()
        .filter(|e| unit_spec::environment_takes(&e.name, &e.value))
        .map(|e| format!("{}={}", e.name, e.value))
        .collect();
    spec.working_directory = Some(section.working_directory.clone()).filter(|w| !w.is_empty());
    spec.user = Some(section.user.clone());
    spec.group = Some(section.group.clone());
    spec.supplementary_groups = section.supplementary_gids.iter().map(u32::to_string).collect();
    Ok(spec)
}

/// The app's isolators: capabilities and no_new_privs go into the unit, so
/// do its seccomp filter and the namespaces it may make; the masked and
/// read-only paths (the annotations, else the isolators of older builds) and
/// the filter are returned for the rest of the start.
fn isolators(t: &Target, section: &rkt::schema::App, spec: &mut ServiceSpec) -> Result<Isolators, ContainerError> {
    let (mut masked, mut readonly) = meta::path_lists(&t.app);
    let profile = seccomp::profile_of(&section.isolators).map_err(ContainerError::Internal)?;
    for iso in &section.isolators {
        match iso.name.as_str() {
            meta::ISOLATOR_CAPS | meta::ISOLATOR_CAPS_REMOVE => {
                let named =
                    set_of(&iso.value).iter().filter_map(|n| crate::stage1::caps::bits(n)).fold(0, |a, b| a | b);
                spec.capability_bounding_set =
                    Some(if iso.name == meta::ISOLATOR_CAPS { named } else { crate::stage1::caps::ALL & !named });
            }
            meta::ISOLATOR_NO_NEW_PRIVS => spec.no_new_privileges = iso.value.as_bool(),
            // as older builds kept them (the annotations, when there, win)
            meta::ISOLATOR_MASKED if masked.is_none() => masked = Some(set_of(&iso.value)),
            meta::ISOLATOR_READONLY if readonly.is_none() => readonly = Some(set_of(&iso.value)),
            _ => {}
        }
    }
    // InaccessiblePaths=/ReadOnlyPaths= do not reach below the /proc and
    // /sys that MountAPIVFS mounts; binds do (applied after them)
    let readonly = readonly.map(crate::stage1::api_vfs::app_read_only);
    if let Some(p) = &profile {
        spec.extra.extend(unit_spec::syscall_filter(p.allow, &p.calls, p.errno));
    }
    // (appexec's own namespace calls, PID and mount, stay allowed)
    if let Some(allowed) = profile.as_ref().and_then(|p| p.namespaces) {
        spec.extra.push(unit_spec::restrict_namespaces(allowed));
    }
    let filter = profile.map(|p| (p.allow, p.calls, p.errno));
    Ok(Isolators { masked, readonly, filter })
}

/// How the app gets its namespaces and cgroups: its PID mode, the pod's own
/// limits refreshed, where the daemon places it (cgroup v1: its cgroups,
/// made here or while its unit starts), the API file systems from systemd
/// or from appexec, the read-only root, identity files and device nodes.
/// Returns the PID mode, the app's limits, its placement and, for an app
/// started through appexec, the FIFO that says it started.
// (the steps timed are the start's own, continued here)
fn plan_namespaces_and_cgroups(
    rt: &Runtime,
    t: &Target,
    paths: &AppPaths,
    pid1: i32,
    spec: &mut ServiceSpec,
    isolators: Isolators,
    steps: &mut crate::base::steps::Steps,
) -> Result<(PidMode, crate::cgroup::app::Limits, Placed, Option<StartedFifo>), ContainerError> {
    let Isolators { masked, readonly, filter } = isolators;
    let pid_mode = tokio::task::block_in_place(|| pid_mode(rt, t, pid1))?;
    steps.mark("pid-mode");
    // an app with a PID namespace of its own gets its masks from appexec;
    // so does one with a volume whose mounts propagate both ways: systemd
    // makes every mount of a unit's namespace a slave, for good
    let shared = shared_volumes(&t.app);
    // so does one with an AppArmor profile (set by appexec for the app's execve)
    let apparmor = meta::apparmor(&t.app);
    let limits = meta::limits(&t.app);
    // the pod's own limits with this app counted (they only grow: the pod's
    // cgroup goes before the app's)
    tokio::task::block_in_place(|| super::pod_resources::refresh_for_app(rt, &t.pod))?;
    steps.mark("pod-resources");
    // on cgroup v1 the daemon places the app in its cgroups, limits or not:
    // appexec waits for that before anything of the app runs, so what it
    // charges from its first instruction is in its own stats and limits (a
    // v1 process moved later leaves its CPU time and memory behind)
    // (a host-PID app's template too: the app's own cgroups it shows at
    // /sys/fs/cgroup are those it is in when it makes the app's mounts)
    let placed = place_before_start(t, &limits);
    steps.mark("place");
    // so does one whose environment has what systemd refuses in a unit (a
    // name such as `data-1`, a control character): appexec puts it in place
    let env_file = environment_file(t, paths)?;
    let appexec_paths = if pid_mode != PidMode::Pod
        || !shared.is_empty()
        || apparmor.is_some()
        || placed.is_some()
        || env_file.is_some()
    {
        api_binds_for_appexec(&t.app, spec);
        let cgroup_wait = placed.as_ref().map(|p| p.wait.clone());
        Some(AppexecPaths { masked, readonly, shared, apparmor, cgroup_wait, env_file })
    } else {
        tokio::task::block_in_place(|| api_file_systems(&t.pod, pid1, spec, masked, readonly))?;
        own_cgroup_bind(t, spec);
        None
    };
    if t.app.read_only_root_fs {
        spec.read_only_paths.push("/".into());
    }
    // writable as containerd mounts them, unless the rootfs is read-only
    // (ReadOnlyPaths=/ does not reach binds of their own)
    let identity = identity_files(&t.app);
    if t.app.read_only_root_fs {
        spec.bind_read_only_paths.extend(identity);
    } else {
        spec.bind_paths.extend(identity);
    }
    spec.bind_paths.extend(device_nodes(paths, &meta::devices(&t.app))?);
    steps.mark("binds");
    let started = match appexec_paths {
        Some(appexec_paths) => own_pid_namespace(rt, t, pid1, &pid_mode, spec, filter, appexec_paths)?,
        None => None,
    };
    steps.mark("own-pid-ns");
    Ok((pid_mode, limits, placed, started))
}

/// Where appexec marks an OOM kill its unit's cgroup counted, in the pod.
fn oom_marker(t: &Target) -> String {
    AppPaths::new(&t.pod, &t.app.name).status_file_in_pod(app::OOM_KILLED).display().to_string()
}

/// Writes the entries of the app's environment that systemd refuses in a
/// unit (`unit_spec::environment_takes`) to a file of the pod's, NUL-ended,
/// for appexec to put in place; its path in the pod, or None when systemd
/// takes them all.
fn environment_file(t: &Target, paths: &AppPaths) -> Result<Option<String>, ContainerError> {
    let env = t.app.app.as_ref().map(|a| a.environment.as_slice()).unwrap_or_default();
    let refused: Vec<u8> = env
        .iter()
        .filter(|e| !unit_spec::environment_takes(&e.name, &e.value))
        .flat_map(|e| format!("{}={}\0", e.name, e.value).into_bytes())
        .collect();
    if refused.is_empty() {
        return Ok(None);
    }
    let file = paths.environ_file();
    rkt::fs::write_volatile(&file, &refused, 0o600)
        .map_err(|e| ContainerError::Internal(format!("writing {}: {e}", file.display())))?;
    Ok(Some(paths.environ_file_in_pod().display().to_string()))
}

/// The app's cgroups on cgroup v1, made and written before any process of
/// the app is in them (appexec waits until it is moved there): its limits
/// and the devices it may open. Where the app cannot run without them (it
/// has limits, or the host holds devices in a v1 cgroup: a container never
/// runs with the node's devices open to it), they are made while its unit
/// starts, off the start's path ([`Placement::make_and_adopt`]; a failure
/// then fails the start). Otherwise they are made now, and an app whose
/// cgroups cannot be made runs without cgroups of its own, costing only its
/// stats (`settle_limits` says so). None where the daemon does not place
/// apps (cgroup v2: the unit's cgroup is the app's).
fn place_before_start(t: &Target, limits: &crate::cgroup::app::Limits) -> Placed {
    let (cg, wait) = app_cgroup(&t.pod, &t.app.name).and_then(|cg| cg.placement(&t.app.name).map(|w| (cg, w)))?;
    let allowed = meta::allowed_devices(&t.app);
    if limits.in_cgroups() || cg.holds_devices() {
        return Some(Placement::new(cg, wait, Some((limits.clone(), allowed))));
    }
    tokio::task::block_in_place(|| cg.apply(limits).and_then(|()| cg.apply_devices(&allowed)))
        .ok()
        .map(|()| Placement::new(cg, wait, None))
}

/// The unit's stop signal, accounting and limits (when systemd applies
/// them, cgroup v2) and OOM score.
fn unit_properties(t: &Target, pid1: i32, limits: &crate::cgroup::app::Limits, spec: &mut ServiceSpec) {
    spec.extra.extend(unit_spec::kill_signal(meta::stop_signal(&t.app).0));
    if crate::cgroup::Layout::cached().is_ok_and(|l| l.devices_mechanism() == crate::cgroup::devices::Mechanism::V2Bpf)
    {
        spec.extra.extend(unit_spec::devices(&meta::allowed_devices(&t.app)));
    }
    if crate::cgroup::Layout::cached().is_ok_and(|l| l.limits_through_systemd()) {
        // accounting on for every app, and its limits
        spec.extra.extend(unit_spec::accounting_and_limits(limits));
    }
    if let Some(adj) = limits.oom_score_adj.and_then(|adj| oom_score_adj_allowed(&t.pod, pid1, adj)) {
        spec.extra.push(unit_spec::oom_score_adjust(adj));
    }
}

/// The app's stdio, handed to the pod's log writer: a terminal of the pod's
/// devpts for a `tty` container, else a stdin pipe (when asked for) and a
/// pipe for stdout and one for stderr. Returns the terminal, which a failed
/// start lets go of.
fn stdio(
    t: &Target,
    pid1: i32,
    id: &str,
    section: &rkt::schema::App,
    spec: &mut ServiceSpec,
) -> Result<Option<crate::stage1::pty::PodPty>, ContainerError> {
    let log_path = meta::log_path(&t.app);
    let socket = t.pod.path().join(crilog::SOCKET_FILE);
    let mut tty_slave = None;
    if meta::tty(&t.app) {
        // a terminal of the pod's own devpts, so its name means something
        // inside; the master goes to the pod's log writer (output to the CRI
        // log as stdout, input from attach sessions, which also resize it)
        let pty = crate::stage1::pty::PodPty::open_as_seen_by(pid1)
            .map_err(|e| ContainerError::Internal(format!("a terminal for {}: {e}", id)))?;
        // the app's own, as systemd makes it for `User=` (appexec runs as root)
        if let (Ok(uid), Ok(gid)) = (section.user.parse::<u32>(), section.group.parse::<u32>()) {
            let path = format!("/proc/{pid1}/root{}", pty.path_in_pod);
            std::os::unix::fs::chown(&path, Some(uid), Some(gid))
                .map_err(|e| ContainerError::Internal(format!("the terminal of {}: {e}", id)))?;
        }
        spec.extra.extend(unit_spec::tty(&pty.path_in_pod, meta::stdin(&t.app).is_some()));
        // someone must read the terminal, or the app blocks once its buffer
        // fills (without a log path, for attach sessions only)
        crilog::attach(&socket, &t.app.name, Stream::Stdout, Path::new(&log_path), pty.master.as_raw_fd())
            .map_err(|e| ContainerError::Internal(format!("attaching the terminal of {}: {e}", id)))?;
        crilog::keep_stdin(&socket, &t.app.name, pty.master.as_raw_fd())
            .map_err(|e| ContainerError::Internal(format!("keeping the terminal of {}: {e}", id)))?;
        tty_slave = Some(pty);
    } else if meta::stdin(&t.app).is_some() {
        // a container with a stdin reads a pipe whose write end the pod's log
        // writer keeps (it outlives the daemon); attach sessions write to it
        let (r, w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| ContainerError::Internal(e.to_string()))?;
        crilog::keep_stdin(&t.pod.path().join(crilog::SOCKET_FILE), &t.app.name, w.as_raw_fd())
            .map_err(|e| ContainerError::Internal(format!("keeping the stdin of {}: {e}", id)))?;
        let stdin = crate::stage1::bus::Property::fd("StandardInputFileDescriptor", std::os::fd::AsFd::as_fd(&r))
            .map_err(|e| ContainerError::Internal(e.to_string()))?;
        spec.extra.push(stdin);
    }
    if meta::tty(&t.app) {
        // the terminal is stdout and stderr (above)
    } else {
        // read by the pod's log writer, log path or not: attach sessions
        // get the output from it (both pipes in one request)
        let pipe =
            || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| ContainerError::Internal(e.to_string()));
        let ((out_r, out_w), (err_r, err_w)) = (pipe()?, pipe()?);
        crilog::attach_output(&socket, &t.app.name, Path::new(&log_path), out_r.as_raw_fd(), err_r.as_raw_fd())
            .map_err(|e| ContainerError::Internal(format!("attaching the log of {}: {e}", id)))?;
        spec.stdout = Output::Fd(out_w);
        spec.stderr = Output::Fd(err_w);
    }
    Ok(tty_slave)
}

/// Marks the app started (and a host-PID app as such) before its unit
/// starts: the exit recorder only records started apps, and a short-lived
/// app can exit before StartTransientUnit's job is reported.
fn mark_before_start(paths: &AppPaths, pid_mode: &PidMode) -> Result<(), ContainerError> {
    if *pid_mode == PidMode::Host {
        std::fs::write(paths.status_file(app::HOST_PID), b"").map_err(|e| ContainerError::Internal(e.to_string()))?;
    }
    app::mark_started(paths).map_err(|e| ContainerError::Internal(e.to_string()))
}

/// Starts the unit over the pod's bus, the app's cgroups made (when not
/// yet) and the app moved into them meanwhile when the daemon places it
/// ([`Placement::make_and_adopt`]); with `started_fifo` (appexec's), done
/// as soon as appexec says the app runs, before systemd's job ends.
/// Returns why the start failed: a failed job is recorded as the app's
/// exit, a refused call unmarks it.
fn start_unit(
    rt: &Runtime,
    t: &Target,
    paths: &AppPaths,
    id: &str,
    spec: &ServiceSpec,
    placed: &Placed,
    started_fifo: Option<&StartedFifo>,
) -> Option<ContainerError> {
    // Ok(Err(..)): the job failed, so its process ran and could not become
    // the app, which ends the container (containerd reports a start error as
    // an exit too); Err(..): the call was refused, nothing ran
    // an app placed by the daemon (cgroup v1) is moved while its unit starts:
    // appexec waits for it, and the start job ends once the app is exec'd
    let (started, placement) = tokio::task::block_in_place(|| {
        let starting = AtomicBool::new(true);
        std::thread::scope(|scope| {
            let adopter = placed.as_ref().map(|p| scope.spawn(|| p.make_and_adopt(&starting)));
            let started = with_bus(rt, &t.pod, |bus| {
                let started = match started_fifo {
                    Some(fifo) => bus.start_transient_service_or_started(spec, fifo.reader()),
                    None => bus.start_transient_service(spec),
                };
                match started {
                    Err(e @ BusError::JobFailed { .. }) => Ok(Err(e)),
                    other => other.map(Ok),
                }
            });
            starting.store(false, Ordering::Release);
            let placement = adopter.map(|a| a.join().unwrap_or_else(|_| Err(std::io::Error::other("panicked"))));
            (started, placement)
        })
    });
    let placement =
        placement.map(|r| r.map_err(|e| ContainerError::Internal(format!("placing {} in its cgroups: {e}", id))));
    // (the connection the start used: its status read after a failed job)
    let bus = rt.pod_bus(&t.pod).ok();
    let (failed, stopped) = tokio::task::block_in_place(|| {
        settle_start(bus.as_deref().map(|b| b as &dyn UnitBus), paths, &spec.name, started, placement)
    });
    if stopped {
        rt.emit(t.pod.uuid(), &t.app.name, EventKind::Stopped);
    }
    failed
}

/// What a start leaves behind once the pod's systemd answered (`started`):
/// - the unit started: nothing;
/// - its job failed (the process ran and could not become the app, which
///   ends the container): why goes to `-starterror` (that the app could not
///   be placed in its cgroups, when `placement` failed, as that is the
///   cause; else the job's error), and the exit to the app's status, the
///   code of the unit's main process (128 when `bus` cannot tell);
/// - the call was refused (nothing ran): the app is unmarked as started.
///
/// Returns why the start failed, and whether this recorded the app's exit
/// (its Stopped event is then due).
fn settle_start(
    bus: Option<&dyn UnitBus>,
    paths: &AppPaths,
    unit: &str,
    started: Result<Result<(), BusError>, ContainerError>,
    placement: Option<Result<(), ContainerError>>,
) -> (Option<ContainerError>, bool) {
    match started {
        Ok(Ok(())) => (None, false),
        Ok(Err(job)) => {
            let e = match placement {
                Some(Err(e)) => e,
                _ => ContainerError::Bus(job),
            };
            let exit = bus.and_then(|b| b.unit_status(unit).ok()).and_then(|s| s.main_exit());
            let _ = std::fs::write(paths.status_file(app::START_ERROR), e.to_string());
            let code = exit.map_or(128, |x| crate::stage1::bus::exit_code(&x));
            let recorded = app::record_exit(paths, code).unwrap_or(false);
            (Some(e), recorded)
        }
        Err(e) => {
            let _ = std::fs::remove_file(paths.status_file("-started"));
            (Some(e), false)
        }
    }
}

/// After a failed start: the log writer lets go of a terminal once its
/// slave side was open and closed again (the app never opened it).
fn release_terminal(t: &Target, pid1: i32, pty: crate::stage1::pty::PodPty) {
    let socket = t.pod.path().join(crilog::SOCKET_FILE);
    let _ = crilog::close_stdin(&socket, &t.app.name);
    drop(pty.open_slave(pid1));
}

/// Every app gets its own cgroups, limits or not: they are what its stats
/// are read from; without limits asked for, a failure only costs the stats.
fn place_in_cgroups(t: &Target, placed: &Placed, limits: &crate::cgroup::app::Limits) -> std::io::Result<()> {
    match placed {
        // placed while its unit started, before appexec forked anything
        Some(p) if p.adopted.load(Ordering::Acquire) => Ok(()),
        // anything the app started since, too
        Some(p) => tokio::task::block_in_place(|| p.cg.adopt_unit_processes()),
        // a host-PID app's template: its devices too, before it joins them
        None => tokio::task::block_in_place(|| match app_cgroup(&t.pod, &t.app.name) {
            Some(cg) if cg.placement(&t.app.name).is_some() => {
                cg.apply(limits)?;
                cg.apply_devices(&meta::allowed_devices(&t.app))?;
                cg.adopt_unit_processes()
            }
            _ => apply_limits(t, limits),
        }),
    }
}

/// Whether the app must be in a v1 cgroup of its own for its devices.
fn devices_held(t: &Target) -> bool {
    app_cgroup(&t.pod, &t.app.name).is_some_and(|cg| cg.placement(&t.app.name).is_some() && cg.holds_devices())
}

/// Starts a host-PID app through the pod's log writer, after the limits:
/// the app joins the cgroups its template is in now. A failure is recorded
/// as the app's exit and its unit killed.
fn start_host_app(rt: &Runtime, t: &Target, paths: &AppPaths, pid1: i32, id: &str) -> Result<(), ContainerError> {
    if let Err(e) = tokio::task::block_in_place(|| run_host_app(t, pid1)) {
        let e = ContainerError::Internal(format!("starting {} in the node's PID namespace: {e}", id));
        let _ = std::fs::write(paths.status_file(app::START_ERROR), e.to_string());
        if app::record_exit(paths, 128).unwrap_or(false) {
            rt.emit(t.pod.uuid(), &t.app.name, EventKind::Stopped);
        }
        let _ = tokio::task::block_in_place(|| {
            with_bus(rt, &t.pod, |bus| bus.kill_unit(&unit(&t.app.name), libc::SIGKILL))
        });
        return Err(e);
    }
    Ok(())
}

/// What placing the app in its cgroups came to: without limits asked for,
/// a warning; with them, the app stopped and the start failed.
fn settle_limits(
    rt: &Runtime,
    t: &Target,
    id: &str,
    limits: &crate::cgroup::app::Limits,
    limits_result: std::io::Result<()>,
) -> Result<(), ContainerError> {
    match limits_result {
        Err(e) if limits.is_empty() && !devices_held(t) => {
            tracing::warn!(container = id, error = %e, "no cgroups of its own: no stats for it")
        }
        // on cgroup v2 the pod's systemd applied the limits before the app
        // ran; an app that ended since (an OOM kill at once, a command that
        // returns) has its cgroup taken down or its controllers disabled by
        // that systemd: nothing is left to confine, and its exit is reported
        Err(e) if app_ended(rt, t) => {
            tracing::debug!(container = id, error = %e, "the app ended before its limits were written again")
        }
        Err(e) => {
            // a container must not run without the limits it asked for
            let _ = tokio::task::block_in_place(|| stop_app(rt, t, Duration::ZERO));
            return Err(ContainerError::Internal(format!("limits of {}: {e}", id)));
        }
        Ok(()) => {}
    }
    Ok(())
}

/// Whether the app's unit is down or on its way down (or gone), as its
/// pod's systemd says.
fn app_ended(rt: &Runtime, t: &Target) -> bool {
    match tokio::task::block_in_place(|| with_bus(rt, &t.pod, |bus| bus.unit_status(&unit(&t.app.name)))) {
        Ok(status) => status.main_exit().is_some() || !matches!(status.active_state.as_str(), "active" | "activating"),
        Err(ContainerError::Bus(e)) => e.is_not_found(),
        Err(_) => false,
    }
}

/// Makes the app's device nodes in the pod (`/rkt/devices/<app>/<n>`, out
/// of every app's root) and returns the binds that put them at the paths
/// the container asked for. The node's mode carries the CRI permissions
/// (r, w) for non-root processes; root in the container is not held back by
/// it, and no per-app device cgroup is made.
fn device_nodes(paths: &AppPaths, devices: &[meta::Device]) -> Result<Vec<BindPath>, ContainerError> {
    use nix::sys::stat::{Mode, SFlag, makedev, mknod};
    if devices.is_empty() {
        return Ok(Vec::new());
    }
    let dir = paths.devices();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| ContainerError::Internal(format!("creating {}: {e}", dir.display())))?;
    let mut binds = Vec::new();
    for (i, d) in devices.iter().enumerate() {
        let kind = if d.kind == 'b' { SFlag::S_IFBLK } else { SFlag::S_IFCHR };
        let mut mode = Mode::empty();
        if d.permissions.contains('r') {
            mode |= Mode::S_IRUSR | Mode::S_IRGRP | Mode::S_IROTH;
        }
        if d.permissions.contains('w') {
            mode |= Mode::S_IWUSR | Mode::S_IWGRP | Mode::S_IWOTH;
        }
        if let Some(bits) = d.mode {
            mode = Mode::from_bits_truncate(bits & 0o666);
        }
        let node = dir.join(i.to_string());
        mknod(&node, kind, Mode::empty(), makedev(d.major, d.minor))
            .and_then(|()| {
                nix::sys::stat::fchmodat(
                    nix::fcntl::AT_FDCWD,
                    &node,
                    mode,
                    nix::sys::stat::FchmodatFlags::FollowSymlink,
                )
            })
            .map_err(|e| ContainerError::Internal(format!("making device {} for {}: {e}", node.display(), d.path)))?;
        binds.push(BindPath {
            source: paths.devices_in_pod().join(i.to_string()).display().to_string(),
            destination: d.path.clone(),
            ignore_missing: false,
            recursive: false,
        });
    }
    Ok(binds)
}

/// The pod's /sys and /dev for an app appexec starts (it mounts the app's
/// own /proc and makes every masked and read-only path itself), and the
/// volumes below them (kubelet's /dev/termination-log, a /dev/shm emptyDir):
/// they were attached on the app's rootfs, which /dev and /sys now cover, so
/// they come again on top, from where they are in the pod. (systemd 252
/// cannot take a source below the unit's RootDirectory: apps in the pod's
/// PID namespace do without.)
/// The app's volumes whose mounts propagate both ways (their paths).
fn shared_volumes(app: &RuntimeApp) -> Vec<String> {
    app.mounts
        .iter()
        .filter(|m| {
            m.app_volume.as_ref().is_some_and(|v| {
                crate::stage1::inject::Propagation::parse(v.propagation.as_deref())
                    == crate::stage1::inject::Propagation::Shared
            })
        })
        .map(|m| m.path.clone())
        .collect()
}

fn api_binds_for_appexec(app: &RuntimeApp, spec: &mut ServiceSpec) {
    spec.mount_api_vfs = false;
    let api = ["/sys", "/dev"];
    spec.bind_paths.extend(api.map(|p| BindPath {
        source: p.into(),
        destination: p.into(),
        ignore_missing: false,
        recursive: true,
    }));
    for m in &app.mounts {
        let Some(volume) = &m.app_volume else { continue };
        let path = Path::new(&m.path);
        if !api.iter().any(|api| path.starts_with(api) && path != Path::new(api)) {
            continue;
        }
        // where CreateContainer mounted it: found by appexec inside the app's
        // root (`@`), where no link of the image or of a volume leads out
        let bind = BindPath {
            source: format!("@{}", m.path.trim_start_matches('/')),
            destination: m.path.clone(),
            ignore_missing: false,
            recursive: true,
        };
        if volume.read_only == Some(true) {
            spec.bind_read_only_paths.push(bind);
        } else {
            spec.bind_paths.push(bind);
        }
    }
}

/// The app's own cgroup at its /sys/fs/cgroup for an app systemd gives its
/// namespaces (pure cgroup v2: the unit's cgroup is the app's; on v1 such
/// an app has no cgroups of its own), as appexec binds them for the others
/// (`cgroupfs=`): read-only but for a privileged container. The pod's
/// systemd sees its own cgroup namespace, whose root is the pod's payload.
fn own_cgroup_bind(t: &Target, spec: &mut ServiceSpec) {
    if !crate::cgroup::Layout::cached().is_ok_and(|l| l.is_pure_v2()) {
        return;
    }
    let bind = BindPath {
        source: format!("{}/system.slice/{}", crate::stage1::api_vfs::CGROUP_FS, unit(&t.app.name)),
        destination: crate::stage1::api_vfs::CGROUP_FS.into(),
        ignore_missing: false,
        recursive: false,
    };
    if meta::privileged(&t.app) {
        spec.bind_paths.push(bind);
    } else {
        spec.bind_read_only_paths.push(bind);
    }
}

/// /proc, /sys and /dev in an app of the pod's PID namespace, with its
/// masked and read-only paths. Apps asking for at least kubelet's defaults
/// bind the pod's own (its /proc masked once, `stage1/api_vfs.rs`) plus
/// binds for the rest they ask; the others (privileged: no masks) get fresh
/// ones from `MountAPIVFS=` with their own binds.
fn api_file_systems(
    pod: &Pod,
    pid1: i32,
    spec: &mut ServiceSpec,
    masked: Option<Vec<String>>,
    readonly: Option<Vec<String>>,
) -> Result<(), ContainerError> {
    let (mut masked, mut readonly) = (masked.unwrap_or_default(), readonly.unwrap_or_default());
    if !masked.is_empty() && crate::stage1::api_vfs::covers(&masked, &readonly) {
        crate::stage1::api_vfs::ensure(&pod.path(), pid1)
            .map_err(|e| ContainerError::Internal(format!("masking the pod's /proc: {e}")))?;
        spec.mount_api_vfs = false;
        spec.bind_paths.extend(["/proc", "/sys", "/dev"].map(|p| BindPath {
            source: p.into(),
            destination: p.into(),
            ignore_missing: false,
            recursive: true,
        }));
        // what the pod did not do already: a path it made read-only may still have to be masked
        masked.retain(|p| !crate::stage1::api_vfs::masked_in_pod(p));
        readonly.retain(|p| !crate::stage1::api_vfs::read_only_in_pod(p));
    }
    // (each read-only bind costs systemd 252 a parse of the pod's mountinfo:
    // masked files get a plain bind of /dev/null, as runc does)
    let (files, dirs) = masks(pod, pid1, &masked)?;
    spec.bind_paths.extend(files);
    spec.bind_read_only_paths.extend(dirs);
    spec.bind_read_only_paths.extend(readonly.iter().map(|p| BindPath {
        source: p.clone(),
        destination: p.clone(),
        ignore_missing: true,
        recursive: true,
    }));
    Ok(())
}

/// The app's PID namespace, with the pid to join for a target's.
fn pid_mode(rt: &Runtime, t: &Target, pid1: i32) -> Result<PidMode, ContainerError> {
    Ok(match meta::pid_namespace(&t.app) {
        meta::PidNamespace::Pod => PidMode::Pod,
        meta::PidNamespace::Container => PidMode::Container,
        meta::PidNamespace::Host => PidMode::Host,
        meta::PidNamespace::Target(app) => {
            let not_running = || {
                ContainerError::FailedPrecondition(format!(
                    "the target of container {}:{} is not running",
                    t.pod.uuid(),
                    t.app.name
                ))
            };
            let manifest = rt.manifests.read(&t.pod)?;
            manifest.app(&app).ok_or_else(not_running)?;
            let procs = app_cgroup(&t.pod, &app).map(|cg| cg.unit_processes()).unwrap_or_default();
            let host_app = app::host_app(&AppPaths::new(&t.pod, &app));
            let host_pid = crate::stage1::appexec::app_pid(pid1, &procs, host_app).ok_or_else(not_running)?;
            let start = crate::stage1::appexec::start_time(host_pid).ok_or_else(not_running)?;
            PidMode::Join(crate::stage1::appexec::pid_in_pod(host_pid).ok_or_else(not_running)?, start)
        }
    })
}

/// What appexec gets beside the unit: masked and read-only paths, volumes
/// shared both ways, the AppArmor profile, where it waits to be placed
/// (cgroup v1), and the environment file of what systemd refuses.
struct AppexecPaths {
    masked: Option<Vec<String>>,
    readonly: Option<Vec<String>>,
    shared: Vec<String>,
    apparmor: Option<String>,
    cgroup_wait: Option<(String, usize)>,
    env_file: Option<String>,
}

/// Turns the unit into one that runs the app through appexec
/// (`stage1/appexec.rs`): systemd keeps the environment, stdio and cgroup;
/// appexec takes the PID and mount namespaces (the unit's root directory,
/// binds, read-only root and working directory move to it), the app's /proc
/// with its masks, the seccomp calls it needs let through, capabilities,
/// ids and no_new_privs.
fn own_pid_namespace(
    rt: &Runtime,
    t: &Target,
    pid1: i32,
    mode: &PidMode,
    spec: &mut ServiceSpec,
    filter: Option<(bool, Vec<String>, Option<i32>)>,
    AppexecPaths { masked, readonly, shared, apparmor, cgroup_wait, env_file }: AppexecPaths,
) -> Result<Option<StartedFifo>, ContainerError> {
    tokio::task::block_in_place(|| crate::stage1::appexec::ensure(&rt.data, &t.pod.path(), pid1))
        .map_err(|e| ContainerError::Internal(format!("putting appexec in pod {}: {e}", t.pod.uuid())))?;
    let id = |value: &str, what: &str| -> Result<u32, ContainerError> {
        value.parse().map_err(|_| {
            ContainerError::InvalidArgument(format!("{what} {value:?} of container {} is not numeric", t.app.name))
        })
    };
    let bind = |b: BindPath, read_only: bool| Bind {
        source: b.source,
        target: b.destination,
        recursive: b.recursive,
        read_only,
        optional: b.ignore_missing,
    };
    let mut binds: Vec<Bind> = std::mem::take(&mut spec.bind_paths).into_iter().map(|b| bind(b, false)).collect();
    binds.extend(std::mem::take(&mut spec.bind_read_only_paths).into_iter().map(|b| bind(b, true)));
    if *mode == PidMode::Host {
        // the node's /proc (a procfs shows the PID namespace of its mounter:
        // nothing in the pod can mount this one), masks on top by appexec
        let source = host_proc(pid1, &t.app.name)
            .map_err(|e| ContainerError::Internal(format!("the node's /proc for {}: {e}", t.app.name)))?;
        binds.push(Bind { source, target: "/proc".into(), recursive: false, read_only: false, optional: false });
    }
    let root_read_only = spec.read_only_paths.iter().any(|p| p == "/");
    spec.read_only_paths.clear();
    let mut plan = Plan {
        join: match mode {
            PidMode::Join(pid, start) => Some((*pid, start.clone())),
            _ => None,
        },
        keep_pid: matches!(mode, PidMode::Pod | PidMode::Host),
        host: *mode == PidMode::Host,
        shared,
        masks: masked.unwrap_or_default(),
        read_only: readonly.unwrap_or_default(),
        // systemd makes no mount namespace for the unit: appexec makes the
        // app's, small (see appexec/src/main.rs), with these binds
        root: spec.root_directory.take(),
        binds,
        root_read_only,
        working_directory: spec.working_directory.take(),
        caps: spec.capability_bounding_set.take(),
        uid: id(spec.user.take().as_deref().unwrap_or("0"), "user")?,
        gid: id(spec.group.take().as_deref().unwrap_or("0"), "group")?,
        no_new_privs: spec.no_new_privileges.take().unwrap_or(false),
        apparmor,
        cgroup_wait,
        env_file,
        oom_marker: Some(oom_marker(t)),
        cgroup_view: Some(!meta::privileged(&t.app)),
        cgroup_views: crate::stage1::cgroup_views::for_node().map(str::to_string),
        ..Default::default()
    };
    // the start learns from appexec itself that the app runs, sooner than
    // from systemd's job (which it waits for without the FIFO)
    let started = StartedFifo::make(&AppPaths::new(&t.pod, &t.app.name))
        .inspect_err(|e| tracing::debug!(app = %t.app.name, error = %e, "no FIFO for the start: the job says it"))
        .ok();
    plan.started = started.as_ref().map(|f| f.in_pod().to_string());
    plan.groups = std::mem::take(&mut spec.supplementary_groups)
        .iter()
        .map(|g| id(g, "supplementary group"))
        .collect::<Result<_, _>>()?;
    if let Some((allow, entries, errno)) = filter {
        let (let_through, deny) = crate::stage1::appexec::widen(mode, allow, &entries);
        spec.extra.push(Property::new("SystemCallFilter", Value::FilterList(true, let_through)));
        plan.deny = deny;
        plan.errno = errno;
    }
    spec.exec_start = plan.command(&spec.exec_start);
    spec.extra.push(unit_spec::oom_policy_continue());
    // systemd's notification socket is appexec's: the app's environment must not replace it
    spec.environment.retain(|e| !e.starts_with("NOTIFY_SOCKET="));
    // started once the app is exec'd (an exec or postStart hook right after
    // StartContainer finds it); an app that cannot be makes the start fail
    spec.notify_ready = true;
    Ok(started)
}

/// A copy of the node's /proc (this process's, not its submounts) attached
/// in the pod at `/rkt/hostproc/<app>` for a host-PID app; its path in the pod.
fn host_proc(pid1: i32, app: &str) -> std::io::Result<String> {
    use crate::stage1::inject::{self, Attach, Propagation};
    let in_pod = format!("/rkt/hostproc/{app}");
    std::fs::create_dir_all(format!("/proc/{pid1}/root{in_pod}"))?;
    let tree = inject::clone_tree(Path::new("/proc"), false, false, Propagation::Private)?;
    inject::attach(pid1, &[Attach::new(tree, Path::new(&in_pod))?])?;
    Ok(in_pod)
}

/// Starts a host-PID app: its unit runs its template (appexec, parked once
/// confined); the pod's log writer, in the node's PID namespace, starts
/// the app as a copy of it and supervises it. Its host pid.
fn run_host_app(t: &Target, pid1: i32) -> Result<i32, String> {
    let procs = app_cgroup(&t.pod, &t.app.name).map(|cg| cg.unit_processes()).unwrap_or_default();
    let template = crate::stage1::appexec::template_pid(pid1, &procs).ok_or("its template is not running")?;
    let start = crate::stage1::appexec::start_time(template).ok_or("its template is gone")?;
    crilog::run_host_app(&t.pod.path().join(crilog::SOCKET_FILE), &t.app.name, template, &start)
        .map_err(|e| e.to_string())
}

/// Binds that mask `paths`: /dev/null over files, and (read-only) an empty
/// directory over directories.
fn masks(pod: &Pod, pid1: i32, paths: &[String]) -> Result<(Vec<BindPath>, Vec<BindPath>), ContainerError> {
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    for p in paths {
        // the pod's view of the path: through its PID 1's root (its /proc and /sys)
        let Ok(meta) = std::fs::metadata(format!("/proc/{pid1}/root{p}")) else { continue };
        let (list, source) = if meta.is_dir() { (&mut dirs, "/rkt/empty") } else { (&mut files, "/dev/null") };
        list.push(BindPath { source: source.into(), destination: p.clone(), ignore_missing: true, recursive: false });
    }
    if !dirs.is_empty() {
        let empty = pod.stage1_rootfs().join("rkt/empty");
        std::fs::create_dir_all(&empty)
            .map_err(|e| ContainerError::Internal(format!("creating {}: {e}", empty.display())))?;
    }
    Ok((files, dirs))
}

/// The pod's `/etc/hosts`, `/etc/resolv.conf` and `/etc/hostname` in the
/// app, unless a volume provides them. Bound by the app's unit, in its own
/// mount namespace: mounts made in the pod's namespace are copied into every
/// later unit's and parsed by systemd for each of its read-only mounts, so
/// the pod keeps one mount per app (its rootfs) plus its volumes.
fn identity_files(app: &RuntimeApp) -> Vec<BindPath> {
    crate::stage1::app::IDENTITY_FILES
        .iter()
        // a volume at that path provides it (as containerd decides)
        .filter(|f| !app.mounts.iter().any(|m| Path::new(&m.path) == Path::new(f)))
        .map(|f| BindPath { source: f.to_string(), destination: f.to_string(), ignore_missing: true, recursive: false })
        .collect()
}

/// The OOM score adjustment an app may start with: `adj` unless it is lower
/// than the pod's and the pod cannot lower it (no CAP_SYS_RESOURCE, as on
/// nodes that do not grant it to root); then the app keeps the pod's, as
/// containerd does with `restrict_oom_score_adj`, and says so in the log.
fn oom_score_adj_allowed(pod: &Pod, pid1: i32, adj: i64) -> Option<i32> {
    let adj = i32::try_from(adj.clamp(-1000, 1000)).ok()?;
    let current: i32 = std::fs::read_to_string(format!("/proc/{pid1}/oom_score_adj")).ok()?.trim().parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid1}/status")).ok()?;
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    if adj >= current || cap_eff & crate::stage1::caps::bits("SYS_RESOURCE").unwrap_or(0) != 0 {
        return Some(adj);
    }
    tracing::info!(
        pod = %pod.uuid(),
        asked = adj,
        kept = current,
        "oom_score_adj not lowered: the pod has no CAP_SYS_RESOURCE (the node does not grant it)"
    );
    None
}

/// The `set` list of an rkt-style isolator value.
fn set_of(v: &serde_json::Value) -> Vec<String> {
    v["set"].as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage1::bus::UnitStatus;
    use crate::stage1::bus::testing::{Call, FakeBus};

    /// An app of a pod in a scratch dir, marked started as a start marks it.
    fn started_app() -> (tempfile::TempDir, AppPaths) {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = AppPaths::in_pod_dir(dir.path(), "web");
        std::fs::create_dir_all(paths.status_file("").parent().expect("status dir")).expect("status dir");
        app::mark_started(&paths).expect("mark started");
        (dir, paths)
    }

    fn job_failed() -> BusError {
        BusError::JobFailed { op: "start", unit: "web.service".into(), result: "failed".into(), detail: String::new() }
    }

    fn read(paths: &AppPaths, suffix: &str) -> Option<String> {
        std::fs::read_to_string(paths.status_file(suffix)).ok()
    }

    #[test]
    fn a_started_unit_leaves_the_app_started() {
        let (_dir, paths) = started_app();
        let bus = FakeBus::default();
        let (e, stopped) = settle_start(Some(&bus), &paths, "web.service", Ok(Ok(())), Some(Ok(())));
        assert!(e.is_none() && !stopped);
        assert!(bus.calls().is_empty(), "nothing asked of the pod's systemd: {:?}", bus.calls());
        assert!(paths.status_file("-started").exists());
        assert_eq!((read(&paths, ""), read(&paths, app::START_ERROR)), (None, None));
    }

    /// The job failed: the process ran and could not become the app (203:
    /// its program could not be executed). Its exit is the app's, once.
    #[test]
    fn a_failed_job_is_the_apps_exit_with_its_reason() {
        let (_dir, paths) = started_app();
        let bus = FakeBus::default();
        bus.set_status(UnitStatus { exec_main_code: 1, exec_main_status: 203, ..Default::default() });
        let (e, stopped) = settle_start(Some(&bus), &paths, "web.service", Ok(Err(job_failed())), None);
        let e = e.expect("the start failed");
        assert!(matches!(e, ContainerError::Bus(BusError::JobFailed { .. })), "{e}");
        assert!(stopped, "the exit was recorded here: its Stopped event is due");
        assert_eq!(bus.calls(), [Call::Status("web.service".into())]);
        assert_eq!(read(&paths, "").as_deref(), Some("203\n"));
        assert_eq!(read(&paths, app::START_ERROR), Some(e.to_string()));
        assert!(paths.status_file("-started").exists(), "it did start, and ended");
        assert_eq!(app::facts(&paths, true).state, AppState::Exited(Some(203)), "ContainerStatus reads it exited");

        // an exit recorded already (by the exit recorder) stands: no second event
        let (_, stopped) = settle_start(Some(&bus), &paths, "web.service", Ok(Err(job_failed())), None);
        assert!(!stopped);
        assert_eq!(read(&paths, "").as_deref(), Some("203\n"));
    }

    /// An app that could not be placed in its cgroups is killed by appexec:
    /// the placement is the reason; without a bus the exit is 128.
    #[test]
    fn a_failed_placement_is_the_reason_and_an_unknown_exit_is_128() {
        let (_dir, paths) = started_app();
        let placement = Err(ContainerError::Internal("placing web in its cgroups: EBUSY".into()));
        let (e, stopped) = settle_start(None, &paths, "web.service", Ok(Err(job_failed())), Some(placement));
        let e = e.expect("the start failed");
        assert!(e.to_string().contains("placing web in its cgroups"), "{e}");
        assert!(stopped);
        assert_eq!(read(&paths, "").as_deref(), Some("128\n"));
        assert_eq!(read(&paths, app::START_ERROR), Some(e.to_string()));
    }

    /// The pod's systemd refused the call: nothing ran, so nothing is
    /// recorded and the app is created again, not started (rollback).
    #[test]
    fn a_refused_call_unmarks_the_start_and_records_nothing() {
        let (_dir, paths) = started_app();
        let bus = FakeBus::default();
        let refused = Err(ContainerError::Bus(BusError::UnitExists("web.service".into())));
        let (e, stopped) = settle_start(Some(&bus), &paths, "web.service", refused, None);
        assert!(matches!(e, Some(ContainerError::Bus(BusError::UnitExists(_)))), "{e:?}");
        assert!(!stopped);
        assert!(bus.calls().is_empty());
        assert!(!paths.status_file("-started").exists());
        assert_eq!((read(&paths, ""), read(&paths, app::START_ERROR)), (None, None));
        assert_eq!(app::facts(&paths, true).state, AppState::Created);
    }
}
