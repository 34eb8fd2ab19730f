//! `rktlet app add|start|stop|rm|list|status`: rkt's app-level commands on a
//! running pod, on the same data directory as the daemon. They call the same
//! domain functions as the CRI verbs (`container`; `app add` builds a CRI
//! request from rkt's flags and decodes it with `container::from_cri`, as
//! CreateContainer does), so the CLI and the daemon cannot disagree; the CLI
//! is what the exec design of the benchmark runs per call.

use crate::cli::out::{self, Format, GoTime};
use crate::config::Config;
use crate::container::stats;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use rkt::api_v1::AppInfo;
use rkt::pod::{Pod, PodState};
use rkt::schema::USER_ANNOTATION_POD_NAME;
use std::path::PathBuf;

/// Flags of `rktlet app add` (rkt's, as rktlet passed them per CRI field).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AddArgs {
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
    pub fn from_cri(pod_id: &str, c: &cri::ContainerConfig) -> AddArgs {
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
    pub fn to_argv(&self) -> Vec<String> {
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
    fn to_cri(&self) -> Result<cri::CreateContainerRequest, String> {
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

fn runtime(data_dir: PathBuf) -> Result<(tokio::runtime::Runtime, Runtime), String> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let config = Config { data_dir, ..Config::default() };
    let rt = Runtime::new(config).map_err(|e| e.to_string())?;
    Ok((tokio, rt))
}

fn id(uuid: &str, app: &str) -> String {
    format!("{uuid}:{app}")
}

/// The app `name` names among `apps`, as rkt names apps (`--app=NAME`): the
/// app of that name, else the one `app add --name=NAME` made
/// (`<attempt>-NAME`, the CRI's form), its latest attempt.
pub fn app_named<'a>(apps: impl IntoIterator<Item = &'a str>, name: &str) -> Option<&'a str> {
    let mut latest: Option<(u32, &str)> = None;
    for app in apps {
        if app == name {
            return Some(app);
        }
        let attempt = app.split_once('-').filter(|(_, rest)| *rest == name).and_then(|(n, _)| n.parse::<u32>().ok());
        if let Some(n) = attempt
            && latest.is_none_or(|(m, _)| n > m)
        {
            latest = Some((n, app));
        }
    }
    latest.map(|(_, app)| app)
}

/// The container id of pod `uuid`'s app `app` ([`app_named`]); as given
/// when the pod cannot be read (the verb then says what is wrong).
fn app_id(rt: &Runtime, uuid: &str, app: &str) -> String {
    let found = Pod::open(&rt.data, uuid)
        .ok()
        .and_then(|pod| rt.manifests.read(&pod).ok())
        .and_then(|m| app_named(m.apps.iter().map(|a| a.name.as_str()), app).map(str::to_string));
    id(uuid, found.as_deref().unwrap_or(app))
}

/// `app add`: prints the container id.
pub fn add(data_dir: PathBuf, a: AddArgs) -> Result<String, String> {
    let req = a.to_cri()?;
    let (tokio, rt) = runtime(data_dir)?;
    tokio
        .block_on(async {
            let mut request = crate::container::from_cri::create_request(&rt, &req)?;
            // without an attempt, the name is the app's, as rkt gives it
            if a.attempt.is_none() {
                request.app_name = Some(a.name.clone());
            }
            crate::container::create::create(&rt, request).await
        })
        .map_err(|e| e.to_string())
}

/// `app start|stop|rm UUID --app=NAME`.
pub fn lifecycle(data_dir: PathBuf, verb: &str, uuid: &str, app: &str, timeout: i64) -> Result<(), String> {
    let (tokio, rt) = runtime(data_dir)?;
    let container_id = app_id(&rt, uuid, app);
    let result = tokio.block_on(async {
        match verb {
            "start" => crate::container::start::start(&rt, &container_id).await,
            "stop" => {
                let grace = std::time::Duration::from_secs(u64::try_from(timeout).unwrap_or(0));
                crate::container::stop::stop(&rt, &container_id, grace).await
            }
            _ => {
                // CRI's RemoveContainer succeeds on a removed container (kubelet
                // retries); an operator naming an app that is not there is told so
                crate::container::open(&rt, &container_id)?;
                crate::container::remove::remove(&rt, &container_id).await
            }
        }
    });
    result.map_err(|e| e.to_string())
}

/// The exit code of `app exec` when rktlet itself failed (the command did
/// not run, or was killed at the timeout), as `docker run` uses 125.
pub const EXEC_FAILED: i32 = 125;

/// `app exec UUID --app=NAME -- CMD...`: the command's stdout, stderr and
/// exit code, through the same code as ExecSync.
pub fn exec(
    data_dir: PathBuf,
    uuid: &str,
    app: &str,
    timeout: i64,
    cmd: Vec<String>,
) -> Result<crate::stage1::exec::ExecOutput, String> {
    let (tokio, rt) = runtime(data_dir)?;
    let id = app_id(&rt, uuid, app);
    tokio.block_on(crate::container::exec::exec_sync(&rt, &id, cmd, timeout)).map_err(|e| e.to_string())
}

/// `app exec` on a terminal: the command gets a terminal of its own, sized
/// like ours and resized with it (SIGWINCH), our terminal in raw mode
/// meanwhile; stdin and output relayed as the streaming Exec does (the same
/// session code). Returns the command's exit code.
pub fn exec_tty(data_dir: PathBuf, uuid: &str, app: &str, cmd: Vec<String>) -> Result<i32, String> {
    use crate::stream::remotecommand::{self, Input, Output, Streams};
    use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
    use std::io::{Read, Write};
    let (tokio, rt) = runtime(data_dir)?;
    let id = app_id(&rt, uuid, app);
    let app = crate::container::exec::running_app(&rt, &id).map_err(|e| e.to_string())?;
    let stdin = std::io::stdin();
    let saved = tcgetattr(&stdin).map_err(|e| format!("reading the terminal's mode: {e}"))?;
    let mut raw = saved.clone();
    cfmakeraw(&mut raw);
    tcsetattr(&stdin, SetArg::TCSANOW, &raw).map_err(|e| format!("setting the terminal to raw mode: {e}"))?;
    let size = || {
        let mut ws = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCGWINSZ on our stdin with a valid winsize to fill.
        unsafe { libc::ioctl(libc::STDIN_FILENO, libc::TIOCGWINSZ, &mut ws) };
        format!("{{\"Width\":{},\"Height\":{}}}", ws.ws_col, ws.ws_row).into_bytes()
    };
    let result = tokio.block_on(async {
        let (in_tx, in_rx) = tokio::sync::mpsc::channel::<Input>(64);
        let (out_tx, mut out_rx) = tokio::sync::mpsc::channel::<Output>(64);
        let _ = in_tx.send(Input::Resize(size())).await;
        let keys = in_tx.clone();
        // our stdin, read on a thread of its own (it blocks until a key)
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::stdin().read(&mut buf) {
                if n == 0 || keys.blocking_send(Input::Stdin(buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        });
        let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
            .map_err(|e| format!("watching the terminal's size: {e}"))?;
        let streams = Streams { tty: true, stdin: true, stdout: true, stderr: false };
        let session = tokio::spawn(remotecommand::session(app, cmd, streams, in_rx, out_tx));
        let mut status = String::new();
        loop {
            tokio::select! {
                o = out_rx.recv() => match o {
                    Some(Output::Data(_, data)) => {
                        let mut out = std::io::stdout();
                        let _ = out.write_all(&data).and_then(|()| out.flush());
                    }
                    Some(Output::Status(json)) => status = json,
                    None => break,
                },
                _ = winch.recv() => {
                    let _ = in_tx.send(Input::Resize(size())).await;
                }
            }
        }
        let _ = session.await;
        Ok::<String, String>(status)
    });
    let _ = tcsetattr(&stdin, SetArg::TCSANOW, &saved);
    exit_code_of(&result?)
}

/// The exit code a remote-command status stands for.
fn exit_code_of(status: &str) -> Result<i32, String> {
    let v: serde_json::Value = serde_json::from_str(status).map_err(|e| format!("no exit status ({e})"))?;
    match v["status"].as_str() {
        Some("Success") => Ok(0),
        _ => match v["details"]["causes"][0]["message"].as_str().and_then(|c| c.parse().ok()) {
            Some(code) => Ok(code),
            None => Err(v["message"].as_str().unwrap_or("exec failed").to_string()),
        },
    }
}

/// `app list UUID` / `app status UUID --app=NAME`: rkt's NAME/STATE table
/// (`no_legend`: without its header) and `key=value` lines, or JSON (rkt's
/// `v1.App`, rktlet's fields after rkt's; `app list` as an array, which rkt
/// did not print).
pub fn show(
    data_dir: PathBuf,
    uuid: &str,
    app: Option<&str>,
    format: Format,
    no_legend: bool,
) -> Result<String, String> {
    let (_tokio, rt) = runtime(data_dir)?;
    let mut pod = Pod::open(&rt.data, uuid).map_err(|e| e.to_string())?;
    // no daemon may be listening to the pod: read its apps' exits from its systemd first
    rt.reconcile_pod(&mut pod);
    let running = pod.state().map_err(|e| e.to_string())? == PodState::Running;
    let manifest = pod.read_manifest().map_err(|e| e.to_string())?;
    let named = app.and_then(|name| app_named(manifest.apps.iter().map(|a| a.name.as_str()), name));
    let app = named.or(app);
    let mut rows: Vec<AppInfo> = manifest
        .apps
        .iter()
        .filter(|a| app.is_none_or(|name| a.name == name))
        .map(|a| crate::container::status::app_info(&pod, a, running))
        .collect();
    if let (Some(name), Some(one)) = (app, rows.first_mut())
        && one.state == "running"
    {
        let id = crate::container::meta::container_id(&pod.uuid().to_string(), name);
        one.usage = crate::container::status::usage(&rt, &id).ok();
    }
    match (app, rows.first(), format) {
        (Some(name), None, _) => Err(format!("app {name} not found in pod {uuid}")),
        (Some(_), Some(one), Format::Tabbed) => Ok(out::app_status_text(one, GoTime::local)),
        (Some(_), Some(one), json) => out::go_json(one, json),
        (None, _, Format::Tabbed) => Ok(out::app_list_table(&rows, no_legend)),
        (None, _, json) => out::go_json(&rows, json),
    }
}

/// One row of `rktlet stats`.
#[derive(Debug, serde::Serialize)]
pub struct StatsRow {
    pub pod: String,
    pub pod_name: String,
    /// Empty for the pod's own row.
    pub container: String,
    pub name: String,
    pub cpu_nano_cores: Option<u64>,
    pub cpu_total_ns: Option<u64>,
    pub memory_working_set_bytes: Option<u64>,
    pub writable_layer_bytes: Option<u64>,
}

impl StatsRow {
    /// A row from one sample (`writable`: a container's writable layer's bytes).
    fn new(
        pod: &str,
        pod_name: &str,
        container: String,
        name: String,
        s: &stats::Sample,
        writable: Option<u64>,
    ) -> Self {
        StatsRow {
            pod: pod.to_string(),
            pod_name: pod_name.to_string(),
            container,
            name,
            cpu_nano_cores: s.usage.cpu_ns.and(s.cpu_rate),
            cpu_total_ns: s.usage.cpu_ns,
            memory_working_set_bytes: s.usage.memory.map(|m| m.working_set_bytes),
            writable_layer_bytes: writable,
        }
    }
}

/// `rktlet stats`: every ready pod and its running containers, with CPU as a
/// rate over 200 ms, memory working set and writable layer, as a table or JSON.
pub fn stats(data_dir: PathBuf, json: bool) -> Result<String, String> {
    let (_tokio, rt) = runtime(data_dir)?;
    let no_labels = std::collections::HashMap::new();
    // two samples: the CPU rates are those since the first
    let pods = || stats::ready_pods(&rt, "", &no_labels).map_err(|e| e.to_string());
    let sample = |view: &stats::PodView| {
        let pod = stats::pod_sample(&rt, view);
        let apps: Vec<_> = stats::running_apps(view)
            .map(|(app, status)| {
                let sub = view.subcgroup.as_deref();
                let (s, writable) = stats::app_sample(&rt, &view.sandbox.pod, &app.name, &status.id, sub);
                (status.clone(), s, writable)
            })
            .collect();
        (pod, apps)
    };
    for view in pods()? {
        sample(&view);
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut rows = Vec::new();
    for view in pods()? {
        let (pod, apps) = sample(&view);
        let id = view.sandbox.pod.uuid().to_string();
        let pod_name =
            view.sandbox.manifest.user_annotations.get(USER_ANNOTATION_POD_NAME).cloned().unwrap_or_default();
        rows.push(StatsRow::new(&id, &pod_name, String::new(), String::new(), &pod, None));
        for (status, s, writable) in apps {
            let name = status.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
            rows.push(StatsRow::new(&id, &pod_name, status.id.clone(), name, &s, writable.map(|(b, _)| b)));
        }
    }
    if json {
        return serde_json::to_string(&rows).map_err(|e| e.to_string());
    }
    let opt = |x: Option<u64>, div: f64, digits: usize| {
        x.map_or("-".to_string(), |n| format!("{:.*}", digits, n as f64 / div))
    };
    let mut out = String::from("POD\tNAME\tCONTAINER\tCPU(cores)\tMEM(MiB)\tWRITABLE(MiB)\n");
    for r in rows {
        let short = r.pod.get(..8).unwrap_or(&r.pod);
        let who = if r.container.is_empty() { "-".to_string() } else { r.name.clone() };
        out.push_str(&format!(
            "{short}\t{}\t{who}\t{}\t{}\t{}\n",
            r.pod_name,
            opt(r.cpu_nano_cores, 1e9, 3),
            opt(r.memory_working_set_bytes, 1048576.0, 1),
            opt(r.writable_layer_bytes, 1048576.0, 1)
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::app_named;

    #[test]
    fn apps_by_rkts_name_or_the_cri_attempts() {
        let apps = ["0-web", "1-web", "bb", "2-db", "x-web"];
        assert_eq!(app_named(apps, "bb"), Some("bb"), "rkt's own name");
        assert_eq!(app_named(apps, "web"), Some("1-web"), "the latest attempt");
        assert_eq!(app_named(apps, "1-web"), Some("1-web"), "the CRI's name itself");
        assert_eq!(app_named(apps, "db"), Some("2-db"));
        assert_eq!(app_named(apps, "nosuch"), None);
        assert_eq!(app_named(["web-0"], "0"), None, "an attempt is a number before the name");
    }
}
