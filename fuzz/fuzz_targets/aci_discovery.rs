//! ACI discovery pages (HTML from the network, its `<meta>` tags read by
//! hand): never panics, and every endpoint offered has its templates filled.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rktlet::image::discovery;
use std::collections::BTreeMap;

fuzz_target!(|data: &[u8]| {
    let Ok(html) = std::str::from_utf8(data) else { return };
    let _ = discovery::meta_tags(html, "ac-discovery-pubkeys");
    let labels = BTreeMap::from([("version".to_string(), "1.0".to_string()), ("os".to_string(), "linux".to_string())]);
    for endpoint in discovery::endpoints_in(html, "example.com/app", &labels) {
        for url in [&endpoint.aci, &endpoint.asc] {
            assert!(!url.contains('{') && !url.contains('}'), "{url}");
        }
    }
});
