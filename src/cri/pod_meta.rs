//! A pod's CRI identity read back from its rkt manifest, which
//! `sandbox::from_cri` wrote (metadata in reserved user annotations, labels
//! as user labels, the options rktlet must remember as pod annotations).

use crate::proto::v1 as cri;
use rkt::schema::PodManifest;
use std::collections::HashMap;

pub(crate) use crate::sandbox::from_cri::{
    IPC_MODE, NETWORK_MODE, PID_MODE, POD_ATTEMPT, POD_NAME, POD_NAMESPACE, POD_UID, RESERVED_PREFIX,
};

pub(crate) fn metadata(m: &PodManifest) -> cri::PodSandboxMetadata {
    let get = |k: &str| m.user_annotations.get(k).cloned().unwrap_or_default();
    cri::PodSandboxMetadata {
        name: get(POD_NAME),
        uid: get(POD_UID),
        namespace: get(POD_NAMESPACE),
        attempt: get(POD_ATTEMPT).parse().unwrap_or(0),
    }
}

pub(crate) fn labels(m: &PodManifest) -> HashMap<String, String> {
    m.user_labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The CRI annotations: user annotations without rktlet's reserved keys.
pub(crate) fn annotations(m: &PodManifest) -> HashMap<String, String> {
    m.user_annotations
        .iter()
        .filter(|(k, _)| !k.starts_with(RESERVED_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

pub(crate) fn namespace_options(m: &PodManifest) -> cri::NamespaceOption {
    let mode = |key: &str| {
        if m.annotation(key) == Some("node") { cri::NamespaceMode::Node } else { cri::NamespaceMode::Pod }
    };
    cri::NamespaceOption {
        network: mode(NETWORK_MODE) as i32,
        ipc: mode(IPC_MODE) as i32,
        // the apps of a host-PID pod run in the node's PID namespace, the
        // others' in the pod's (under its systemd) or their own
        pid: mode(PID_MODE) as i32,
        userns_options: Some(userns_options(m)),
        ..Default::default()
    }
}

/// The pod's user namespace as the CRI reports it: NODE, or POD with its mapping.
fn userns_options(m: &PodManifest) -> cri::UserNamespace {
    match crate::stage1::userns::of_manifest(m).ok().flatten() {
        Some(map) => {
            let one = || vec![cri::IdMapping { host_id: map.host, container_id: 0, length: map.len }];
            cri::UserNamespace { mode: cri::NamespaceMode::Pod as i32, uids: one(), gids: one() }
        }
        None => cri::UserNamespace { mode: cri::NamespaceMode::Node as i32, ..Default::default() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::from_cri::{LOG_DIR, manifest_from_config};

    #[test]
    fn metadata_round_trips_through_the_manifest() {
        let config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "web".into(),
                uid: "u1".into(),
                namespace: "ns".into(),
                attempt: 3,
            }),
            labels: [("app".to_string(), "web".to_string())].into(),
            annotations: [
                ("a".to_string(), "b".to_string()),
                ("k8s.io/reserved/pod-uid".to_string(), "forged".to_string()),
            ]
            .into(),
            log_directory: "/var/log/pods/u1".into(),
            ..Default::default()
        };
        let m = manifest_from_config(&config, true, false, "web");
        let back: PodManifest = serde_json::from_str(&serde_json::to_string(&m).expect("ser")).expect("de");
        assert!(back.is_kubernetes_pod());
        assert_eq!(metadata(&back), config.metadata.clone().expect("meta"));
        assert_eq!(labels(&back), config.labels);
        assert_eq!(annotations(&back), [("a".to_string(), "b".to_string())].into());
        let ns = namespace_options(&back);
        assert_eq!(ns.network, cri::NamespaceMode::Node as i32);
        assert_eq!(ns.ipc, cri::NamespaceMode::Pod as i32);
        assert_eq!(back.annotation(LOG_DIR), Some("/var/log/pods/u1"));
        assert!(back.is_mutable());
    }
}
