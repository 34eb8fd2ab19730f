//! Pod networking: network namespaces (`netns`), CNI plugins (`cni`), the
//! pod's resolv.conf, hosts and hostname files (`dns`), and rkt's
//! `net-info.json` (`net_info`).

pub mod cni;
pub mod dns;
pub mod net_info;
pub mod netns;

#[cfg(test)]
mod tests;
