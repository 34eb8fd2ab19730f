//! appc schema types rkt writes and reads: the Pod Manifest (`$P/pod`) and the
//! Image Manifest (`appsinfo/<app>/manifest`, `cas/imageManifest/...`).
//!
//! Field names and which fields are omitted when empty follow appc's JSON
//! tags, so a manifest written by rkt round-trips through these types.

use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// `acVersion` rktlet writes into pod manifests (rkt writes its own version).
pub(crate) const POD_AC_VERSION: &str = "1.30.0";
/// `acVersion` of image manifests rktlet generates (appc spec version).
pub(crate) const IMAGE_AC_VERSION: &str = "0.8.11";

/// Pod annotation marking a pod whose app list may change (`app add`/`rm`).
pub const ANNOTATION_MUTABLE: &str = "coreos.com/rkt/stage1/mutable";
/// Pod annotation: `node` when the pod uses the node's network namespace.
pub const ANNOTATION_NETWORK_MODE: &str = "rktlet.io/network-mode";
/// The pod's PID namespace mode (`node` for a host-PID pod; absent: its own).
pub const ANNOTATION_PID_MODE: &str = "rktlet.io/pid-mode";
/// The pod's user namespace, `HOST:LENGTH` (stage1::userns); absent: the node's.
pub const ANNOTATION_USERNS: &str = "rktlet.io/userns";
/// Pod annotation: the hostname RunPodSandbox picked.
pub const ANNOTATION_HOSTNAME: &str = "rktlet.io/hostname";
/// Pod annotation: the CRI pod's log directory (rkt's experimental key).
pub const ANNOTATION_LOG_DIR: &str = "coreos.com/rkt/experiment/kubernetes-log-dir";
/// User annotation holding the Kubernetes pod's uid: only pods made through
/// CRI have it.
pub const USER_ANNOTATION_POD_UID: &str = "k8s.io/reserved/pod-uid";
/// User annotation holding the Kubernetes pod's name.
pub const USER_ANNOTATION_POD_NAME: &str = "k8s.io/reserved/pod-name";
/// The CRI pod's namespace.
pub const USER_ANNOTATION_POD_NAMESPACE: &str = "k8s.io/reserved/pod-namespace";

/// A `{name, value}` pair: appc labels, annotations and environment entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameValue {
    /// `name`.
    pub name: String,
    /// `value`.
    pub value: String,
}

impl NameValue {
    /// The pair `name`, `value`.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self { name: name.into(), value: value.into() }
    }
}

/// Looks a name up in a `{name, value}` list.
pub(crate) fn lookup<'a>(list: &'a [NameValue], name: &str) -> Option<&'a str> {
    list.iter().find(|nv| nv.name == name).map(|nv| nv.value.as_str())
}

/// Sets `name` to `value` in a `{name, value}` list, replacing an existing entry.
pub fn set(list: &mut Vec<NameValue>, name: &str, value: impl Into<String>) {
    let value = value.into();
    match list.iter_mut().find(|nv| nv.name == name) {
        Some(nv) => nv.value = value,
        None => list.push(NameValue::new(name, value)),
    }
}

fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// The pod manifest (`acKind: PodManifest`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodManifest {
    /// `acVersion`: the version of the writer (`POD_AC_VERSION` for rktlet).
    pub ac_version: String,
    /// `acKind`: `PodManifest`.
    pub ac_kind: String,
    /// `apps`: the pod's apps (`null` reads as none).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub apps: Vec<RuntimeApp>,
    /// `volumes`: the pod's volumes.
    #[serde(default)]
    pub volumes: Option<Vec<Volume>>,
    /// `isolators`: the pod's isolators.
    #[serde(default)]
    pub isolators: Option<Vec<Isolator>>,
    /// `annotations`: the pod's annotations (the `ANNOTATION_*` names).
    #[serde(default)]
    pub annotations: Option<Vec<NameValue>>,
    /// `ports`: the pod's ports exposed on the host.
    #[serde(default)]
    pub ports: Option<Vec<ExposedPort>>,
    /// `userAnnotations`: the user's annotations (the CRI pod's, and the
    /// `USER_ANNOTATION_*` names).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user_annotations: BTreeMap<String, String>,
    /// `userLabels`: the user's labels (the CRI pod's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user_labels: BTreeMap<String, String>,
}

impl Default for PodManifest {
    fn default() -> Self {
        Self {
            ac_version: POD_AC_VERSION.to_string(),
            ac_kind: "PodManifest".to_string(),
            apps: Vec::new(),
            volumes: None,
            isolators: None,
            annotations: None,
            ports: None,
            user_annotations: BTreeMap::new(),
            user_labels: BTreeMap::new(),
        }
    }
}

impl PodManifest {
    /// A manifest whose app list may change at run time, as `rkt app sandbox` writes.
    pub fn mutable() -> Self {
        let mut m = Self::default();
        m.set_annotation(ANNOTATION_MUTABLE, "true");
        m
    }

    /// The value of pod annotation `name`.
    pub fn annotation(&self, name: &str) -> Option<&str> {
        self.annotations.as_deref().and_then(|a| lookup(a, name))
    }

    /// Sets pod annotation `name` to `value`, replacing its value.
    pub fn set_annotation(&mut self, name: &str, value: impl Into<String>) {
        set(self.annotations.get_or_insert_with(Vec::new), name, value);
    }

    /// Whether the pod's app list may change ([`ANNOTATION_MUTABLE`] is `true`).
    pub fn is_mutable(&self) -> bool {
        self.annotation(ANNOTATION_MUTABLE) == Some("true")
    }

    /// Whether the pod was made through CRI (CLI-made pods are not listed to kubelet).
    pub fn is_kubernetes_pod(&self) -> bool {
        self.user_annotations.contains_key(USER_ANNOTATION_POD_UID)
    }

    /// The app named `name`.
    pub fn app(&self, name: &str) -> Option<&RuntimeApp> {
        self.apps.iter().find(|a| a.name == name)
    }
}

/// One app of a pod.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeApp {
    /// `name`: the app's name in the pod (an ACName).
    pub name: String,
    /// `image`: the image it runs.
    pub image: RuntimeImage,
    /// `app`: what to run and how, in place of the image's `app`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<App>,
    /// `readOnlyRootFS`: the app's root filesystem is read-only.
    #[serde(default, rename = "readOnlyRootFS", skip_serializing_if = "std::ops::Not::not")]
    pub read_only_root_fs: bool,
    /// `mounts`: the volumes mounted into the app.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub mounts: Vec<Mount>,
    /// `annotations`: the app's annotations.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub annotations: Vec<NameValue>,
}

/// The image an app runs, by id (`sha512-...`), with its name and labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeImage {
    /// `name`: the image's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `id`: the image's id, its CAS key (`sha512-...`).
    pub id: String,
    /// `labels`: the image's labels (`version`, `os`, `arch`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub labels: Vec<NameValue>,
}

/// A mount of a pod volume (or an inline app volume) into an app.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    /// `volume`: the name of the volume mounted.
    pub volume: String,
    /// `path`: where it is mounted in the app.
    pub path: String,
    /// `appVolume`: the volume itself when it is the app's own, not a pod volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_volume: Option<Volume>,
}

/// A pod volume: `host` (bind of `source`) or `empty` (pod-private dir).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    /// `name`: the volume's name (an ACName).
    pub name: String,
    /// `kind`: `host` or `empty`.
    pub kind: String,
    /// `source`: the host path of a `host` volume.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// `readOnly`: the volume is mounted read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// `recursive`: a `host` volume's bind mount takes the mounts below
    /// `source` with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive: Option<bool>,
    /// `mode`: an `empty` volume's directory mode, in octal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `uid`: the owner of an `empty` volume's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<i64>,
    /// `gid`: the group of an `empty` volume's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<i64>,
    /// rktlet's: how mounts below the volume propagate (`private`, `slave`
    /// or `shared`, as rktlet's `stage1::inject::Propagation` names them);
    /// none is private.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagation: Option<String>,
    /// rktlet's: SELinux relabelling was asked for (rktlet does not relabel:
    /// it is recorded to be reported as asked, as containerd does on a node
    /// without SELinux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selinux_relabel: Option<bool>,
    /// rktlet's: the volume was asked to be read-only recursively (CRI's
    /// `recursive_read_only`). A read-only volume is, either way: its whole
    /// tree is made read-only when it is mounted (`stage1::inject::clone_tree`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive_read_only: Option<bool>,
}

/// A named isolator; its value's shape depends on the name (kept as raw JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Isolator {
    /// `name`, e.g. `resource/memory`.
    pub name: String,
    /// `value`, as raw JSON.
    pub value: serde_json::Value,
}

/// A port exposed on the host for a pod port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExposedPort {
    /// `name`: the name of the port exposed.
    pub name: String,
    /// `hostPort`: the port on the host.
    pub host_port: u32,
    /// `hostIP`: the host address it is bound to; none is every address.
    #[serde(default, rename = "hostIP", skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
    /// `podPort`: the port in the pod; absent, the app port of the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_port: Option<Port>,
}

/// A port an app listens on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Port {
    /// `name`: the port's name (an ACName).
    pub name: String,
    /// `protocol`: `tcp` or `udp`.
    pub protocol: String,
    /// `port`: the port number.
    pub port: u32,
    /// `count`: how many consecutive ports, from `port`.
    #[serde(default)]
    pub count: u32,
    /// `socketActivated`: the app is started by a connection to it.
    #[serde(default)]
    pub socket_activated: bool,
}

/// Where an app expects a volume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MountPoint {
    /// `name`: the name of the volume expected.
    pub name: String,
    /// `path`: where the app expects it.
    pub path: String,
    /// `readOnly`: the app expects it read-only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

/// A `pre-start` or `post-stop` hook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventHandler {
    /// `name`: `pre-start` or `post-stop`.
    pub name: String,
    /// `exec`: the command and its arguments.
    pub exec: Vec<String>,
}

/// What to run and how (appc `types.App`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct App {
    /// `exec`: the command and its arguments.
    #[serde(default)]
    pub exec: Option<Vec<String>>,
    /// `eventHandlers`: the `pre-start` and `post-stop` hooks.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub event_handlers: Vec<EventHandler>,
    /// `user`: the user to run as, a name or a uid.
    pub user: String,
    /// `group`: the group to run as, a name or a gid.
    pub group: String,
    /// `supplementaryGIDs`: the process's supplementary groups.
    #[serde(
        default,
        rename = "supplementaryGIDs",
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_empty"
    )]
    pub supplementary_gids: Vec<u32>,
    /// `workingDirectory`: the directory the app starts in.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub working_directory: String,
    /// `environment`: the variables set for the app.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub environment: Vec<NameValue>,
    /// `mountPoints`: the volumes the app expects.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub mount_points: Vec<MountPoint>,
    /// `ports`: the ports the app listens on.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub ports: Vec<Port>,
    /// `isolators`: the app's isolators (resource limits, capabilities, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub isolators: Vec<Isolator>,
    /// `userAnnotations`: the user's annotations (the CRI container's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user_annotations: BTreeMap<String, String>,
    /// `userLabels`: the user's labels (the CRI container's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user_labels: BTreeMap<String, String>,
}

/// An image this image is layered on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Dependency {
    /// `imageName`: the name of the image depended on.
    pub image_name: String,
    /// `imageID`: its id (`sha512-...`), when it is fixed.
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// `labels`: the labels that select it.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub labels: Vec<NameValue>,
    /// `size`: its size in bytes; 0 (unknown) is omitted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub size: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The image manifest (`acKind: ImageManifest`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageManifest {
    /// `acKind`: `ImageManifest`.
    pub ac_kind: String,
    /// `acVersion`: the appc spec version (`IMAGE_AC_VERSION` for rktlet's).
    pub ac_version: String,
    /// `name`: the image's name.
    pub name: String,
    /// `labels`: the image's labels (`version`, `os`, `arch`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub labels: Vec<NameValue>,
    /// `app`: the app the image runs by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<App>,
    /// `annotations`: the image's annotations.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub annotations: Vec<NameValue>,
    /// `dependencies`: the images whose files are laid down first, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub dependencies: Vec<Dependency>,
    /// `pathWhitelist`: the only paths the rendered tree keeps; empty keeps all.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub path_whitelist: Vec<String>,
}

impl ImageManifest {
    /// A manifest of image `name` with nothing else set.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            ac_kind: "ImageManifest".to_string(),
            ac_version: IMAGE_AC_VERSION.to_string(),
            name: name.into(),
            labels: Vec::new(),
            app: None,
            annotations: Vec::new(),
            dependencies: Vec::new(),
            path_whitelist: Vec::new(),
        }
    }

    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        lookup(&self.labels, name)
    }

    /// The value of annotation `name`.
    pub fn annotation(&self, name: &str) -> Option<&str> {
        lookup(&self.annotations, name)
    }
}

/// Whether `name` is an appc AC identifier: `[a-z0-9]+([-._~/][a-z0-9]+)*`.
pub fn is_ac_identifier(name: &str) -> bool {
    let mut prev_sep = true;
    for b in name.bytes() {
        match b {
            b'a'..=b'z' | b'0'..=b'9' => prev_sep = false,
            b'-' | b'.' | b'_' | b'~' | b'/' if !prev_sep => prev_sep = true,
            _ => return false,
        }
    }
    !name.is_empty() && !prev_sep
}

/// Checks an appc ACName (app, volume and port names): `^[a-z0-9]+(-[a-z0-9]+)*$`.
pub fn is_ac_name(s: &str) -> bool {
    !s.is_empty()
        && s.split('-')
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
}

/// Turns any string into an ACName the way rkt does: lower-case, other
/// characters become `-`, leading and trailing `-` trimmed. Runs of `-` are
/// collapsed so the result always validates.
pub fn sanitize_ac_name(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars().flat_map(char::to_lowercase) {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() { c } else { '-' };
        if !(c == '-' && (out.is_empty() || out.ends_with('-'))) {
            out.push(c);
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ac_identifiers() {
        for ok in ["example.com/app", "a", "coreos.com/etcd", "127.0.0.1/x-y_z~w"] {
            assert!(is_ac_identifier(ok), "{ok}");
        }
        for bad in ["", "Example.com", "a//b", "a/", "/a", "a:1", "a b", "-a"] {
            assert!(!is_ac_identifier(bad), "{bad}");
        }
    }

    // Shaped like what rkt + rktlet wrote for a sandbox with one app (reference/rkt.md §2.4).
    const RKT_POD: &str = r#"{
      "acVersion": "1.30.0",
      "acKind": "PodManifest",
      "apps": [{
        "name": "0-nginx",
        "image": {"name": "registry-1.docker.io/library/nginx",
                  "id": "sha512-6b0a41c1d67c7e2e1a8f7b1e2c1d9e5d0b8e0e5c2c6b4d0f1a2b3c4d5e6f7a8b",
                  "labels": [{"name": "os", "value": "linux"}, {"name": "arch", "value": "amd64"}]},
        "app": {
          "exec": ["nginx", "-g", "daemon off;"], "user": "0", "group": "0",
          "environment": [{"name": "PATH", "value": "/usr/bin:/bin"}],
          "isolators": [{"name": "resource/memory", "value": {"default": false, "request": "134217728", "limit": "134217728"}},
                        {"name": "os/linux/cpu-shares", "value": 256}],
          "ports": [{"name": "80-tcp", "protocol": "tcp", "port": 80, "count": 0, "socketActivated": false}],
          "userAnnotations": {"k8s.io/reserved/image-name": "nginx:1.13"},
          "userLabels": {"io.kubernetes.container.name": "nginx"}
        },
        "mounts": [{"volume": "v1", "path": "/data",
                    "appVolume": {"name": "v1", "kind": "host", "source": "/srv", "readOnly": true}}],
        "annotations": [{"name": "coreos.com/rkt/stage2/stdin", "value": "stream"}]
      }],
      "volumes": null,
      "isolators": null,
      "annotations": [{"name": "coreos.com/rkt/stage1/mutable", "value": "true"}],
      "ports": [{"name": "tcp-80-8080", "hostPort": 8080, "hostIP": "0.0.0.0",
                 "podPort": {"name": "tcp-80-8080", "protocol": "tcp", "port": 80, "count": 1, "socketActivated": false}}],
      "userAnnotations": {"k8s.io/reserved/pod-uid": "abc"},
      "userLabels": {"app": "web"}
    }"#;

    #[test]
    fn rkt_pod_manifest_round_trips() {
        let parsed: PodManifest = serde_json::from_str(RKT_POD).expect("parse");
        assert!(parsed.is_mutable());
        assert_eq!(parsed.apps[0].app.as_ref().map(|a| a.isolators.len()), Some(2));
        let back = serde_json::to_value(&parsed).expect("serialize");
        let orig: serde_json::Value = serde_json::from_str(RKT_POD).expect("parse value");
        assert_eq!(back, orig);
    }

    #[test]
    fn image_manifest_round_trips_and_omits_empty() {
        let src = r#"{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/app",
            "labels":[{"name":"version","value":"1"},{"name":"os","value":"linux"}],
            "app":{"exec":["/bin/sh"],"user":"0","group":"0","workingDirectory":"/srv",
                   "supplementaryGIDs":[10,20],"eventHandlers":[{"name":"pre-start","exec":["/bin/true"]}],
                   "mountPoints":[{"name":"data","path":"/data","readOnly":true}]},
            "annotations":[{"name":"appc.io/docker/repository","value":"library/app"}],
            "dependencies":[{"imageName":"example.com/base","imageID":"sha512-00","size":10}],
            "pathWhitelist":["/bin/sh"]}"#;
        let m: ImageManifest = serde_json::from_str(src).expect("parse");
        assert_eq!(m.label("os"), Some("linux"));
        assert_eq!(m.annotation("appc.io/docker/repository"), Some("library/app"));
        let orig: serde_json::Value = serde_json::from_str(src).expect("value");
        assert_eq!(serde_json::to_value(&m).expect("ser"), orig);
        let bare = serde_json::to_value(ImageManifest::new("x")).expect("ser");
        assert_eq!(bare, serde_json::json!({"acKind":"ImageManifest","acVersion":"0.8.11","name":"x"}));
    }

    #[test]
    fn mutable_annotation_and_app_lookup() {
        let mut m = PodManifest::mutable();
        assert!(m.is_mutable());
        m.set_annotation(ANNOTATION_MUTABLE, "false");
        assert!(!m.is_mutable());
        assert_eq!(m.annotations.as_ref().map(Vec::len), Some(1));
        assert!(m.app("nope").is_none());
    }

    #[test]
    fn ac_names() {
        assert!(is_ac_name("0-nginx"));
        assert!(!is_ac_name("Nginx"));
        assert!(!is_ac_name("a--b"));
        assert!(!is_ac_name("-a"));
        assert_eq!(sanitize_ac_name("FooBar_baz"), "foobar-baz");
        assert_eq!(sanitize_ac_name("--a..b--"), "a-b");
        assert!(is_ac_name(&sanitize_ac_name("Some Container/Name")));
    }
}
