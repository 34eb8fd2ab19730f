//! Loopback ports for the fixtures' servers, taken below the kernel's
//! ephemeral range (`ip_local_port_range`, 32768-60999 by default). A port
//! from `bind(:0)` is free only until it is closed: another test's `bind(:0)`
//! or an outgoing connection may get it before the fixture's server binds it,
//! which once made the seeded token registry start on a port a test's HTTP
//! server already held. Ports below the range are never handed out that way.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

const LOW: u32 = 20000;
const SPAN: u32 = 12000;

/// The next candidate: spread by process id so concurrent test binaries start
/// apart, then stepped by a counter so one process never repeats itself.
fn candidate() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let spread = std::process::id().wrapping_mul(2654435761) % SPAN;
    (LOW + (spread + n * 7) % SPAN) as u16
}

fn bindable(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A loopback port that nothing listens on and `bind(:0)` does not hand out.
pub fn free_port() -> u16 {
    (0..SPAN).map(|_| candidate()).find(|p| bindable(*p)).expect("a free loopback port below the ephemeral range")
}

/// A port `p` with `p + 1` free too.
pub fn free_port_pair() -> u16 {
    (0..SPAN)
        .map(|_| candidate())
        .find(|p| bindable(*p) && bindable(p + 1))
        .expect("two free loopback ports below the ephemeral range")
}
