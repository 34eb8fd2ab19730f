//! AppArmor for apps: which profile an app runs under, the runtime's default
//! profile (written and loaded by rktlet, as containerd loads its own), and
//! the labels read back from a process.
//!
//! A profile is applied the way the kernel offers it to an unconfined
//! process: `exec <profile>` written to `/proc/self/attr/apparmor/exec`, so
//! the next execve enters it. appexec does that for an app it starts; the
//! exec path (`stage1::exec`) does it for a command exec'd into an app, with
//! the label its main process runs under. The pod's own processes (its
//! systemd, the log writer) stay unconfined, as containerd's shim and pause
//! do not matter to a profile either.
//!
//! Runs in: the daemon (the default profile is loaded on first use, once per
//! daemon: a profile an older build loaded is replaced).

use super::lsm::Confinement;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The name of the runtime's default profile.
pub(crate) const DEFAULT_PROFILE: &str = "rktlet-default";

/// The runtime's default profile: what a container needs, without mounts,
/// the kernel's tunables and security files, raw memory, or signals and
/// ptrace across profiles (the runtime, unconfined, may still signal).
const DEFAULT_PROFILE_TEXT: &str = r#"# Written by rktlet: the profile of containers that ask for the runtime's
# default (or for nothing, on a host with AppArmor). Replaced at each daemon start.
#include <tunables/global>

profile rktlet-default flags=(attach_disconnected,mediate_deleted) {
  #include <abstractions/base>

  network,
  capability,
  file,
  umount,
  signal (receive) peer=unconfined,
  signal (send,receive) peer=rktlet-default,
  ptrace (trace,read,tracedby,readby) peer=rktlet-default,

  deny mount,
  deny pivot_root,
  deny @{PROC}/sys/** wklx,
  deny @{PROC}/sysrq-trigger rwklx,
  deny @{PROC}/kcore rwklx,
  deny @{PROC}/kmem rwklx,
  deny @{PROC}/mem rwklx,
  deny /sys/kernel/security/** rwklx,
  deny /sys/firmware/** rwklx,
  deny /sys/** wklx,
}
"#;

#[derive(Debug, thiserror::Error)]
pub(crate) enum AppArmorError {
    #[error("AppArmor profile {0:?} is not loaded on this host (load it with apparmor_parser first)")]
    NotLoaded(String),
    #[error(
        "AppArmor is enabled on this host and the runtime's default profile needs apparmor_parser, \
         which is not installed (install the apparmor package, or ask for an Unconfined profile)"
    )]
    NoParser,
    #[error("loading the runtime's default AppArmor profile: {0}")]
    Load(String),
    #[error("AppArmor: {context}: {source}")]
    Io { context: String, source: io::Error },
}

/// The profile an app runs under, made ready: the default one loaded, a
/// named one checked to be (`None`: unconfined).
pub(crate) fn prepare(confinement: &Confinement, dir: &Path) -> Result<Option<String>, AppArmorError> {
    match confinement {
        Confinement::Unconfined => Ok(None),
        Confinement::RuntimeDefault => {
            ensure_default(dir)?;
            Ok(Some(DEFAULT_PROFILE.to_string()))
        }
        Confinement::Profile(name) if is_loaded(name)? => Ok(Some(name.clone())),
        Confinement::Profile(name) => Err(AppArmorError::NotLoaded(name.clone())),
    }
}

/// Whether a profile of that name is loaded (`name (mode)` lines).
pub(crate) fn is_loaded(name: &str) -> Result<bool, AppArmorError> {
    let path = "/sys/kernel/security/apparmor/profiles";
    let list = std::fs::read_to_string(path)
        .map_err(|source| AppArmorError::Io { context: format!("reading {path}"), source })?;
    Ok(profiles_list_has(&list, name))
}

fn profiles_list_has(list: &str, name: &str) -> bool {
    list.lines().any(|l| l.rsplit_once(" (").map_or(l, |(n, _)| n) == name)
}

/// The `apparmor_parser` that loads profiles (Debian's `apparmor` package).
pub(crate) fn parser() -> Option<PathBuf> {
    ["/sbin/apparmor_parser", "/usr/sbin/apparmor_parser"].into_iter().map(PathBuf::from).find(|p| p.exists())
}

/// Loaded once per daemon (a failure is retried at the next request).
static DEFAULT_LOADED: Mutex<bool> = Mutex::new(false);

/// Writes the default profile under `dir` and loads it (replacing an older
/// one), once per daemon.
pub(crate) fn ensure_default(dir: &Path) -> Result<(), AppArmorError> {
    let mut loaded = DEFAULT_LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if *loaded {
        return Ok(());
    }
    let parser = parser().ok_or(AppArmorError::NoParser)?;
    let io_err = |context: String| move |source| AppArmorError::Io { context, source };
    std::fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
    let file = dir.join(DEFAULT_PROFILE);
    rkt::fs::write_atomic(&file, DEFAULT_PROFILE_TEXT.as_bytes(), 0o644)
        .map_err(io_err(format!("writing {}", file.display())))?;
    // -r: replace a loaded one; -K: no cache (the profile is small)
    let out = Command::new(&parser)
        .arg("-Kr")
        .arg(&file)
        .output()
        .map_err(io_err(format!("running {}", parser.display())))?;
    if !out.status.success() {
        return Err(AppArmorError::Load(format!(
            "{} -Kr {} ({}): {}",
            parser.display(),
            file.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    tracing::info!(profile = DEFAULT_PROFILE, file = %file.display(), "AppArmor default profile loaded");
    *loaded = true;
    Ok(())
}

/// The profile a process runs under, or the one its next execve enters
/// (a parked template has one pending): `None` when unconfined or when the
/// kernel has no AppArmor attributes.
pub(crate) fn label_of(pid: i32) -> Option<String> {
    let attr = |name: &str| std::fs::read_to_string(format!("/proc/{pid}/attr/apparmor/{name}")).ok();
    parse_label(&attr("current")?).or_else(|| parse_label(&attr("exec")?))
}

/// `name (mode)` or `name` (or `exec name`, as written), `unconfined` or
/// nothing being none.
fn parse_label(text: &str) -> Option<String> {
    let text = text.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    let text = text.strip_prefix("exec ").unwrap_or(text);
    let name = text.rsplit_once(" (").map_or(text, |(n, _)| n).trim();
    (!name.is_empty() && name != "unconfined").then(|| name.to_string())
}

/// What a process writes to its own `attr/apparmor/exec` so that its next
/// execve enters `profile`.
pub(crate) fn exec_attr(profile: &str) -> String {
    format!("exec {profile}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_labels_as_the_kernel_shows_them() {
        assert_eq!(parse_label("rktlet-default (enforce)\n").as_deref(), Some("rktlet-default"));
        assert_eq!(
            parse_label("cri-validate-apparmor-test-audit-write (complain)").as_deref(),
            Some("cri-validate-apparmor-test-audit-write")
        );
        assert_eq!(parse_label("unconfined\n"), None);
        assert_eq!(parse_label("exec rktlet-default\0").as_deref(), Some("rktlet-default"));
        assert_eq!(parse_label(""), None);
        assert_eq!(exec_attr("p"), "exec p");
    }

    #[test]
    fn finds_a_profile_in_the_kernels_list() {
        let list = "rktlet-default (enforce)\n/usr/bin/man (enforce)\nnvidia_modprobe//kmod (complain)\n";
        assert!(profiles_list_has(list, "rktlet-default"));
        assert!(profiles_list_has(list, "/usr/bin/man"));
        assert!(!profiles_list_has(list, "rktlet"));
        assert!(!profiles_list_has(list, "non-existent-profile"));
    }
}
