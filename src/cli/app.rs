//! `rktlet app add|start|stop|rm|list|status`: rkt's app-level commands on a
//! running pod, on the same data directory as the daemon. They call the same
//! domain functions as the CRI verbs (`container`; `app add` builds a CRI
//! request from rkt's flags and decodes it with `container::from_cri`, as
//! CreateContainer does), so the CLI and the daemon cannot disagree; the CLI
//! is what the exec design of the benchmark runs per call.

use crate::cli::out::{self, Format, GoTime};
use crate::config::Config;
use crate::container::stats;
use crate::cri::exec_mode::app_add::AddArgs;
use crate::runtime::Runtime;
use rkt::api_v1::AppInfo;
use rkt::pod::{Pod, PodState};
use rkt::schema::USER_ANNOTATION_POD_NAME;
use std::path::PathBuf;

fn runtime(data_dir: PathBuf) -> Result<(tokio::runtime::Runtime, std::sync::Arc<Runtime>), String> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let config = Config { data_dir, ..Config::default() };
    let rt = Runtime::new(config).map_err(|e| e.to_string())?;
    Ok((tokio, std::sync::Arc::new(rt)))
}

fn id(uuid: &str, app: &str) -> String {
    format!("{uuid}:{app}")
}

/// The app `name` names among `apps`, as rkt names apps (`--app=NAME`): the
/// app of that name, else the one `app add --name=NAME` made
/// (`<attempt>-NAME`, the CRI's form), its latest attempt.
pub(crate) fn app_named<'a>(apps: impl IntoIterator<Item = &'a str>, name: &str) -> Option<&'a str> {
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
pub(crate) fn add(data_dir: PathBuf, a: AddArgs) -> Result<String, String> {
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
pub(crate) fn lifecycle(data_dir: PathBuf, verb: &str, uuid: &str, app: &str, timeout: i64) -> Result<(), String> {
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

/// `app exec UUID --app=NAME -- CMD...`: the command's stdout, stderr and
/// exit code, through the same code as ExecSync.
pub(crate) fn exec(
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
pub(crate) fn exec_tty(data_dir: PathBuf, uuid: &str, app: &str, cmd: Vec<String>) -> Result<i32, String> {
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
pub(crate) fn show(
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
pub(crate) struct StatsRow {
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
pub(crate) fn stats(data_dir: PathBuf, json: bool) -> Result<String, String> {
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
