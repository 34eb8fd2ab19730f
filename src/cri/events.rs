//! GetContainerEvents: a server stream of container lifecycle events for
//! kubelet's evented PLEG. Events come from the daemon's own CreateContainer,
//! StartContainer, StopContainer and RemoveContainer, and from each pod's
//! exit recorder (an app that exits by itself is CONTAINER_STOPPED as soon
//! as its systemd reports it). Each event carries the pod's status and its
//! containers' statuses as read when it is sent. A subscriber that falls
//! more than the backlog behind loses the oldest events; the daemon never
//! waits for it.

use super::container_status;
use super::sandbox_status;
use crate::proto::v1 as cri;
use crate::runtime::{ContainerEvent, EventKind, Runtime};
use std::sync::Arc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tonic::Status;

fn event_type(kind: EventKind) -> cri::ContainerEventType {
    match kind {
        EventKind::Created => cri::ContainerEventType::ContainerCreatedEvent,
        EventKind::Started => cri::ContainerEventType::ContainerStartedEvent,
        EventKind::Stopped => cri::ContainerEventType::ContainerStoppedEvent,
        EventKind::Deleted => cri::ContainerEventType::ContainerDeletedEvent,
    }
}

/// The CRI event, with the statuses of the pod and its containers now.
async fn to_cri(rt: &Runtime, e: ContainerEvent) -> cri::ContainerEventResponse {
    let pod_id = e.pod.to_string();
    let pod_sandbox_status = sandbox_status::pod_sandbox_status(
        rt,
        cri::PodSandboxStatusRequest { pod_sandbox_id: pod_id.clone(), verbose: false },
    )
    .await
    .ok()
    .and_then(|r| r.status);
    let containers_statuses = tokio::task::block_in_place(|| container_status::pod_container_statuses(rt, &pod_id));
    cri::ContainerEventResponse {
        container_id: crate::cri::container_meta::container_id(&pod_id, &e.app),
        container_event_type: event_type(e.kind) as i32,
        created_at: e.at,
        pod_sandbox_status,
        containers_statuses,
    }
}

pub(super) async fn get_container_events(
    rt: &Arc<Runtime>,
    _req: cri::GetEventsRequest,
) -> Result<super::EventStream, Status> {
    let rt = rt.clone();
    let events = BroadcastStream::new(rt.events.subscribe()).then(move |item| {
        let rt = rt.clone();
        async move {
            match item {
                Ok(e) => Some(Ok(to_cri(&rt, e).await)),
                Err(BroadcastStreamRecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "a GetContainerEvents subscriber fell behind; events dropped");
                    None
                }
            }
        }
    });
    Ok(Box::pin(events.filter_map(|e| e)))
}
