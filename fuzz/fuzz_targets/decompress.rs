//! The decompressing readers (gzip, lz4, snappy, zstd), on arbitrary bytes cut into reads at
//! arbitrary points, with a small budget: no panic, no piece over its size, nothing decoded
//! past the budget per unit. Then the bytes as lines through the compressor and back: the
//! same bytes in any read size.
#![no_main]

use anthracite::unstable::protocol::compression::{
    Compression, Compressor, Decompressor, MIN_BUDGET, PIECE,
};
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

const KINDS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Lz4,
    Compression::Snappy,
    Compression::Zstd,
];

fuzz_target!(|data: &[u8]| {
    let Some((&knobs, rest)) = data.split_first() else {
        return;
    };
    let kind = KINDS[usize::from(knobs & 3)];
    // Reads of 1..=64 bytes.
    let read = 1 + usize::from(knobs >> 2);
    let Some(mut d) = Decompressor::new(kind, MIN_BUDGET) else {
        return;
    };
    let mut out = BytesMut::new();
    'reads: for chunk in rest.chunks(read) {
        d.push(chunk);
        let mut unit = 0;
        loop {
            match d.pull(&mut out) {
                Ok(0) => break,
                Ok(n) => {
                    assert!(n <= PIECE, "a piece of {n} bytes");
                    unit += n;
                    // A read may finish frames decoded earlier: a few units at most.
                    assert!(unit <= 64 * MIN_BUDGET, "{unit} bytes from one read");
                    out.clear();
                }
                Err(_) => break 'reads,
            }
        }
    }

    // Round trip: the input as one or two writes, decoded in reads of `read` bytes.
    let Some(mut c) = Compressor::new(kind) else {
        return;
    };
    let mut wire = BytesMut::new();
    let half = rest.len() / 2;
    for write in [&rest[..half], &rest[half..]] {
        c.compress(write, &mut wire).expect("compresses");
    }
    let mut d = Decompressor::new(kind, 1 << 20).expect("a compressed kind");
    let mut back = BytesMut::new();
    for chunk in wire.chunks(read) {
        d.push(chunk);
        while d.pull(&mut back).expect("decodes what the compressor wrote") > 0 {}
    }
    assert!(back[..] == rest[..], "the round trip changed the bytes");
});
