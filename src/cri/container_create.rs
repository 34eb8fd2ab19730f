//! CreateContainer: rkt's `app add`, in-process. The image's rendered tree
//! becomes the app's overlay lower dir; command, args, env, user and mounts
//! are merged as kubelet expects; the app is added to the running pod.

use super::{container_meta as meta, pod_meta, pod_status};
use crate::image::convert::{ANN_CMD, ANN_ENTRYPOINT, ANN_STOP_SIGNAL};
use crate::pod::manifest::{self, App as AppSection, NameValue};
use crate::pod::{Pod, PodState};
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use crate::stage1::app::{AppError, AppSpec, VolumeSpec};
use crate::stage1::caps;
use crate::stage1::identity;
use crate::stage1::inject::Propagation;
use std::path::{Path, PathBuf};
use tonic::Status;

fn app_status(e: AppError) -> Status {
    super::container_error(crate::container::ContainerError::App(e))
}

/// The command line: CRI command replaces the entrypoint, CRI args replace cmd.
pub fn merge_exec(image: &manifest::ImageManifest, command: &[String], args: &[String]) -> Vec<String> {
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

/// The container's stop signal when it is not SIGTERM: CRI's, else the
/// image's `StopSignal` (one the node does not know is ignored, with a warning).
fn stop_signal(config: &cri::ContainerConfig, image: &manifest::ImageManifest) -> Result<Option<String>, Status> {
    let asked = match cri::Signal::try_from(config.stop_signal) {
        Ok(cri::Signal::RuntimeDefault) => None,
        Ok(sig) => Some(sig.as_str_name().to_string()),
        Err(_) => return Err(Status::invalid_argument(format!("unknown stop_signal {}", config.stop_signal))),
    };
    let name = match asked.or_else(|| image.annotation(ANN_STOP_SIGNAL).map(str::to_string)) {
        Some(name) => name,
        None => return Ok(None),
    };
    match meta::parse_signal(&name) {
        Some((libc::SIGTERM, _)) => Ok(None),
        Some((_, sig)) => Ok(Some(sig.as_str_name().to_string())),
        None => {
            tracing::warn!(signal = name, "stop signal unknown here; stopping with SIGTERM");
            Ok(None)
        }
    }
}

/// What rktlet does not do, refused before anything is written: CDI devices
/// (no CDI registry is read), SELinux labels on a host that enforces them,
/// a named AppArmor profile on a host without AppArmor (see `stage1::lsm`).
/// Returns the container's AppArmor profile, made ready (the runtime's
/// default unless privileged or unconfined, on a host with AppArmor).
#[allow(deprecated)] // older kubelets still send `apparmor_profile`
fn check_unsupported(rt: &Runtime, config: &cri::ContainerConfig) -> Result<Option<String>, Status> {
    if !config.cdi_devices.is_empty() {
        let names: Vec<&str> = config.cdi_devices.iter().map(|d| d.name.as_str()).collect();
        return Err(Status::invalid_argument(format!(
            "config.CDI_devices: rktlet does not resolve CDI devices ({}); give the device nodes in config.devices",
            names.join(", ")
        )));
    }
    let sc = config.linux.as_ref().and_then(|l| l.security_context.as_ref());
    let prefix = "config.linux.security_context";
    let apparmor = match sc {
        Some(sc) => super::apparmor_asked(&format!("{prefix}.apparmor"), sc.apparmor.as_ref(), &sc.apparmor_profile)?,
        None => None,
    };
    let privileged = sc.is_some_and(|s| s.privileged);
    let confinement = super::check_lsm(rt, prefix, apparmor, privileged, sc.and_then(|s| s.selinux_options.as_ref()))?;
    super::apparmor_profile(rt, &format!("{prefix}.apparmor"), &confinement)
}

/// Capabilities and no_new_privs as rkt's isolators (`os/linux/capabilities-retain-set`,
/// `os/linux/no-new-privileges`): privileged keeps every capability.
fn security_isolators(sc: Option<&cri::LinuxContainerSecurityContext>) -> Result<Vec<manifest::Isolator>, Status> {
    let privileged = sc.is_some_and(|s| s.privileged);
    let (add, drop) = sc
        .and_then(|s| s.capabilities.as_ref())
        .map(|c| (c.add_capabilities.clone(), c.drop_capabilities.clone()))
        .unwrap_or_default();
    let set = if privileged { caps::ALL } else { caps::bounding_set(&add, &drop).map_err(Status::invalid_argument)? };
    let names: Vec<String> =
        caps::NAMES.iter().enumerate().filter(|(i, _)| set & (1 << i) != 0).map(|(_, n)| format!("CAP_{n}")).collect();
    // appc wants a non-empty set: no capability at all is written as all of them removed
    let caps = if names.is_empty() {
        let all: Vec<String> = caps::NAMES.iter().map(|n| format!("CAP_{n}")).collect();
        manifest::Isolator { name: ISOLATOR_CAPS_REMOVE.into(), value: serde_json::json!({ "set": all }) }
    } else {
        manifest::Isolator { name: ISOLATOR_CAPS.into(), value: serde_json::json!({ "set": names }) }
    };
    let mut out = vec![
        caps,
        manifest::Isolator {
            name: ISOLATOR_NO_NEW_PRIVS.into(),
            value: serde_json::Value::Bool(sc.is_some_and(|s| s.no_new_privs)),
        },
    ];
    if privileged {
        return Ok(out);
    }
    // seccomp: RuntimeDefault is containerd's default profile as a deny list
    // for this container's capabilities; a Localhost profile becomes a name
    // filter (stage1/seccomp.rs); no profile or Unconfined means none
    match seccomp_profile(sc)? {
        Seccomp::RuntimeDefault => {
            let (name, value) = crate::stage1::seccomp::runtime_default(set);
            out.push(manifest::Isolator { name: name.into(), value });
        }
        Seccomp::Localhost(path) => {
            let (name, value) = crate::stage1::seccomp::isolator_from_file(&path).map_err(Status::invalid_argument)?;
            out.push(manifest::Isolator { name: name.into(), value });
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
    sc: Option<&cri::LinuxContainerSecurityContext>,
    annotations: &mut std::collections::BTreeMap<String, String>,
) -> Result<(), Status> {
    if sc.is_some_and(|s| s.privileged) {
        return Ok(());
    }
    let (masked, readonly) = sc.map(|s| (s.masked_paths.clone(), s.readonly_paths.clone())).unwrap_or_default();
    let masked = if masked.is_empty() { DEFAULT_MASKED.iter().map(|p| p.to_string()).collect() } else { masked };
    let readonly =
        if readonly.is_empty() { DEFAULT_READONLY.iter().map(|p| p.to_string()).collect() } else { readonly };
    for (key, paths) in [(meta::MASKED_PATHS, masked), (meta::READONLY_PATHS, readonly)] {
        let json = serde_json::to_string(&paths).map_err(|e| Status::internal(e.to_string()))?;
        annotations.insert(key.into(), json);
    }
    Ok(())
}

/// The node's devices for a privileged container (as containerd gives them),
/// but those the pod has at the same path (an empty file is not one: it is
/// the mount point of another app's device) and those the container asked for.
fn node_devices(pod: &Pod, asked: &[meta::Device]) -> Result<Vec<meta::Device>, Status> {
    let internal = |e: &dyn std::fmt::Display| Status::internal(format!("the node's devices: {e}"));
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
/// What rktlet cannot do for a mount is refused rather than ignored.
fn check_mounts(mounts: &[cri::Mount]) -> Result<(), Status> {
    for m in mounts {
        let path = &m.container_path;
        if cri::MountPropagation::try_from(m.propagation).is_err() {
            return Err(Status::invalid_argument(format!("mount {path}: unknown propagation {}", m.propagation)));
        }
        if !m.uid_mappings.is_empty() || !m.gid_mappings.is_empty() {
            return Err(Status::invalid_argument(format!(
                "mount {path}: id-mapped mounts are not supported (rktlet has no user namespaces)"
            )));
        }
        let image = m.image.as_ref().is_some_and(|i| !i.image.is_empty());
        if image && !m.host_path.is_empty() {
            return Err(Status::invalid_argument(format!("mount {path}: a host_path or an image, not both")));
        }
        if !image && !m.image_sub_path.is_empty() {
            return Err(Status::invalid_argument(format!("mount {path}: image_sub_path without an image")));
        }
        if !Path::new(path).is_absolute() || (!image && m.host_path.is_empty()) {
            return Err(Status::invalid_argument("mounts need an absolute container_path and a host_path or an image"));
        }
        if m.recursive_read_only {
            // as CRI says and containerd checks
            if !m.readonly {
                return Err(Status::invalid_argument(format!(
                    "mount {path}: recursive_read_only needs readonly to be true"
                )));
            }
            if m.propagation != cri::MountPropagation::PropagationPrivate as i32 {
                return Err(Status::invalid_argument(format!(
                    "mount {path}: recursive_read_only needs propagation PROPAGATION_PRIVATE \
                     (mounts propagated later would not be read-only)"
                )));
            }
            if !crate::stage1::inject::recursive_read_only_supported() {
                return Err(Status::invalid_argument(format!(
                    "mount {path}: recursive_read_only needs mount_setattr(2), which this kernel lacks (Linux 5.12+)"
                )));
            }
        }
    }
    Ok(())
}

fn pid_namespace(
    sc: Option<&cri::LinuxContainerSecurityContext>,
    pod_id: &str,
    pod: &manifest::PodManifest,
) -> Result<Option<String>, Status> {
    // a host-PID pod's PID namespace is the node's: its apps run there
    let host_pod = pod.annotation(super::pod_meta::PID_MODE) == Some("node");
    let Some(ns) = sc.and_then(|s| s.namespace_options.as_ref()) else {
        return Ok(host_pod.then(|| "host".into()));
    };
    match cri::NamespaceMode::try_from(ns.pid) {
        Ok(cri::NamespaceMode::Pod | cri::NamespaceMode::Node) if host_pod => Ok(Some("host".into())),
        Ok(cri::NamespaceMode::Pod) => Ok(None),
        Ok(cri::NamespaceMode::Container) => Ok(Some("container".into())),
        Ok(cri::NamespaceMode::Target) => {
            let target = meta::split_id(&ns.target_id)
                .filter(|(p, a)| *p == pod_id && pod.app(a).is_some())
                .ok_or_else(|| {
                    Status::not_found(format!(
                        "namespace_options.target_id {:?} is not a container of pod {pod_id}",
                        ns.target_id
                    ))
                })?;
            // a host-PID app's namespace is the node's
            if pod.app(target.1).is_some_and(|a| meta::pid_namespace(a) == meta::PidNamespace::Host) {
                return Ok(Some("host".into()));
            }
            Ok(Some(format!("target:{}", target.1)))
        }
        Ok(cri::NamespaceMode::Node) => Err(Status::invalid_argument(
            "namespace_options.pid NODE: the pod was not created with the node's PID namespace (its namespace_options.pid)",
        )),
        Err(_) => Err(Status::invalid_argument(format!("unknown PID namespace mode {}", ns.pid))),
    }
}

enum Seccomp {
    Unconfined,
    RuntimeDefault,
    Localhost(String),
}

/// The seccomp profile asked for: the `seccomp` field, else the deprecated
/// `seccomp_profile_path` (`runtime/default`, `docker/default`,
/// `localhost/<path>`, `unconfined`).
#[allow(deprecated)] // older kubelets still send `seccomp_profile_path`
fn seccomp_profile(sc: Option<&cri::LinuxContainerSecurityContext>) -> Result<Seccomp, Status> {
    use cri::security_profile::ProfileType;
    let Some(sc) = sc else { return Ok(Seccomp::Unconfined) };
    if let Some(p) = &sc.seccomp {
        return match ProfileType::try_from(p.profile_type) {
            Ok(ProfileType::RuntimeDefault) => Ok(Seccomp::RuntimeDefault),
            Ok(ProfileType::Unconfined) => Ok(Seccomp::Unconfined),
            Ok(ProfileType::Localhost) => Ok(Seccomp::Localhost(p.localhost_ref.clone())),
            Err(_) => Err(Status::invalid_argument(format!("unknown seccomp profile type {}", p.profile_type))),
        };
    }
    match sc.seccomp_profile_path.as_str() {
        "" | "unconfined" => Ok(Seccomp::Unconfined),
        "runtime/default" | "docker/default" => Ok(Seccomp::RuntimeDefault),
        other => match other.strip_prefix("localhost/") {
            Some(path) => Ok(Seccomp::Localhost(path.to_string())),
            None => Err(Status::invalid_argument(format!("unknown seccomp_profile_path {other:?}"))),
        },
    }
}

use crate::container::meta::{
    DEFAULT_MASKED, DEFAULT_READONLY, ISOLATOR_CAPS, ISOLATOR_CAPS_REMOVE, ISOLATOR_NO_NEW_PRIVS,
};

/// The app's identity (`stage1::identity`) from the image's user and the
/// security context.
fn resolve_user(
    rootfs: &Path,
    image_user: &str,
    image_group: &str,
    sc: Option<&cri::LinuxContainerSecurityContext>,
) -> Result<identity::Identity, Status> {
    let Some(sc) = sc else {
        return identity::resolve(rootfs, image_user, image_group, &identity::Asked::default())
            .map_err(|e| Status::invalid_argument(e.to_string()));
    };
    let policy = match cri::SupplementalGroupsPolicy::try_from(sc.supplemental_groups_policy) {
        Ok(cri::SupplementalGroupsPolicy::Merge) => identity::GroupsPolicy::Merge,
        Ok(cri::SupplementalGroupsPolicy::Strict) => identity::GroupsPolicy::Strict,
        Err(_) => {
            return Err(Status::invalid_argument(format!(
                "config.linux.security_context.supplemental_groups_policy: unknown policy {}",
                sc.supplemental_groups_policy
            )));
        }
    };
    let asked = identity::Asked {
        run_as_user: sc.run_as_user.as_ref().map(|u| u.value),
        run_as_username: sc.run_as_username.clone(),
        run_as_group: sc.run_as_group.as_ref().map(|g| g.value),
        supplemental_groups: sc.supplemental_groups.clone(),
        policy,
    };
    identity::resolve(rootfs, image_user, image_group, &asked).map_err(|e| Status::invalid_argument(e.to_string()))
}

pub async fn create_container(
    rt: &Runtime,
    req: cri::CreateContainerRequest,
) -> Result<cri::CreateContainerResponse, Status> {
    let config = req.config.ok_or_else(|| Status::invalid_argument("config is required"))?;
    let meta_ = config.metadata.clone().ok_or_else(|| Status::invalid_argument("config.metadata is required"))?;
    if meta_.name.is_empty() {
        return Err(Status::invalid_argument("config.metadata.name is required"));
    }
    let image_ref = config.image.as_ref().map(|i| i.image.clone()).unwrap_or_default();
    if image_ref.is_empty() {
        return Err(Status::invalid_argument("config.image.image is required"));
    }
    super::check_metadata_size("container", &config.labels, &config.annotations)?;
    let apparmor = check_unsupported(rt, &config)?;
    let t0 = std::time::Instant::now();
    let mut pod = Pod::open(&rt.data, &req.pod_sandbox_id).map_err(pod_status)?;
    let state = pod.state().map_err(pod_status)?;
    if state != PodState::Running {
        return Err(Status::failed_precondition(format!("pod {} is {state}, not running", pod.uuid())));
    }
    let pod_manifest = rt.manifests.read(&pod).map_err(pod_status)?;
    let t_open = t0.elapsed();
    let tree = {
        let image_ref = image_ref.clone();
        let store = &rt.images;
        tokio::task::block_in_place(|| store.tree(&image_ref)).map_err(|e| Status::new(e.code(), e.to_string()))?
    };
    let t_tree = t0.elapsed();
    let image = tree.manifest.clone();
    let image_app = image.app.clone().unwrap_or_default();
    let rootfs = tree.rootfs();
    let exec = merge_exec(&image, &config.command, &config.args);
    if exec.is_empty() {
        return Err(Status::invalid_argument(format!(
            "no command: image {image_ref} has none and the request gives none"
        )));
    }
    let sc = config.linux.as_ref().and_then(|l| l.security_context.as_ref());
    let identity::Identity { uid, gid, groups } = resolve_user(&rootfs, &image_app.user, &image_app.group, sc)?;

    let mut env: Vec<NameValue> = image_app.environment.clone();
    for kv in &config.envs {
        manifest::set(&mut env, &kv.key, kv.value.clone());
    }
    if !env.iter().any(|e| e.name == "PATH") {
        env.push(NameValue::new("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
    }
    // HOME as runc sets it: the user's home in the image, else /
    if !env.iter().any(|e| e.name == "HOME") {
        let home = identity::home(&rootfs, uid).unwrap_or_else(|| "/".into());
        env.push(NameValue::new("HOME", home));
    }
    if !env.iter().any(|e| e.name == "HOSTNAME")
        && let Some(h) = pod_manifest.annotation(pod_meta::HOSTNAME)
    {
        env.push(NameValue::new("HOSTNAME", h));
    }
    let working_dir = if !config.working_dir.is_empty() {
        config.working_dir.clone()
    } else if !image_app.working_directory.is_empty() {
        image_app.working_directory.clone()
    } else {
        "/".into()
    };
    let log_path = match (pod_manifest.annotation(pod_meta::LOG_DIR), config.log_path.as_str()) {
        (_, "") => String::new(),
        // the log writer runs as root: a log path must not leave the pod's log directory
        (Some(_), rel) if Path::new(rel).components().any(|c| !matches!(c, std::path::Component::Normal(_))) => {
            return Err(Status::invalid_argument(format!(
                "config.log_path {rel:?} must be relative to the pod's log directory, without \"..\""
            )));
        }
        (Some(dir), rel) => PathBuf::from(dir).join(rel).display().to_string(),
        // a pod made outside CRI (the CLI) has no log directory: only an absolute
        // path means something; a CRI pod without one gets no log file at all
        (None, abs) if Path::new(abs).is_absolute() && !pod_meta::is_kubernetes_pod(&pod_manifest) => abs.to_string(),
        (None, _) => String::new(),
    };
    // rktlet's own keys (pid namespace, devices, resources, tty, log path...)
    // are rktlet's to set: a request's copy of one would be obeyed at start
    let mut user_annotations: std::collections::BTreeMap<String, String> = config
        .annotations
        .iter()
        .filter(|(k, _)| !k.starts_with(meta::RESERVED_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    user_annotations.insert(meta::NAME.into(), meta_.name.clone());
    user_annotations.insert(meta::ATTEMPT.into(), meta_.attempt.to_string());
    user_annotations.insert(meta::IMAGE.into(), image_ref.clone());
    user_annotations.insert(meta::LOG_PATH.into(), log_path);
    if let Some(profile) = apparmor {
        user_annotations.insert(meta::APPARMOR.into(), profile);
    }
    if config.tty {
        user_annotations.insert(meta::TTY.into(), "true".into());
    }
    if config.stdin {
        user_annotations.insert(meta::STDIN.into(), if config.stdin_once { "once" } else { "true" }.into());
    }
    let mut devices = config
        .devices
        .iter()
        .map(meta::Device::from_cri)
        .collect::<Result<Vec<_>, _>>()
        .map_err(Status::invalid_argument)?;
    if sc.is_some_and(|s| s.privileged) {
        let node = tokio::task::block_in_place(|| node_devices(&pod, &devices))?;
        devices.extend(node);
    }
    if !devices.is_empty() {
        let json = serde_json::to_string(&devices).map_err(|e| Status::internal(e.to_string()))?;
        user_annotations.insert(meta::DEVICES.into(), json);
    }
    if let Some(sig) = stop_signal(&config, &image)? {
        user_annotations.insert(meta::STOP_SIGNAL.into(), sig);
    }
    if let Some(res) = config.linux.as_ref().and_then(|l| l.resources.as_ref()) {
        if !(-1000..=1000).contains(&res.oom_score_adj) {
            return Err(Status::invalid_argument(format!(
                "oom_score_adj {} is outside -1000..1000",
                res.oom_score_adj
            )));
        }
        let limits = meta::limits_from_cri(res);
        limits.validate().map_err(Status::invalid_argument)?;
        if !limits.is_empty() {
            let json = serde_json::to_string(&limits).map_err(|e| Status::internal(e.to_string()))?;
            user_annotations.insert(meta::RESOURCES.into(), json);
        }
    }
    let own_pid_namespace = pid_namespace(sc, &pod.uuid().to_string(), &pod_manifest)?;
    // systemd resolves ids only for apps in the pod's namespace (appexec takes them as numbers)
    let ids_for_systemd = own_pid_namespace.is_none();
    if let Some(v) = own_pid_namespace {
        user_annotations.insert(meta::PID_NAMESPACE.into(), v);
    }
    let mut isolators = image_app.isolators.clone();
    isolators.extend(security_isolators(sc)?);
    path_annotations(sc, &mut user_annotations)?;
    let app = AppSection {
        exec: Some(exec),
        user: uid.to_string(),
        group: gid.to_string(),
        supplementary_gids: groups.clone(),
        working_directory: working_dir,
        environment: env,
        user_annotations,
        user_labels: config.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        isolators,
        ..Default::default()
    };
    check_mounts(&config.mounts)?;
    let mut volumes = Vec::with_capacity(config.mounts.len());
    for m in &config.mounts {
        let image = m.image.as_ref().map(|i| i.image.as_str()).filter(|i| !i.is_empty());
        // an image volume is the image's tree, read-only (as containerd mounts it)
        let (host_path, image) = match image {
            Some(reference) => {
                let v = tokio::task::block_in_place(|| rt.images.volume_source(reference, &m.image_sub_path))
                    .map_err(|e| Status::new(e.code(), format!("image volume {}: {e}", m.container_path)))?;
                (v.source, Some((v.image_id, v.tree_id)))
            }
            None => (PathBuf::from(&m.host_path), None),
        };
        volumes.push(VolumeSpec {
            host_path,
            container_path: PathBuf::from(&m.container_path),
            read_only: m.readonly || image.is_some(),
            propagation: match cri::MountPropagation::try_from(m.propagation) {
                _ if image.is_some() => Propagation::Private,
                Ok(cri::MountPropagation::PropagationHostToContainer) => Propagation::Slave,
                Ok(cri::MountPropagation::PropagationBidirectional) => Propagation::Shared,
                _ => Propagation::Private,
            },
            selinux_relabel: m.selinux_relabel,
            image,
            recursive_read_only: m.recursive_read_only,
        });
    }
    let name = meta::app_name(&meta_);
    let spec = AppSpec {
        name: name.clone(),
        image_id: tree.image_id.clone(),
        image_name: image.name.clone(),
        image_manifest: image,
        tree_id: tree.id.clone(),
        tree_rootfs: rootfs,
        app,
        volumes,
        read_only_rootfs: sc.is_some_and(|s| s.readonly_rootfs),
        mount_read_only: sc.is_some_and(|s| s.readonly_rootfs) && ids_for_systemd,
        annotations: Vec::new(),
    };
    let stage1 = pod.stage1_rootfs();
    let t_prep = t0.elapsed();
    let pod_dir = pod.path();
    let added = tokio::task::block_in_place(|| {
        let spare = crate::stage1::spare::Spare::take(&pod_dir);
        spec.add(&mut pod, &rt.manifests, spare)?;
        if !ids_for_systemd {
            return Ok(());
        }
        // the primary gid first: it names the user's group
        let gids: Vec<u32> = std::iter::once(gid).chain(groups.into_iter().filter(|g| *g != gid)).collect();
        crate::stage1::app::ensure_ids(&stage1, uid, &gids).map_err(|source| AppError::Io {
            pod: pod.uuid().to_string(),
            app: name.clone(),
            context: "naming the app's ids".into(),
            source,
        })
    });
    // the next add's directories, made while kubelet starts this one
    crate::stage1::spare::replenish_later(pod_dir);
    added.map_err(app_status)?;
    let t_add = t0.elapsed();
    rt.emit(pod.uuid(), &name, crate::runtime::EventKind::Created);
    rt.pods.warm(&rt.manifests, &pod.uuid().to_string());
    let micros = |d: std::time::Duration| d.as_micros() as u64;
    tracing::debug!(
        pod = %pod.uuid(),
        app = %name,
        pod_micros = micros(t_open),
        image_micros = micros(t_tree - t_open),
        config_micros = micros(t_prep - t_tree),
        add_micros = micros(t_add - t_prep),
        events_micros = micros(t0.elapsed() - t_add),
        "container created"
    );
    Ok(cri::CreateContainerResponse { container_id: meta::container_id(&pod.uuid().to_string(), &name) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(ep: &str, cmd: &str) -> manifest::ImageManifest {
        let mut m = manifest::ImageManifest::new("x");
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
