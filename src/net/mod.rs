//! Pod networking: network namespaces (`netns`), CNI plugins (`cni`), the
//! pod's resolv.conf, hosts and hostname files (`dns`), and rkt's
//! `net-info.json` (`net_info`).
//!
//! A pod's network, in order: `Netns::create` of the pod's name
//! (`pod::netns_name`, about 1 ms, before the boot: nspawn gets
//! `--network-namespace-path`); then, while the pod boots,
//! `Network::load_default(..)?.add(&req).await` and `netns.set_link_up("lo")`;
//! `NetInfo::from_result` for `net-info.json`. Teardown (`pod::free`):
//! `network.del(&req).await` *before* `netns::remove_path`: some plugins
//! (bridge's ipMasq rules) find what to undo through the pod's interface.
//! DEL needs only the pod id, netns path and cache dir: the rest is cached.

pub mod cni;
pub(crate) mod dns;
pub(crate) mod net_info;
pub mod netns;
pub mod pod;

/// Where CNI configs and plugins are.
#[derive(Debug, Clone)]
pub(crate) struct NetDirs {
    pub conf_dir: std::path::PathBuf,
    pub bin_dirs: Vec<std::path::PathBuf>,
}

#[cfg(test)]
mod tests;
