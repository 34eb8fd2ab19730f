//! CRI log lines as attach reads them back: never panics; a stream is
//! always stdout or stderr.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for line in data.split(|b| *b == b'\n') {
        if let Some((channel, _)) = rktlet::stream::attach::parse_line(line) {
            assert!(channel == 1 || channel == 2);
        }
    }
});
