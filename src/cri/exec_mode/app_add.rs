//! The arguments of `rktlet app add`, rkt's flags for what CRI's
//! CreateContainer asks: the exec design writes them for each CreateContainer
//! (`from_cri`, `to_argv`) and the CLI reads them back into the CRI request
//! they stand for (`to_cri`), so the two cannot drift apart. Also the exit
//! code that `app exec` ends with when rktlet itself failed.

use crate::proto::v1 as cri;
use std::path::PathBuf;

/// Flags of `rktlet app add` (rkt's, as rktlet passed them per CRI field).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct AddArgs {
    /// Pod UUID (or unique prefix).
    pub uuid: String,
    /// Image reference or id, already in the store (`rktlet fetch`).
    pub image: String,
    /// The app's name, as rkt names it (`--app=NAME` of the other verbs).
    #[arg(long)]
    pub name: String,
    /// Restart attempt (CRI metadata). Given, the app is named
    /// `<attempt>-<name>`, as CreateContainer names its apps.
    #[arg(long)]
    pub attempt: Option<u32>,
    /// Program to run instead of the image's entrypoint.
    #[arg(long)]
    pub exec: Option<String>,
    /// `KEY=VALUE` (repeatable).
    #[arg(long)]
    pub environment: Vec<String>,
    #[arg(long)]
    pub working_dir: Option<String>,
    /// Numeric uid to run as.
    #[arg(long)]
    pub user: Option<i64>,
    /// Numeric gid to run as.
    #[arg(long)]
    pub group: Option<i64>,
    /// Supplementary group ids, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub supplementary_gids: Vec<i64>,
    /// Memory limit in bytes.
    #[arg(long)]
    pub memory: Option<i64>,
    /// CPU shares.
    #[arg(long)]
    pub cpu_shares: Option<i64>,
    /// CPU limit in millicores, e.g. `500m`.
    #[arg(long)]
    pub cpu: Option<String>,
    /// Mount the root filesystem read-only.
    #[arg(long)]
    pub readonly_rootfs: bool,
    /// `name=N,kind=host,source=HOST,target=PATH[,readOnly=true]` (repeatable).
    #[arg(long)]
    pub mnt_volume: Vec<String>,
    /// `KEY=VALUE` annotation of the app (repeatable).
    #[arg(long)]
    pub user_annotation: Vec<String>,
    /// `KEY=VALUE` label of the app (repeatable).
    #[arg(long)]
    pub user_label: Vec<String>,
    /// Log file for the app's output (kubelet's format), relative to the pod's log directory.
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// Arguments after `--`.
    #[arg(last = true)]
    pub args: Vec<String>,
}

const CPU_PERIOD_US: i64 = 100_000;

fn key_values(flag: &str, items: &[String]) -> Result<Vec<(String, String)>, String> {
    items
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("--{flag} {kv:?} is not KEY=VALUE"))
        })
        .collect()
}

fn mount(spec: &str) -> Result<cri::Mount, String> {
    let fields = key_values("mnt-volume", &spec.split(',').map(str::to_string).collect::<Vec<_>>())?;
    let get = |k: &str| fields.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    if get("kind").is_some_and(|k| k != "host") {
        return Err(format!("--mnt-volume {spec:?}: only kind=host is supported"));
    }
    Ok(cri::Mount {
        host_path: get("source").ok_or_else(|| format!("--mnt-volume {spec:?} has no source"))?,
        container_path: get("target").ok_or_else(|| format!("--mnt-volume {spec:?} has no target"))?,
        readonly: get("readOnly").is_some_and(|v| v == "true"),
        ..Default::default()
    })
}

impl AddArgs {
    /// The flags rktlet would pass for a CRI CreateContainer.
    pub(crate) fn from_cri(pod_id: &str, c: &cri::ContainerConfig) -> AddArgs {
        let meta = c.metadata.clone().unwrap_or_default();
        let linux = c.linux.clone().unwrap_or_default();
        let res = linux.resources.unwrap_or_default();
        let sec = linux.security_context.unwrap_or_default();
        let (exec, args) = match c.command.split_first() {
            Some((exec, rest)) => (Some(exec.clone()), rest.iter().chain(&c.args).cloned().collect()),
            None => (None, c.args.clone()),
        };
        let pairs = |m: &std::collections::HashMap<String, String>| {
            let mut v: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
            v.sort();
            v
        };
        AddArgs {
            uuid: pod_id.to_string(),
            image: c.image.as_ref().map(|i| i.image.clone()).unwrap_or_default(),
            name: meta.name,
            attempt: Some(meta.attempt),
            exec,
            environment: c.envs.iter().map(|e| format!("{}={}", e.key, e.value)).collect(),
            working_dir: Some(c.working_dir.clone()).filter(|w| !w.is_empty()),
            user: sec.run_as_user.map(|u| u.value),
            group: sec.run_as_group.map(|g| g.value),
            supplementary_gids: sec.supplemental_groups,
            memory: Some(res.memory_limit_in_bytes).filter(|m| *m > 0),
            cpu_shares: Some(res.cpu_shares).filter(|s| *s > 0),
            cpu: (res.cpu_quota > 0 && res.cpu_period > 0)
                .then(|| format!("{}m", res.cpu_quota * 1000 / res.cpu_period)),
            readonly_rootfs: sec.readonly_rootfs,
            mnt_volume: c
                .mounts
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    format!(
                        "name=vol{i},kind=host,source={},target={},readOnly={}",
                        m.host_path, m.container_path, m.readonly
                    )
                })
                .collect(),
            user_annotation: pairs(&c.annotations),
            user_label: pairs(&c.labels),
            log_file: Some(PathBuf::from(&c.log_path)).filter(|p| !p.as_os_str().is_empty()),
            args,
        }
    }

    /// The command line after `app add`.
    pub(crate) fn to_argv(&self) -> Vec<String> {
        let mut v = vec![self.uuid.clone(), self.image.clone(), format!("--name={}", self.name)];
        if let Some(attempt) = self.attempt {
            v.push(format!("--attempt={attempt}"));
        }
        let mut opt = |flag: &str, value: Option<String>| {
            if let Some(value) = value {
                v.push(format!("--{flag}={value}"));
            }
        };
        opt("exec", self.exec.clone());
        opt("working-dir", self.working_dir.clone());
        opt("user", self.user.map(|u| u.to_string()));
        opt("group", self.group.map(|g| g.to_string()));
        opt("memory", self.memory.map(|m| m.to_string()));
        opt("cpu-shares", self.cpu_shares.map(|s| s.to_string()));
        opt("cpu", self.cpu.clone());
        opt("log-file", self.log_file.as_ref().map(|p| p.display().to_string()));
        if !self.supplementary_gids.is_empty() {
            let gids: Vec<String> = self.supplementary_gids.iter().map(i64::to_string).collect();
            v.push(format!("--supplementary-gids={}", gids.join(",")));
        }
        if self.readonly_rootfs {
            v.push("--readonly-rootfs".into());
        }
        for (flag, items) in [
            ("environment", &self.environment),
            ("mnt-volume", &self.mnt_volume),
            ("user-annotation", &self.user_annotation),
            ("user-label", &self.user_label),
        ] {
            v.extend(items.iter().map(|i| format!("--{flag}={i}")));
        }
        if !self.args.is_empty() {
            v.push("--".into());
            v.extend(self.args.iter().cloned());
        }
        v
    }

    /// The CRI request these flags stand for.
    pub(crate) fn to_cri(&self) -> Result<cri::CreateContainerRequest, String> {
        let envs = key_values("environment", &self.environment)?
            .into_iter()
            .map(|(key, value)| cri::KeyValue { key, value })
            .collect();
        let (command, args) = match &self.exec {
            Some(e) => (std::iter::once(e.clone()).chain(self.args.iter().cloned()).collect(), Vec::new()),
            None => (Vec::new(), self.args.clone()),
        };
        let (cpu_quota, cpu_period) = match &self.cpu {
            Some(c) => {
                let milli: i64 = c
                    .strip_suffix('m')
                    .unwrap_or(c)
                    .parse()
                    .map_err(|_| format!("--cpu {c:?} is not a number of millicores like 500m"))?;
                (milli * CPU_PERIOD_US / 1000, CPU_PERIOD_US)
            }
            None => (0, 0),
        };
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: self.name.clone(), attempt: self.attempt.unwrap_or(0) }),
            image: Some(cri::ImageSpec { image: self.image.clone(), ..Default::default() }),
            command,
            args,
            envs,
            working_dir: self.working_dir.clone().unwrap_or_default(),
            log_path: self.log_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            mounts: self.mnt_volume.iter().map(|m| mount(m)).collect::<Result<_, _>>()?,
            annotations: key_values("user-annotation", &self.user_annotation)?.into_iter().collect(),
            labels: key_values("user-label", &self.user_label)?.into_iter().collect(),
            linux: Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources {
                    memory_limit_in_bytes: self.memory.unwrap_or(0),
                    cpu_shares: self.cpu_shares.unwrap_or(0),
                    cpu_quota,
                    cpu_period,
                    ..Default::default()
                }),
                security_context: Some(cri::LinuxContainerSecurityContext {
                    run_as_user: self.user.map(|value| cri::Int64Value { value }),
                    run_as_group: self.group.map(|value| cri::Int64Value { value }),
                    supplemental_groups: self.supplementary_gids.clone(),
                    readonly_rootfs: self.readonly_rootfs,
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };
        Ok(cri::CreateContainerRequest {
            pod_sandbox_id: self.uuid.clone(),
            config: Some(config),
            sandbox_config: None,
        })
    }
}

/// The exit code of `app exec` when rktlet itself failed (the command did
/// not run, or was killed at the timeout), as `docker run` uses 125.
pub(crate) const EXEC_FAILED: i32 = 125;
