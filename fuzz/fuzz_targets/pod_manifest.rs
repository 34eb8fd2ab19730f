//! rkt pod manifests: parsing never panics, and a parsed manifest survives
//! a write and a read unchanged.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rkt::schema::PodManifest;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = serde_json::from_slice::<PodManifest>(data) {
        let bytes = serde_json::to_vec(&m).expect("a parsed manifest serializes");
        let again: PodManifest = serde_json::from_slice(&bytes).expect("and parses back");
        assert_eq!(serde_json::to_value(&again).ok(), serde_json::to_value(&m).ok());
    }
});
