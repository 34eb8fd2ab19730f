//! Stopping a pod and taking down what its sandbox left on the host: the
//! nspawn process, stray processes in the pod cgroup, mounts under the pod
//! directory, the pod cgroup itself.
//!
//! Runs in: the daemon (and the CLI). Every step is idempotent, so a stop or
//! remove interrupted by a crash is simply run again.

use super::app_status::{self as app, AppPaths, AppState};
use crate::base::sys::{pidfd_getfd, pidfd_open};
use crate::cgroup::{Layout, pod::PodCgroup};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rkt::pod::{Pod, PodError, PodState};
use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub(crate) enum StopError {
    #[error(transparent)]
    Pod(#[from] PodError),
    #[error("pod {uuid}: {context}: {source}")]
    Io { uuid: String, context: String, source: io::Error },
    #[error("pod {0} is still running after SIGKILL")]
    Stuck(String),
}

/// Waits until the process behind `pidfd` exits, at most `timeout`.
fn wait_exit(pidfd: &OwnedFd, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = u16::try_from(left.as_millis().min(10_000)).unwrap_or(10_000);
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(n) if n > 0 => return true,
            Ok(_) if left.is_zero() => return false,
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(_) => return false,
        }
    }
}

/// The pod's cgroup directories, from its `subcgroup` files.
pub(crate) fn pod_cgroup(pod: &Pod) -> Result<Option<PodCgroup>, StopError> {
    let Some(subs) = pod.subcgroups()? else { return Ok(None) };
    let layout = Layout::read().map_err(|source| StopError::Io {
        uuid: pod.uuid().to_string(),
        context: "reading cgroup layout".into(),
        source,
    })?;
    Ok(Some(PodCgroup::of_pod(&layout, &subs)))
}

/// Apps still running when their pod is killed are recorded as killed (137,
/// as containerd reports the containers its StopPodSandbox kills), before
/// the kill, so that no reader sees one without its exit.
fn record_killed_apps(pod: &Pod) {
    let Ok(manifest) = pod.read_manifest() else { return };
    for app in &manifest.apps {
        let paths = AppPaths::new(pod, &app.name);
        if app::facts(&paths, true).state == AppState::Running
            && let Err(e) = app::record_exit(&paths, 128 + libc::SIGKILL)
        {
            tracing::warn!(pod = %pod.uuid(), app = %app.name, error = %e, "cannot record a killed app's exit");
        }
    }
}

/// Stops a pod, forcibly as the CRI asks of StopPodSandbox: SIGKILL to the
/// pod's PID 1, which takes every process of its PID namespaces with it
/// (nspawn then exits), or, before the pod has a PID 1, SIGTERM to its
/// nspawn (the pod's systemd powers off at once); after `grace`, SIGKILL to
/// nspawn and to everything left in the pod cgroup. Returns when the pod
/// reads as exited. Stopping a stopped pod is a no-op.
pub(crate) fn stop(pod: &mut Pod, grace: Duration) -> Result<(), StopError> {
    let uuid = pod.uuid().to_string();
    let t0 = Instant::now();
    let mut held = Vec::new();
    if pod.state()? == PodState::Running
        && let Some(pid) = pod.sandbox_pid()?
        && let Ok(pidfd) = pidfd_open(pid)
    {
        match super::inject::pod_pid1(pid) {
            Ok(init) => {
                record_killed_apps(pod);
                held = hold_inotify(init);
                let _ = kill(Pid::from_raw(init), Signal::SIGKILL);
            }
            Err(_) => {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
        }
        if !wait_exit(&pidfd, grace) {
            tracing::warn!(pod = %uuid, ?grace, "pod did not stop in time; killing it");
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            if let Some(cg) = pod_cgroup(pod)? {
                cg.kill_all();
            }
            if !wait_exit(&pidfd, Duration::from_secs(10)) {
                return Err(StopError::Stuck(uuid));
            }
        }
    }
    let t_nspawn = t0.elapsed();
    // nspawn gone: anything still in the pod cgroup (a pod systemd orphaned by SIGKILL) goes too
    if let Some(cg) = pod_cgroup(pod)? {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cg.pids().is_empty() {
            cg.kill_all();
            if Instant::now() > deadline {
                return Err(StopError::Stuck(uuid));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let t_drain = t0.elapsed();
    // the lock goes with the last process holding it
    let deadline = Instant::now() + Duration::from_secs(10);
    while pod.state()? == PodState::Running {
        if Instant::now() > deadline {
            return Err(StopError::Stuck(uuid));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    tracing::debug!(
        pod = %uuid,
        nspawn_micros = t_nspawn.as_micros() as u64,
        drain_micros = (t_drain - t_nspawn).as_micros() as u64,
        lock_micros = (t0.elapsed() - t_drain).as_micros() as u64,
        inotify_held = held.len(),
        "pod stopped"
    );
    release_later(held);
    Ok(())
}

/// Copies of the inotify instances of the pod's systemd, taken just before
/// it is killed. Closing the last reference to an inotify instance that
/// watched something waits for an SRCU grace period (the kernel's
/// `fsnotify_destroy_group`); systemd 252 keeps three (cgroup.events, /etc,
/// /run), and a dying PID 1 closed them one after another: 25 to 75 ms of
/// a pod's stop here, 300 ms when the machine was busy, before the pod's
/// last process was gone. Held by the daemon, they outlive the pod by that
/// much, and [`release_later`] closes them off the request path. Best effort:
/// whatever cannot be copied is closed by the dying process as before.
fn hold_inotify(init: i32) -> Vec<OwnedFd> {
    let Ok(pidfd) = pidfd_open(init) else { return Vec::new() };
    let Ok(fds) = fs::read_dir(format!("/proc/{init}/fd")) else { return Vec::new() };
    fds.flatten()
        .filter(|e| fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:inotify"))
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|fd| pidfd_getfd(&pidfd, fd).ok())
        .collect()
}

/// Closes `fds` on a thread of their own (each close may wait for the kernel).
fn release_later(fds: Vec<OwnedFd>) {
    if fds.is_empty() {
        return;
    }
    if let Err(e) = after_the_call("inotify-close", move || drop(fds)) {
        tracing::warn!(error = %e, "closed a stopped pod's inotify instances on this thread");
    }
}

/// Unmounts everything mounted at or below `dir`, deepest first (lazily, so a
/// busy mount does not block the removal of the pod).
pub(crate) fn unmount_below(dir: &Path) -> io::Result<()> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")?;
    let prefix = dir.to_string_lossy().trim_end_matches('/').to_string();
    let mut points: Vec<String> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(crate::cgroup::unescape_mount)
        .filter(|p| *p == prefix || p.starts_with(&format!("{prefix}/")))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        match nix::mount::umount2(p.as_str(), nix::mount::MntFlags::MNT_DETACH) {
            Ok(()) | Err(nix::Error::EINVAL) | Err(nix::Error::ENOENT) => {}
            Err(e) => return Err(io::Error::new(io::Error::from(e).kind(), format!("unmounting {p}: {e}"))),
        }
    }
    Ok(())
}

/// Removes the host-side leftovers of an exited pod: mounts under its
/// directory and its cgroup.
pub(crate) fn release(pod: &Pod) -> Result<(), StopError> {
    let uuid = pod.uuid().to_string();
    unmount_below(&pod.path()).map_err(|source| StopError::Io {
        uuid: uuid.clone(),
        context: "unmounting".into(),
        source,
    })?;
    if let Some(cg) = pod_cgroup(pod)? {
        cg.remove().map_err(|source| StopError::Io { uuid, context: "removing cgroup".into(), source })?;
    }
    Ok(())
}

/// Marks a stopped and released pod as garbage, as rkt's gc does first.
fn to_garbage(pod: &mut Pod) -> Result<(), StopError> {
    match pod.state()? {
        PodState::Exited => pod.to_exited_garbage()?,
        PodState::Embryo | PodState::AbortedPrepare | PodState::Prepared => pod.to_garbage()?,
        _ => {}
    }
    Ok(())
}

/// Deletes a stopped and released pod's directory.
pub(crate) fn delete(mut pod: Pod) -> Result<(), StopError> {
    to_garbage(&mut pod)?;
    pod.delete()?;
    Ok(())
}

/// Takes a stopped and released pod's directory out of the pod tree now and
/// deletes it on a thread of its own (the daemon's removals; what a crash
/// leaves in the trash is deleted at the next start).
pub(crate) fn delete_later(mut pod: Pod) -> Result<(), StopError> {
    to_garbage(&mut pod)?;
    let uuid = pod.uuid();
    let path = pod.discard()?;
    let deletion = after_the_call("pod-delete", move || {
        if let Err(e) = fs::remove_dir_all(&path) {
            tracing::warn!(pod = %uuid, path = %path.display(), error = %e, "cannot delete a removed pod's directory");
        }
    });
    if let Err(e) = deletion {
        tracing::warn!(pod = %uuid, error = %e, "no thread to delete a removed pod's directory; the next start will");
    }
    Ok(())
}

/// Work a call leaves behind, on threads of its own (each may wait for the kernel).
static AFTER_CALLS: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>> = std::sync::Mutex::new(Vec::new());

/// Runs `work` on a thread of its own, after the call that asked for it
/// (the daemon waits for it before it exits: [`finish_after_calls`]). When
/// no thread can be made, `work` is dropped unrun.
pub(crate) fn after_the_call(name: &str, work: impl FnOnce() + Send + 'static) -> io::Result<()> {
    let handle = std::thread::Builder::new().name(name.into()).spawn(work)?;
    if let Ok(mut pending) = AFTER_CALLS.lock() {
        pending.retain(|h| !h.is_finished());
        pending.push(handle);
    }
    Ok(())
}

/// Waits for what stops and removals left to do after their calls (the
/// daemon, before it exits).
pub(crate) fn finish_after_calls() {
    let pending = AFTER_CALLS.lock().map(|mut p| std::mem::take(&mut *p)).unwrap_or_default();
    for handle in pending {
        let _ = handle.join();
    }
}
