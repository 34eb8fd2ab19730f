//! Pull of the seed registry's 3-layer "big" image into an empty store,
//! rendered tree included, next to `skopeo copy docker://... oci:DIR` of the
//! same image, interleaved in one run. Prints medians and the ratio.
//!
//! `cargo bench --bench image_pull` (starts the test fixture registry itself).

#[path = "../tests/common/ports.rs"]
mod ports;
#[path = "../tests/common/registry.rs"]
#[allow(dead_code)]
mod registry;

use rkt::pod::DataDir;
use rktlet::image::{Credentials, RegistryConfig, Store};
use std::process::Command;
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --all-targets` lists benches; nothing to list here
    }
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    // `cargo bench` passes --bench; under `cargo test --all-targets` one round is a smoke test
    let default_runs = if std::env::args().any(|a| a == "--bench") { 11 } else { 1 };
    let runs: usize = std::env::var("RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(default_runs);
    let reg = registry::registry();
    let reference = format!("{}/big:latest", reg.main);
    let scratch = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-image-pull");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).expect("scratch");
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio");
    let mut ours = Vec::new();
    let mut skopeo = Vec::new();
    let mut opens = Vec::new();
    for i in 0..runs + 1 {
        let dir = scratch.join(format!("rktlet-{i}"));
        let start = Instant::now();
        let store = Store::open(&DataDir::new(&dir), RegistryConfig::default()).expect("store");
        opens.push(start.elapsed());
        let image = tokio.block_on(store.pull(&reference, Credentials::default(), None)).expect("pull");
        let took = start.elapsed();
        assert!(store.tree(&image.id).expect("tree").path.join("rendered").exists());
        let oci = scratch.join(format!("skopeo-{i}"));
        let start = Instant::now();
        let st = Command::new("skopeo")
            .args(["copy", "-q", "--src-tls-verify=false"])
            .arg(format!("docker://{reference}"))
            .arg(format!("oci:{}", oci.display()))
            .status()
            .expect("skopeo");
        let took_skopeo = start.elapsed();
        assert!(st.success(), "skopeo copy failed");
        // what the pull left to background threads (tree hash and sync, the
        // layers' ACIs) finishes before the next round is timed
        rkt::tree::finish_settling();
        if i > 0 {
            // the first round warms the page cache of the registry's storage
            ours.push(took);
            skopeo.push(took_skopeo);
        }
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&oci);
    }
    let (a, b) = (median(ours.clone()), median(skopeo.clone()));
    println!("image_pull big (3 layers, {runs} runs, median)");
    println!(
        "  rktlet pull + render : {:7.1} ms   (min {:.1}, max {:.1})",
        ms(a),
        ms(*ours.iter().min().expect("min")),
        ms(*ours.iter().max().expect("max"))
    );
    println!(
        "  skopeo copy to oci:  : {:7.1} ms   (min {:.1}, max {:.1})",
        ms(b),
        ms(*skopeo.iter().min().expect("min")),
        ms(*skopeo.iter().max().expect("max"))
    );
    println!("  ratio rktlet/skopeo  : {:.2}x", a.as_secs_f64() / b.as_secs_f64());
    println!("  of which opening the store (registry clients): {:.1} ms", ms(median(opens)));
}
