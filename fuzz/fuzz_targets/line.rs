//! The plaintext framer and parser: a byte stream cut into reads at arbitrary points, every
//! line parsed and normalised as a TCP connection does. Checks the framer's own promises: no
//! line over the limit is handed out, and the buffer never grows past the limit.
#![no_main]

use anthracite::unstable::protocol::line::{LineFramer, parse_line};
use anthracite::unstable::protocol::normalize;
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&knobs, stream)) = data.split_first() else {
        return;
    };
    // Line limit 64..=1087 and read size 1..=16 from the first byte.
    let max_len = 64 + usize::from(knobs & 0x0f) * 64;
    let read = 1 + usize::from(knobs >> 4);
    let mut framer = LineFramer::new(max_len);
    let mut buf = BytesMut::new();
    for chunk in stream.chunks(read * 7) {
        buf.extend_from_slice(chunk);
        framer.feed(&mut buf, |line| {
            if let Ok(line) = line {
                assert!(
                    line.len() <= max_len,
                    "a line over the limit was handed out"
                );
                if let Ok((name, timestamp, value)) = parse_line(line) {
                    assert!(!name.is_empty());
                    let _ = normalize(timestamp, value, 1.7e9);
                }
            }
        });
        assert!(buf.len() <= max_len, "the framer kept {} bytes", buf.len());
    }
    let _ = framer.finish(&mut buf);
    assert!(buf.is_empty());
});
