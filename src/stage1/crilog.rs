//! CRI container logs: the per-pod log writer (the `logwriter` crate: its
//! protocol, its loop, and the small program most pods run), and what
//! rktlet's own writer adds for a pod that shares the node's PID namespace.
//!
//! Runs in: a process of its own per pod, forked by the sandbox process just
//! before it execs nspawn (so it lives in the pod's cgroup, and keeps
//! writing when the daemon restarts). In most pods the fork execs the
//! `logwriter` program (`stage1::logwriter`): static and small, what each
//! pod keeps resident. It exits when the pod's nspawn exits.
//!
//! The writer of a host-PID pod stays rktlet (no exec): it is also the
//! parent of the pod's apps (`run`, [`HostApps`]): living in the node's PID
//! namespace, it starts each as a copy of its template, a parked appexec
//! the pod's systemd and appexec confined
//! (`stage1::exec::spawn_in_own_pid_namespace`), and supervises it: at its
//! exit it records the exit code (`rkt/status/<app>`, first record wins)
//! and kills the template, so the unit ends; the template's end (the unit
//! stopped) kills the app; the pod's end kills them all.

pub use logwriter::{LineSplitter, Stream, record};
pub(crate) use logwriter::{
    SOCKET_FILE, attach, attach_output, close_stdin, keep_stdin, read_frame, reopen, run_host_app, stdin_of, subscribe,
};

use crate::base::sys::{pidfd_getfd, pidfd_open};
use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The writer's loop: serves `listener` until the process behind `pidfd` exits.
pub(crate) fn serve(listener: UnixListener, pidfd: Option<OwnedFd>) -> io::Result<()> {
    logwriter::serve(listener, pidfd, &mut Logged)
}

/// [`serve`] for a pod whose directory is `pod_dir` (a path that stays
/// valid across its renames): host-PID apps may be run.
pub(crate) fn serve_pod(listener: UnixListener, pidfd: Option<OwnedFd>, pod_dir: Option<PathBuf>) -> io::Result<()> {
    match pod_dir {
        Some(pod_dir) => {
            logwriter::serve(listener, pidfd, &mut HostApps { pod_dir, hosts: HashMap::new(), order: Vec::new() })
        }
        None => serve(listener, pidfd),
    }
}

/// A writer that only writes logs, its warnings logged with the daemon's.
struct Logged;

impl logwriter::Hooks for Logged {
    fn warn(&self, message: &str) {
        tracing::warn!("{message}");
    }
}

/// The apps of a host-PID pod (whose directory is `pod_dir`), started and
/// supervised by its writer.
pub(crate) struct HostApps {
    pod_dir: PathBuf,
    /// Host-PID apps by name.
    hosts: HashMap<String, HostApp>,
    /// What the last [`logwriter::Hooks::fds`] gave, in order: each app,
    /// and whether its pidfd came before its template's.
    order: Vec<(String, bool)>,
}

/// An app of a host-PID pod, this process's child, and its template.
struct HostApp {
    running: crate::stage1::exec::Running,
    template: OwnedFd,
    /// `cgroup.kill` of its unit's cgroup (unified hierarchy): at its exit
    /// what it left there goes too (runc's way for a container sharing the
    /// node's PID namespace), the template with it.
    cgroup_kill: Option<PathBuf>,
}

/// `cgroup.kill` of the unified cgroup of process `pid`, as this process sees it.
fn cgroup_kill_of(pid: i32) -> Option<PathBuf> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?.trim_start_matches('/');
    let layout = crate::cgroup::Layout::cached().ok()?;
    let mount = layout.hierarchies.iter().find(|h| h.is_unified())?.mount.clone()?;
    // never the node's root cgroup, nor one above the pod's
    (!path.is_empty()).then(|| mount.join(path).join("cgroup.kill"))
}

fn pidfd_kill(pidfd: &OwnedFd, signal: i32) {
    let _ = crate::base::sys::pidfd_send_signal(pidfd.as_raw_fd(), signal);
}

/// The app's program and argv as its template holds them: appexec's
/// arguments after `--` (its options never are `--`: bind targets are
/// absolute paths).
fn template_command(template: i32) -> io::Result<(String, Vec<String>)> {
    let comm = std::fs::read_to_string(format!("/proc/{template}/comm"))?;
    let cmdline = std::fs::read(format!("/proc/{template}/cmdline"))?;
    parse_template(&comm, &cmdline)
        .ok_or_else(|| io::Error::other(format!("process {template} is not a host-PID app's template")))
}

/// Whether template `template`'s plan names an environment file (`env=`).
fn template_has_env_file(template: i32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{template}/cmdline")).unwrap_or_default();
    cmdline.split(|b| *b == 0).take_while(|a| *a != b"--").any(|a| a.starts_with(b"env="))
}

/// The program and argv of a template from its `comm` and `cmdline`: only
/// a parked appexec of `pid=host` is one (not appexec before it confined
/// itself, nor any other process).
fn parse_template(comm: &str, cmdline: &[u8]) -> Option<(String, Vec<String>)> {
    let mut args = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned());
    if comm.trim_end() != crate::stage1::appexec::COMM || args.nth(1).as_deref() != Some("pid=host") {
        return None;
    }
    args.by_ref().find(|a| a == "--")?;
    let mut rest: Vec<String> = args.collect();
    // the kernel's cmdline ends with a NUL: one empty piece after it
    if rest.last().is_some_and(String::is_empty) {
        rest.pop();
    }
    if rest.len() < 2 {
        return None;
    }
    let program = rest.remove(0);
    Some((program, rest))
}

/// The seccomp profile host-PID app `app` of the pod in `dir` was started
/// with, from the pod's manifest.
fn host_app_profile(dir: &Path, app: &str) -> Result<Option<crate::stage1::filters::Profile>, String> {
    let path = dir.join(rkt::pod::MANIFEST_FILE);
    let bytes = std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let manifest: rkt::schema::PodManifest =
        serde_json::from_slice(&bytes).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let isolators = manifest.app(app).and_then(|a| a.app.as_ref()).map(|a| a.isolators.as_slice()).unwrap_or_default();
    crate::stage1::seccomp::profile_of(isolators).map_err(|e| format!("the seccomp isolator of {app}: {e}"))
}

/// Descriptor `fd` of the template (a pipe, a terminal or /dev/null): a
/// copy by pidfd_getfd(2), or, where a seccomp filter the node keeps refuses
/// that call (systemd-nspawn's), the same file opened again through
/// /proc/PID/fd with the template's access mode (the same pipe, terminal or
/// file; not a socket, which stdio never is here).
fn template_fd(pidfd: &OwnedFd, pid: i32, fd: i32) -> io::Result<OwnedFd> {
    match pidfd_getfd(pidfd, fd) {
        Ok(copy) => return Ok(copy),
        Err(e) if e.raw_os_error() != Some(libc::EPERM) && e.raw_os_error() != Some(libc::ENOSYS) => return Err(e),
        Err(_) => {}
    }
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))?;
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| i32::from_str_radix(f.trim(), 8).ok())
        .ok_or_else(|| io::Error::other(format!("no flags in /proc/{pid}/fdinfo/{fd}")))?;
    let file = OpenOptions::new()
        .read(flags & libc::O_ACCMODE != libc::O_WRONLY)
        .write(flags & libc::O_ACCMODE != libc::O_RDONLY)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(format!("/proc/{pid}/fd/{fd}"))
        .map_err(|e| io::Error::new(e.kind(), format!("opening the template's descriptor {fd}: {e}")))?;
    Ok(file.into())
}

impl HostApps {
    /// Starts host-PID app `app` as a copy of `template` (checked to be the
    /// process that started at `start`); its pid.
    fn run(&mut self, app: &str, template: i32, start: &str) -> Result<i32, String> {
        if self.hosts.contains_key(app) {
            return Err(format!("{app} already runs"));
        }
        let tpl = pidfd_open(template).map_err(|e| format!("template {template}: {e}"))?;
        // opened, then checked: the pid was not reused meanwhile
        if crate::stage1::appexec::start_time(template).as_deref() != Some(start) {
            return Err(format!("template {template} is gone"));
        }
        // (not a template: refused, and left alone)
        let (program, argv) = template_command(template).map_err(|e| e.to_string())?;
        let started = (|| -> Result<crate::stage1::exec::Running, String> {
            let stdio = [0, 1, 2].map(|fd| template_fd(&tpl, template, fd));
            let [Ok(i), Ok(o), Ok(e)] = stdio else {
                let why: Vec<String> = stdio.into_iter().filter_map(Result::err).map(|e| e.to_string()).collect();
                return Err(format!("cannot copy the template's stdio: {}", why.join("; ")));
            };
            // a tty container's terminal becomes the app's controlling terminal
            let tty = nix::unistd::isatty(&i).unwrap_or(false);
            // (read only where this process may not read the template's filters)
            let profile = match crate::stage1::filters::filtered_self() {
                true => host_app_profile(&self.pod_dir, app)?,
                false => None,
            };
            // the names systemd refused, which the template was told of (`env=`)
            let env_file = match template_has_env_file(template) {
                true => {
                    let file = crate::stage1::app_status::AppPaths::in_pod_dir(&self.pod_dir, app).environ_file();
                    std::fs::read(&file).map_err(|e| format!("reading {}: {e}", file.display()))?
                }
                false => Vec::new(),
            };
            let mut running = crate::stage1::exec::spawn_in_own_pid_namespace(
                &crate::stage1::exec::AppProcess::new(template, profile),
                &program,
                &argv,
                [i.as_fd(), o.as_fd(), e.as_fd()],
                tty,
                &env_file,
            )
            .map_err(|e| e.to_string())?;
            running.started().map_err(|e| e.to_string())?;
            // ours and not reaped: the pid is the app's until we wait for it
            let start = crate::stage1::appexec::start_time(running.pid()).ok_or("the app is gone")?;
            let paths = crate::stage1::app_status::AppPaths::in_pod_dir(&self.pod_dir, app);
            crate::stage1::app_status::record_host_app(&paths, running.pid(), &start)
                .map_err(|e| format!("recording the app's process: {e}"))?;
            Ok(running)
        })();
        match started {
            Ok(running) => {
                let pid = running.pid();
                tracing::info!(app, pid, "host-PID app started");
                let cgroup_kill = cgroup_kill_of(template);
                self.hosts.insert(app.to_string(), HostApp { running, template: tpl, cgroup_kill });
                Ok(pid)
            }
            Err(e) => {
                // the unit ends with its template
                pidfd_kill(&tpl, libc::SIGKILL);
                Err(e)
            }
        }
    }

    /// Reaps host-PID app `app` (exited), records its exit and kills its template.
    fn reap(&mut self, app: &str) {
        let Some(h) = self.hosts.remove(app) else { return };
        let code = h.running.wait().unwrap_or(255);
        let paths = crate::stage1::app_status::AppPaths::in_pod_dir(&self.pod_dir, app);
        if let Err(e) = crate::stage1::app_status::record_exit(&paths, code) {
            tracing::warn!(app, error = %e, "cannot record the exit of a host-PID app");
        }
        pidfd_kill(&h.template, libc::SIGKILL);
        if let Some(kill) = &h.cgroup_kill
            && let Err(e) = std::fs::write(kill, "1")
        {
            tracing::warn!(app, error = %e, "cannot kill what a host-PID app left");
        }
    }

    /// At the pod's end: every host-PID app killed, reaped and recorded.
    fn kill_hosts(&mut self) {
        for h in self.hosts.values() {
            if let Some(fd) = h.running.pidfd() {
                let _ = crate::base::sys::pidfd_send_signal(fd.as_raw_fd(), libc::SIGKILL);
            }
        }
        let apps: Vec<String> = self.hosts.keys().cloned().collect();
        for app in apps {
            self.reap(&app);
        }
    }
}

impl logwriter::Hooks for HostApps {
    fn run(&mut self, app: &str, template: i32, start: &str) -> Result<i32, String> {
        HostApps::run(self, app, template, start)
    }

    /// Each host-PID app's pidfd, then its template's.
    fn fds(&mut self) -> Vec<RawFd> {
        self.order.clear();
        let mut fds = Vec::new();
        for (app, h) in &self.hosts {
            let pidfd = h.running.pidfd();
            if let Some(fd) = pidfd {
                fds.push(fd.as_raw_fd());
            }
            fds.push(h.template.as_raw_fd());
            self.order.push((app.clone(), pidfd.is_some()));
        }
        fds
    }

    fn events(&mut self, hit: &[bool]) {
        let (mut exited, mut orphaned) = (Vec::new(), Vec::new());
        let mut i = 0;
        for (app, has_pidfd) in &self.order {
            if *has_pidfd {
                if hit.get(i).copied().unwrap_or(false) {
                    exited.push(app.clone());
                }
                i += 1;
            }
            if hit.get(i).copied().unwrap_or(false) {
                orphaned.push(app.clone());
            }
            i += 1;
        }
        for app in &exited {
            self.reap(app);
        }
        // the template gone (its unit stopped): the app goes too, reaped once its pidfd says so
        for app in orphaned.iter().filter(|a| !exited.contains(a)) {
            if let Some(fd) = self.hosts.get(app).and_then(|h| h.running.pidfd()) {
                let _ = crate::base::sys::pidfd_send_signal(fd.as_raw_fd(), libc::SIGKILL);
            }
        }
    }

    fn pod_gone(&mut self) {
        self.kill_hosts();
    }

    fn warn(&self, message: &str) {
        tracing::warn!("{message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_host_pid_template_is_copied() {
        let cmdline =
            b".rkt-appexec\0pid=host\0root=/opt/stage2/a/rootfs\0bind=/dev\0/dev\0--\0/bin/busybox\0sh\0-c\0echo --\0";
        let (program, argv) = parse_template(".rkt-appexec\n", cmdline).expect("a template");
        assert_eq!((program.as_str(), argv), ("/bin/busybox", vec!["sh".to_string(), "-c".into(), "echo --".into()]));
        // appexec of another mode, or not appexec (any process of the node)
        let keep = b".rkt-appexec\0pid=keep\0--\0/bin/sh\0sh\0";
        assert_eq!(parse_template(".rkt-appexec\n", keep), None);
        assert_eq!(parse_template("sh\n", cmdline), None);
        assert_eq!(parse_template(".rkt-appexec\n", b".rkt-appexec\0pid=host\0--\0/bin/sh\0"), None);
    }
}
