//! Version, Status, RuntimeConfig, UpdateRuntimeConfig: what the runtime is
//! and whether it can run pods.

use crate::cgroup::Driver;
use crate::proto::v1 as cri;
use crate::runtime::{NotReady, Runtime};
use tonic::Status;

/// CRI API version this runtime speaks.
pub(super) const RUNTIME_API_VERSION: &str = "v1";
/// Name reported to kubelet.
pub(super) const RUNTIME_NAME: &str = "rktlet";

pub(super) async fn version(_rt: &Runtime, _req: cri::VersionRequest) -> Result<cri::VersionResponse, Status> {
    Ok(cri::VersionResponse {
        version: "0.1.0".into(),
        runtime_name: RUNTIME_NAME.into(),
        runtime_version: env!("CARGO_PKG_VERSION").into(),
        runtime_api_version: RUNTIME_API_VERSION.into(),
    })
}

fn condition(kind: &str, state: Result<(), NotReady>) -> cri::RuntimeCondition {
    match state {
        Ok(()) => cri::RuntimeCondition { r#type: kind.into(), status: true, ..Default::default() },
        Err(n) => {
            cri::RuntimeCondition { r#type: kind.into(), status: false, reason: n.reason.into(), message: n.message }
        }
    }
}

pub(super) async fn status(rt: &Runtime, req: cri::StatusRequest) -> Result<cri::StatusResponse, Status> {
    let conditions = vec![condition("RuntimeReady", rt.runtime_ready()), condition("NetworkReady", rt.network_ready())];
    let mut info = std::collections::HashMap::new();
    if req.verbose {
        let c = &rt.config;
        let config = serde_json::json!({
            "socket": c.socket,
            "dataDir": c.data_dir,
            "rktPath": c.rkt_path,
            "cniConfDir": c.cni_conf_dir,
            "cniBinDirs": c.cni_bin_dirs,
            "cgroupDriver": rt.cgroup_driver.as_str(),
            "pid1IsSystemd": rt.host.pid1_is_systemd,
            "nspawn": rt.host.nspawn,
            "podCIDR": rt.pod_cidr(),
            "podPoolSize": c.pod_pool_size,
        });
        info.insert("config".to_string(), config.to_string());
        let pool = serde_json::json!({ "pool": rt.pool.info(), "idleMemory": rt.pool.idle_memory() });
        info.insert("podPool".to_string(), pool.to_string());
    }
    Ok(cri::StatusResponse {
        status: Some(cri::RuntimeStatus { conditions }),
        info,
        runtime_handlers: runtime_handlers(),
        features: Some(runtime_features()),
    })
}

/// The one runtime handler (the default, named ""), with what it supports;
/// kubelet 1.30+ reads these to decide which pod fields it may send.
fn runtime_handlers() -> Vec<cri::RuntimeHandler> {
    vec![cri::RuntimeHandler {
        name: String::new(),
        features: Some(cri::RuntimeHandlerFeatures {
            // a volume's tree is made read-only with mount_setattr(2), when
            // the kernel has it (checked once, as containerd does); pods in
            // user namespaces need id-mapped overlay layers (stage1::userns)
            recursive_read_only_mounts: crate::stage1::inject::recursive_read_only_supported(),
            user_namespaces: crate::stage1::userns::supported(),
        }),
    }]
}

/// Runtime-wide features: `SupplementalGroupsPolicy` and the identity in
/// ContainerStatus (`stage1::identity`); user namespaces only for pods of
/// their own network (kubelet's `user_namespaces_host_network`: false).
fn runtime_features() -> cri::RuntimeFeatures {
    cri::RuntimeFeatures { supplemental_groups_policy: true, user_namespaces_host_network: false }
}

pub(super) async fn runtime_config(
    rt: &Runtime,
    _req: cri::RuntimeConfigRequest,
) -> Result<cri::RuntimeConfigResponse, Status> {
    let driver = match rt.cgroup_driver {
        Driver::Systemd => cri::CgroupDriver::Systemd,
        Driver::Cgroupfs => cri::CgroupDriver::Cgroupfs,
    };
    Ok(cri::RuntimeConfigResponse { linux: Some(cri::LinuxRuntimeConfiguration { cgroup_driver: driver as i32 }) })
}

/// kubelet sends the node's pod CIDR; kept for the CNI runtime config.
pub(super) async fn update_runtime_config(
    rt: &Runtime,
    req: cri::UpdateRuntimeConfigRequest,
) -> Result<cri::UpdateRuntimeConfigResponse, Status> {
    if let Some(cidr) = req.runtime_config.and_then(|c| c.network_config).map(|n| n.pod_cidr) {
        tracing::info!(pod_cidr = %cidr, "pod CIDR updated");
        rt.set_pod_cidr(cidr);
    }
    Ok(cri::UpdateRuntimeConfigResponse {})
}
