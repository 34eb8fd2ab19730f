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
use rkt::digest::{Digest, cas_key_of};
use rkt::reference::Reference;
use rkt::schema::{App, Dependency, ImageManifest, MountPoint, NameValue, Port, sanitize_ac_name};

use rkt::index::LAYER_NAME_PREFIX;
pub(crate) const ANN_REGISTRY: &str = "appc.io/docker/registryurl";
pub(crate) const ANN_REPOSITORY: &str = "appc.io/docker/repository";
pub(crate) const ANN_IMAGE_ID: &str = "appc.io/docker/imageid";
pub(crate) const ANN_MANIFEST_HASH: &str = "appc.io/docker/manifesthash";
pub(crate) const ANN_ENTRYPOINT: &str = "appc.io/docker/entrypoint";
pub(crate) const ANN_CMD: &str = "appc.io/docker/cmd";
pub const ANN_LAYER_DIGEST: &str = "appc.io/docker/layerdigest";
pub(crate) const ANN_MEDIA_TYPE: &str = "appc.io/docker/mediatype";
/// rktlet: the image's user as the config says it (name or uid), for CRI.
pub(crate) const ANN_USER: &str = "appc.io/docker/user";
/// The image config's `StopSignal`, when it has one.
pub(crate) const ANN_STOP_SIGNAL: &str = "appc.io/docker/stopsignal";

/// An appc ACIdentifier from any string: lower-case, other characters `_`,
/// edges trimmed (appc's `SanitizeACIdentifier`).
pub(crate) fn sanitize_ac_identifier(s: &str) -> String {
    let mapped: String = s
        .chars()
        .flat_map(char::to_lowercase)
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || "-._~/".contains(c) { c } else { '_' })
        .collect();
    mapped.trim_matches(|c| "-._~/".contains(c)).to_string()
}

/// appc's names for GOARCH values.
pub(crate) fn appc_arch(arch: &str, variant: Option<&str>) -> String {
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

/// The manifest of one layer's ACI, named `layer/` + the layer's registry
/// digest (`layer/sha256-<hex>`): it is the first entry of the ACI, so it
/// cannot name the ACI's own key.
pub(crate) fn layer_manifest(blob_digest: &Digest, media_type: &str, config: &ImageConfig) -> ImageManifest {
    let mut m = ImageManifest::new(format!("{LAYER_NAME_PREFIX}{}", blob_digest.file_name()));
    m.labels = platform_labels(config);
    m.annotations =
        vec![NameValue::new(ANN_LAYER_DIGEST, blob_digest.to_string()), NameValue::new(ANN_MEDIA_TYPE, media_type)];
    m
}

/// A layer as the image manifest lists it.
pub(crate) struct LayerRef {
    pub key: String,
    /// The name in the layer's manifest.
    pub name: String,
    pub size: u64,
}

/// The image's manifest: app from the config, layers as dependencies.
pub(crate) fn image_manifest(
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
            image_name: l.name.clone(),
            image_id: Some(l.key.clone()),
            labels: Vec::new(),
            size: l.size,
        })
        .collect();
    m
}

/// The bytes of a layer's manifest as its ACI holds them.
pub(crate) fn layer_manifest_json(blob_digest: &Digest, media_type: &str, config: &ImageConfig) -> Vec<u8> {
    serde_json::to_vec(&layer_manifest(blob_digest, media_type, config)).unwrap_or_default()
}

/// Whether index row `name` of `key` is a layer stored by a release before
/// layers were ACIs (named `layer/<its key>`, its blob the layer's tar).
pub(crate) fn is_legacy_layer(name: &str, key: &str) -> bool {
    name.strip_prefix(LAYER_NAME_PREFIX) == Some(key)
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

/// rkt's flattened dependency list of an image (appc's acirenderer): the
/// image first; then, walking that list from the front, every entry's
/// dependencies are inserted right after it, each one directly after the
/// entry (so they end up in reverse manifest order, each followed by its own
/// dependencies). Nothing is deduplicated. `manifest_of` reads a
/// dependency's manifest; rktlet's layer ACIs (`layer/...`) have no
/// dependencies and are not read.
pub(crate) fn dependency_list(
    key: &str,
    manifest: &ImageManifest,
    mut manifest_of: impl FnMut(&str) -> Option<ImageManifest>,
) -> Result<Vec<String>, String> {
    /// rkt has no limit (a cycle never ends); rktlet stops here.
    const MAX_ENTRIES: usize = 1024;
    let mut list: Vec<(String, Option<ImageManifest>)> = vec![(key.to_string(), Some(manifest.clone()))];
    let mut at = 0;
    while at < list.len() {
        let deps = list[at].1.take().map(|m| m.dependencies).unwrap_or_default();
        let mut inserted = Vec::with_capacity(deps.len());
        for d in deps.iter().rev() {
            let id = d.image_id.clone().ok_or_else(|| format!("dependency {} was never resolved", d.image_name))?;
            let m = if d.image_name.starts_with(LAYER_NAME_PREFIX) { None } else { manifest_of(&id) };
            inserted.push((id, m));
        }
        list.splice(at + 1..at + 1, inserted);
        if list.len() > MAX_ENTRIES {
            return Err(format!("{}: more than {MAX_ENTRIES} dependencies (a cycle?)", manifest.name));
        }
        at += 1;
    }
    Ok(list.into_iter().map(|(k, _)| k).collect())
}

/// rkt's tree store id of a flattened dependency list
/// ([`dependency_list`]): `deps-` + the key (`sha512-` + 64 hex) of the
/// SHA-512 of the keys joined with `,`.
pub fn tree_id(dependency_list: &[String]) -> String {
    format!("deps-{}", cas_key_of(dependency_list.join(",").as_bytes()))
}

/// The tree id of an image whose dependencies are all layers (or none):
/// the image, then its layers top first.
pub(crate) fn layered_tree_id(image_key: &str, layer_keys_bottom_first: &[String]) -> String {
    let mut all = vec![image_key.to_string()];
    all.extend(layer_keys_bottom_first.iter().rev().cloned());
    tree_id(&all)
}

/// The tree id releases before rkt's order used (dependencies in manifest
/// order): trees rendered under it stay in use by the pods that name them.
pub(crate) fn legacy_tree_id(image_key: &str, dependency_keys: &[String]) -> String {
    let mut all = vec![image_key.to_string()];
    all.extend(dependency_keys.iter().cloned());
    tree_id(&all)
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
        let d = Digest::of(rkt::digest::Algorithm::Sha256, b"m");
        let m = image_manifest(
            &r,
            &d,
            &d,
            &config,
            &[LayerRef { key: "sha512-aa".into(), name: "layer/sha256-aa".into(), size: 5 }],
        );
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
        assert!(layered_tree_id(&k1, &["sha512-aa".into()]).starts_with("deps-sha512-"));
    }

    /// `sha512-` and 64 times `c`: a store key easy to write by hand.
    fn key(c: char) -> String {
        format!("sha512-{}", c.to_string().repeat(64))
    }

    fn dep(name: &str, id: &str) -> Dependency {
        Dependency { image_name: name.into(), image_id: Some(id.into()), labels: Vec::new(), size: 0 }
    }

    #[test]
    fn tree_ids_follow_rkts_dependency_order() {
        // A docker image A with layers L1, L2, L3 (bottom first, as its
        // manifest lists them). appc's flattening starts from [A] and inserts
        // each dependency of A directly after A, in manifest order: after L1
        // the list is [A, L1], after L2 [A, L2, L1], after L3 [A, L3, L2, L1].
        // The id is `deps-` + `sha512-` + the first 64 hex digits of the
        // SHA-512 of "A,L3,L2,L1" (the four 71-character keys joined by
        // commas), computed outside this code with
        // `printf %s "$A,$L3,$L2,$L1" | sha512sum | cut -c1-64`; appc's own
        // createDepList, run on the same keys, gives the same id.
        let (a, l1, l2, l3) = (key('a'), key('1'), key('2'), key('3'));
        let mut m = ImageManifest::new("example.com/a");
        m.dependencies = [&l1, &l2, &l3].iter().map(|k| dep(&format!("{LAYER_NAME_PREFIX}{k}"), k)).collect();
        let list = dependency_list(&a, &m, |_| panic!("a layer's manifest is never read")).expect("list");
        assert_eq!(list, [a.clone(), l3.clone(), l2.clone(), l1.clone()]);
        let want = "deps-sha512-3741dac2f28234961566af08b2fb0f540c8adf0cf8491cfb8faeca9e970d8f31";
        assert_eq!(tree_id(&list), want);
        assert_eq!(layered_tree_id(&a, &[l1.clone(), l2.clone(), l3.clone()]), want);
        // the order releases before this one used: "A,L1,L2,L3"
        assert_eq!(
            legacy_tree_id(&a, &[l1.clone(), l2, l3]),
            "deps-sha512-879a65fbc5a8496d9299630fda9364b200eac44f912524d3c18384d79c8384c5"
        );
        // one layer: "A,L1" either way, so single-layer trees keep their ids
        let one = "deps-sha512-e79ac4ff995ca4ef492fac9c39dc697e9b5be58c1ecbb3f763f918b6148e5891";
        assert_eq!(layered_tree_id(&a, std::slice::from_ref(&l1)), one);
        assert_eq!(legacy_tree_id(&a, &[l1]), one);
    }

    #[test]
    fn nested_dependencies_flatten_depth_first_in_reverse() {
        // A depends on B then C; C on D; B on E. From [A]: A's dependencies
        // go right after A, each directly after it: [A, C, B]. The walk moves
        // on to C and puts D after it: [A, C, D, B]; D has none; B puts E
        // after itself: [A, C, D, B, E] (appc's own example, A -> B, C and
        // C -> D, gives [A, C, D, B]). The id hashes "A,C,D,B,E":
        // `printf %s "$A,$C,$D,$B,$E" | sha512sum | cut -c1-64` (appc's
        // createDepList gives the same).
        let (a, b, c, d, e) = (key('a'), key('b'), key('c'), key('d'), key('e'));
        let with = |name: &str, deps: Vec<Dependency>| {
            let mut m = ImageManifest::new(name);
            m.dependencies = deps;
            m
        };
        let ma = with("example.com/a", vec![dep("example.com/b", &b), dep("example.com/c", &c)]);
        let manifests: std::collections::HashMap<String, ImageManifest> = [
            (b.clone(), with("example.com/b", vec![dep("example.com/e", &e)])),
            (c.clone(), with("example.com/c", vec![dep("example.com/d", &d)])),
            (d.clone(), with("example.com/d", vec![])),
            (e.clone(), with("example.com/e", vec![])),
        ]
        .into();
        let list = dependency_list(&a, &ma, |k| manifests.get(k).cloned()).expect("list");
        assert_eq!(list, [a, c, d, b, e]);
        assert_eq!(tree_id(&list), "deps-sha512-75dc887587f73468ad35c996bd81d6a9c0fcec17a7770c85e6bcd3a8323c4ed9");
    }

    #[test]
    fn a_dependency_cycle_is_an_error() {
        let a = key('a');
        let mut m = ImageManifest::new("example.com/a");
        m.dependencies = vec![dep("example.com/a", &a)];
        let looped = m.clone();
        assert!(dependency_list(&a, &m, |_| Some(looped.clone())).is_err());
    }
}
