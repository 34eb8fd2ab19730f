//! GetContainerEvents over the daemon's socket: a subscriber sees a
//! container created, started, stopped by itself (its exit reported from the
//! pod's systemd, not by a StopContainer call) and deleted, in that order,
//! each with the pod's status and its containers' statuses.

mod common;

use common::{Daemon, host_network, pod_config};
use rktlet::proto::v1 as cri;
use std::time::Duration;
use tokio_stream::StreamExt;

#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_sees_a_container_lifecycle() {
    lifecycle(false).await;
}

/// The same in a host-PID pod, whose apps' exits the pod's log writer records.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_sees_a_host_pid_container_lifecycle() {
    lifecycle(true).await;
}

/// `c` in the node's PID namespace.
fn on_node(mut c: cri::ContainerConfig) -> cri::ContainerConfig {
    let linux = c.linux.get_or_insert_default();
    linux.security_context.get_or_insert_default().namespace_options.get_or_insert_default().pid =
        cri::NamespaceMode::Node as i32;
    c
}

async fn lifecycle(host_pid: bool) {
    let d = Daemon::start(&[]);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let logs = tempfile::tempdir().expect("logs");
    let mut config = host_network(pod_config("events", &[]));
    config.log_directory = logs.path().display().to_string();
    if host_pid {
        let linux = config.linux.get_or_insert_default();
        linux.security_context.get_or_insert_default().namespace_options.get_or_insert_default().pid =
            cri::NamespaceMode::Node as i32;
    }
    let tweak = |c| if host_pid { on_node(c) } else { c };
    let pod = common::run_pod(&mut rt, &config).await;
    let mut events = rt.get_container_events(cri::GetEventsRequest {}).await.expect("subscribe").into_inner();

    let c = tweak(common::container_config("short", &image, &["sh", "-c", "sleep 0.3; exit 4"]));
    let id = common::create_container(&mut rt, &pod, &config, c).await;
    rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("start");

    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("an event within 10 s")
            .expect("the stream goes on")
            .expect("an event, not an error")
    };
    use cri::ContainerEventType as T;
    let created = next().await;
    assert_eq!(
        (created.container_id.as_str(), created.container_event_type),
        (id.as_str(), T::ContainerCreatedEvent as i32)
    );
    assert_eq!(created.pod_sandbox_status.as_ref().map(|p| p.id.as_str()), Some(pod.as_str()));
    assert!(created.created_at > 0);
    let started = next().await;
    assert_eq!(started.container_event_type, T::ContainerStartedEvent as i32);
    assert!(started.created_at >= created.created_at);
    // nobody calls StopContainer: the exit comes from the pod's systemd
    let stopped = next().await;
    assert_eq!(stopped.container_event_type, T::ContainerStoppedEvent as i32);
    let status = stopped.containers_statuses.iter().find(|s| s.id == id).expect("the container's status");
    assert_eq!((status.state, status.exit_code), (cri::ContainerState::ContainerExited as i32, 4));

    // a StopContainer call is reported once, by the call
    let c = tweak(common::container_config("long", &image, &["sleep", "1000"]));
    let long = common::create_container(&mut rt, &pod, &config, c).await;
    rt.start_container(cri::StartContainerRequest { container_id: long.clone() }).await.expect("start");
    rt.stop_container(cri::StopContainerRequest { container_id: long.clone(), timeout: 5 }).await.expect("stop");
    rt.remove_container(cri::RemoveContainerRequest { container_id: long.clone() }).await.expect("remove");
    let kinds: Vec<i32> = [next().await, next().await, next().await, next().await]
        .iter()
        .inspect(|e| assert_eq!(e.container_id, long))
        .map(|e| e.container_event_type)
        .collect();
    assert_eq!(
        kinds,
        [T::ContainerCreatedEvent, T::ContainerStartedEvent, T::ContainerStoppedEvent, T::ContainerDeletedEvent]
            .map(|t| t as i32)
    );

    rt.remove_container(cri::RemoveContainerRequest { container_id: id.clone() }).await.expect("remove");
    let deleted = next().await;
    assert_eq!(
        (deleted.container_id.as_str(), deleted.container_event_type),
        (id.as_str(), T::ContainerDeletedEvent as i32)
    );
    assert!(deleted.containers_statuses.is_empty());
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove pod");
    common::assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}
