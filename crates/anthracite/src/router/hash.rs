//! carbon's position hashes and the literal strings it feeds them.
//!
//! Everything here reproduces `carbon.hashing.carbonHash` and the replica keys of
//! `ConsistentHashRing.add_node` byte for byte; the repository's
//! `tests/compat/carbon-hash-vectors.json` is the judge. Only ring construction builds strings;
//! the per-datapoint path calls [`carbon_hash`] on the name's bytes and nothing else.

use std::fmt::Write as _;

use md5::{Digest, Md5};
use regex::Regex;

use super::HashType;

/// carbon's `carbonHash(key, hash_type)` over the UTF-8 bytes of `key`.
///
/// `carbon_ch` gives the first two MD5 bytes big-endian (0..=65535), `fnv1a_ch` the 32-bit
/// FNV-1a folded to 16 bits, `mmh3_ch` the signed MurmurHash3 x86_32 (seed 0). The result is
/// widened to `i64` because ring positions bumped past a collision may exceed either range.
#[inline]
pub fn carbon_hash(key: &[u8], hash_type: HashType) -> i64 {
    match hash_type {
        HashType::CarbonCh => {
            let digest = Md5::digest(key);
            i64::from(u16::from_be_bytes([digest[0], digest[1]]))
        }
        HashType::Fnv1aCh => {
            let h = fnv1a_32(key);
            i64::from((h >> 16) ^ (h & 0xffff))
        }
        HashType::Mmh3Ch => i64::from(murmur3_x86_32(key, 0) as i32),
    }
}

/// 32-bit FNV-1a (offset basis `0x811c9dc5`, prime `0x01000193`).
#[inline]
pub(crate) fn fnv1a_32(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// MurmurHash3 x86_32, as Python's `mmh3.hash` computes it (before the signed cast).
#[inline]
pub(crate) fn murmur3_x86_32(bytes: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h = seed;
    let mut blocks = bytes.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        let mut k: u32 = 0;
        for (i, &b) in tail.iter().enumerate() {
            k |= u32::from(b) << (8 * i);
        }
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
    }
    h ^= bytes.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// Builds the literal strings carbon hashes for ring nodes: Python's `str()` of a
/// `(server, instance)` tuple and the per-replica keys.
///
/// Holds the Unicode table (a compiled regex) needed to decide which characters Python's
/// `repr` escapes, so it is made once per router build, never per datapoint.
#[derive(Debug)]
pub struct NodeKeys {
    /// Characters Python's `str.isprintable()` rejects (besides ASCII, handled by hand).
    /// `None` only if the constant pattern failed to compile (it cannot); then every
    /// non-ASCII character passes through unescaped.
    nonprintable: Option<Regex>,
}

impl Default for NodeKeys {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeKeys {
    /// Compiles the Unicode table.
    pub fn new() -> Self {
        // Python: printable unless the category is Cc, Cf, Cs, Co, Cn, Zl, Zp or Zs (space
        // excepted; ASCII is handled before this is consulted). Cs cannot occur in a Rust str.
        let nonprintable = Regex::new(r"^[\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]$").ok();
        Self { nonprintable }
    }

    /// Python's `str((server, instance))`, e.g. `('127.0.0.1', 'a')` or `('h', None)`.
    pub fn node_key(&self, server: &str, instance: Option<&str>) -> String {
        let mut out = String::with_capacity(server.len() + 16);
        out.push('(');
        self.push_repr(&mut out, server);
        out.push_str(", ");
        match instance {
            Some(i) => self.push_repr(&mut out, i),
            None => out.push_str("None"),
        }
        out.push(')');
        out
    }

    /// The text carbon hashes for replica `i` of node `(server, instance)`.
    ///
    /// `carbon_ch` and `mmh3_ch`: `"%s:%d" % (node, i)`, e.g. `('127.0.0.1', 'a'):0`.
    /// `fnv1a_ch`: `"%d-%s" % (i, instance)`, e.g. `0-a` or `7-None` (the server is not used).
    pub fn replica_key(
        &self,
        hash_type: HashType,
        server: &str,
        instance: Option<&str>,
        i: usize,
    ) -> String {
        match hash_type {
            HashType::Fnv1aCh => format!("{i}-{}", instance.unwrap_or("None")),
            HashType::CarbonCh | HashType::Mmh3Ch => {
                format!("{}:{i}", self.node_key(server, instance))
            }
        }
    }

    /// Appends Python's `repr()` of a `str` (CPython `unicode_repr`).
    fn push_repr(&self, out: &mut String, s: &str) {
        py_repr_into(s, self.nonprintable.as_ref(), false, out);
    }
}

/// Python's `repr(s)`, or `ascii(s)` (every non-ASCII character escaped) when `ascii`.
pub(crate) fn py_repr_into(
    s: &str,
    nonprintable: Option<&regex::Regex>,
    ascii: bool,
    out: &mut String,
) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    let mut buf = [0u8; 4];
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_ascii() => out.push(c),
            c => {
                let escape =
                    ascii || nonprintable.is_some_and(|re| re.is_match(c.encode_utf8(&mut buf)));
                let n = c as u32;
                if !escape {
                    out.push(c);
                } else if n <= 0xff {
                    let _ = write!(out, "\\x{n:02x}");
                } else if n <= 0xffff {
                    let _ = write!(out, "\\u{n:04x}");
                } else {
                    let _ = write!(out, "\\U{n:08x}");
                }
            }
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_examples_from_carbon() {
        assert_eq!(carbon_hash(b"", HashType::CarbonCh), 54301);
        assert_eq!(carbon_hash(b"a", HashType::Fnv1aCh), 52512);
        assert_eq!(carbon_hash(b"foo.bar", HashType::Mmh3Ch), -154558337);
        assert_eq!(carbon_hash(b"", HashType::Mmh3Ch), 0);
        assert_eq!(
            carbon_hash("测试.指标".as_bytes(), HashType::Mmh3Ch),
            -641950896
        );
    }

    #[test]
    fn node_key_matches_python_str_of_tuple() {
        let k = NodeKeys::new();
        assert_eq!(k.node_key("127.0.0.1", Some("a")), "('127.0.0.1', 'a')");
        assert_eq!(k.node_key("10.0.0.1", None), "('10.0.0.1', None)");
        assert_eq!(k.node_key("it's", Some("")), "(\"it's\", '')");
        assert_eq!(
            k.node_key("both'\"", Some("b\\s")),
            r#"('both\'"', 'b\\s')"#
        );
        assert_eq!(
            k.node_key("t\tn\nx\x01\x7f", None),
            r"('t\tn\nx\x01\x7f', None)"
        );
        assert_eq!(
            k.node_key("é测\u{a0}\u{200b}\u{2028}\u{e000}", None),
            r"('é测\xa0\u200b\u2028\ue000', None)"
        );
        assert_eq!(
            k.node_key("\u{1f600}\u{10ffff}", None),
            "('\u{1f600}\\U0010ffff', None)"
        );
    }

    #[test]
    fn replica_keys() {
        let k = NodeKeys::new();
        assert_eq!(
            k.replica_key(HashType::CarbonCh, "127.0.0.1", Some("a"), 0),
            "('127.0.0.1', 'a'):0"
        );
        assert_eq!(
            k.replica_key(HashType::Mmh3Ch, "10.0.0.1", None, 99),
            "('10.0.0.1', None):99"
        );
        assert_eq!(k.replica_key(HashType::Fnv1aCh, "x", Some("a"), 0), "0-a");
        assert_eq!(k.replica_key(HashType::Fnv1aCh, "x", None, 7), "7-None");
    }
}
