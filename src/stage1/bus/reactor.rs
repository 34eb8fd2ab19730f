//! One daemon thread waits on every pod's bus.
//!
//! Runs in: the `podbus` thread (waiting and reading signals) and the
//! callers' own threads (method calls). A pod's `Worker` sits behind a lock;
//! a request takes the lock on the caller's thread and makes its calls there,
//! so a pod whose systemd is slow to answer holds up only the callers of that
//! pod. The thread sleeps in epoll(7) on every connection (one-shot: the fd is
//! armed again by whoever read it last), reads the signals of the buses that
//! became readable (JobRemoved completes the jobs callers wait for), and fails
//! waits that reach their deadline. A bus it finds locked is left to the
//! lock's holder, who reads what is queued before letting go.
//!
//! With one thread per pod, 110 pods kept 110 stacks and 110 allocator caches
//! of freed blocks (about 50 KiB a pod together); this thread keeps one.

use super::worker::Worker;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

/// The epoll token of the reactor's own eventfd.
const WAKE: u64 = 0;

/// A pod's worker, shared by the reactor and the pod's callers; `None`
/// once the pod's `PodBus` has closed it.
pub(super) struct Shared {
    id: u64,
    fd: i32,
    worker: Mutex<Option<Worker>>,
}

struct Reactor {
    epoll: OwnedFd,
    wake: OwnedFd,
    buses: Mutex<HashMap<u64, Weak<Shared>>>,
    next_id: AtomicU64,
}

fn reactor() -> io::Result<&'static Reactor> {
    static REACTOR: OnceLock<Result<&'static Reactor, String>> = OnceLock::new();
    let r = REACTOR.get_or_init(|| {
        let r = Reactor::new().map_err(|e| e.to_string())?;
        let r: &'static Reactor = Box::leak(Box::new(r));
        std::thread::Builder::new().name("podbus".into()).spawn(move || r.run()).map_err(|e| e.to_string())?;
        Ok(r)
    });
    match r {
        Ok(r) => Ok(*r),
        Err(why) => Err(io::Error::other(format!("the pod bus thread did not start: {why}"))),
    }
}

/// Hands `worker` to the reactor; its connection is watched from now on.
pub(super) fn register(worker: Worker) -> io::Result<Arc<Shared>> {
    let r = reactor()?;
    let id = r.next_id.fetch_add(1, Ordering::Relaxed);
    let shared = Arc::new(Shared { id, fd: worker.fd(), worker: Mutex::new(Some(worker)) });
    r.buses.lock().unwrap_or_else(|e| e.into_inner()).insert(id, Arc::downgrade(&shared));
    let ev = shared.worker.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map_or(0, Worker::events);
    if let Err(e) = r.ctl(libc::EPOLL_CTL_ADD, &shared, ev) {
        r.buses.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
        return Err(e);
    }
    Ok(shared)
}

/// Runs `f` with the pod's worker on this thread, then reads what the calls
/// left queued and arms the connection again. `None` if the bus was closed.
pub(super) fn with<R>(shared: &Shared, f: impl FnOnce(&mut Worker) -> R) -> Option<R> {
    let mut guard = lock(shared);
    let w = guard.as_mut()?;
    let r = f(w);
    let waits = settle(shared, &mut guard).is_some();
    drop(guard);
    if waits && let Ok(r) = reactor() {
        // a new deadline: the reactor recomputes how long it may sleep
        r.wake();
    }
    Some(r)
}

/// Closes the pod's connection (on this thread) and stops watching it.
pub(super) fn close(shared: &Shared) {
    let mut guard = lock(shared);
    if let Ok(r) = reactor() {
        r.buses.lock().unwrap_or_else(|e| e.into_inner()).remove(&shared.id);
        if guard.is_some() {
            // before the fd closes, so that a reused fd number is not watched
            let _ = r.ctl(libc::EPOLL_CTL_DEL, shared, 0);
        }
    }
    // the waits still pending end with it (their callers hear the bus is gone)
    guard.take();
}

fn lock(shared: &Shared) -> MutexGuard<'_, Option<Worker>> {
    shared.worker.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads everything queued, fails late waits and arms the fd again (unless
/// the connection is gone). Returns the next deadline of a wait.
fn settle(shared: &Shared, guard: &mut MutexGuard<'_, Option<Worker>>) -> Option<Instant> {
    let w = guard.as_mut()?;
    w.pump();
    let next = w.expire(Instant::now());
    if !w.is_dead()
        && let Ok(r) = reactor()
        && let Err(e) = r.ctl(libc::EPOLL_CTL_MOD, shared, w.events())
    {
        tracing::warn!(pid1 = w.pid1(), "cannot watch the pod bus: {e}");
    }
    next
}

impl Reactor {
    fn new() -> io::Result<Reactor> {
        // SAFETY: epoll_create1(2) with a constant flag; returns a new fd or -1.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this fd; nothing else owns it.
        let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
        // SAFETY: eventfd(2) with constant flags; returns a new fd or -1.
        let wfd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wfd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this fd; nothing else owns it.
        let wake = unsafe { OwnedFd::from_raw_fd(wfd) };
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: WAKE };
        // SAFETY: epoll_ctl(2) on fds we own, with an event we own.
        if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, wake.as_raw_fd(), &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Reactor { epoll, wake, buses: Mutex::new(HashMap::new()), next_id: AtomicU64::new(WAKE + 1) })
    }

    /// Adds, re-arms (one-shot) or removes the pod's fd for `events` (poll(2) bits).
    fn ctl(&self, op: i32, shared: &Shared, events: i16) -> io::Result<()> {
        let mut bits = libc::EPOLLONESHOT as u32;
        if events & libc::POLLIN != 0 {
            bits |= libc::EPOLLIN as u32;
        }
        if events & libc::POLLOUT != 0 {
            bits |= libc::EPOLLOUT as u32;
        }
        let mut ev = libc::epoll_event { events: bits, u64: shared.id };
        // SAFETY: epoll_ctl(2) on our epoll fd and the pod's open bus fd, with an event we own.
        if unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, shared.fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: write(2) of 8 bytes from a local buffer to an eventfd we own.
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    fn run(&self) {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 64];
        let mut next: Option<Instant> = None;
        loop {
            let timeout_ms = next.map_or(-1, |d| {
                let left = d.saturating_duration_since(Instant::now()) + Duration::from_micros(999);
                i32::try_from(left.as_millis()).unwrap_or(i32::MAX)
            });
            // SAFETY: epoll_wait(2) into a buffer we own, with its length.
            let n = unsafe {
                libc::epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), events.len() as i32, timeout_ms)
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!("pod bus thread: epoll_wait: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                continue;
            }
            let mut all = false;
            let mut ready = Vec::new();
            for ev in &events[..n as usize] {
                match ev.u64 {
                    WAKE => {
                        let mut buf = [0u8; 8];
                        // SAFETY: read(2) of 8 bytes into a local buffer from our non-blocking eventfd.
                        let _ = unsafe { libc::read(self.wake.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                        all = true;
                    }
                    id => ready.push(id),
                }
            }
            let late = next.is_some_and(|d| d <= Instant::now());
            let buses: Vec<Arc<Shared>> = {
                let map = self.buses.lock().unwrap_or_else(|e| e.into_inner());
                if all || late {
                    map.values().filter_map(Weak::upgrade).collect()
                } else {
                    ready.iter().filter_map(|id| map.get(id).and_then(Weak::upgrade)).collect()
                }
            };
            let mut soonest = if all || late { None } else { next };
            for shared in buses {
                // a locked bus is read by its holder before the lock goes
                let mut guard = match shared.worker.try_lock() {
                    Ok(g) => g,
                    Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) => continue,
                };
                if let Some(d) = settle(&shared, &mut guard) {
                    soonest = Some(soonest.map_or(d, |s: Instant| s.min(d)));
                }
            }
            next = soonest;
        }
    }
}
