//! Hot paths of the pod directory layer: what every ListPodSandbox and
//! PodSandboxStatus does per pod instead of exec'ing `rkt list`/`rkt status`.
//! 100 pods: probe one, list all with their states, parse and rewrite a manifest.

use criterion::{Criterion, criterion_group, criterion_main};
use rkt::pod::{DataDir, Pod};
use rkt::schema::PodManifest;
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = DataDir::new(tmp.path().join("data"));
    let mut running = Vec::new();
    for _ in 0..100 {
        let mut pod = Pod::create(&data).expect("create");
        pod.to_preparing().expect("prepare");
        pod.write_initial(&PodManifest::mutable()).expect("manifest");
        pod.to_run().expect("run");
        running.push(pod);
    }
    let id = running[0].uuid().to_string();
    c.bench_function("pod_state_probe", |b| {
        b.iter(|| {
            let mut pod = Pod::open(&data, black_box(&id)).expect("open");
            black_box(pod.state().expect("state"))
        })
    });
    c.bench_function("list_100_pods_with_state", |b| {
        b.iter(|| {
            let pods = data.list_pods().expect("list");
            for (uuid, _) in pods {
                let mut pod = Pod::open(&data, &uuid.to_string()).expect("open");
                black_box(pod.state().expect("state"));
            }
        })
    });
    let text = std::fs::read(running[2].path().join("pod")).expect("pod manifest");
    c.bench_function("pod_manifest_parse", |b| {
        b.iter(|| black_box(serde_json::from_slice::<PodManifest>(black_box(&text)).expect("parse")))
    });
    c.bench_function("pod_manifest_read_modify_write", |b| {
        let pod = &running[1];
        b.iter(|| {
            let _guard = pod.lock_manifest().expect("pod.lck");
            let mut m = pod.read_manifest().expect("read");
            m.user_labels.insert("k".into(), "v".into());
            pod.write_manifest(&m).expect("write");
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
