//! carbon's pickle protocol: a safe decoder for protocols 0–5 and the protocol-2 encoder.
//!
//! On the wire a message is a 4-byte big-endian length followed by a pickle of
//! `[(name, (timestamp, value)), …]`; the receiver strips the length, [`PickleDecoder::decode`]
//! decodes one payload, and [`encode_message`] writes one whole message.
//!
//! # The decoder
//!
//! A small pickle virtual machine that builds data only: no opcode can import, call or
//! construct anything (`GLOBAL`, `REDUCE`, `BUILD`, `INST`, `OBJ`, `NEWOBJ*`, `PERSID`, `EXT*`,
//! out-of-band buffers and unknown opcodes reject the frame). It mirrors CPython's C
//! unpickler (stack with a separate mark stack and fence, memo semantics, `MEMOIZE` storing at
//! `len(memo)`, `FRAME` only checking that its bytes exist), so a frame Python would refuse is
//! refused here too.
//!
//! Values are a 16-byte `Val` enum: strings and bytes are spans of the payload (or of a
//! scratch arena for protocol-0 escapes), containers are indexes into reusable tables, so
//! nothing is allocated per value and a memo `GET` of a container shares it by index instead
//! of copying it (no billion-laughs blow-up). Limits keep hostile input cheap: every length is
//! checked against the bytes actually present before use, at most [`MAX_OBJECTS`] values are
//! created, container nesting and open marks are bounded by [`MAX_DEPTH`], and a memo index
//! cannot exceed the number of values created so far (real picklers number them densely).
//!
//! After the frame decoded, each entry is checked like carbon's
//! `metric, (timestamp, value) = item; float(timestamp), float(value)`: a malformed entry is
//! counted and skipped, the others are emitted.

use super::number::parse_py_float;
use super::{DropCounts, DropReason};

mod encode;
mod fast;
mod text;
mod vm;
pub(crate) use encode::MessageWriter;
pub use encode::encode_message;

/// Default maximum frame length (carbon's `PICKLE_RECEIVER_MAX_LENGTH`, 1 MiB).
pub(crate) const DEFAULT_MAX_FRAME: usize = 1 << 20;

/// Most values one frame may create (every push counts, including memo `GET`s and `DUP`s).
pub(crate) const MAX_OBJECTS: usize = 1 << 20;

/// Most scratch bytes a decoder keeps between frames ([`PickleDecoder::decode`]).
pub const DECODER_KEEP_BYTES: usize = 256 << 10;

/// Upper bound on a frame's scratch space per payload byte. Every value takes at least one
/// opcode byte and at most 64 bytes of tables (its stack slot, its container slot, its
/// object, a memo entry); tables grow by doubling. The tests below check the most expensive
/// shapes (one value per byte, memoised, nested) stay under it (they measure about 50).
#[cfg(test)]
const SCRATCH_PER_PAYLOAD_BYTE: usize = 128;

/// Deepest container nesting, and most simultaneously open `MARK`s, one frame may use.
pub(crate) const MAX_DEPTH: u32 = 1000;

const BAD: DropReason = DropReason::BadPickle;
const NONE: u32 = u32::MAX;

type Res<T> = Result<T, DropReason>;

/// Where a string's bytes live.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u32,
    len: u32,
    /// In the decoder's scratch arena (decoded escapes) rather than the payload.
    arena: bool,
}

// Values are copied around the stack, memo and tables: keep them two words.
const _: () = assert!(std::mem::size_of::<Val>() == 16);

/// One Python value, by reference into the payload or the decoder's tables.
#[derive(Clone, Copy, Debug)]
enum Val {
    None,
    /// `int` (and `bool`) that fits in an i64.
    Int(i64),
    /// Larger `int` from `LONG1`/`LONG4`: little-endian two's complement bytes.
    BigInt(Span),
    /// Larger `int` from the text opcodes `INT`/`LONG`: optional sign, digits, `_`.
    BigDec(Span),
    Float(f64),
    /// `str`, valid UTF-8.
    Str(Span),
    /// `str` holding lone surrogates: not representable in UTF-8.
    BadStr,
    /// `bytes`, `bytearray` or a Python 2 `str`.
    Bytes(Span),
    List(u32),
    Tuple(u32),
    Dict(u32),
    Set(u32),
    FrozenSet(u32),
}

#[derive(Clone, Copy, Debug)]
struct ListObj {
    head: u32,
    tail: u32,
    len: u32,
    depth: u32,
}

/// A run of a list's items in `list_items`; lists grow by chained chunks because appends to
/// different lists may interleave.
#[derive(Clone, Copy, Debug)]
struct Chunk {
    start: u32,
    len: u32,
    next: u32,
}

#[derive(Clone, Copy, Debug)]
struct TupleObj {
    start: u32,
    len: u32,
    depth: u32,
}

/// A reusable, safe pickle decoder (scratch buffers kept between frames).
#[derive(Debug, Default)]
pub struct PickleDecoder {
    stack: Vec<Val>,
    /// Stack lengths at each open `MARK`; the last one is the fence pops may not cross.
    marks: Vec<usize>,
    memo: Vec<Option<Val>>,
    memo_len: usize,
    lists: Vec<ListObj>,
    chunks: Vec<Chunk>,
    list_items: Vec<Val>,
    tuples: Vec<TupleObj>,
    tuple_items: Vec<Val>,
    /// Depths of dicts and sets, whose contents carbon never uses.
    others: Vec<u32>,
    arena: Vec<u8>,
    created: usize,
    /// Entries of a frame in the senders' shape ([`fast`]).
    fast: Vec<fast::Entry>,
    /// The parsed frame's top value when the general machine decoded it (`None`: the entries
    /// are in `fast`).
    top: Option<Val>,
}

/// What one decoded datapoint costs besides its name, in pending batches and queues (the
/// docs/operations.md "Memory": "names + 24 bytes per datapoint"): the unit of the decoded-size budget.
pub const DECODED_POINT_BYTES: usize = 24;

/// Most entries [`PickleDecoder::decode_batched`] hands over at once.
pub(crate) const ENTRY_RUN: usize = 128;

impl PickleDecoder {
    /// A new decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one frame payload (length prefix already removed). A frame that does not decode
    /// is rejected whole (`Err(BadPickle)`); otherwise each well-formed entry is passed to
    /// `emit(name, timestamp, value)` and each malformed entry is counted in `drops`.
    /// Returns the number of entries emitted.
    ///
    /// Entries that are not a pair of `(name, pair)`, or whose numbers `float()` would refuse
    /// (including ints too large for a float), count as `BadPickleEntry`; names that are not
    /// valid UTF-8 count as `BadUtf8`. Numbers are emitted raw, before
    /// [`super::normalize`].
    ///
    /// Afterwards the decoder keeps at most [`DECODER_KEEP_BYTES`] of scratch space.
    pub fn decode(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        emit: impl FnMut(&[u8], f64, f64),
    ) -> Result<usize, DropReason> {
        self.decode_each(payload, drops, emit, true)
    }

    /// [`decode`](Self::decode), handing the entries over in runs of up to [`ENTRY_RUN`]
    /// `(name, timestamp, value)`, in order. Afterwards the decoder keeps at most
    /// [`DECODER_KEEP_BYTES`] of scratch space.
    pub fn decode_batched(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        on_run: impl FnMut(&[(&[u8], f64, f64)]),
    ) -> Result<usize, DropReason> {
        let result = self.decode_runs(payload, drops, on_run, true);
        self.release_oversized();
        result
    }

    /// [`decode`](Self::decode) through the general virtual machine only, without the fast
    /// path for the shape carbon's senders write: for tests and fuzzing, which check that both
    /// give the same answer on every input.
    #[doc(hidden)]
    pub fn decode_without_fast_path(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        emit: impl FnMut(&[u8], f64, f64),
    ) -> Result<usize, DropReason> {
        self.decode_each(payload, drops, emit, false)
    }

    fn decode_each(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        mut emit: impl FnMut(&[u8], f64, f64),
        fast_path: bool,
    ) -> Result<usize, DropReason> {
        let result = self.decode_runs(
            payload,
            drops,
            |run| run.iter().for_each(|&(n, t, v)| emit(n, t, v)),
            fast_path,
        );
        self.release_oversized();
        result
    }

    fn decode_runs(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        on_run: impl FnMut(&[(&[u8], f64, f64)]),
        fast_path: bool,
    ) -> Result<usize, DropReason> {
        self.parse(payload, fast_path)?;
        self.emit_runs(payload, drops, on_run)
    }

    /// Decodes a frame payload without handing anything over: [`decoded_bytes`] and
    /// [`emit_runs`] then read the result (the receivers size what a frame turns into before
    /// letting it in). `Err` rejects the whole frame.
    ///
    /// [`decoded_bytes`]: Self::decoded_bytes
    /// [`emit_runs`]: Self::emit_runs
    pub fn parse(&mut self, payload: &[u8], fast_path: bool) -> Result<(), DropReason> {
        if payload.len() > (u32::MAX / 2) as usize {
            return Err(BAD);
        }
        self.reset();
        if fast_path && fast::entries(payload, &mut self.fast).is_some() {
            return Ok(());
        }
        match self.run(payload) {
            Ok(top @ (Val::List(_) | Val::Tuple(_))) => {
                self.top = Some(top);
                Ok(())
            }
            Ok(_) => Err(BAD),
            Err(e) => Err(e),
        }
    }

    /// What the parsed frame's well-formed entries turn into once decoded: their names' bytes
    /// plus [`DECODED_POINT_BYTES`] each. A memo can repeat one long name, so this is not
    /// bounded by the payload's size.
    pub fn decoded_bytes(&self, payload: &[u8]) -> usize {
        if self.top.is_none() {
            return self
                .fast
                .iter()
                .map(|&(s, _, _)| s.len as usize + DECODED_POINT_BYTES)
                .sum();
        }
        let mut bytes = 0;
        self.for_each_item(|item| {
            if let Ok((name, _, _)) = self.entry(payload, item) {
                bytes += name.len() + DECODED_POINT_BYTES;
            }
        });
        bytes
    }

    /// Hands the parsed frame's entries to `on_run` in runs of up to [`ENTRY_RUN`], in order,
    /// counting each malformed one in `drops`. Returns the entries emitted.
    pub fn emit_runs(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        mut on_run: impl FnMut(&[(&[u8], f64, f64)]),
    ) -> Result<usize, DropReason> {
        let mut run: [super::Point<'_>; ENTRY_RUN] = [(&[], 0.0, 0.0); ENTRY_RUN];
        if self.top.is_none() {
            for chunk in self.fast.chunks(ENTRY_RUN) {
                for (slot, &(s, timestamp, value)) in run.iter_mut().zip(chunk) {
                    let name = payload
                        .get(s.start as usize..(s.start + s.len) as usize)
                        .unwrap_or_default();
                    *slot = (name, timestamp, value);
                }
                on_run(&run[..chunk.len()]);
            }
            return Ok(self.fast.len());
        }
        let mut emitted = 0;
        let mut n = 0;
        self.for_each_item(|item| match self.entry(payload, item) {
            Ok(point) => {
                if let Some(slot) = run.get_mut(n) {
                    *slot = point;
                    n += 1;
                }
                if n == ENTRY_RUN {
                    on_run(&run);
                    n = 0;
                }
                emitted += 1;
            }
            Err(reason) => drops.add(reason),
        });
        if n > 0 {
            on_run(&run[..n]);
        }
        Ok(emitted)
    }

    /// Calls `f` on every item of the parsed frame's top list or tuple.
    fn for_each_item(&self, mut f: impl FnMut(Val)) {
        match self.top {
            Some(Val::List(id)) => {
                let mut chunk = self.lists[id as usize].head;
                while let Some(c) = self.chunks.get(chunk as usize) {
                    let items = &self.list_items[c.start as usize..(c.start + c.len) as usize];
                    items.iter().for_each(|&item| f(item));
                    chunk = c.next;
                }
            }
            Some(Val::Tuple(id)) => {
                let t = self.tuples[id as usize];
                let items = &self.tuple_items[t.start as usize..(t.start + t.len) as usize];
                items.iter().for_each(|&item| f(item));
            }
            _ => {}
        }
    }

    /// Gives back scratch space over [`DECODER_KEEP_BYTES`] once a frame is done with.
    pub fn finish_frame(&mut self) {
        self.release_oversized();
    }

    fn reset(&mut self) {
        self.stack.clear();
        self.marks.clear();
        self.memo.clear();
        self.memo_len = 0;
        self.lists.clear();
        self.chunks.clear();
        self.list_items.clear();
        self.tuples.clear();
        self.tuple_items.clear();
        self.others.clear();
        self.arena.clear();
        self.created = 0;
        self.fast.clear();
        self.top = None;
    }

    /// Bytes of scratch space the decoder holds between frames (the capacity of its tables).
    pub fn scratch_bytes(&self) -> usize {
        use std::mem::size_of;
        self.stack.capacity() * size_of::<Val>()
            + self.marks.capacity() * size_of::<usize>()
            + self.memo.capacity() * size_of::<Option<Val>>()
            + self.lists.capacity() * size_of::<ListObj>()
            + self.chunks.capacity() * size_of::<Chunk>()
            + self.list_items.capacity() * size_of::<Val>()
            + self.tuples.capacity() * size_of::<TupleObj>()
            + self.tuple_items.capacity() * size_of::<Val>()
            + self.others.capacity() * size_of::<u32>()
            + self.arena.capacity()
            + self.fast.capacity() * size_of::<fast::Entry>()
    }

    /// After a large or hostile frame, gives the scratch space back rather than keeping it
    /// for the connection's life: at most [`DECODER_KEEP_BYTES`] stay between frames. A
    /// frame's scratch is at most `SCRATCH_PER_PAYLOAD_BYTE` (128) times its payload, and exists
    /// only while it decodes (on one worker thread, without awaiting).
    fn release_oversized(&mut self) {
        if self.scratch_bytes() > DECODER_KEEP_BYTES {
            *self = Self::default();
        }
    }

    // ---- entries: carbon's `metric, (timestamp, value) = item` ----

    fn bytes<'a>(&'a self, payload: &'a [u8], s: Span) -> &'a [u8] {
        let src = if s.arena { &self.arena[..] } else { payload };
        &src[s.start as usize..(s.start + s.len) as usize]
    }

    /// Unpacks `v` into exactly two items, as `a, b = v` would for a list or tuple.
    fn pair(&self, v: Val) -> Option<(Val, Val)> {
        match v {
            Val::Tuple(id) => {
                let t = self.tuples[id as usize];
                if t.len != 2 {
                    return None;
                }
                let s = t.start as usize;
                Some((self.tuple_items[s], self.tuple_items[s + 1]))
            }
            Val::List(id) => {
                let l = self.lists[id as usize];
                if l.len != 2 {
                    return None;
                }
                let mut items = [Val::None; 2];
                let mut n = 0;
                let mut chunk = l.head;
                while let Some(c) = self.chunks.get(chunk as usize) {
                    for &item in &self.list_items[c.start as usize..(c.start + c.len) as usize] {
                        *items.get_mut(n)? = item;
                        n += 1;
                    }
                    chunk = c.next;
                }
                (n == 2).then_some((items[0], items[1]))
            }
            _ => None,
        }
    }

    fn entry<'a>(&'a self, payload: &'a [u8], item: Val) -> Res<(&'a [u8], f64, f64)> {
        let (name, point) = self.pair(item).ok_or(DropReason::BadPickleEntry)?;
        let (timestamp, value) = self.pair(point).ok_or(DropReason::BadPickleEntry)?;
        let timestamp = self
            .float(payload, timestamp)
            .ok_or(DropReason::BadPickleEntry)?;
        let value = self
            .float(payload, value)
            .ok_or(DropReason::BadPickleEntry)?;
        let name = match name {
            Val::Str(s) => self.bytes(payload, s),
            Val::Bytes(s) => {
                let b = self.bytes(payload, s);
                std::str::from_utf8(b).map_err(|_| DropReason::BadUtf8)?;
                b
            }
            Val::BadStr => return Err(DropReason::BadUtf8),
            _ => return Err(DropReason::BadPickleEntry),
        };
        Ok((name, timestamp, value))
    }

    /// Python's `float(v)`, or `None` where it would raise.
    fn float(&self, payload: &[u8], v: Val) -> Option<f64> {
        match v {
            Val::Int(i) => Some(i as f64),
            Val::Float(f) => Some(f),
            Val::BigInt(s) => bigint_to_f64(self.bytes(payload, s)),
            Val::BigDec(s) => parse_py_float(self.bytes(payload, s)).filter(|f| f.is_finite()),
            Val::Str(s) => {
                // CPython strips ASCII " \t\n\v\f\r" and non-ASCII Unicode whitespace here,
                // which is exactly Rust's `char::is_whitespace` (U+001C..U+001F stay).
                let text = std::str::from_utf8(self.bytes(payload, s)).ok()?;
                parse_py_float(text.trim_matches(char::is_whitespace).as_bytes())
            }
            Val::Bytes(s) => {
                // bytes are stripped of ASCII whitespace only (`Py_ISSPACE`).
                let b = self.bytes(payload, s);
                let b = b.trim_ascii_start();
                parse_py_float(b.trim_ascii_end())
            }
            _ => None,
        }
    }
}

/// Python's correctly rounded `float(int)` for a little-endian two's complement integer;
/// `None` when it overflows (Python raises `OverflowError`).
fn bigint_to_f64(le: &[u8]) -> Option<f64> {
    let neg = le.last().is_some_and(|&b| b & 0x80 != 0);
    // Magnitude byte i of a negative number is (!n + 1)[i]: the +1 carries through the low
    // zero bytes and stops at the first non-zero one.
    let first_nonzero = le.iter().position(|&b| b != 0).unwrap_or(le.len());
    let mag = |i: usize| -> u8 {
        let b = le[i];
        if !neg || i < first_nonzero {
            b
        } else if i == first_nonzero {
            b.wrapping_neg()
        } else {
            !b
        }
    };
    let Some(top) = (0..le.len()).rev().find(|&i| mag(i) != 0) else {
        return Some(0.0);
    };
    let lo = top.saturating_sub(8);
    let mut acc: u128 = 0;
    for i in (lo..=top).rev() {
        acc = acc << 8 | u128::from(mag(i));
    }
    let mut sticky = (0..lo).any(|i| mag(i) != 0);
    let mut exp = 8 * lo as u64;
    let bits = 128 - acc.leading_zeros();
    if bits > 64 {
        let sh = bits - 64;
        sticky |= acc & ((1u128 << sh) - 1) != 0;
        acc >>= sh;
        exp += u64::from(sh);
    }
    // Bit 0 as sticky bit keeps round-half-even exact: 64 bits are rounded to 53.
    let m = (acc as u64 | u64::from(sticky)) as f64;
    let scale = if exp <= 1023 {
        f64::from_bits((exp + 1023) << 52)
    } else {
        f64::INFINITY
    };
    let f = m * scale;
    f.is_finite().then_some(if neg { -f } else { f })
}

#[cfg(test)]
mod tests {
    use super::vm::long_val;
    use super::*;
    use crate::batch::Datapoint;
    use bytes::BytesMut;

    type Points = Vec<(Vec<u8>, f64, f64)>;

    fn decode(payload: &[u8]) -> Result<(Points, DropCounts), DropReason> {
        let mut drops = DropCounts::default();
        let mut got = Vec::new();
        PickleDecoder::new().decode(payload, &mut drops, |n, t, v| got.push((n.to_vec(), t, v)))?;
        Ok((got, drops))
    }

    /// Entries with their numbers' bits (NaN compares), and the drops, or the frame's error.
    type Answer = Result<(Vec<(Vec<u8>, u64, u64)>, DropCounts), DropReason>;

    fn answer(payload: &[u8], fast_path: bool) -> Answer {
        let mut drops = DropCounts::default();
        let mut got = Vec::new();
        let mut emit = |n: &[u8], t: f64, v: f64| got.push((n.to_vec(), t.to_bits(), v.to_bits()));
        let mut d = PickleDecoder::new();
        let n = if fast_path {
            d.decode(payload, &mut drops, &mut emit)
        } else {
            d.decode_without_fast_path(payload, &mut drops, &mut emit)
        }?;
        assert_eq!(n, got.len());
        Ok((got, drops))
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// What carbon's senders write: python3.11 `pickle.dumps(dps, protocol=p)` for p = 2..5 of
    /// `[('carbon.agents.a.cpu', (1700000000, 1.5)), ('x.y.z', (1700000001.25, -2.0)),
    /// ('ünï.cödé', (5, 3)), ('big', (70000, 1e300))]` (BINPUT or MEMOIZE, FRAME from 4 on,
    /// BININT, BININT1, BINFLOAT), this crate's encoder, and the APPEND form.
    fn sender_frames(encoded: usize) -> Vec<Vec<u8>> {
        let p2 = "80025d7100285813000000636172626f6e2e6167656e74732e612e63707571014a00f15365473ff80000000000008671028671035805000000782e792e7a71044741d954fc4050000047c000000000000000867105867106580c000000c3bc6ec3af2e63c3b664c3a971074b054b038671088671095803000000626967710a4a70110100477e37e43c8800759c86710b86710c652e";
        let p4 = "8004957a000000000000005d94288c13636172626f6e2e6167656e74732e612e637075944a00f15365473ff8000000000000869486948c05782e792e7a944741d954fc4050000047c000000000000000869486948c0cc3bc6ec3af2e63c3b664c3a9944b054b03869486948c03626967944a70110100477e37e43c8800759c86948694652e";
        let mut frames = vec![hex(p2), hex(&p2.replacen("8002", "8003", 1)), hex(p4)];
        frames.push(hex(&p4.replacen("8004", "8005", 1)));
        let mut b = crate::batch::Batch::new();
        for i in 0..encoded {
            let _ = b.push(
                format!("host{i}.cpu.user").as_bytes(),
                1.7e9 + i as f64,
                i as f64 / 3.0,
            );
        }
        let mut out = BytesMut::new();
        encode_message(b.iter(), &mut out);
        frames.push(out[4..].to_vec());
        frames.push(
            b"\x80\x02]X\x01\x00\x00\x00aK\x01K\x02\x86\x86aX\x01\x00\x00\x00bM\x01\x01G?\xf0\x00\x00\x00\x00\x00\x00\x86\x86a."
                .to_vec(),
        );
        frames
    }

    #[test]
    fn fast_path_takes_what_senders_write_and_answers_as_the_machine_does() {
        for (i, frame) in sender_frames(2000).iter().enumerate() {
            let mut entries = Vec::new();
            assert!(
                fast::entries(frame, &mut entries).is_some(),
                "frame {i} left the fast path"
            );
            let fast = answer(frame, true);
            assert_eq!(fast, answer(frame, false), "frame {i}");
            let (points, drops) = fast.unwrap_or_default();
            assert!(
                points.len() >= 2 && drops.is_empty(),
                "frame {i}: {points:?}"
            );
        }
        let (points, _) = answer(&sender_frames(0)[0], true).unwrap_or_default();
        assert_eq!(points[2].0, "ünï.cödé".as_bytes());
        assert_eq!(f64::from_bits(points[3].1), 70000.0);
        assert_eq!(f64::from_bits(points[3].2), 1e300);
    }

    #[test]
    fn fast_path_and_machine_agree_on_every_truncation_and_byte_change() {
        // A memo fetch (python pickles a repeated name object as BINGET) leaves the fast path.
        let memo_get = hex(
            "80025d710028580400000073616d6571014b0147400000000000000086710286710368014b02474008000000000000867104867105652e",
        );
        let mut frames = sender_frames(5);
        frames.push(memo_get);
        let replacements = [
            0x00, 0xff, b'.', b'(', b'e', b'a', b'h', b'q', b'r', 0x94, 0x95, b'X', b'G', b'J',
            0x86, 0x85, 0x80,
        ];
        let mut checked = 0;
        for frame in &frames {
            for cut in 0..frame.len() {
                assert_eq!(
                    answer(&frame[..cut], true),
                    answer(&frame[..cut], false),
                    "{frame:?} cut at {cut}"
                );
                for &r in &replacements {
                    let mut f = frame.clone();
                    f[cut] = r;
                    assert_eq!(
                        answer(&f, true),
                        answer(&f, false),
                        "{frame:?} byte {cut} = {r:#x}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    #[test]
    fn memo_stores_past_the_values_created_are_refused_by_both_paths() {
        // Found by the `pickle` fuzz target: the fourth MEMOIZE stores index 3 with two values
        // created; the machine refuses the frame, and so must the fast path.
        let frame = b"\x80\x02]q\x00\x94\x94\x94\x94.";
        assert_eq!(answer(frame, false), Err(DropReason::BadPickle));
        assert_eq!(answer(frame, true), Err(DropReason::BadPickle));
        // Sparse indices leave the fast path; the machine decides.
        let sparse = b"\x80\x02]q\x01.";
        assert_eq!(answer(sparse, true), answer(sparse, false));
    }

    #[test]
    fn protocol2_list_of_tuples_with_memo() {
        // python3.11: pickle.dumps([('a.b', (1, 2.5)), ('a.b', (1700000000, 3))], protocol=2)
        let p = b"\x80\x02]q\x00(X\x03\x00\x00\x00a.bq\x01K\x01G@\x04\x00\x00\x00\x00\x00\x00\x86q\x02\x86q\x03h\x01J\x00\xf1SeK\x03\x86q\x04\x86q\x05e.";
        let (got, drops) = decode(p).unwrap_or_default();
        assert!(drops.is_empty());
        assert_eq!(
            got,
            vec![(b"a.b".to_vec(), 1.0, 2.5), (b"a.b".to_vec(), 1.7e9, 3.0)]
        );
    }

    #[test]
    fn protocol0_python2_style() {
        // python2: pickle.dumps([('a', (1, '2'))], 0)
        let p = b"(lp0\n(S'a'\np1\n(I1\nS'2'\np2\ntp3\ntp4\na.";
        let (got, _) = decode(p).unwrap_or_default();
        assert_eq!(got, vec![(b"a".to_vec(), 1.0, 2.0)]);
    }

    #[test]
    fn empty_list_opcode_mid_frame_does_not_swallow_the_stack() {
        // python3.11: pickle.dumps([['a.b', [1, 1.0]]], protocol=4)
        let p = b"\x80\x04\x95\x1d\x00\x00\x00\x00\x00\x00\x00]\x94]\x94(\x8c\x03a.b\x94]\x94(K\x01G?\xf0\x00\x00\x00\x00\x00\x00eea.";
        let (got, _) = decode(p).unwrap_or_default();
        assert_eq!(got, vec![(b"a.b".to_vec(), 1.0, 1.0)]);
    }

    #[test]
    fn bad_entries_are_counted_and_skipped() {
        // [('a', (1, 2)), ('b', (None, 1)), (3, (1, 2)), ('c', 1), (b'\xff', (1, 2))]
        let p = b"\x80\x03](X\x01\x00\x00\x00aK\x01K\x02\x86\x86X\x01\x00\x00\x00bNK\x01\x86\x86K\x03K\x01K\x02\x86\x86X\x01\x00\x00\x00cK\x01\x86C\x01\xffK\x01K\x02\x86\x86e.";
        let (got, drops) = decode(p).unwrap_or_default();
        assert_eq!(got, vec![(b"a".to_vec(), 1.0, 2.0)]);
        assert_eq!(drops.get(DropReason::BadPickleEntry), 3);
        assert_eq!(drops.get(DropReason::BadUtf8), 1);
    }

    #[test]
    fn non_sequence_payload_is_bad_pickle() {
        assert_eq!(decode(b"K\x01.").map(|r| r.0), Err(BAD));
        assert_eq!(decode(b"}.").map(|r| r.0), Err(BAD));
        assert_eq!(decode(b"").map(|r| r.0), Err(BAD));
        assert_eq!(decode(b"]").map(|r| r.0), Err(BAD));
        assert_eq!(decode(b"].").map(|r| r.0.len()), Ok(0));
    }

    #[test]
    fn big_ints_round_like_python() {
        // 2**64 + 1, -(2**70), 2**1024 (overflows), -1 (LONG1 0xff), 0 (empty LONG1)
        assert_eq!(
            bigint_to_f64(&[1, 0, 0, 0, 0, 0, 0, 0, 1]),
            Some(18446744073709551616.0)
        );
        let mut neg = [0u8; 9];
        neg[8] = 0xc0;
        assert_eq!(bigint_to_f64(&neg), Some(-(2f64.powi(70))));
        let mut huge = vec![0u8; 129];
        huge[128] = 1;
        assert_eq!(bigint_to_f64(&huge), None);
        // 2**53 + 1 rounds to even (2**53); 2**53 + 3 rounds up.
        let v = (1u128 << 53) + 1;
        assert_eq!(bigint_to_f64(&v.to_le_bytes()), Some(9007199254740992.0));
        let v = (1u128 << 53) + 3;
        assert_eq!(bigint_to_f64(&v.to_le_bytes()), Some(9007199254740996.0));
        assert!(matches!(long_val(&[0xff], 0), Val::Int(-1)));
        assert!(matches!(long_val(&[], 0), Val::Int(0)));
    }

    /// The bound the memory table of docs/operations.md states: a frame's scratch space is at most
    /// `SCRATCH_PER_PAYLOAD_BYTE` times its payload, on the shapes that create the most
    /// values per byte (and all of it is given back after the frame).
    #[test]
    fn frame_scratch_stays_within_its_bound_per_payload_byte() {
        let n = 60_000;
        let mut shapes: Vec<(&str, Vec<u8>)> = Vec::new();
        let mut p = b"\x80\x02](".to_vec();
        p.extend(std::iter::repeat_n(b'N', n));
        p.extend_from_slice(b"e.");
        shapes.push(("one None per byte, appended", p));
        let mut p = b"\x80\x02](".to_vec();
        p.extend(std::iter::repeat_n(b']', n));
        p.extend_from_slice(b"e.");
        shapes.push(("one empty list per byte", p));
        let mut p = b"\x80\x02(".to_vec();
        p.extend(std::iter::repeat_n(b')', n));
        p.extend_from_slice(b"l.");
        shapes.push(("one empty tuple per byte", p));
        let mut p = b"\x80\x02](".to_vec();
        for i in 0..n / 6 {
            p.push(b'N');
            p.push(b'r');
            p.extend_from_slice(&(i as u32).to_le_bytes());
        }
        p.extend_from_slice(b"e.");
        shapes.push(("memoised values", p));
        let mut p = b"\x80\x02N\x94](".to_vec();
        p.extend(std::iter::repeat_n(*b"h\x00", n / 2).flatten());
        p.extend_from_slice(b"e.");
        shapes.push(("memo gets", p));
        let mut p = b"\x80\x02".to_vec();
        p.extend(std::iter::repeat_n(*b"](", 400).flatten());
        p.extend(std::iter::repeat_n(b'e', 400));
        p.push(b'.');
        shapes.push(("nested", p));
        for (what, payload) in shapes {
            let mut d = PickleDecoder::new();
            let mut drops = DropCounts::default();
            let _ = d.decode_runs(&payload, &mut drops, |_| {}, true);
            let scratch = d.scratch_bytes();
            assert!(
                scratch <= SCRATCH_PER_PAYLOAD_BYTE * payload.len(),
                "{what}: {scratch} bytes of scratch for {} bytes of payload",
                payload.len()
            );
            d.release_oversized();
            assert!(d.scratch_bytes() <= DECODER_KEEP_BYTES, "{what}");
            // Both public entry points (the receivers use the batched one) give it back.
            let mut d = PickleDecoder::new();
            let _ = d.decode_batched(&payload, &mut drops, |_| {});
            assert!(
                d.scratch_bytes() <= DECODER_KEEP_BYTES,
                "{what}: decode_batched kept it"
            );
            let mut d = PickleDecoder::new();
            let _ = d.decode(&payload, &mut drops, |_, _, _| {});
            assert!(
                d.scratch_bytes() <= DECODER_KEEP_BYTES,
                "{what}: decode kept it"
            );
        }
    }

    #[test]
    fn encode_then_decode_round_trips_bits() {
        let pts = [
            (&b"a.b"[..], 1700000000.0, 0.1),
            ("温度.🔥;k=v".as_bytes(), -0.0, f64::MAX),
            (&b"z"[..], f64::MIN_POSITIVE, f64::NEG_INFINITY),
        ];
        let mut out = BytesMut::new();
        encode_message(
            pts.iter().map(|&(name, timestamp, value)| Datapoint {
                name,
                timestamp,
                value,
            }),
            &mut out,
        );
        let len = u32::from_be_bytes([out[0], out[1], out[2], out[3]]) as usize;
        assert_eq!(len, out.len() - 4);
        let (got, _) = decode(&out[4..]).unwrap_or_default();
        assert_eq!(got.len(), 3);
        for (g, p) in got.iter().zip(pts) {
            assert_eq!(g.0, p.0);
            assert_eq!(g.1.to_bits(), p.1.to_bits());
            assert_eq!(g.2.to_bits(), p.2.to_bits());
        }
        let mut empty = BytesMut::new();
        encode_message(std::iter::empty(), &mut empty);
        assert_eq!(&empty[..], b"\x00\x00\x00\x04\x80\x02].");
    }
}
