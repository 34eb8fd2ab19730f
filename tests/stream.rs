//! Exec through the streaming server, with an independent WebSocket client
//! (tokio-tungstenite) speaking Kubernetes' channel protocols against real
//! containers: output on its channels and the exit status on the error
//! channel, stdin and its v5 close, a TTY with resize, base64 framing,
//! single-use URLs, request checks, and a dropped client killing the command.

mod common;

use common::{Daemon, assert_no_leaks, host_network, pod_config};
use futures::{SinkExt, StreamExt};
use rktlet::proto::v1 as cri;
use rktlet::proto::v1::runtime_service_client::RuntimeServiceClient;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};
use tonic::transport::Channel;

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn exec_url(rt: &mut RuntimeServiceClient<Channel>, id: &str, cmd: &[&str], flags: [bool; 4]) -> String {
    let [tty, stdin, stdout, stderr] = flags;
    rt.exec(cri::ExecRequest {
        container_id: id.into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        tty,
        stdin,
        stdout,
        stderr,
        ..Default::default()
    })
    .await
    .expect("Exec")
    .into_inner()
    .url
}

async fn connect(url: &str, protocol: &str) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    let mut req = url.into_client_request().expect("request");
    if !protocol.is_empty() {
        req.headers_mut().insert("Sec-WebSocket-Protocol", protocol.parse().expect("header"));
    }
    let (ws, resp) = tokio_tungstenite::connect_async(req).await?;
    let chosen = resp.headers().get("Sec-WebSocket-Protocol").and_then(|v| v.to_str().ok()).unwrap_or("");
    assert_eq!(chosen, protocol);
    Ok(ws)
}

/// Everything the server sends until it closes: (channel, bytes) in order,
/// decoding base64 text frames.
async fn collect(ws: &mut Ws) -> Vec<(u8, Vec<u8>)> {
    use base64::Engine;
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Ok(Some(m)) = tokio::time::timeout_at(deadline.into(), ws.next()).await {
        match m.expect("frame") {
            Message::Binary(b) if !b.is_empty() => out.push((b[0], b[1..].to_vec())),
            Message::Text(t) if !t.is_empty() => {
                let b = t.as_bytes();
                let data = base64::engine::general_purpose::STANDARD.decode(&b[1..]).expect("base64");
                out.push((b[0] - b'0', data));
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
    out
}

fn channel(out: &[(u8, Vec<u8>)], ch: u8) -> String {
    out.iter().filter(|(c, _)| *c == ch).map(|(_, d)| String::from_utf8_lossy(d).into_owned()).collect()
}

fn status(out: &[(u8, Vec<u8>)]) -> serde_json::Value {
    serde_json::from_str(&channel(out, 3)).expect("a status on the error channel")
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_streams_over_websocket() {
    let d = Daemon::start(&[]);
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let pod_cfg = host_network(pod_config("streams", &[]));
    let pod = common::run_pod(&mut rt, &pod_cfg).await;
    let ctr =
        common::create_container(&mut rt, &pod, &pod_cfg, common::container_config("box", &image, &["sleep", "1000"]))
            .await;
    rt.start_container(cri::StartContainerRequest { container_id: ctr.clone() }).await.expect("start");

    // stdout, stderr and a non-zero exit
    let url =
        exec_url(&mut rt, &ctr, &["sh", "-c", "echo out; echo err >&2; exit 3"], [false, false, true, true]).await;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let mut ws = connect(&url.replace("http://", "ws://"), "v4.channel.k8s.io").await.expect("connect");
    let out = collect(&mut ws).await;
    assert_eq!((channel(&out, 1), channel(&out, 2)), ("out\n".to_string(), "err\n".to_string()), "{out:?}");
    let st = status(&out);
    assert_eq!((st["status"].as_str(), st["reason"].as_str()), (Some("Failure"), Some("NonZeroExitCode")));
    assert_eq!(st["details"]["causes"][0]["message"], "3");
    // the URL was single-use
    let again = connect(&url.replace("http://", "ws://"), "v4.channel.k8s.io").await;
    assert!(matches!(again, Err(tokio_tungstenite::tungstenite::Error::Http(ref r)) if r.status() == 404), "{again:?}");

    // the protocols before v4, as Kubernetes' e2e check speaks them through the API server and
    // kubelet: no status on success (every frame but stdout's carries nothing), the error's text
    for protocol in ["channel.k8s.io", "base64.channel.k8s.io", ""] {
        let url = exec_url(&mut rt, &ctr, &["sh", "-c", "echo container is alive"], [false, false, true, true]).await;
        let mut ws = connect(&url.replace("http://", "ws://"), protocol).await.expect("connect");
        let out = collect(&mut ws).await;
        assert_eq!(channel(&out, 1), "container is alive\n", "{protocol}: {out:?}");
        assert!(out.iter().all(|(c, d)| *c == 1 || d.is_empty()), "{protocol}: only stdout carries data: {out:?}");
        let url = exec_url(&mut rt, &ctr, &["sh", "-c", "exit 3"], [false, false, true, true]).await;
        let mut ws = connect(&url.replace("http://", "ws://"), protocol).await.expect("connect");
        let out = collect(&mut ws).await;
        assert_eq!(channel(&out, 3), "command terminated with non-zero exit code: exit status 3", "{protocol}");
    }

    // stdin, closed with v5's close signal
    let url = exec_url(&mut rt, &ctr, &["cat"], [false, true, true, false]).await;
    let mut ws = connect(&url.replace("http://", "ws://"), "v5.channel.k8s.io").await.expect("connect");
    ws.send(Message::Binary([&[0u8][..], b"hello stdin\n"].concat().into())).await.expect("stdin");
    ws.send(Message::Binary(vec![255u8, 0].into())).await.expect("close stdin");
    let out = collect(&mut ws).await;
    assert_eq!(channel(&out, 1), "hello stdin\n");
    assert_eq!(status(&out)["status"], "Success");

    // a TTY sized by a resize message, in base64 framing
    let url = exec_url(
        &mut rt,
        &ctr,
        &["sh", "-c", "read x; stty size; [ -t 0 ] && echo tty; ls -l $(tty)"],
        [true, true, true, false],
    )
    .await;
    let mut ws = connect(&url.replace("http://", "ws://"), "v4.base64.channel.k8s.io").await.expect("connect");
    use base64::Engine;
    let b64 = |ch: u8, data: &[u8]| {
        Message::Text(format!("{}{}", ch, base64::engine::general_purpose::STANDARD.encode(data)).into())
    };
    ws.send(b64(4, br#"{"Width":100,"Height":40}"#)).await.expect("resize");
    ws.send(b64(0, b"go\r")).await.expect("stdin");
    let out = collect(&mut ws).await;
    let text = channel(&out, 1);
    assert!(text.contains("40 100"), "{text:?}");
    assert!(text.contains("tty"), "{text:?}");
    // the terminal is the pod's: its name exists inside the container
    assert!(text.contains(" /dev/pts/") && !text.contains("No such file"), "{text:?}");
    assert_eq!(status(&out)["status"], "Success");

    // requests a stream cannot serve are refused before any URL is made
    for (flags, code) in
        [([true, false, true, true], tonic::Code::InvalidArgument), ([false; 4], tonic::Code::InvalidArgument)]
    {
        let r = rt
            .exec(cri::ExecRequest {
                container_id: ctr.clone(),
                cmd: vec!["true".into()],
                tty: flags[0],
                stdin: flags[1],
                stdout: flags[2],
                stderr: flags[3],
                ..Default::default()
            })
            .await;
        assert_eq!(r.map(|_| ()).map_err(|e| e.code()), Err(code));
    }
    let gone = rt
        .exec(cri::ExecRequest {
            container_id: format!("{pod}:0-nope"),
            cmd: vec!["true".into()],
            stdout: true,
            ..Default::default()
        })
        .await;
    assert_eq!(gone.map(|_| ()).map_err(|e| e.code()), Err(tonic::Code::NotFound));

    // a client that goes away takes its command with it
    let url = exec_url(&mut rt, &ctr, &["sleep", "4242"], [false, false, true, false]).await;
    let ws = connect(&url.replace("http://", "ws://"), "v4.channel.k8s.io").await.expect("connect");
    let deadline = Instant::now() + Duration::from_secs(5);
    while common::processes_mentioning("sleep 4242").is_empty() {
        assert!(Instant::now() < deadline, "the exec'd command never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(ws);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !common::processes_mentioning("sleep 4242").is_empty() {
        assert!(Instant::now() < deadline, "the command outlived its client");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

/// Builds the SPDY client (tests/spdy-client, Go + Debian's spdystream) once.
fn spdy_client() -> std::path::PathBuf {
    static CLIENT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
            let out = root.join("target/spdy-client");
            let status = std::process::Command::new("go")
                .args(["build", "-o"])
                .arg(&out)
                .arg(root.join("tests/spdy-client/main.go"))
                .env("GOPATH", "/usr/share/gocode")
                .env("GO111MODULE", "off")
                .env("GOCACHE", root.join("target/go-cache"))
                .status()
                .expect("go (golang-go) is installed by scripts/install-deps.sh");
            assert!(status.success(), "building the SPDY test client failed");
            out
        })
        .clone()
}

/// Runs the SPDY client against `url`: (stdout, stderr, status JSON).
fn spdy(url: &str, flags: &[&str], stdin: &[u8]) -> (String, String, serde_json::Value) {
    use std::io::Write;
    let status_file = tempfile::NamedTempFile::new().expect("tmp");
    let mut child = std::process::Command::new(spdy_client())
        .args(flags)
        .arg("-status")
        .arg(status_file.path())
        .arg(url)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spdy client");
    child.stdin.take().expect("stdin").write_all(stdin).expect("write stdin");
    let out = child.wait_with_output().expect("spdy client output");
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "spdy client failed: {stderr}");
    let status = std::fs::read_to_string(status_file.path()).expect("status");
    (stdout, stderr, serde_json::from_str(&status).unwrap_or_else(|e| panic!("{e}: {status:?}")))
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_streams_over_spdy_to_kubernetes_own_client_library() {
    let client = tokio::task::spawn_blocking(spdy_client);
    let d = Daemon::start(&[]);
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let pod_cfg = host_network(pod_config("spdy", &[]));
    let pod = common::run_pod(&mut rt, &pod_cfg).await;
    let ctr =
        common::create_container(&mut rt, &pod, &pod_cfg, common::container_config("box", &image, &["sleep", "1000"]))
            .await;
    rt.start_container(cri::StartContainerRequest { container_id: ctr.clone() }).await.expect("start");
    client.await.expect("go build");

    let url =
        exec_url(&mut rt, &ctr, &["sh", "-c", "echo out; echo err >&2; exit 5"], [false, false, true, true]).await;
    let (stdout, stderr, status) =
        tokio::task::spawn_blocking(move || spdy(&url, &["-stdout", "-stderr"], b"")).await.expect("client");
    assert_eq!((stdout.as_str(), stderr.as_str()), ("out\n", "err\n"));
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(status["details"]["causes"][0]["message"], "5");

    // stdin until EOF, a large output (beyond SPDY's 64 KiB initial window)
    let url = exec_url(
        &mut rt,
        &ctr,
        &["sh", "-c", "cat; head -c 300000 /dev/zero | tr '\\0' x"],
        [false, true, true, false],
    )
    .await;
    let (stdout, _, status) =
        tokio::task::spawn_blocking(move || spdy(&url, &["-stdin", "-stdout"], b"from stdin\n")).await.expect("client");
    assert!(stdout.starts_with("from stdin\n"), "{}", &stdout[..stdout.len().min(40)]);
    assert_eq!(stdout.len(), "from stdin\n".len() + 300_000);
    assert_eq!(status["status"], "Success");

    // a TTY sized through the resize stream
    let url = exec_url(&mut rt, &ctr, &["sh", "-c", "sleep 0.3; stty size"], [true, false, true, false]).await;
    let (stdout, _, status) =
        tokio::task::spawn_blocking(move || spdy(&url, &["-stdout", "-tty", "-resize", "120x33"], b""))
            .await
            .expect("client");
    assert!(stdout.contains("33 120"), "{stdout:?}");
    assert_eq!(status["status"], "Success");

    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

/// A pod on a test network of its own whose container `web` serves
/// "hello from httpd" on port 8080 (busybox httpd). Fields drop in order:
/// the daemon, then the network, then its directory.
struct HttpdPod {
    d: Daemon,
    rt: RuntimeServiceClient<Channel>,
    pod: String,
    web: String,
    _net: common::TestNetwork,
    _dir: tempfile::TempDir,
}

async fn httpd_pod(name: &str) -> HttpdPod {
    let dir = tempfile::tempdir().expect("tempdir");
    let net = common::TestNetwork::new(dir.path());
    let conf = net.conf_dir.to_string_lossy().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni"]);
    let mut rt = d.runtime().await;
    let pod_cfg = pod_config(name, &[]);
    let pod = common::run_pod(&mut rt, &pod_cfg).await;
    let image = common::pull_busybox(&d).await;
    let httpd = "mkdir -p /tmp/www && echo hello from httpd > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www";
    let web = common::create_container(
        &mut rt,
        &pod,
        &pod_cfg,
        common::container_config("web", &image, &["sh", "-c", httpd]),
    )
    .await;
    rt.start_container(cri::StartContainerRequest { container_id: web.clone() }).await.expect("start httpd");
    HttpdPod { d, rt, pod, web, _net: net, _dir: dir }
}

#[tokio::test(flavor = "multi_thread")]
async fn port_forward_over_spdy_and_websocket_into_the_pod_network() {
    let client = tokio::task::spawn_blocking(spdy_client);
    let HttpdPod { d, mut rt, pod, _net, _dir, .. } = httpd_pod("forwarded").await;
    client.await.expect("go build");
    let get = "GET /index.html HTTP/1.0\r\n\r\n";
    // httpd may need a moment to listen
    let deadline = Instant::now() + Duration::from_secs(10);
    let url = |rt: &mut RuntimeServiceClient<Channel>, ports: Vec<i32>| {
        let mut rt = rt.clone();
        let pod = pod.clone();
        async move {
            rt.port_forward(cri::PortForwardRequest { pod_sandbox_id: pod, port: ports })
                .await
                .expect("PortForward")
                .into_inner()
                .url
        }
    };

    // SPDY, as kubectl port-forward through kubelet
    let (out, err) = loop {
        let u = url(&mut rt, vec![8080]).await;
        let (out, err) = tokio::task::spawn_blocking(move || {
            let o = std::process::Command::new(spdy_client())
                .args(["-portforward", "8080", "-send", get, &u])
                .output()
                .expect("client");
            (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
        })
        .await
        .expect("client");
        if !err.contains("refused") || Instant::now() > deadline {
            break (out, err);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(out.starts_with("HTTP/1.") && out.ends_with("hello from httpd\n"), "{out:?} / {err}");
    assert_eq!(err, "");

    // a port nothing listens on: the error stream says so
    let u = url(&mut rt, vec![]).await;
    let (out, err) = tokio::task::spawn_blocking(move || {
        let o = std::process::Command::new(spdy_client())
            .args(["-portforward", "9", "-send", "x\n", &u])
            .output()
            .expect("client");
        (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
    })
    .await
    .expect("client");
    assert_eq!(out, "");
    assert!(err.contains("error forwarding port 9") && err.contains("refused"), "{err}");

    // WebSocket: each channel opens with its port, little-endian; the same
    // channels under every sub-protocol kubelet's server takes (or none)
    for protocol in ["v4.channel.k8s.io", "portforward.k8s.io", "channel.k8s.io", ""] {
        let u = url(&mut rt, vec![8080]).await;
        let mut ws = connect(&format!("{}?port=8080", u.replace("http://", "ws://")), protocol).await.expect("ws");
        let first: Vec<Message> =
            vec![ws.next().await.expect("f").expect("f"), ws.next().await.expect("f").expect("f")];
        assert_eq!(
            first,
            vec![Message::Binary(vec![0, 0x90, 0x1f].into()), Message::Binary(vec![1, 0x90, 0x1f].into())],
            "{protocol}"
        );
        ws.send(Message::Binary([&[0u8][..], get.as_bytes()].concat().into())).await.expect("send");
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Ok(Some(Ok(m))) = tokio::time::timeout_at(deadline.into(), ws.next()).await {
            match m {
                Message::Binary(b) if b.first() == Some(&0) => got.extend_from_slice(&b[1..]),
                Message::Close(_) => break,
                _ => {}
            }
            if got.ends_with(b"hello from httpd\n") {
                break;
            }
        }
        let got = String::from_utf8_lossy(&got);
        assert!(got.starts_with("HTTP/1.") && got.ends_with("hello from httpd\n"), "{protocol}: {got:?}");
        drop(ws);
    }

    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

#[tokio::test(flavor = "multi_thread")]
async fn attach_follows_output_for_several_clients_until_the_container_exits() {
    // the SPDY client is built before the container starts: its build may
    // outlast the container (CI once saw Attach find it exited)
    tokio::task::spawn_blocking(spdy_client).await.expect("go build");
    let d = Daemon::start(&[]);
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut pod_cfg = host_network(pod_config("attached", &[]));
    pod_cfg.log_directory = dir.path().to_string_lossy().into_owned();
    let pod = common::run_pod(&mut rt, &pod_cfg).await;
    let script = "sleep 0.5; for i in 1 2 3 4 5 6; do echo tick $i; echo err $i >&2; sleep 0.1; done";
    let ctr = common::create_container(
        &mut rt,
        &pod,
        &pod_cfg,
        common::container_config("talker", &image, &["sh", "-c", script]),
    )
    .await;
    rt.start_container(cri::StartContainerRequest { container_id: ctr.clone() }).await.expect("start");

    let attach_url = |rt: &mut RuntimeServiceClient<Channel>| {
        let (mut rt, ctr) = (rt.clone(), ctr.clone());
        async move {
            rt.attach(cri::AttachRequest { container_id: ctr, stdout: true, stderr: true, ..Default::default() })
                .await
                .expect("Attach")
                .into_inner()
                .url
        }
    };
    // two readers at once: a WebSocket client and the SPDY one
    let (ws_url, spdy_url) = (attach_url(&mut rt).await, attach_url(&mut rt).await);
    let mut ws = connect(&ws_url.replace("http://", "ws://"), "v4.channel.k8s.io").await.expect("connect");
    let spdy_run = tokio::task::spawn_blocking(move || spdy(&spdy_url, &["-stdout", "-stderr"], b""));
    let out = collect(&mut ws).await;
    let (spdy_out, spdy_err, spdy_status) = spdy_run.await.expect("spdy attach");
    let expected_out: String = (1..=6).map(|i| format!("tick {i}\n")).collect();
    let expected_err: String = (1..=6).map(|i| format!("err {i}\n")).collect();
    assert_eq!((channel(&out, 1), channel(&out, 2)), (expected_out.clone(), expected_err.clone()));
    assert_eq!(status(&out)["status"], "Success");
    assert_eq!((spdy_out, spdy_err), (expected_out, expected_err));
    assert_eq!(spdy_status["status"], "Success");
    // the log kept it all too
    let log = std::fs::read_to_string(dir.path().join("talker.log")).expect("log");
    assert_eq!(log.lines().filter(|l| l.contains(" stdout F tick ")).count(), 6, "{log}");

    // an exited container cannot be attached to
    let exited = rt.attach(cri::AttachRequest { container_id: ctr.clone(), stdout: true, ..Default::default() }).await;
    assert_eq!(exited.map(|_| ()).map_err(|e| e.code()), Err(tonic::Code::FailedPrecondition));

    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

#[tokio::test(flavor = "multi_thread")]
async fn attach_writes_the_stdin_of_a_container_that_reads_it() {
    let d = Daemon::start(&[]);
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut pod_cfg = host_network(pod_config("reader", &[]));
    pod_cfg.log_directory = dir.path().to_string_lossy().into_owned();
    let pod = common::run_pod(&mut rt, &pod_cfg).await;
    let script = "while read l; do echo \"got $l\"; done; echo bye";
    let mut config = common::container_config("reader", &image, &["sh", "-c", script]);
    (config.stdin, config.stdin_once) = (true, true);
    let ctr = common::create_container(&mut rt, &pod, &pod_cfg, config).await;
    rt.start_container(cri::StartContainerRequest { container_id: ctr.clone() }).await.expect("start");
    // a container without stdin refuses an attach with stdin
    let quiet =
        common::create_container(&mut rt, &pod, &pod_cfg, common::container_config("quiet", &image, &["sleep", "100"]))
            .await;
    rt.start_container(cri::StartContainerRequest { container_id: quiet.clone() }).await.expect("start");
    let refused =
        rt.attach(cri::AttachRequest { container_id: quiet, stdin: true, stdout: true, ..Default::default() }).await;
    assert_eq!(refused.map(|_| ()).map_err(|e| e.code()), Err(tonic::Code::FailedPrecondition));

    let url = rt
        .attach(cri::AttachRequest { container_id: ctr.clone(), stdin: true, stdout: true, ..Default::default() })
        .await
        .expect("Attach")
        .into_inner()
        .url;
    let mut ws = connect(&url.replace("http://", "ws://"), "v5.channel.k8s.io").await.expect("connect");
    for line in ["one\n", "two\n"] {
        ws.send(Message::Binary([&[0u8][..], line.as_bytes()].concat().into())).await.expect("stdin");
    }
    // give the lines time to come back before closing stdin (output is followed from now on)
    tokio::time::sleep(Duration::from_millis(300)).await;
    ws.send(Message::Binary(vec![255u8, 0].into())).await.expect("close stdin");
    let out = collect(&mut ws).await;
    // stdin_once: closing it ended the container's input, so it said bye and exited
    assert_eq!(channel(&out, 1), "got one\ngot two\nbye\n", "{out:?}");
    assert_eq!(status(&out)["status"], "Success");

    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

#[tokio::test(flavor = "multi_thread")]
async fn attach_works_for_a_container_without_a_log_path() {
    // what critest's attach spec does: a shell reading its stdin, no CRI log
    let client = tokio::task::spawn_blocking(spdy_client);
    let d = Daemon::start(&[]);
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let pod_cfg = host_network(pod_config("nolog", &[]));
    assert!(pod_cfg.log_directory.is_empty());
    let pod = common::run_pod(&mut rt, &pod_cfg).await;
    let mut config = common::container_config("shell", &image, &["sh"]);
    (config.stdin, config.stdin_once, config.log_path) = (true, true, String::new());
    let ctr = common::create_container(&mut rt, &pod, &pod_cfg, config).await;
    rt.start_container(cri::StartContainerRequest { container_id: ctr.clone() }).await.expect("start");
    let created = rt
        .container_status(cri::ContainerStatusRequest { container_id: ctr.clone(), verbose: false })
        .await
        .expect("status")
        .into_inner()
        .status
        .expect("status");
    assert_eq!(created.log_path, "", "the container has no CRI log");
    client.await.expect("go build");

    // a second container writes on both streams: a WebSocket session sees both
    let talker = common::create_container(&mut rt, &pod, &pod_cfg, {
        let mut c = common::container_config(
            "talker",
            &image,
            &["sh", "-c", "sleep 1; for i in 1 2 3; do echo tick $i; echo err $i >&2; sleep 0.1; done"],
        );
        c.log_path = String::new();
        c
    })
    .await;
    rt.start_container(cri::StartContainerRequest { container_id: talker.clone() }).await.expect("start");
    let url = rt
        .attach(cri::AttachRequest { container_id: talker, stdout: true, stderr: true, ..Default::default() })
        .await
        .expect("Attach without a log path")
        .into_inner()
        .url;
    let mut ws = connect(&url.replace("http://", "ws://"), "v4.channel.k8s.io").await.expect("connect");
    let out = collect(&mut ws).await;
    assert_eq!(channel(&out, 1), "tick 1\ntick 2\ntick 3\n", "{out:?}");
    assert_eq!(channel(&out, 2), "err 1\nerr 2\nerr 3\n", "{out:?}");
    assert_eq!(status(&out)["status"], "Success");

    // Kubernetes' own client: a command on stdin, its output back; closing
    // stdin (stdin_once) ends the shell and the session
    let url = rt
        .attach(cri::AttachRequest {
            container_id: ctr.clone(),
            stdin: true,
            stdout: true,
            stderr: true,
            ..Default::default()
        })
        .await
        .expect("Attach without a log path")
        .into_inner()
        .url;
    let (stdout, stderr, spdy_status) =
        tokio::task::spawn_blocking(move || spdy(&url, &["-stdin", "-stdout", "-stderr"], b"echo hello\n"))
            .await
            .expect("client");
    assert_eq!((stdout.as_str(), stderr.as_str()), ("hello\n", ""));
    assert_eq!(spdy_status["status"], "Success");
    let deadline = Instant::now() + Duration::from_secs(10);
    let exited = loop {
        let s = rt
            .container_status(cri::ContainerStatusRequest { container_id: ctr.clone(), verbose: false })
            .await
            .expect("status")
            .into_inner()
            .status
            .expect("status");
        if s.state == cri::ContainerState::ContainerExited as i32 || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((exited.state, exited.exit_code), (cri::ContainerState::ContainerExited as i32, 0));

    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tty_container_runs_on_a_terminal_that_attach_drives() {
    tty_container(false).await;
}

/// The same in a host-PID pod: the app, started by the pod's log writer,
/// has the terminal as its controlling terminal (resizes reach it).
#[tokio::test(flavor = "multi_thread")]
async fn a_host_pid_tty_container_runs_on_a_terminal_that_attach_drives() {
    tty_container(true).await;
}

async fn tty_container(host_pid: bool) {
    let d = Daemon::start(&[]);
    let mut rt = d.runtime().await;
    let image = common::pull_busybox(&d).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut pod_cfg = host_network(pod_config("terminal", &[]));
    pod_cfg.log_directory = dir.path().to_string_lossy().into_owned();
    let node = cri::NamespaceMode::Node as i32;
    if host_pid {
        let linux = pod_cfg.linux.get_or_insert_default();
        linux.security_context.get_or_insert_default().namespace_options.get_or_insert_default().pid = node;
    }
    let pod = common::run_pod(&mut rt, &pod_cfg).await;
    // what `kubectl run -it` makes: a shell reading a terminal
    let script = "tty; echo ctty=$(cut -d' ' -f7 /proc/self/stat); while read l; do case $l in size) stty size;; *) echo \"got $l\";; esac; done";
    let mut config = common::container_config("term", &image, &["sh", "-c", script]);
    (config.stdin, config.tty) = (true, true);
    if host_pid {
        let linux = config.linux.get_or_insert_default();
        linux.security_context.get_or_insert_default().namespace_options.get_or_insert_default().pid = node;
    }
    let ctr = common::create_container(&mut rt, &pod, &pod_cfg, config).await;
    rt.start_container(cri::StartContainerRequest { container_id: ctr.clone() }).await.expect("start");
    // the terminal is the pod's own: its name exists inside the container
    let log_has = |needle: &str| {
        let (path, needle) = (dir.path().join("term.log"), needle.to_string());
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let log = std::fs::read_to_string(&path).unwrap_or_default();
                if log.contains(&needle) || Instant::now() > deadline {
                    return log;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let log = log_has("ctty=").await;
    // a controlling terminal (a non-zero tty_nr): resizes signal the shell
    assert!(log.contains("ctty=") && !log.contains("ctty=0"), "{log}");
    let tty = log.lines().find_map(|l| l.split(" stdout F ").nth(1)).expect("tty line").trim().to_string();
    assert!(tty.starts_with("/dev/pts/"), "{log}");
    let out = rt
        .exec_sync(cri::ExecSyncRequest { container_id: ctr.clone(), cmd: vec!["ls".into(), tty.clone()], timeout: 5 })
        .await
        .expect("exec")
        .into_inner();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), tty);

    let url = rt
        .attach(cri::AttachRequest {
            container_id: ctr.clone(),
            stdin: true,
            stdout: true,
            tty: true,
            ..Default::default()
        })
        .await
        .expect("Attach")
        .into_inner()
        .url;
    let mut ws = connect(&url.replace("http://", "ws://"), "v5.channel.k8s.io").await.expect("connect");
    ws.send(Message::Binary([&[4u8][..], br#"{"Width":100,"Height":40}"#].concat().into())).await.expect("resize");
    for line in ["hello\r", "size\r"] {
        ws.send(Message::Binary([&[0u8][..], line.as_bytes()].concat().into())).await.expect("stdin");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains("40 100") {
        match tokio::time::timeout_at(deadline.into(), ws.next()).await {
            Ok(Some(Ok(Message::Binary(b)))) if b.first() == Some(&1) => {
                seen.push_str(&String::from_utf8_lossy(&b[1..]))
            }
            Ok(Some(Ok(_))) => {}
            _ => break,
        }
    }
    // the terminal echoes what was typed and turns newlines into CRLF
    assert!(seen.contains("hello\r\n") && seen.contains("got hello\r\n"), "{seen:?}");
    assert!(seen.contains("40 100"), "stty size after the resize: {seen:?}");
    drop(ws);
    // the log has the terminal's output as stdout
    assert!(log_has("got hello").await.contains(" stdout "), "the log keeps it");

    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

/// The official crictl (client-go's SPDY executor and port-forwarder) through
/// the streaming server: exec with stdin, exec with a failing command, and
/// port-forward from a local port into the pod.
#[tokio::test(flavor = "multi_thread")]
async fn the_official_crictl_execs_with_stdin_and_forwards_a_port() {
    use std::io::{Read, Write};
    let HttpdPod { d, mut rt, pod, web, _net, _dir } = httpd_pod("crictl-streams").await;
    let sock = d.socket.clone();
    let endpoint = format!("unix://{}", sock.display());
    let crictl = |args: &[&str]| {
        let mut c = std::process::Command::new(common::crictl::binary());
        c.args(["--runtime-endpoint", &endpoint, "--image-endpoint", &endpoint, "--timeout", "60s"]).args(args);
        c
    };

    // exec -i: stdin reaches the command, which ends when stdin does
    let mut child = crictl(&["exec", "-i", &web, "tr", "a-z", "A-Z"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("crictl exec -i");
    child.stdin.take().expect("stdin").write_all(b"hello through spdy\n").expect("write stdin");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await.expect("join").expect("wait");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "HELLO THROUGH SPDY\n");
    let failed = crictl(&["exec", &web, "sh", "-c", "echo bye >&2; exit 4"]).output().expect("crictl exec");
    let why = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success() && why.starts_with("bye\n"), "{failed:?}");
    // the exit status on the error stream, as crictl reads it
    assert!(why.contains("command terminated with exit code 4"), "{why}");

    // port-forward: a local port into the pod's 8080
    let local = common::ports::free_port();
    let mut forward = crictl(&["port-forward", &pod, &format!("{local}:8080")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("crictl port-forward");
    let got = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // crictl listens once its streams are up; httpd may need a moment
            let attempt = std::net::TcpStream::connect(("127.0.0.1", local)).and_then(|mut c| {
                c.write_all(b"GET /index.html HTTP/1.0\r\n\r\n")?;
                let mut s = String::new();
                c.read_to_string(&mut s)?;
                Ok(s)
            });
            match attempt {
                Ok(s) if s.ends_with("hello from httpd\n") => return s,
                other if Instant::now() > deadline => return format!("{other:?}"),
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    })
    .await
    .expect("join");
    let _ = forward.kill();
    let _ = forward.wait();
    assert!(got.starts_with("HTTP/1.") && got.ends_with("hello from httpd\n"), "{got}");

    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("remove");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}
