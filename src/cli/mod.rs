//! The `rktlet` command line, all of it: the arguments and what each command
//! runs ([`command`], which `src/main.rs` calls), rkt's pod commands on a data
//! dir ([`pods`]: `list`, `status`, `stop`, `rm`, `gc`) and its app commands
//! ([`app`]), how rkt 1.30 printed them ([`out`]; their JSON is
//! `rkt::api_v1`), the host checks (`rktlet doctor`, [`doctor`]) and the
//! walk-through (`rktlet demo`, `client::demo`). The daemon (`rktlet serve`) is
//! one command of it.

pub(crate) mod app;
pub mod command;
pub(crate) mod doctor;
pub(crate) mod out;
pub(crate) mod pods;
