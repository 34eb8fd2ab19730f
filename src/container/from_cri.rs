//! CRI's messages as the domain's requests: the checks and decoding that
//! are about the CRI message (required fields, enums, the security
//! context's profiles, what rktlet refuses), shared by `cri` and by the
//! CLI's `app add`, which builds a CRI request from rkt's flags so that the
//! two cannot disagree. No gRPC here: errors are [`ContainerError`].

use super::ContainerError;
use super::create::{Mount, PidAsked, Request, Seccomp, Security, UsernsAsked};
use super::meta;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use crate::stage1::identity;
use crate::stage1::inject::Propagation;
use crate::stage1::userns::{IdMap, Mapping, MappingError};
use std::path::Path;

/// Labels and annotations of one object, together, at most (Kubernetes'
/// own limit for annotations): they are stored in manifests that every
/// status and list call reads.
pub(crate) const MAX_METADATA_BYTES: usize = 256 << 10;

/// The AppArmor profile a request names: its `apparmor` field, else the
/// deprecated string (`runtime/default`, `unconfined`, `localhost/NAME`).
pub(crate) fn apparmor_asked(
    field: &str,
    profile: Option<&cri::SecurityProfile>,
    deprecated: &str,
) -> Result<Option<crate::stage1::lsm::AppArmor>, ContainerError> {
    use crate::stage1::lsm::AppArmor;
    use cri::security_profile::ProfileType;
    if let Some(p) = profile {
        return match ProfileType::try_from(p.profile_type) {
            Ok(ProfileType::RuntimeDefault) => Ok(Some(AppArmor::RuntimeDefault)),
            Ok(ProfileType::Unconfined) => Ok(Some(AppArmor::Unconfined)),
            Ok(ProfileType::Localhost) if p.localhost_ref.is_empty() => {
                Err(ContainerError::InvalidArgument(format!("{field}: a Localhost profile needs localhost_ref")))
            }
            // the profile's name, which kubelet and critest may give with the
            // deprecated field's `localhost/` prefix (containerd strips it too)
            Ok(ProfileType::Localhost) => {
                let name = p.localhost_ref.strip_prefix("localhost/").unwrap_or(&p.localhost_ref);
                if name.is_empty() {
                    return Err(ContainerError::InvalidArgument(format!("{field}: a Localhost profile needs a name")));
                }
                Ok(Some(AppArmor::Localhost(name.to_string())))
            }
            Err(_) => Err(ContainerError::InvalidArgument(format!("{field}: unknown profile type {}", p.profile_type))),
        };
    }
    match deprecated {
        "" => Ok(None),
        "runtime/default" => Ok(Some(AppArmor::RuntimeDefault)),
        "unconfined" => Ok(Some(AppArmor::Unconfined)),
        other => match other.strip_prefix("localhost/") {
            Some(name) if !name.is_empty() => Ok(Some(AppArmor::Localhost(name.to_string()))),
            _ => Err(ContainerError::InvalidArgument(format!("{field}_profile: unknown AppArmor profile {other:?}"))),
        },
    }
}

/// The AppArmor confinement of a container (or a pod), and the refusal of
/// what rktlet cannot give on this host (see `stage1::lsm`), naming the field.
pub(crate) fn check_lsm(
    rt: &Runtime,
    prefix: &str,
    apparmor: Option<crate::stage1::lsm::AppArmor>,
    privileged: bool,
    selinux: Option<&cri::SeLinuxOption>,
) -> Result<crate::stage1::lsm::Confinement, ContainerError> {
    let host = rt.host.lsm;
    let confinement =
        crate::stage1::lsm::apparmor_for(&format!("{prefix}.apparmor"), apparmor.as_ref(), privileged, host)
            .map_err(ContainerError::InvalidArgument)?;
    let labels =
        selinux.is_some_and(|o| !(o.user.is_empty() && o.role.is_empty() && o.r#type.is_empty() && o.level.is_empty()));
    crate::stage1::lsm::check_selinux(&format!("{prefix}.selinux_options"), labels, host)
        .map_err(ContainerError::InvalidArgument)?;
    Ok(confinement)
}

/// The AppArmor profile a container runs under, made ready on the host.
pub(crate) fn apparmor_profile(
    rt: &Runtime,
    field: &str,
    confinement: &crate::stage1::lsm::Confinement,
) -> Result<Option<String>, ContainerError> {
    use crate::stage1::apparmor::{AppArmorError, prepare};
    // apparmor_parser may run (once per daemon, unless `serve` loaded it first)
    tokio::task::block_in_place(|| prepare(confinement, &rt.apparmor_dir())).map_err(|e| match e {
        AppArmorError::NotLoaded(_) => ContainerError::InvalidArgument(format!("{field}: {e}")),
        AppArmorError::NoParser => ContainerError::FailedPrecondition(format!("{field}: {e}")),
        AppArmorError::Load(_) | AppArmorError::Io { .. } => ContainerError::Internal(format!("{field}: {e}")),
    })
}

/// Refuses labels and annotations over [`MAX_METADATA_BYTES`].
pub(crate) fn check_metadata_size(
    what: &str,
    labels: &std::collections::HashMap<String, String>,
    annotations: &std::collections::HashMap<String, String>,
) -> Result<(), ContainerError> {
    let size: usize = labels.iter().chain(annotations).map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_METADATA_BYTES {
        return Err(ContainerError::InvalidArgument(format!(
            "{what} labels and annotations take {size} bytes; at most {MAX_METADATA_BYTES} are accepted"
        )));
    }
    Ok(())
}

/// What rktlet does not do, refused before anything is written: CDI devices
/// (no CDI registry is read), SELinux labels on a host that enforces them,
/// a named AppArmor profile on a host without AppArmor (see `stage1::lsm`).
/// Returns the container's AppArmor profile, made ready (the runtime's
/// default unless privileged or unconfined, on a host with AppArmor).
#[allow(deprecated)] // older kubelets still send `apparmor_profile`
fn check_unsupported(rt: &Runtime, config: &cri::ContainerConfig) -> Result<Option<String>, ContainerError> {
    if !config.cdi_devices.is_empty() {
        let names: Vec<&str> = config.cdi_devices.iter().map(|d| d.name.as_str()).collect();
        return Err(ContainerError::InvalidArgument(format!(
            "config.CDI_devices: rktlet does not resolve CDI devices ({}); give the device nodes in config.devices",
            names.join(", ")
        )));
    }
    let sc = config.linux.as_ref().and_then(|l| l.security_context.as_ref());
    let prefix = "config.linux.security_context";
    let apparmor = match sc {
        Some(sc) => apparmor_asked(&format!("{prefix}.apparmor"), sc.apparmor.as_ref(), &sc.apparmor_profile)?,
        None => None,
    };
    let privileged = sc.is_some_and(|s| s.privileged);
    let confinement = check_lsm(rt, prefix, apparmor, privileged, sc.and_then(|s| s.selinux_options.as_ref()))?;
    apparmor_profile(rt, &format!("{prefix}.apparmor"), &confinement)
}

/// The stop signal a request asks for (`None`: the runtime's default).
fn stop_signal_asked(config: &cri::ContainerConfig) -> Result<Option<String>, ContainerError> {
    match cri::Signal::try_from(config.stop_signal) {
        Ok(cri::Signal::RuntimeDefault) => Ok(None),
        Ok(sig) => Ok(Some(sig.as_str_name().to_string())),
        Err(_) => Err(ContainerError::InvalidArgument(format!("unknown stop_signal {}", config.stop_signal))),
    }
}

/// The identity a security context asks for.
fn identity_asked(sc: Option<&cri::LinuxContainerSecurityContext>) -> Result<identity::Asked, ContainerError> {
    let Some(sc) = sc else { return Ok(identity::Asked::default()) };
    let policy = match cri::SupplementalGroupsPolicy::try_from(sc.supplemental_groups_policy) {
        Ok(cri::SupplementalGroupsPolicy::Merge) => identity::GroupsPolicy::Merge,
        Ok(cri::SupplementalGroupsPolicy::Strict) => identity::GroupsPolicy::Strict,
        Err(_) => {
            return Err(ContainerError::InvalidArgument(format!(
                "config.linux.security_context.supplemental_groups_policy: unknown policy {}",
                sc.supplemental_groups_policy
            )));
        }
    };
    Ok(identity::Asked {
        run_as_user: sc.run_as_user.as_ref().map(|u| u.value),
        run_as_username: sc.run_as_username.clone(),
        run_as_group: sc.run_as_group.as_ref().map(|g| g.value),
        supplemental_groups: sc.supplemental_groups.clone(),
        policy,
    })
}

/// The PID namespace a security context asks for.
fn pid_asked(sc: Option<&cri::LinuxContainerSecurityContext>) -> Result<PidAsked, ContainerError> {
    let Some(ns) = sc.and_then(|s| s.namespace_options.as_ref()) else { return Ok(PidAsked::Unset) };
    match cri::NamespaceMode::try_from(ns.pid) {
        Ok(cri::NamespaceMode::Pod) => Ok(PidAsked::Pod),
        Ok(cri::NamespaceMode::Container) => Ok(PidAsked::Container),
        Ok(cri::NamespaceMode::Target) => Ok(PidAsked::Target(ns.target_id.clone())),
        Ok(cri::NamespaceMode::Node) => Ok(PidAsked::Node),
        Err(_) => Err(ContainerError::InvalidArgument(format!("unknown PID namespace mode {}", ns.pid))),
    }
}

/// The mapping of a CRI user namespace in POD mode (uids and gids checked).
pub(crate) fn userns_mapping(u: &cri::UserNamespace) -> Result<IdMap, MappingError> {
    let list = |l: &[cri::IdMapping]| -> Vec<Mapping> {
        l.iter().map(|m| Mapping { host_id: m.host_id, container_id: m.container_id, length: m.length }).collect()
    };
    IdMap::from_mappings(&list(&u.uids), &list(&u.gids))
}

/// The user namespace a security context asks for.
fn userns_asked(sc: Option<&cri::LinuxContainerSecurityContext>) -> Result<UsernsAsked, ContainerError> {
    let Some(u) = sc.and_then(|s| s.namespace_options.as_ref()).and_then(|n| n.userns_options.as_ref()) else {
        return Ok(UsernsAsked::Unset);
    };
    match cri::NamespaceMode::try_from(u.mode) {
        Ok(cri::NamespaceMode::Node) => Ok(UsernsAsked::Node),
        Ok(cri::NamespaceMode::Pod) if u.uids.is_empty() && u.gids.is_empty() => Ok(UsernsAsked::Unset),
        Ok(cri::NamespaceMode::Pod) => userns_mapping(u)
            .map(UsernsAsked::Pod)
            .map_err(|e| ContainerError::InvalidArgument(format!("namespace_options.userns_options: {e}"))),
        _ => Err(ContainerError::InvalidArgument(format!(
            "namespace_options.userns_options.mode {}: a container shares its pod's user namespace (POD) or has none (NODE)",
            u.mode
        ))),
    }
}

/// The seccomp profile asked for: the `seccomp` field, else the deprecated
/// `seccomp_profile_path` (`runtime/default`, `docker/default`,
/// `localhost/<path>`, `unconfined`).
#[allow(deprecated)] // older kubelets still send `seccomp_profile_path`
fn seccomp_profile(sc: Option<&cri::LinuxContainerSecurityContext>) -> Result<Seccomp, ContainerError> {
    use cri::security_profile::ProfileType;
    let Some(sc) = sc else { return Ok(Seccomp::Unconfined) };
    if let Some(p) = &sc.seccomp {
        return match ProfileType::try_from(p.profile_type) {
            Ok(ProfileType::RuntimeDefault) => Ok(Seccomp::RuntimeDefault),
            Ok(ProfileType::Unconfined) => Ok(Seccomp::Unconfined),
            Ok(ProfileType::Localhost) => Ok(Seccomp::Localhost(p.localhost_ref.clone())),
            Err(_) => Err(ContainerError::InvalidArgument(format!("unknown seccomp profile type {}", p.profile_type))),
        };
    }
    match sc.seccomp_profile_path.as_str() {
        "" | "unconfined" => Ok(Seccomp::Unconfined),
        "runtime/default" | "docker/default" => Ok(Seccomp::RuntimeDefault),
        other => match other.strip_prefix("localhost/") {
            Some(path) => Ok(Seccomp::Localhost(path.to_string())),
            None => Err(ContainerError::InvalidArgument(format!("unknown seccomp_profile_path {other:?}"))),
        },
    }
}

/// The security settings of a security context.
fn security(sc: Option<&cri::LinuxContainerSecurityContext>) -> Result<Security, ContainerError> {
    let (add, drop) = sc
        .and_then(|s| s.capabilities.as_ref())
        .map(|c| (c.add_capabilities.clone(), c.drop_capabilities.clone()))
        .unwrap_or_default();
    let (masked_paths, readonly_paths) =
        sc.map(|s| (s.masked_paths.clone(), s.readonly_paths.clone())).unwrap_or_default();
    Ok(Security {
        privileged: sc.is_some_and(|s| s.privileged),
        add_capabilities: add,
        drop_capabilities: drop,
        no_new_privs: sc.is_some_and(|s| s.no_new_privs),
        seccomp: seccomp_profile(sc)?,
        masked_paths,
        readonly_paths,
    })
}

/// What rktlet cannot do for a mount is refused rather than ignored.
fn check_mounts(mounts: &[cri::Mount]) -> Result<(), ContainerError> {
    for m in mounts {
        let path = &m.container_path;
        if cri::MountPropagation::try_from(m.propagation).is_err() {
            return Err(ContainerError::InvalidArgument(format!(
                "mount {path}: unknown propagation {}",
                m.propagation
            )));
        }
        if !m.uid_mappings.is_empty() || !m.gid_mappings.is_empty() {
            return Err(ContainerError::InvalidArgument(format!(
                "mount {path}: id-mapped mounts are not supported (rktlet has no user namespaces)"
            )));
        }
        let image = m.image.as_ref().is_some_and(|i| !i.image.is_empty());
        if image && !m.host_path.is_empty() {
            return Err(ContainerError::InvalidArgument(format!("mount {path}: a host_path or an image, not both")));
        }
        if !image && !m.image_sub_path.is_empty() {
            return Err(ContainerError::InvalidArgument(format!("mount {path}: image_sub_path without an image")));
        }
        if !Path::new(path).is_absolute() || (!image && m.host_path.is_empty()) {
            return Err(ContainerError::InvalidArgument(
                "mounts need an absolute container_path and a host_path or an image".into(),
            ));
        }
        if m.recursive_read_only {
            // as CRI says and containerd checks
            if !m.readonly {
                return Err(ContainerError::InvalidArgument(format!(
                    "mount {path}: recursive_read_only needs readonly to be true"
                )));
            }
            if m.propagation != cri::MountPropagation::PropagationPrivate as i32 {
                return Err(ContainerError::InvalidArgument(format!(
                    "mount {path}: recursive_read_only needs propagation PROPAGATION_PRIVATE \
                     (mounts propagated later would not be read-only)"
                )));
            }
            if !crate::stage1::inject::recursive_read_only_supported() {
                return Err(ContainerError::InvalidArgument(format!(
                    "mount {path}: recursive_read_only needs mount_setattr(2), which this kernel lacks (Linux 5.12+)"
                )));
            }
        }
    }
    Ok(())
}

/// A CRI mount as a volume of the app.
fn mount(m: &cri::Mount) -> Mount {
    let image = m.image.as_ref().map(|i| i.image.as_str()).filter(|i| !i.is_empty());
    Mount {
        container_path: m.container_path.clone(),
        host_path: m.host_path.clone(),
        image: image.map(|i| (i.to_string(), m.image_sub_path.clone())),
        readonly: m.readonly,
        propagation: match cri::MountPropagation::try_from(m.propagation) {
            Ok(cri::MountPropagation::PropagationHostToContainer) => Propagation::Slave,
            Ok(cri::MountPropagation::PropagationBidirectional) => Propagation::Shared,
            _ => Propagation::Private,
        },
        selinux_relabel: m.selinux_relabel,
        recursive_read_only: m.recursive_read_only,
    }
}

/// A CreateContainer request, checked, as the domain's [`Request`]. Makes
/// the container's AppArmor profile ready on the host.
pub(crate) fn create_request(rt: &Runtime, req: &cri::CreateContainerRequest) -> Result<Request, ContainerError> {
    let config = req.config.as_ref().ok_or_else(|| ContainerError::InvalidArgument("config is required".into()))?;
    let metadata =
        config.metadata.clone().ok_or_else(|| ContainerError::InvalidArgument("config.metadata is required".into()))?;
    if metadata.name.is_empty() {
        return Err(ContainerError::InvalidArgument("config.metadata.name is required".into()));
    }
    let image = config.image.as_ref().map(|i| i.image.clone()).unwrap_or_default();
    if image.is_empty() {
        return Err(ContainerError::InvalidArgument("config.image.image is required".into()));
    }
    check_metadata_size("container", &config.labels, &config.annotations)?;
    let apparmor = check_unsupported(rt, config)?;
    let sc = config.linux.as_ref().and_then(|l| l.security_context.as_ref());
    let devices = config
        .devices
        .iter()
        .map(meta::Device::from_cri)
        .collect::<Result<Vec<_>, _>>()
        .map_err(ContainerError::InvalidArgument)?;
    check_mounts(&config.mounts)?;
    Ok(Request {
        pod_id: req.pod_sandbox_id.clone(),
        name: metadata.name,
        attempt: metadata.attempt,
        app_name: None,
        image,
        command: config.command.clone(),
        args: config.args.clone(),
        envs: config.envs.iter().map(|kv| (kv.key.clone(), kv.value.clone())).collect(),
        working_dir: config.working_dir.clone(),
        log_path: config.log_path.clone(),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        apparmor,
        tty: config.tty,
        stdin: config.stdin.then_some(if config.stdin_once { meta::StdinMode::Once } else { meta::StdinMode::Open }),
        devices,
        stop_signal: stop_signal_asked(config)?,
        limits: config.linux.as_ref().and_then(|l| l.resources.as_ref()).map(meta::limits_from_cri),
        pid_namespace: pid_asked(sc)?,
        userns: userns_asked(sc)?,
        security: security(sc)?,
        identity: identity_asked(sc)?,
        mounts: config.mounts.iter().map(mount).collect(),
        readonly_rootfs: sc.is_some_and(|s| s.readonly_rootfs),
        restore: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::ErrorKind;

    fn sc() -> cri::LinuxContainerSecurityContext {
        cri::LinuxContainerSecurityContext::default()
    }

    #[test]
    fn apparmor_localhost_names_with_or_without_their_prefix() {
        use crate::stage1::lsm::AppArmor;
        let localhost = |r: &str| cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::Localhost as i32,
            localhost_ref: r.into(),
        };
        for r in ["deny-write", "localhost/deny-write"] {
            let got = apparmor_asked("f", Some(&localhost(r)), "").ok().flatten();
            assert_eq!(got, Some(AppArmor::Localhost("deny-write".into())), "{r}");
        }
        for r in ["", "localhost/"] {
            assert!(apparmor_asked("f", Some(&localhost(r)), "").is_err(), "{r:?}");
        }
        let old = apparmor_asked("f", None, "localhost/deny-write").ok().flatten();
        assert_eq!(old, Some(AppArmor::Localhost("deny-write".into())));
    }

    #[test]
    fn pid_namespace_modes() {
        assert_eq!(pid_asked(None).ok(), Some(PidAsked::Unset));
        let with = |pid: cri::NamespaceMode, target: &str| cri::LinuxContainerSecurityContext {
            namespace_options: Some(cri::NamespaceOption {
                pid: pid as i32,
                target_id: target.into(),
                ..Default::default()
            }),
            ..sc()
        };
        assert_eq!(pid_asked(Some(&with(cri::NamespaceMode::Pod, ""))).ok(), Some(PidAsked::Pod));
        assert_eq!(pid_asked(Some(&with(cri::NamespaceMode::Container, ""))).ok(), Some(PidAsked::Container));
        assert_eq!(
            pid_asked(Some(&with(cri::NamespaceMode::Target, "p:0-a"))).ok(),
            Some(PidAsked::Target("p:0-a".into()))
        );
        assert_eq!(pid_asked(Some(&with(cri::NamespaceMode::Node, ""))).ok(), Some(PidAsked::Node));
        let mut bad = with(cri::NamespaceMode::Pod, "");
        if let Some(ns) = bad.namespace_options.as_mut() {
            ns.pid = 99;
        }
        let e = pid_asked(Some(&bad)).err().map(|e| (e.kind(), e.to_string()));
        assert_eq!(e, Some((ErrorKind::InvalidArgument, "unknown PID namespace mode 99".into())));
    }

    #[test]
    fn stop_signals_and_identity() {
        let config = |stop_signal| cri::ContainerConfig { stop_signal, ..Default::default() };
        assert_eq!(stop_signal_asked(&config(0)).ok(), Some(None));
        assert_eq!(stop_signal_asked(&config(cri::Signal::Sigquit as i32)).ok(), Some(Some("SIGQUIT".into())));
        assert!(stop_signal_asked(&config(999)).is_err_and(|e| e.kind() == ErrorKind::InvalidArgument));
        assert_eq!(identity_asked(None).ok(), Some(identity::Asked::default()));
        let asked = cri::LinuxContainerSecurityContext {
            run_as_user: Some(cri::Int64Value { value: 1000 }),
            supplemental_groups: vec![5],
            supplemental_groups_policy: cri::SupplementalGroupsPolicy::Strict as i32,
            ..sc()
        };
        let got = identity_asked(Some(&asked)).ok();
        assert_eq!(got.as_ref().map(|a| (a.run_as_user, a.policy)), Some((Some(1000), identity::GroupsPolicy::Strict)));
        let bad = cri::LinuxContainerSecurityContext { supplemental_groups_policy: 7, ..sc() };
        assert!(identity_asked(Some(&bad)).is_err_and(|e| e.kind() == ErrorKind::InvalidArgument));
    }

    #[test]
    #[allow(deprecated)]
    fn seccomp_profiles_and_mounts() {
        assert_eq!(seccomp_profile(None).ok(), Some(Seccomp::Unconfined));
        let path = |p: &str| cri::LinuxContainerSecurityContext { seccomp_profile_path: p.into(), ..sc() };
        assert_eq!(seccomp_profile(Some(&path("docker/default"))).ok(), Some(Seccomp::RuntimeDefault));
        assert_eq!(seccomp_profile(Some(&path("localhost/x.json"))).ok(), Some(Seccomp::Localhost("x.json".into())));
        assert!(seccomp_profile(Some(&path("nope"))).is_err_and(|e| e.kind() == ErrorKind::InvalidArgument));
        let m = cri::Mount {
            container_path: "/data".into(),
            host_path: "/srv".into(),
            propagation: cri::MountPropagation::PropagationBidirectional as i32,
            ..Default::default()
        };
        let v = mount(&m);
        assert_eq!((v.propagation, v.image.is_none(), v.host_path.as_str()), (Propagation::Shared, true, "/srv"));
        assert!(check_mounts(std::slice::from_ref(&m)).is_ok());
        let relative = cri::Mount { container_path: "data".into(), ..m };
        let e = check_mounts(&[relative]).err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("mounts need an absolute container_path and a host_path or an image"));
    }
}
