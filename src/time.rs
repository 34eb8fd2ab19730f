//! The clock as rktlet's records keep it: nanoseconds since the epoch (image
//! store records, container events, stats timestamps).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in nanoseconds since the epoch (0 before it).
pub fn now_nanos() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}
