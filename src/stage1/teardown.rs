//! Stop and remove of a whole pod, in the order that leaves nothing behind:
//! processes (stop), host mounts and cgroup (release), network (CNI DEL, then
//! the netns), and last the pod directory. Shared by the daemon and the CLI;
//! each step is idempotent, so an interrupted teardown is simply repeated.

use super::stop::{self, StopError};
use crate::net::pod::{self as podnet, PodNetError};
use rkt::pod::{self, DataDir, Pod, PodError};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum TeardownError {
    #[error(transparent)]
    Stop(#[from] StopError),
    #[error(transparent)]
    Net(#[from] PodNetError),
    #[error("teardown worker failed: {0}")]
    Worker(String),
}

impl TeardownError {
    /// The pod-directory error underneath, if that is what failed.
    pub fn pod_error(self) -> Result<PodError, Self> {
        match self {
            TeardownError::Stop(StopError::Pod(e)) => Ok(e),
            other => Err(other),
        }
    }
}

impl From<PodError> for TeardownError {
    fn from(e: PodError) -> Self {
        TeardownError::Stop(StopError::Pod(e))
    }
}

pub use crate::net::NetDirs;

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, TeardownError> + Send + 'static,
) -> Result<T, TeardownError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| TeardownError::Worker(e.to_string()))?
}

/// Stops a pod and releases what it holds on the host, network included.
/// The pod directory stays (an exited pod can still be inspected).
pub async fn stop_pod(data: &DataDir, id: &str, grace: Duration, net: &NetDirs) -> Result<(), TeardownError> {
    let t0 = Instant::now();
    let (data2, id2) = (data.clone(), id.to_string());
    let (mut pod, uuid, netns) = blocking(move || {
        let pod = Pod::open(&data2, &id2)?;
        let (uuid, netns) = (pod.uuid(), pod.read_file(pod::NETNS_FILE)?.map(PathBuf::from));
        Ok((pod, uuid, netns))
    })
    .await?;
    // CNI DEL while the pod is killed: a stopped pod is one whose processes
    // are gone and whose network is released, in either order
    let processes = blocking(move || {
        stop::stop(&mut pod, grace)?;
        let t_stop = t0.elapsed();
        stop::release(&pod)?;
        Ok((t_stop, t0.elapsed()))
    });
    let network = async {
        podnet::release(data, uuid, netns.as_deref(), &net.conf_dir, &net.bin_dirs).await?;
        Ok::<_, TeardownError>(t0.elapsed())
    };
    let (processes, network) = tokio::join!(processes, network);
    let ((t_stop, t_release), t_network) = (processes?, network?);
    podnet::free(data, uuid, netns)?;
    tracing::debug!(
        pod = %uuid,
        stop_micros = t_stop.as_micros() as u64,
        release_micros = (t_release - t_stop).as_micros() as u64,
        network_micros = t_network.as_micros() as u64,
        total_micros = t0.elapsed().as_micros() as u64,
        "pod sandbox stopped"
    );
    Ok(())
}

/// When a removed pod's directory is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// Before the removal returns (the CLI, whose process ends next).
    Now,
    /// Taken out of the pod tree before the removal returns, deleted after it
    /// (the daemon: see [`stop::delete_later`]).
    Later,
}

/// Stops (if needed) and deletes a pod with its network.
pub async fn remove_pod(
    data: &DataDir,
    id: &str,
    grace: Duration,
    net: &NetDirs,
    deletion: Deletion,
) -> Result<(), TeardownError> {
    let t0 = Instant::now();
    stop_pod(data, id, grace, net).await?;
    let t_stop = t0.elapsed();
    crate::base::fault::point("remove-after-stop");
    let (data2, id2) = (data.clone(), id.to_string());
    let uuid = blocking(move || {
        let pod = Pod::open(&data2, &id2)?;
        let uuid = pod.uuid();
        match deletion {
            Deletion::Now => stop::delete(pod)?,
            Deletion::Later => stop::delete_later(pod)?,
        }
        Ok(uuid)
    })
    .await?;
    let t_delete = t0.elapsed();
    // a sandbox unit that failed stays loaded for inspection while its pod exists
    if super::host::pid1_is_systemd(std::path::Path::new("/")) {
        super::launch::forget_unit(&uuid.to_string()).await;
    }
    tracing::debug!(
        pod = %uuid,
        stop_micros = t_stop.as_micros() as u64,
        delete_micros = (t_delete - t_stop).as_micros() as u64,
        unit_micros = (t0.elapsed() - t_delete).as_micros() as u64,
        "pod sandbox removed"
    );
    Ok(())
}

/// Removes whatever a pod start that failed left, even without a pod
/// directory (the network may exist before the sandbox made the pod).
pub async fn abort_start(data: &DataDir, uuid: uuid::Uuid, net: &NetDirs) -> Result<(), TeardownError> {
    match remove_pod(data, &uuid.to_string(), Duration::from_secs(5), net, Deletion::Now).await {
        Ok(()) => Ok(()),
        Err(e) => match e.pod_error() {
            Ok(PodError::NotFound(_)) => {
                podnet::teardown(data, uuid, None, &net.conf_dir, &net.bin_dirs).await?;
                Ok(())
            }
            Ok(other) => Err(other.into()),
            Err(e) => Err(e),
        },
    }
}
