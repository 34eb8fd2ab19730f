//! Linux security modules: what a request asks of them, weighed against
//! what the host runs, as containerd weighs it. AppArmor: where the host
//! lacks it, a request for the runtime's default or for unconfined is
//! ignored (it could not have been honoured anyway) and a named profile
//! refused; where the host has it, every container but a privileged or
//! unconfined one runs under a profile, the runtime's default when none is
//! named (`stage1::apparmor` applies it). SELinux: rktlet does not label, so
//! labels are refused where SELinux is enabled and ignored where it is not.

use std::path::Path;

/// The security modules enabled on the host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lsms {
    pub apparmor: bool,
    pub selinux: bool,
}

impl Lsms {
    /// Reads the host: AppArmor's module parameter (`Y` when enabled) and
    /// its securityfs directory, and selinuxfs (mounted when SELinux is
    /// enabled), where containerd's libraries look.
    pub fn detect() -> Self {
        Self::detect_in(Path::new("/"))
    }

    fn detect_in(root: &Path) -> Self {
        // enabled, and its filesystem there to list and load profiles (containerd's test)
        let apparmor = std::fs::read_to_string(root.join("sys/module/apparmor/parameters/enabled"))
            .is_ok_and(|s| s.trim_start().starts_with('Y'))
            && root.join("sys/kernel/security/apparmor").is_dir();
        let selinux = root.join("sys/fs/selinux/enforce").exists();
        Lsms { apparmor, selinux }
    }
}

/// An AppArmor profile a request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AppArmor {
    RuntimeDefault,
    Unconfined,
    Localhost(String),
}

/// What an app is confined by, once the request is weighed against the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Confinement {
    Unconfined,
    /// The runtime's default profile (`stage1::apparmor::DEFAULT_PROFILE`).
    RuntimeDefault,
    /// A profile loaded on the host by its administrator.
    Profile(String),
}

/// The AppArmor confinement of a container (`privileged`: one that asked
/// for no profile runs unconfined), or what is refused, naming the field.
pub(crate) fn apparmor_for(
    field: &str,
    asked: Option<&AppArmor>,
    privileged: bool,
    host: Lsms,
) -> Result<Confinement, String> {
    match (asked, host.apparmor) {
        (Some(AppArmor::Localhost(name)), false) => {
            Err(format!("{field}: AppArmor profile {name:?} cannot be loaded: AppArmor is not enabled on this host"))
        }
        // containerd on a host without AppArmor: the default profile cannot apply, nothing is lost
        (_, false) | (Some(AppArmor::Unconfined), true) => Ok(Confinement::Unconfined),
        (None | Some(AppArmor::RuntimeDefault), true) if privileged => Ok(Confinement::Unconfined),
        (None | Some(AppArmor::RuntimeDefault), true) => Ok(Confinement::RuntimeDefault),
        (Some(AppArmor::Localhost(name)), true) => Ok(Confinement::Profile(name.clone())),
    }
}

/// SELinux labels (`user`, `role`, `type`, `level`; all empty: none asked).
pub(crate) fn check_selinux(field: &str, asked: bool, host: Lsms) -> Result<(), String> {
    if asked && host.selinux {
        return Err(format!("{field}: rktlet does not apply SELinux labels, and SELinux is enabled on this host"));
    }
    // without SELinux on the host there is nothing to label (containerd ignores them too)
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decides_as_containerd_where_the_host_lacks_the_module() {
        let none = Lsms::default();
        let both = Lsms { apparmor: true, selinux: true };
        let local = AppArmor::Localhost("my-profile".into());
        let for_ = |asked: Option<&AppArmor>, privileged, host| apparmor_for("f", asked, privileged, host);
        // without AppArmor: nothing applies, a named profile is refused
        assert_eq!(for_(None, false, none), Ok(Confinement::Unconfined));
        assert_eq!(for_(Some(&AppArmor::RuntimeDefault), false, none), Ok(Confinement::Unconfined));
        let e = apparmor_for("linux.security_context.apparmor", Some(&local), false, none).expect_err("cannot load");
        assert!(e.starts_with("linux.security_context.apparmor: ") && e.contains("not enabled"), "{e}");
        // with it: the default unless unconfined or privileged, a named profile as named
        assert_eq!(for_(None, false, both), Ok(Confinement::RuntimeDefault));
        assert_eq!(for_(Some(&AppArmor::RuntimeDefault), false, both), Ok(Confinement::RuntimeDefault));
        assert_eq!(for_(None, true, both), Ok(Confinement::Unconfined));
        assert_eq!(for_(Some(&AppArmor::RuntimeDefault), true, both), Ok(Confinement::Unconfined));
        assert_eq!(for_(Some(&AppArmor::Unconfined), false, both), Ok(Confinement::Unconfined));
        assert_eq!(for_(Some(&local), true, both), Ok(Confinement::Profile("my-profile".into())));
        assert!(check_selinux("f", true, none).is_ok());
        assert!(check_selinux("f", false, both).is_ok());
        assert!(check_selinux("f", true, both).expect_err("labels").contains("SELinux is enabled"));
    }

    #[test]
    fn reads_the_host_where_containerd_does() {
        let t = tempfile::tempdir().expect("tempdir");
        assert_eq!(Lsms::detect_in(t.path()), Lsms::default());
        std::fs::create_dir_all(t.path().join("sys/module/apparmor/parameters")).expect("mkdir");
        std::fs::write(t.path().join("sys/module/apparmor/parameters/enabled"), "N\n").expect("w");
        assert!(!Lsms::detect_in(t.path()).apparmor);
        std::fs::write(t.path().join("sys/module/apparmor/parameters/enabled"), "Y\n").expect("w");
        assert!(!Lsms::detect_in(t.path()).apparmor, "no securityfs: profiles can be neither listed nor loaded");
        std::fs::create_dir_all(t.path().join("sys/kernel/security/apparmor")).expect("mkdir");
        std::fs::create_dir_all(t.path().join("sys/fs/selinux")).expect("mkdir");
        std::fs::write(t.path().join("sys/fs/selinux/enforce"), "0").expect("w");
        assert_eq!(Lsms::detect_in(t.path()), Lsms { apparmor: true, selinux: true });
    }
}
