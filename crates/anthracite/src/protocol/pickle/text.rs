//! Arguments of the protocol-0 text opcodes (`STRING`, `UNICODE`, `INT`, `LONG`, `FLOAT`,
//! `PUT`/`GET`), decoded as CPython does.

use super::{BAD, PickleDecoder, Res, Span, Val};
use crate::protocol::number::parse_py_float;

impl PickleDecoder {
    /// Protocol-0 `STRING`: a quoted Python 2 `str` literal, decoded like `escape_decode`.
    pub(super) fn string_opcode(&mut self, line: &[u8]) -> Res<Val> {
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
    pub(super) fn raw_unicode_escape(&mut self, line: &[u8]) -> Res<Val> {
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
}

#[inline]
pub(super) fn span(start: usize, len: usize) -> Span {
    Span {
        start: start as u32,
        len: len as u32,
        arena: false,
    }
}

#[inline]
pub(super) fn arena_span(start: usize, end: usize) -> Span {
    Span {
        start: start as u32,
        len: (end - start) as u32,
        arena: true,
    }
}

#[inline]
pub(super) fn hex(d: u8) -> Option<u32> {
    char::from(d).to_digit(16)
}

/// Text integer of `INT`/`LONG` (`int(text)`; whitespace, sign, digits, `_` separators).
/// Bases other than 10 (`0x…`), which CPython also reads here, are refused.
pub(super) fn int_text(line: &[u8], at: usize) -> Res<Val> {
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
pub(super) fn float_opcode(line: &[u8]) -> Res<f64> {
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
pub(super) fn memo_index(line: &[u8]) -> Res<usize> {
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
