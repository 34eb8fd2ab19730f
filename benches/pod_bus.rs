//! The pod's bus against a live pod (booted by the repo's own `rktlet app
//! sandbox`, no daemon): a unit status read (the properties ContainerStatus
//! and the exit recorder need) and an app start (StartTransientUnit until the
//! job is done), over the one sd-bus connection kept per pod. What the exec
//! design paid a `rkt app status`/`app start` process for. Needs root.
//!
//! Run: `cargo bench --bench pod_bus`.

#[path = "../tests/common/mod.rs"]
mod common;

use common::test_pod::{TestPod, sh};
use criterion::{Criterion, criterion_group, criterion_main};
use rktlet::stage1::bus::PodBus;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn bench(c: &mut Criterion) {
    let pod = TestPod::boot();
    let bus = PodBus::connect(pod.pid1()).expect("connect to the pod's bus");
    bus.start_transient_service(&sh("reader.service", "exec sleep 100000")).expect("start reader");
    c.bench_function("sd_bus_unit_status_read", |b| {
        b.iter(|| black_box(bus.unit_status(black_box("reader.service")).expect("status")))
    });
    let mut group = c.benchmark_group("sd_bus");
    group.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    let mut n = 0u64;
    group.bench_function("app_start", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                n += 1;
                let unit = format!("s{n}.service");
                let t = Instant::now();
                bus.start_transient_service(&sh(&unit, "exec sleep 100000")).expect("start");
                took += t.elapsed();
                // untimed: stop and unload, so the pod does not fill with units
                bus.reset_unit(&unit).expect("reset");
            }
            took
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
