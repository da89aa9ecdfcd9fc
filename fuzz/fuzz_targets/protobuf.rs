//! The protobuf decoder on one frame payload: never panics, emits only names that are valid
//! UTF-8, sizes what a frame decodes into exactly (the decoded-size budget relies on it), and
//! the two-step decode (parse, then emit) the receivers use answers as the one-call decode.
#![no_main]

use anthracite::DropCounts;
use anthracite::unstable::protocol::pickle::{DECODED_POINT_BYTES, DECODER_KEEP_BYTES};
use anthracite::unstable::protocol::protobuf::ProtobufDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut decoder = ProtobufDecoder::new();
    let mut drops = DropCounts::default();
    let mut whole = Vec::new();
    let result = decoder.decode(data, &mut drops, |name, t, v| {
        assert!(std::str::from_utf8(name).is_ok(), "emitted a name that is not UTF-8");
        whole.push((name.to_vec(), t.to_bits(), v.to_bits()));
    });
    if let Ok(n) = result {
        assert_eq!(n, whole.len());
    }
    assert!(decoder.scratch_bytes() <= DECODER_KEEP_BYTES);

    let mut steps_drops = DropCounts::default();
    let parsed = decoder.parse_frame(data, &mut steps_drops);
    assert_eq!(parsed.is_ok(), result.is_ok(), "{parsed:?} != {result:?}");
    if parsed.is_ok() {
        let mut steps = Vec::new();
        let decoded = decoder.decoded_bytes();
        decoder.emit(data, |run| {
            steps.extend(run.iter().map(|&(n, t, v)| (n.to_vec(), t.to_bits(), v.to_bits())))
        });
        let sized: usize = steps.iter().map(|(n, _, _)| n.len() + DECODED_POINT_BYTES).sum();
        assert_eq!(decoded, sized, "decoded_bytes disagrees with what was emitted");
        assert!(steps == whole, "two-step decode differs from decode");
        assert_eq!(steps_drops, drops);
    }
    decoder.finish_frame();
    assert!(decoder.scratch_bytes() <= DECODER_KEEP_BYTES);
});
