//! Graphite plaintext: `path value timestamp\n`.
//!
//! [`LineFramer`] splits a connection's byte stream the way Twisted's `LineOnlyReceiver` does
//! for carbon (delimiter `\n`, `MAX_LENGTH` bytes per line), [`parse_line`] applies carbon
//! 1.1.10's `line.strip().split()` and `float()` rules, and [`encode_line`] writes what carbon's
//! line client writes (`%.10f` values without trailing zeros, `%d` timestamps).

use bytes::{Buf, BufMut, BytesMut};

use super::number::{
    MAX_FLOAT_REPR, is_py_space, is_py_space_ascii, parse_plain_decimal, parse_py_float,
    write_py_float,
};
use super::{DropReason, Point};
use crate::batch::Datapoint;

/// Most lines [`LineFramer::feed_batched`] hands over at once.
pub(crate) const LINE_RUN: usize = 128;

/// carbon's `LineOnlyReceiver.MAX_LENGTH` default.
pub(crate) const DEFAULT_MAX_LINE: usize = 16384;

/// Splits a byte stream into lines, enforcing the maximum line length.
#[derive(Debug)]
pub struct LineFramer {
    max_len: usize,
    /// Bytes at the front of the buffer already known to hold no `\n`.
    scanned: usize,
    /// Inside an over-long line already reported: drop bytes up to its `\n`.
    discarding: bool,
}

impl LineFramer {
    /// A framer that drops (and reports) lines longer than `max_len` bytes.
    pub fn new(max_len: usize) -> Self {
        Self {
            max_len,
            scanned: 0,
            discarding: false,
        }
    }

    /// Calls `on_line` for every complete line in `buf` (without `\n`), or with
    /// `Err(DropReason::TooLong)` once per over-long line, and removes what it consumed.
    ///
    /// A line's length excludes its `\n` (a trailing `\r` counts), as in Twisted. The unfinished
    /// tail stays in `buf` unless it is already over-long, in which case it is dropped at once so
    /// the buffer never grows past `max_len` while a huge line streams through.
    pub fn feed(&mut self, buf: &mut BytesMut, mut on_line: impl FnMut(Result<&[u8], DropReason>)) {
        self.feed_batched(buf, |lines| lines.iter().for_each(|&l| on_line(l)));
    }

    /// [`feed`](Self::feed), handing the lines over in runs of up to [`LINE_RUN`], in order.
    pub fn feed_batched(
        &mut self,
        buf: &mut BytesMut,
        mut on_lines: impl FnMut(&[Result<&[u8], DropReason>]),
    ) {
        let mut run: [Result<&[u8], DropReason>; LINE_RUN] = [Ok(&[]); LINE_RUN];
        let mut n = 0;
        let mut pos = 0;
        // The newlines of each 64-byte block at once, as a bit mask walked bit by bit: lines
        // are tens of bytes, so a search call per line would cost more than finding them.
        let mut block = self.scanned.min(buf.len());
        while block < buf.len() {
            let mut newlines = newline_mask(buf.get(block..).unwrap_or_default());
            while newlines != 0 {
                let end = block + newlines.trailing_zeros() as usize;
                newlines &= newlines - 1;
                let line = if self.discarding {
                    self.discarding = false;
                    None
                } else if end - pos > self.max_len {
                    Some(Err(DropReason::TooLong))
                } else {
                    Some(Ok(&buf[pos..end]))
                };
                if let (Some(line), Some(slot)) = (line, run.get_mut(n)) {
                    *slot = line;
                    n += 1;
                    if n == LINE_RUN {
                        on_lines(&run);
                        n = 0;
                    }
                }
                pos = end + 1;
            }
            block += 64;
        }
        let tail = buf.len() - pos;
        let tail_too_long = !self.discarding && tail > self.max_len;
        if tail_too_long && let Some(slot) = run.get_mut(n) {
            *slot = Err(DropReason::TooLong);
            n += 1;
        }
        if n > 0 {
            on_lines(&run[..n]);
        }
        if self.discarding || tail_too_long {
            self.discarding = tail_too_long || self.discarding;
            buf.clear();
            self.scanned = 0;
        } else {
            buf.advance(pos);
            self.scanned = tail;
        }
    }

    /// At end of stream: reports `Unterminated` when unterminated bytes remain, and clears them.
    pub fn finish(&mut self, buf: &mut BytesMut) -> Option<DropReason> {
        let reason = (!self.discarding && !buf.is_empty()).then_some(DropReason::Unterminated);
        buf.clear();
        self.scanned = 0;
        self.discarding = false;
        reason
    }
}

/// Bit `i` set when byte `i` of the first 64 bytes of `bytes` is `\n` (bytes past its end count
/// as not).
#[inline]
fn newline_mask(bytes: &[u8]) -> u64 {
    match bytes.first_chunk::<64>() {
        Some(block) => newline_mask_64(block),
        None => {
            let mut block = [0u8; 64];
            block[..bytes.len()].copy_from_slice(bytes);
            newline_mask_64(&block)
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn newline_mask_64(block: &[u8; 64]) -> u64 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
    };
    let mut mask = 0u64;
    for (i, chunk) in block.chunks_exact(16).enumerate() {
        // SAFETY: SSE2 is part of x86_64; the load reads the 16 bytes of `chunk` (unaligned
        // loads are allowed).
        let bits = unsafe {
            let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'\n' as i8)))
        };
        mask |= u64::from(bits as u16) << (16 * i);
    }
    mask
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn newline_mask_64(block: &[u8; 64]) -> u64 {
    block
        .iter()
        .enumerate()
        .fold(0, |mask, (i, &b)| mask | (u64::from(b == b'\n') << i))
}

/// Parses one line (no `\n`; a trailing `\r` is allowed) into `(name, timestamp, value)`,
/// before [`super::normalize`].
///
/// Mirrors carbon's `metric, value, timestamp = line.decode('utf-8').strip().split()` followed
/// by `float(timestamp), float(value)`: fields are runs of non-whitespace in Python's sense,
/// exactly three are required, and the numbers follow Python's `float()` grammar. The name is a
/// slice of `line`.
pub fn parse_line(line: &[u8]) -> Result<(&[u8], f64, f64), DropReason> {
    parse_line_noting_plain(line).map(|(point, _)| point)
}

/// [`parse_line`], and whether the name is plain ASCII without whitespace (`0x21..=0x7f`)
/// as far as parsing found out (`true` only when it checked; `false` may still be plain).
#[inline]
pub(crate) fn parse_line_noting_plain(line: &[u8]) -> Result<(Point<'_>, bool), DropReason> {
    if let Some(point) = parse_plain_line(line) {
        return Ok((point, true));
    }
    general_line(line).map(|point| (point, false))
}

/// [`parse_line`] by carbon's general rules.
fn general_line(line: &[u8]) -> Result<(&[u8], f64, f64), DropReason> {
    let mut fields: [&[u8]; 3] = [&[]; 3];
    let count = if printable_ascii(line) {
        split_spaces(line, &mut fields)
    } else if line.is_ascii() {
        split_ascii(line, &mut fields)
    } else {
        let text = std::str::from_utf8(line).map_err(|_| DropReason::BadUtf8)?;
        split_unicode(text, &mut fields)
    };
    if count != 3 {
        return Err(DropReason::BadFields);
    }
    let [name, value, timestamp] = fields;
    // carbon evaluates `(float(timestamp), float(value))`: timestamp first.
    let timestamp = parse_py_float(timestamp).ok_or(DropReason::BadTimestamp)?;
    let value = parse_py_float(value).ok_or(DropReason::BadValue)?;
    Ok((name, timestamp, value))
}

/// [`parse_line`] for the line nearly every sender writes, or `None` for the general rules
/// to decide: `name value timestamp` split by single spaces, the name plain ASCII without
/// whitespace (`0x21..=0x7f`), both numbers plain decimals (`parse_plain_decimal`). Such a
/// line splits into exactly these three fields under Python's rules too, so the answer is the
/// general one; it is found from the end (the numbers are short), and the name is read once,
/// instead of the whole line being checked and then split from the front.
#[inline]
fn parse_plain_line(line: &[u8]) -> Option<(&[u8], f64, f64)> {
    let (mid, last) = last_two_spaces(line)?;
    let name = line.get(..mid)?;
    let value = line.get(mid + 1..last)?;
    let timestamp = line.get(last + 1..)?;
    if name.is_empty() || !plain_prefix(line, mid) {
        return None;
    }
    let timestamp = parse_plain_decimal(timestamp)?;
    let value = parse_plain_decimal(value)?;
    Some((name, timestamp, value))
}

/// True when every byte is in `0x21..=0x7f`: ASCII without whitespace, a name carbon's
/// `split()` keeps whole. One pass without early exit, so it vectorises.
#[inline]
fn plain_name(name: &[u8]) -> bool {
    name.iter()
        .fold(true, |ok, &b| ok & (b.wrapping_sub(0x21) < 0x5f))
}

/// The positions of the last two `' '` of `line`, `(mid, last)`: from one look at its last
/// 32 bytes where they hold both (the two numbers of a line are short), else by
/// [`prev_space`].
#[inline]
fn last_two_spaces(line: &[u8]) -> Option<(usize, usize)> {
    let mut spaces = tail_spaces(line);
    if spaces == 0 {
        let last = prev_space(line, line.len())?;
        return Some((prev_space(line, last)?, last));
    }
    // Bit i of `spaces` is byte len - 32 + i: the highest bit is the last space.
    let at = |bits: u32| line.len() - 32 + (31 - bits.leading_zeros()) as usize;
    let last = at(spaces);
    spaces &= !(1 << (31 - spaces.leading_zeros()));
    let mid = if spaces == 0 {
        prev_space(line, last)?
    } else {
        at(spaces)
    };
    Some((mid, last))
}

/// The spaces among the last 32 bytes of `line` (bit i: byte `len - 32 + i`), or 0 when the
/// line is shorter.
#[cfg(target_arch = "x86_64")]
#[inline]
fn tail_spaces(line: &[u8]) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
    };
    let Some(tail) = line.last_chunk::<32>() else {
        return 0;
    };
    let (low, high) = tail.split_at(16);
    // SAFETY: SSE2 is part of x86_64; each load reads 16 bytes of `tail` (unaligned loads
    // are allowed).
    let (low, high) = unsafe {
        let space = _mm_set1_epi8(b' ' as i8);
        (
            _mm_movemask_epi8(_mm_cmpeq_epi8(
                _mm_loadu_si128(low.as_ptr().cast::<__m128i>()),
                space,
            )),
            _mm_movemask_epi8(_mm_cmpeq_epi8(
                _mm_loadu_si128(high.as_ptr().cast::<__m128i>()),
                space,
            )),
        )
    };
    (low as u32 & 0xffff) | ((high as u32 & 0xffff) << 16)
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn tail_spaces(line: &[u8]) -> u32 {
    portable_tail_spaces(line)
}

/// [`tail_spaces`] byte by byte: every CPU's, and the tests' on x86_64.
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline]
fn portable_tail_spaces(line: &[u8]) -> u32 {
    line.last_chunk::<32>().map_or(0, |tail| {
        tail.iter()
            .enumerate()
            .fold(0, |mask, (i, &b)| mask | (u32::from(b == b' ') << i))
    })
}

/// [`plain_name`] of `line[..n]`, sixteen bytes at a time (a name's last stretch by an
/// overlapping load, a name shorter than sixteen bytes by the line's first sixteen).
#[cfg(target_arch = "x86_64")]
#[inline]
fn plain_prefix(line: &[u8], n: usize) -> bool {
    use std::arch::x86_64::{
        __m128i, _mm_cmpgt_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
    };
    // Bit i set: byte i of `chunk` is outside `0x21..=0x7f` (as a signed byte, not above
    // 0x20).
    let outside = |chunk: &[u8; 16]| {
        // SAFETY: SSE2 is part of x86_64; the load reads the 16 bytes of `chunk`.
        let inside = unsafe {
            _mm_movemask_epi8(_mm_cmpgt_epi8(
                _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>()),
                _mm_set1_epi8(0x20),
            ))
        };
        !(inside as u32) & 0xffff
    };
    let Some(name) = line.get(..n) else {
        return false;
    };
    if let Some(last) = name.last_chunk::<16>() {
        let (chunks, _) = name.as_chunks::<16>();
        chunks.iter().fold(outside(last), |bad, c| bad | outside(c)) == 0
    } else if let Some(first) = line.first_chunk::<16>() {
        outside(first) & ((1 << n) - 1) == 0
    } else {
        plain_name(name)
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn plain_prefix(line: &[u8], n: usize) -> bool {
    line.get(..n).is_some_and(plain_name)
}

/// Position of the last `' '` before `end`, eight bytes at a time from the end; `None` if
/// there is none.
#[inline]
fn prev_space(line: &[u8], end: usize) -> Option<usize> {
    const LOWS: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let mut i = end.min(line.len());
    while i >= 8 {
        let Some(Ok(bytes)) = line.get(i - 8..i).map(<[u8; 8]>::try_from) else {
            break;
        };
        // Zero bytes of `x` are spaces; this form flags exactly them (no borrow crosses
        // bytes), so the highest flag is the last space.
        let x = u64::from_le_bytes(bytes) ^ (0x0101_0101_0101_0101 * u64::from(b' '));
        let zeros = !(((x & LOWS).wrapping_add(LOWS)) | x | LOWS);
        if zeros != 0 {
            return Some(i - 1 - (zeros.leading_zeros() / 8) as usize);
        }
        i -= 8;
    }
    line.get(..i)?.iter().rposition(|&b| b == b' ')
}

/// True when `name` holds a character carbon's `line.strip().split()` would split on: a name
/// the plaintext protocol cannot carry, which a line destination would turn into two metrics.
/// Bytes that are not UTF-8 are not whitespace (the line parser rejects them separately).
#[inline]
pub(crate) fn has_py_space(name: &[u8]) -> bool {
    // Every byte in `0x21..=0x7f`: plain ASCII without whitespace, the common case, in one
    // pass without early exit.
    if name
        .iter()
        .fold(true, |ok, &b| ok & (b.wrapping_sub(0x21) < 0x5f))
    {
        return false;
    }
    name.utf8_chunks()
        .any(|chunk| chunk.valid().chars().any(is_py_space))
}

/// True when every byte is printable ASCII (`0x20..=0x7e`, or DEL): then the space is the only
/// whitespace Python could split on. One pass without early exit, so it vectorises.
#[inline]
fn printable_ascii(line: &[u8]) -> bool {
    line.iter()
        .fold(true, |ok, &b| ok & (b.wrapping_sub(0x20) < 0x60))
}

/// [`split_ascii`] for lines whose only whitespace is `' '`.
#[inline]
fn split_spaces<'a>(line: &'a [u8], fields: &mut [&'a [u8]; 3]) -> usize {
    let mut count = 0;
    let mut start = 0;
    while start <= line.len() {
        let end = next_space(line, start);
        if end > start {
            match fields.get_mut(count) {
                Some(slot) => *slot = line.get(start..end).unwrap_or_default(),
                None => return 4,
            }
            count += 1;
        }
        start = end + 1;
    }
    count
}

/// Position of the first `' '` at or after `from` (`line.len()` if none), eight bytes at a
/// time: a field is a few dozen bytes, too short for memchr's vector setup to pay.
#[inline]
fn next_space(line: &[u8], from: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut i = from;
    while let Some(chunk) = line.get(i..i + 8) {
        let Ok(bytes) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        // Zero bytes of `x` are spaces; the lowest flagged byte is exact (borrows only
        // propagate upwards from a real zero byte).
        let x = u64::from_le_bytes(bytes) ^ (ONES * u64::from(b' '));
        let zeros = x.wrapping_sub(ONES) & !x & HIGHS;
        if zeros != 0 {
            return i + (zeros.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&b) = line.get(i) {
        if b == b' ' {
            return i;
        }
        i += 1;
    }
    line.len()
}

/// Fills up to three fields; returns how many fields the line has (4 means "more than 3").
fn split_ascii<'a>(line: &'a [u8], fields: &mut [&'a [u8]; 3]) -> usize {
    let mut count = 0;
    let mut i = 0;
    while i < line.len() {
        if is_py_space_ascii(line[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < line.len() && !is_py_space_ascii(line[i]) {
            i += 1;
        }
        match fields.get_mut(count) {
            Some(slot) => *slot = &line[start..i],
            None => return 4,
        }
        count += 1;
    }
    count
}

fn split_unicode<'a>(text: &'a str, fields: &mut [&'a [u8]; 3]) -> usize {
    let mut count = 0;
    for field in text.split(is_py_space).filter(|f| !f.is_empty()) {
        match fields.get_mut(count) {
            Some(slot) => *slot = field.as_bytes(),
            None => return 4,
        }
        count += 1;
    }
    count
}

/// Appends `name value timestamp\n` exactly as carbon 1.1.10's line client
/// (`CarbonLineClientProtocol`, `carbon/client.py`) writes it: the value as
/// `("%.10f" % value).rstrip('0').rstrip('.')` and the timestamp as `"%d" % timestamp`
/// (truncated toward zero), so a carbon-cache behind the relay stores what carbon-relay would
/// have sent it: values round at ten decimals, fractional timestamps lose their fraction.
/// A verbatim line (a carbon-c-relay configuration's) is written as it is.
pub fn encode_line(dp: Datapoint<'_>, out: &mut BytesMut) {
    if dp.is_verbatim() {
        out.reserve(dp.name.len() + 1);
        out.put_slice(dp.name);
        out.put_u8(b'\n');
        return;
    }
    out.reserve(dp.name.len() + 2 * MAX_FLOAT_REPR + 3);
    out.put_slice(dp.name);
    out.put_u8(b' ');
    write_carbon_value(dp.value, out);
    out.put_u8(b' ');
    write_carbon_timestamp(dp.timestamp, out);
    out.put_u8(b'\n');
}

/// `("%.10f" % value).rstrip('0').rstrip('.')`. Rust's `{:.10}` is Python's `%.10f`: the
/// exact binary value rounded half to even at the tenth decimal, every integer digit of a huge
/// value written out, `-` kept on negative zero, `inf`/`-inf` spelled alike; only NaN (which
/// [`super::normalize`] already drops) is spelled differently, so it is written by hand.
fn write_carbon_value(value: f64, out: &mut BytesMut) {
    use std::fmt::Write as _;
    if value.is_nan() {
        out.put_slice(b"nan");
        return;
    }
    // Fast paths, each giving `%.10f`'s text exactly: an integer (below 2^53 every such double
    // is one, printed without a fraction), and a value below 2^18 whose shortest repr has at
    // most ten decimals (its ULP is at most 2^-34, so the exact binary value lies within
    // 2^-35 < 0.5e-10 of that repr, and rounding it at ten decimals gives the repr back).
    if value.abs() < 9_007_199_254_740_992.0 {
        let int = value as i64;
        if int as f64 == value {
            if int == 0 && value.is_sign_negative() {
                out.put_slice(b"-0");
            } else {
                let _ = write!(out, "{int}");
            }
            return;
        }
        if value.abs() < 262_144.0 {
            let mut num = [0u8; MAX_FLOAT_REPR];
            let n = write_py_float(value, &mut num);
            let text = &num[..n];
            if let Some(dot) = text.iter().position(|&b| b == b'.')
                && !text.contains(&b'e')
                && n - dot - 1 <= 10
            {
                out.put_slice(text);
                return;
            }
        }
    }
    // Writing to a `BytesMut` grows it and cannot fail.
    let _ = write!(out, "{value:.10}");
    if value.is_finite() {
        // The text holds a `.`, so stripping `0`s stops there at the latest.
        while out.last() == Some(&b'0') {
            out.truncate(out.len() - 1);
        }
        if out.last() == Some(&b'.') {
            out.truncate(out.len() - 1);
        }
    }
}

/// `"%d" % timestamp`: Python's `int()`, truncating toward zero, in decimal. Timestamps are
/// finite here ([`super::normalize`] drops the rest, where carbon's `%d` would raise).
fn write_carbon_timestamp(timestamp: f64, out: &mut BytesMut) {
    use std::fmt::Write as _;
    // 2^63: below it the saturating cast is the exact truncation (and -0.5 prints `0`, as in
    // Python); at and above it every double is an integer already, printed in full.
    const I64_RANGE: f64 = 9_223_372_036_854_775_808.0;
    let _ = if timestamp.abs() < I64_RANGE {
        write!(out, "{}", timestamp as i64)
    } else {
        write!(out, "{timestamp:.0}")
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(framer: &mut LineFramer, buf: &mut BytesMut) -> Vec<Result<Vec<u8>, DropReason>> {
        let mut got = Vec::new();
        framer.feed(buf, |r| got.push(r.map(<[u8]>::to_vec)));
        got
    }

    #[test]
    fn framer_splits_lines_and_keeps_tail() {
        let mut f = LineFramer::new(100);
        let mut buf = BytesMut::from(&b"a 1 2\nb 3 4\r\npart"[..]);
        let got = feed_all(&mut f, &mut buf);
        assert_eq!(got, vec![Ok(b"a 1 2".to_vec()), Ok(b"b 3 4\r".to_vec())]);
        assert_eq!(&buf[..], b"part");
        buf.extend_from_slice(b"ial 5");
        assert!(feed_all(&mut f, &mut buf).is_empty());
        buf.extend_from_slice(b" 6\n\n");
        let got = feed_all(&mut f, &mut buf);
        assert_eq!(got, vec![Ok(b"partial 5 6".to_vec()), Ok(Vec::new())]);
        assert!(buf.is_empty());
        assert_eq!(f.finish(&mut buf), None);
    }

    #[test]
    fn over_long_line_spanning_feeds_is_reported_once_and_buffer_stays_bounded() {
        let mut f = LineFramer::new(10);
        let mut buf = BytesMut::from(&b"ok 1 2\n0123456789abc"[..]);
        let got = feed_all(&mut f, &mut buf);
        assert_eq!(got, vec![Ok(b"ok 1 2".to_vec()), Err(DropReason::TooLong)]);
        assert!(buf.is_empty());
        for _ in 0..100 {
            buf.extend_from_slice(&[b'x'; 1000]);
            assert!(feed_all(&mut f, &mut buf).is_empty());
            assert!(buf.is_empty());
        }
        buf.extend_from_slice(b"yyy\nz 1 2\n");
        assert_eq!(feed_all(&mut f, &mut buf), vec![Ok(b"z 1 2".to_vec())]);
        // Exactly max_len is fine; max_len + 1 is not, terminated or not.
        buf.extend_from_slice(b"0123456789\n0123456789a\n");
        let got = feed_all(&mut f, &mut buf);
        assert_eq!(
            got,
            vec![Ok(b"0123456789".to_vec()), Err(DropReason::TooLong)]
        );
        buf.extend_from_slice(b"0123456789a");
        assert_eq!(feed_all(&mut f, &mut buf), vec![Err(DropReason::TooLong)]);
        assert_eq!(f.finish(&mut buf), None);
    }

    #[test]
    fn finish_reports_unterminated_tail() {
        let mut f = LineFramer::new(100);
        let mut buf = BytesMut::from(&b"a 1 2\n  "[..]);
        assert_eq!(feed_all(&mut f, &mut buf).len(), 1);
        assert_eq!(f.finish(&mut buf), Some(DropReason::Unterminated));
        assert!(buf.is_empty());
        assert_eq!(f.finish(&mut buf), None);
    }

    /// The framer's rules written plainly, one byte search per line: what the block-wise
    /// search must hand out, fed the same reads.
    struct PlainFramer {
        max_len: usize,
        discarding: bool,
    }

    impl PlainFramer {
        fn feed(&mut self, buf: &mut Vec<u8>, got: &mut Vec<Result<Vec<u8>, DropReason>>) {
            let mut pos = 0;
            while let Some(i) = buf[pos..].iter().position(|&b| b == b'\n') {
                let end = pos + i;
                if self.discarding {
                    self.discarding = false;
                } else if end - pos > self.max_len {
                    got.push(Err(DropReason::TooLong));
                } else {
                    got.push(Ok(buf[pos..end].to_vec()));
                }
                pos = end + 1;
            }
            let tail = buf.len() - pos;
            let tail_too_long = !self.discarding && tail > self.max_len;
            if tail_too_long {
                got.push(Err(DropReason::TooLong));
            }
            if self.discarding || tail_too_long {
                self.discarding = true;
                buf.clear();
            } else {
                buf.drain(..pos);
            }
        }
    }

    #[test]
    fn block_wise_newline_search_matches_the_plain_rules_over_random_reads() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..300 {
            // Lines of 0 to ~200 bytes (some past the limit, many across 64-byte blocks),
            // read in pieces of 1 to ~300 bytes.
            let max_len = [7, 63, 64, 65, 100, 150][round % 6];
            let mut stream = Vec::new();
            for _ in 0..(next() % 60) {
                let len = (next() % 200) as usize;
                stream.extend((0..len).map(|_| b"ab.c \r\t"[(next() % 7) as usize]));
                stream.push(b'\n');
            }
            stream.extend((0..next() % 90).map(|_| b'x'));
            let (mut framer, mut plain) = (
                LineFramer::new(max_len),
                PlainFramer {
                    max_len,
                    discarding: false,
                },
            );
            let (mut buf, mut plain_buf) = (BytesMut::new(), Vec::new());
            let (mut got, mut want) = (Vec::new(), Vec::new());
            let mut rest = &stream[..];
            while !rest.is_empty() {
                let take = (1 + next() % 300).min(rest.len() as u64) as usize;
                let (read, after) = rest.split_at(take);
                rest = after;
                buf.extend_from_slice(read);
                plain_buf.extend_from_slice(read);
                got.extend(feed_all(&mut framer, &mut buf));
                plain.feed(&mut plain_buf, &mut want);
                assert_eq!(&buf[..], &plain_buf[..], "round {round}: the kept tail");
            }
            assert_eq!(got, want, "round {round}");
        }
    }

    #[test]
    fn byte_at_a_time_feeding_matches_bulk() {
        let input = b"a.b 1 2\nc 3.5 4\r\n\nd 5 6\n";
        let mut f = LineFramer::new(7);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &b in input {
            buf.extend_from_slice(&[b]);
            got.extend(feed_all(&mut f, &mut buf));
        }
        let mut bulk = BytesMut::from(&input[..]);
        assert_eq!(got, feed_all(&mut LineFramer::new(7), &mut bulk));
        assert_eq!(got[1], Err(DropReason::TooLong));
    }

    /// Whenever the plain-line path answers, the general rules answer the same; lines built
    /// from pieces that sit on either side of its conditions.
    #[test]
    fn plain_line_path_agrees_with_the_general_rules() {
        let names: [&[u8]; 12] = [
            b"a.b.c",
            b"servers.host-0001.cpu.total.user",
            b"x",
            b"a!b~c\x7f",
            b"",
            b"a\tb",
            b"caf\xc3\xa9",
            b"sixteen.bytes.ab",
            b"seventeen.bytes.\x80",
            b"servers.host-0001.cpu\x1f.total.user.with.more.parts",
            b"\x80servers.host-0001.cpu.total.user",
            b"servers.host-0001.cpu.total.user.idle.percentage.1m",
        ];
        let numbers: [&[u8]; 16] = [
            b"1700000000",
            b"123456789",
            b"0000000000000016",
            b"12345678901234567",
            b"17000000x0",
            b"1700000000.",
            b"1.700000000",
            b"12.25",
            b"-0.5",
            b"+3",
            b"1e5",
            b"nan",
            b"1_0",
            b"12\r",
            b".5",
            b"99999999999999999999",
        ];
        let seps: [&[u8]; 3] = [b" ", b"  ", b"\t"];
        let mut checked = 0;
        for name in names {
            for value in numbers {
                for ts in numbers {
                    for sep in seps {
                        let line = [name, sep, value, b" ", ts].concat();
                        let general = {
                            let mut fields: [&[u8]; 3] = [&[]; 3];
                            let count = if line.is_ascii() {
                                split_ascii(&line, &mut fields)
                            } else {
                                match std::str::from_utf8(&line) {
                                    Ok(text) => split_unicode(text, &mut fields),
                                    Err(_) => 0,
                                }
                            };
                            (count == 3)
                                .then(|| {
                                    let [n, v, t] = fields;
                                    let (t, v) = (parse_py_float(t)?, parse_py_float(v)?);
                                    Some((n.to_vec(), t.to_bits(), v.to_bits()))
                                })
                                .flatten()
                        };
                        if let Some((n, t, v)) = parse_plain_line(&line) {
                            checked += 1;
                            assert_eq!(
                                general,
                                Some((n.to_vec(), t.to_bits(), v.to_bits())),
                                "{:?}",
                                String::from_utf8_lossy(&line)
                            );
                        }
                        let whole = parse_line(&line)
                            .ok()
                            .map(|(n, t, v)| (n.to_vec(), t.to_bits(), v.to_bits()));
                        assert_eq!(whole, general, "{:?}", String::from_utf8_lossy(&line));
                    }
                }
            }
        }
        assert!(checked > 50, "{checked}");
    }

    /// The plain path's vector steps against their byte-by-byte meaning, on random lines of
    /// every length around their sixteen- and thirty-two-byte windows.
    #[test]
    fn the_plain_paths_word_steps_match_their_byte_by_byte_meaning() {
        let alphabet = b"ab.19 \t\x7f\x80\xff\x20\x21\x00";
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..200_000 {
            let len = rng.usize(0..80);
            let line: Vec<u8> = (0..len)
                .map(|_| {
                    if rng.u8(..4) == 0 {
                        alphabet[rng.usize(..alphabet.len())]
                    } else {
                        b'a' + rng.u8(..26)
                    }
                })
                .collect();
            let last = line.iter().rposition(|&b| b == b' ');
            let mid = last.and_then(|l| line[..l].iter().rposition(|&b| b == b' '));
            assert_eq!(last_two_spaces(&line), mid.zip(last), "{line:?}");
            let tail = line.len().checked_sub(32).map_or(0, |from| {
                (0..32).fold(0u32, |m, i| m | (u32::from(line[from + i] == b' ') << i))
            });
            assert_eq!(tail_spaces(&line), tail, "{line:?}");
            assert_eq!(portable_tail_spaces(&line), tail, "{line:?}");
            for n in 0..=len {
                assert_eq!(
                    plain_prefix(&line, n),
                    plain_name(&line[..n]),
                    "{line:?} {n}"
                );
            }
        }
    }

    #[test]
    fn prev_space_finds_the_last_space_before_the_end() {
        for len in 0..40 {
            let mut line = vec![b'!'; len];
            for at in 0..len {
                line[at] = b' ';
                for end in 0..=len {
                    assert_eq!(
                        prev_space(&line, end),
                        line[..end].iter().rposition(|&b| b == b' '),
                        "{len} {at} {end}"
                    );
                }
                line[at] = if at % 2 == 0 { b'!' } else { 0x21 ^ 0x80 };
            }
        }
    }

    #[test]
    fn parse_line_follows_carbon() {
        assert_eq!(
            parse_line(b"a.b 1.5 1700000000"),
            Ok((&b"a.b"[..], 1.7e9, 1.5))
        );
        assert_eq!(parse_line(b"  a.b\t1  2 \r"), Ok((&b"a.b"[..], 2.0, 1.0)));
        assert_eq!(parse_line(b"a\x1c1\x0b2\x0c"), Ok((&b"a"[..], 2.0, 1.0)));
        assert_eq!(
            parse_line(b"a;k=v 1_000 -1"),
            Ok((&b"a;k=v"[..], -1.0, 1000.0))
        );
        let (_, ts, v) = parse_line(b"x nan inf").unwrap_or((b"", 0.0, 0.0));
        assert!(v.is_nan() && ts == f64::INFINITY);
        assert_eq!(parse_line(b""), Err(DropReason::BadFields));
        assert_eq!(parse_line(b" \r"), Err(DropReason::BadFields));
        assert_eq!(parse_line(b"a 1"), Err(DropReason::BadFields));
        assert_eq!(parse_line(b"a 1 2 3"), Err(DropReason::BadFields));
        assert_eq!(parse_line(b"a x 2"), Err(DropReason::BadValue));
        assert_eq!(parse_line(b"a 1 2x"), Err(DropReason::BadTimestamp));
        assert_eq!(parse_line(b"a x y"), Err(DropReason::BadTimestamp));
        assert_eq!(parse_line(b"a\xff 1 2"), Err(DropReason::BadUtf8));
    }

    #[test]
    fn parse_line_unicode_whitespace_is_pythons() {
        let name = "météo.温度.🔥";
        let line = format!("{name}\u{3000}1\u{a0}2\u{2029}");
        assert_eq!(parse_line(line.as_bytes()), Ok((name.as_bytes(), 2.0, 1.0)));
        let line = format!("{name}\u{85}1\u{1680}2\u{202f}\u{205f}");
        assert_eq!(parse_line(line.as_bytes()), Ok((name.as_bytes(), 2.0, 1.0)));
        // Zero-width space and BOM are not whitespace: they stay inside fields.
        assert_eq!(
            parse_line("a\u{200b} 1 2".as_bytes()).map(|r| r.0),
            Ok("a\u{200b}".as_bytes())
        );
        assert_eq!(
            parse_line("a 1\u{feff} 2".as_bytes()),
            Err(DropReason::BadValue)
        );
    }

    #[test]
    fn names_carbon_would_split_hold_python_whitespace() {
        for name in [
            &b"evil.a 1 1700000000\nevil.injected"[..],
            b"a\rb",
            b"a\tb",
            b"a b",
            b"a\x0bb",
            b"a\x0cb",
            b"a\x1cb",
            b"a\x1fb",
            "a\u{85}b".as_bytes(),
            "a\u{a0}b".as_bytes(),
            "a\u{2028}b".as_bytes(),
            "温度\u{3000}b".as_bytes(),
        ] {
            assert!(has_py_space(name), "{:?}", String::from_utf8_lossy(name));
            let text = [name, b" 1 2"].concat();
            assert_ne!(parse_line(&text).map(|r| r.0), Ok(name));
        }
        for name in [
            &b"a.b.c"[..],
            b"a;k=v",
            b"a\x00b",
            b"a\x7fb",
            b"a\xffb",
            "温度.🔥\u{200b}".as_bytes(),
        ] {
            assert!(!has_py_space(name), "{:?}", String::from_utf8_lossy(name));
        }
    }

    /// carbon's line client writes `%.10f` values without trailing zeros and `%d` timestamps;
    /// Python's repr (`9.882973263293738e-06`, `1700034398.75`) made a carbon-cache store other
    /// numbers than carbon-relay would send it. Expected texts are Python 3's.
    #[test]
    fn encode_line_writes_carbons_ten_decimals_and_truncated_timestamps() {
        let cases: [(f64, f64, &str); 12] = [
            (1.0, 1700000000.0, "1 1700000000"),
            (1.5e-5, 1e16, "0.000015 10000000000000000"),
            (f64::NEG_INFINITY, -0.0, "-inf 0"),
            (
                9.882973263293738e-06,
                1700034398.75,
                "0.000009883 1700034398",
            ),
            (-1e-11, -0.5, "-0 0"),
            (-0.0, -100.75, "-0 -100"),
            (1.0 / 3.0, 1e20, "0.3333333333 100000000000000000000"),
            (2.5e-11, 0.0, "0 0"),
            (
                1e22,
                9223372036854775808.0,
                "10000000000000000000000 9223372036854775808",
            ),
            (
                123456.00000000004,
                -9223372036854779904.0,
                "123456 -9223372036854779904",
            ),
            (f64::INFINITY, 1.5, "inf 1"),
            (f64::NAN, 2.0, "nan 2"),
        ];
        for (value, timestamp, want) in cases {
            let mut out = BytesMut::new();
            let dp = Datapoint {
                name: b"a.b",
                timestamp,
                value,
            };
            encode_line(dp, &mut out);
            assert_eq!(
                std::str::from_utf8(&out),
                Ok(format!("a.b {want}\n").as_str()),
                "{value:e} {timestamp:e}"
            );
        }
    }

    /// The space-only splitter finds the same fields as the general ASCII splitter on lines of
    /// printable bytes with spaces anywhere (leading, trailing, repeated).
    #[test]
    fn space_splitter_agrees_with_ascii_splitter() {
        let mut rng = fastrand::Rng::with_seed(3);
        let alphabet = b"  ab.1_;=~-";
        for _ in 0..20_000 {
            let line: Vec<u8> = (0..rng.usize(0..40))
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect();
            assert!(printable_ascii(&line));
            let (mut a, mut b) = ([&[][..]; 3], [&[][..]; 3]);
            let (na, nb) = (split_spaces(&line, &mut a), split_ascii(&line, &mut b));
            assert_eq!(na, nb, "{:?}", String::from_utf8_lossy(&line));
            assert_eq!(a, b, "{:?}", String::from_utf8_lossy(&line));
        }
        assert!(!printable_ascii(b"a\tb"));
        assert!(!printable_ascii("é".as_bytes()));
    }
}
