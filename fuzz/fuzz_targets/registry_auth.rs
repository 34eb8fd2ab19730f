//! What a registry and kubelet send for authentication, parsed by hand:
//! `WWW-Authenticate` challenges (quoted parameters, escapes) and CRI's
//! base64 `auth` field. Never panics; a Bearer challenge has its realm.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rktlet::image::auth::{Challenge, Credentials, parse_challenge};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Some(Challenge::Bearer { realm, .. }) = parse_challenge(s) {
        assert!(s.contains(realm.as_str()) || realm.is_empty() || s.contains('\\'));
    }
    let c = Credentials::from_cri("", "", s, "", "");
    let _ = c.basic_header();
});
