//! rktlet: a Kubernetes CRI runtime that runs rkt pods, doing in-process what
//! the original rktlet exec'd the `rkt` binary for.
//!
//! Module map (see docs/architecture.md): `cri` translates gRPC calls;
//! `container` does the container verbs (for `cri` and the CLI); `pod` owns pod
//! directories; `stage1` launches and drives pods; `image` owns the store;
//! `cgroup` owns cgroup files; `net` owns pod networking; `stream` serves
//! exec/attach/port-forward streams.

pub mod bench;
pub mod cgroup;
pub mod cli;
pub mod client;
pub mod config;
pub mod container;
pub mod cri;
pub mod demo;
pub mod doctor;
pub mod fault;
pub mod filecache;
pub mod fsutil;
pub mod heap;
pub mod http_head;
pub mod image;
pub mod metrics;
pub mod net;
pub mod pod;
pub mod pool;
pub mod program_pages;
pub mod proto;
pub mod runtime;
pub mod sandbox;
pub mod server;
pub mod stage1;
pub mod stream;
pub mod sys;
pub mod time;
pub mod trust;
