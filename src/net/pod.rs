//! A pod's network as the daemon and the CLI manage it: the netns is named
//! after the pod (`rktlet-<uuid>`), the CNI result cache lives in the data
//! dir (`networks/<uuid>/`, so DEL works after a crash or a half-made pod),
//! and `net-info.json` in the pod dir records the outcome in rkt's format.

use super::cni::{CniError, CniRequest, CniResult, Network};
use super::netns::{self, Netns, NetnsError};
use rkt::pod::{self, DataDir, Pod};
use std::path::{Path, PathBuf};
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub enum PodNetError {
    #[error(transparent)]
    Cni(#[from] CniError),
    #[error(transparent)]
    Netns(#[from] NetnsError),
    #[error(transparent)]
    Pod(#[from] pod::PodError),
}

/// Name of a pod's network namespace under `/var/run/netns`.
pub(crate) fn netns_name(uuid: Uuid) -> String {
    format!("rktlet-{uuid}")
}

/// Default bind-mount path of a pod's network namespace.
pub(crate) fn netns_path(uuid: Uuid) -> PathBuf {
    Path::new("/var/run/netns").join(netns_name(uuid))
}

/// Where CNI results of a pod are cached for DEL.
pub(crate) fn cache_dir(data: &DataDir, uuid: Uuid) -> PathBuf {
    data.root().join("networks").join(uuid.to_string())
}

/// The request identifying a pod to its CNI plugins.
pub(crate) fn request(data: &DataDir, uuid: Uuid, netns: &Path) -> CniRequest {
    CniRequest::new(&uuid.to_string(), netns, &cache_dir(data, uuid))
}

/// Writes `net-info.json` for a pod from its CNI result.
pub(crate) fn record(pod: &Pod, network: &Network, result: &CniResult) -> Result<(), PodNetError> {
    let info = super::net_info::from_result(network, "eth0", "", result);
    pod.write_file(pod::NET_INFO_FILE, &rkt::net_info::to_json(&[info]))?;
    Ok(())
}

/// CNI DEL of a pod's network (when it has one): its address and interfaces
/// are freed; processes still in the namespace lose them. Idempotent.
pub(crate) async fn release(
    data: &DataDir,
    uuid: Uuid,
    netns_file: Option<&Path>,
    conf_dir: &Path,
    bin_dirs: &[PathBuf],
) -> Result<(), PodNetError> {
    let netns = netns_file.map(Path::to_path_buf).unwrap_or_else(|| netns_path(uuid));
    if cache_dir(data, uuid).exists() {
        let has_ns = netns.exists();
        match Network::load_default(conf_dir, bin_dirs) {
            Ok(network) => network.del(&request(data, uuid, if has_ns { &netns } else { Path::new("") })).await?,
            // nothing can run DEL without a config; say so and still free the namespace
            Err(e) => tracing::warn!(pod = %uuid, error = %e, "cannot run CNI DEL"),
        }
    }
    Ok(())
}

/// Removes a pod's network namespace (after [`release`]) and its CNI cache.
pub(crate) fn free(data: &DataDir, uuid: Uuid, netns_file: Option<PathBuf>) -> Result<(), PodNetError> {
    let netns = netns_file.unwrap_or_else(|| netns_path(uuid));
    if netns.exists() {
        netns::remove_path(&netns)?;
    }
    if let Err(e) = std::fs::remove_dir_all(cache_dir(data, uuid))
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(pod = %uuid, error = %e, "cannot remove CNI cache");
    }
    Ok(())
}

/// Creates a pod's network namespace (before the sandbox boots in it; the
/// sandbox brings its `lo` up, see `stage1::sandbox`).
pub fn create_netns(uuid: Uuid) -> Result<Netns, PodNetError> {
    Ok(Netns::create(&netns_name(uuid))?)
}
