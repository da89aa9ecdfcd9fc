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

use bytes::{BufMut, BytesMut};

use super::number::parse_py_float;
use super::{DropCounts, DropReason};
use crate::batch::Datapoint;

/// Default maximum frame length (carbon's `PICKLE_RECEIVER_MAX_LENGTH`, 1 MiB).
pub const DEFAULT_MAX_FRAME: usize = 1 << 20;

/// Most values one frame may create (every push counts, including memo `GET`s and `DUP`s).
pub const MAX_OBJECTS: usize = 1 << 20;

/// Deepest container nesting, and most simultaneously open `MARK`s, one frame may use.
pub const MAX_DEPTH: u32 = 1000;

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
}

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
    pub fn decode(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        mut emit: impl FnMut(&[u8], f64, f64),
    ) -> Result<usize, DropReason> {
        if payload.len() > (u32::MAX / 2) as usize {
            return Err(BAD);
        }
        self.reset();
        let result = self.run(payload);
        let top = match result {
            Ok(top) => top,
            Err(e) => {
                self.release_oversized();
                return Err(e);
            }
        };
        let mut emitted = 0;
        let mut entry = |item: Val| match self.entry(payload, item) {
            Ok((name, timestamp, value)) => {
                emit(name, timestamp, value);
                emitted += 1;
            }
            Err(reason) => drops.add(reason),
        };
        match top {
            Val::List(id) => {
                let mut chunk = self.lists[id as usize].head;
                while let Some(c) = self.chunks.get(chunk as usize) {
                    let items = &self.list_items[c.start as usize..(c.start + c.len) as usize];
                    items.iter().for_each(|&item| entry(item));
                    chunk = c.next;
                }
            }
            Val::Tuple(id) => {
                let t = self.tuples[id as usize];
                let items = &self.tuple_items[t.start as usize..(t.start + t.len) as usize];
                items.iter().for_each(|&item| entry(item));
            }
            _ => return Err(BAD),
        }
        Ok(emitted)
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
    }

    /// After a hostile frame, do not keep tens of megabytes of scratch for the connection's life.
    fn release_oversized(&mut self) {
        const KEEP: usize = 1 << 16;
        if self.stack.capacity() > KEEP || self.memo.capacity() > KEEP {
            *self = Self::default();
        }
    }

    // ---- the virtual machine ----

    fn run(&mut self, data: &[u8]) -> Res<Val> {
        let mut r = Reader { data, pos: 0 };
        loop {
            let op = r.byte()?;
            match op {
                b'(' => {
                    if self.marks.len() >= MAX_DEPTH as usize {
                        return Err(BAD);
                    }
                    self.marks.push(self.stack.len());
                }
                b'.' => return self.pop(),
                b'0' => {
                    if self.stack.len() > self.fence() {
                        self.stack.pop();
                    } else if self.marks.pop().is_none() {
                        return Err(BAD);
                    }
                }
                b'1' => {
                    let mark = self.pop_mark()?;
                    self.stack.truncate(mark);
                }
                b'2' => {
                    let top = self.top()?;
                    self.push(top)?;
                }
                // Numbers.
                b'F' => {
                    let (_, line) = r.line()?;
                    self.push(Val::Float(float_opcode(line)?))?;
                }
                b'I' => {
                    let (at, line) = r.line()?;
                    let v = match line {
                        b"00" => Val::Int(0),
                        b"01" => Val::Int(1),
                        _ => int_text(line, at)?,
                    };
                    self.push(v)?;
                }
                b'L' => {
                    let (at, line) = r.line()?;
                    let line = line.strip_suffix(b"L").unwrap_or(line);
                    self.push(int_text(line, at)?)?;
                }
                b'J' => {
                    let v = i32::from_le_bytes(r.array()?);
                    self.push(Val::Int(v.into()))?;
                }
                b'K' => {
                    let v = r.byte()?;
                    self.push(Val::Int(v.into()))?;
                }
                b'M' => {
                    let v = u16::from_le_bytes(r.array()?);
                    self.push(Val::Int(v.into()))?;
                }
                0x8a => {
                    let n = usize::from(r.byte()?);
                    let (at, bytes) = r.take(n)?;
                    self.push(long_val(bytes, at))?;
                }
                0x8b => {
                    let n = i32::from_le_bytes(r.array()?);
                    let n = usize::try_from(n).map_err(|_| BAD)?;
                    let (at, bytes) = r.take(n)?;
                    self.push(long_val(bytes, at))?;
                }
                b'G' => {
                    let v = f64::from_be_bytes(r.array()?);
                    self.push(Val::Float(v))?;
                }
                b'N' => self.push(Val::None)?,
                0x88 => self.push(Val::Int(1))?,
                0x89 => self.push(Val::Int(0))?,
                // Strings and bytes.
                b'S' => {
                    let (_, line) = r.line()?;
                    let v = self.string_opcode(line)?;
                    self.push(v)?;
                }
                b'T' => {
                    let n = i32::from_le_bytes(r.array()?);
                    let n = usize::try_from(n).map_err(|_| BAD)?;
                    let (at, _) = r.take(n)?;
                    self.push(Val::Bytes(span(at, n)))?;
                }
                b'U' | b'C' => {
                    let n = usize::from(r.byte()?);
                    let (at, _) = r.take(n)?;
                    self.push(Val::Bytes(span(at, n)))?;
                }
                b'B' => {
                    let n = u32::from_le_bytes(r.array()?);
                    let (at, bytes) = r.take_u64(n.into())?;
                    self.push(Val::Bytes(span(at, bytes.len())))?;
                }
                0x8e | 0x96 => {
                    let n = u64::from_le_bytes(r.array()?);
                    let (at, bytes) = r.take_u64(n)?;
                    self.push(Val::Bytes(span(at, bytes.len())))?;
                }
                b'V' => {
                    let (_, line) = r.line()?;
                    let v = self.raw_unicode_escape(line)?;
                    self.push(v)?;
                }
                b'X' => {
                    let n = u32::from_le_bytes(r.array()?);
                    let (at, bytes) = r.take_u64(n.into())?;
                    self.push(utf8_val(bytes, at)?)?;
                }
                0x8c => {
                    let n = usize::from(r.byte()?);
                    let (at, bytes) = r.take(n)?;
                    self.push(utf8_val(bytes, at)?)?;
                }
                0x8d => {
                    let n = u64::from_le_bytes(r.array()?);
                    let (at, bytes) = r.take_u64(n)?;
                    self.push(utf8_val(bytes, at)?)?;
                }
                // Lists and tuples.
                b']' => {
                    let v = self.new_list(self.stack.len(), 1)?;
                    self.push(v)?;
                }
                b'l' => {
                    let mark = self.pop_mark()?;
                    let depth = self.child_depth(mark)?;
                    let v = self.new_list(mark, depth)?;
                    self.push(v)?;
                }
                b'a' => {
                    let x = self.stack.len().checked_sub(1).ok_or(BAD)?;
                    self.append(x)?;
                }
                b'e' => {
                    let mark = self.pop_mark()?;
                    self.append(mark)?;
                }
                b')' => self.tuple_from(self.stack.len())?,
                b't' => {
                    let mark = self.pop_mark()?;
                    self.tuple_from(mark)?;
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let start = self.stack.len().checked_sub(n).ok_or(BAD)?;
                    if start < self.fence() {
                        return Err(BAD);
                    }
                    self.tuple_from(start)?;
                }
                // Dicts and sets: parsed faithfully, contents discarded.
                b'}' => {
                    let v = self.new_other(Val::Dict, 1)?;
                    self.push(v)?;
                }
                b'd' => {
                    let mark = self.pop_mark()?;
                    self.check_pairs(mark)?;
                    let depth = self.child_depth(mark)?;
                    self.stack.truncate(mark);
                    let v = self.new_other(Val::Dict, depth)?;
                    self.push(v)?;
                }
                b's' => {
                    let x = self.stack.len().checked_sub(2).ok_or(BAD)?;
                    self.set_items(x)?;
                }
                b'u' => {
                    let mark = self.pop_mark()?;
                    self.set_items(mark)?;
                }
                0x8f => {
                    let v = self.new_other(Val::Set, 1)?;
                    self.push(v)?;
                }
                0x90 => {
                    let mark = self.pop_mark()?;
                    self.add_items(mark)?;
                }
                0x91 => {
                    let mark = self.pop_mark()?;
                    self.check_hashable(mark, 1)?;
                    let depth = self.child_depth(mark)?;
                    self.stack.truncate(mark);
                    let v = self.new_other(Val::FrozenSet, depth)?;
                    self.push(v)?;
                }
                // Memo.
                b'p' => {
                    let (_, line) = r.line()?;
                    let id = memo_index(line)?;
                    self.memo_put(id)?;
                }
                b'q' => {
                    let id = usize::from(r.byte()?);
                    self.memo_put(id)?;
                }
                b'r' => {
                    let id = u32::from_le_bytes(r.array()?) as usize;
                    self.memo_put(id)?;
                }
                0x94 => self.memo_put(self.memo_len)?,
                b'g' => {
                    let (_, line) = r.line()?;
                    let id = memo_index(line)?;
                    self.memo_get(id)?;
                }
                b'h' => {
                    let id = usize::from(r.byte()?);
                    self.memo_get(id)?;
                }
                b'j' => {
                    let id = u32::from_le_bytes(r.array()?) as usize;
                    self.memo_get(id)?;
                }
                // Framing.
                0x80 => {
                    if r.byte()? > 5 {
                        return Err(BAD);
                    }
                }
                0x95 => {
                    // Like CPython: the frame's bytes must exist; opcodes then run as usual.
                    let n = u64::from_le_bytes(r.array()?);
                    if n > r.remaining() as u64 {
                        return Err(BAD);
                    }
                }
                // GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ(_EX), PERSID,
                // BINPERSID, EXT1/2/4, NEXT_BUFFER, READONLY_BUFFER, and anything unknown.
                _ => return Err(BAD),
            }
        }
    }

    #[inline]
    fn fence(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    #[inline]
    fn push(&mut self, v: Val) -> Res<()> {
        self.created += 1;
        if self.created > MAX_OBJECTS {
            return Err(BAD);
        }
        self.stack.push(v);
        Ok(())
    }

    #[inline]
    fn pop(&mut self) -> Res<Val> {
        if self.stack.len() <= self.fence() {
            return Err(BAD);
        }
        self.stack.pop().ok_or(BAD)
    }

    #[inline]
    fn top(&self) -> Res<Val> {
        if self.stack.len() <= self.fence() {
            return Err(BAD);
        }
        self.stack.last().copied().ok_or(BAD)
    }

    #[inline]
    fn pop_mark(&mut self) -> Res<usize> {
        self.marks.pop().ok_or(BAD)
    }

    fn depth(&self, v: Val) -> u32 {
        match v {
            Val::List(id) => self.lists[id as usize].depth,
            Val::Tuple(id) => self.tuples[id as usize].depth,
            Val::Dict(id) | Val::Set(id) | Val::FrozenSet(id) => self.others[id as usize],
            _ => 0,
        }
    }

    /// Depth of a container holding `stack[from..]`.
    fn child_depth(&self, from: usize) -> Res<u32> {
        let deepest = self.stack[from..].iter().map(|&v| self.depth(v)).max();
        let depth = deepest.unwrap_or(0) + 1;
        if depth > MAX_DEPTH {
            return Err(BAD);
        }
        Ok(depth)
    }

    /// A list holding `stack[from..]`, which is removed from the stack.
    fn new_list(&mut self, from: usize, depth: u32) -> Res<Val> {
        let id = self.lists.len() as u32;
        self.lists.push(ListObj {
            head: NONE,
            tail: NONE,
            len: 0,
            depth,
        });
        self.extend_list(id, from);
        Ok(Val::List(id))
    }

    fn extend_list(&mut self, id: u32, from: usize) {
        let n = (self.stack.len() - from) as u32;
        if n == 0 {
            return;
        }
        let end = self.list_items.len() as u32;
        let list = &mut self.lists[id as usize];
        let tail = self.chunks.get_mut(list.tail as usize);
        match tail {
            Some(c) if c.start + c.len == end => c.len += n,
            _ => {
                let new = self.chunks.len() as u32;
                self.chunks.push(Chunk {
                    start: end,
                    len: n,
                    next: NONE,
                });
                match self.chunks.get_mut(list.tail as usize) {
                    Some(prev) => prev.next = new,
                    None => list.head = new,
                }
                list.tail = new;
            }
        }
        list.len += n;
        self.list_items.extend_from_slice(&self.stack[from..]);
        self.stack.truncate(from);
    }

    /// `APPEND`/`APPENDS`: adds `stack[x..]` to the list at `stack[x - 1]` (CPython's `do_append`).
    fn append(&mut self, x: usize) -> Res<()> {
        let len = self.stack.len();
        if x > len || x <= self.fence() {
            return Err(BAD);
        }
        if x == len {
            return Ok(());
        }
        let Val::List(id) = self.stack[x - 1] else {
            return Err(BAD);
        };
        let depth = self.child_depth(x)?;
        let list = &mut self.lists[id as usize];
        list.depth = list.depth.max(depth);
        self.extend_list(id, x);
        Ok(())
    }

    fn tuple_from(&mut self, from: usize) -> Res<()> {
        let depth = self.child_depth(from)?;
        let start = self.tuple_items.len() as u32;
        self.tuple_items.extend_from_slice(&self.stack[from..]);
        let len = (self.stack.len() - from) as u32;
        self.stack.truncate(from);
        let id = self.tuples.len() as u32;
        self.tuples.push(TupleObj { start, len, depth });
        self.push(Val::Tuple(id))
    }

    fn new_other(&mut self, make: fn(u32) -> Val, depth: u32) -> Res<Val> {
        let id = self.others.len() as u32;
        self.others.push(depth);
        Ok(make(id))
    }

    /// Keys must pair with values, and be hashable as Python requires.
    fn check_pairs(&self, from: usize) -> Res<()> {
        if (self.stack.len() - from) % 2 != 0 {
            return Err(BAD);
        }
        self.check_hashable(from, 2)
    }

    fn check_hashable(&self, from: usize, step: usize) -> Res<()> {
        let unhashable = self.stack[from..]
            .iter()
            .step_by(step)
            .any(|v| matches!(v, Val::List(_) | Val::Dict(_) | Val::Set(_)));
        if unhashable { Err(BAD) } else { Ok(()) }
    }

    /// `SETITEM`/`SETITEMS` (CPython's `do_setitems`).
    fn set_items(&mut self, x: usize) -> Res<()> {
        let len = self.stack.len();
        if x > len || x <= self.fence() {
            return Err(BAD);
        }
        if x == len {
            return Ok(());
        }
        let Val::Dict(id) = self.stack[x - 1] else {
            return Err(BAD);
        };
        self.check_pairs(x)?;
        let depth = self.child_depth(x)?;
        let d = &mut self.others[id as usize];
        *d = (*d).max(depth);
        self.stack.truncate(x);
        Ok(())
    }

    fn add_items(&mut self, mark: usize) -> Res<()> {
        let len = self.stack.len();
        if mark > len || mark <= self.fence() {
            return Err(BAD);
        }
        if mark == len {
            return Ok(());
        }
        let Val::Set(id) = self.stack[mark - 1] else {
            return Err(BAD);
        };
        self.check_hashable(mark, 1)?;
        let depth = self.child_depth(mark)?;
        let d = &mut self.others[id as usize];
        *d = (*d).max(depth);
        self.stack.truncate(mark);
        Ok(())
    }

    fn memo_put(&mut self, id: usize) -> Res<()> {
        // A real pickler numbers memo entries densely as it stores values, so an index past
        // the number of values created so far can only be an attempt to make us allocate.
        if id > self.created {
            return Err(BAD);
        }
        let v = self.top()?;
        if id >= self.memo.len() {
            self.memo.resize(id + 1, None);
        }
        if self.memo[id].replace(v).is_none() {
            self.memo_len += 1;
        }
        Ok(())
    }

    fn memo_get(&mut self, id: usize) -> Res<()> {
        let v = self.memo.get(id).copied().flatten().ok_or(BAD)?;
        self.push(v)
    }

    /// Protocol-0 `STRING`: a quoted Python 2 `str` literal, decoded like `escape_decode`.
    fn string_opcode(&mut self, line: &[u8]) -> Res<Val> {
        let inner = match line {
            [q, inner @ .., last] if q == last && matches!(q, b'\'' | b'"') => inner,
            _ => return Err(BAD),
        };
        let start = self.arena.len();
        let mut i = 0;
        while let Some(&b) = inner.get(i) {
            i += 1;
            if b != b'\\' {
                self.arena.push(b);
                continue;
            }
            let Some(&e) = inner.get(i) else {
                return Err(BAD); // trailing backslash
            };
            i += 1;
            let decoded = match e {
                b'\n' => continue,
                b'\\' | b'\'' | b'"' => e,
                b'b' => 0x08,
                b'f' => 0x0c,
                b't' => b'\t',
                b'n' => b'\n',
                b'r' => b'\r',
                b'v' => 0x0b,
                b'a' => 0x07,
                b'0'..=b'7' => {
                    let mut c = u32::from(e - b'0');
                    for _ in 0..2 {
                        match inner.get(i) {
                            Some(&d @ b'0'..=b'7') => {
                                c = c * 8 + u32::from(d - b'0');
                                i += 1;
                            }
                            _ => break,
                        }
                    }
                    (c & 0xff) as u8
                }
                b'x' => {
                    let hi = inner.get(i).and_then(|&d| hex(d)).ok_or(BAD)?;
                    let lo = inner.get(i + 1).and_then(|&d| hex(d)).ok_or(BAD)?;
                    i += 2;
                    (hi << 4 | lo) as u8
                }
                _ => {
                    self.arena.push(b'\\');
                    e
                }
            };
            self.arena.push(decoded);
        }
        Ok(Val::Bytes(arena_span(start, self.arena.len())))
    }

    /// Protocol-0 `UNICODE`: `raw-unicode-escape` (latin-1 bytes plus `\uXXXX`/`\UXXXXXXXX`
    /// after an odd number of backslashes), transcoded to UTF-8 in the arena.
    fn raw_unicode_escape(&mut self, line: &[u8]) -> Res<Val> {
        let start = self.arena.len();
        let mut surrogate = false;
        let mut i = 0;
        let mut utf8 = [0u8; 4];
        while let Some(&b) = line.get(i) {
            if b != b'\\' {
                let c = char::from(b);
                self.arena
                    .extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
                i += 1;
                continue;
            }
            let run_start = i;
            while line.get(i) == Some(&b'\\') {
                self.arena.push(b'\\');
                i += 1;
            }
            let digits = match line.get(i) {
                Some(b'u') => 4,
                Some(b'U') => 8,
                _ => continue,
            };
            if (i - run_start) % 2 == 0 {
                continue;
            }
            self.arena.pop();
            i += 1;
            let mut cp: u32 = 0;
            for _ in 0..digits {
                let d = line.get(i).and_then(|&d| hex(d)).ok_or(BAD)?;
                cp = cp << 4 | d;
                i += 1;
            }
            match char::from_u32(cp) {
                Some(c) => self
                    .arena
                    .extend_from_slice(c.encode_utf8(&mut utf8).as_bytes()),
                None if cp <= 0x10ffff => surrogate = true,
                None => return Err(BAD),
            }
        }
        if surrogate {
            self.arena.truncate(start);
            return Ok(Val::BadStr);
        }
        Ok(Val::Str(arena_span(start, self.arena.len())))
    }

    // ---- entries ----

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

/// Cursor over the payload; every read is bounds-checked against the bytes present.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    #[inline]
    fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    #[inline]
    fn byte(&mut self) -> Res<u8> {
        let b = *self.data.get(self.pos).ok_or(BAD)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    fn take(&mut self, n: usize) -> Res<(usize, &'a [u8])> {
        if n > self.remaining() {
            return Err(BAD);
        }
        let at = self.pos;
        self.pos += n;
        Ok((at, &self.data[at..at + n]))
    }

    #[inline]
    fn take_u64(&mut self, n: u64) -> Res<(usize, &'a [u8])> {
        self.take(usize::try_from(n).map_err(|_| BAD)?)
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Res<[u8; N]> {
        let (_, b) = self.take(N)?;
        b.try_into().map_err(|_| BAD)
    }

    /// The bytes up to the next `\n` (excluded) and their offset; consumes the `\n`.
    fn line(&mut self) -> Res<(usize, &'a [u8])> {
        let rest = &self.data[self.pos..];
        let n = memchr::memchr(b'\n', rest).ok_or(BAD)?;
        let at = self.pos;
        self.pos += n + 1;
        Ok((at, &rest[..n]))
    }
}

#[inline]
fn span(start: usize, len: usize) -> Span {
    Span {
        start: start as u32,
        len: len as u32,
        arena: false,
    }
}

#[inline]
fn arena_span(start: usize, end: usize) -> Span {
    Span {
        start: start as u32,
        len: (end - start) as u32,
        arena: true,
    }
}

#[inline]
fn hex(d: u8) -> Option<u32> {
    char::from(d).to_digit(16)
}

/// `BINUNICODE*`: CPython decodes with `surrogatepass`; invalid UTF-8 fails the frame.
/// (Encoded surrogates, which `surrogatepass` would accept, are refused too.)
fn utf8_val(bytes: &[u8], at: usize) -> Res<Val> {
    std::str::from_utf8(bytes).map_err(|_| BAD)?;
    Ok(Val::Str(span(at, bytes.len())))
}

/// `LONG1`/`LONG4` payload: little-endian two's complement.
fn long_val(bytes: &[u8], at: usize) -> Val {
    if bytes.len() <= 8 {
        let mut v: i64 = 0;
        for (i, &b) in bytes.iter().enumerate() {
            v |= i64::from(b) << (8 * i);
        }
        if let Some(&last) = bytes.last() {
            let bits = 8 * bytes.len() as u32;
            if last & 0x80 != 0 && bits < 64 {
                v |= -1i64 << bits;
            }
        }
        Val::Int(v)
    } else {
        Val::BigInt(span(at, bytes.len()))
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

/// Text integer of `INT`/`LONG` (`int(text)`; whitespace, sign, digits, `_` separators).
/// Bases other than 10 (`0x…`), which CPython also reads here, are refused.
fn int_text(line: &[u8], at: usize) -> Res<Val> {
    let lead = line.len() - line.trim_ascii_start().len();
    let text = line.trim_ascii();
    let (neg, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    let mut n = 0usize;
    let mut acc: i128 = 0;
    let mut prev_digit = false;
    for (i, &b) in digits.iter().enumerate() {
        if b.is_ascii_digit() {
            n += 1;
            acc = acc.saturating_mul(10).saturating_add(i128::from(b - b'0'));
            prev_digit = true;
        } else if b == b'_' && prev_digit && digits.get(i + 1).is_some_and(u8::is_ascii_digit) {
            prev_digit = false;
        } else {
            return Err(BAD);
        }
    }
    if n == 0 {
        return Err(BAD);
    }
    let v = if neg { -acc } else { acc };
    Ok(match i64::try_from(v) {
        Ok(v) => Val::Int(v),
        Err(_) => Val::BigDec(span(at + lead, text.len())),
    })
}

/// `FLOAT` argument: CPython's `PyOS_string_to_double` — no whitespace, no `_`, and a finite
/// literal that overflows is an error.
fn float_opcode(line: &[u8]) -> Res<f64> {
    if line.contains(&b'_') {
        return Err(BAD);
    }
    let v = parse_py_float(line).ok_or(BAD)?;
    if v.is_infinite() && !line.iter().any(|b| b.eq_ignore_ascii_case(&b'n')) {
        return Err(BAD);
    }
    Ok(v)
}

/// Memo index of the text opcodes `PUT`/`GET`.
fn memo_index(line: &[u8]) -> Res<usize> {
    let text = line.trim_ascii();
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return Err(BAD);
    }
    let mut id: usize = 0;
    for &b in text {
        id = id
            .checked_mul(10)
            .and_then(|v| v.checked_add(usize::from(b - b'0')))
            .ok_or(BAD)?;
    }
    Ok(id)
}

/// Appends one framed message (4-byte big-endian length + protocol-2 pickle of
/// `[(name, (timestamp, value)), …]`) holding every datapoint of `points`.
///
/// Names go out as `BINUNICODE`, numbers as `BINFLOAT` (bit-exact), without memo opcodes.
pub fn encode_message<'a>(points: impl Iterator<Item = Datapoint<'a>>, out: &mut BytesMut) {
    let start = out.len();
    out.put_u32(0);
    out.put_slice(b"\x80\x02](");
    let mut count = 0usize;
    for dp in points {
        out.reserve(dp.name.len() + 25);
        out.put_u8(b'X');
        out.put_u32_le(dp.name.len() as u32);
        out.put_slice(dp.name);
        out.put_u8(b'G');
        out.put_f64(dp.timestamp);
        out.put_u8(b'G');
        out.put_f64(dp.value);
        out.put_slice(b"\x86\x86");
        count += 1;
    }
    if count == 0 {
        out.truncate(out.len() - 1); // the MARK
        out.put_u8(b'.');
    } else {
        out.put_slice(b"e.");
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    type Points = Vec<(Vec<u8>, f64, f64)>;

    fn decode(payload: &[u8]) -> Result<(Points, DropCounts), DropReason> {
        let mut drops = DropCounts::default();
        let mut got = Vec::new();
        PickleDecoder::new().decode(payload, &mut drops, |n, t, v| got.push((n.to_vec(), t, v)))?;
        Ok((got, drops))
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
