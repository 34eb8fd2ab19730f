//! CreateContainer: rkt's `app add`, in-process. The image's rendered tree
//! becomes the app's overlay lower dir; command, args, env, user and mounts
//! are merged as kubelet expects; the app is added to the running pod.
//! The request comes as a [`Request`], checked and decoded from CRI's
//! message by `container::from_cri`.

use super::{ContainerError, meta};
use crate::cgroup::app::Limits;
use crate::image::convert::{ANN_CMD, ANN_ENTRYPOINT, ANN_STOP_SIGNAL};
use crate::runtime::Runtime;
use crate::stage1::app::{AppError, AppSpec, VolumeSpec};
use crate::stage1::caps;
use crate::stage1::identity;
use crate::stage1::inject::Propagation;
use rkt::pod::{Pod, PodState};
use rkt::schema::{self, App as AppSection, NameValue};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A container to create, as CreateContainer (or `rktlet app add`) asks for it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Request {
    pub pod_id: String,
    pub name: String,
    pub attempt: u32,
    /// The app's name in the pod, as `rkt app add --name` gives it; `None`:
    /// `<attempt>-<name>`, CreateContainer's (attempts of a container then
    /// live side by side).
    pub app_name: Option<String>,
    /// Image reference or id, in the store.
    pub image: String,
    /// Replaces the image's entrypoint (kubelet's `command`).
    pub command: Vec<String>,
    /// Replaces the image's cmd (kubelet's `args`).
    pub args: Vec<String>,
    pub envs: Vec<(String, String)>,
    pub working_dir: String,
    /// Relative to the pod's log directory (absolute for a pod made outside CRI).
    pub log_path: String,
    pub labels: HashMap<String, String>,
    pub annotations: HashMap<String, String>,
    /// The AppArmor profile it runs under, made ready on the host.
    pub apparmor: Option<String>,
    pub tty: bool,
    pub stdin: Option<meta::StdinMode>,
    pub devices: Vec<meta::Device>,
    /// A stop signal asked for (a name such as `SIGQUIT`); else the image's, else SIGTERM.
    pub stop_signal: Option<String>,
    /// The limits asked for (`None`: no resources in the request).
    pub limits: Option<Limits>,
    pub pid_namespace: PidAsked,
    /// The user namespace asked for: must be the pod's.
    pub userns: UsernsAsked,
    pub security: Security,
    /// The identity asked for (by default: the image's user).
    pub identity: identity::Asked,
    pub mounts: Vec<Mount>,
    pub readonly_rootfs: bool,
    /// Created from a checkpoint: where its CRIU images will be, in the pod
    /// (`container::restore`).
    pub restore: Option<String>,
}

/// The PID namespace a request asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum PidAsked {
    /// Nothing asked: the pod's (the node's in a host-PID pod).
    #[default]
    Unset,
    Pod,
    Container,
    /// Another container's, by container id.
    Target(String),
    Node,
}

/// The user namespace a request asks for (`namespace_options.userns_options`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum UsernsAsked {
    /// Nothing asked (or POD without mappings): the pod's.
    #[default]
    Unset,
    /// The node's: only in a pod without a user namespace.
    Node,
    /// The pod's, whose mapping must be this one.
    Pod(crate::stage1::userns::IdMap),
}

/// Checks that `asked` is the pod's user namespace `pod` (none: the node's).
fn check_userns(asked: UsernsAsked, pod: Option<crate::stage1::userns::IdMap>) -> Result<(), ContainerError> {
    match (asked, pod) {
        (UsernsAsked::Unset, _) | (UsernsAsked::Node, None) => Ok(()),
        (UsernsAsked::Pod(m), Some(p)) if m == p => Ok(()),
        (UsernsAsked::Node, Some(p)) => Err(ContainerError::InvalidArgument(format!(
            "namespace_options.userns_options NODE: the pod runs in a user namespace ({p}); its containers share it"
        ))),
        (UsernsAsked::Pod(m), Some(p)) => Err(ContainerError::InvalidArgument(format!(
            "namespace_options.userns_options maps {m}, the pod's user namespace maps {p}: a container shares its pod's"
        ))),
        (UsernsAsked::Pod(m), None) => Err(ContainerError::InvalidArgument(format!(
            "namespace_options.userns_options maps {m}, but the pod was created without a user namespace"
        ))),
    }
}

/// The security settings of a container.
#[derive(Debug, Clone, Default)]
pub(crate) struct Security {
    pub privileged: bool,
    pub add_capabilities: Vec<String>,
    pub drop_capabilities: Vec<String>,
    pub no_new_privs: bool,
    pub seccomp: Seccomp,
    /// Masked and read-only paths (empty: kubelet's defaults).
    pub masked_paths: Vec<String>,
    pub readonly_paths: Vec<String>,
}

/// The seccomp profile asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Seccomp {
    #[default]
    Unconfined,
    RuntimeDefault,
    /// A profile file on the node.
    Localhost(String),
}

/// A volume: a host path, or an image's tree (read-only).
#[derive(Debug, Clone, Default)]
pub(crate) struct Mount {
    pub container_path: String,
    pub host_path: String,
    /// An image reference and the path in it (`None`: a host path).
    pub image: Option<(String, String)>,
    pub readonly: bool,
    pub propagation: Propagation,
    pub selinux_relabel: bool,
    pub recursive_read_only: bool,
}

/// The command line: CRI command replaces the entrypoint, CRI args replace cmd.
pub(crate) fn merge_exec(image: &schema::ImageManifest, command: &[String], args: &[String]) -> Vec<String> {
    let json = |name: &str| -> Vec<String> {
        image.annotation(name).and_then(|v| serde_json::from_str(v).ok()).unwrap_or_default()
    };
    let (entrypoint, cmd) = (json(ANN_ENTRYPOINT), json(ANN_CMD));
    let image_exec = image.app.as_ref().and_then(|a| a.exec.clone()).unwrap_or_default();
    match (command.is_empty(), args.is_empty()) {
        (false, _) => command.iter().chain(args).cloned().collect(),
        (true, false) if !entrypoint.is_empty() || !cmd.is_empty() => {
            entrypoint.into_iter().chain(args.iter().cloned()).collect()
        }
        (true, false) => args.to_vec(),
        (true, true) if !entrypoint.is_empty() || !cmd.is_empty() => entrypoint.into_iter().chain(cmd).collect(),
        (true, true) => image_exec,
    }
}

/// The container's stop signal when it is not SIGTERM: the one asked for,
/// else the image's `StopSignal` (one the node does not know is ignored, with a warning).
fn stop_signal(asked: Option<String>, image: &schema::ImageManifest) -> Option<String> {
    let name = asked.or_else(|| image.annotation(ANN_STOP_SIGNAL).map(str::to_string))?;
    match meta::parse_signal(&name) {
        Some((libc::SIGTERM, _)) => None,
        Some((_, sig)) => Some(sig.as_str_name().to_string()),
        None => {
            tracing::warn!(signal = name, "stop signal unknown here; stopping with SIGTERM");
            None
        }
    }
}

/// Capabilities and no_new_privs as rkt's isolators (`os/linux/capabilities-retain-set`,
/// `os/linux/no-new-privileges`): privileged keeps every capability.
fn security_isolators(sc: &Security) -> Result<Vec<schema::Isolator>, ContainerError> {
    let privileged = sc.privileged;
    let set = if privileged {
        caps::ALL
    } else {
        caps::bounding_set(&sc.add_capabilities, &sc.drop_capabilities).map_err(ContainerError::InvalidArgument)?
    };
    let names: Vec<String> =
        caps::NAMES.iter().enumerate().filter(|(i, _)| set & (1 << i) != 0).map(|(_, n)| format!("CAP_{n}")).collect();
    // appc wants a non-empty set: no capability at all is written as all of them removed
    let caps = if names.is_empty() {
        let all: Vec<String> = caps::NAMES.iter().map(|n| format!("CAP_{n}")).collect();
        schema::Isolator { name: meta::ISOLATOR_CAPS_REMOVE.into(), value: serde_json::json!({ "set": all }) }
    } else {
        schema::Isolator { name: meta::ISOLATOR_CAPS.into(), value: serde_json::json!({ "set": names }) }
    };
    let mut out = vec![
        caps,
        schema::Isolator { name: meta::ISOLATOR_NO_NEW_PRIVS.into(), value: serde_json::Value::Bool(sc.no_new_privs) },
    ];
    if privileged {
        return Ok(out);
    }
    // seccomp: RuntimeDefault is containerd's default profile as a deny list
    // for this container's capabilities; a Localhost profile becomes a name
    // filter (stage1/seccomp.rs); no profile or Unconfined means none
    match &sc.seccomp {
        Seccomp::RuntimeDefault => {
            let (name, value) = crate::stage1::seccomp::runtime_default(set);
            out.push(schema::Isolator { name: name.into(), value });
        }
        Seccomp::Localhost(path) => {
            let (name, value) =
                crate::stage1::seccomp::isolator_from_file(path).map_err(ContainerError::InvalidArgument)?;
            out.push(schema::Isolator { name: name.into(), value });
        }
        Seccomp::Unconfined => {}
    }
    Ok(out)
}

/// The masked and read-only paths of a container that is not privileged
/// (kubelet's defaults when it sends none), kept as rktlet's annotations:
/// appc refuses an isolator name it does not know, and with it the whole
/// pod manifest, so rkt's tools could not read the pod.
fn path_annotations(
    sc: &Security,
    annotations: &mut std::collections::BTreeMap<String, String>,
) -> Result<(), ContainerError> {
    if sc.privileged {
        return Ok(());
    }
    let (masked, readonly) = (sc.masked_paths.clone(), sc.readonly_paths.clone());
    let masked = if masked.is_empty() { meta::DEFAULT_MASKED.iter().map(|p| p.to_string()).collect() } else { masked };
    let readonly =
        if readonly.is_empty() { meta::DEFAULT_READONLY.iter().map(|p| p.to_string()).collect() } else { readonly };
    for (key, paths) in [(meta::MASKED_PATHS, masked), (meta::READONLY_PATHS, readonly)] {
        let json = serde_json::to_string(&paths).map_err(|e| ContainerError::Internal(e.to_string()))?;
        annotations.insert(key.into(), json);
    }
    Ok(())
}

/// The node's devices for a privileged container (as containerd gives them),
/// but those the pod has at the same path (an empty file is not one: it is
/// the mount point of another app's device) and those the container asked for.
fn node_devices(pod: &Pod, asked: &[meta::Device]) -> Result<Vec<meta::Device>, ContainerError> {
    let internal = |e: &dyn std::fmt::Display| ContainerError::Internal(format!("the node's devices: {e}"));
    let sandbox = pod.sandbox_pid().map_err(|e| internal(&e))?.ok_or_else(|| internal(&"the pod has no sandbox"))?;
    let pid1 = crate::stage1::inject::pod_pid1(sandbox).map_err(|e| internal(&e))?;
    let pod_root = PathBuf::from(format!("/proc/{pid1}/root"));
    let found = crate::stage1::inject::node_devices(Path::new("/dev"), |p| {
        asked.iter().any(|d| Path::new(&d.path) == p)
            || p.strip_prefix("/").is_ok_and(|rel| {
                std::fs::symlink_metadata(pod_root.join(rel)).is_ok_and(|m| !(m.is_file() && m.len() == 0))
            })
    })
    .map_err(|e| internal(&e))?;
    Ok(found
        .into_iter()
        .map(|d| meta::Device {
            path: d.path,
            kind: if d.block { 'b' } else { 'c' },
            major: d.major,
            minor: d.minor,
            permissions: "rwm".into(),
            mode: Some(d.mode),
        })
        .collect())
}

/// The container's PID namespace as [`meta::PID_NAMESPACE`] records it
/// (`None`: the pod's). A target must be another container of the same pod.
fn pid_namespace(asked: &PidAsked, pod_id: &str, pod: &schema::PodManifest) -> Result<Option<String>, ContainerError> {
    // a host-PID pod's PID namespace is the node's: its apps run there
    let host_pod = pod.annotation(schema::ANNOTATION_PID_MODE) == Some("node");
    match asked {
        PidAsked::Unset => Ok(host_pod.then(|| "host".into())),
        PidAsked::Pod | PidAsked::Node if host_pod => Ok(Some("host".into())),
        PidAsked::Pod => Ok(None),
        PidAsked::Container => Ok(Some("container".into())),
        PidAsked::Target(target_id) => {
            let target = meta::split_id(target_id).filter(|(p, a)| *p == pod_id && pod.app(a).is_some()).ok_or_else(
                || {
                    ContainerError::NotFound(format!(
                        "namespace_options.target_id {target_id:?} is not a container of pod {pod_id}"
                    ))
                },
            )?;
            // a host-PID app's namespace is the node's
            if pod.app(target.1).is_some_and(|a| meta::pid_namespace(a) == meta::PidNamespace::Host) {
                return Ok(Some("host".into()));
            }
            Ok(Some(format!("target:{}", target.1)))
        }
        PidAsked::Node => Err(ContainerError::InvalidArgument(
            "namespace_options.pid NODE: the pod was not created with the node's PID namespace (its namespace_options.pid)"
                .into(),
        )),
    }
}

/// Creates the container: its app added to running pod `req.pod_id`. Its container id.
pub(crate) async fn create(rt: &std::sync::Arc<Runtime>, req: Request) -> Result<String, ContainerError> {
    // one blocking section for the whole creation (as `start::start`)
    let (pod, id) = tokio::task::block_in_place(|| create_blocking(rt, req))?;
    rt.warm_later(pod);
    Ok(id)
}

/// Creates the container; its pod's UUID and its id.
fn create_blocking(rt: &Runtime, req: Request) -> Result<(uuid::Uuid, String), ContainerError> {
    let image_ref = req.image.clone();
    let mut steps = crate::base::steps::Steps::new();
    crate::cgroup::warm::hold(crate::cgroup::warm::CONTAINER_CREATE);
    let (mut pod, pod_manifest) = open_running(rt, &req.pod_id)?;
    steps.mark("pod");
    let tree = image_tree(rt, &image_ref)?;
    steps.mark("image");
    let image = tree.manifest.clone();
    let image_app = image.app.clone().unwrap_or_default();
    let rootfs = tree.rootfs();
    let exec = merge_exec(&image, &req.command, &req.args);
    if exec.is_empty() {
        return Err(ContainerError::InvalidArgument(format!(
            "no command: image {image_ref} has none and the request gives none"
        )));
    }
    let identity::Identity { uid, gid, groups } =
        identity::resolve(&rootfs, &image_app.user, &image_app.group, &req.identity)
            .map_err(|e| ContainerError::InvalidArgument(e.to_string()))?;
    let env = environment(&req, &image_app, &rootfs, uid, &pod_manifest);
    let working_dir = working_dir(&req, &image_app);
    let log_path = log_path(&req, &pod_manifest)?;
    let mut user_annotations = user_annotations(&req, &image_ref, log_path);
    // the CRI's image id (ContainerStatus' image_id and image_ref, as ListImages' id)
    user_annotations.insert(meta::IMAGE_ID.into(), tree.content_id().to_string());
    device_and_limit_annotations(&req, &pod, &image, &mut user_annotations)?;
    let own_pid_namespace = pid_namespace(&req.pid_namespace, &pod.uuid().to_string(), &pod_manifest)?;
    let pod_userns = crate::stage1::userns::of_manifest(&pod_manifest)
        .map_err(|e| ContainerError::Internal(format!("pod {}: {e}", pod.uuid())))?;
    check_userns(req.userns, pod_userns)?;
    if pod_userns.is_some() && req.mounts.iter().any(|m| m.propagation == Propagation::Shared) {
        return Err(ContainerError::InvalidArgument(
            "bidirectional mount propagation is not offered in a pod with a user namespace".into(),
        ));
    }
    // systemd resolves ids only for apps in the pod's namespace (appexec takes them as numbers)
    let ids_for_systemd = own_pid_namespace.is_none();
    if let Some(v) = own_pid_namespace {
        user_annotations.insert(meta::PID_NAMESPACE.into(), v);
    }
    let mut isolators = image_app.isolators.clone();
    isolators.extend(security_isolators(&req.security)?);
    path_annotations(&req.security, &mut user_annotations)?;
    let app = AppSection {
        exec: Some(exec),
        user: uid.to_string(),
        group: gid.to_string(),
        supplementary_gids: groups.clone(),
        working_directory: working_dir,
        environment: env,
        user_annotations,
        user_labels: req.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        isolators,
        ..Default::default()
    };
    let volumes = volumes(rt, &req)?;
    let name = req.app_name.clone().unwrap_or_else(|| meta::app_name_of(&req.name, req.attempt));
    let spec = AppSpec {
        name: name.clone(),
        image_id: tree.image_id.clone(),
        image_name: image.name.clone(),
        image_manifest: image,
        tree_id: tree.id.clone(),
        tree_rootfs: rootfs,
        app,
        volumes,
        read_only_rootfs: req.readonly_rootfs,
        mount_read_only: req.readonly_rootfs && ids_for_systemd,
        annotations: Vec::new(),
    };
    let stage1 = pod.stage1_rootfs();
    steps.mark("config");
    // the primary gid first: it names the user's group
    let ids = ids_for_systemd
        .then(|| (uid, std::iter::once(gid).chain(groups.into_iter().filter(|g| *g != gid)).collect::<Vec<u32>>()));
    add_app(rt, &mut pod, &spec, &name, &stage1, ids)?;
    steps.mark("add");
    rt.emit(pod.uuid(), &name, crate::runtime::EventKind::Created);
    steps.mark("events");
    tracing::debug!(pod = %pod.uuid(), app = %name, steps = %steps.line(), "container created");
    Ok((pod.uuid(), meta::container_id(&pod.uuid().to_string(), &name)))
}

/// Opens pod `pod_id`, checks that it runs, and reads its manifest.
fn open_running(rt: &Runtime, pod_id: &str) -> Result<(Pod, std::sync::Arc<schema::PodManifest>), ContainerError> {
    let mut pod = Pod::open(&rt.data, pod_id)?;
    let state = pod.state()?;
    if state != PodState::Running {
        return Err(ContainerError::FailedPrecondition(format!("pod {} is {state}, not running", pod.uuid())));
    }
    let pod_manifest = rt.manifests.read(&pod)?;
    Ok((pod, pod_manifest))
}

/// The image's rendered tree, from the store.
fn image_tree(rt: &Runtime, image_ref: &str) -> Result<crate::image::Tree, ContainerError> {
    let image_ref = image_ref.to_string();
    let store = &rt.images;
    tokio::task::block_in_place(|| store.tree(&image_ref))
        .map_err(|source| ContainerError::Image { context: None, source })
}

/// The app's environment: the image's, the request's over it, then `PATH`,
/// `HOME` and `HOSTNAME` when neither sets them.
fn environment(
    req: &Request,
    image_app: &AppSection,
    rootfs: &Path,
    uid: u32,
    pod_manifest: &schema::PodManifest,
) -> Vec<NameValue> {
    let mut env: Vec<NameValue> = image_app.environment.clone();
    for (key, value) in &req.envs {
        schema::set(&mut env, key, value.clone());
    }
    if !env.iter().any(|e| e.name == "PATH") {
        env.push(NameValue::new("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
    }
    // HOME as runc sets it: the user's home in the image, else /
    if !env.iter().any(|e| e.name == "HOME") {
        let home = identity::home(rootfs, uid).unwrap_or_else(|| "/".into());
        env.push(NameValue::new("HOME", home));
    }
    if !env.iter().any(|e| e.name == "HOSTNAME")
        && let Some(h) = pod_manifest.annotation(schema::ANNOTATION_HOSTNAME)
    {
        env.push(NameValue::new("HOSTNAME", h));
    }
    env
}

/// The request's working directory, else the image's, else `/`.
fn working_dir(req: &Request, image_app: &AppSection) -> String {
    if !req.working_dir.is_empty() {
        req.working_dir.clone()
    } else if !image_app.working_directory.is_empty() {
        image_app.working_directory.clone()
    } else {
        "/".into()
    }
}

/// The app's log file on the host: the request's path in the pod's log
/// directory, or none.
fn log_path(req: &Request, pod_manifest: &schema::PodManifest) -> Result<String, ContainerError> {
    Ok(match (pod_manifest.annotation(schema::ANNOTATION_LOG_DIR), req.log_path.as_str()) {
        (_, "") => String::new(),
        // the log writer runs as root: a log path must not leave the pod's log directory
        (Some(_), rel) if Path::new(rel).components().any(|c| !matches!(c, std::path::Component::Normal(_))) => {
            return Err(ContainerError::InvalidArgument(format!(
                "config.log_path {rel:?} must be relative to the pod's log directory, without \"..\""
            )));
        }
        (Some(dir), rel) => PathBuf::from(dir).join(rel).display().to_string(),
        // a pod made outside CRI (the CLI) has no log directory: only an absolute
        // path means something; a CRI pod without one gets no log file at all
        (None, abs) if Path::new(abs).is_absolute() && !pod_manifest.is_kubernetes_pod() => abs.to_string(),
        (None, _) => String::new(),
    })
}

/// The request's annotations without rktlet's own, and rktlet's: name,
/// attempt, image, log path, AppArmor profile, terminal and stdin.
fn user_annotations(req: &Request, image_ref: &str, log_path: String) -> std::collections::BTreeMap<String, String> {
    // rktlet's own keys (pid namespace, devices, resources, tty, log path...)
    // are rktlet's to set: a request's copy of one would be obeyed at start
    let mut user_annotations: std::collections::BTreeMap<String, String> = req
        .annotations
        .iter()
        .filter(|(k, _)| !k.starts_with(meta::RESERVED_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    user_annotations.insert(meta::NAME.into(), req.name.clone());
    user_annotations.insert(meta::ATTEMPT.into(), req.attempt.to_string());
    user_annotations.insert(meta::IMAGE.into(), image_ref.to_string());
    user_annotations.insert(meta::LOG_PATH.into(), log_path);
    if let Some(profile) = req.apparmor.clone() {
        user_annotations.insert(meta::APPARMOR.into(), profile);
    }
    if req.tty {
        user_annotations.insert(meta::TTY.into(), "true".into());
    }
    if let Some(images) = &req.restore {
        user_annotations.insert(meta::RESTORE.into(), images.clone());
    }
    if let Some(mode) = req.stdin {
        let value = if mode == meta::StdinMode::Once { "once" } else { "true" };
        user_annotations.insert(meta::STDIN.into(), value.into());
    }
    user_annotations
}

/// rktlet's annotations for the devices (a privileged container's include
/// the node's), the stop signal and the limits, checked.
fn device_and_limit_annotations(
    req: &Request,
    pod: &Pod,
    image: &schema::ImageManifest,
    user_annotations: &mut std::collections::BTreeMap<String, String>,
) -> Result<(), ContainerError> {
    let mut devices = req.devices.clone();
    if req.security.privileged {
        let node = tokio::task::block_in_place(|| node_devices(pod, &devices))?;
        devices.extend(node);
        user_annotations.insert(meta::PRIVILEGED.into(), "true".into());
    }
    if !devices.is_empty() {
        let json = serde_json::to_string(&devices).map_err(|e| ContainerError::Internal(e.to_string()))?;
        user_annotations.insert(meta::DEVICES.into(), json);
    }
    if let Some(sig) = stop_signal(req.stop_signal.clone(), image) {
        user_annotations.insert(meta::STOP_SIGNAL.into(), sig);
    }
    if let Some(limits) = &req.limits {
        if let Some(adj) = limits.oom_score_adj.filter(|adj| !(-1000..=1000).contains(adj)) {
            return Err(ContainerError::InvalidArgument(format!("oom_score_adj {adj} is outside -1000..1000")));
        }
        limits.validate().map_err(ContainerError::InvalidArgument)?;
        if !limits.is_empty() {
            let json = serde_json::to_string(limits).map_err(|e| ContainerError::Internal(e.to_string()))?;
            user_annotations.insert(meta::RESOURCES.into(), json);
        }
    }
    Ok(())
}

/// The app's volumes: host paths as asked for, and image volumes (the
/// image's tree, read-only, as containerd mounts it).
fn volumes(rt: &Runtime, req: &Request) -> Result<Vec<VolumeSpec>, ContainerError> {
    let mut volumes = Vec::with_capacity(req.mounts.len());
    for m in &req.mounts {
        // an image volume is the image's tree, read-only (as containerd mounts it)
        let (host_path, image) = match &m.image {
            Some((reference, sub_path)) => {
                let v =
                    tokio::task::block_in_place(|| rt.images.volume_source(reference, sub_path)).map_err(|source| {
                        ContainerError::Image { context: Some(format!("image volume {}", m.container_path)), source }
                    })?;
                (v.source, Some((v.image_id, v.tree_id)))
            }
            None => (PathBuf::from(&m.host_path), None),
        };
        volumes.push(VolumeSpec {
            host_path,
            container_path: PathBuf::from(&m.container_path),
            read_only: m.readonly || image.is_some(),
            propagation: if image.is_some() { Propagation::Private } else { m.propagation },
            selinux_relabel: m.selinux_relabel,
            image,
            recursive_read_only: m.recursive_read_only,
        });
    }
    Ok(volumes)
}

/// Names the app's ids in the pod's stage1 when systemd resolves them
/// (`ids`: the uid and the gids, primary first), then adds app `name` to the
/// pod (`AppSpec::add`, on a spare set of directories); the next spare is
/// made after, whether the add worked or not.
fn add_app(
    rt: &Runtime,
    pod: &mut Pod,
    spec: &AppSpec,
    name: &str,
    stage1: &Path,
    ids: Option<(u32, Vec<u32>)>,
) -> Result<(), ContainerError> {
    let pod_dir = pod.path();
    let added = tokio::task::block_in_place(|| {
        // the ids first: what they add to the pod's /etc is harmless without
        // the app, while an app added with its ids unnamed would stay behind a
        // failed create (the add itself leaves nothing when it fails)
        if let Some((uid, gids)) = ids {
            crate::stage1::app::ensure_ids(stage1, uid, &gids).map_err(|source| AppError::Io {
                pod: pod.uuid().to_string(),
                app: name.to_string(),
                context: "naming the app's ids".into(),
                source,
            })?;
        }
        let spare = crate::stage1::spare::Spare::take(&pod_dir);
        spec.add(pod, &rt.manifests, spare)
    });
    // the next add's directories, made while kubelet starts this one
    crate::stage1::spare::replenish_later(pod_dir);
    added?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(ep: &str, cmd: &str) -> schema::ImageManifest {
        let mut m = schema::ImageManifest::new("x");
        m.annotations = vec![NameValue::new(ANN_ENTRYPOINT, ep), NameValue::new(ANN_CMD, cmd)];
        m
    }

    #[test]
    fn kubelet_command_rules() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let img = image(r#"["/ep","-x"]"#, r#"["default"]"#);
        assert_eq!(merge_exec(&img, &[], &[]), s(&["/ep", "-x", "default"]));
        assert_eq!(merge_exec(&img, &[], &s(&["a"])), s(&["/ep", "-x", "a"]));
        assert_eq!(merge_exec(&img, &s(&["/bin/sh"]), &[]), s(&["/bin/sh"]));
        assert_eq!(merge_exec(&img, &s(&["/bin/sh"]), &s(&["-c", "true"])), s(&["/bin/sh", "-c", "true"]));
        let cmd_only = image("null", r#"["sh"]"#);
        assert_eq!(merge_exec(&cmd_only, &[], &s(&["echo"])), s(&["echo"]));
    }
}
