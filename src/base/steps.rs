//! Where a request's time went: named steps timed one after another, for a
//! debug line (`tracing` field `steps`, e.g. `open=120 bus=15 spec=310`, in
//! microseconds).

use std::fmt::Write;
use std::time::Instant;

/// Steps timed since the last mark.
#[derive(Debug)]
pub(crate) struct Steps {
    last: Instant,
    done: Vec<(&'static str, u128)>,
}

impl Default for Steps {
    fn default() -> Self {
        Steps::new()
    }
}

impl Steps {
    pub(crate) fn new() -> Steps {
        Steps { last: Instant::now(), done: Vec::new() }
    }

    /// Ends the step `name` now (and starts the next).
    pub(crate) fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        self.done.push((name, now.duration_since(self.last).as_micros()));
        self.last = now;
    }

    /// `name=micros` for each step, in order.
    pub(crate) fn line(&self) -> String {
        let mut out = String::new();
        for (name, us) in &self.done {
            let sep = if out.is_empty() { "" } else { " " };
            let _ = write!(out, "{sep}{name}={us}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_listed_in_order_with_their_time() {
        let mut s = Steps::new();
        s.mark("a");
        std::thread::sleep(std::time::Duration::from_millis(2));
        s.mark("b");
        let line = s.line();
        let parts: Vec<(&str, u128)> =
            line.split(' ').map(|p| p.split_once('=').map(|(n, v)| (n, v.parse().unwrap())).unwrap()).collect();
        assert_eq!(parts.iter().map(|p| p.0).collect::<Vec<_>>(), ["a", "b"]);
        assert!(parts[1].1 >= 2000, "{line}");
    }
}
