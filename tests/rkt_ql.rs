//! rkt's image database (`cas/db/ql.db`) seen through rktlet's image store:
//! images rkt fetched are listed and resolvable, and left to rkt to remove.
//! The databases are written by the real ql (rkt/tests/fixtures/ql/README.md).

mod common;

use rkt::pod::DataDir;
use rktlet::image::{Credentials, ImageError, RegistryConfig, Store};
use std::fs;
use std::path::Path;
use std::time::Duration;

fn fixture(name: &str) -> Vec<u8> {
    fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("rkt/tests/fixtures/ql").join(name)).unwrap()
}

/// The keys `three.db` lists, oldest first, as ql returned them.
fn three_keys() -> Vec<String> {
    let expect = String::from_utf8(fixture("three.expect")).unwrap();
    let mut keys: Vec<String> =
        expect.lines().filter_map(|l| l.strip_prefix("aciinfo\t")).map(|l| l[..71].to_string()).collect();
    keys.reverse();
    keys
}

/// A store whose `cas/db/ql.db` is `db`, with the image manifests rkt would
/// have written for the keys of three.db.
fn store_with(db: &[u8]) -> (tempfile::TempDir, Store) {
    let t = tempfile::tempdir().unwrap();
    let data = DataDir::new(t.path().join("data"));
    let store = Store::open(&data, RegistryConfig::default()).unwrap();
    fs::write(store.cas().root().join("db/ql.db"), db).unwrap();
    for (i, key) in three_keys().iter().enumerate() {
        let path = store.cas().image_manifest(key);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let manifest = format!(
            r#"{{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/app-{i}","labels":[{{"name":"os","value":"linux"}},{{"name":"arch","value":"amd64"}}]}}"#
        );
        fs::write(path, manifest).unwrap();
    }
    (t, store)
}

#[test]
fn images_rkt_fetched_are_listed_and_resolvable() {
    let (_t, store) = store_with(&fixture("three.db"));
    let images = store.list().unwrap();
    let ids: Vec<&str> = images.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, three_keys(), "oldest import first");
    assert_eq!(images[0].manifest.name, "example.com/app-0");
    // 2026-11-26T12:00:00.123456789Z as ql stored it
    assert_eq!(images[0].import_time, 1_795_694_400_123_456_789);
    assert_eq!(images[2].size, 1002);
    // by rkt's URL (rktlet's `aci:` form) and by id prefix
    assert_eq!(store.resolve("aci:https://example.com/app-1.aci").unwrap().id, three_keys()[1]);
    assert_eq!(store.resolve(&three_keys()[2][..20]).unwrap().id, three_keys()[2]);
}

#[test]
fn rkts_images_are_left_to_rkt_to_remove() {
    let (_t, store) = store_with(&fixture("three.db"));
    let key = &three_keys()[0];
    let err = store.remove(key).unwrap_err();
    assert!(matches!(err, ImageError::InUse(_)), "{err}");
    assert!(err.to_string().contains("rkt image rm"), "{err}");
    assert!(store.cas().image_manifest(key).exists(), "nothing removed");
    let report = store.gc(Duration::ZERO).unwrap();
    assert!(report.images.is_empty(), "gc removed rkt's images: {:?}", report.images);
    assert_eq!(store.list().unwrap().len(), 3);
}

#[test]
fn a_damaged_or_busy_rkt_database_leaves_rktlets_own_images() {
    let (t, store) = store_with(b"not a ql database at all");
    assert_eq!(store.list().unwrap(), vec![], "own (empty) index, no error");
    // an interrupted rkt transaction: ql's write-ahead log is not empty
    fs::write(store.cas().root().join("db/ql.db"), fixture("three.db")).unwrap();
    fs::write(store.cas().root().join("db/.34a8b4c1ad933745146fdbfef3073706ee571625"), b"pending").unwrap();
    assert_eq!(store.list().unwrap(), vec![]);
    fs::remove_file(store.cas().root().join("db/.34a8b4c1ad933745146fdbfef3073706ee571625")).unwrap();
    assert_eq!(store.list().unwrap().len(), 3);
    drop(t);
}

fn put_blob(store: &Store, key: &str) {
    let path = store.cas().blob(key);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, b"blob").unwrap();
}

#[test]
fn rktlets_index_changes_reach_rkts_database() {
    let (_t, store) = store_with(&fixture("three.db"));
    let db_dir = store.cas().root().join("db");
    let key = format!("sha512-{}", "c3".repeat(32));
    let row = rkt::cas::AciInfo {
        blobkey: key.clone(),
        name: "docker.io/library/busybox".into(),
        importtime: 1_795_780_800_000_000_000,
        lastused: 1_795_780_800_000_000_000,
        latest: true,
        size: 2_000_000,
        treestoresize: 4_000_000,
        verified: true,
    };
    put_blob(&store, &key);
    store.cas().update_index(|i| i.upsert_aci(row.clone())).unwrap();
    let rkt = rkt::ql::read_dir(&db_dir).unwrap().unwrap();
    assert_eq!(rkt.aciinfo.len(), 4);
    let mirrored = rkt.aciinfo.iter().find(|a| a.blobkey == key).expect("rkt lists rktlet's image");
    assert_eq!((mirrored.size, mirrored.importtime, mirrored.latest), (row.size, row.importtime, true));
    if let Ok(dir) = std::env::var("QL_WRITE_OUT") {
        fs::copy(db_dir.join("ql.db"), Path::new(&dir).join("store.db")).unwrap();
    }
    store.cas().update_index(|i| i.aciinfo.retain(|a| a.blobkey != key)).unwrap();
    let rkt = rkt::ql::read_dir(&db_dir).unwrap().unwrap();
    assert_eq!(rkt.aciinfo.len(), 3, "and its removal");
    // rows rktlet had before rkt created its database get there with the next change
    let t = tempfile::tempdir().unwrap();
    let late = Store::open(&DataDir::new(t.path().join("data")), RegistryConfig::default()).unwrap();
    put_blob(&late, &key);
    late.cas().update_index(|i| i.upsert_aci(row.clone())).unwrap();
    fs::write(late.cas().root().join("db/ql.db"), fixture("three.db")).unwrap();
    let other = rkt::cas::AciInfo { blobkey: format!("sha512-{}", "d4".repeat(32)), ..row.clone() };
    put_blob(&late, &other.blobkey);
    late.cas().update_index(|i| i.upsert_aci(other.clone())).unwrap();
    let rkt = rkt::ql::read_dir(&late.cas().root().join("db")).unwrap().unwrap();
    let keys: Vec<&str> = rkt.aciinfo.iter().map(|a| a.blobkey.as_str()).collect();
    assert!(keys.contains(&key.as_str()) && keys.contains(&other.blobkey.as_str()), "{keys:?}");
    assert_eq!(keys.len(), 5, "rkt's three stay");
    // rkt removes rktlet's image (row and blob): the next change does not bring it back
    rkt::ql::write::update_dir(&late.cas().root().join("db"), |db| db.remove_image(&other.blobkey)).unwrap();
    fs::remove_file(late.cas().blob(&other.blobkey)).unwrap();
    late.cas().update_index(|i| i.upsert_aci(row.clone())).unwrap();
    let rkt = rkt::ql::read_dir(&late.cas().root().join("db")).unwrap().unwrap();
    assert!(!rkt.aciinfo.iter().any(|a| a.blobkey == other.blobkey), "removed by rkt, back again");
    assert_eq!(rkt.aciinfo.len(), 4);
    // a store rkt never used gets rkt's database with rktlet's image (rkt lists it)
    let t = tempfile::tempdir().unwrap();
    let plain = Store::open(&DataDir::new(t.path().join("data")), RegistryConfig::default()).unwrap();
    put_blob(&plain, &key);
    plain.cas().update_index(|i| i.upsert_aci(row.clone())).unwrap();
    let rkt = rkt::ql::read_dir(&plain.cas().root().join("db")).unwrap().expect("rkt's database made");
    assert_eq!(rkt.aciinfo.iter().map(|a| a.blobkey.as_str()).collect::<Vec<_>>(), [key.as_str()]);
    assert_eq!(rkt.version, Some(rkt::ql::RKT_DB_VERSION));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pull_and_its_removal_reach_rkts_database() {
    let reg = common::registry::registry();
    let (_t, store) = store_with(&fixture("three.db"));
    let db_dir = store.cas().root().join("db");
    let image = store.pull(&format!("{}/busybox:latest", reg.main), Credentials::default(), None).await.unwrap();
    // a layer is listed once its ACI is written, after the pull
    rkt::tree::finish_settling();
    let rkt = rkt::ql::read_dir(&db_dir).unwrap().unwrap();
    let keys: Vec<&str> = rkt.aciinfo.iter().map(|a| a.blobkey.as_str()).collect();
    assert!(keys.contains(&image.id.as_str()), "rkt lists the pulled image: {keys:?}");
    for layer in image.layer_keys() {
        assert!(keys.contains(&layer.as_str()), "and its layer {layer}");
    }
    assert!(rkt.remote.iter().any(|r| r.blobkey == image.id && r.aciurl.starts_with("docker://")));
    if let Ok(dir) = std::env::var("QL_WRITE_OUT") {
        fs::copy(db_dir.join("ql.db"), Path::new(&dir).join("pulled.db")).unwrap();
    }
    let id = image.id.clone();
    let s = store.clone();
    tokio::task::spawn_blocking(move || s.remove(&id)).await.unwrap().unwrap();
    let rkt = rkt::ql::read_dir(&db_dir).unwrap().unwrap();
    let keys: Vec<&str> = rkt.aciinfo.iter().map(|a| a.blobkey.as_str()).collect();
    assert_eq!(keys.len(), 3, "only rkt's own images are left: {keys:?}");
    assert_eq!(rkt.remote.len(), 3);
}

#[test]
fn many_images_reach_rkts_database_past_one_index_page() {
    // paged.db: 540 images the real ql wrote, each index over several
    // B-tree pages; rktlet adds 600 of its own and removes them again
    let (_t, store) = store_with(&fixture("paged.db"));
    let db_dir = store.cas().root().join("db");
    let rkts = rkt::ql::read_dir(&db_dir).unwrap().unwrap();
    assert_eq!(rkts.aciinfo.len(), 540);
    let rows: Vec<rkt::cas::AciInfo> = (1..=600u64)
        .map(|i| rkt::cas::AciInfo {
            blobkey: format!("sha512-{:016x}{:048x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15), i),
            name: format!("docker.io/library/app-{}", i % 40),
            importtime: 1_795_780_800_000_000_000 + i as i64,
            lastused: 1_795_780_800_000_000_000 + i as i64,
            latest: true,
            size: 1000 + i as i64,
            treestoresize: 0,
            verified: true,
        })
        .collect();
    for (n, chunk) in rows.chunks(100).enumerate() {
        for row in chunk {
            put_blob(&store, &row.blobkey);
        }
        store
            .cas()
            .update_index(|i| {
                for row in chunk {
                    i.upsert_aci(row.clone());
                }
            })
            .unwrap();
        let rkt = rkt::ql::read_dir(&db_dir).unwrap().unwrap();
        assert_eq!(rkt.aciinfo.len(), 540 + 100 * (n + 1));
    }
    let rkt = rkt::ql::read_dir(&db_dir).unwrap().unwrap();
    for row in &rows {
        let got = rkt.aciinfo.iter().find(|a| a.blobkey == row.blobkey).expect("rkt lists rktlet's image");
        assert_eq!((got.size, got.importtime, &got.name), (row.size, row.importtime, &row.name));
    }
    if let Ok(dir) = std::env::var("QL_WRITE_OUT") {
        fs::copy(db_dir.join("ql.db"), Path::new(&dir).join("store-many.db")).unwrap();
    }
    store.cas().update_index(|i| i.aciinfo.retain(|a| !rows.iter().any(|r| r.blobkey == a.blobkey))).unwrap();
    assert_eq!(rkt::ql::read_dir(&db_dir).unwrap().unwrap(), rkts, "back to rkt's rows");
}

#[test]
fn a_database_rkt_never_fetched_into_gets_rktlets_first_image() {
    // rkt created the schema but wrote no time yet: rktlet writes times
    // with the gob type id rkt's ql gives time.Time
    let (_t, store) = store_with(&fixture("empty.db"));
    let db_dir = store.cas().root().join("db");
    let key = format!("sha512-{}", "e5".repeat(32));
    let row = rkt::cas::AciInfo {
        blobkey: key.clone(),
        name: "docker.io/library/alpine".into(),
        importtime: 1_795_780_800_123_456_789,
        lastused: 1_795_780_800_123_456_789,
        latest: true,
        size: 3_000_000,
        treestoresize: 0,
        verified: true,
    };
    put_blob(&store, &key);
    store.cas().update_index(|i| i.upsert_aci(row.clone())).unwrap();
    let rkt = rkt::ql::read_dir(&db_dir).unwrap().unwrap();
    assert_eq!(rkt.aciinfo.len(), 1);
    assert_eq!(rkt.aciinfo[0].importtime, row.importtime);
    assert_eq!(rkt.version, Some(rkt::ql::RKT_DB_VERSION));
}

#[test]
fn rkts_docker_images_resolve_by_reference() {
    // rkt records a docker image's remote under the URL as typed
    // (`rkt fetch docker://busybox:1.36`); the reference finds it in any form
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("ql.db"), fixture("three.db")).unwrap();
    let key = three_keys()[1].clone();
    rkt::ql::write::update_dir(dir.path(), |db| {
        db.put_remote(&rkt::cas::Remote {
            aciurl: "docker://busybox:1.36".into(),
            sigurl: String::new(),
            etag: String::new(),
            blobkey: key.clone(),
            cachemaxage: 0,
            downloadtime: 1_795_780_800_000_000_000,
        })
    })
    .unwrap();
    let (_t, store) = store_with(&fs::read(dir.path().join("ql.db")).unwrap());
    for r in ["busybox:1.36", "docker.io/library/busybox:1.36", "docker://busybox:1.36"] {
        assert_eq!(store.resolve(r).unwrap().id, key, "{r}");
    }
    assert!(store.resolve("busybox:1.35").is_err());
    let image = store.resolve("busybox:1.36").unwrap();
    assert!(image.tags.contains(&"docker.io/library/busybox:1.36".to_string()), "{:?}", image.tags);
}

/// Concurrent removals of one image rktlet fetched (its rows mirrored into
/// rkt's database) all succeed: none takes the image for rkt's while another
/// has removed it from rktlet's index but not yet from rkt's database
/// (critest v1.36's simultaneous RemoveImage calls failed so).
#[test]
fn simultaneous_removals_of_an_image_rktlet_fetched_all_succeed() {
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(&DataDir::new(t.path().join("data")), RegistryConfig::default()).unwrap();
    for round in 0..20 {
        let key = format!("sha512-{:0>128}", format!("{round:x}"))[..71].to_string();
        put_blob(&store, &key);
        let path = store.cas().image_manifest(&key);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let manifest = r#"{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/gone"}"#;
        fs::write(path, manifest).unwrap();
        let row = rkt::cas::AciInfo {
            blobkey: key.clone(),
            name: "example.com/gone".into(),
            importtime: 1,
            lastused: 1,
            latest: true,
            size: 4,
            treestoresize: 0,
            verified: true,
        };
        store.cas().update_index(|i| i.upsert_aci(row)).unwrap();
        std::thread::scope(|s| {
            let calls: Vec<_> = (0..6).map(|_| s.spawn(|| store.remove(&key))).collect();
            for call in calls {
                let got = call.join().unwrap();
                assert!(got.is_ok(), "round {round}: {got:?}");
            }
        });
        assert!(store.list().unwrap().is_empty(), "round {round}");
    }
}
