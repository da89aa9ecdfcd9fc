//! The pickle decoder on one frame payload: never panics, never executes anything, emits
//! only names that are valid UTF-8, and keeps at most its documented scratch space afterwards.
#![no_main]

use anthracite::unstable::protocol::DropCounts;
use anthracite::unstable::protocol::pickle::{DECODER_KEEP_BYTES, PickleDecoder};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut decoder = PickleDecoder::new();
    let mut drops = DropCounts::default();
    let mut emitted = 0;
    let result = decoder.decode(data, &mut drops, |name, _, _| {
        assert!(std::str::from_utf8(name).is_ok(), "emitted a name that is not UTF-8");
        emitted += 1;
    });
    if let Ok(n) = result {
        assert_eq!(n, emitted);
    }
    assert!(decoder.scratch_bytes() <= DECODER_KEEP_BYTES);
    // The same decoder takes the next frame as a fresh one.
    let _ = decoder.decode(data, &mut drops, |_, _, _| {});
});
