//! Docker/OCI image config -> appc image manifests, as docker2aci does it, but
//! layered: each layer is an ACI of its own (named after its key, so any image
//! that has the layer shares it) and the image is an ACI with an empty rootfs
//! whose `dependencies` are its layers, bottom first.
//!
//! Unlike docker2aci, the image manifest does not depend on the tag it was
//! pulled by (no `version` label, no `originalname`): the same manifest pulled
//! as `x:1` and `x:latest` is one image with one tree, and its tags live in the
//! `remote` table.

use super::oci::ImageConfig;
use super::reference::Reference;
use super::verify::{Digest, cas_key_of};
use crate::pod::manifest::{App, Dependency, ImageManifest, MountPoint, NameValue, Port, sanitize_ac_name};

/// Layer ACIs are named `layer/<key>`.
pub const LAYER_NAME_PREFIX: &str = "layer/";
pub const ANN_REGISTRY: &str = "appc.io/docker/registryurl";
pub const ANN_REPOSITORY: &str = "appc.io/docker/repository";
pub const ANN_IMAGE_ID: &str = "appc.io/docker/imageid";
pub const ANN_MANIFEST_HASH: &str = "appc.io/docker/manifesthash";
pub const ANN_ENTRYPOINT: &str = "appc.io/docker/entrypoint";
pub const ANN_CMD: &str = "appc.io/docker/cmd";
pub const ANN_LAYER_DIGEST: &str = "appc.io/docker/layerdigest";
pub const ANN_MEDIA_TYPE: &str = "appc.io/docker/mediatype";
/// rktlet: the image's user as the config says it (name or uid), for CRI.
pub const ANN_USER: &str = "appc.io/docker/user";
/// The image config's `StopSignal`, when it has one.
pub const ANN_STOP_SIGNAL: &str = "appc.io/docker/stopsignal";

/// An appc ACIdentifier from any string: lower-case, other characters `_`,
/// edges trimmed (appc's `SanitizeACIdentifier`).
pub fn sanitize_ac_identifier(s: &str) -> String {
    let mapped: String = s
        .chars()
        .flat_map(char::to_lowercase)
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || "-._~/".contains(c) { c } else { '_' })
        .collect();
    mapped.trim_matches(|c| "-._~/".contains(c)).to_string()
}

/// appc's names for GOARCH values.
pub fn appc_arch(arch: &str, variant: Option<&str>) -> String {
    match (arch, variant) {
        ("arm64", _) => "aarch64".into(),
        ("arm", Some("v6")) => "armv6l".into(),
        ("arm", _) => "armv7l".into(),
        ("386", _) => "i386".into(),
        (a, _) => a.into(),
    }
}

fn platform_labels(config: &ImageConfig) -> Vec<NameValue> {
    let (os, arch) = (config.os().to_string(), config.architecture().to_string());
    let os = if os.is_empty() { "linux" } else { &os };
    let arch = if arch.is_empty() { "amd64" } else { &arch };
    vec![NameValue::new("os", os), NameValue::new("arch", appc_arch(arch, config.variant().as_deref()))]
}

/// The manifest of one layer's ACI.
pub fn layer_manifest(key: &str, blob_digest: &Digest, media_type: &str, config: &ImageConfig) -> ImageManifest {
    let mut m = ImageManifest::new(format!("{LAYER_NAME_PREFIX}{key}"));
    m.labels = platform_labels(config);
    m.annotations =
        vec![NameValue::new(ANN_LAYER_DIGEST, blob_digest.to_string()), NameValue::new(ANN_MEDIA_TYPE, media_type)];
    m
}

/// A layer as the image manifest lists it.
pub struct LayerRef {
    pub key: String,
    pub size: u64,
}

/// The image's manifest: app from the config, layers as dependencies.
pub fn image_manifest(
    reference: &Reference,
    manifest_digest: &Digest,
    config_digest: &Digest,
    config: &ImageConfig,
    layers: &[LayerRef],
) -> ImageManifest {
    let mut m = ImageManifest::new(sanitize_ac_identifier(&reference.name()));
    m.labels = platform_labels(config);
    let c = config.config().clone().unwrap_or_default();
    let entrypoint = c.entrypoint().clone().unwrap_or_default();
    let cmd = c.cmd().clone().unwrap_or_default();
    let user_field = c.user().clone().unwrap_or_default();
    // the config's maps arrive as lists in document order: sorted, so the
    // same image always gives the same manifest (and key)
    let sorted = |v: &Option<Vec<String>>| {
        let mut v = v.clone().unwrap_or_default();
        v.sort();
        v.dedup();
        v
    };
    let (user, group) = match user_field.split_once(':') {
        _ if user_field.is_empty() => ("0".to_string(), "0".to_string()),
        Some((u, g)) => (u.to_string(), g.to_string()),
        None => (user_field.clone(), user_field.clone()),
    };
    let mut app = App { user, group, ..Default::default() };
    let exec: Vec<String> = entrypoint.iter().chain(cmd.iter()).cloned().collect();
    app.exec = (!exec.is_empty()).then_some(exec);
    app.environment = c
        .env()
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|e| match e.split_once('=') {
            Some((k, v)) => NameValue::new(k, v),
            None => NameValue::new(e.as_str(), ""),
        })
        .collect();
    app.working_directory = c.working_dir().clone().unwrap_or_default();
    let mut names: Vec<String> = Vec::new();
    for path in sorted(c.volumes()) {
        let base = sanitize_ac_name(&format!("volume/{path}"));
        let mut name = base.clone();
        let mut n = 1;
        while names.contains(&name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        names.push(name.clone());
        app.mount_points.push(MountPoint { name, path, read_only: false });
    }
    for spec in sorted(c.exposed_ports()) {
        let (port, proto) = spec.split_once('/').unwrap_or((spec.as_str(), "tcp"));
        if let Ok(port) = port.parse::<u32>() {
            app.ports.push(Port {
                name: format!("{port}-{proto}"),
                protocol: proto.to_string(),
                port,
                count: 0,
                socket_activated: false,
            });
        }
    }
    if let Some(labels) = c.labels() {
        app.user_labels = labels.clone().into_iter().collect();
    }
    m.app = Some(app);
    let json = |v: &Vec<String>| serde_json::to_string(v).unwrap_or_default();
    let mut ann = Vec::new();
    if let Some(a) = config.author().as_ref().filter(|a| !a.is_empty()) {
        ann.push(NameValue::new("author", a.as_str()));
    }
    if let Some(c) = config.created().as_ref().filter(|c| !c.is_empty()) {
        ann.push(NameValue::new("created", c.as_str()));
    }
    ann.push(NameValue::new(ANN_REGISTRY, reference.domain.as_str()));
    ann.push(NameValue::new(ANN_REPOSITORY, reference.path.as_str()));
    ann.push(NameValue::new(ANN_IMAGE_ID, config_digest.to_string()));
    ann.push(NameValue::new(ANN_MANIFEST_HASH, manifest_digest.to_string()));
    ann.push(NameValue::new(ANN_ENTRYPOINT, json(&entrypoint)));
    ann.push(NameValue::new(ANN_CMD, json(&cmd)));
    ann.push(NameValue::new(ANN_USER, user_field));
    if let Some(sig) = c.stop_signal().as_ref().filter(|s| !s.is_empty()) {
        ann.push(NameValue::new(ANN_STOP_SIGNAL, sig.as_str()));
    }
    m.annotations = ann;
    m.dependencies = layers
        .iter()
        .map(|l| Dependency {
            image_name: format!("{LAYER_NAME_PREFIX}{}", l.key),
            image_id: Some(l.key.clone()),
            labels: Vec::new(),
            size: l.size,
        })
        .collect();
    m
}

/// The ACI of a manifest with an empty rootfs: `manifest` and `rootfs/`,
/// with fixed metadata so the same manifest always gives the same key.
pub fn empty_aci(manifest: &ImageManifest) -> std::io::Result<(String, Vec<u8>)> {
    let json = serde_json::to_vec(manifest).map_err(std::io::Error::other)?;
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o644);
    h.set_size(json.len() as u64);
    h.set_mtime(0);
    b.append_data(&mut h, "manifest", &json[..])?;
    let mut d = tar::Header::new_ustar();
    d.set_entry_type(tar::EntryType::Directory);
    d.set_mode(0o755);
    d.set_size(0);
    d.set_mtime(0);
    b.append_data(&mut d, "rootfs/", std::io::empty())?;
    let bytes = b.into_inner()?;
    Ok((cas_key_of(&bytes), bytes))
}

/// rkt's tree store id: `deps-` + the key of the comma-joined keys of the
/// image and its dependencies (image first, then dependencies in order).
pub fn tree_id(image_key: &str, layer_keys: &[String]) -> String {
    let mut all = vec![image_key.to_string()];
    all.extend(layer_keys.iter().cloned());
    format!("deps-{}", cas_key_of(all.join(",").as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_becomes_app() {
        let config: ImageConfig = super::super::oci::parse_config(
            br#"{"architecture":"amd64","os":"linux","created":"2024-01-01T00:00:00Z",
               "config":{"User":"1000:1000","Env":["PATH=/bin","FOO=a=b"],"Entrypoint":["/bin/sh","-c"],
               "Cmd":["echo hi"],"WorkingDir":"/work","ExposedPorts":{"8080/tcp":{},"9090/udp":{}},
               "Volumes":{"/data":{}},"Labels":{"a":"b"},"StopSignal":"SIGQUIT"}}"#,
        )
        .expect("config");
        let r: Reference = "127.0.0.1:5000/cfg:latest".parse().expect("ref");
        let d = Digest::of(super::super::verify::Algorithm::Sha256, b"m");
        let m = image_manifest(&r, &d, &d, &config, &[LayerRef { key: "sha512-aa".into(), size: 5 }]);
        assert_eq!(m.name, "127.0.0.1_5000/cfg");
        let app = m.app.as_ref().expect("app");
        assert_eq!(app.exec.as_deref(), Some(&["/bin/sh".to_string(), "-c".into(), "echo hi".into()][..]));
        assert_eq!((app.user.as_str(), app.group.as_str()), ("1000", "1000"));
        assert_eq!(app.environment[1], NameValue::new("FOO", "a=b"));
        assert_eq!(app.mount_points[0].name, "volume-data");
        assert_eq!(app.ports.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["8080-tcp", "9090-udp"]);
        assert_eq!(m.annotation(ANN_CMD), Some(r#"["echo hi"]"#));
        assert_eq!(m.annotation(ANN_STOP_SIGNAL), Some("SIGQUIT"));
        assert_eq!(m.label("arch"), Some("amd64"));
        assert_eq!(m.dependencies[0].image_id.as_deref(), Some("sha512-aa"));
        let (k1, _) = empty_aci(&m).expect("aci");
        let (k2, _) = empty_aci(&m).expect("aci");
        assert_eq!(k1, k2);
        assert!(tree_id(&k1, &["sha512-aa".into()]).starts_with("deps-sha512-"));
    }
}
