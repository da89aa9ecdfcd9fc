//! The pickle decoder on one frame payload: never panics, never executes anything, emits
//! only names that are valid UTF-8, keeps at most its documented scratch space afterwards,
//! and its fast path for the senders' shape answers exactly as the general machine does.
#![no_main]

use anthracite::DropCounts;
use anthracite::unstable::protocol::pickle::{DECODER_KEEP_BYTES, PickleDecoder};
use libfuzzer_sys::fuzz_target;

type Answer = (
    Result<usize, anthracite::DropReason>,
    Vec<(Vec<u8>, u64, u64)>,
    DropCounts,
);

fn answer(decoder: &mut PickleDecoder, data: &[u8], fast_path: bool) -> Answer {
    let mut drops = DropCounts::default();
    let mut got = Vec::new();
    let mut emit = |name: &[u8], t: f64, v: f64| {
        assert!(
            std::str::from_utf8(name).is_ok(),
            "emitted a name that is not UTF-8"
        );
        got.push((name.to_vec(), t.to_bits(), v.to_bits()));
    };
    let result = if fast_path {
        decoder.decode(data, &mut drops, &mut emit)
    } else {
        decoder.decode_without_fast_path(data, &mut drops, &mut emit)
    };
    if let Ok(n) = result {
        assert_eq!(n, got.len());
    }
    (result, got, drops)
}

fuzz_target!(|data: &[u8]| {
    let mut decoder = PickleDecoder::new();
    let fast = answer(&mut decoder, data, true);
    assert!(decoder.scratch_bytes() <= DECODER_KEEP_BYTES);
    // The same decoder takes the next frame as a fresh one, through the machine alone.
    let general = answer(&mut decoder, data, false);
    assert!(fast == general, "fast path {fast:?} != machine {general:?}");
});
