//! Decoding one connection's bytes (or one datagram's) into datapoints, and the tallies that
//! [`SinkStats`] receives once per read.
//!
//! Two paths over the same framing. A sink that keeps every datapoint, or echoes them, reads
//! each one whole ([`Received`]): a pickle frame as a `serde_pickle::Value` (tolerant of
//! lists for tuples, `bytes` names, numeric strings, big integers), a line's path as text. A
//! sink that only counts decodes into typed, borrowed values (`IgnoredAny` for a name it does
//! not keep), which is what keeps it fast enough for a benchmark. Both agree on what is a
//! datapoint: a line of exactly three fields whose value and timestamp are numbers, a pickle
//! entry `(path, (timestamp, value))` with numeric timestamp and value, a protobuf point.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, Visitor};
use serde_pickle::{DeOptions, Value};

use crate::stats::{SinkStats, Tally};
use crate::{Keep, MAX_FRAME, SinkProtocol};

/// One received datapoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    /// Metric path, as sent.
    pub path: String,
    /// Timestamp as a float (carbon sends floats).
    pub timestamp: f64,
    /// Value.
    pub value: f64,
}

/// Multiset key of a datapoint: path and the bit patterns of timestamp and value (`-0.0`
/// normalized to `0.0`), so equal datapoints compare equal exactly.
pub type Key = (String, u64, u64);

impl Received {
    /// This datapoint's multiset key.
    pub fn key(&self) -> Key {
        (self.path.clone(), bits(self.timestamp), bits(self.value))
    }
}

fn bits(x: f64) -> u64 {
    if x == 0.0 {
        0.0f64.to_bits()
    } else {
        x.to_bits()
    }
}

/// Per-connection decoding state and the tallies not yet flushed to [`SinkStats`].
pub(crate) struct Decoder {
    protocol: SinkProtocol,
    keep: Keep,
    stamping: bool,
    echoing: bool,
    tally: Tally,
    /// Lines to echo, when echoing.
    pub(crate) echo: Vec<u8>,
    /// Set when the stream cannot continue (a frame over [`MAX_FRAME`]).
    pub(crate) fatal: bool,
}

impl Decoder {
    /// A decoder for one connection; `stamping`: values are send instants.
    pub(crate) fn new(protocol: SinkProtocol, keep: Keep, stamping: bool, echoing: bool) -> Self {
        Decoder {
            protocol,
            keep,
            stamping,
            echoing,
            tally: Tally::default(),
            echo: Vec::new(),
            fatal: false,
        }
    }

    /// Whether datapoints are read whole (kept or echoed) rather than counted.
    fn whole(&self) -> bool {
        self.keep == Keep::All || self.echoing
    }

    /// Records an error: counted as a bad line or frame, its reason kept.
    fn bad(&mut self, reason: String) {
        self.tally.bad += 1;
        self.tally.errors.push(reason);
    }

    /// Records a connection-level error (TLS, a partial line at close) without counting a
    /// bad line or frame.
    pub(crate) fn error(&mut self, reason: String) {
        self.tally.errors.push(reason);
    }

    /// Counts `leftover` bytes that never formed a line or frame before the peer closed.
    pub(crate) fn leftover(&mut self, leftover: usize) {
        self.bad(format!("{leftover} bytes left undecoded at close"));
    }

    /// Decodes every complete line or frame at the start of `buf`, received at `now_us`;
    /// returns the bytes consumed.
    pub(crate) fn feed(&mut self, buf: &[u8], now_us: u64) -> usize {
        if self.protocol == SinkProtocol::Auto {
            match buf.first() {
                None => return 0,
                Some(0) => self.protocol = SinkProtocol::Pickle,
                Some(_) => self.protocol = SinkProtocol::Line,
            }
        }
        match self.protocol {
            SinkProtocol::Pickle => self.frames(buf, now_us, Self::pickle_frame),
            SinkProtocol::Protobuf => self.frames(buf, now_us, Self::protobuf_frame),
            _ => self.lines(buf, now_us),
        }
    }

    /// Reads `value` as a send instant, into the latency histogram.
    fn stamp(&mut self, value: f64, now_us: u64) {
        if !self.stamping {
            return;
        }
        if value >= 0.0 && value <= now_us as f64 && value.fract() == 0.0 {
            self.tally.latency.record(now_us - value as u64);
        } else {
            self.tally.unstamped += 1;
        }
    }

    /// One datapoint read whole.
    fn datapoint(&mut self, path: String, timestamp: f64, value: f64, now_us: u64) {
        self.tally.delivered += 1;
        self.stamp(value, now_us);
        if self.echoing {
            self.echo
                .extend_from_slice(format!("{path} {value} {timestamp}\n").as_bytes());
        }
        if self.keep == Keep::All {
            self.tally.received.push(Received {
                path,
                timestamp,
                value,
            });
        }
    }

    fn lines(&mut self, buf: &[u8], now_us: u64) -> usize {
        let mut consumed = 0;
        for end in memchr::memchr_iter(b'\n', buf) {
            let line = &buf[consumed..end];
            consumed = end + 1;
            let mut fields = line
                .split(u8::is_ascii_whitespace)
                .filter(|f| !f.is_empty());
            let (Some(path), Some(value), Some(ts), None) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                self.bad(format!(
                    "not 3 fields: {:?}",
                    String::from_utf8_lossy(line).trim_end()
                ));
                continue;
            };
            let (Some(value), Some(ts)) = (number(value), number(ts)) else {
                self.bad(format!(
                    "bad numbers in line {:?}",
                    String::from_utf8_lossy(line).trim_end()
                ));
                continue;
            };
            if self.whole() {
                if self.echoing {
                    self.echo.extend_from_slice(line.trim_ascii_end());
                    self.echo.push(b'\n');
                }
                self.tally.delivered += 1;
                self.stamp(value, now_us);
                if self.keep == Keep::All {
                    self.tally.received.push(Received {
                        path: String::from_utf8_lossy(path).into_owned(),
                        timestamp: ts,
                        value,
                    });
                }
            } else {
                self.tally.delivered += 1;
                self.stamp(value, now_us);
                if self.keep == Keep::Names {
                    self.tally.names.push(path.to_vec());
                }
            }
        }
        consumed
    }

    /// Calls `each` with every complete length-prefixed frame at the start of `buf`; returns
    /// the bytes consumed.
    fn frames(&mut self, buf: &[u8], now_us: u64, each: fn(&mut Self, &[u8], u64)) -> usize {
        let mut at = 0;
        while let Some(prefix) = buf.get(at..at + 4) {
            let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
            if len > MAX_FRAME {
                self.bad(format!("frame of {len} bytes is over {MAX_FRAME}"));
                self.fatal = true;
                return buf.len();
            }
            let Some(frame) = buf.get(at + 4..at + 4 + len) else {
                break;
            };
            at += 4 + len;
            each(self, frame, now_us);
        }
        at
    }

    fn pickle_frame(&mut self, frame: &[u8], now_us: u64) {
        let opts = DeOptions::new();
        if self.whole() {
            let points = serde_pickle::value_from_slice(frame, opts)
                .map_err(|e| format!("unpickle: {e}"))
                .and_then(datapoints_of);
            match points {
                Ok(points) => {
                    for (path, timestamp, value) in points {
                        self.datapoint(path, timestamp, value, now_us);
                    }
                }
                Err(e) => self.bad(e),
            }
        } else if self.keep == Keep::Names {
            match serde_pickle::from_slice::<Vec<(Name, (Num, Num))>>(frame, opts) {
                Ok(entries) => {
                    self.tally.delivered += entries.len() as u64;
                    for (name, (_, value)) in entries {
                        self.stamp(value.0, now_us);
                        self.tally.names.push(name.0);
                    }
                }
                Err(e) => self.bad(format!("unpickle: {e}")),
            }
        } else {
            match serde_pickle::from_slice::<Vec<(IgnoredAny, (Num, Num))>>(frame, opts) {
                Ok(entries) => {
                    self.tally.delivered += entries.len() as u64;
                    for (_, (_, value)) in entries {
                        self.stamp(value.0, now_us);
                    }
                }
                Err(e) => self.bad(format!("unpickle: {e}")),
            }
        }
    }

    fn protobuf_frame(&mut self, frame: &[u8], now_us: u64) {
        use prost::Message;
        let payload = match crate::proto::Payload::decode(frame) {
            Ok(p) => p,
            Err(e) => return self.bad(format!("protobuf: {e}")),
        };
        for m in payload.metrics {
            if self.whole() {
                for pt in m.points {
                    self.datapoint(m.metric.clone(), f64::from(pt.timestamp), pt.value, now_us);
                }
            } else {
                self.tally.delivered += m.points.len() as u64;
                for pt in &m.points {
                    self.stamp(pt.value, now_us);
                }
                if self.keep == Keep::Names && !m.points.is_empty() {
                    self.tally.names.push(m.metric.into_bytes());
                }
            }
        }
    }

    /// Moves the tallies into `stats` (a few atomics and at most three locks per read) and
    /// returns the errors seen since the last flush.
    pub(crate) fn flush(&mut self, stats: &SinkStats, bytes: u64, now_us: u64) -> Vec<String> {
        stats.absorb(&mut self.tally, bytes, now_us);
        std::mem::take(&mut self.tally.errors)
    }

    /// Datapoints counted and not yet flushed.
    #[cfg(test)]
    fn pending(&self) -> u64 {
        self.tally.delivered
    }
}

/// A plaintext number (`1`, `1.5`, `1e3`, `nan`).
fn number(field: &[u8]) -> Option<f64> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// `(path, timestamp, value)` of every entry of an unpickled frame.
fn datapoints_of(v: Value) -> Result<Vec<(String, f64, f64)>, String> {
    let items = match v {
        Value::List(items) | Value::Tuple(items) => items,
        other => return Err(format!("payload is not a list: {other:?}")),
    };
    items
        .into_iter()
        .map(|item| {
            let (path, dp) = pair(item)?;
            let path = match path {
                Value::String(s) => s,
                Value::Bytes(b) => String::from_utf8_lossy(&b).into_owned(),
                other => return Err(format!("path is not a string: {other:?}")),
            };
            let (ts, val) = pair(dp)?;
            Ok((path, value_number(ts)?, value_number(val)?))
        })
        .collect()
}

fn pair(v: Value) -> Result<(Value, Value), String> {
    match v {
        Value::List(items) | Value::Tuple(items) if items.len() == 2 => {
            let mut items = items.into_iter();
            match (items.next(), items.next()) {
                (Some(a), Some(b)) => Ok((a, b)),
                _ => Err("expected a pair".to_owned()),
            }
        }
        other => Err(format!("expected a pair: {other:?}")),
    }
}

fn value_number(v: Value) -> Result<f64, String> {
    match v {
        Value::F64(x) => Ok(x),
        Value::I64(x) => Ok(x as f64),
        Value::Int(x) => x.to_string().parse().map_err(|e| format!("big int: {e}")),
        Value::String(s) => s
            .trim()
            .parse()
            .map_err(|e| format!("numeric string {s:?}: {e}")),
        other => Err(format!("not a number: {other:?}")),
    }
}

/// A metric name from a pickle entry: Python `str` or `bytes`.
struct Name(Vec<u8>);

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Name;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a metric name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Name, E> {
                Ok(Name(v.as_bytes().to_vec()))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Name, E> {
                Ok(Name(v.to_vec()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A number from a pickle entry: Python `int`, `float` or a numeric `str`.
struct Num(f64);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
                Ok(Num(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Num, E> {
                v.trim()
                    .parse()
                    .map(Num)
                    .map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pickle_frame(points: &[(&str, (f64, f64))]) -> Vec<u8> {
        let body = serde_pickle::to_vec(&points, serde_pickle::SerOptions::new()).unwrap();
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        frame
    }

    #[test]
    fn line_counter_counts_and_keeps_partial_lines() {
        let mut c = Decoder::new(SinkProtocol::Auto, Keep::Names, true, false);
        let data = b"a.b 0000000010 1700000000\nc.d 5 1700000000\npartial 1";
        let used = c.feed(data, 100);
        assert_eq!(used, data.len() - b"partial 1".len());
        assert_eq!(c.pending(), 2);
        assert_eq!(c.tally.latency.count(), 2);
        assert_eq!(c.tally.latency.max(), 95);
        let stats = SinkStats::default();
        c.flush(&stats, used as u64, 100);
        assert_eq!(stats.delivered(), 2);
        assert_eq!(stats.distinct_names(), 2);
    }

    #[test]
    fn oversized_frame_is_fatal() {
        let mut c = Decoder::new(SinkProtocol::Pickle, Keep::Count, false, false);
        let used = c.feed(&[0xff, 0, 0, 0, 1], 0);
        assert_eq!(used, 5);
        assert!(c.fatal);
    }

    /// Counting and keeping agree on what is a datapoint, line by line and frame by frame.
    #[test]
    fn every_keep_counts_the_same_datapoints() {
        let mut lines = b"a 1 1700000000\r\nb 2.5 1700000000\nbad line\nc x 1700000000\n".to_vec();
        lines.extend_from_slice(b"d 4 1700000000 extra\n\te\t5\t1700000000\n");
        let mut frames = pickle_frame(&[("p.a", (1.7e9, 1.0)), ("p.b", (1.7e9, 2.0))]);
        frames.extend_from_slice(&[0, 0, 0, 3, 0x80, 0x02, 0x4e]); // pickled None: not a list
        for keep in [Keep::All, Keep::Count, Keep::Names] {
            let stats = SinkStats::default();
            for (protocol, data) in [
                (SinkProtocol::Line, &lines[..]),
                (SinkProtocol::Pickle, &frames[..]),
            ] {
                let mut c = Decoder::new(protocol, keep, false, false);
                assert_eq!(c.feed(data, 0), data.len(), "{keep:?} {protocol:?}");
                c.flush(&stats, data.len() as u64, 0);
            }
            assert_eq!(stats.delivered(), 5, "{keep:?}");
            assert_eq!(stats.bad(), 4, "{keep:?}");
        }
    }

    #[test]
    fn echo_prints_lines_as_received_and_frames_as_lines() {
        let mut c = Decoder::new(SinkProtocol::Auto, Keep::Count, false, true);
        c.feed(b"a.b  1.50 1700000000 \r\n", 0);
        assert_eq!(c.echo, b"a.b  1.50 1700000000\n");
        let mut c = Decoder::new(SinkProtocol::Auto, Keep::Count, false, true);
        c.feed(&pickle_frame(&[("q.x", (1700000000.0, 42.0))]), 0);
        assert_eq!(String::from_utf8_lossy(&c.echo), "q.x 42 1700000000\n");
    }
}
