//! carbon-c-relay's consistent-hashing clusters (`consistent-hash.c` of 3.7.3).
//!
//! - `carbon_ch`: 100 positions per member, the first two bytes of the MD5 of Python's tuple
//!   text `('<host>', '<instance>'):<i>` (`None` without an instance) — carbon's own ring —
//!   sorted by position, equal positions by host, then instance (a member without one last);
//!   a name's position is the first two bytes of its MD5.
//! - `fnv1a_ch`: 100 positions per member, the 32-bit FNV-1a of `<i>-<host>:<port>` (or
//!   `<i>-<instance>`) folded to 16 bits (`(h >> 16) ^ (h & 0xffff)`), equal positions sorted
//!   by host, then port; a name's position is the same hash of the name.
//! - `jump_fnv1a_ch`: Lamping and Veach's jump hash of the 64-bit FNV-1a of the name over the
//!   members ordered by instance (numerically where both parse as numbers; members without
//!   an instance after those with one, in file order); each further replica takes the jump
//!   hash of an xorshift of the hash over the members not yet chosen, the chosen one replaced
//!   by the last.
//!
//! The ring is sorted with glibc's `qsort`, a merge sort (stable) for rings this small; equal
//! positions then all point to the first entry's member. Lookup is carbon-c-relay's binary
//! search for the first position ≥ the name's, wrapping past the end, then a walk collecting
//! `replication` distinct members.
//!
//! FNV-1a reads the name as C `char`s: a byte ≥ 0x80 is sign-extended before it is mixed in.

use md5::{Digest, Md5};

use super::Server;

/// Replicas per member of the two rings (carbon's `HASH_REPLICAS`).
const HASH_REPLICAS: usize = 100;

/// The ring's hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChHash {
    Carbon,
    Fnv1a,
    JumpFnv1a,
}

impl ChHash {
    /// carbon-c-relay's cluster-type word (without `_ch`).
    pub(crate) fn word(self) -> &'static str {
        match self {
            ChHash::Carbon => "carbon",
            ChHash::Fnv1a => "fnv1a",
            ChHash::JumpFnv1a => "jump_fnv1a",
        }
    }
}

/// One ring entry: position and server index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    pos: u16,
    server: u16,
}

/// A cluster's ring.
#[derive(Clone, Debug)]
pub(crate) struct Ring {
    hash: ChHash,
    entries: Vec<Entry>,
}

/// 32-bit FNV-1a over C `char`s.
pub(crate) fn fnv1a_32(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 2_166_136_261;
    for &b in bytes {
        hash = (hash ^ (b as i8 as i32 as u32)).wrapping_mul(16_777_619);
    }
    hash
}

/// 64-bit FNV-1a over C `char`s.
pub(crate) fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 14_695_981_039_346_656_037;
    for &b in bytes {
        hash = (hash ^ (b as i8 as i64 as u64)).wrapping_mul(1_099_511_628_211);
    }
    hash
}

fn carbon_hashpos(key: &[u8]) -> u16 {
    let md5 = Md5::digest(key);
    (u16::from(md5[0]) << 8) + u16::from(md5[1])
}

fn fnv1a_hashpos(key: &[u8]) -> u16 {
    let hash = fnv1a_32(key);
    ((hash >> 16) ^ (hash & 0xFFFF)) as u16
}

/// Lamping and Veach's jump consistent hash, with carbon-c-relay's floating point.
fn jump_bucketpos(mut key: u64, buckets: usize) -> usize {
    let mut b: i64 = -1;
    let mut j: i64 = 0;
    while j < buckets as i64 {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1i64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b.max(0) as usize
}

/// C's `strtol(s, &end, 10)` with `*end == '\0'`: the value when the whole text is a number.
pub(crate) fn strtol_whole(s: &str) -> Option<i64> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        // strtol also accepts the empty remainder of "" only with no digits: then end points
        // at the start, which is '\0' for an empty string.
        return s.is_empty().then_some(0);
    }
    let mut v: i64 = 0;
    for d in digits.bytes() {
        v = v.saturating_mul(10).saturating_add(i64::from(d - b'0'));
    }
    Some(if neg { v.saturating_neg() } else { v })
}

/// glibc's merge sort (`msort_with_tmp`): halves sorted recursively, merged taking the left
/// element while `cmp(left, right) <= 0`.
fn msort<T: Copy>(b: &mut [T], cmp: &impl Fn(&T, &T) -> i32) {
    let n = b.len();
    if n <= 1 {
        return;
    }
    let n1 = n / 2;
    msort(&mut b[..n1], cmp);
    msort(&mut b[n1..], cmp);
    let mut merged = Vec::with_capacity(n);
    let (mut i, mut j) = (0, n1);
    while i < n1 && j < n {
        if cmp(&b[i], &b[j]) <= 0 {
            merged.push(b[i]);
            i += 1;
        } else {
            merged.push(b[j]);
            j += 1;
        }
    }
    merged.extend_from_slice(&b[i..n1]);
    merged.extend_from_slice(&b[j..n]);
    b.copy_from_slice(&merged);
}

/// C's `strcmp` sign.
fn strcmp(a: &str, b: &str) -> i32 {
    match a.as_bytes().cmp(b.as_bytes()) {
        std::cmp::Ordering::Less => -1,
        std::cmp::Ordering::Equal => 0,
        std::cmp::Ordering::Greater => 1,
    }
}

impl Ring {
    /// Builds the ring of `members` (server indices in configuration order).
    pub(crate) fn new(hash: ChHash, members: &[u16], servers: &[Server]) -> Self {
        let server = |i: u16| &servers[usize::from(i)];
        let mut entries = Vec::new();
        for (n, &m) in members.iter().enumerate() {
            let s = server(m);
            match hash {
                ChHash::Carbon => {
                    for i in 0..HASH_REPLICAS {
                        let key = match &s.instance {
                            Some(inst) => format!("('{}', '{inst}'):{i}", s.ip),
                            None => format!("('{}', None):{i}", s.ip),
                        };
                        entries.push(Entry {
                            pos: carbon_hashpos(truncate_256(key.as_bytes())),
                            server: m,
                        });
                    }
                }
                ChHash::Fnv1a => {
                    for i in 0..HASH_REPLICAS {
                        let key = match &s.instance {
                            Some(inst) => format!("{i}-{inst}"),
                            None => format!("{i}-{}:{}", s.ip, s.port),
                        };
                        entries.push(Entry {
                            pos: fnv1a_hashpos(truncate_256(key.as_bytes())),
                            server: m,
                        });
                    }
                }
                ChHash::JumpFnv1a => entries.push(Entry {
                    pos: n as u16,
                    server: m,
                }),
            }
        }
        match hash {
            ChHash::Carbon => msort(&mut entries, &|l: &Entry, r: &Entry| {
                if l.pos != r.pos {
                    return i32::from(l.pos) - i32::from(r.pos);
                }
                let (sl, sr) = (server(l.server), server(r.server));
                let d = strcmp(&sl.ip, &sr.ip);
                if d != 0 {
                    return d;
                }
                match (&sl.instance, &sr.instance) {
                    (None, None) => 0,
                    (None, Some(_)) => 1,
                    (Some(_), None) => -1,
                    (Some(a), Some(b)) => strcmp(a, b),
                }
            }),
            ChHash::Fnv1a => msort(&mut entries, &|l: &Entry, r: &Entry| {
                if l.pos != r.pos {
                    return i32::from(l.pos) - i32::from(r.pos);
                }
                let (sl, sr) = (server(l.server), server(r.server));
                let d = strcmp(&sl.ip, &sr.ip);
                if d != 0 {
                    return d;
                }
                i32::from(sl.port) - i32::from(sr.port)
            }),
            ChHash::JumpFnv1a => msort(&mut entries, &|l: &Entry, r: &Entry| {
                let (sl, sr) = (server(l.server), server(r.server));
                match (&sl.instance, &sr.instance) {
                    (None, None) => i32::from(l.pos) - i32::from(r.pos),
                    (None, Some(_)) => 1,
                    (Some(_), None) => -1,
                    (Some(a), Some(b)) => match (strtol_whole(a), strtol_whole(b)) {
                        (Some(x), Some(y)) => x.wrapping_sub(y) as i32,
                        _ => strcmp(a, b),
                    },
                }
            }),
        }
        if hash != ChHash::JumpFnv1a {
            for i in 1..entries.len() {
                if entries[i].pos == entries[i - 1].pos {
                    entries[i].server = entries[i - 1].server;
                }
            }
        }
        Self { hash, entries }
    }

    /// The ring's hash.
    pub(crate) fn hash(&self) -> ChHash {
        self.hash
    }

    /// `ch_gethashpos`: the name's position (jump: its bucket).
    pub(crate) fn hash_pos(&self, key: &[u8]) -> u32 {
        match self.hash {
            ChHash::Carbon => u32::from(carbon_hashpos(key)),
            ChHash::Fnv1a => u32::from(fnv1a_hashpos(key)),
            ChHash::JumpFnv1a => jump_bucketpos(fnv1a_64(key), self.entries.len()) as u32,
        }
    }

    /// `ch_get_nodes`: the `replication` members for `key`, appended to `out`.
    pub(crate) fn nodes(&self, key: &[u8], replication: usize, out: &mut Vec<u16>) {
        let n = self.entries.len();
        if n == 0 || replication == 0 {
            return;
        }
        if self.hash == ChHash::JumpFnv1a {
            let mut buckets: Vec<u16> = self.entries.iter().map(|e| e.server).collect();
            let mut hash = fnv1a_64(key);
            let mut left = replication;
            let mut i = buckets.len();
            while i > 0 {
                let j = jump_bucketpos(hash, i);
                out.push(buckets[j]);
                left -= 1;
                if left == 0 {
                    break;
                }
                hash ^= hash >> 12;
                hash ^= hash << 25;
                hash ^= hash >> 27;
                hash = hash.wrapping_mul(2_685_821_657_736_338_717);
                i -= 1;
                buckets[j] = buckets[i];
            }
            return;
        }
        let pos = match self.hash {
            ChHash::Carbon => carbon_hashpos(key),
            _ => fnv1a_hashpos(key),
        };
        let start = self.search(pos);
        let distinct = {
            let mut seen: Vec<u16> = self.entries.iter().map(|e| e.server).collect();
            seen.sort_unstable();
            seen.dedup();
            seen.len()
        };
        let first = out.len();
        let mut t = start;
        // carbon-c-relay refuses a replication larger than the members; equal addresses
        // listed twice are one member, so stop at the distinct ones (it would spin).
        while out.len() - first < replication.min(distinct) {
            if t >= n {
                t = 0;
            }
            let s = self.entries[t].server;
            if !out[first..].contains(&s) {
                out.push(s);
            }
            t += 1;
        }
    }

    /// carbon-c-relay's binary search for the first entry at or past `pos` (an index past
    /// the end wraps to the start).
    fn search(&self, pos: u16) -> usize {
        let e = &self.entries;
        let n = e.len();
        let (mut i, mut j) = (0usize, n);
        loop {
            let t = (i + j) / 2;
            if e[t].pos == pos {
                return t;
            }
            if e[t].pos < pos {
                i = t;
                if i + 1 == j {
                    // `entrylist[j]` may be one past the end: either way the walk wraps.
                    return match e.get(j) {
                        Some(r) if r.pos >= pos => j,
                        _ => n,
                    };
                }
            } else {
                j = t;
                if i + 1 == j {
                    return if e[i].pos >= pos { i } else { j };
                }
            }
        }
    }

    /// `ch_printhashring`: three entries per line.
    pub(crate) fn print(&self, servers: &[Server], out: &mut String) {
        use std::fmt::Write;
        let mut column = 0;
        for e in &self.entries {
            let s = &servers[usize::from(e.server)];
            let mut srv = format!(
                "{}:{}{}{}",
                s.ip,
                s.port,
                if s.instance.is_some() { "=" } else { "" },
                s.instance.as_deref().unwrap_or("")
            );
            // snprintf into 21 bytes.
            truncate_string(&mut srv, 20);
            let _ = write!(out, "{:5}@{:<20}", e.pos, srv);
            if column < 2 {
                out.push(' ');
                column += 1;
            } else {
                out.push('\n');
                column = 0;
            }
        }
        if column != 0 {
            out.push('\n');
        }
    }
}

/// The key as carbon-c-relay's 256-byte buffer holds it.
fn truncate_256(key: &[u8]) -> &[u8] {
    &key[..key.len().min(255)]
}

fn truncate_string(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::c_relay::{ServerProto, ServerTransport};

    fn server(ip: &str, port: u16, instance: Option<&str>) -> Server {
        Server {
            ip: ip.into(),
            port,
            instance: instance.map(Into::into),
            proto: ServerProto::Tcp,
            syslog: false,
            transport: ServerTransport::default(),
        }
    }

    #[test]
    fn fnv1a_sign_extends_high_bytes() {
        // 0xff mixed in as 0xffffffff (a C `char`), not 0xff.
        let unsigned = (2_166_136_261u32 ^ 0xff).wrapping_mul(16_777_619);
        assert_ne!(fnv1a_32(&[0xff]), unsigned);
        assert_eq!(
            fnv1a_32(&[0xff]),
            (2_166_136_261u32 ^ 0xffff_ffff).wrapping_mul(16_777_619)
        );
    }

    #[test]
    fn a_replication_walk_yields_distinct_members() {
        let servers: Vec<Server> = (0..4)
            .map(|i| server("127.0.0.1", 2000 + i, Some(&format!("{i}"))))
            .collect();
        for hash in [ChHash::Carbon, ChHash::Fnv1a, ChHash::JumpFnv1a] {
            let ring = Ring::new(hash, &[0, 1, 2, 3], &servers);
            for name in ["a", "b.c.d", "x.y"] {
                let mut out = Vec::new();
                ring.nodes(name.as_bytes(), 3, &mut out);
                let mut d = out.clone();
                d.sort_unstable();
                d.dedup();
                assert_eq!(d.len(), 3, "{hash:?} {name} {out:?}");
            }
        }
    }

    #[test]
    fn jump_orders_members_by_numeric_instance() {
        let servers = vec![
            server("a", 1, Some("10")),
            server("b", 1, Some("9")),
            server("c", 1, None),
        ];
        let ring = Ring::new(ChHash::JumpFnv1a, &[0, 1, 2], &servers);
        let order: Vec<u16> = ring.entries.iter().map(|e| e.server).collect();
        assert_eq!(order, vec![1, 0, 2]);
    }

    #[test]
    fn the_search_finds_the_first_position_at_or_past_the_key() {
        let servers: Vec<Server> = (0..3).map(|i| server(&format!("h{i}"), 1, None)).collect();
        let ring = Ring::new(ChHash::Carbon, &[0, 1, 2], &servers);
        for pos in [0u16, 1, 1000, 30000, 65535] {
            let want = ring
                .entries
                .iter()
                .position(|e| e.pos >= pos)
                .unwrap_or(ring.entries.len());
            let got = ring.search(pos);
            let normalise = |i: usize| if i >= ring.entries.len() { 0 } else { i };
            assert_eq!(
                ring.entries[normalise(got)].server,
                ring.entries[normalise(want)].server,
                "{pos}"
            );
        }
    }
}
