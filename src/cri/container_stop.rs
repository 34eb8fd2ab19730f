//! StopContainer: the container id and grace period, then `container::stop::stop`.

use super::container_error;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use std::time::Duration;
use tonic::Status;

/// The grace period of a request: its seconds, none when negative.
pub(super) fn grace_period(timeout: i64) -> Duration {
    Duration::from_secs(u64::try_from(timeout).unwrap_or(0))
}

pub(super) async fn stop_container(
    rt: &std::sync::Arc<Runtime>,
    req: cri::StopContainerRequest,
) -> Result<cri::StopContainerResponse, Status> {
    match crate::container::stop::stop(rt, &req.container_id, grace_period(req.timeout)).await {
        // the CRI: a stop of a container that is gone (kubelet retries stops
        // after its restarts and the runtime's) is not an error
        Err(e) if e.kind() == crate::container::ErrorKind::NotFound && !req.container_id.is_empty() => {
            tracing::debug!(container = req.container_id, error = %e, "StopContainer: already gone");
        }
        other => other.map_err(container_error)?,
    }
    Ok(cri::StopContainerResponse {})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_period_of_a_request() {
        assert_eq!(grace_period(30), Duration::from_secs(30));
        assert_eq!(grace_period(0), Duration::ZERO);
        assert_eq!(grace_period(-1), Duration::ZERO);
    }
}
