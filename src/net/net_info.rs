//! The `net-info.json` entry of a network a pod joined, from the CNI
//! result of its ADD (the format is rkt's: `rkt::net_info`).

use super::cni::{CniResult, Network};
use rkt::net_info::NetInfo;

/// The entry for `network` after an ADD on `if_name` that returned `result`.
pub(crate) fn from_result(network: &Network, if_name: &str, args: &str, result: &CniResult) -> NetInfo {
    let primary = result.pod_ip_config();
    let plugin = network.config.plugins.first().map(|p| p.plugin_type.as_str()).unwrap_or_default();
    NetInfo {
        net_name: network.name().into(),
        net_conf: network.config.path.display().to_string(),
        plugin_path: super::cni::find_plugin(plugin, &network.bin_dirs)
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        if_name: if_name.into(),
        ip: primary.map(|c| c.address),
        args: args.into(),
        mask: primary.map(|c| rkt::net_info::prefix_to_mask(c.address, c.prefix_len)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_a_cni_result() {
        let conf = br#"{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge"},{"type":"portmap"}]}"#;
        let config =
            super::super::cni::NetworkConfig::parse(std::path::Path::new("/etc/cni/net.d/10.conflist"), conf.to_vec())
                .expect("config");
        let net = Network::new(config, vec!["/nowhere".into()]);
        let result = CniResult::parse(serde_json::json!({"cniVersion":"1.0.0",
            "interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],
            "ips":[{"address":"10.88.3.4/16","interface":0}]}))
        .expect("result");
        let info = from_result(&net, "eth0", "K8S_POD_NAME=a", &result);
        assert_eq!(info.net_name, "pods");
        assert_eq!(info.net_conf, "/etc/cni/net.d/10.conflist");
        assert_eq!(info.mask, Some("255.255.0.0".parse().expect("mask")));
    }
}
