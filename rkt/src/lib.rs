//! rkt's on-disk world, as the rkt 1.30 binary reads and writes it: what
//! rktlet's daemon and its rkt-style CLI share with rkt itself.
//!
//! - [`schema`]: the appc Pod and Image Manifests.
//! - [`pod`]: the data dir's layout, a pod's directory, its states and the
//!   locks that make them.
//! - [`cas`], [`index`], [`ql`]: the image store: blobs and image manifests by
//!   CAS key, the index of them, and rkt's own `ql.db` kept in step.
//! - [`tree`]: the tree store's rules (rendered trees and their hash).
//! - [`aci`]: reading an ACI: its plain tar (gzip, bzip2, xz, zstd undone)
//!   and its manifest.
//! - [`layer_aci`]: a docker layer written as an ACI (rktlet's rendition,
//!   its key, the `pathWhitelist` of the layers' deletions).
//! - [`extract`]: rendering: layer and ACI tars unpacked into a rootfs
//!   safely, staged layers merged in order.
//! - [`digest`], [`reference`](mod@reference): content digests and rkt's CAS key; docker
//!   image references as `docker://` image strings name them.
//! - [`gc`]: gc's rules: which pods `gc` marks and removes, which images
//!   image gc removes.
//! - [`net_info`]: the networks a pod joined (`net-info.json`).
//! - [`api_v1`]: rkt's `api/v1` JSON, as `rkt list`, `status` and `app
//!   status` print it with `--format=json`.
//! - [`lock`], [`fs`]: rkt's flock rules; atomic and durable writes.
//!
//! Std and format crates only: nothing here runs a pod, speaks the CRI or
//! needs root (its tests run as an ordinary user).

#![deny(missing_docs)]

pub mod aci;
pub mod api_v1;
pub mod cas;
pub mod digest;
pub mod extract;
pub mod fs;
pub mod gc;
pub mod index;
pub mod layer_aci;
pub mod lock;
pub mod net_info;
pub mod pod;
pub mod ql;
pub mod reference;
pub mod schema;
mod tar_entry;
pub mod tree;

/// Held by every test that spawns a process or checks that a lock was let
/// go, one at a time. A lock is held by every descriptor of its open file
/// description, and a spawned child holds a copy of every descriptor of the
/// test process from its fork until its exec closes them: a pod lock another
/// test had just let go read as held (`Running` after the release, 2 runs in
/// about 25, while `gos_tar_reader_reads_the_rendition` spawned `go`).
#[cfg(test)]
pub(crate) fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // a test that failed holding it poisoned it; the next runs all the same
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
