//! Wire compatibility of `proto/` with an independent CRI binding.
//!
//! For every message of our contract, a message with every field set to a
//! non-default value (lists and maps with two entries, enums at a non-zero
//! value, 64-bit integers beyond 32 bits, nested messages filled too) is
//! built by reflection from our descriptor, encoded, decoded by the
//! `k8s-cri` crate (generated from Kubernetes' own file, an older release),
//! re-encoded by it and decoded by our types and our descriptor again. Any
//! difference in a field number, type or name-to-number pairing shows up as a
//! decode error or a changed value.
//!
//! Fields and messages Kubernetes added after the `k8s-cri` release are listed
//! below; `k8s-cri` drops them as unknown, so they are removed from the
//! expectation (recursively) for that direction only. Our own types must
//! keep every field in both directions.

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MapKey, MessageDescriptor, ReflectMessage, Value};
use std::collections::{BTreeSet, HashMap};

/// Fields our contract (Kubernetes main after 1.36) has that k8s-cri 0.11 lacks.
const NEWER_FIELDS: &[&str] = &[
    "Mount.image_sub_path",
    "LinuxPodSandboxStats.io",
    "ImageSpec.image_ref",
    "ContainerConfig.stop_signal",
    "ContainerStatus.stop_signal",
    "ExecRequest.audit_request_id",
    "AttachRequest.audit_request_id",
    "RuntimeFeatures.user_namespaces_host_network",
    "ContainerStats.io",
    "CpuUsage.psi",
    "MemoryUsage.psi",
];

/// Messages our contract has that k8s-cri 0.11 lacks (checked against our types only).
const NEWER_MESSAGES: &[&str] = &[
    "StreamPodSandboxesRequest",
    "StreamPodSandboxesResponse",
    "StreamPodSandboxStatsRequest",
    "StreamPodSandboxStatsResponse",
    "StreamContainersRequest",
    "StreamContainersResponse",
    "StreamImagesRequest",
    "StreamImagesResponse",
    "StreamContainerStatsRequest",
    "StreamContainerStatsResponse",
    "PsiStats",
    "PsiData",
    "IoUsage",
    "StreamPodSandboxMetricsRequest",
    "StreamPodSandboxMetricsResponse",
    "UpdatePodSandboxResourcesRequest",
    "UpdatePodSandboxResourcesResponse",
];

fn pool() -> DescriptorPool {
    DescriptorPool::decode(rktlet::proto::FILE_DESCRIPTOR_SET).expect("descriptor set")
}

/// Deterministic distinct values, so two fields never carry the same one by accident.
struct Filler {
    n: u64,
}

impl Filler {
    fn next(&mut self) -> u64 {
        self.n += 1;
        self.n
    }

    fn message(&mut self, desc: &MessageDescriptor, depth: usize) -> DynamicMessage {
        let mut msg = DynamicMessage::new(desc.clone());
        if depth > 8 {
            return msg;
        }
        for field in desc.fields() {
            let value = if field.is_map() {
                let entry = field.kind();
                let entry = entry.as_message().expect("map entry");
                let (k, v) = (entry.map_entry_key_field(), entry.map_entry_value_field());
                let mut map = HashMap::new();
                for _ in 0..2 {
                    map.insert(self.key(&k.kind()), self.value(&v.kind(), depth));
                }
                Value::Map(map)
            } else if field.is_list() {
                Value::List(vec![self.value(&field.kind(), depth), self.value(&field.kind(), depth)])
            } else {
                self.value(&field.kind(), depth)
            };
            msg.set_field(&field, value);
        }
        msg
    }

    fn key(&mut self, kind: &Kind) -> MapKey {
        let n = self.next();
        match kind {
            Kind::String => MapKey::String(format!("key-{n}")),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => MapKey::I32(n as i32),
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => MapKey::I64(n as i64),
            Kind::Uint32 | Kind::Fixed32 => MapKey::U32(n as u32),
            Kind::Uint64 | Kind::Fixed64 => MapKey::U64(n),
            Kind::Bool => MapKey::Bool(n.is_multiple_of(2)),
            other => panic!("map key kind {other:?}"),
        }
    }

    fn value(&mut self, kind: &Kind, depth: usize) -> Value {
        let n = self.next();
        match kind {
            Kind::Double => Value::F64(n as f64 + 0.5),
            Kind::Float => Value::F32(n as f32 + 0.25),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(-(n as i32) - 100_000),
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(-(1i64 << 40) - n as i64),
            Kind::Uint32 | Kind::Fixed32 => Value::U32(3_000_000_000 + n as u32),
            Kind::Uint64 | Kind::Fixed64 => Value::U64((1u64 << 40) + n),
            Kind::Bool => Value::Bool(true),
            Kind::String => Value::String(format!("value-{n} ü")),
            Kind::Bytes => Value::Bytes(prost::bytes::Bytes::from(vec![n as u8, 0, 0xff])),
            Kind::Message(m) => Value::Message(self.message(m, depth + 1)),
            Kind::Enum(e) => {
                let nonzero: Vec<i32> = e.values().map(|v| v.number()).filter(|v| *v != 0).collect();
                assert!(!nonzero.is_empty(), "enum {} has no non-default value", e.full_name());
                Value::EnumNumber(nonzero[n as usize % nonzero.len()])
            }
        }
    }
}

/// Removes, at every depth, the fields k8s-cri does not know.
fn strip_newer(msg: &mut DynamicMessage) {
    let desc = msg.descriptor();
    for field in desc.fields() {
        if NEWER_FIELDS.contains(&format!("{}.{}", desc.name(), field.name()).as_str()) {
            msg.clear_field(&field);
            continue;
        }
        if !matches!(field.kind(), Kind::Message(_)) || !msg.has_field(&field) {
            continue;
        }
        match msg.get_field_mut(&field) {
            Value::Message(m) => strip_newer(m),
            Value::List(items) => items.iter_mut().filter_map(Value::as_message_mut).for_each(strip_newer),
            Value::Map(map) => map.values_mut().filter_map(Value::as_message_mut).for_each(strip_newer),
            _ => {}
        }
    }
}

fn filled(pool: &DescriptorPool, name: &str) -> (MessageDescriptor, DynamicMessage) {
    let desc = pool.get_message_by_name(&format!("runtime.v1.{name}")).expect("message in our contract");
    let msg = Filler { n: 0 }.message(&desc, 0);
    (desc, msg)
}

/// Our generated type keeps every field of a filled message.
fn check_ours<O: Message + Default>(pool: &DescriptorPool, name: &str) {
    let (desc, msg) = filled(pool, name);
    let bytes = msg.encode_to_vec();
    let ours = O::decode(bytes.as_slice()).unwrap_or_else(|e| panic!("{name}: our type cannot decode: {e}"));
    let back = DynamicMessage::decode(desc, ours.encode_to_vec().as_slice()).expect("decode our re-encoding");
    assert_eq!(back, msg, "{name}: our type lost or changed a field");
}

/// k8s-cri decodes what we encode and we decode what it encodes, field for field.
fn check_both<O: Message + Default + PartialEq + std::fmt::Debug, T: Message + Default>(
    pool: &DescriptorPool,
    name: &str,
) {
    check_ours::<O>(pool, name);
    let (desc, msg) = filled(pool, name);
    let ours_bytes = O::decode(msg.encode_to_vec().as_slice()).expect("decode").encode_to_vec();
    let theirs = T::decode(ours_bytes.as_slice()).unwrap_or_else(|e| panic!("{name}: k8s-cri cannot decode ours: {e}"));
    let theirs_bytes = theirs.encode_to_vec();
    let mut expected = msg.clone();
    strip_newer(&mut expected);
    let seen = DynamicMessage::decode(desc, theirs_bytes.as_slice())
        .unwrap_or_else(|e| panic!("{name}: cannot decode k8s-cri's encoding: {e}"));
    assert_eq!(seen, expected, "{name}: a field differs between k8s-cri and our contract");
    let back: O = O::decode(theirs_bytes.as_slice()).expect("our type decodes k8s-cri's bytes");
    let want: O = O::decode(expected.encode_to_vec().as_slice()).expect("decode expected");
    assert_eq!(back, want, "{name}: our type reads k8s-cri's encoding differently");
}

/// The proto name of a generated type: given explicitly where prost renamed it (`DNSConfig` -> `DnsConfig`).
macro_rules! proto_name {
    ($name:ident = $proto:literal) => {
        $proto
    };
    ($name:ident) => {
        stringify!($name)
    };
}

macro_rules! wire_compat {
    ($($name:ident $(= $proto:literal)?),* $(,)?) => {
        /// Messages present in both our contract and k8s-cri 0.11 (proto names).
        const SHARED_MESSAGES: &[&str] = &[$(proto_name!($name $(= $proto)?)),*];

        #[test]
        fn every_shared_message_round_trips_through_k8s_cri() {
            let pool = pool();
            $( check_both::<rktlet::proto::v1::$name, k8s_cri::v1::$name>(&pool, proto_name!($name $(= $proto)?)); )*
        }
    };
}

wire_compat! {
        VersionRequest, VersionResponse, DnsConfig = "DNSConfig", PortMapping, Mount, IdMapping = "IDMapping", UserNamespace,
        NamespaceOption, Int64Value, LinuxSandboxSecurityContext, SecurityProfile, LinuxPodSandboxConfig,
        PodSandboxMetadata, PodSandboxConfig, RunPodSandboxRequest, RunPodSandboxResponse,
        StopPodSandboxRequest, StopPodSandboxResponse, RemovePodSandboxRequest, RemovePodSandboxResponse,
        PodSandboxStatusRequest, PodIp = "PodIP", PodSandboxNetworkStatus, Namespace, LinuxPodSandboxStatus,
        PodSandboxStatus, PodSandboxStatusResponse, PodSandboxStateValue, PodSandboxFilter,
        ListPodSandboxRequest, PodSandbox, ListPodSandboxResponse, PodSandboxStatsRequest,
        PodSandboxStatsResponse, PodSandboxStatsFilter, ListPodSandboxStatsRequest,
        ListPodSandboxStatsResponse, PodSandboxAttributes, PodSandboxStats, LinuxPodSandboxStats,
        WindowsPodSandboxStats, NetworkUsage, WindowsNetworkUsage, NetworkInterfaceUsage,
        WindowsNetworkInterfaceUsage, ProcessUsage, WindowsProcessUsage, ImageSpec, KeyValue,
        LinuxContainerResources, HugepageLimit, SeLinuxOption = "SELinuxOption", Capability, LinuxContainerSecurityContext,
        LinuxContainerConfig, LinuxContainerUser, WindowsNamespaceOption, WindowsSandboxSecurityContext,
        WindowsPodSandboxConfig, WindowsContainerSecurityContext, WindowsContainerConfig,
        WindowsContainerResources, WindowsCpuGroupAffinity, ContainerMetadata, Device, CdiDevice = "CDIDevice",
        ContainerConfig, CreateContainerRequest, CreateContainerResponse, StartContainerRequest,
        StartContainerResponse, StopContainerRequest, StopContainerResponse, RemoveContainerRequest,
        RemoveContainerResponse, ContainerStateValue, ContainerFilter, ListContainersRequest, Container,
        ListContainersResponse, ContainerStatusRequest, ContainerStatus, ContainerStatusResponse,
        ContainerResources, ContainerUser, UpdateContainerResourcesRequest,
        UpdateContainerResourcesResponse, ExecSyncRequest, ExecSyncResponse, ExecRequest, ExecResponse,
        AttachRequest, AttachResponse, PortForwardRequest, PortForwardResponse, ImageFilter,
        ListImagesRequest, Image, ListImagesResponse, ImageStatusRequest, ImageStatusResponse, AuthConfig,
        PullImageRequest, PullImageResponse, RemoveImageRequest, RemoveImageResponse, NetworkConfig,
        RuntimeConfig, UpdateRuntimeConfigRequest, UpdateRuntimeConfigResponse, RuntimeCondition,
        RuntimeStatus, StatusRequest, RuntimeHandlerFeatures, RuntimeHandler, RuntimeFeatures,
        StatusResponse, ImageFsInfoRequest, UInt64Value, FilesystemIdentifier, FilesystemUsage,
        WindowsFilesystemUsage, ImageFsInfoResponse, ContainerStatsRequest, ContainerStatsResponse,
        ListContainerStatsRequest, ContainerStatsFilter, ListContainerStatsResponse, ContainerAttributes,
        ContainerStats, WindowsContainerStats, CpuUsage, WindowsCpuUsage, MemoryUsage, SwapUsage,
        WindowsMemoryUsage, ReopenContainerLogRequest, ReopenContainerLogResponse,
        CheckpointContainerRequest, CheckpointContainerResponse, GetEventsRequest, ContainerEventResponse,
        ListMetricDescriptorsRequest, ListMetricDescriptorsResponse, MetricDescriptor,
        ListPodSandboxMetricsRequest, ListPodSandboxMetricsResponse, PodSandboxMetrics, ContainerMetrics,
        Metric, RuntimeConfigRequest, RuntimeConfigResponse, LinuxRuntimeConfiguration,
}

#[test]
fn newer_messages_round_trip_through_our_types() {
    use rktlet::proto::v1 as ours;
    let pool = pool();
    check_ours::<ours::StreamPodSandboxesRequest>(&pool, "StreamPodSandboxesRequest");
    check_ours::<ours::StreamPodSandboxesResponse>(&pool, "StreamPodSandboxesResponse");
    check_ours::<ours::StreamPodSandboxStatsRequest>(&pool, "StreamPodSandboxStatsRequest");
    check_ours::<ours::StreamPodSandboxStatsResponse>(&pool, "StreamPodSandboxStatsResponse");
    check_ours::<ours::StreamContainersRequest>(&pool, "StreamContainersRequest");
    check_ours::<ours::StreamContainersResponse>(&pool, "StreamContainersResponse");
    check_ours::<ours::StreamImagesRequest>(&pool, "StreamImagesRequest");
    check_ours::<ours::StreamImagesResponse>(&pool, "StreamImagesResponse");
    check_ours::<ours::StreamContainerStatsRequest>(&pool, "StreamContainerStatsRequest");
    check_ours::<ours::StreamContainerStatsResponse>(&pool, "StreamContainerStatsResponse");
    check_ours::<ours::PsiStats>(&pool, "PsiStats");
    check_ours::<ours::PsiData>(&pool, "PsiData");
    check_ours::<ours::IoUsage>(&pool, "IoUsage");
    check_ours::<ours::StreamPodSandboxMetricsRequest>(&pool, "StreamPodSandboxMetricsRequest");
    check_ours::<ours::StreamPodSandboxMetricsResponse>(&pool, "StreamPodSandboxMetricsResponse");
    check_ours::<ours::UpdatePodSandboxResourcesRequest>(&pool, "UpdatePodSandboxResourcesRequest");
    check_ours::<ours::UpdatePodSandboxResourcesResponse>(&pool, "UpdatePodSandboxResourcesResponse");
}

#[test]
fn every_message_of_the_contract_is_checked() {
    let pool = pool();
    let all: BTreeSet<String> =
        pool.all_messages().map(|m| m.name().to_string()).filter(|n| !n.ends_with("Entry")).collect();
    let covered: BTreeSet<String> = SHARED_MESSAGES.iter().chain(NEWER_MESSAGES).map(|s| s.to_string()).collect();
    assert_eq!(all, covered, "a message is neither in the shared list nor in the newer list");
    assert_eq!(all.len(), 170);
}

#[test]
fn filler_sets_every_field() {
    let pool = pool();
    let (desc, msg) = filled(&pool, "ContainerConfig");
    for field in desc.fields() {
        assert!(msg.has_field(&field), "ContainerConfig.{} left at its default", field.name());
    }
    let mut stripped = msg.clone();
    strip_newer(&mut stripped);
    assert_ne!(stripped, msg, "ContainerConfig.stop_signal is newer than k8s-cri and must be stripped");
}

/// The services, exactly as Kubernetes declares them: (service, rpc, request, response, server-streaming).
const RPCS: &[(&str, &str, &str, &str, bool)] = &[
    ("RuntimeService", "Version", "VersionRequest", "VersionResponse", false),
    ("RuntimeService", "RunPodSandbox", "RunPodSandboxRequest", "RunPodSandboxResponse", false),
    ("RuntimeService", "StopPodSandbox", "StopPodSandboxRequest", "StopPodSandboxResponse", false),
    ("RuntimeService", "RemovePodSandbox", "RemovePodSandboxRequest", "RemovePodSandboxResponse", false),
    ("RuntimeService", "PodSandboxStatus", "PodSandboxStatusRequest", "PodSandboxStatusResponse", false),
    ("RuntimeService", "ListPodSandbox", "ListPodSandboxRequest", "ListPodSandboxResponse", false),
    ("RuntimeService", "StreamPodSandboxes", "StreamPodSandboxesRequest", "StreamPodSandboxesResponse", true),
    ("RuntimeService", "CreateContainer", "CreateContainerRequest", "CreateContainerResponse", false),
    ("RuntimeService", "StartContainer", "StartContainerRequest", "StartContainerResponse", false),
    ("RuntimeService", "StopContainer", "StopContainerRequest", "StopContainerResponse", false),
    ("RuntimeService", "RemoveContainer", "RemoveContainerRequest", "RemoveContainerResponse", false),
    ("RuntimeService", "ListContainers", "ListContainersRequest", "ListContainersResponse", false),
    ("RuntimeService", "StreamContainers", "StreamContainersRequest", "StreamContainersResponse", true),
    ("RuntimeService", "ContainerStatus", "ContainerStatusRequest", "ContainerStatusResponse", false),
    (
        "RuntimeService",
        "UpdateContainerResources",
        "UpdateContainerResourcesRequest",
        "UpdateContainerResourcesResponse",
        false,
    ),
    ("RuntimeService", "ReopenContainerLog", "ReopenContainerLogRequest", "ReopenContainerLogResponse", false),
    ("RuntimeService", "ExecSync", "ExecSyncRequest", "ExecSyncResponse", false),
    ("RuntimeService", "Exec", "ExecRequest", "ExecResponse", false),
    ("RuntimeService", "Attach", "AttachRequest", "AttachResponse", false),
    ("RuntimeService", "PortForward", "PortForwardRequest", "PortForwardResponse", false),
    ("RuntimeService", "ContainerStats", "ContainerStatsRequest", "ContainerStatsResponse", false),
    ("RuntimeService", "ListContainerStats", "ListContainerStatsRequest", "ListContainerStatsResponse", false),
    ("RuntimeService", "StreamContainerStats", "StreamContainerStatsRequest", "StreamContainerStatsResponse", true),
    ("RuntimeService", "PodSandboxStats", "PodSandboxStatsRequest", "PodSandboxStatsResponse", false),
    ("RuntimeService", "ListPodSandboxStats", "ListPodSandboxStatsRequest", "ListPodSandboxStatsResponse", false),
    ("RuntimeService", "StreamPodSandboxStats", "StreamPodSandboxStatsRequest", "StreamPodSandboxStatsResponse", true),
    ("RuntimeService", "UpdateRuntimeConfig", "UpdateRuntimeConfigRequest", "UpdateRuntimeConfigResponse", false),
    ("RuntimeService", "Status", "StatusRequest", "StatusResponse", false),
    ("RuntimeService", "CheckpointContainer", "CheckpointContainerRequest", "CheckpointContainerResponse", false),
    ("RuntimeService", "GetContainerEvents", "GetEventsRequest", "ContainerEventResponse", true),
    ("RuntimeService", "ListMetricDescriptors", "ListMetricDescriptorsRequest", "ListMetricDescriptorsResponse", false),
    ("RuntimeService", "ListPodSandboxMetrics", "ListPodSandboxMetricsRequest", "ListPodSandboxMetricsResponse", false),
    (
        "RuntimeService",
        "StreamPodSandboxMetrics",
        "StreamPodSandboxMetricsRequest",
        "StreamPodSandboxMetricsResponse",
        true,
    ),
    ("RuntimeService", "RuntimeConfig", "RuntimeConfigRequest", "RuntimeConfigResponse", false),
    (
        "RuntimeService",
        "UpdatePodSandboxResources",
        "UpdatePodSandboxResourcesRequest",
        "UpdatePodSandboxResourcesResponse",
        false,
    ),
    ("ImageService", "ListImages", "ListImagesRequest", "ListImagesResponse", false),
    ("ImageService", "StreamImages", "StreamImagesRequest", "StreamImagesResponse", true),
    ("ImageService", "ImageStatus", "ImageStatusRequest", "ImageStatusResponse", false),
    ("ImageService", "PullImage", "PullImageRequest", "PullImageResponse", false),
    ("ImageService", "RemoveImage", "RemoveImageRequest", "RemoveImageResponse", false),
    ("ImageService", "ImageFsInfo", "ImageFsInfoRequest", "ImageFsInfoResponse", false),
];

#[test]
fn services_declare_every_kubernetes_rpc() {
    let pool = pool();
    let mut seen = Vec::new();
    for service in pool.services() {
        for m in service.methods() {
            seen.push((
                service.name().to_string(),
                m.name().to_string(),
                m.input().name().to_string(),
                m.output().name().to_string(),
                m.is_server_streaming(),
            ));
            assert!(!m.is_client_streaming());
        }
    }
    let want: Vec<_> =
        RPCS.iter().map(|(s, m, i, o, st)| (s.to_string(), m.to_string(), i.to_string(), o.to_string(), *st)).collect();
    assert_eq!(seen, want);
    assert_eq!(
        pool.services().map(|s| s.full_name().to_string()).collect::<Vec<_>>(),
        ["runtime.v1.RuntimeService", "runtime.v1.ImageService"]
    );
}
