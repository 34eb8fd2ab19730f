//! The daemon's heap between bursts of calls. glibc's malloc keeps what a
//! burst freed (a pull's buffers, a hundred pods' statuses) in its arenas
//! for the next one, and gives a thread that contends for a lock an arena of
//! its own: after a few hundred calls an idle daemon held about twice the
//! memory it needed. Measured with `rktlet bench` (issue 26): 23 MiB of heap
//! after the pods were gone, 8 to 10 MiB once trimmed.
//!
//! So the daemon caps the arenas at two (the tokio workers of a two-core
//! node; more only spreads the same free memory over more arenas) and, once
//! calls have stopped for a moment, returns the free pages to the kernel
//! (`malloc_trim`), off the request path on a blocking thread. Other
//! allocators (musl) have neither knob: then this does nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long the daemon must have been without a finished call before it trims.
pub(crate) const QUIET: Duration = Duration::from_millis(500);

/// Arenas glibc may make for the daemon's threads.
const ARENAS: i32 = 2;

static CALLS: AtomicU64 = AtomicU64::new(0);

/// A call finished: the heap may now hold what it freed.
pub(crate) fn note_call() {
    CALLS.fetch_add(1, Ordering::Relaxed);
}

/// Caps glibc's arenas; call before the runtime's threads start.
pub(crate) fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; no memory is touched
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
    }
}

/// Returns free heap pages to the kernel; true when some were.
pub(crate) fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim walks the allocator's own free lists under its locks
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// How much of the main thread's stack below the caller's frame
/// [`release_unused_stack`] keeps: the frames of the calls it makes itself
/// (madvise, and the red zone). Whatever a loop later uses deeper comes
/// back as it touches it, zeroed, so only what it uses stays resident (the
/// log writer kept 168 KiB of a 256 KiB margin in a release build).
const STACK_KEPT: usize = 16 << 10;

/// Lets go of the main thread's stack pages below the caller's frame but
/// [`STACK_KEPT`]: what a process that now only loops touched once, deeper,
/// before (the pod's log writer keeps its parent's start-up stack, the
/// sandbox process's, resident otherwise: 0.7 MiB measured in a debug
/// build). A page touched again comes back zeroed, as any new stack page.
/// Returns the bytes let go.
pub(crate) fn release_unused_stack() -> usize {
    let here = 0u8;
    let sp = std::ptr::addr_of!(here) as usize;
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return 0 };
    let Some(unused) = unused_stack(&maps, sp) else { return 0 };
    // SAFETY: the range is this thread's stack, page-aligned, at least
    // STACK_KEPT below the current frame: nothing live is there
    let done = unsafe { libc::madvise(unused.start as *mut libc::c_void, unused.len(), libc::MADV_DONTNEED) == 0 };
    if done { unused.len() } else { 0 }
}

/// The pages of the main thread's stack (`[stack]` in a /proc/self/maps
/// text) below `sp` but [`STACK_KEPT`]; None when `sp` is not on it (another
/// thread's stack) or nothing is below that.
fn unused_stack(maps: &str, sp: usize) -> Option<std::ops::Range<usize>> {
    let line = maps.lines().find(|l| l.ends_with("[stack]"))?;
    let (lo, hi) = line.split_once(' ')?.0.split_once('-')?;
    let (lo, hi) = (usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?);
    let end = sp.checked_sub(STACK_KEPT)? & !4095;
    ((lo..hi).contains(&sp) && end > lo).then_some(lo..end)
}

/// What a tick of [`trim_when_quiet`] does, given the call count now and at
/// the last two ticks: trim once after the calls stopped, then wait for more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Wait,
    Trim,
}

#[derive(Debug, Default)]
struct Watch {
    seen: u64,
    trimmed: u64,
}

impl Watch {
    fn tick(&mut self, now: u64) -> Step {
        let quiet = now == self.seen;
        self.seen = now;
        if quiet && now != self.trimmed {
            self.trimmed = now;
            Step::Trim
        } else {
            Step::Wait
        }
    }
}

/// Trims the heap each time calls have finished and none has for [`QUIET`].
/// Runs for the daemon's life.
pub(crate) async fn trim_when_quiet() {
    let mut watch = Watch::default();
    let mut ticks = tokio::time::interval(QUIET);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if watch.tick(CALLS.load(Ordering::Relaxed)) == Step::Trim {
            let started = std::time::Instant::now();
            let released = tokio::task::spawn_blocking(trim).await.unwrap_or(false);
            tracing::debug!(released, took_us = started.elapsed().as_micros() as u64, "heap trimmed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stack_below_the_frame_but_what_is_kept() {
        let maps = "55d0-55e0 r--p 0 08:01 1 /bin/x\n7ffc00000000-7ffc00100000 rw-p 0 0:0 0 [stack]\n";
        let sp = 0x7ffc_000f_f123;
        let end = (sp - STACK_KEPT) & !4095;
        assert_eq!(unused_stack(maps, sp), Some(0x7ffc_0000_0000..end));
        assert_eq!(end % 4096, 0);
        // another thread's stack, or nothing below what is kept: none
        assert_eq!(unused_stack(maps, 0x1234_5678), None);
        assert_eq!(unused_stack(maps, 0x7ffc_0000_0000 + STACK_KEPT + 100), None);
        assert_eq!(unused_stack("55d0-55e0 r--p 0 08:01 1 /bin/x\n", sp), None);
        // on a test thread (not the main one) nothing is let go
        assert_eq!(std::thread::spawn(release_unused_stack).join().unwrap(), 0);
    }

    #[test]
    fn trims_once_after_calls_stop() {
        let mut w = Watch::default();
        // nothing has happened yet
        assert_eq!(w.tick(0), Step::Wait);
        // calls keep coming: no trim while they do
        assert_eq!(w.tick(3), Step::Wait);
        assert_eq!(w.tick(9), Step::Wait);
        // a quiet tick after them: one trim
        assert_eq!(w.tick(9), Step::Trim);
        // still quiet: nothing more to give back
        assert_eq!(w.tick(9), Step::Wait);
        assert_eq!(w.tick(9), Step::Wait);
        // one more call, then quiet: trims again
        assert_eq!(w.tick(10), Step::Wait);
        assert_eq!(w.tick(10), Step::Trim);
    }

    #[test]
    fn a_trim_returns_freed_pages() {
        tune();
        // every other block freed: holes of whole pages inside the heap, which
        // glibc keeps (its automatic trim only shortens the top) until a trim
        let mut blocks: Vec<Option<Vec<u8>>> = (0..4_000).map(|i| Some(vec![i as u8; 8000])).collect();
        for b in blocks.iter_mut().step_by(2) {
            *b = None;
        }
        assert!(trim(), "malloc_trim released nothing with 16 MB freed inside the heap");
        assert_eq!(blocks.iter().flatten().count(), 2_000);
    }
}
