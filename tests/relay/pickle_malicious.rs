//! Hostile pickles: code-execution opcodes, length bombs, deep nesting, truncation, garbage.
//!
//! Every one must be refused whole with `BadPickle`, without panicking and without allocating
//! in proportion to a length the frame merely claims. A counting allocator (per thread, so
//! parallel tests do not disturb each other) checks the allocation bound.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use anthracite::unstable::batch::Datapoint;
use anthracite::unstable::protocol::pickle::{PickleDecoder, encode_message};
use anthracite::{DropCounts, DropReason};
use bytes::BytesMut;
use proptest::prelude::*;

struct Counting;

thread_local! {
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    // `try_with`: the thread-local may already be gone while a thread shuts down.
    let _ = ALLOCATED.try_with(|a| a.set(a.get().saturating_add(bytes)));
}

// SAFETY: defers every operation to `System`, only adding a thread-local counter.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Decodes `payload` with a fresh decoder; returns the result and the bytes allocated doing it.
fn decode_counting(payload: &[u8]) -> (Result<usize, DropReason>, usize) {
    let mut decoder = PickleDecoder::new();
    let mut drops = DropCounts::default();
    let before = ALLOCATED.with(Cell::get);
    let result = decoder.decode(payload, &mut drops, |_, _, _| {});
    let after = ALLOCATED.with(Cell::get);
    (result, after - before)
}

/// Refused whole, allocating at most `budget` bytes.
fn assert_rejected(what: &str, payload: &[u8], budget: usize) {
    let (result, allocated) = decode_counting(payload);
    assert_eq!(result, Err(DropReason::BadPickle), "{what}");
    assert!(
        allocated <= budget,
        "{what}: allocated {allocated} bytes, budget {budget}"
    );
}

const SMALL: usize = 64 * 1024;

/// A valid protocol-2 list of one entry, to prefix or wrap hostile opcodes.
fn valid_frame() -> Vec<u8> {
    let mut out = BytesMut::new();
    let points = [Datapoint {
        name: b"a.b",
        timestamp: 1.7e9,
        value: 1.0,
    }];
    encode_message(points.into_iter(), &mut out);
    out[4..].to_vec()
}

#[test]
fn global_os_system_protocol0_is_refused() {
    assert_rejected(
        "GLOBAL os.system",
        b"cos\nsystem\n(S'echo pwned'\ntR.",
        SMALL,
    );
    assert_rejected("GLOBAL alone", b"cos\nsystem\n.", SMALL);
    assert_rejected(
        "GLOBAL builtins.eval",
        b"\x80\x02cbuiltins\neval\nX\x04\x00\x00\x001+1\x85R.",
        SMALL,
    );
    // carbon's own SafeUnpickler allowlist entry is refused too: we build no objects at all.
    assert_rejected(
        "copy_reg._reconstructor",
        b"ccopy_reg\n_reconstructor\n(c__builtin__\nobject\nNNtR.",
        SMALL,
    );
}

#[test]
fn object_building_opcodes_are_refused() {
    let cases: &[(&str, &[u8])] = &[
        (
            "STACK_GLOBAL",
            b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x02id\x85R.",
        ),
        ("REDUCE on a list", b"]](R."),
        ("BUILD", b"]}b."),
        ("INST", b"(S'x'\nios\nsystem\n."),
        ("OBJ", b"(]o."),
        ("NEWOBJ", b"\x80\x02])\x81."),
        ("NEWOBJ_EX", b"\x80\x04])}\x92."),
        ("PERSID", b"P1\n."),
        ("BINPERSID", b"K\x01Q."),
        ("EXT1", b"\x80\x02\x82\x01."),
        ("EXT2", b"\x80\x02\x83\x01\x00."),
        ("EXT4", b"\x80\x02\x84\x01\x00\x00\x00."),
        ("NEXT_BUFFER", b"\x80\x05\x97."),
        ("READONLY_BUFFER", b"\x80\x05C\x01x\x98."),
        ("unknown opcode", b"\x80\x02\xff."),
        ("protocol 6", b"\x80\x06]."),
    ];
    for (what, payload) in cases {
        assert_rejected(what, payload, SMALL);
    }
    // Hidden after valid entries: the whole frame goes, nothing is emitted.
    let mut frame = valid_frame();
    frame.pop(); // STOP
    frame.extend_from_slice(b"cos\nsystem\n.");
    let mut emitted = 0;
    let result =
        PickleDecoder::new().decode(&frame, &mut DropCounts::default(), |_, _, _| emitted += 1);
    assert_eq!((result, emitted), (Err(DropReason::BadPickle), 0));
}

#[test]
fn length_bombs_allocate_nothing_proportional_to_the_claim() {
    let cases: &[(&str, &[u8])] = &[
        (
            "BINUNICODE8 2^63",
            b"\x80\x04\x8d\x00\x00\x00\x00\x00\x00\x00\x80abc.",
        ),
        (
            "BINUNICODE8 u64::MAX",
            b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xffabc.",
        ),
        (
            "BINBYTES8 1 TiB",
            b"\x80\x04\x8e\x00\x00\x00\x00\x00\x01\x00\x00abc.",
        ),
        (
            "BYTEARRAY8 1 TiB",
            b"\x80\x05\x96\x00\x00\x00\x00\x00\x01\x00\x00abc.",
        ),
        ("BINUNICODE 4 GiB", b"\x80\x02X\xff\xff\xff\xffabc."),
        ("BINBYTES 4 GiB", b"\x80\x03B\xff\xff\xff\xffabc."),
        ("BINSTRING 2 GiB", b"\x80\x02T\xff\xff\xff\x7fabc."),
        ("BINSTRING negative", b"\x80\x02T\xff\xff\xff\xffabc."),
        ("LONG4 2 GiB", b"\x80\x02\x8b\xff\xff\xff\x7f\x01."),
        ("LONG4 negative", b"\x80\x02\x8b\x00\x00\x00\x80\x01."),
        ("LONG1 past end", b"\x80\x02\x8a\xff\x01\x02."),
        (
            "FRAME 2^64-1",
            b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\xff].",
        ),
        (
            "FRAME 1 GiB",
            b"\x80\x04\x95\x00\x00\x00\x40\x00\x00\x00\x00].",
        ),
        ("SHORT_BINUNICODE past end", b"\x80\x04\x8c\xffab."),
        ("LONG_BINPUT 4G", b"]r\xff\xff\xff\xff."),
        ("LONG_BINGET 4G", b"]j\xff\xff\xff\xff."),
        ("PUT huge decimal", b"]p99999999999999999999999\n."),
        ("PUT 1e9", b"]p1000000000\n."),
        ("GET missing", b"]h\x05."),
    ];
    for (what, payload) in cases {
        assert_rejected(what, payload, SMALL);
    }
}

#[test]
fn deep_nesting_is_refused_without_recursion() {
    let n = 100_000;
    let mut marks = vec![b'('; n];
    marks.extend_from_slice(b"].");
    assert_rejected("100k MARKs", &marks, 4 * 1024 * 1024);

    // ]]]]…aaaa.: lists nested 100k deep through APPEND alone, no MARK.
    let mut lists = vec![b']'; n];
    lists.extend(std::iter::repeat_n(b'a', n - 1));
    lists.push(b'.');
    assert_rejected("100k nested lists", &lists, 16 * 1024 * 1024);

    // ((((…)tttt.: tuples nested through MARK/TUPLE.
    let mut tuples = b"(".repeat(2000);
    tuples.push(b')');
    tuples.extend(b"t".repeat(2000));
    tuples.push(b'.');
    assert_rejected("2000 nested tuples", &tuples, 4 * 1024 * 1024);

    // A list appended to itself over and over grows deeper each time.
    let mut cyclic = b"]q\x00".to_vec();
    for _ in 0..5000 {
        cyclic.extend_from_slice(b"h\x00a");
    }
    cyclic.push(b'.');
    assert_rejected("self-appending list", &cyclic, 4 * 1024 * 1024);

    // Just under the limits decodes (and yields no datapoints).
    let mut ok = vec![b']'; 999];
    ok.extend(std::iter::repeat_n(b'a', 998));
    ok.push(b'.');
    assert_eq!(decode_counting(&ok).0, Ok(0));
}

#[test]
fn memo_sharing_is_by_reference_not_copy() {
    // Billion laughs: each level is a list holding the previous level ten times.
    let mut p = b"\x80\x02](X\x03\x00\x00\x00a.bJ\x00\xf1SeK\x01\x86\x86eq\x00".to_vec();
    for level in 0u8..40 {
        p.extend_from_slice(b"](");
        for _ in 0..10 {
            p.extend_from_slice(&[b'h', level]);
        }
        p.extend_from_slice(&[b'e', b'q', level + 1]);
    }
    p.push(b'.');
    let (result, allocated) = decode_counting(&p);
    // The top list holds ten lists, none of which is an entry.
    assert_eq!(result, Ok(0));
    assert!(allocated < SMALL, "allocated {allocated}");
}

#[test]
fn truncated_frames_are_refused() {
    let frame = valid_frame();
    for cut in 0..frame.len() {
        assert_rejected(&format!("cut at {cut}"), &frame[..cut], SMALL);
    }
    let proto0 = b"(lp0\n(S'a'\np1\n(I1\nF2.5\ntp2\ntp3\na.";
    for cut in 0..proto0.len() {
        assert_rejected(&format!("protocol 0 cut at {cut}"), &proto0[..cut], SMALL);
    }
}

#[test]
fn malformed_protocol0_arguments_are_refused() {
    let cases: &[(&str, &[u8])] = &[
        ("unquoted STRING", b"S'abc\n."),
        ("mismatched quotes", b"S'abc\"\n."),
        ("trailing backslash", b"S'ab\\'\n."),
        ("bad \\x escape", b"S'\\xZZ'\n."),
        ("truncated \\u", b"V\\u12\n."),
        ("\\U out of range", b"V\\U00110000\n."),
        ("INT garbage", b"I12a\n."),
        ("INT empty", b"I\n."),
        ("FLOAT with underscore", b"F1_0\n."),
        ("FLOAT overflow", b"F1e999\n."),
        ("FLOAT garbage", b"Fabc\n."),
        ("LONG garbage", b"L12xL\n."),
        ("negative PUT", b"]p-1\n."),
        ("odd DICT", b"(K\x01d."),
        ("odd SETITEMS", b"}(K\x01u."),
        ("unhashable key", b"}]K\x01s."),
        ("SETITEM on list", b"]K\x01K\x02s."),
        ("APPEND on tuple", b")K\x01a."),
        ("ADDITEMS on frozenset", b"\x80\x04(\x91(K\x01\x90."),
        ("pop below mark", b"K\x01(0."),
        ("POP_MARK without mark", b"K\x011."),
        ("STOP on empty stack", b"."),
        ("STOP above mark", b"K\x01(."),
        ("DUP on empty", b"2."),
        ("TUPLE2 across mark", b"K\x01(K\x02\x86."),
        ("invalid BINUNICODE UTF-8", b"X\x01\x00\x00\x00\xff."),
        ("not a list", b"K\x01."),
    ];
    for (what, payload) in cases {
        assert_rejected(what, payload, SMALL);
    }
}

/// Valid frames of three protocols for the mutation test (memo, FRAME, LONG1, protocol-0 text).
fn seed_frames() -> [Vec<u8>; 3] {
    [
        valid_frame(),
        // python3.11: [('a.b', (1700000000, 2.5)), ('温', (12, True))], protocol 0 by hand.
        b"(lp0\n(S'a.b'\np1\n(I1700000000\nF2.5\ntp2\ntp3\na(V\\u6e29\np4\n(L12L\nI01\ntp5\ntp6\na."
            .to_vec(),
        // python3.11: pickle.dumps([(n, (T, -(2**71))), (n, (T, 2.5)), ('温', [T, True])], 5)
        b"\x80\x05\x95\x45\x00\x00\x00\x00\x00\x00\x00\x5d\x94\x28\x8c\x03\x61\x2e\x62\x94\x4a\x00\xf1\x53\x65\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x80\x86\x94\x86\x94\x68\x01\x4a\x00\xf1\x53\x65\x47\x40\x04\x00\x00\x00\x00\x00\x00\x86\x94\x86\x94\x8c\x03\xe6\xb8\xa9\x94\x5d\x94\x28\x4a\x00\xf1\x53\x65\x88\x65\x86\x94\x65\x2e"
            .to_vec(),
    ]
}

#[test]
fn mutation_seed_frames_are_valid() {
    let want = [1, 2, 3];
    for (seed, want) in seed_frames().iter().zip(want) {
        assert_eq!(decode_counting(seed).0, Ok(want));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut drops = DropCounts::default();
        let _ = PickleDecoder::new().decode(&bytes, &mut drops, |_, _, _| {});
    }

    #[test]
    fn mutated_valid_frames_never_panic(
        which in 0usize..3,
        edits in proptest::collection::vec((any::<u16>(), any::<u8>(), 0u8..3), 1..8),
    ) {
        let mut bytes = seed_frames()[which].clone();
        for (pos, byte, kind) in edits {
            let len = bytes.len();
            let at = usize::from(pos) % (len + 1);
            match kind {
                0 if at < len => bytes[at] = byte,
                1 => bytes.insert(at, byte),
                _ if at < len => { bytes.remove(at); }
                _ => bytes.push(byte),
            }
        }
        let mut decoder = PickleDecoder::new();
        let mut drops = DropCounts::default();
        // Reuse the decoder across a hostile and a valid frame: scratch state must not leak.
        let _ = decoder.decode(&bytes, &mut drops, |_, _, _| {});
        let mut names = Vec::new();
        let ok = decoder.decode(&valid_frame(), &mut drops, |n, t, v| names.push((n.to_vec(), t, v)));
        prop_assert_eq!(ok, Ok(1));
        prop_assert_eq!(names, vec![(b"a.b".to_vec(), 1.7e9, 1.0)]);
    }
}
