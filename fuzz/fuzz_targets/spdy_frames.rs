//! SPDY/3.1 frames from a client (with zlib-compressed header blocks):
//! reading a session's bytes never panics and always ends.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rktlet::stream::spdy;

fuzz_target!(|data: &[u8]| {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else { return };
    rt.block_on(async {
        let Ok(mut codec) = spdy::Codec::new() else { return };
        let mut r = data;
        while let Ok(Some(_)) = spdy::read_frame(&mut r, &mut codec).await {}
    });
});
