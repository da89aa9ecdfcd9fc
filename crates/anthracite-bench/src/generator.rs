//! The load generator: realistic names, payloads rendered before the clock starts, K
//! connections at maximum or smoothly paced rate.
//!
//! ## Carrying the send time
//!
//! Every datapoint's VALUE is its send instant in microseconds since the run's epoch (the
//! `Instant` shared by generator and sinks). The payload is rendered once with a fixed-width
//! value field; just before each write slice goes out, the sender patches the current instant
//! into the value fields of that slice only (10 ASCII digits in line mode, an 8-byte big-endian
//! `BINFLOAT` in pickle mode). The relay forwards values untouched (carbon keeps them as
//! floats, and integers below 2^53 survive exactly), so a sink computes
//! `latency = receive instant − value`. Timestamps stay realistic (the wall clock at render
//! time), so routing and any timestamp checks in the relay see ordinary traffic.
//!
//! ## Pacing
//!
//! At a set rate each connection runs a token bucket over slices of about one millisecond of
//! data (never one sleep per datapoint): before a slice it sleeps until the bucket holds enough
//! tokens, so the rate is smooth at 1 ms granularity and exact on average.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::BenchError;
use super::scenario::{Names, Protocol};

/// Width of the zero-padded microsecond value field in line mode (about 2.7 hours).
pub const LINE_VALUE_DIGITS: usize = 10;
const GROUPS: [&str; 8] = ["cpu", "mem", "disk", "net", "load", "proc", "io", "fs"];
const LEAVES: [&str; 8] = [
    "user", "system", "idle", "iowait", "read", "write", "free", "used",
];

/// The `i`-th name of the set described by `n`, e.g. `host-0001.cpu.3.user`.
///
/// Distinct `i` give distinct names: `i / 100` picks the host, `i % 100` the metric, and both
/// are encoded in every depth.
pub fn name(n: &Names, i: usize) -> String {
    let host = i / 100;
    let metric = i % 100;
    let group = GROUPS[metric % GROUPS.len()];
    let sub = metric / GROUPS.len();
    let leaf = LEAVES[(metric + sub) % LEAVES.len()];
    let mut s = String::with_capacity(48);
    s.push_str(&n.prefix);
    s.push_str(&format!("host-{host:04}"));
    match n.depth {
        0..=2 => s.push_str(&format!(".{group}_{sub}")),
        3 => s.push_str(&format!(".{group}.{sub}")),
        d => {
            s.push_str(&format!(".{group}.{sub}"));
            for level in 4..d {
                s.push_str(&format!(".l{level}"));
            }
            s.push('.');
            s.push_str(leaf);
        }
    }
    if s.len() < n.min_length {
        s.push('_');
        while s.len() < n.min_length {
            s.push('x');
        }
    }
    for tag in &n.tags {
        s.push(';');
        s.push_str(tag);
    }
    s
}

/// One write slice of a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Byte range in [`Payload::bytes`].
    pub start: usize,
    /// End of the byte range (exclusive).
    pub end: usize,
    /// Index of the slice's first datapoint in [`Payload::value_offsets`].
    pub first_point: usize,
    /// Datapoints in the slice.
    pub points: usize,
}

/// A connection's pre-rendered traffic.
#[derive(Clone, Debug)]
pub struct Payload {
    /// Wire bytes, ready to write.
    pub bytes: Vec<u8>,
    /// Write slices, in order; each is whole lines or one whole pickle frame.
    pub chunks: Vec<Chunk>,
    /// Byte offset of every datapoint's value field.
    pub value_offsets: Vec<usize>,
    /// Wire protocol.
    pub protocol: Protocol,
}

impl Payload {
    /// Datapoints in one pass over the payload.
    pub fn datapoints(&self) -> u64 {
        self.value_offsets.len() as u64
    }

    /// Writes `micros` into the value field of every datapoint of `chunk`.
    #[inline]
    pub fn stamp(&mut self, chunk: Chunk, micros: u64) {
        let offsets = &self.value_offsets[chunk.first_point..chunk.first_point + chunk.points];
        match self.protocol {
            Protocol::Line => {
                let mut digits = [b'0'; LINE_VALUE_DIGITS];
                let mut v = micros;
                for d in digits.iter_mut().rev() {
                    *d = b'0' + (v % 10) as u8;
                    v /= 10;
                }
                for &o in offsets {
                    self.bytes[o..o + LINE_VALUE_DIGITS].copy_from_slice(&digits);
                }
            }
            Protocol::Pickle => {
                let be = (micros as f64).to_be_bytes();
                for &o in offsets {
                    self.bytes[o..o + 8].copy_from_slice(&be);
                }
            }
        }
    }
}

/// Which name a connection's `j`-th datapoint carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameOrder {
    /// This connection (0-based).
    pub conn: usize,
    /// All connections.
    pub conns: usize,
    /// Every connection cycles through all names (see [`NameOrder::index`]).
    pub shared: bool,
}

impl NameOrder {
    /// Connection `conn` of `conns`, names partitioned between connections.
    pub fn partitioned(conn: usize, conns: usize) -> Self {
        Self {
            conn,
            conns,
            shared: false,
        }
    }

    /// Index of the name of datapoint `j` among `count` names. Partitioned: `(j × conns +
    /// conn) mod count`, so each name belongs to one connection (a fleet of hosts, each
    /// sending its own metrics) and together they cycle through every name. Shared: `(j + conn
    /// × count / conns) mod count`, every connection walks all names from its own offset (relays
    /// upstream spreading all names over their connections), so a name arrives on many
    /// connections.
    #[inline]
    pub fn index(&self, j: usize, count: usize) -> usize {
        let count = count.max(1);
        if self.shared {
            (j + self.conn * (count / self.conns.max(1))) % count
        } else {
            (j * self.conns + self.conn) % count
        }
    }
}

/// Renders `points` datapoints for one connection, names in `order` (see
/// [`NameOrder::index`]). `chunk_points` datapoints per write slice (per pickle frame).
pub fn render(
    names: &[String],
    order: NameOrder,
    points: u64,
    protocol: Protocol,
    chunk_points: usize,
    timestamp: u64,
) -> Payload {
    let points = points as usize;
    let chunk_points = chunk_points.max(1);
    let avg = names.first().map_or(16, |n| n.len()) + 32;
    let mut p = Payload {
        bytes: Vec::with_capacity(points * avg),
        chunks: Vec::with_capacity(points / chunk_points + 1),
        value_offsets: Vec::with_capacity(points),
        protocol,
    };
    let ts = format!(" {timestamp}\n");
    let mut j = 0;
    while j < points {
        let n = chunk_points.min(points - j);
        let start = p.bytes.len();
        let first_point = p.value_offsets.len();
        if protocol == Protocol::Pickle {
            p.bytes.extend_from_slice(&[0; 4]);
            p.bytes.extend_from_slice(b"\x80\x02]q\x00(");
        }
        for k in j..j + n {
            let name = names[order.index(k, names.len())].as_bytes();
            match protocol {
                Protocol::Line => {
                    p.bytes.extend_from_slice(name);
                    p.bytes.push(b' ');
                    p.value_offsets.push(p.bytes.len());
                    p.bytes.extend_from_slice(&[b'0'; LINE_VALUE_DIGITS]);
                    p.bytes.extend_from_slice(ts.as_bytes());
                }
                Protocol::Pickle => {
                    // (name, (timestamp, value)) as BINUNICODE, BINFLOAT, BINFLOAT, TUPLE2, TUPLE2.
                    p.bytes.push(b'X');
                    p.bytes
                        .extend_from_slice(&(name.len() as u32).to_le_bytes());
                    p.bytes.extend_from_slice(name);
                    p.bytes.push(b'G');
                    p.bytes.extend_from_slice(&(timestamp as f64).to_be_bytes());
                    p.bytes.push(b'G');
                    p.value_offsets.push(p.bytes.len());
                    p.bytes.extend_from_slice(&0f64.to_be_bytes());
                    p.bytes.extend_from_slice(b"\x86\x86");
                }
            }
        }
        if protocol == Protocol::Pickle {
            p.bytes.extend_from_slice(b"e.");
            let len = (p.bytes.len() - start - 4) as u32;
            p.bytes[start..start + 4].copy_from_slice(&len.to_be_bytes());
        }
        p.chunks.push(Chunk {
            start,
            end: p.bytes.len(),
            first_point,
            points: n,
        });
        j += n;
    }
    p
}

/// How one connection sends.
#[derive(Clone, Copy, Debug)]
pub struct SendPlan {
    /// Stop after this many passes over the payload (count mode: 1).
    pub passes: Option<u64>,
    /// Stop at this instant (duration mode, and the hard cap in count mode).
    pub deadline: Instant,
    /// Datapoints/s for this connection; 0 = as fast as possible.
    pub rate: f64,
}

/// Counters one sender shares with the sampler.
#[derive(Debug, Default)]
pub struct SendCounters {
    /// Datapoints fully written so far.
    pub sent: AtomicU64,
    /// Bytes fully written so far.
    pub bytes: AtomicU64,
    /// Microseconds since the epoch of the first write (u64::MAX until then).
    pub first_send_us: AtomicU64,
    /// Microseconds since the epoch when the last write completed.
    pub last_send_us: AtomicU64,
}

impl SendCounters {
    /// Fresh counters.
    pub fn new() -> Self {
        Self {
            first_send_us: AtomicU64::new(u64::MAX),
            ..Default::default()
        }
    }
}

/// Microseconds from `epoch` to now.
#[inline]
pub fn micros_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_micros() as u64
}

/// Sends `payload` on `stream` according to `plan`, stamping send times relative to `epoch`.
/// Returns the payload (for reuse) and the datapoints written.
pub async fn send(
    mut stream: TcpStream,
    mut payload: Payload,
    plan: SendPlan,
    epoch: Instant,
    counters: Arc<SendCounters>,
) -> Result<(Payload, u64), BenchError> {
    let _ = stream.set_nodelay(true);
    let mut sent: u64 = 0;
    let mut passes = 0;
    let started = Instant::now();
    // One slice of burst so the first slice never waits.
    let burst = payload.chunks.first().map_or(1, |c| c.points) as f64;
    counters
        .first_send_us
        .fetch_min(micros_since(epoch), Ordering::Relaxed);
    'outer: loop {
        if plan.passes.is_some_and(|p| passes >= p) || payload.chunks.is_empty() {
            break;
        }
        for i in 0..payload.chunks.len() {
            let chunk = payload.chunks[i];
            let now = Instant::now();
            if now >= plan.deadline {
                break 'outer;
            }
            if plan.rate > 0.0 {
                let due = (sent as f64 + chunk.points as f64 - burst).max(0.0) / plan.rate;
                let at = started + Duration::from_secs_f64(due);
                if at > now {
                    tokio::time::sleep_until(at.min(plan.deadline).into()).await;
                    if Instant::now() >= plan.deadline {
                        break 'outer;
                    }
                }
            }
            payload.stamp(chunk, micros_since(epoch));
            if let Err(source) = stream
                .write_all(&payload.bytes[chunk.start..chunk.end])
                .await
            {
                counters
                    .last_send_us
                    .fetch_max(micros_since(epoch), Ordering::Relaxed);
                return Err(BenchError::Io {
                    context: "generator write".into(),
                    source,
                });
            }
            sent += chunk.points as u64;
            counters
                .sent
                .fetch_add(chunk.points as u64, Ordering::Relaxed);
            counters
                .bytes
                .fetch_add((chunk.end - chunk.start) as u64, Ordering::Relaxed);
        }
        passes += 1;
    }
    let _ = stream.flush().await;
    let _ = stream.shutdown().await;
    counters
        .last_send_us
        .fetch_max(micros_since(epoch), Ordering::Relaxed);
    Ok((payload, sent))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(count: usize, depth: usize) -> Vec<String> {
        let n = Names {
            count,
            depth,
            ..Names::default()
        };
        (0..count).map(|i| name(&n, i)).collect()
    }

    #[test]
    fn names_look_real_and_are_distinct() {
        let v = names(1000, 4);
        assert_eq!(v[1], "host-0000.mem.0.system");
        assert_eq!(v[203], "host-0002.net.0.iowait");
        let set: std::collections::HashSet<_> = v.iter().collect();
        assert_eq!(set.len(), 1000);
        for d in 2..8 {
            let v = names(500, d);
            assert!(v.iter().all(|s| s.split('.').count() == d), "depth {d}");
            assert_eq!(
                v.iter().collect::<std::collections::HashSet<_>>().len(),
                500
            );
        }
        let tagged = Names {
            tags: vec!["dc=x".into()],
            min_length: 30,
            prefix: "servers.".into(),
            ..Names::default()
        };
        let s = name(&tagged, 7);
        assert!(s.starts_with("servers.host-0000.") && s.ends_with(";dc=x"));
        assert!(s.len() >= 30 + 5);
    }

    #[test]
    fn line_payload_counts_exactly_and_stamps_values() {
        let v = names(10, 4);
        let mut p = render(
            &v,
            NameOrder::partitioned(1, 3),
            1001,
            Protocol::Line,
            100,
            1_700_000_000,
        );
        assert_eq!(p.datapoints(), 1001);
        assert_eq!(p.chunks.len(), 11);
        assert_eq!(memchr::memchr_iter(b'\n', &p.bytes).count(), 1001);
        let c = p.chunks[10];
        assert_eq!(c.points, 1);
        p.stamp(c, 42);
        let last = std::str::from_utf8(&p.bytes[c.start..c.end]).unwrap();
        assert_eq!(
            last,
            format!("{} 0000000042 1700000000\n", v[(1000 * 3 + 1) % 10])
        );
        let per_chunk: usize = p.chunks.iter().map(|c| c.points).sum();
        assert_eq!(per_chunk, 1001);
    }

    #[test]
    fn shared_order_walks_every_name_from_each_connections_offset() {
        let shared = |conn| NameOrder {
            conn,
            conns: 4,
            shared: true,
        };
        let seen: Vec<usize> = (0..10).map(|j| shared(1).index(j, 10)).collect();
        assert_eq!(seen, [2, 3, 4, 5, 6, 7, 8, 9, 0, 1]);
        // Partitioned: connection 1 of 4 owns names 1, 5, 9, …
        let part: Vec<usize> = (0..3)
            .map(|j| NameOrder::partitioned(1, 4).index(j, 100))
            .collect();
        assert_eq!(part, [1, 5, 9]);
    }

    #[test]
    fn pickle_payload_frames_are_exact() {
        let v = names(10, 4);
        let p = render(
            &v,
            NameOrder::partitioned(0, 1),
            1234,
            Protocol::Pickle,
            500,
            1_700_000_000,
        );
        let mut at = 0;
        let mut frames = 0;
        while at < p.bytes.len() {
            let len = u32::from_be_bytes(p.bytes[at..at + 4].try_into().unwrap()) as usize;
            at += 4 + len;
            frames += 1;
        }
        assert_eq!(at, p.bytes.len());
        assert_eq!(frames, 3);
        assert_eq!(p.datapoints(), 1234);
    }
}
