//! Layer extraction into a temporary root: never panics, and nothing is
//! ever written outside the root (`..`, absolute paths, symlinks and hard
//! links pointing out must all stay in).
#![no_main]
use libfuzzer_sys::fuzz_target;
use rkt::extract::Unpacker;

fuzz_target!(|data: &[u8]| {
    let Ok(t) = tempfile::tempdir() else { return };
    let root = t.path().join("root");
    if std::fs::create_dir(&root).is_err() {
        return;
    }
    let _ = Unpacker::new(&root, false).unpack(data);
    let outside: Vec<_> = std::fs::read_dir(t.path()).expect("tempdir").flatten().map(|e| e.file_name()).collect();
    assert_eq!(outside, vec![std::ffi::OsString::from("root")], "something was written beside the root");
});
