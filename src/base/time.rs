//! The clock as rktlet's records keep it: nanoseconds since the epoch (image
//! store records, container events, stats timestamps).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in nanoseconds since the epoch (0 before it).
pub(crate) fn now_nanos() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// RFC 3339 with nanoseconds in UTC, as kubelet writes and parses it (the
/// log writer's, which writes it into every CRI log line).
pub(crate) use logwriter::rfc3339_nano;
