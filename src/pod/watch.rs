//! Change notification for the pods of a data directory, so that a reader
//! can keep what it read about a pod until the pod changes: inotify on the
//! pod directories' parents (pods arriving, leaving, moving between states),
//! on each watched pod's directory, its stage1 `/rkt` (readiness) and
//! `/rkt/status` (app created/started/exited), and a pidfd of the pod's
//! sandbox process, whose exit releases the pod lock (Running -> Exited
//! writes nothing a watch would see).
//!
//! Nothing is delivered in the background: [`PodWatch::drain`] asks without
//! blocking (one `epoll_wait` over the inotify queue and the pidfds when
//! nothing changed). The kernel queues an event inside the
//! call that changed the file, so a change that completed before `drain`
//! was called is always among its results; a reader that drains before it
//! uses what it kept never serves something older than its own request.
//!
//! Watched events are the ones a change of state makes (entries created,
//! deleted, renamed in or out, files closed after writing, attributes such as
//! mtimes); plain writes to files kept open (nspawn's console log) are not,
//! so a booting pod does not invalidate itself with every line.

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use rkt::pod::{DataDir, PodDir};
use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use uuid::Uuid;

/// What changed since the last [`PodWatch::drain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// Events were lost (queue overflow): assume everything changed.
    All,
    /// A pod directory appeared in, left or moved between the state directories.
    Listing,
    /// Something about this pod changed.
    Pod(Uuid),
    /// Only this entry of the pod's `/rkt/status` changed (an app's
    /// created, started or exit record): the rest of what was read stands.
    Status(Uuid, String),
    /// A watched subdirectory of the pod was replaced: changes in the new
    /// one before it is watched again were not seen, so nothing read about
    /// the pod before may be reused.
    Unwatched(Uuid),
    /// The pod's directory is gone; its watches were dropped.
    Gone(Uuid),
}

const PARENT_MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_ONLYDIR);

const POD_MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_ONLYDIR);

/// The directories of a pod that are watched, relative to the pod directory
/// (the first is the pod directory itself).
const POD_DIRS: [&str; 3] = ["", "stage1/rootfs/rkt", "stage1/rootfs/rkt/status"];
/// The index of `/rkt/status` in [`POD_DIRS`].
const STATUS_DIR: usize = 2;

/// The epoll token of the inotify queue; pidfds get the others.
const INOTIFY_TOKEN: u64 = u64::MAX;

#[derive(Debug)]
pub(crate) struct PodWatch {
    epoll: Epoll,
    inotify: Inotify,
    parents: HashMap<WatchDescriptor, PodDir>,
    /// Every watch of a pod directory, to its pod and its index in [`POD_DIRS`].
    wds: HashMap<WatchDescriptor, (Uuid, usize)>,
    pods: HashMap<Uuid, Vec<WatchDescriptor>>,
    /// Pidfds of running pods' sandbox processes, and their epoll tokens.
    exits: HashMap<Uuid, (u64, OwnedFd)>,
    /// A state directory's watch is gone (the directory was removed or its
    /// file system unmounted): nothing may be kept any more.
    broken: bool,
    tokens: HashMap<u64, Uuid>,
    next_token: u64,
}

impl PodWatch {
    /// Watches the state directories of `data` (they must exist).
    pub(crate) fn new(data: &DataDir) -> io::Result<Self> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        let mut parents = HashMap::new();
        for dir in PodDir::ALL {
            parents.insert(inotify.add_watch(&data.pod_parent(dir), PARENT_MASK)?, dir);
        }
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        epoll.add(&inotify, EpollEvent::new(EpollFlags::EPOLLIN, INOTIFY_TOKEN))?;
        Ok(Self {
            epoll,
            inotify,
            parents,
            wds: HashMap::new(),
            pods: HashMap::new(),
            exits: HashMap::new(),
            tokens: HashMap::new(),
            next_token: 0,
            broken: false,
        })
    }

    /// Watches a pod's directories; false if some could not be watched (the
    /// pod is then not fully covered and nothing read about it may be kept).
    pub(crate) fn watch_pod(&mut self, uuid: Uuid, pod_dir: &Path) -> bool {
        if self.pods.get(&uuid).is_some_and(|w| w.len() == POD_DIRS.len()) {
            return true;
        }
        let mut wds = Vec::new();
        for (i, rel) in POD_DIRS.iter().enumerate() {
            let path = if rel.is_empty() { pod_dir.to_path_buf() } else { pod_dir.join(rel) };
            match self.inotify.add_watch(&path, POD_MASK) {
                Ok(wd) => {
                    self.wds.insert(wd, (uuid, i));
                    wds.push(wd);
                }
                Err(e) => {
                    if e != Errno::ENOENT {
                        tracing::debug!(pod = %uuid, path = %path.display(), error = %e, "cannot watch");
                    }
                    break;
                }
            }
        }
        let complete = wds.len() == POD_DIRS.len();
        self.pods.insert(uuid, wds);
        complete
    }

    /// Reports `Change::Pod(uuid)` once the process behind `pidfd` exits.
    pub(crate) fn watch_exit(&mut self, uuid: Uuid, pidfd: OwnedFd) {
        self.unwatch_exit(uuid);
        let token = self.next_token;
        self.next_token += 1;
        match self.epoll.add(&pidfd, EpollEvent::new(EpollFlags::EPOLLIN, token)) {
            Ok(()) => {
                self.tokens.insert(token, uuid);
                self.exits.insert(uuid, (token, pidfd));
            }
            Err(e) => tracing::debug!(pod = %uuid, error = %e, "cannot watch the sandbox's exit"),
        }
    }

    fn unwatch_exit(&mut self, uuid: Uuid) {
        if let Some((token, fd)) = self.exits.remove(&uuid) {
            self.tokens.remove(&token);
            let _ = self.epoll.delete(&fd);
        }
    }

    /// Whether the watch can still be trusted (see [`PodWatch::drain`]).
    pub(crate) fn is_broken(&self) -> bool {
        self.broken
    }

    /// Whether the exit of this pod's sandbox is being watched.
    pub(crate) fn watches_exit(&self, uuid: Uuid) -> bool {
        self.exits.contains_key(&uuid)
    }

    fn forget(&mut self, uuid: Uuid) {
        for wd in self.pods.remove(&uuid).unwrap_or_default() {
            self.wds.remove(&wd);
            // the kernel may have dropped it already (IN_IGNORED)
            let _ = self.inotify.rm_watch(wd);
        }
        self.unwatch_exit(uuid);
    }

    /// Everything that changed since the last call; never blocks.
    pub(crate) fn drain(&mut self) -> Vec<Change> {
        let mut out = Vec::new();
        let mut ready = [EpollEvent::empty(); 16];
        loop {
            let n = match self.epoll.wait(&mut ready, EpollTimeout::ZERO) {
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "polling pod watches");
                    out.push(Change::All);
                    return out;
                }
            };
            for ev in &ready[..n] {
                match ev.data() {
                    INOTIFY_TOKEN => self.read_inotify(&mut out),
                    token => {
                        if let Some(uuid) = self.tokens.get(&token).copied() {
                            self.unwatch_exit(uuid);
                            out.push(Change::Pod(uuid));
                        }
                    }
                }
            }
            if n < ready.len() {
                return out;
            }
        }
    }

    fn read_inotify(&mut self, out: &mut Vec<Change>) {
        loop {
            let events = match self.inotify.read_events() {
                Ok(events) => events,
                Err(Errno::EAGAIN) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "reading pod watch events");
                    out.push(Change::All);
                    return;
                }
            };
            for ev in events {
                if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    // events were lost, among them perhaps a watch's end:
                    // every pod is watched again from scratch when next read
                    let uuids: Vec<Uuid> = self.pods.keys().copied().collect();
                    for uuid in uuids {
                        self.forget(uuid);
                    }
                    out.push(Change::All);
                    continue;
                }
                if self.parents.contains_key(&ev.wd) {
                    if ev.mask.intersects(AddWatchFlags::IN_IGNORED | AddWatchFlags::IN_DELETE_SELF) {
                        tracing::warn!("a pod state directory went away: the pod table stops keeping reads");
                        self.broken = true;
                        out.push(Change::All);
                    }
                    out.push(Change::Listing);
                    if let Some(uuid) = ev.name.as_ref().and_then(|n| n.to_str()).and_then(|n| Uuid::parse_str(n).ok())
                    {
                        out.push(Change::Pod(uuid));
                    }
                    continue;
                }
                let Some(&(uuid, index)) = self.wds.get(&ev.wd) else { continue };
                let is_pod_dir = index == 0;
                // a pod directory moving between state directories stays watched;
                // a subdirectory moved away no longer is what the pod's path names
                let moved = !is_pod_dir && ev.mask.contains(AddWatchFlags::IN_MOVE_SELF);
                let gone = moved || ev.mask.intersects(AddWatchFlags::IN_IGNORED | AddWatchFlags::IN_DELETE_SELF);
                if gone && is_pod_dir {
                    self.forget(uuid);
                    out.push(Change::Gone(uuid));
                } else {
                    if gone {
                        // a watched subdirectory was replaced: watch it again next time
                        if moved {
                            let _ = self.inotify.rm_watch(ev.wd);
                        }
                        self.wds.remove(&ev.wd);
                        if let Some(w) = self.pods.get_mut(&uuid) {
                            w.retain(|wd| *wd != ev.wd);
                        }
                    }
                    match ev.name.as_ref().and_then(|n| n.to_str()) {
                        _ if gone => out.push(Change::Unwatched(uuid)),
                        Some(name) if index == STATUS_DIR => out.push(Change::Status(uuid, name.to_string())),
                        _ => out.push(Change::Pod(uuid)),
                    }
                }
            }
        }
    }
}
