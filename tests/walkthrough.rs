//! The crictl walk-through of docs/crictl.md, one step per command, run with
//! the official crictl binary (v1.29.0: kubelet 1.29's CRI client) against a
//! real daemon, with the same pod and container files (docs/crictl/*.json;
//! the image comes from the test registry instead of docker.io, the log
//! directory is a temporary one).

mod common;

use common::{assert_no_leaks, crictl};
use rktlet::proto::v1 as cri;
use std::time::{Duration, Instant};

fn doc(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/crictl").join(name);
    std::fs::read_to_string(&path).expect("doc file")
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).expect("crictl json")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_crictl_walkthrough_works_step_by_step() {
    let (dir, _net, d) = common::daemon_with_network();
    let sock = d.socket.clone();
    let (pod_doc, ctr_doc) = (doc("pod.json"), doc("container.json"));
    assert_eq!(
        (pod_doc.as_str(), ctr_doc.as_str()),
        (rktlet::client::demo::POD_JSON, rktlet::client::demo::CONTAINER_JSON)
    );
    let image = format!("{}/busybox:latest", common::registry::registry().main);
    let log_dir = dir.path().join("logs");
    // the documented files, with the test registry's image and a log directory of the test's
    let mut pod_json = json(&pod_doc);
    assert_eq!(pod_json["log_directory"], "/tmp/rktlet-demo");
    pod_json["log_directory"] = log_dir.to_string_lossy().into_owned().into();
    let mut ctr_json = json(&ctr_doc);
    assert_eq!(ctr_json["image"]["image"], "docker.io/library/busybox:latest");
    ctr_json["image"]["image"] = image.clone().into();
    let (pod_file, ctr_file) = (dir.path().join("pod.json"), dir.path().join("container.json"));
    std::fs::write(&pod_file, pod_json.to_string()).expect("pod.json");
    std::fs::write(&ctr_file, ctr_json.to_string()).expect("container.json");
    let (pod_arg, ctr_arg) = (pod_file.to_string_lossy().into_owned(), ctr_file.to_string_lossy().into_owned());

    // crictl version; crictl info
    assert!(crictl::ok(&sock, &["version"]).contains("RuntimeName:  rktlet"));
    let info = json(&crictl::ok(&sock, &["info"]));
    let conditions = info["status"]["conditions"].as_array().expect("conditions").clone();
    assert!(conditions.iter().all(|c| c["status"] == true), "{info}");

    // crictl pull; crictl images
    crictl::ok(&sock, &["pull", &image]);
    let images = crictl::ok(&sock, &["images"]);
    let row = images.lines().find(|l| l.contains("/busybox")).unwrap_or_else(|| panic!("{images}"));
    assert!(!row.trim_end().ends_with("0B"), "an image size: {images}");

    // crictl runp pod.json; crictl inspectp POD
    let pod = crictl::ok(&sock, &["runp", &pod_arg]).trim().to_string();
    let inspect = json(&crictl::ok(&sock, &["inspectp", &pod]));
    assert_eq!(inspect["status"]["state"], "SANDBOX_READY", "{inspect}");
    assert!(inspect["info"]["sandboxLog"].as_str().is_some_and(|l| l.ends_with("/sandbox.log")), "{inspect}");

    // crictl create POD container.json pod.json; crictl start CTR
    let ctr = crictl::ok(&sock, &["create", &pod, &ctr_arg, &pod_arg]).trim().to_string();
    assert_eq!(ctr, format!("{pod}:0-hello"));
    crictl::ok(&sock, &["start", &ctr]);

    // crictl exec -s CTR echo hi (ExecSync); crictl exec CTR ... (Exec, over the streaming server)
    // (crictl prints stdout and stderr with a newline after each)
    assert_eq!(crictl::ok(&sock, &["exec", "-s", &ctr, "echo", "hi"]).trim_end(), "hi");
    assert_eq!(crictl::ok(&sock, &["exec", &ctr, "sh", "-c", "echo streamed; id -u"]), "streamed\n0\n");
    let failed = crictl::run(&sock, &["exec", "-s", &ctr, "sh", "-c", "exit 3"]);
    let why = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success() && why.contains("exited with 3"), "the command's exit code: {why}");

    // crictl ps shows 13 characters of the id; crictl inspect takes them
    let ps = crictl::ok(&sock, &["ps", "-q", "--no-trunc"]);
    assert_eq!(ps.trim(), ctr);
    let short = crictl::ok(&sock, &["ps"]);
    let shown = short.lines().nth(1).and_then(|l| l.split_whitespace().next()).expect("a row").to_string();
    assert_eq!(shown.len(), 13, "{short}");
    let inspected = json(&crictl::ok(&sock, &["inspect", &shown]));
    assert_eq!(inspected["status"]["id"], ctr.as_str());
    assert_eq!(inspected["status"]["state"], "CONTAINER_RUNNING");

    // crictl logs CTR
    let deadline = Instant::now() + Duration::from_secs(10);
    let logs = loop {
        let out = crictl::ok(&sock, &["logs", &ctr]);
        if out.contains("hello") || Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(logs, "hello\n");

    // crictl stats
    let stats = json(&crictl::ok(&sock, &["stats", "-o", "json"]));
    let working_set = stats["stats"][0]["memory"]["workingSetBytes"]["value"].as_str().unwrap_or("0");
    assert!(working_set.parse::<u64>().unwrap_or(0) > 0, "{stats}");

    // crictl stop -t 10 CTR; crictl stopp POD; crictl rmp POD; crictl rmi
    crictl::ok(&sock, &["stop", "-t", "10", &ctr]);
    let stopped = json(&crictl::ok(&sock, &["inspect", &ctr]));
    assert_eq!(stopped["status"]["state"], "CONTAINER_EXITED");
    crictl::ok(&sock, &["stopp", &pod]);
    assert!(crictl::ok(&sock, &["pods"]).contains("NotReady"));
    crictl::ok(&sock, &["rmp", &pod]);
    assert_eq!(crictl::ok(&sock, &["pods", "-q"]).trim(), "");
    crictl::ok(&sock, &["rmi", &image]);
    assert!(!crictl::ok(&sock, &["images"]).contains("/busybox"));
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

/// `rktlet demo` (what README's quick start runs) does the same and cleans up.
#[tokio::test(flavor = "multi_thread")]
async fn rktlet_demo_runs_the_walkthrough() {
    let (dir, _net, d) = common::daemon_with_network();
    let image = format!("{}/busybox:latest", common::registry::registry().main);
    let out = std::process::Command::new(common::BIN)
        .arg("demo")
        .arg("--socket")
        .arg(&d.socket)
        .arg("--image")
        .arg(&image)
        .arg("--log-dir")
        .arg(dir.path().join("logs"))
        .output()
        .expect("rktlet demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    let after = |cmd: &str| lines.iter().position(|l| l.starts_with(cmd)).and_then(|i| lines.get(i + 1)).copied();
    assert_eq!(after("$ crictl exec"), Some("demo"), "{stdout}");
    assert_eq!(after("$ crictl logs"), Some("hello"), "{stdout}");
    assert!(stdout.contains("Removed sandbox"), "{stdout}");
    let mut rt = d.runtime().await;
    assert!(
        rt.list_pod_sandbox(cri::ListPodSandboxRequest::default()).await.expect("list").into_inner().items.is_empty()
    );
    assert_no_leaks(&d.dir.path().join("data"), &[]);
}
