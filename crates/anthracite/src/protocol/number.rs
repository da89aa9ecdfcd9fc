//! Python's float text formats, shared by the line and pickle codecs.
//!
//! [`parse_py_float`] accepts exactly what Python 3's `float(str)` accepts for ASCII input
//! (after whitespace stripping), and [`write_py_float`] prints what Python 3's `repr(float)`
//! prints. Neither allocates.

/// Longest text [`write_py_float`] produces (`-2.2250738585072014e-308` is 24 bytes).
pub(crate) const MAX_FLOAT_REPR: usize = 32;

/// Digits copied to the stack when a number holds `_` separators; longer ones use the heap
/// (only ever for absurd input, never for real traffic).
const STACK_DIGITS: usize = 128;

/// Python whitespace as `str.isspace` sees it, for ASCII bytes.
#[inline]
pub(crate) fn is_py_space_ascii(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0x1c..=0x1f)
}

/// Python whitespace as `str.isspace` sees it: Unicode `White_Space` plus U+001C..U+001F.
#[inline]
pub(crate) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Parses `s` with Python 3's `float()` grammar (no surrounding whitespace allowed here):
/// optional sign, then `inf`/`infinity`/`nan` in any case, or decimal digits with an optional
/// `.` and exponent, `_` allowed between digits. Correctly rounded. Non-ASCII digits, which
/// Python also accepts, are rejected.
#[inline]
pub(crate) fn parse_py_float(s: &[u8]) -> Option<f64> {
    match parse_plain_decimal(s) {
        Some(v) => Some(v),
        None => parse_py_float_general(s),
    }
}

/// Powers of ten that are exact doubles.
const EXACT_POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The fast path for what metrics look like (`1700000000`, `-12.25`, `0.001`): sign, at most
/// 19 digits with one optional `.`, no exponent or `_`, whose digits form an integer m up to
/// 2^53 with k ≤ 22 of them after the point. Then m and 10^k are exact doubles and m / 10^k is
/// one correctly rounded division (Clinger's fast path), the same result as the general
/// parser. Anything else returns `None` for the general parser to decide. A timestamp's bare
/// digits are read first, as two words ([`parse_long_integer`]).
#[inline]
pub(crate) fn parse_plain_decimal(s: &[u8]) -> Option<f64> {
    if let Some(v) = parse_long_integer(s) {
        return Some(v);
    }
    let (neg, body) = match s.split_first()? {
        (b'-', rest) => (true, rest),
        (b'+', rest) => (false, rest),
        _ => (false, s),
    };
    let mut mantissa: u64 = 0;
    let mut digits = 0usize;
    let int_end = take_digits(body, 0, &mut mantissa, &mut digits)?;
    let (end, frac_digits) = match body.get(int_end) {
        Some(b'.') => {
            let before = digits;
            let end = take_digits(body, int_end + 1, &mut mantissa, &mut digits)?;
            (end, digits - before)
        }
        _ => (int_end, 0),
    };
    if end != body.len() || digits == 0 || mantissa > 1 << 53 {
        return None;
    }
    let v = if frac_digits == 0 {
        mantissa as f64
    } else {
        mantissa as f64 / *EXACT_POW10.get(frac_digits)?
    };
    Some(if neg { -v } else { v })
}

/// Powers of ten up to 10^8, the scale of a word of digits.
const POW10_U64: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// [`parse_plain_decimal`] for 9 to 16 digits without sign or point (every Unix timestamp
/// of this era): two overlapping words instead of a digit loop, `None` for anything else.
/// An integer converts with one correctly rounded conversion, whatever its size, so the
/// answer is `float()`'s.
#[inline]
fn parse_long_integer(s: &[u8]) -> Option<f64> {
    let n = s.len();
    if !(9..=16).contains(&n) {
        return None;
    }
    let high = u64::from_le_bytes(s.first_chunk::<8>().copied()?);
    let low = u64::from_le_bytes(s.last_chunk::<8>().copied()?);
    // The low word's first 16 - n bytes are the high word's last ones: read them as zeros.
    let overlap = (1u64 << (8 * (16 - n))) - 1;
    let low = (low & !overlap) | (0x3030_3030_3030_3030 & overlap);
    if !(eight_digits(high) && eight_digits(low)) {
        return None;
    }
    let scale = *POW10_U64.get(n - 8)?;
    Some((parse_eight_digits(high) * scale + parse_eight_digits(low)) as f64)
}

/// Accumulates the decimal digits of `s` from `at` into `mantissa` (eight at a time while it
/// can); returns where they end, or `None` past 19 digits (the mantissa could overflow).
#[inline]
fn take_digits(s: &[u8], mut at: usize, mantissa: &mut u64, digits: &mut usize) -> Option<usize> {
    while let Some(chunk) = s.get(at..at + 8) {
        let word = u64::from_le_bytes(<[u8; 8]>::try_from(chunk).ok()?);
        if !eight_digits(word) {
            break;
        }
        *digits += 8;
        if *digits > 19 {
            return None;
        }
        *mantissa = *mantissa * 100_000_000 + parse_eight_digits(word);
        at += 8;
    }
    while let Some(&b) = s.get(at) {
        if !b.is_ascii_digit() {
            break;
        }
        *digits += 1;
        if *digits > 19 {
            return None;
        }
        *mantissa = *mantissa * 10 + u64::from(b - b'0');
        at += 1;
    }
    Some(at)
}

/// True when the eight little-endian bytes of `v` are all ASCII digits.
#[inline]
fn eight_digits(v: u64) -> bool {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    (v & HIGH) | ((v.wrapping_add(0x0606_0606_0606_0606) & HIGH) >> 4) == 0x3333_3333_3333_3333
}

/// The value of eight ASCII digits (little-endian bytes, most significant digit first in the
/// text), with three multiplications.
#[inline]
fn parse_eight_digits(v: u64) -> u64 {
    const MASK: u64 = 0x0000_00FF_0000_00FF;
    const MUL1: u64 = 0x000F_4240_0000_0064; // 100 + (1_000_000 << 32)
    const MUL2: u64 = 0x0000_2710_0000_0001; // 1 + (10_000 << 32)
    let v = v.wrapping_sub(0x3030_3030_3030_3030);
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    (v & MASK)
        .wrapping_mul(MUL1)
        .wrapping_add(((v >> 16) & MASK).wrapping_mul(MUL2))
        >> 32
}

/// The whole grammar, through the standard library's correctly rounded parser.
fn parse_py_float_general(s: &[u8]) -> Option<f64> {
    let (neg, body) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let special = if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
        Some(f64::INFINITY)
    } else if body.eq_ignore_ascii_case(b"nan") {
        Some(f64::NAN)
    } else {
        None
    };
    if let Some(v) = special {
        return Some(if neg { -v } else { v });
    }
    let underscores = validate_decimal(body)?;
    if !underscores {
        // Validated: the grammar is now a subset of what Rust's parser accepts.
        return std::str::from_utf8(s).ok()?.parse().ok();
    }
    if s.len() <= STACK_DIGITS {
        let mut buf = [0u8; STACK_DIGITS];
        let n = copy_without_underscores(s, &mut buf);
        std::str::from_utf8(&buf[..n]).ok()?.parse().ok()
    } else {
        let cleaned: Vec<u8> = s.iter().copied().filter(|&b| b != b'_').collect();
        std::str::from_utf8(&cleaned).ok()?.parse().ok()
    }
}

fn copy_without_underscores(s: &[u8], buf: &mut [u8]) -> usize {
    let mut n = 0;
    for &b in s {
        if b != b'_' {
            buf[n] = b;
            n += 1;
        }
    }
    n
}

/// Checks `[digitpart] "." digitpart | digitpart ["."]` then an optional exponent, where
/// `digitpart ::= digit (["_"] digit)*`. Returns whether any `_` was seen.
fn validate_decimal(s: &[u8]) -> Option<bool> {
    let mut i = 0;
    let mut underscores = false;
    let int_digits = digit_part(s, &mut i, &mut underscores);
    let mut frac_digits = 0;
    if s.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = digit_part(s, &mut i, &mut underscores);
    }
    if int_digits == 0 && frac_digits == 0 {
        return None;
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(s.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digit_part(s, &mut i, &mut underscores) == 0 {
            return None;
        }
    }
    (i == s.len()).then_some(underscores)
}

/// Consumes `digit (["_"] digit)*` at `*i`; returns the number of digits (0: nothing consumed).
fn digit_part(s: &[u8], i: &mut usize, underscores: &mut bool) -> usize {
    let mut n = 0;
    while let Some(&b) = s.get(*i) {
        if b.is_ascii_digit() {
            n += 1;
            *i += 1;
        } else if b == b'_' && n > 0 && s.get(*i + 1).is_some_and(|c| c.is_ascii_digit()) {
            *underscores = true;
            *i += 1;
        } else {
            break;
        }
    }
    n
}

/// Writes `v` as Python 3's `repr(float)` does into `buf`, returning the length used:
/// shortest round-trip digits, fixed notation when the decimal exponent is in `-4..16`
/// (always with a `.`), else `d.ddde+XX`.
pub(crate) fn write_py_float(v: f64, buf: &mut [u8; MAX_FLOAT_REPR]) -> usize {
    if v.is_nan() {
        buf[..3].copy_from_slice(b"nan");
        return 3;
    }
    if v.is_infinite() {
        let s: &[u8] = if v > 0.0 { b"inf" } else { b"-inf" };
        buf[..s.len()].copy_from_slice(s);
        return s.len();
    }
    if v.fract() == 0.0 && v.abs() < 1e16 {
        return write_integral(v, buf);
    }
    // Rust's `{:e}` prints the same shortest round-trip digits as Python's repr.
    let mut sci = [0u8; MAX_FLOAT_REPR];
    let sci_len = {
        let mut w = SliceWriter {
            buf: &mut sci,
            len: 0,
        };
        // Cannot fail: the longest `{:e}` of an f64 is 24 bytes.
        let _ = std::fmt::Write::write_fmt(&mut w, format_args!("{v:e}"));
        w.len
    };
    let sci = &sci[..sci_len];
    let (neg, sci) = match sci.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, sci),
    };
    let e_pos = sci.iter().position(|&b| b == b'e').unwrap_or(sci.len());
    let mantissa = &sci[..e_pos];
    let exp_text = sci.get(e_pos + 1..).unwrap_or(b"0");
    let mut digits = [0u8; 20];
    let mut nd = 0;
    for &b in mantissa {
        if b.is_ascii_digit() && nd < digits.len() {
            digits[nd] = b;
            nd += 1;
        }
    }
    let digits = &digits[..nd];
    let exp = parse_small_int(exp_text);

    let mut out = Out { buf, len: 0 };
    if neg {
        out.push(b'-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.extend(digits);
                for _ in digits.len()..int_len {
                    out.push(b'0');
                }
                out.extend(b".0");
            } else {
                out.extend(&digits[..int_len]);
                out.push(b'.');
                out.extend(&digits[int_len..]);
            }
        } else {
            out.extend(b"0.");
            for _ in 0..(-exp - 1) {
                out.push(b'0');
            }
            out.extend(digits);
        }
    } else {
        if let Some((first, rest)) = digits.split_first() {
            out.push(*first);
            if !rest.is_empty() {
                out.push(b'.');
                out.extend(rest);
            }
        }
        out.push(b'e');
        out.push(if exp < 0 { b'-' } else { b'+' });
        let a = exp.unsigned_abs();
        if a >= 100 {
            out.push(b'0' + (a / 100) as u8);
        }
        out.push(b'0' + (a / 10 % 10) as u8);
        out.push(b'0' + (a % 10) as u8);
    }
    out.len
}

/// Fast path for integral values below 1e16 (every timestamp): below 2^54 the spacing of
/// floats is at most 2, so the shortest round-trip digits are the integer's own digits.
fn write_integral(v: f64, buf: &mut [u8; MAX_FLOAT_REPR]) -> usize {
    let mut digits = [0u8; 20];
    let mut n = v.abs() as u64;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut out = Out { buf, len: 0 };
    if v.is_sign_negative() {
        out.push(b'-');
    }
    out.extend(&digits[i..]);
    out.extend(b".0");
    out.len
}

fn parse_small_int(s: &[u8]) -> i32 {
    let (neg, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    let mut n: i32 = 0;
    for &b in digits {
        n = n
            .saturating_mul(10)
            .saturating_add(i32::from(b.wrapping_sub(b'0')));
    }
    if neg { -n } else { n }
}

struct Out<'a> {
    buf: &'a mut [u8; MAX_FLOAT_REPR],
    len: usize,
}

impl Out<'_> {
    #[inline]
    fn push(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    #[inline]
    fn extend(&mut self, s: &[u8]) {
        for &b in s {
            self.push(b);
        }
    }
}

struct SliceWriter<'a> {
    buf: &'a mut [u8; MAX_FLOAT_REPR],
    len: usize,
}

impl std::fmt::Write for SliceWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let slot = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        slot.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Python's `int(value)`: optional sign, digits with single `_` between them, whitespace
/// around.
pub(crate) fn parse_py_int(value: &str) -> Option<i64> {
    let v = value.trim();
    let (neg, digits) = match v.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, v.strip_prefix('+').unwrap_or(v)),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    {
        return None;
    }
    let n: i64 = digits.replace('_', "").parse().ok()?;
    Some(if neg { -n } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr(v: f64) -> String {
        let mut buf = [0u8; MAX_FLOAT_REPR];
        let n = write_py_float(v, &mut buf);
        String::from_utf8(buf[..n].to_vec()).unwrap_or_default()
    }

    // Produced with python3.11: `for v in [...]: print(repr(v))`.
    #[test]
    fn repr_matches_python_table() {
        let table: &[(f64, &str)] = &[
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (0.00012345, "0.00012345"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
            (1700000000.0, "1700000000.0"),
            (1700000000.5, "1700000000.5"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (1e100, "1e+100"),
            (1e-300, "1e-300"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (2.2250738585072014e-308, "2.2250738585072014e-308"),
            (-1.5, "-1.5"),
            (42.0, "42.0"),
            (9999999999999998.0, "9999999999999998.0"),
            (0.3, "0.3"),
            (1.0 / 3.0, "0.3333333333333333"),
            (123.456, "123.456"),
            (-1e-5, "-1e-05"),
        ];
        for &(v, want) in table {
            assert_eq!(repr(v), want, "repr of {v:?}");
        }
    }

    #[test]
    fn python_float_grammar() {
        let ok: &[(&str, f64)] = &[
            ("1", 1.0),
            ("1.", 1.0),
            (".5", 0.5),
            ("-.5e1", -5.0),
            ("+1E-2", 0.01),
            ("1_000", 1000.0),
            ("1_0.2_5e1_0", 10.25e10),
            ("inf", f64::INFINITY),
            ("-Infinity", f64::NEG_INFINITY),
            ("+iNf", f64::INFINITY),
            ("1e999", f64::INFINITY),
            ("0.1", 0.1),
        ];
        for &(s, want) in ok {
            assert_eq!(parse_py_float(s.as_bytes()), Some(want), "{s}");
        }
        assert!(parse_py_float(b"nan").is_some_and(f64::is_nan));
        assert!(parse_py_float(b"-NaN").is_some_and(f64::is_nan));
        let bad = [
            "", ".", "+", "-", "e5", "1e", "1e+", "_1", "1_", "1__0", "1._5", "1_.5", "0x10",
            "1.5.", "in", "infinit", "nan1", " 1", "1 ", "1,5", "++1", "1e_5", "٣", "snan", "1d",
            "∞",
        ];
        for s in bad {
            assert_eq!(parse_py_float(s.as_bytes()), None, "{s:?}");
        }
        let long = format!("1_{}", "0".repeat(300));
        assert_eq!(parse_py_float(long.as_bytes()), Some(1e300));
    }

    /// The fast path gives bit-for-bit what the general parser gives, on plain decimals around
    /// its limits (19 digits, 2^53, 22 decimals) and on random ones.
    #[test]
    fn plain_decimal_fast_path_agrees_with_the_general_parser() {
        let mut cases: Vec<String> = [
            "0",
            "-0",
            "+0",
            "0.0",
            "-0.0",
            "1.",
            ".5",
            "-.5",
            "9007199254740992",
            "9007199254740993",
            "900719925474099.3",
            "1234567890123456789",
            "12345678901234567890",
            "0.0000000000000000000001",
            "0.00000000000000000000001",
            "1700000000",
            "123.25",
            "0.1",
            "0.3",
            "2.675",
            "1.0000000000000002",
            "4503599627370497.5",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut rng = fastrand::Rng::with_seed(11);
        for _ in 0..200_000 {
            let digits = rng.u32(0..=19);
            let int = rng.u64(..10u64.pow(digits));
            let text = match rng.u8(..3) {
                0 => int.to_string(),
                _ => {
                    let width = rng.usize(1..=22);
                    let s = format!("{int:0width$}");
                    let point = rng.usize(0..=s.len());
                    format!("{}.{}", &s[..point], &s[point..])
                }
            };
            cases.push(if rng.bool() { format!("-{text}") } else { text });
        }
        // Long integers, zero-padded, and with one byte that is not a digit.
        for _ in 0..50_000 {
            let width = rng.usize(1..=20);
            let mut s = format!("{:0width$}", rng.u64(..10u64.pow(width.min(19) as u32)));
            if rng.bool() {
                let at = rng.usize(..s.len());
                let byte = [b'.', b'-', b'/', b':', b' ', b'a', 0x80][rng.usize(..7)];
                let mut bytes = s.into_bytes();
                bytes[at] = byte;
                s = String::from_utf8_lossy(&bytes).into_owned();
            }
            cases.push(s);
        }
        for s in &cases {
            let general = parse_py_float_general(s.as_bytes());
            assert_eq!(
                parse_py_float(s.as_bytes()).map(f64::to_bits),
                general.map(f64::to_bits),
                "{s}"
            );
            if let Some(fast) = parse_plain_decimal(s.as_bytes()) {
                assert_eq!(Some(fast.to_bits()), general.map(f64::to_bits), "{s}");
            }
        }
        assert!(parse_plain_decimal(b"123.25").is_some());
        assert!(parse_plain_decimal(b"1e5").is_none());
    }
}
