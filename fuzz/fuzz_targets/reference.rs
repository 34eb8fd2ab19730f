//! Docker references: parsing never panics, and what parses prints back to
//! a string that parses to the same reference.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rkt::reference::Reference;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(r) = s.parse::<Reference>() {
        let again: Reference = r.to_string().parse().expect("a printed reference parses");
        assert_eq!(again, r);
    }
});
