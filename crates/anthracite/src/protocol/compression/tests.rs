use std::io::Write;

use bytes::BytesMut;

use super::*;

/// Lines as a relay writes them: similar names, so they compress as real ones do.
fn lines(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        let _ = writeln!(
            out,
            "servers.host{:03}.cpu.cpu{}.user {}.5 {}",
            i % 200,
            i % 8,
            i,
            1_700_000_000 + i
        );
    }
    out
}

/// Pushes `wire` in reads of `step` bytes, pulling after each; everything decoded.
fn decode_in_steps(
    kind: Compression,
    budget: usize,
    wire: &[u8],
    step: usize,
) -> Result<Vec<u8>, DecompressError> {
    let mut d = Decompressor::new(kind, budget).expect("a compressed kind");
    let mut out = BytesMut::new();
    for read in wire.chunks(step) {
        d.push(read);
        while d.pull(&mut out)? > 0 {}
    }
    Ok(out.to_vec())
}

/// What anthracite's compressor writes for `writes`, one write each.
fn compressed(kind: Compression, writes: &[&[u8]]) -> Vec<u8> {
    let mut c = Compressor::new(kind).expect("a compressed kind");
    let mut out = BytesMut::new();
    for w in writes {
        c.compress(w, &mut out).expect("compresses");
    }
    out.to_vec()
}

const KINDS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Lz4,
    Compression::Snappy,
    Compression::Zstd,
];

#[test]
fn every_kind_round_trips_in_any_read_size() {
    let a = lines(3000);
    let b = lines(7);
    let mut want = a.clone();
    want.extend_from_slice(&b);
    for kind in KINDS {
        let wire = compressed(kind, &[&a, &b]);
        assert!(wire.len() < want.len() / 3, "{kind:?} compresses lines");
        for step in [1, 7, 1000, 65536, wire.len()] {
            let got = decode_in_steps(kind, DEFAULT_BUDGET, &wire, step)
                .unwrap_or_else(|e| panic!("{kind:?} in reads of {step}: {e:?}"));
            assert!(got == want, "{kind:?} in reads of {step}: output differs");
        }
    }
}

#[test]
fn each_write_is_decodable_as_soon_as_it_arrives() {
    // carbon-c-relay flushes per write and its peer decodes each at once; so does ours.
    for kind in KINDS {
        let mut c = Compressor::new(kind).expect("a compressed kind");
        let mut d = Decompressor::new(kind, DEFAULT_BUDGET).expect("a compressed kind");
        for i in 0..5 {
            let write = lines(10 + i);
            let mut wire = BytesMut::new();
            c.compress(&write, &mut wire).expect("compresses");
            d.push(&wire);
            let mut out = BytesMut::new();
            while d.pull(&mut out).expect("decodes") > 0 {}
            assert!(out[..] == write[..], "{kind:?}: write {i} decoded at once");
        }
    }
}

#[test]
fn lz4_and_snappy_write_one_unit_per_32_kib() {
    let big = lines(5000);
    assert!(big.len() > 3 * UNIT_BYTES);
    let lz4 = compressed(Compression::Lz4, &[&big]);
    let mut frames = 0;
    let mut at = 0;
    while at < lz4.len() {
        match frames::lz4_unit(&lz4[at..], DEFAULT_BUDGET) {
            Ok(Some(frames::Lz4Unit::Frame(n))) => at += n,
            other => panic!("not a whole frame at {at}: {other:?}"),
        }
        frames += 1;
    }
    assert_eq!(frames, big.len().div_ceil(UNIT_BYTES));
    let snappy = compressed(Compression::Snappy, &[&big]);
    let (mut blocks, mut at) = (0, 0);
    while at < snappy.len() {
        match frames::snappy_block(&snappy[at..], DEFAULT_BUDGET) {
            Ok(Some((len, n))) => {
                assert!(len <= UNIT_BYTES);
                at += n;
            }
            other => panic!("not a whole block at {at}: {other:?}"),
        }
        blocks += 1;
    }
    assert_eq!(blocks, big.len().div_ceil(UNIT_BYTES));
}

#[test]
fn gzip_of_another_encoder_with_flushes_and_two_members_decodes() {
    // flate2's GzEncoder writes a full gzip member (header, deflate, CRC and length).
    let (a, b) = (lines(500), lines(300));
    let mut wire = Vec::new();
    for part in [&a, &b] {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&part[..100]).expect("writes");
        gz.flush().expect("flushes");
        gz.write_all(&part[100..]).expect("writes");
        wire.extend(gz.finish().expect("finishes"));
    }
    let mut want = a.clone();
    want.extend_from_slice(&b);
    for step in [1, 33, wire.len()] {
        let got = decode_in_steps(Compression::Gzip, DEFAULT_BUDGET, &wire, step).expect("decodes");
        assert!(got == want, "reads of {step}");
    }
}

#[test]
fn lz4_frames_of_the_reference_layout_decode() {
    // lz4_flex's default frame (linked blocks, a content checksum), as liblz4 writes them
    // by default, several in a row and split anywhere.
    let (a, b) = (lines(4000), lines(20));
    let mut wire = Vec::new();
    for part in [&a, &b] {
        let info = lz4_flex::frame::FrameInfo::new()
            .content_checksum(true)
            .block_mode(lz4_flex::frame::BlockMode::Linked);
        let mut f = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        f.write_all(part).expect("writes");
        wire.extend(f.finish().expect("finishes"));
    }
    let mut want = a.clone();
    want.extend_from_slice(&b);
    for step in [1, 4096, wire.len()] {
        let got = decode_in_steps(Compression::Lz4, DEFAULT_BUDGET, &wire, step).expect("decodes");
        assert!(got == want, "reads of {step}");
    }
}

/// A unit of `n` zero bytes with no newline, in `kind`.
fn bomb(kind: Compression, n: usize) -> Vec<u8> {
    let zeros = vec![b'0'; n];
    match kind {
        Compression::Lz4 => {
            let info =
                lz4_flex::frame::FrameInfo::new().block_size(lz4_flex::frame::BlockSize::Max4MB);
            let mut f = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            f.write_all(&zeros).expect("writes");
            f.finish().expect("finishes")
        }
        Compression::Snappy => snap::raw::Encoder::new()
            .compress_vec(&zeros)
            .expect("compresses"),
        // A bomb is made at the best ratio (the relay's own writer uses level 1).
        Compression::Gzip => {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            gz.write_all(&zeros).expect("writes");
            gz.finish().expect("finishes")
        }
        _ => compressed(kind, &[&zeros]),
    }
}

#[test]
fn a_unit_decoding_past_the_budget_is_refused() {
    let budget = 1 << 20;
    for kind in KINDS {
        let wire = bomb(kind, 8 << 20);
        // snappy expands at most about 20 times: its "bomb" is refused by its declared length.
        assert!(
            kind == Compression::Snappy || wire.len() < budget,
            "{kind:?}: the bomb is small ({})",
            wire.len()
        );
        let refused = decode_in_steps(kind, budget, &wire, wire.len());
        assert!(
            refused == Err(DecompressError::TooLarge),
            "{kind:?}: {:?}",
            refused.map(|v| v.len())
        );
        // Within the budget the same kind of unit decodes.
        let small = compressed(kind, &[&vec![b'0'; budget / 2]]);
        let got = decode_in_steps(kind, budget, &small, small.len()).expect("within budget");
        assert_eq!(got.len(), budget / 2, "{kind:?}");
    }
}

#[test]
fn pieces_are_bounded_and_lines_before_a_bomb_are_kept() {
    let good = lines(100);
    let mut wire = compressed(Compression::Lz4, &[&good]);
    wire.extend(bomb(Compression::Lz4, 8 << 20));
    let mut d = Decompressor::new(Compression::Lz4, 1 << 20).expect("lz4");
    d.push(&wire);
    let mut out = BytesMut::new();
    let mut result = Ok(1);
    while let Ok(n @ 1..) = result {
        assert!(n <= PIECE);
        result = d.pull(&mut out);
    }
    assert_eq!(result, Err(DecompressError::TooLarge));
    assert!(out[..] == good[..]);
}

#[test]
fn garbage_is_refused_as_corrupt() {
    let garbage = b"this is not compressed at all\n".repeat(10);
    for kind in [Compression::Gzip, Compression::Lz4, Compression::Zstd] {
        assert_eq!(
            decode_in_steps(kind, DEFAULT_BUDGET, &garbage, 5),
            Err(DecompressError::Corrupt),
            "{kind:?}"
        );
    }
}

#[test]
fn snappy_block_extent_walks_every_element_kind() {
    // A literal with a 1-byte length, copies with 1-, 2- and 4-byte offsets.
    let mut block = vec![70]; // decoded length 70
    block.push(60 << 2); // literal, length in the next byte
    block.push(9); // 10 bytes
    block.extend_from_slice(b"0123456789");
    block.extend_from_slice(&[(1 | ((8 - 4) << 2)), 10]); // copy 8 from offset 10
    block.extend_from_slice(&[(2 | ((20 - 1) << 2)), 10, 0]); // copy 20 from offset 10
    block.extend_from_slice(&[(3 | ((32 - 1) << 2)), 10, 0, 0, 0]); // copy 32
    assert_eq!(
        frames::snappy_block(&block, 1000),
        Ok(Some((70, block.len())))
    );
    for cut in 0..block.len() {
        assert_eq!(
            frames::snappy_block(&block[..cut], 1000),
            Ok(None),
            "cut at {cut}"
        );
    }
    let mut out = vec![0; 70];
    assert_eq!(
        snap::raw::Decoder::new().decompress(&block, &mut out),
        Ok(70)
    );
    assert_eq!(
        frames::snappy_block(&block, 69),
        Err(DecompressError::TooLarge)
    );
}

#[test]
fn words_name_every_kind() {
    for c in Compression::ALL {
        assert_eq!(Compression::from_word(c.word()), Some(c));
    }
    assert_eq!(Compression::from_word(""), Some(Compression::Plain));
    assert_eq!(Compression::from_word("brotli"), None);
}

#[test]
fn a_zstd_window_past_the_budget_is_refused_as_too_large() {
    // libzstd's streaming default at level 3 is a 2 MiB window: the default budget admits it,
    // the smallest one does not.
    let good = lines(200);
    let wire = zstd::encode_all(&good[..], 3).expect("zstd");
    let got = decode_in_steps(Compression::Zstd, DEFAULT_BUDGET, &wire, wire.len());
    assert!(got.expect("decodes") == good);
    assert_eq!(
        decode_in_steps(Compression::Zstd, MIN_BUDGET, &wire, wire.len()),
        Err(DecompressError::TooLarge)
    );
}

#[test]
fn a_zstd_frame_without_output_does_not_hold_up_the_next() {
    let good = lines(50);
    let mut wire = zstd::encode_all(&b""[..], 3).expect("zstd");
    wire.extend(zstd::encode_all(&good[..], 3).expect("zstd"));
    let mut d = Decompressor::new(Compression::Zstd, DEFAULT_BUDGET).expect("zstd");
    d.push(&wire);
    let mut out = BytesMut::new();
    while d.pull(&mut out).expect("decodes") > 0 {}
    assert!(out[..] == good[..], "both frames decoded from one read");
}

#[test]
fn a_long_regular_stream_is_not_a_bomb() {
    // Far more than the budget in total, at the ratios lines compress to: a stream is bounded
    // by its ratio, not by its length.
    let regular = lines(30_000);
    assert!(regular.len() > 8 * MIN_BUDGET);
    for kind in [Compression::Gzip, Compression::Zstd] {
        let wire = compressed(kind, &[&regular, &regular]);
        for step in [1 << 10, 64 << 10] {
            let got = decode_in_steps(kind, MIN_BUDGET, &wire, step)
                .unwrap_or_else(|e| panic!("{kind:?} in reads of {step}: {e:?}"));
            assert_eq!(got.len(), 2 * regular.len(), "{kind:?}");
        }
    }
}
