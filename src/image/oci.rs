//! The registry's JSON documents: OCI and Docker schema2 manifests, OCI
//! indexes and Docker manifest lists, image configs; and platform selection.

use oci_spec::image::{Arch, Os};
pub(crate) use oci_spec::image::{Descriptor, ImageConfiguration as ImageConfig, ImageIndex, ImageManifest, Platform};
use serde_json::{Map, Value, json};

pub(crate) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(crate) const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub(crate) const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

/// Every manifest type rktlet reads, for the `Accept` header (without all of
/// them registries down-convert or answer 404).
pub(crate) const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// Largest manifest or index accepted.
pub(crate) const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// Largest image config accepted.
pub(crate) const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// A manifest or an index, as the registry sent it.
#[derive(Debug, Clone)]
pub enum AnyManifest {
    Image(Box<ImageManifest>),
    Index(Box<ImageIndex>),
}

/// Parses a manifest or an index into oci-spec's types. Told apart by media
/// type (the document's, else the response's) or by shape. oci-spec requires
/// what registries and older tools leave out, so the document is first
/// filled in (see [`lenient_manifest`]): what was missing then fails where
/// rktlet checks it (a manifest without `schemaVersion` 2, a layer without a
/// media type), with the message a user can act on.
pub fn parse_manifest(bytes: &[u8], content_type: &str) -> Result<AnyManifest, String> {
    let mut doc: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let obj = doc.as_object_mut().ok_or("not a JSON object")?;
    let media_type = obj.get("mediaType").and_then(Value::as_str).unwrap_or(content_type);
    let index = media_type == OCI_INDEX
        || media_type == DOCKER_LIST
        || (obj.get("config").is_none_or(Value::is_null) && obj.get("manifests").is_some_and(|m| !is_empty(m)));
    lenient_manifest(obj, index);
    if index {
        serde_json::from_value(doc).map(|i| AnyManifest::Index(Box::new(i))).map_err(|e| e.to_string())
    } else {
        serde_json::from_value(doc).map(|m| AnyManifest::Image(Box::new(m))).map_err(|e| e.to_string())
    }
}

fn is_empty(v: &Value) -> bool {
    v.as_array().is_none_or(Vec::is_empty)
}

/// What oci-spec requires and registries leave out: `schemaVersion` (0 for
/// a manifest, which rktlet then refuses, 2 for an index), an index entry's
/// media type (an OCI manifest), the config's, a layer's (none: refused as
/// an unknown layer type), a platform's os and architecture (none: matches
/// no host), `layers`.
fn lenient_manifest(obj: &mut Map<String, Value>, index: bool) {
    obj.entry("schemaVersion").or_insert(json!(if index { 2 } else { 0 }));
    let fill = |d: &mut Value, media_type: &str| {
        let Some(d) = d.as_object_mut() else { return };
        d.entry("mediaType").or_insert(json!(media_type));
        if let Some(p) = d.get_mut("platform").and_then(Value::as_object_mut) {
            p.entry("architecture").or_insert(json!(""));
            p.entry("os").or_insert(json!(""));
        }
    };
    if index {
        for d in obj.entry("manifests").or_insert(json!([])).as_array_mut().into_iter().flatten() {
            fill(d, OCI_MANIFEST);
        }
        return;
    }
    if let Some(c) = obj.get_mut("config") {
        fill(c, OCI_CONFIG);
    }
    for d in obj.entry("layers").or_insert(json!([])).as_array_mut().into_iter().flatten() {
        fill(d, "");
    }
}

/// Parses an image config into oci-spec's type, after filling what older
/// tools leave out and rktlet does without: `architecture` and `os` (empty:
/// read as linux/amd64 where the image is labelled), `rootfs`.
pub fn parse_config(bytes: &[u8]) -> Result<ImageConfig, String> {
    let mut doc: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let obj = doc.as_object_mut().ok_or("not a JSON object")?;
    obj.entry("architecture").or_insert(json!(""));
    obj.entry("os").or_insert(json!(""));
    let rootfs = obj.entry("rootfs").or_insert(json!({}));
    if let Some(r) = rootfs.as_object_mut() {
        r.entry("type").or_insert(json!("layers"));
        r.entry("diff_ids").or_insert(json!([]));
    }
    serde_json::from_value(doc).map_err(|e| e.to_string())
}

/// The digest of a descriptor as rktlet verifies it.
pub(crate) fn digest_of(d: &Descriptor) -> Result<rkt::digest::Digest, rkt::digest::InvalidDigest> {
    d.digest().to_string().parse()
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
    let mut p = Platform::default();
    p.set_architecture(Arch::from(architecture));
    p.set_os(Os::from("linux"));
    p.set_variant(variant.map(Into::into));
    p
}

/// Picks the manifest for `want` from an index: same OS and architecture;
/// among those, the exact variant first, then one without a variant (arm64's
/// `v8` is the default), then none. Entries without a platform are skipped.
pub fn select_platform<'a>(manifests: &'a [Descriptor], want: &Platform) -> Option<&'a Descriptor> {
    let candidates: Vec<&Descriptor> = manifests
        .iter()
        .filter(|d| {
            d.platform().as_ref().is_some_and(|p| p.os() == want.os() && p.architecture() == want.architecture())
        })
        .collect();
    let variant_of = |d: &Descriptor| d.platform().as_ref().and_then(|p| p.variant().clone()).filter(|v| !v.is_empty());
    if let Some(v) = want.variant()
        && let Some(d) = candidates.iter().find(|d| variant_of(d).as_deref() == Some(v.as_str()))
    {
        return Some(d);
    }
    if let Some(d) = candidates.iter().find(|d| variant_of(d).is_none()) {
        return Some(d);
    }
    // only other variants: acceptable for arm64 (all are v8-compatible), not for arm
    match want.architecture() {
        Arch::ARM => None,
        _ => candidates.first().copied(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(arch: &str, variant: Option<&str>, hex: &str) -> Descriptor {
        serde_json::from_value(json!({"mediaType": OCI_MANIFEST, "digest": format!("sha256:{}", hex.repeat(64)),
            "size": 1, "platform": {"architecture": arch, "os": "linux", "variant": variant}}))
        .expect("descriptor")
    }

    #[test]
    fn picks_arch_then_variant() {
        let list = vec![
            desc("arm64", Some("v8"), "a"),
            desc("amd64", None, "b"),
            desc("arm", Some("v6"), "c"),
            desc("arm", Some("v7"), "d"),
        ];
        let p = |a: &str, v: Option<&str>| {
            let mut p = Platform::default();
            p.set_architecture(Arch::from(a));
            p.set_os(Os::from("linux"));
            p.set_variant(v.map(Into::into));
            p
        };
        let pick = |a: &str, v: Option<&str>| {
            select_platform(&list, &p(a, v)).map(|d| d.digest().to_string()[7..8].to_string())
        };
        assert_eq!(pick("amd64", None).as_deref(), Some("b"));
        assert_eq!(pick("arm64", Some("v8")).as_deref(), Some("a"));
        assert_eq!(pick("arm", Some("v7")).as_deref(), Some("d"));
        assert_eq!(pick("arm", Some("v5")), None);
        assert_eq!(pick("s390x", None), None);
        assert_eq!(host_platform().os(), &Os::Linux);
    }

    #[test]
    fn tells_index_from_manifest() {
        let d = format!("sha256:{}", "a".repeat(64));
        let idx = format!(r#"{{"schemaVersion":2,"manifests":[{{"digest":"{d}","size":1}}]}}"#);
        assert!(matches!(parse_manifest(idx.as_bytes(), ""), Ok(AnyManifest::Index(_))));
        let m = format!(r#"{{"schemaVersion":2,"config":{{"digest":"{d}","size":1}},"layers":[]}}"#);
        assert!(matches!(parse_manifest(m.as_bytes(), OCI_MANIFEST), Ok(AnyManifest::Image(_))));
        // a Docker list names its type in the response only
        let list = r#"{"schemaVersion":2,"manifests":[]}"#;
        assert!(matches!(parse_manifest(list.as_bytes(), DOCKER_LIST), Ok(AnyManifest::Index(_))));
        assert!(parse_manifest(b"[1]", "").is_err());
    }

    /// Where oci-spec alone refuses what registries send: the documents are
    /// filled in first, and what rktlet cannot use is refused where it looks.
    #[test]
    fn odd_documents_parse_leniently() {
        // an image config without rootfs, os or architecture (older tools)
        let config = br#"{"config":{"Cmd":["/bin/sh"],"Volumes":{"/b":{},"/a":{}}}}"#;
        assert!(serde_json::from_slice::<ImageConfig>(config).is_err(), "oci-spec now takes it: drop the filling");
        let c = parse_config(config).expect("lenient config");
        assert_eq!(c.architecture().to_string(), "");
        assert_eq!(c.config().as_ref().and_then(|c| c.cmd().clone()), Some(vec!["/bin/sh".to_string()]));
        // a manifest without schemaVersion, a layer without a media type
        let d = format!("sha256:{}", "a".repeat(64));
        let m = format!(r#"{{"config":{{"digest":"{d}","size":1}},"layers":[{{"digest":"{d}","size":2}}]}}"#);
        assert!(serde_json::from_str::<ImageManifest>(&m).is_err(), "oci-spec now takes it: drop the filling");
        let Ok(AnyManifest::Image(m)) = parse_manifest(m.as_bytes(), "") else { panic!("lenient manifest") };
        assert_eq!(m.schema_version(), 0, "refused later as not schema 2");
        assert_eq!(m.layers()[0].media_type().to_string(), "", "refused later as an unknown layer type");
        assert_eq!(m.config().media_type().to_string(), OCI_CONFIG);
    }
}
