//! The daemon's memory of pods: parsed manifests kept between calls
//! ([`cache`]), the table of what the read verbs answer ([`table`]) and the
//! change notification that keeps both true ([`watch`]). The pod directory
//! itself, its states and its locks are rkt's format: `rkt::pod`.

pub(crate) mod cache;
pub(crate) mod table;
pub(crate) mod watch;

/// Socket of the pod's log writer in the pod directory (`stage1::crilog`).
pub(crate) const LOG_SOCKET_FILE: &str = logwriter::SOCKET_FILE;
