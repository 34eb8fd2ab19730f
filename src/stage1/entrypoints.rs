//! rkt's stage1 interface for rktlet's pods: `$P/stage1/manifest`, an appc
//! image manifest whose `coreos.com/rkt/stage1/...` annotations name the
//! programs rkt's stage0 runs for `rkt stop` and for the stage1 step of
//! `rkt gc`/`rkt rm`, and those programs: small scripts in the stage1 rootfs
//! that exec the rktlet binary's hidden `stage1-entrypoint` command.
//!
//! How stage0 runs them (rkt 1.30): cwd `$P`, the caller's environment,
//! `stop [--force] UUID` and `gc [--debug] [--local-config DIR] UUID`
//! (`--local-config` from interface version 5 on). The scripts carry the
//! binary that made the pod and its data dir; the CNI directories come from
//! what the daemon recorded in the data dir ([`record_net`]), so that a gc
//! releases the pod's address the way the daemon's teardown does.
//!
//! Runs in: the sandbox process (writing), the entry points (reading).

use crate::net::NetDirs;
use rkt::pod::DataDir;
use rkt::schema::{ImageManifest, NameValue};
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// `$P/stage1/manifest`, relative to the pod directory.
pub(crate) const MANIFEST: &str = "stage1/manifest";
/// rkt's record of the stage1 image's tree (`$P/stage1TreeStoreID`).
pub(crate) const TREE_STORE_ID_FILE: &str = "stage1TreeStoreID";
/// What rktlet writes there: the name of no tree in the store, since
/// rktlet's stage1 is built into each pod, not rendered from an image. rkt
/// reads the file for every pod in `rkt image gc` and skips (keeping none of
/// its app trees referenced) a pod without it; it needs the tree itself only
/// with an overlay stage1 (`overlay-prepared`), which rktlet's pods never have.
pub(crate) const TREE_STORE_ID: &str = "rktlet-builtin-stage1";
/// The appc name of rktlet's stage1.
pub(crate) const NAME: &str = "rktlet.io/stage1/host";
/// The interface version declared: 5, the last one that changed the
/// arguments of an entry point rktlet provides (gc's `--local-config`);
/// 6 only added `--ipc` to `run`, which rktlet's pods have no use for.
pub(crate) const INTERFACE_VERSION: u32 = 5;

const ANNOTATION_PREFIX: &str = "coreos.com/rkt/stage1/";
const INTERFACE_VERSION_ANNOTATION: &str = "coreos.com/rkt/stage1/interface-version";

/// The entry points rktlet provides: (annotation suffix, path in the stage1 rootfs).
pub(crate) const ENTRY_POINTS: [(&str, &str); 2] = [("stop", "/stop"), ("gc", "/gc")];

/// The hidden CLI command the entry points exec.
pub(crate) const COMMAND: &str = "stage1-entrypoint";

/// File in the data dir where the daemon records its CNI directories.
pub(crate) const NET_RECORD: &str = "rktlet-net.json";

/// appc's name for the machine's architecture (its `arch` label values).
fn appc_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "x86" => "i386",
        "arm" => "armv7l",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        other => other,
    }
}

/// The stage1 image manifest of rktlet's pods.
pub(crate) fn manifest() -> ImageManifest {
    let mut m = ImageManifest::new(NAME);
    m.labels = vec![
        NameValue::new("version", env!("CARGO_PKG_VERSION")),
        NameValue::new("os", "linux"),
        NameValue::new("arch", appc_arch()),
    ];
    m.annotations = ENTRY_POINTS
        .iter()
        .map(|(name, path)| NameValue::new(format!("{ANNOTATION_PREFIX}{name}"), *path))
        .chain(std::iter::once(NameValue::new(INTERFACE_VERSION_ANNOTATION, INTERFACE_VERSION.to_string())))
        .collect();
    m
}

/// `s` quoted for sh (single quotes; a quote inside closes, escapes, reopens).
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The script behind entry point `name`.
fn script(name: &str, binary: &Path, data: &Path) -> String {
    format!(
        "#!/bin/sh\n# rkt's stage1 `{name}` entry point of a pod rktlet made: run by rkt's stage0 with the\n\
         # pod directory as working directory; hands over to the rktlet that made the pod\n\
         exec {} {COMMAND} {name} --dir {} \"$@\"\n",
        sh_quote(&binary.to_string_lossy()),
        sh_quote(&data.to_string_lossy())
    )
}

/// Writes the stage1 manifest, the entry point scripts (into the stage1
/// rootfs, which must exist) and `stage1TreeStoreID` into pod directory
/// `pod_dir`. `binary` is the rktlet the scripts exec, `data` the data dir
/// (both made absolute here: the scripts run from the pod directory).
pub(crate) fn install(pod_dir: &Path, binary: &Path, data: &Path) -> io::Result<()> {
    let binary = fs::canonicalize(binary)?;
    let data = fs::canonicalize(data)?;
    let rootfs = pod_dir.join("stage1/rootfs");
    for (name, path) in ENTRY_POINTS {
        let file = rootfs.join(path.trim_start_matches('/'));
        rkt::fs::write_volatile(&file, script(name, &binary, &data).as_bytes(), 0o755)?;
        fs::set_permissions(&file, fs::Permissions::from_mode(0o755))?;
    }
    let json = serde_json::to_vec_pretty(&manifest()).map_err(io::Error::other)?;
    rkt::fs::write_volatile(&pod_dir.join(MANIFEST), &json, 0o644)?;
    rkt::fs::write_volatile(&pod_dir.join(TREE_STORE_ID_FILE), TREE_STORE_ID.as_bytes(), 0o640)
}

/// Gives a pod made before rktlet wrote stage1 manifests (one with a stage1
/// rootfs but no `stage1/manifest`) the manifest and entry points of this
/// binary. Returns whether it did; a pod that has a manifest is left as is.
pub(crate) fn install_missing(pod_dir: &Path, data: &Path) -> io::Result<bool> {
    if pod_dir.join(MANIFEST).exists() || !pod_dir.join("stage1/rootfs").is_dir() {
        return Ok(false);
    }
    install(pod_dir, &std::env::current_exe()?, data).map(|()| true)
}

/// What the daemon records for the entry points.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct NetRecord {
    cni_conf_dir: PathBuf,
    cni_bin_dirs: Vec<PathBuf>,
}

/// Records the daemon's CNI directories in the data dir (at its start).
pub(crate) fn record_net(data: &DataDir, net: &NetDirs) -> io::Result<()> {
    let record = NetRecord { cni_conf_dir: net.conf_dir.clone(), cni_bin_dirs: net.bin_dirs.clone() };
    let json = serde_json::to_vec_pretty(&record).map_err(io::Error::other)?;
    rkt::fs::write_atomic(&data.root().join(NET_RECORD), &json, 0o644)
}

/// The CNI directories the daemon recorded, or the defaults when no daemon
/// ever ran on `data` (pods of `rktlet app sandbox` alone).
pub(crate) fn recorded_net(data: &DataDir) -> NetDirs {
    let path = data.root().join(NET_RECORD);
    match fs::read(&path).map(|b| serde_json::from_slice::<NetRecord>(&b)) {
        Ok(Ok(r)) => NetDirs { conf_dir: r.cni_conf_dir, bin_dirs: r.cni_bin_dirs },
        other => {
            if let Ok(Err(e)) = other {
                tracing::warn!(path = %path.display(), error = %e, "unreadable CNI record; using the default directories");
            }
            NetDirs {
                conf_dir: crate::config::DEFAULT_CNI_CONF_DIR.into(),
                bin_dirs: crate::config::DEFAULT_CNI_BIN_DIRS.iter().map(PathBuf::from).collect(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_names_the_entry_points_and_the_version() {
        let m = manifest();
        assert_eq!(m.ac_kind, "ImageManifest");
        let get = |n: &str| m.annotations.iter().find(|a| a.name == n).map(|a| a.value.clone());
        assert_eq!(get("coreos.com/rkt/stage1/stop").as_deref(), Some("/stop"));
        assert_eq!(get("coreos.com/rkt/stage1/gc").as_deref(), Some("/gc"));
        assert_eq!(get("coreos.com/rkt/stage1/interface-version").as_deref(), Some("5"));
        // no app entry points: rkt would take the pod's stage1 for one that supports mutable pods
        assert!(get("coreos.com/rkt/stage1/app/rm").is_none());
    }

    #[test]
    fn install_writes_scripts_that_quote_their_paths() {
        let t = tempfile::tempdir().expect("tempdir");
        let data = t.path().join("it's data");
        let pod = data.join("pods/run/p");
        fs::create_dir_all(pod.join("stage1/rootfs")).expect("rootfs");
        let bin = t.path().join("rktlet");
        fs::write(&bin, b"").expect("bin");
        install(&pod, &bin, &data).expect("install");
        let gc = fs::read_to_string(pod.join("stage1/rootfs/gc")).expect("gc");
        assert!(gc.contains(&format!("{COMMAND} gc --dir '{}/it'\\''s data' \"$@\"", t.path().display())), "{gc}");
        let mode = fs::metadata(pod.join("stage1/rootfs/stop")).expect("stop").permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(fs::read_to_string(pod.join(TREE_STORE_ID_FILE)).expect("id"), TREE_STORE_ID);
        let back: ImageManifest =
            serde_json::from_slice(&fs::read(pod.join(MANIFEST)).expect("manifest")).expect("parse");
        assert_eq!(back, manifest());
    }

    #[test]
    fn net_record_round_trips_and_defaults() {
        let t = tempfile::tempdir().expect("tempdir");
        let data = DataDir::new(t.path());
        assert_eq!(recorded_net(&data).conf_dir, PathBuf::from(crate::config::DEFAULT_CNI_CONF_DIR));
        let net = NetDirs { conf_dir: "/x/net.d".into(), bin_dirs: vec!["/x/bin".into()] };
        record_net(&data, &net).expect("record");
        let back = recorded_net(&data);
        assert_eq!((back.conf_dir, back.bin_dirs), (net.conf_dir, net.bin_dirs));
    }
}
