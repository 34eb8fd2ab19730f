//! The registry's JSON documents: OCI and Docker schema2 manifests, OCI
//! indexes and Docker manifest lists, image configs; and platform selection.

use serde::Deserialize;
use std::collections::BTreeMap;

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// Every manifest type rktlet reads, for the `Accept` header (without all of
/// them registries down-convert or answer 404).
pub const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// Largest manifest or index accepted.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// Largest image config accepted.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default)]
    pub platform: Option<Platform>,
    #[serde(default)]
    pub urls: Vec<String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
pub struct Platform {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub variant: Option<String>,
}

/// A manifest or an index, told apart by media type or shape.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnyManifest {
    #[serde(default)]
    pub schema_version: u32,
    #[serde(default)]
    pub media_type: Option<String>,
    #[serde(default)]
    pub config: Option<Descriptor>,
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    #[serde(default)]
    pub manifests: Vec<Descriptor>,
}

impl AnyManifest {
    pub fn is_index(&self, content_type: &str) -> bool {
        let mt = self.media_type.as_deref().unwrap_or(content_type);
        mt == OCI_INDEX || mt == DOCKER_LIST || (self.config.is_none() && !self.manifests.is_empty())
    }
}

/// The parts of an image config rktlet uses.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct ImageConfig {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub variant: Option<String>,
    #[serde(default)]
    pub created: Option<String>,
    #[serde(default)]
    pub author: Option<String>,
    #[serde(default)]
    pub config: Option<ContainerConfig>,
    #[serde(default)]
    pub rootfs: Option<RootFs>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ContainerConfig {
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub env: Option<Vec<String>>,
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    #[serde(default)]
    pub working_dir: Option<String>,
    #[serde(default)]
    pub exposed_ports: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    pub volumes: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub stop_signal: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Default)]
pub struct RootFs {
    #[serde(default)]
    pub diff_ids: Vec<String>,
}

/// The platform this host runs: `linux` and the GOARCH-style architecture,
/// with the variant an image for it would declare.
pub fn host_platform() -> Platform {
    let (architecture, variant) = match std::env::consts::ARCH {
        "x86_64" => ("amd64", None),
        "aarch64" => ("arm64", Some("v8")),
        "arm" => ("arm", Some("v7")),
        "x86" => ("386", None),
        "powerpc64" => ("ppc64le", None),
        "s390x" => ("s390x", None),
        "riscv64" => ("riscv64", None),
        other => (other, None),
    };
    Platform { architecture: architecture.into(), os: "linux".into(), variant: variant.map(Into::into) }
}

/// Picks the manifest for `want` from an index: same OS and architecture;
/// among those, the exact variant first, then one without a variant (arm64's
/// `v8` is the default), then none. Entries without a platform are skipped.
pub fn select_platform<'a>(manifests: &'a [Descriptor], want: &Platform) -> Option<&'a Descriptor> {
    let candidates: Vec<&Descriptor> = manifests
        .iter()
        .filter(|d| d.platform.as_ref().is_some_and(|p| p.os == want.os && p.architecture == want.architecture))
        .collect();
    let variant_of = |d: &Descriptor| d.platform.as_ref().and_then(|p| p.variant.clone()).filter(|v| !v.is_empty());
    if let Some(v) = &want.variant
        && let Some(d) = candidates.iter().find(|d| variant_of(d).as_deref() == Some(v.as_str()))
    {
        return Some(d);
    }
    if let Some(d) = candidates.iter().find(|d| variant_of(d).is_none()) {
        return Some(d);
    }
    // only other variants: acceptable for arm64 (all are v8-compatible), not for arm
    match want.architecture.as_str() {
        "arm" => None,
        _ => candidates.first().copied(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(arch: &str, variant: Option<&str>, digest: &str) -> Descriptor {
        Descriptor {
            media_type: OCI_MANIFEST.into(),
            digest: digest.into(),
            size: 1,
            platform: Some(Platform {
                architecture: arch.into(),
                os: "linux".into(),
                variant: variant.map(Into::into),
            }),
            urls: vec![],
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn picks_arch_then_variant() {
        let list = vec![
            desc("arm64", Some("v8"), "a"),
            desc("amd64", None, "b"),
            desc("arm", Some("v6"), "c"),
            desc("arm", Some("v7"), "d"),
        ];
        let p = |a: &str, v: Option<&str>| Platform {
            architecture: a.into(),
            os: "linux".into(),
            variant: v.map(Into::into),
        };
        assert_eq!(select_platform(&list, &p("amd64", None)).map(|d| d.digest.as_str()), Some("b"));
        assert_eq!(select_platform(&list, &p("arm64", Some("v8"))).map(|d| d.digest.as_str()), Some("a"));
        assert_eq!(select_platform(&list, &p("arm", Some("v7"))).map(|d| d.digest.as_str()), Some("d"));
        assert_eq!(select_platform(&list, &p("arm", Some("v5"))), None);
        assert_eq!(select_platform(&list, &p("s390x", None)), None);
        assert_eq!(host_platform().os, "linux");
    }

    #[test]
    fn tells_index_from_manifest() {
        let idx: AnyManifest =
            serde_json::from_str(r#"{"schemaVersion":2,"manifests":[{"digest":"x","size":1}]}"#).expect("parse");
        assert!(idx.is_index(""));
        let m: AnyManifest =
            serde_json::from_str(r#"{"schemaVersion":2,"config":{"digest":"x","size":1},"layers":[]}"#).expect("parse");
        assert!(!m.is_index(OCI_MANIFEST));
    }
}
