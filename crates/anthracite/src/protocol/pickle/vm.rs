//! The pickle virtual machine: one opcode at a time, building `Val`s and nothing else.
//!
//! Mirrors CPython's C unpickler (`Modules/_pickle.c`) wherever a difference would change
//! which frames are accepted; the module docs of [`super`] list the limits enforced here.

use super::text::{float_opcode, int_text, memo_index, span};
use super::{BAD, Chunk, ListObj, MAX_DEPTH, MAX_OBJECTS, NONE, PickleDecoder, Res, TupleObj, Val};

impl PickleDecoder {
    pub(super) fn run(&mut self, data: &[u8]) -> Res<Val> {
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
        if !(self.stack.len() - from).is_multiple_of(2) {
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

/// `BINUNICODE*`: CPython decodes with `surrogatepass`; invalid UTF-8 fails the frame.
/// (Encoded surrogates, which `surrogatepass` would accept, are refused too.)
fn utf8_val(bytes: &[u8], at: usize) -> Res<Val> {
    std::str::from_utf8(bytes).map_err(|_| BAD)?;
    Ok(Val::Str(span(at, bytes.len())))
}

/// `LONG1`/`LONG4` payload: little-endian two's complement.
pub(super) fn long_val(bytes: &[u8], at: usize) -> Val {
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
