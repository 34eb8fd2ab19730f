//! The daemon's bottom layer: small helpers every other module may use and
//! that use no other module of the daemon (only `rkt` and outside crates).
//! Parsed files checked by `stat` ([`filecache`]), paths resolved inside a
//! root and /proc fields ([`fsutil`]), an HTTP request head reader
//! ([`http_head`]), crash points for tests ([`fault`]), the clock in
//! nanoseconds and RFC 3339 ([`time`]), the pidfd calls ([`sys`]), the
//! allocator's upkeep ([`heap`]) and the program's own pages
//! ([`program_pages`]).

pub mod fault;
pub(crate) mod filecache;
pub(crate) mod fsutil;
pub(crate) mod heap;
pub mod http_head;
pub(crate) mod program_pages;
pub(crate) mod steps;
pub(crate) mod sys;
pub(crate) mod time;

/// The project's way for a unit test to say a check could not run here: one
/// line `SKIPPED: <test>: <reason>` on the process's stderr, written past the
/// test harness's capture (which keeps `println!` of a passing test), so
/// `scripts/test.sh` counts it; the caller returns.
#[cfg(test)]
pub(crate) fn skipped(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {reason}");
}
