//! The shape every carbon sender writes, decoded without the virtual machine.
//!
//! carbon's clients (`pickle.dumps(datapoints, protocol=2)` in carbon-relay and carbon-cache's
//! forwarding, this crate's [`encode_message`](super::encode_message), the Python and Go
//! libraries that talk to carbon) all write one shape: a list of `(name, (timestamp, value))`
//! built with `EMPTY_LIST`, then `MARK … APPENDS` groups (or one `APPEND` per item), names as
//! `BINUNICODE`, numbers as `BINFLOAT` or `BININT*`, `TUPLE2` twice per item, memo stores
//! between any of them and, from protocol 4 on, `FRAME`s. [`entries`] walks exactly that
//! grammar straight into `(name, timestamp, value)` records, without building a value per
//! opcode and then walking the values as the virtual machine does.
//!
//! It only ever accepts what the virtual machine accepts, with the same entries: anything
//! outside the grammar (a memo fetch, another opcode, invalid UTF-8, a memo index or a value
//! count the machine would refuse, a truncated frame) answers `None` and the frame goes
//! through the virtual machine, which decides. Tests and the `pickle` fuzz target compare the
//! two on every input.

use super::{MAX_OBJECTS, Span};

/// One decoded entry: the name's place in the payload and its numbers, as `float()` gives them.
pub(super) type Entry = (Span, f64, f64);

/// Protocol-2+ opcodes of the grammar.
const PROTO: u8 = 0x80;
const FRAME: u8 = 0x95;
const EMPTY_LIST: u8 = b']';
const MARK: u8 = b'(';
const APPEND: u8 = b'a';
const APPENDS: u8 = b'e';
const STOP: u8 = b'.';
const BINUNICODE: u8 = b'X';
const SHORT_BINUNICODE: u8 = 0x8c;
const BINUNICODE8: u8 = 0x8d;
const BINFLOAT: u8 = b'G';
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const TUPLE2: u8 = 0x86;
const BINPUT: u8 = b'q';
const LONG_BINPUT: u8 = b'r';
const MEMOIZE: u8 = 0x94;

/// Decodes `payload` into `out` (cleared first) if it has the senders' shape; `None` when the
/// virtual machine must decide (see the module documentation).
pub(super) fn entries(payload: &[u8], out: &mut Vec<Entry>) -> Option<()> {
    out.clear();
    let mut r = Walk {
        data: payload,
        pos: 0,
        created: 0,
        memo_len: 0,
    };
    let mut op = r.op()?;
    if op == PROTO {
        if r.byte()? > 5 {
            return None;
        }
        op = r.op()?;
    }
    if op != EMPTY_LIST {
        return None;
    }
    r.create(1)?;
    op = r.after_memo()?;
    // Inside a MARK … APPENDS group.
    let mut in_mark = false;
    loop {
        match op {
            MARK if !in_mark => {
                in_mark = true;
                op = r.op()?;
            }
            APPENDS if in_mark => {
                in_mark = false;
                op = r.op()?;
            }
            STOP if !in_mark => return Some(()),
            _ => {
                out.push(r.entry(op)?);
                op = r.after_memo()?;
                if !in_mark {
                    // Outside a MARK every item is appended on its own.
                    if op != APPEND {
                        return None;
                    }
                    op = r.op()?;
                }
            }
        }
    }
}

/// A cursor over the payload that counts the values the virtual machine would create.
struct Walk<'a> {
    data: &'a [u8],
    pos: usize,
    created: usize,
    /// Memo entries stored (indices `0..memo_len`).
    memo_len: usize,
}

impl Walk<'_> {
    #[inline]
    fn byte(&mut self) -> Option<u8> {
        let b = *self.data.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let b = self.data.get(self.pos..self.pos.checked_add(N)?)?;
        self.pos += N;
        b.try_into().ok()
    }

    /// The next opcode, past any `FRAME` (whose bytes must exist, as the machine checks).
    #[inline]
    fn op(&mut self) -> Option<u8> {
        loop {
            let op = self.byte()?;
            if op != FRAME {
                return Some(op);
            }
            let n = u64::from_le_bytes(self.array()?);
            if n > (self.data.len() - self.pos) as u64 {
                return None;
            }
        }
    }

    /// Counts `n` new values against the machine's limit.
    #[inline]
    fn create(&mut self, n: usize) -> Option<()> {
        self.created += n;
        (self.created <= MAX_OBJECTS).then_some(())
    }

    /// The opcode after any memo stores of the value just created. The values are never
    /// fetched (a fetch leaves the grammar), so only the machine's check on the index is made.
    /// Stores must number entries densely, as picklers do (`MEMOIZE` always does): the memo
    /// then holds exactly indices `0..memo_len`, and the machine's rule (an index at most the
    /// number of values created) is checked on the same numbers it sees.
    #[inline]
    fn after_memo(&mut self) -> Option<u8> {
        loop {
            let op = self.op()?;
            let id = match op {
                BINPUT => usize::from(self.byte()?),
                LONG_BINPUT => u32::from_le_bytes(self.array()?) as usize,
                MEMOIZE => self.memo_len,
                _ => return Some(op),
            };
            if id != self.memo_len || id > self.created {
                return None;
            }
            self.memo_len += 1;
        }
    }

    /// One `(name, (timestamp, value))` whose first opcode is `op`, up to its last `TUPLE2`
    /// (the memo stores after it are the caller's).
    #[inline]
    fn entry(&mut self, op: u8) -> Option<Entry> {
        let len = match op {
            BINUNICODE => u64::from(u32::from_le_bytes(self.array()?)),
            SHORT_BINUNICODE => u64::from(self.byte()?),
            BINUNICODE8 => u64::from_le_bytes(self.array()?),
            _ => return None,
        };
        let len = usize::try_from(len).ok()?;
        let start = self.pos;
        let name = self.data.get(start..start.checked_add(len)?)?;
        // The machine fails the whole frame on invalid UTF-8 here; it will say so. Names are
        // ASCII nearly always, and the inlined word-at-a-time ASCII test is cheaper than a
        // call to the full validator.
        if !name.is_ascii() {
            std::str::from_utf8(name).ok()?;
        }
        self.pos += len;
        let span = Span {
            start: u32::try_from(start).ok()?,
            len: u32::try_from(len).ok()?,
            arena: false,
        };
        self.create(1)?;
        let op = self.after_memo()?;
        let timestamp = self.number(op)?;
        let op = self.after_memo()?;
        let value = self.number(op)?;
        if self.after_memo()? != TUPLE2 {
            return None;
        }
        self.create(1)?;
        if self.after_memo()? != TUPLE2 {
            return None;
        }
        self.create(1)?;
        Some((span, timestamp, value))
    }

    /// A number opcode, as `float()` would give it.
    #[inline]
    fn number(&mut self, op: u8) -> Option<f64> {
        let v = match op {
            BINFLOAT => f64::from_be_bytes(self.array()?),
            BININT => f64::from(i32::from_le_bytes(self.array()?)),
            BININT1 => f64::from(self.byte()?),
            BININT2 => f64::from(u16::from_le_bytes(self.array()?)),
            _ => return None,
        };
        self.create(1)?;
        Some(v)
    }
}
