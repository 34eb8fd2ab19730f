//! CNI: configuration discovery (the network a pod joins is the first config,
//! by file name, in the conf dir, as kubelet-era runtimes choose it) and the
//! plugin protocol (CNI spec 1.0.0; 0.3.x and 0.4.0 configs work the same way).
//!
//! Plugins run as child processes through `tokio::process`, so [`Network::add`]
//! and [`Network::del`] are async and a slow plugin blocks no runtime thread.

mod exec;
mod result;

#[cfg(test)]
pub(crate) use exec::Protocol;
pub(crate) use exec::{CniRequest, Network, PortMapping};
pub(crate) use result::CniResult;

use serde::Deserialize;
use serde_json::{Map, Value};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the pod network is not ready; the text goes to kubelet's NetworkReady condition.
#[derive(Debug, thiserror::Error)]
pub enum CniError {
    #[error("no network config found in {0}")]
    NoConfig(PathBuf),
    #[error(
        "no network config found in {0}: the directory does not exist (pods on the pod network wait for a config there)"
    )]
    NoConfDir(PathBuf),
    #[error("cannot read network config {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("invalid network config {path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("network {network}: plugin {plugin:?} not found in {dirs}")]
    MissingPlugin { network: String, plugin: String, dirs: String },
    #[error("network {network}: cannot run plugin {}: {source}", path.display())]
    Exec { network: String, path: PathBuf, source: io::Error },
    #[error("network {network}: plugin {plugin:?} {command} failed: {message}")]
    Plugin {
        network: String,
        plugin: String,
        command: &'static str,
        /// The CNI error code, when the plugin printed an error object.
        code: Option<u64>,
        /// msg, details, exit status and stderr, for the reader.
        message: String,
    },
    #[error("network {network}: plugin {plugin:?} {command} timed out after {timeout:?}")]
    Timeout { network: String, plugin: String, command: &'static str, timeout: Duration },
    #[error("network {network}: plugin {plugin:?} {command}: invalid result: {reason}")]
    BadResult { network: String, plugin: String, command: &'static str, reason: String },
    #[error("network {network}: {what}")]
    Unsupported { network: String, what: String },
    #[error("CNI result cache {path}: {source}")]
    Cache { path: PathBuf, source: io::Error },
}

/// One plugin entry of a network config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PluginConf {
    #[serde(rename = "type")]
    pub plugin_type: String,
}

#[derive(Debug, Deserialize)]
struct RawConf {
    name: Option<String>,
    #[serde(rename = "cniVersion")]
    cni_version: Option<String>,
    #[serde(rename = "type")]
    plugin_type: Option<String>,
    plugins: Option<Vec<PluginConf>>,
    #[serde(rename = "disableCheck", default)]
    disable_check: bool,
}

/// A network config file (`.conflist`, or a single-plugin `.conf`/`.json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkConfig {
    pub path: PathBuf,
    pub name: String,
    pub cni_version: String,
    pub plugins: Vec<PluginConf>,
    /// The conflist asks runtimes not to run CHECK.
    pub disable_check: bool,
    /// The file's bytes, as read.
    pub bytes: Vec<u8>,
    /// Each plugin's JSON object, in chain order (a `.conf` is its own single plugin).
    plugin_json: Vec<Map<String, Value>>,
}

impl NetworkConfig {
    pub(crate) fn parse(path: &Path, bytes: Vec<u8>) -> Result<Self, CniError> {
        let invalid = |reason: String| CniError::Invalid { path: path.to_path_buf(), reason };
        let json: Value = serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
        let raw: RawConf = serde_json::from_value(json.clone()).map_err(|e| invalid(e.to_string()))?;
        let name = raw.name.filter(|n| !n.is_empty()).ok_or_else(|| invalid("missing \"name\"".into()))?;
        let (plugins, plugin_json) = match (raw.plugins, raw.plugin_type, json) {
            (Some(p), _, Value::Object(mut top)) if !p.is_empty() => {
                let Some(Value::Array(list)) = top.remove("plugins") else {
                    return Err(invalid("\"plugins\" is not a list".into()));
                };
                let objects = list.into_iter().filter_map(|v| if let Value::Object(m) = v { Some(m) } else { None });
                (p, objects.collect())
            }
            (None, Some(t), Value::Object(top)) if !t.is_empty() => (vec![PluginConf { plugin_type: t }], vec![top]),
            _ => return Err(invalid("no plugins: needs \"plugins\" or \"type\"".into())),
        };
        Ok(NetworkConfig {
            path: path.to_path_buf(),
            name,
            cni_version: raw.cni_version.unwrap_or_else(|| "0.4.0".into()),
            plugins,
            disable_check: raw.disable_check,
            bytes,
            plugin_json,
        })
    }

    /// Every plugin binary this network needs must exist in one of `bin_dirs`.
    pub(crate) fn check_plugins(&self, bin_dirs: &[PathBuf]) -> Result<(), CniError> {
        for plugin in &self.plugins {
            if find_plugin(&plugin.plugin_type, bin_dirs).is_none() {
                return Err(CniError::MissingPlugin {
                    network: self.name.clone(),
                    plugin: plugin.plugin_type.clone(),
                    dirs: join_dirs(bin_dirs),
                });
            }
        }
        Ok(())
    }
}

fn join_dirs(dirs: &[PathBuf]) -> String {
    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(":")
}

/// The plugin binary `name` in the first of `bin_dirs` that has it.
pub(crate) fn find_plugin(name: &str, bin_dirs: &[PathBuf]) -> Option<PathBuf> {
    if name.contains('/') {
        return None;
    }
    bin_dirs.iter().map(|d| d.join(name)).find(|p| crate::base::fsutil::is_executable(p))
}

/// Loads the pod network: the first valid config in `conf_dir` by file name.
pub fn default_network(conf_dir: &Path) -> Result<NetworkConfig, CniError> {
    let entries = match fs::read_dir(conf_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(CniError::NoConfDir(conf_dir.to_path_buf())),
        Err(source) => return Err(CniError::Read { path: conf_dir.to_path_buf(), source }),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("conf" | "conflist" | "json")) && p.is_file())
        .collect();
    files.sort();
    let mut first_error = None;
    for path in files {
        let bytes = fs::read(&path).map_err(|source| CniError::Read { path: path.clone(), source })?;
        match NetworkConfig::parse(&path, bytes) {
            Ok(conf) => return Ok(conf),
            Err(e) => {
                tracing::warn!(error = %e, "skipping CNI config");
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| CniError::NoConfig(conf_dir.to_path_buf())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn picks_first_valid_config_and_checks_plugins() {
        let t = tempfile::tempdir().expect("tempdir");
        let conf = t.path().join("net.d");
        let bin = t.path().join("bin");
        fs::create_dir_all(&conf).expect("conf");
        fs::create_dir_all(&bin).expect("bin");
        assert!(matches!(default_network(&conf.join("missing")), Err(CniError::NoConfDir(_))));
        assert!(matches!(default_network(&conf), Err(CniError::NoConfig(_))));
        fs::write(conf.join("05-broken.conflist"), b"{").expect("write");
        assert!(matches!(default_network(&conf), Err(CniError::Invalid { .. })));
        fs::write(
            conf.join("10-pods.conflist"),
            br#"{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge"},{"type":"portmap"}]}"#,
        )
        .expect("write");
        fs::write(conf.join("20-other.conf"), br#"{"name":"other","type":"macvlan"}"#).expect("write");
        let net = default_network(&conf).expect("network");
        assert_eq!(net.name, "pods");
        assert_eq!(net.cni_version, "1.0.0");
        let types: Vec<_> = net.plugins.iter().map(|p| p.plugin_type.as_str()).collect();
        assert_eq!(types, ["bridge", "portmap"]);
        let err = net.check_plugins(std::slice::from_ref(&bin)).expect_err("missing");
        assert!(err.to_string().contains("plugin \"bridge\" not found"), "{err}");
        for p in ["bridge", "portmap"] {
            fs::write(bin.join(p), b"#!/bin/sh\n").expect("plugin");
            fs::set_permissions(bin.join(p), fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        net.check_plugins(&[t.path().join("nowhere"), bin]).expect("plugins found");
    }

    #[test]
    fn single_plugin_conf() {
        let n = NetworkConfig::parse(Path::new("x.conf"), br#"{"name":"n","type":"bridge"}"#.to_vec()).expect("ok");
        assert_eq!(n.plugins, [PluginConf { plugin_type: "bridge".into() }]);
        assert!(NetworkConfig::parse(Path::new("x.conf"), br#"{"name":"n"}"#.to_vec()).is_err());
        assert!(find_plugin("../sh", &[PathBuf::from("/bin")]).is_none());
    }
}
