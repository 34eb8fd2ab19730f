//! Pod networking: network namespaces, CNI plugins, DNS and hosts files.

pub mod cni;
pub mod dns;
