//! The daemon's shared state: configuration, the data dir and host facts.
//! Pod and container state is not kept here: it is read from disk.

use crate::cgroup;
use crate::config::Config;
use crate::image::{RegistryConfig, Store};
use crate::net::cni;
use crate::pod::{DataDir, PodError};
use crate::stage1::host::Host;
use std::sync::RwLock;

/// Everything a CRI handler needs, shared behind an `Arc`.
#[derive(Debug)]
pub struct Runtime {
    pub config: Config,
    pub data: DataDir,
    pub host: Host,
    pub cgroup_driver: cgroup::Driver,
    /// The image store (`$D/cas`) and its registry client.
    pub images: Store,
    /// Pod CIDR kubelet sent with UpdateRuntimeConfig (empty until then).
    pod_cidr: RwLock<String>,
}

/// A readiness condition that does not hold: a CamelCase reason and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReady {
    pub reason: &'static str,
    pub message: String,
}

impl Runtime {
    /// Prepares the data dir layout and reads the host.
    pub fn new(config: Config) -> Result<Self, PodError> {
        let data = DataDir::new(&config.data_dir);
        data.ensure()?;
        let host = Host::detect();
        crate::stage1::host::tune_node();
        let cgroup_driver = cgroup::Driver::detect(host.pid1_is_systemd);
        let image_err =
            |e: String| PodError::Io { context: "opening the image store".into(), source: std::io::Error::other(e) };
        let registries = RegistryConfig::load(&config.registry_config).map_err(image_err)?;
        let images = Store::open(&data, registries).map_err(|e| image_err(e.to_string()))?;
        Ok(Runtime { config, data, host, cgroup_driver, images, pod_cidr: RwLock::new(String::new()) })
    }

    /// RuntimeReady: the data dir is usable and pods can be launched.
    pub fn runtime_ready(&self) -> Result<(), NotReady> {
        self.data.ensure().map_err(|e| NotReady { reason: "DataDirUnavailable", message: e.to_string() })?;
        if self.host.nspawn.is_none() {
            return Err(NotReady {
                reason: "NspawnMissing",
                message: "systemd-nspawn not found (install the systemd-container package)".into(),
            });
        }
        Ok(())
    }

    /// NetworkReady: a CNI network config exists and its plugins are installed.
    pub fn network_ready(&self) -> Result<(), NotReady> {
        let not_ready = |e: cni::CniError| NotReady { reason: "NetworkPluginNotReady", message: e.to_string() };
        let net = cni::default_network(&self.config.cni_conf_dir).map_err(not_ready)?;
        net.check_plugins(&self.config.cni_bin_dirs).map_err(not_ready)
    }

    /// The program run as `<rkt> app sandbox`: `--rkt-path`, or this binary.
    pub fn sandbox_program(&self) -> std::io::Result<std::path::PathBuf> {
        match &self.config.rkt_path {
            Some(p) => Ok(p.clone()),
            None => std::env::current_exe(),
        }
    }

    /// CNI config and plugin directories, for pod network setup and teardown.
    pub fn net_dirs(&self) -> crate::stage1::teardown::NetDirs {
        crate::stage1::teardown::NetDirs {
            conf_dir: self.config.cni_conf_dir.clone(),
            bin_dirs: self.config.cni_bin_dirs.clone(),
        }
    }

    pub fn pod_cidr(&self) -> String {
        self.pod_cidr.read().map(|c| c.clone()).unwrap_or_default()
    }

    pub fn set_pod_cidr(&self, cidr: String) {
        if let Ok(mut c) = self.pod_cidr.write() {
            *c = cidr;
        }
    }
}
