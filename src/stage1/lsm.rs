//! Linux security modules rktlet does not drive (AppArmor, SELinux): what a
//! request asks of them, weighed against what the host runs, as containerd
//! weighs it. Where the host lacks the module, containerd ignores a request
//! it could not have honoured anyway (the runtime's default or unconfined
//! AppArmor, SELinux labels) and refuses a named AppArmor profile it cannot
//! load; where the host has it, rktlet (which applies neither) refuses what
//! would confine the container, rather than run it unconfined unsaid.

use std::path::Path;

/// The security modules enabled on the host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lsms {
    pub apparmor: bool,
    pub selinux: bool,
}

impl Lsms {
    /// Reads the host: AppArmor's module parameter (`Y` when enabled) and
    /// selinuxfs (mounted when SELinux is enabled), where containerd's
    /// libraries look.
    pub fn detect() -> Self {
        Self::detect_in(Path::new("/"))
    }

    fn detect_in(root: &Path) -> Self {
        let apparmor = std::fs::read_to_string(root.join("sys/module/apparmor/parameters/enabled"))
            .is_ok_and(|s| s.trim_start().starts_with('Y'));
        let selinux = root.join("sys/fs/selinux/enforce").exists();
        Lsms { apparmor, selinux }
    }
}

/// An AppArmor profile a request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppArmor {
    RuntimeDefault,
    Unconfined,
    Localhost(String),
}

/// What is refused, naming the request's field; `Ok` when the request is
/// honoured (no confinement asked) or ignored as containerd ignores it.
pub fn check_apparmor(field: &str, asked: Option<&AppArmor>, host: Lsms) -> Result<(), String> {
    match (asked, host.apparmor) {
        (None | Some(AppArmor::Unconfined), _) => Ok(()),
        // containerd on a host without AppArmor: the default profile cannot apply, nothing is lost
        (Some(AppArmor::RuntimeDefault), false) => Ok(()),
        (Some(AppArmor::Localhost(name)), false) => {
            Err(format!("{field}: AppArmor profile {name:?} cannot be loaded: AppArmor is not enabled on this host"))
        }
        (Some(AppArmor::RuntimeDefault), true) => Err(format!(
            "{field}: rktlet does not apply AppArmor profiles, and this host enforces AppArmor: \
             the runtime's default profile cannot be honoured (leave it unset or ask for Unconfined)"
        )),
        (Some(AppArmor::Localhost(name)), true) => Err(format!(
            "{field}: rktlet does not apply AppArmor profiles ({name:?} asked; this host enforces AppArmor)"
        )),
    }
}

/// SELinux labels (`user`, `role`, `type`, `level`; all empty: none asked).
pub fn check_selinux(field: &str, asked: bool, host: Lsms) -> Result<(), String> {
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
        assert!(check_apparmor("f", None, both).is_ok());
        assert!(check_apparmor("f", Some(&AppArmor::Unconfined), both).is_ok());
        assert!(check_apparmor("f", Some(&AppArmor::RuntimeDefault), none).is_ok());
        let e = check_apparmor("linux.security_context.apparmor", Some(&local), none).expect_err("cannot load");
        assert!(e.starts_with("linux.security_context.apparmor: ") && e.contains("not enabled"), "{e}");
        assert!(check_apparmor("f", Some(&AppArmor::RuntimeDefault), both).is_err());
        assert!(check_apparmor("f", Some(&local), both).is_err());
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
        std::fs::create_dir_all(t.path().join("sys/fs/selinux")).expect("mkdir");
        std::fs::write(t.path().join("sys/fs/selinux/enforce"), "0").expect("w");
        assert_eq!(Lsms::detect_in(t.path()), Lsms { apparmor: true, selinux: true });
    }
}
