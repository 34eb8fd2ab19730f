//! `rktlet serve --exec-mode`: the original rktlet's design, for comparison.
//! Every CRI call that rktlet served by exec'ing `rkt` is served here by
//! exec'ing this binary's rkt-style CLI with the same call mapping
//! (`reference/rkt.md` §7.4), including its N+1 patterns: ListContainers is
//! one `list` plus one `app status` per app, ListImages one `image list` plus
//! one `image cat-manifest` per image. The CLI runs the same library code as
//! the daemon, so the difference measured is only the design: a process per
//! call, state re-read and re-parsed by every process, JSON in between.
//!
//! Calls rktlet answered without exec (Version, Status, RuntimeConfig, ...)
//! and the ones it did not implement are served in-process here too.
//!
//! Deviations, each in the exec design's favour: RunPodSandbox launches the
//! sandbox exactly as the in-process daemon does (it is an exec in both
//! designs) and then, like rktlet, execs `status` to check readiness, instead
//! of polling a uuid file every 100 ms; pod creation times are converted from
//! rkt's seconds to nanoseconds (rktlet passed seconds as nanoseconds).
//!
//! PullImage of an `aci:` reference (which rktlet did not have) fetches the
//! ACI with the daemon's `trust_dir` as `--local-config` and without the
//! `--insecure-options=image` every other call gets, so its signature is
//! checked as in the daemon; it is then found by that reference.

pub(crate) mod app_add;
mod containers;
mod images;
mod pods;

pub(crate) use containers::*;
pub(crate) use images::*;
pub(crate) use pods::*;

use crate::runtime::Runtime;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tonic::Status;

/// How to run the CLI for a daemon's data directory.
#[derive(Debug)]
pub(crate) struct ExecMode {
    rt: Arc<Runtime>,
    program: PathBuf,
    /// Global flags given to every call (rktlet: `--dir=... --insecure-options=image,ondisk`).
    global: Vec<OsString>,
    /// Global flags of an ACI fetch: the data dir and the trust store's
    /// directory, no insecure options (ACI signatures are always checked).
    aci_global: Vec<OsString>,
}

impl ExecMode {
    /// Execs `--rkt-path` when configured, else this binary.
    pub(crate) fn new(rt: Arc<Runtime>) -> std::io::Result<Self> {
        let program = rt.sandbox_program()?;
        let own = rt.config.rkt_path.is_none();
        let dir = flag("dir", rt.config.data_dir.as_os_str());
        let aci_global = vec![dir.clone(), flag("local-config", rt.config.trust_dir.as_os_str())];
        let mut global: Vec<OsString> = vec![dir, "--insecure-options=image,ondisk".into()];
        if own {
            // rktlet-only flags: where the registry and CNI configuration are
            if let Some(dir) = rt.config.registry_config.parent()
                && rt.config.registry_config.file_name().is_some_and(|n| n == "registries.toml")
            {
                global.push(flag("local-config", dir.as_os_str()));
            }
            global.push(flag("cni-conf-dir", rt.config.cni_conf_dir.as_os_str()));
            global.extend(rt.config.cni_bin_dirs.iter().map(|d| flag("cni-bin-dir", d.as_os_str())));
        }
        Ok(ExecMode { rt, program, global, aci_global })
    }

    /// Whether the CLI run is this binary's (else `--rkt-path`'s rkt).
    fn own_cli(&self) -> bool {
        self.rt.config.rkt_path.is_none()
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Runs one CLI call and returns what it left, whatever its exit status.
    async fn output<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Result<std::process::Output, Status> {
        self.output_with(&self.global, args).await
    }

    /// [`Self::output`] with other global flags.
    async fn output_with<S: AsRef<std::ffi::OsStr>>(
        &self,
        global: &[OsString],
        args: &[S],
    ) -> Result<std::process::Output, Status> {
        let start = Instant::now();
        let out = tokio::process::Command::new(&self.program)
            .args(global)
            .args(args)
            .stdin(std::process::Stdio::null())
            // trees a call renders are synced by this daemon, not waited for
            .env(rkt::tree::SYNC_LATER_ENV, "1")
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| Status::internal(format!("exec {}: {e}", self.program.display())))?;
        tracing::debug!(call = words(args), micros = start.elapsed().as_micros() as u64, "exec");
        Ok(out)
    }

    /// Runs one CLI call; its stdout on success, its stderr as the error.
    async fn run<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Result<String, Status> {
        self.run_with(&self.global, args).await
    }

    /// [`Self::run`] with other global flags.
    async fn run_with<S: AsRef<std::ffi::OsStr>>(&self, global: &[OsString], args: &[S]) -> Result<String, Status> {
        let out = self.output_with(global, args).await?;
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        Err(failure(args, &out))
    }

    /// Runs a call whose output is JSON of `T`.
    async fn json<T: serde::de::DeserializeOwned, S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Result<T, Status> {
        let out = self.run(args).await?;
        serde_json::from_str(&out).map_err(|e| Status::internal(format!("cannot parse the output of the CLI: {e}")))
    }
}

/// The first two words of a call, to name it.
fn words<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let words: Vec<String> = args.iter().take(2).map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
    words.join(" ")
}

/// The error a failed call reports, from its stderr.
fn failure<S: AsRef<std::ffi::OsStr>>(args: &[S], out: &std::process::Output) -> Status {
    let err = String::from_utf8_lossy(&out.stderr);
    let msg = err.trim().trim_start_matches("rktlet: ").to_string();
    status_of_output(&format!("{} failed ({}): {msg}", words(args), out.status))
}

fn flag(name: &str, value: &std::ffi::OsStr) -> OsString {
    let mut s = OsString::from(format!("--{name}="));
    s.push(value);
    s
}

/// The gRPC code a CRI client expects, guessed from the CLI's message the
/// way a caller of a CLI must.
fn status_of_output(msg: &str) -> Status {
    let lower = msg.to_lowercase();
    if lower.contains("failed verification") {
        // an image refused by its signature, as the daemon answers it
        Status::data_loss(msg)
    } else if lower.contains("not found") || lower.contains("no such pod") {
        Status::not_found(msg)
    } else if lower.contains("invalid") || lower.contains("is required") || lower.contains("is not ") {
        Status::invalid_argument(msg)
    } else if lower.contains("did not finish within") {
        Status::deadline_exceeded(msg)
    } else if lower.contains("is not running") {
        Status::failed_precondition(msg)
    } else if lower.contains("already exists") {
        Status::already_exists(msg)
    } else {
        Status::unknown(msg)
    }
}

/// A call's outcome with NotFound counted as success (removals are idempotent).
fn ok_if_missing<T>(r: Result<T, Status>) -> Result<(), Status> {
    match r {
        Err(s) if s.code() != tonic::Code::NotFound => Err(s),
        _ => Ok(()),
    }
}
