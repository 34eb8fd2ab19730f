//! Image manifests, indexes and configs from a registry: parsing and
//! platform selection never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rktlet::image::oci;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = serde_json::from_slice::<oci::AnyManifest>(data) {
        let _ = m.is_index("application/vnd.oci.image.index.v1+json");
        let _ = oci::select_platform(&m.manifests, &oci::host_platform());
    }
    let _ = serde_json::from_slice::<oci::ImageConfig>(data);
});
