//! rktlet: a Kubernetes CRI runtime that runs rkt pods, doing in-process what
//! the original rktlet exec'd the `rkt` binary for.
//!
//! Module map (see docs/architecture.md): `cri` translates gRPC calls;
//! `container` and `sandbox` do the container and pod verbs (for `cri` and
//! the CLI); `pod` keeps the daemon's memory of pods; `stage1` launches and
//! drives pods; `image` owns the store; `cgroup` owns cgroup files; `net` owns
//! pod networking; `stream` serves exec/attach/port-forward streams; `cli` is
//! the command line; `base` is the bottom layer. rkt's on-disk formats are
//! the `rkt` crate's.
//!
//! Most items are the crate's own (`pub(crate)`): read these docs with
//! `cargo doc --document-private-items`, where every link resolves.
#![allow(rustdoc::private_intra_doc_links)]

pub mod base;
pub mod cgroup;
pub mod cli;
pub mod client;
pub mod config;
pub mod container;
pub mod cri;
pub mod image;
pub(crate) mod metrics;
pub mod net;
pub(crate) mod pod;
pub(crate) mod pool;
pub mod proto;
pub(crate) mod runtime;
pub(crate) mod sandbox;
pub(crate) mod server;
pub mod stage1;
pub mod stream;
pub mod trust;
