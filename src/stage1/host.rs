//! What the host provides for running pods: its init system and `systemd-nspawn`.

use std::fs;
use std::path::{Path, PathBuf};

/// Facts about the host read once at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The host's PID 1 is systemd (so its units can supervise sandboxes).
    pub pid1_is_systemd: bool,
    /// Path of `systemd-nspawn`, if installed.
    pub nspawn: Option<PathBuf>,
    /// The security modules the host enforces (requests for them are weighed against these).
    pub lsm: super::lsm::Lsms,
}

impl Host {
    pub fn detect() -> Self {
        Host {
            pid1_is_systemd: pid1_is_systemd(Path::new("/")),
            nspawn: find_in_path("systemd-nspawn"),
            lsm: super::lsm::Lsms::detect(),
        }
    }
}

/// Kernel limits every booted pod draws on: each pod's systemd holds three
/// inotify instances, and the default of 128 per user stops the ~40th pod
/// (its systemd exits 255 at `inotify_init1: EMFILE`). Raised at daemon start
/// to what Kubernetes nodes commonly use; lowering is never done.
pub(crate) const NODE_SYSCTLS: [(&str, u64); 2] =
    [("/proc/sys/fs/inotify/max_user_instances", 8192), ("/proc/sys/fs/inotify/max_user_watches", 524_288)];

/// Raises [`NODE_SYSCTLS`] where the node is below them; failures (no
/// permission, read-only /proc in a container) are logged, not fatal.
pub(crate) fn tune_node() {
    for (path, want) in NODE_SYSCTLS {
        let have: Option<u64> = fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok());
        if have.is_some_and(|h| h >= want) {
            continue;
        }
        match fs::write(path, want.to_string()) {
            Ok(()) => tracing::info!(path, from = ?have, to = want, "raised kernel limit for pods"),
            Err(e) => tracing::warn!(path, error = %e, "cannot raise kernel limit; pods may fail to boot past it"),
        }
    }
}

/// systemd's own test (`sd_booted`): `/run/systemd/system` exists, and PID 1
/// calls itself systemd. Either alone is fooled by containers that bind-mount
/// the host's `/run` or run a shim named after it.
pub fn pid1_is_systemd(root: &Path) -> bool {
    let booted = root.join("run/systemd/system").is_dir();
    let comm = fs::read_to_string(root.join("proc/1/comm")).unwrap_or_default();
    booted && comm.trim() == "systemd"
}

/// Looks `name` up in `$PATH`, then in the sbin directories a root daemon may
/// lack in its `$PATH`.
pub(crate) fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| crate::base::fsutil::is_executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_root(booted: bool, comm: &str) -> tempfile::TempDir {
        let t = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(t.path().join("proc/1")).expect("proc");
        fs::write(t.path().join("proc/1/comm"), format!("{comm}\n")).expect("comm");
        if booted {
            fs::create_dir_all(t.path().join("run/systemd/system")).expect("run");
        }
        t
    }

    #[test]
    fn systemd_needs_both_signs() {
        assert!(pid1_is_systemd(fake_root(true, "systemd").path()));
        assert!(!pid1_is_systemd(fake_root(false, "systemd").path()));
        assert!(!pid1_is_systemd(fake_root(true, "tini").path()));
    }

    #[test]
    fn finds_sh_and_not_nonsense() {
        assert!(find_in_path("sh").is_some());
        assert!(find_in_path("rktlet-no-such-program").is_none());
    }
}
