//! The CRI gRPC services. Handlers translate and validate; the work is done
//! by the domain modules. One file per verb family; this file only routes
//! each RPC to its handler and logs it (method, duration, status code).

mod container_checkpoint;
pub(crate) mod container_create;
pub(crate) mod container_exec;
mod container_remove;
mod container_reopen_log;
pub(crate) mod container_start;
pub(crate) mod container_status;
mod container_stop;
mod container_update_resources;
mod events;
/// `serve --exec-mode`: the same RPCs served by exec'ing the CLI.
pub(crate) mod exec_mode;
pub(crate) mod image;
/// The gRPC code a CRI client gets for an image error.
pub use image::code_of as image_error_code;
mod list_streams;
pub(crate) mod pod_meta;
mod pod_metrics;
mod runtime_info;
mod sandbox_remove;
pub(crate) mod sandbox_run;
pub(crate) mod sandbox_status;
mod sandbox_stop;
mod sandbox_update_resources;
pub(crate) mod stats;

/// Container ids and the app annotations CreateContainer records (the
/// domain's, `container::meta`; CRI's conversions are there too).
pub(crate) use crate::container::meta as container_meta;
use crate::container::{ContainerError, ErrorKind};
use crate::proto::v1 as cri;
use crate::proto::v1::image_service_server::ImageService;
use crate::proto::v1::runtime_service_server::RuntimeService;
use crate::runtime::Runtime;
use exec_mode::ExecMode;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use tonic::{Request, Response, Status};

/// Both CRI services over one shared [`Runtime`].
#[derive(Debug, Clone)]
pub(crate) struct CriService {
    rt: Arc<Runtime>,
    /// Set in `--exec-mode`: the calls rktlet exec'd are exec'd.
    exec: Option<Arc<ExecMode>>,
}

impl CriService {
    pub(crate) fn new(rt: Arc<Runtime>) -> Self {
        Self { rt, exec: None }
    }

    /// The exec design (`serve --exec-mode`), for comparison.
    pub(crate) fn exec_mode(rt: Arc<Runtime>) -> std::io::Result<Self> {
        let exec = ExecMode::new(rt.clone())?;
        Ok(Self { rt, exec: Some(Arc::new(exec)) })
    }
}

/// Calls kubelet makes every second or so; logged at debug level when they succeed.
fn is_frequent(method: &str) -> bool {
    method.starts_with("List")
        || method.ends_with("Status")
        || method.ends_with("Stats")
        || matches!(method, "Version" | "ImageFsInfo" | "RuntimeConfig")
}

/// How long the client gives a call: its `grpc-timeout` header (up to
/// eight digits and a unit, `H` `M` `S` `m` `u` `n`), less a millisecond.
/// tonic ends a call whose header has run out itself, but answers
/// CANCELLED; the CRI client expects DEADLINE_EXCEEDED (critest v1.36's
/// "public image should timeout if requested", which gives PullImage 1 ms),
/// so [`observe`] ends it first.
fn client_deadline(metadata: &tonic::metadata::MetadataMap) -> Option<std::time::Duration> {
    use std::time::Duration;
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let timeout = match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    };
    Some(timeout.saturating_sub(Duration::from_millis(1)))
}

/// Runs one RPC handler within the client's deadline, if it gave one, and
/// logs its method, duration and status code.
async fn observe<T>(
    method: &'static str,
    deadline: Option<std::time::Duration>,
    handler: impl Future<Output = Result<T, Status>>,
) -> Result<Response<T>, Status> {
    let start = Instant::now();
    let result = match deadline {
        Some(d) => tokio::time::timeout(d, handler).await.unwrap_or_else(|_| {
            Err(Status::deadline_exceeded(format!(
                "{method}: the client's deadline passed after {} ms",
                start.elapsed().as_millis()
            )))
        }),
        None => handler.await,
    };
    let took = start.elapsed();
    let code = result.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok);
    crate::metrics::global().record_call(method, took, format!("{code:?}"));
    let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
    match &result {
        Ok(_) if is_frequent(method) => tracing::debug!(method, micros, code = "Ok", "cri"),
        Ok(_) => tracing::info!(method, micros, code = "Ok", "cri"),
        Err(s) => tracing::warn!(method, micros, code = ?s.code(), message = s.message(), "cri"),
    }
    result.map(Response::new)
}

/// The gRPC code of a domain error's class.
/// InvalidArgument unless the request's `field` (its proto name) is set.
pub(crate) fn required(value: &str, field: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    Ok(())
}

fn code_of(kind: ErrorKind) -> tonic::Code {
    match kind {
        ErrorKind::NotFound => tonic::Code::NotFound,
        ErrorKind::InvalidArgument => tonic::Code::InvalidArgument,
        ErrorKind::AlreadyExists => tonic::Code::AlreadyExists,
        ErrorKind::FailedPrecondition => tonic::Code::FailedPrecondition,
        ErrorKind::Unavailable => tonic::Code::Unavailable,
        ErrorKind::DeadlineExceeded => tonic::Code::DeadlineExceeded,
        ErrorKind::ResourceExhausted => tonic::Code::ResourceExhausted,
        ErrorKind::Unknown => tonic::Code::Unknown,
        ErrorKind::Internal => tonic::Code::Internal,
    }
}

/// Maps a container verb's error to the code CRI clients expect; its text is the message.
pub(crate) fn container_error(e: ContainerError) -> Status {
    let code = match &e {
        // the image store names its own codes (a reference, a registry...)
        ContainerError::Image { source, .. } => image::code_of(source),
        e => code_of(e.kind()),
    };
    Status::new(code, e.to_string())
}

/// Maps a pod verb's error to the code CRI clients expect; its text is the message.
pub(crate) fn sandbox_error(e: crate::sandbox::SandboxError) -> Status {
    Status::new(code_of(e.kind()), e.to_string())
}

impl From<ContainerError> for Status {
    fn from(e: ContainerError) -> Status {
        container_error(e)
    }
}

/// Maps pod-directory errors to the codes CRI clients expect.
fn pod_status(e: rkt::pod::PodError) -> Status {
    use rkt::pod::PodError;
    match e {
        // an id that names no pod, whatever its form, is not found (as for
        // containers: RemovePodSandbox of it succeeds, as RemoveContainer does)
        PodError::NotFound(_) | PodError::InvalidId(_) => Status::not_found(e.to_string()),
        PodError::Ambiguous(_) => Status::invalid_argument(e.to_string()),
        PodError::Exists(_) => Status::already_exists(e.to_string()),
        PodError::WrongState { .. } | PodError::Busy(_) => Status::failed_precondition(e.to_string()),
        PodError::Manifest { .. } | PodError::Io { .. } => Status::internal(e.to_string()),
    }
}

/// The answer of an RPC rktlet does not implement yet (every RPC of the
/// CRI is built at the moment: kept for the next the CRI adds).
#[allow(dead_code)]
fn unimplemented(method: &str) -> Status {
    Status::unimplemented(format!("{method} is not implemented by rktlet yet"))
}

/// Writes a service impl: `done` RPCs call `handler(&runtime, request)`, or
/// in exec mode `exec_handler(&exec_mode, request)` where one is given after
/// `| exec`; `pending` ones answer UNIMPLEMENTED naming the method. (A macro
/// so that `#[async_trait]` sees every method already expanded.)
macro_rules! cri_impl {
    (
        $trait:ident {
            $(type $assoc:ident = $assoc_ty:ty;)*
            done { $( $name:literal: $f:ident($req:ident) -> $resp:ty => $handler:path $(| exec $eh:path)?; )* }
            pending { $( $pname:literal: $pf:ident($preq:ident) -> $presp:ty; )* }
        }
    ) => {
        #[tonic::async_trait]
        impl $trait for CriService {
            $(type $assoc = $assoc_ty;)*
            $(
                async fn $f(&self, request: Request<cri::$req>) -> Result<Response<$resp>, Status> {
                    let deadline = client_deadline(request.metadata());
                    let request = request.into_inner();
                    $(
                        if let Some(exec) = &self.exec {
                            return observe($name, deadline, $eh(exec, request)).await;
                        }
                    )?
                    observe($name, deadline, $handler(&self.rt, request)).await
                }
            )*
            $(
                async fn $pf(&self, _request: Request<cri::$preq>) -> Result<Response<$presp>, Status> {
                    observe($pname, None, async { Err(unimplemented($pname)) }).await
                }
            )*
        }
    };
}

/// A server stream of `T`, boxed.
type BoxStream<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;
type EventStream = BoxStream<cri::ContainerEventResponse>;

cri_impl! {
    RuntimeService {
        type GetContainerEventsStream = EventStream;
        type StreamPodSandboxesStream = BoxStream<cri::StreamPodSandboxesResponse>;
        type StreamContainersStream = BoxStream<cri::StreamContainersResponse>;
        type StreamContainerStatsStream = BoxStream<cri::StreamContainerStatsResponse>;
        type StreamPodSandboxStatsStream = BoxStream<cri::StreamPodSandboxStatsResponse>;
        type StreamPodSandboxMetricsStream = BoxStream<cri::StreamPodSandboxMetricsResponse>;
        done {
            "Version": version(VersionRequest) -> cri::VersionResponse => runtime_info::version;
            "Status": status(StatusRequest) -> cri::StatusResponse => runtime_info::status;
            "RuntimeConfig": runtime_config(RuntimeConfigRequest) -> cri::RuntimeConfigResponse
                => runtime_info::runtime_config;
            "UpdateRuntimeConfig": update_runtime_config(UpdateRuntimeConfigRequest)
                -> cri::UpdateRuntimeConfigResponse => runtime_info::update_runtime_config;
            "RunPodSandbox": run_pod_sandbox(RunPodSandboxRequest) -> cri::RunPodSandboxResponse
                => sandbox_run::run_pod_sandbox | exec exec_mode::run_pod_sandbox;
            "StopPodSandbox": stop_pod_sandbox(StopPodSandboxRequest) -> cri::StopPodSandboxResponse
                => sandbox_stop::stop_pod_sandbox | exec exec_mode::stop_pod_sandbox;
            "RemovePodSandbox": remove_pod_sandbox(RemovePodSandboxRequest) -> cri::RemovePodSandboxResponse
                => sandbox_remove::remove_pod_sandbox | exec exec_mode::remove_pod_sandbox;
            "PodSandboxStatus": pod_sandbox_status(PodSandboxStatusRequest) -> cri::PodSandboxStatusResponse
                => sandbox_status::pod_sandbox_status | exec exec_mode::pod_sandbox_status;
            "ListPodSandbox": list_pod_sandbox(ListPodSandboxRequest) -> cri::ListPodSandboxResponse
                => sandbox_status::list_pod_sandbox | exec exec_mode::list_pod_sandbox;
            "CreateContainer": create_container(CreateContainerRequest) -> cri::CreateContainerResponse
                => container_create::create_container | exec exec_mode::create_container;
            "StartContainer": start_container(StartContainerRequest) -> cri::StartContainerResponse
                => container_start::start_container | exec exec_mode::start_container;
            "StopContainer": stop_container(StopContainerRequest) -> cri::StopContainerResponse
                => container_stop::stop_container | exec exec_mode::stop_container;
            "RemoveContainer": remove_container(RemoveContainerRequest) -> cri::RemoveContainerResponse
                => container_remove::remove_container | exec exec_mode::remove_container;
            "ListContainers": list_containers(ListContainersRequest) -> cri::ListContainersResponse
                => container_status::list_containers | exec exec_mode::list_containers;
            "ContainerStatus": container_status(ContainerStatusRequest) -> cri::ContainerStatusResponse
                => container_status::container_status | exec exec_mode::container_status;
            "UpdateContainerResources": update_container_resources(UpdateContainerResourcesRequest)
                -> cri::UpdateContainerResourcesResponse => container_update_resources::update_container_resources;
            "UpdatePodSandboxResources": update_pod_sandbox_resources(UpdatePodSandboxResourcesRequest)
                -> cri::UpdatePodSandboxResourcesResponse => sandbox_update_resources::update_pod_sandbox_resources;
            "ReopenContainerLog": reopen_container_log(ReopenContainerLogRequest) -> cri::ReopenContainerLogResponse
                => container_reopen_log::reopen_container_log;
            "ExecSync": exec_sync(ExecSyncRequest) -> cri::ExecSyncResponse
                => container_exec::exec_sync | exec exec_mode::exec_sync;
            "Exec": exec(ExecRequest) -> cri::ExecResponse => container_exec::exec;
            "Attach": attach(AttachRequest) -> cri::AttachResponse => container_exec::attach;
            "PortForward": port_forward(PortForwardRequest) -> cri::PortForwardResponse
                => sandbox_status::port_forward;
            "GetContainerEvents": get_container_events(GetEventsRequest) -> EventStream
                => events::get_container_events;
            "ContainerStats": container_stats(ContainerStatsRequest) -> cri::ContainerStatsResponse
                => stats::container_stats;
            "ListContainerStats": list_container_stats(ListContainerStatsRequest)
                -> cri::ListContainerStatsResponse => stats::list_container_stats;
            "PodSandboxStats": pod_sandbox_stats(PodSandboxStatsRequest) -> cri::PodSandboxStatsResponse
                => stats::pod_sandbox_stats;
            "ListPodSandboxStats": list_pod_sandbox_stats(ListPodSandboxStatsRequest)
                -> cri::ListPodSandboxStatsResponse => stats::list_pod_sandbox_stats;
            "ListMetricDescriptors": list_metric_descriptors(ListMetricDescriptorsRequest)
                -> cri::ListMetricDescriptorsResponse => pod_metrics::list_metric_descriptors;
            "ListPodSandboxMetrics": list_pod_sandbox_metrics(ListPodSandboxMetricsRequest)
                -> cri::ListPodSandboxMetricsResponse => pod_metrics::list_pod_sandbox_metrics;
            "StreamPodSandboxes": stream_pod_sandboxes(StreamPodSandboxesRequest)
                -> BoxStream<cri::StreamPodSandboxesResponse> => list_streams::stream_pod_sandboxes;
            "StreamContainers": stream_containers(StreamContainersRequest) -> BoxStream<cri::StreamContainersResponse>
                => list_streams::stream_containers;
            "StreamContainerStats": stream_container_stats(StreamContainerStatsRequest)
                -> BoxStream<cri::StreamContainerStatsResponse> => list_streams::stream_container_stats;
            "StreamPodSandboxStats": stream_pod_sandbox_stats(StreamPodSandboxStatsRequest)
                -> BoxStream<cri::StreamPodSandboxStatsResponse> => list_streams::stream_pod_sandbox_stats;
            "StreamPodSandboxMetrics": stream_pod_sandbox_metrics(StreamPodSandboxMetricsRequest)
                -> BoxStream<cri::StreamPodSandboxMetricsResponse> => list_streams::stream_pod_sandbox_metrics;
            "CheckpointContainer": checkpoint_container(CheckpointContainerRequest) -> cri::CheckpointContainerResponse
                => container_checkpoint::checkpoint_container;
        }
        pending {}
    }
}

cri_impl! {
    ImageService {
        type StreamImagesStream = BoxStream<cri::StreamImagesResponse>;
        done {
            "ListImages": list_images(ListImagesRequest) -> cri::ListImagesResponse => image::list_images | exec exec_mode::list_images;
            "ImageStatus": image_status(ImageStatusRequest) -> cri::ImageStatusResponse => image::image_status | exec exec_mode::image_status;
            "PullImage": pull_image(PullImageRequest) -> cri::PullImageResponse => image::pull_image | exec exec_mode::pull_image;
            "RemoveImage": remove_image(RemoveImageRequest) -> cri::RemoveImageResponse => image::remove_image | exec exec_mode::remove_image;
            "ImageFsInfo": image_fs_info(ImageFsInfoRequest) -> cri::ImageFsInfoResponse => image::image_fs_info;
            "StreamImages": stream_images(StreamImagesRequest) -> BoxStream<cri::StreamImagesResponse>
                => list_streams::stream_images;
        }
        pending {}
    }
}

#[cfg(test)]
mod handler_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use rkt::pod::PodError;
    use tonic::Code;

    #[test]
    fn container_errors_as_grpc_codes() {
        let mut cases: Vec<(ContainerError, Code, &str)> = vec![
            (ContainerError::NotFound("container p:a not found".into()), Code::NotFound, "container p:a not found"),
            (ContainerError::InvalidArgument("bad".into()), Code::InvalidArgument, "bad"),
            (ContainerError::FailedPrecondition("not running".into()), Code::FailedPrecondition, "not running"),
            (ContainerError::Unavailable("no bus".into()), Code::Unavailable, "no bus"),
            (ContainerError::Internal("broken".into()), Code::Internal, "broken"),
            (
                ContainerError::io("limits of p:a")(std::io::Error::other("EBUSY")),
                Code::Internal,
                "limits of p:a: EBUSY",
            ),
            (ContainerError::Pod(PodError::NotFound("x".into())), Code::NotFound, "pod x not found"),
            (ContainerError::Pod(PodError::InvalidId("x".into())), Code::NotFound, ""),
            (ContainerError::Pod(PodError::Ambiguous("x".into())), Code::InvalidArgument, ""),
            (ContainerError::Pod(PodError::Busy(uuid::Uuid::nil())), Code::FailedPrecondition, ""),
            (ContainerError::Pod(PodError::Exists(uuid::Uuid::nil())), Code::AlreadyExists, ""),
            (ContainerError::App(crate::stage1::app::AppError::Invalid("no".into())), Code::InvalidArgument, ""),
            (
                ContainerError::App(crate::stage1::app::AppError::Pod(PodError::NotFound("y".into()))),
                Code::NotFound,
                "pod y not found",
            ),
            (
                ContainerError::PodLimits(crate::cgroup::pod_limits::PodLimitsError::BelowUsage { usage: 2, limit: 1 }),
                Code::FailedPrecondition,
                "",
            ),
        ];
        use crate::stage1::exec::ExecError;
        let exec = |source| ContainerError::Exec { id: "p:a".into(), source };
        cases.extend([
            (
                exec(ExecError::Timeout { program: "sleep".into(), timeout: std::time::Duration::from_secs(1) }),
                Code::DeadlineExceeded,
                "exec in container p:a: \"sleep\" did not finish within 1s and was killed",
            ),
            (
                exec(ExecError::TargetGone { pid: 1, source: std::io::Error::other("gone") }),
                Code::FailedPrecondition,
                "container p:a is not running",
            ),
            (exec(ExecError::EmptyCommand), Code::InvalidArgument, "the command is empty"),
            (
                exec(ExecError::Setup {
                    program: "x".into(),
                    step: "execve".into(),
                    source: std::io::Error::other("ENOENT"),
                }),
                Code::Unknown,
                "exec in container p:a: cannot start \"x\" in the app: execve: ENOENT",
            ),
            (
                exec(ExecError::Io(std::io::Error::other("EIO"))),
                Code::Internal,
                "exec in container p:a: exec in the app: EIO",
            ),
        ]);
        check_codes(cases, container_error);
    }

    #[test]
    fn sandbox_errors_as_grpc_codes() {
        use crate::cgroup::pod_limits::PodLimitsError;
        use crate::sandbox::SandboxError;
        use crate::stage1::boot::BootError;
        let nil = uuid::Uuid::nil();
        let failed = || BootError::Failed { uuid: nil, what: "launch", reason: "exit 1".into() };
        let cases: Vec<(SandboxError, Code, String)> = vec![
            (SandboxError::InvalidArgument("bad".into()), Code::InvalidArgument, "bad".into()),
            (
                SandboxError::FailedPrecondition("pod network is not ready: none".into()),
                Code::FailedPrecondition,
                "pod network is not ready: none".into(),
            ),
            (
                crate::sandbox::internal(nil, "writing manifest", "EIO"),
                Code::Internal,
                format!("pod {nil}: writing manifest: EIO"),
            ),
            (SandboxError::Pod(PodError::NotFound("x".into())), Code::NotFound, "pod x not found".into()),
            (SandboxError::Pod(PodError::Busy(nil)), Code::FailedPrecondition, String::new()),
            (SandboxError::PodLimits(PodLimitsError::Invalid("memory".into())), Code::InvalidArgument, String::new()),
            (
                SandboxError::PodLimits(PodLimitsError::BelowUsage { usage: 2, limit: 1 }),
                Code::FailedPrecondition,
                String::new(),
            ),
            (SandboxError::Boot(failed()), Code::Internal, format!("pod {nil}: launch: exit 1")),
            (
                SandboxError::WithLog { source: Box::new(SandboxError::Boot(failed())), log: "a | b".into() },
                Code::Internal,
                format!("pod {nil}: launch: exit 1; sandbox log: a | b"),
            ),
            (SandboxError::Teardown(PodError::NotFound("y".into()).into()), Code::NotFound, "pod y not found".into()),
            (
                SandboxError::Teardown(crate::stage1::teardown::TeardownError::Worker("gone".into())),
                Code::Internal,
                "teardown worker failed: gone".into(),
            ),
        ];
        check_codes(cases, sandbox_error);
    }

    /// Each error maps to its code, with its own text as the message (and
    /// that text, where a case names one).
    fn check_codes<E: std::fmt::Display, M: AsRef<str>>(cases: Vec<(E, Code, M)>, to_status: fn(E) -> Status) {
        for (e, code, message) in cases {
            let text = e.to_string();
            let s = to_status(e);
            assert_eq!(s.code(), code, "{text}");
            assert_eq!(s.message(), text);
            if !message.as_ref().is_empty() {
                assert_eq!(s.message(), message.as_ref());
            }
        }
    }

    #[test]
    fn pod_errors_keep_their_codes() {
        // the domain's classes of pod errors and `pod_status` agree
        for e in [
            PodError::NotFound("x".into()),
            PodError::InvalidId("x".into()),
            PodError::Ambiguous("x".into()),
            PodError::Exists(uuid::Uuid::nil()),
            PodError::Busy(uuid::Uuid::nil()),
        ] {
            let kind = crate::container::pod_kind(&e);
            assert_eq!(pod_status(e).code(), code_of(kind));
        }
    }
}
