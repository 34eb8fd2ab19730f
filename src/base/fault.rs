//! Crash points for the crash-safety tests: with `RKTLET_CRASH_AT=<name>` in
//! its environment, the process SIGKILLs itself when it reaches the point of
//! that name, as a power cut or the OOM killer would stop it there. Without
//! the variable a point is one comparison. The points, and the recovery rule
//! that covers each (documented where the rule lives):
//! - `pull-before-commit`: layers unpacked in a work dir, the image not yet
//!   in the index (`image::pull`: work dirs are temporary and gc'd);
//! - `layer-aci-before-rename`: a layer's ACI written and synced in a work
//!   dir, not yet renamed to its key (`image::layer_aci::convert_one`: the
//!   download stays until the ACI is in place; a start converts again);
//! - `create-before-manifest`: an app's overlay mounted and files written,
//!   the pod manifest not yet rewritten (`stage1::app::AppSpec::add`);
//! - `start-after-unit`: an app's unit started, the daemon's bookkeeping not
//!   done (the exit recorder and reconcile pick it up);
//! - `remove-after-stop`: a pod stopped and released, not yet deleted
//!   (`stage1::teardown::remove_pod`: every step is idempotent).

use std::sync::OnceLock;

/// The environment variable naming the crash point.
pub const ENV: &str = "RKTLET_CRASH_AT";

/// Dies here with SIGKILL if `RKTLET_CRASH_AT` names this point.
pub(crate) fn point(name: &str) {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    if AT.get_or_init(|| std::env::var(ENV).ok()).as_deref() == Some(name) {
        tracing::warn!(point = name, "crash point reached: SIGKILL");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}
