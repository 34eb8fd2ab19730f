//! Image manifests, indexes and configs from a registry: parsing (with the
//! lenient filling-in oci-spec's types need) and platform selection never
//! panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rktlet::image::oci;

fuzz_target!(|data: &[u8]| {
    for content_type in ["", "application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json"] {
        if let Ok(oci::AnyManifest::Index(index)) = oci::parse_manifest(data, content_type) {
            let _ = oci::select_platform(index.manifests(), &oci::host_platform());
        }
    }
    let _ = oci::parse_config(data);
});
