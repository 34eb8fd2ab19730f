//! Hot paths of the in-process design, each what one exec'd CLI call used to
//! redo from scratch: image lookups at 100 images, docker reference parsing,
//! CRI log record formatting, and the layer pipeline (gunzip, SHA-256 of the
//! compressed and SHA-512 of the plain bytes, tar extraction) per MB.
//!
//! Run: `cargo bench --bench hot_paths`. Pod directory figures are in
//! `pod_dir`, sd-bus figures against a live pod in `pod_bus`.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use rkt::cas::{AciInfo, Cas, Remote};
use rkt::pod::DataDir;
use rkt::reference::Reference;
use rkt::schema::ImageManifest;
use rktlet::image::layer::{Compression, LayerJob};
use rktlet::image::{RegistryConfig, Store};
use rktlet::stage1::crilog::{LineSplitter, Stream, record};
use std::hint::black_box;
use std::io::Write;
use std::time::SystemTime;

const IMAGES: usize = 100;

/// A key of the CAS's shape (`sha512-` + 64 hex digits of a SHA-512), distinct per `i`.
fn key(i: usize) -> String {
    use sha2::Digest;
    let hex: String = sha2::Sha512::digest(i.to_le_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    format!("sha512-{}", &hex[..64])
}

/// A store of `IMAGES` images, each with a manifest of realistic size and
/// tag and digest rows, written through the CAS's own paths and index.
fn store_with_images(data: &DataDir) -> Store {
    let store = Store::open(data, RegistryConfig::default()).expect("store");
    let cas = Cas::new(data.cas());
    let manifest = |i: usize| -> ImageManifest {
        serde_json::from_value(serde_json::json!({
            "acKind": "ImageManifest", "acVersion": "0.8.11",
            "name": format!("registry.example/team/app{i}"),
            "labels": [{"name": "version", "value": "1.0"}, {"name": "os", "value": "linux"},
                       {"name": "arch", "value": "amd64"}],
            "app": {"exec": ["/bin/sh", "-c", "serve"], "user": "0", "group": "0",
                    "workingDirectory": "/srv",
                    "environment": [{"name": "PATH", "value": "/usr/sbin:/usr/bin:/sbin:/bin"}]},
            "annotations": [{"name": "appc.io/docker/registryurl", "value": "registry.example"},
                            {"name": "appc.io/docker/repository", "value": format!("team/app{i}")}],
            "dependencies": [{"imageName": "layer", "imageID": key(1000 + i)},
                             {"imageName": "layer", "imageID": key(2000 + i)}]
        }))
        .expect("manifest")
    };
    for i in 0..IMAGES {
        let path = cas.image_manifest(&key(i));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, serde_json::to_vec(&manifest(i)).expect("json")).expect("write manifest");
    }
    cas.update_index(|index| {
        for i in 0..IMAGES {
            let k = key(i);
            index.upsert_aci(AciInfo {
                blobkey: k.clone(),
                name: format!("registry.example/team/app{i}"),
                importtime: i as i64,
                lastused: i as i64,
                latest: false,
                size: 1 << 20,
                treestoresize: 2 << 20,
                verified: false,
            });
            for url in [
                format!("docker://registry.example/team/app{i}:1.0"),
                format!("docker://registry.example/team/app{i}@sha256:{:064x}", i),
            ] {
                index.upsert_remote(Remote {
                    aciurl: url,
                    sigurl: String::new(),
                    etag: String::new(),
                    blobkey: k.clone(),
                    cachemaxage: 0,
                    downloadtime: 0,
                });
            }
        }
    })
    .expect("index");
    store
}

fn images(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = DataDir::new(tmp.path().join("data"));
    let store = store_with_images(&data);
    assert_eq!(store.list().expect("list").len(), IMAGES);
    c.bench_function("image_resolve_by_tag_100_images", |b| {
        b.iter(|| black_box(store.resolve(black_box("registry.example/team/app77:1.0")).expect("resolve")))
    });
    let id = key(77);
    c.bench_function("image_resolve_by_id_prefix_100_images", |b| {
        b.iter(|| black_box(store.resolve(black_box(&id[..19])).expect("resolve")))
    });
    c.bench_function("image_list_100_images", |b| b.iter(|| black_box(store.list().expect("list"))));
}

fn references(c: &mut Criterion) {
    let refs = [
        "busybox",
        "registry.k8s.io/pause:3.10",
        "localhost:5000/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "[::1]:5000/x/y/z:v1.2.3",
    ];
    c.bench_function("docker_reference_parse_and_normalize_x4", |b| {
        b.iter(|| {
            for r in refs {
                black_box(black_box(r).parse::<Reference>().expect("parse").to_string());
            }
        })
    });
}

fn logs(c: &mut Criterion) {
    let line = b"I1122 21:43:26.123456       1 server.go:123] handled GET /healthz in 1.2ms from 10.66.0.1:53422\n";
    let mut group = c.benchmark_group("cri_log");
    group.throughput(Throughput::Bytes(line.len() as u64));
    group.bench_function("record_format_one_line", |b| {
        let now = SystemTime::now();
        b.iter(|| black_box(record(now, Stream::Stdout, false, black_box(&line[..line.len() - 1]))))
    });
    let chunk: Vec<u8> = line.iter().copied().cycle().take(64 * 1024).collect();
    group.throughput(Throughput::Bytes(chunk.len() as u64));
    group.bench_function("split_and_format_64k_chunk", |b| {
        let now = SystemTime::now();
        b.iter(|| {
            let mut split = LineSplitter::default();
            let mut out = Vec::with_capacity(chunk.len() * 2);
            for (partial, content) in split.feed(black_box(&chunk)) {
                out.extend_from_slice(&record(now, Stream::Stdout, partial, &content));
            }
            black_box(out)
        })
    });
    group.finish();
}

/// A gzip'ed layer of about `mib` MiB: files of mixed sizes with text-like
/// and random content, as a typical image layer.
fn layer(mib: usize) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut written = 0;
    let mut i = 0;
    while written < mib << 20 {
        let size = [512usize, 4096, 40_000, 300_000][i % 4];
        let body: Vec<u8> = (0..size)
            .map(|j| {
                if i % 2 == 0 {
                    b"the quick brown fox jumps over the lazy dog\n"[j % 44]
                } else {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                }
            })
            .collect();
        let mut header = tar::Header::new_gnu();
        header.set_size(size as u64);
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(1_700_000_000);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, format!("usr/share/d{}/f{i}", i % 16), body.as_slice()).expect("append");
        written += size;
        i += 1;
    }
    let plain = tar.into_inner().expect("tar");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).expect("gzip");
    gz.finish().expect("gzip")
}

fn layer_pipeline(c: &mut Criterion) {
    const MIB: usize = 8;
    let gz = layer(MIB);
    let mut group = c.benchmark_group("layer_pipeline");
    group.sample_size(10);
    // per uncompressed MiB: the figure compares across compression ratios
    group.throughput(Throughput::Bytes((MIB << 20) as u64));
    group.bench_function("gunzip_hash_extract_8mib", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("dest"),
            |dest| {
                let done = rktlet::image::layer::run(LayerJob {
                    index: 0,
                    source: Box::new(std::io::Cursor::new(gz.clone())),
                    expected_digest: None,
                    expected_key: None,
                    // as a pull does: the key is that of the layer's ACI rendition
                    aci_manifest: Some(br#"{"acKind":"ImageManifest","acVersion":"0.8.11","name":"layer/x"}"#.to_vec()),
                    legacy_key: None,
                    compression: Compression::Gzip,
                    blob_out: None,
                    dest: dest.path().to_path_buf(),
                    staged: false,
                    max_bytes: u64::MAX,
                })
                .expect("layer");
                black_box(done.key);
                dest
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, images, references, logs, layer_pipeline);
criterion_main!(benches);
