//! carbon's protobuf protocol (`carbon/carbon.proto`, carbon 1.1's `protobuf` receiver and
//! client plugins): a zero-copy decoder and the encoder used towards carbon-cache.
//!
//! ```proto
//! syntax = "proto3";
//! package carbon;
//! message Point { uint32 timestamp = 1; double value = 2; }
//! message Metric { string metric = 1; repeated Point points = 2; }
//! message Payload { repeated Metric metrics = 1; }
//! ```
//!
//! On the wire a message is a 4-byte big-endian length followed by one serialized `Payload`
//! (Twisted's `Int32StringReceiver`, as for pickle). Both directions are written by hand
//! against the wire format (three small messages), so the relay core needs no protobuf runtime
//! or code generator; the tests check both against `prost` and against carbon's own
//! `carbon_pb2`. The encoder writes exactly what prost would (proto3: fields at their default
//! value are omitted).
//!
//! # The decoder
//!
//! [`ProtobufDecoder::decode`] walks the wire format itself instead of building prost's owned
//! structs, so decoding costs no allocation per metric or point (names are spans of the frame)
//! and hostile input cannot amplify memory: the only growth is one 24-byte entry per point,
//! and a point takes at least two bytes of the frame. Like carbon's `Payload.FromString`, the
//! whole frame is parsed before anything is emitted: truncation, an over-long varint, field
//! number 0 or an unbalanced group rejects the frame (`bad_protobuf`). As in every protobuf
//! runtime, unknown fields, and known fields with an unexpected wire type, are skipped, and
//! the last occurrence of a scalar field wins. A metric whose name is not valid UTF-8 drops its
//! points (counted as `bad_utf8`, one per point) and the rest of the frame is kept: carbon's
//! Python runtime raises on such a name and loses the frame (and the connection).

use bytes::{BufMut, BytesMut};

use super::{DropCounts, DropReason};
use crate::batch::Datapoint;

/// Carbon's protobuf receiver limit (`MetricProtobufReceiver.MAX_LENGTH`, 1 MiB).
pub(crate) const DEFAULT_MAX_FRAME: usize = 1 << 20;

/// Deepest nesting of unknown groups skipped inside one message.
const MAX_GROUP_DEPTH: usize = 32;

const BAD: DropReason = DropReason::BadProtobuf;

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const START_GROUP: u8 = 3;
const END_GROUP: u8 = 4;
const FIXED32: u8 = 5;

/// One decoded point, its name a span of the frame.
#[derive(Clone, Copy, Debug)]
struct Entry {
    name_start: u32,
    name_len: u32,
    timestamp: u32,
    value: f64,
}

/// A reusable, allocation-free (once warm) decoder of carbon's protobuf `Payload`.
#[derive(Debug, Default)]
pub struct ProtobufDecoder {
    entries: Vec<Entry>,
}

/// A cursor over one message's bytes; positions are offsets into the whole frame.
struct Reader<'a> {
    frame: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Reader<'a> {
    /// A cursor over `frame[pos..end]`.
    fn new(frame: &'a [u8], pos: usize, end: usize) -> Self {
        Self { frame, pos, end }
    }

    fn done(&self) -> bool {
        self.pos >= self.end
    }

    fn byte(&mut self) -> Result<u8, DropReason> {
        if self.pos >= self.end {
            return Err(BAD);
        }
        let b = self.frame[self.pos];
        self.pos += 1;
        Ok(b)
    }

    /// A base-128 varint of at most ten bytes (bits past 64 are ignored, as protobuf does).
    fn varint(&mut self) -> Result<u64, DropReason> {
        let mut value = 0u64;
        for i in 0..10 {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(BAD)
    }

    /// `(field number, wire type)`.
    fn key(&mut self) -> Result<(u32, u8), DropReason> {
        let key = self.varint()?;
        let field = u32::try_from(key >> 3).map_err(|_| BAD)?;
        if field == 0 {
            return Err(BAD);
        }
        Ok((field, (key & 7) as u8))
    }

    /// The span of a length-delimited field's body; the cursor moves past it.
    fn body(&mut self) -> Result<(usize, usize), DropReason> {
        let len = usize::try_from(self.varint()?).map_err(|_| BAD)?;
        let start = self.pos;
        let end = start
            .checked_add(len)
            .filter(|&e| e <= self.end)
            .ok_or(BAD)?;
        self.pos = end;
        Ok((start, end))
    }

    fn advance(&mut self, n: usize) -> Result<(), DropReason> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.end)
            .ok_or(BAD)?;
        self.pos = end;
        Ok(())
    }

    fn fixed64(&mut self) -> Result<u64, DropReason> {
        let start = self.pos;
        self.advance(8)?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.frame[start..start + 8]);
        Ok(u64::from_le_bytes(b))
    }

    /// Skips the value of a field the decoder does not use.
    fn skip(&mut self, field: u32, wire_type: u8) -> Result<(), DropReason> {
        match wire_type {
            VARINT => self.varint().map(drop),
            FIXED64 => self.advance(8),
            LEN => self.body().map(drop),
            FIXED32 => self.advance(4),
            START_GROUP => self.skip_group(field),
            _ => Err(BAD),
        }
    }

    /// Skips to the end-group key matching `field`, through nested groups.
    fn skip_group(&mut self, field: u32) -> Result<(), DropReason> {
        let mut open = [0u32; MAX_GROUP_DEPTH];
        open[0] = field;
        let mut depth = 1;
        while depth > 0 {
            let (f, wt) = self.key()?;
            match wt {
                START_GROUP => {
                    *open.get_mut(depth).ok_or(BAD)? = f;
                    depth += 1;
                }
                END_GROUP => {
                    depth -= 1;
                    if open[depth] != f {
                        return Err(BAD);
                    }
                }
                VARINT => self.varint().map(drop)?,
                FIXED64 => self.advance(8)?,
                LEN => self.body().map(drop)?,
                FIXED32 => self.advance(4)?,
                _ => return Err(BAD),
            }
        }
        Ok(())
    }
}

impl ProtobufDecoder {
    /// A new decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one frame payload (length prefix already removed). A frame that does not parse
    /// is rejected whole (`Err(BadProtobuf)`); otherwise each point is passed to
    /// `emit(name, timestamp, value)` and the points of a metric whose name is not UTF-8 are
    /// counted in `drops` (`BadUtf8`). Returns the number of points emitted.
    pub fn decode(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        mut emit: impl FnMut(&[u8], f64, f64),
    ) -> Result<usize, DropReason> {
        let result = self.parse_frame(payload, drops).map(|()| {
            self.emit(payload, |run| {
                run.iter().for_each(|&(name, t, v)| emit(name, t, v))
            })
        });
        self.release_oversized();
        result
    }

    /// Parses a frame payload without handing anything over ([`decoded_bytes`] and [`emit`]
    /// then read the result); points of a metric whose name is not UTF-8 are counted in
    /// `drops`. `Err` rejects the whole frame.
    ///
    /// [`decoded_bytes`]: Self::decoded_bytes
    /// [`emit`]: Self::emit
    pub fn parse_frame(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
    ) -> Result<(), DropReason> {
        self.entries.clear();
        if payload.len() > (u32::MAX / 2) as usize {
            return Err(BAD);
        }
        let result = self.parse(payload, drops);
        if result.is_err() {
            self.entries.clear();
        }
        result
    }

    /// What the parsed frame turns into once decoded: each point's name bytes plus
    /// [`DECODED_POINT_BYTES`](super::pickle::DECODED_POINT_BYTES). One name may carry any
    /// number of points, so this is not bounded by the payload's size.
    pub fn decoded_bytes(&self) -> usize {
        self.entries
            .iter()
            .map(|e| e.name_len as usize + super::pickle::DECODED_POINT_BYTES)
            .sum()
    }

    /// Hands the parsed frame's points to `on_run` in runs of up to
    /// [`ENTRY_RUN`](super::pickle::ENTRY_RUN), in order. Returns the points emitted.
    pub fn emit(&self, payload: &[u8], mut on_run: impl FnMut(&[(&[u8], f64, f64)])) -> usize {
        const RUN: usize = super::pickle::ENTRY_RUN;
        let mut run: [super::Point<'_>; RUN] = [(&[], 0.0, 0.0); RUN];
        for chunk in self.entries.chunks(RUN) {
            for (slot, e) in run.iter_mut().zip(chunk) {
                let start = e.name_start as usize;
                let name = payload
                    .get(start..start + e.name_len as usize)
                    .unwrap_or_default();
                *slot = (name, f64::from(e.timestamp), e.value);
            }
            on_run(&run[..chunk.len()]);
        }
        self.entries.len()
    }

    /// Gives back scratch space over the keep limit once a frame is done with.
    pub fn finish_frame(&mut self) {
        self.release_oversized();
    }

    /// Bytes of scratch space the decoder holds between frames.
    pub fn scratch_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
    }

    /// After a large or hostile frame, do not keep its scratch for the connection's life: at
    /// most [`DECODER_KEEP_BYTES`](super::pickle::DECODER_KEEP_BYTES) stay between frames.
    fn release_oversized(&mut self) {
        if self.scratch_bytes() > super::pickle::DECODER_KEEP_BYTES {
            self.entries = Vec::new();
        }
    }

    fn parse(&mut self, frame: &[u8], drops: &mut DropCounts) -> Result<(), DropReason> {
        // Drops are counted only once the whole frame parsed (a rejected frame counts once).
        let mut bad_names = 0u64;
        let mut r = Reader::new(frame, 0, frame.len());
        while !r.done() {
            match r.key()? {
                (1, LEN) => {
                    let (start, end) = r.body()?;
                    bad_names += self.metric(frame, start, end)?;
                }
                (field, wire_type) => r.skip(field, wire_type)?,
            }
        }
        for _ in 0..bad_names {
            drops.add(DropReason::BadUtf8);
        }
        Ok(())
    }

    /// Parses one `Metric` into `entries`; returns how many points were dropped for a name
    /// that is not UTF-8.
    fn metric(&mut self, frame: &[u8], start: usize, end: usize) -> Result<u64, DropReason> {
        let first = self.entries.len();
        let mut name = (start, 0usize);
        let mut r = Reader::new(frame, start, end);
        while !r.done() {
            match r.key()? {
                (1, LEN) => {
                    let (s, e) = r.body()?;
                    name = (s, e - s);
                }
                (2, LEN) => {
                    let (s, e) = r.body()?;
                    let point = Self::point(frame, s, e)?;
                    self.entries.push(point);
                }
                (field, wire_type) => r.skip(field, wire_type)?,
            }
        }
        let (name_start, name_len) = name;
        if std::str::from_utf8(&frame[name_start..name_start + name_len]).is_err() {
            let dropped = (self.entries.len() - first) as u64;
            self.entries.truncate(first);
            return Ok(dropped);
        }
        for e in &mut self.entries[first..] {
            e.name_start = name_start as u32;
            e.name_len = name_len as u32;
        }
        Ok(0)
    }

    fn point(frame: &[u8], start: usize, end: usize) -> Result<Entry, DropReason> {
        let mut entry = Entry {
            name_start: 0,
            name_len: 0,
            timestamp: 0,
            value: 0.0,
        };
        let mut r = Reader::new(frame, start, end);
        while !r.done() {
            match r.key()? {
                // uint32: the low 32 bits of the varint, as every protobuf runtime reads it.
                (1, VARINT) => entry.timestamp = r.varint()? as u32,
                (2, FIXED64) => entry.value = f64::from_bits(r.fixed64()?),
                (field, wire_type) => r.skip(field, wire_type)?,
            }
        }
        Ok(entry)
    }
}

/// Why a datapoint cannot be written as protobuf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unencodable {
    /// `int(timestamp)` is outside `uint32` (carbon's client raises on it and loses the
    /// message).
    Timestamp,
    /// The name is not UTF-8 (a protobuf `string` must be).
    Name,
}

/// Encoding scratch reused across messages, so encoding allocates nothing once warm: the name
/// and points of the metric being grouped.
#[derive(Debug, Default)]
pub struct ProtobufEncoder {
    name: String,
    points: Vec<(u32, f64)>,
}

/// Bytes of `v` as a base-128 varint.
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Length of one encoded `Point` (proto3: a zero timestamp or value is omitted).
fn point_len(timestamp: u32, value: f64) -> usize {
    let t = if timestamp != 0 {
        1 + varint_len(u64::from(timestamp))
    } else {
        0
    };
    let v = if value != 0.0 { 9 } else { 0 };
    t + v
}

impl ProtobufEncoder {
    /// A new encoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one framed message (4-byte big-endian length + serialized `Payload`) holding
    /// every encodable datapoint of `points`; each one that is not encodable is passed to
    /// `skipped`. Consecutive datapoints with the same name share one `Metric` (carbon's
    /// client groups every point of a name within a message; the receiver sees the same
    /// points either way). Returns the datapoints written.
    pub fn encode_message<'a>(
        &mut self,
        points: impl Iterator<Item = Datapoint<'a>>,
        out: &mut BytesMut,
        mut skipped: impl FnMut(Unencodable),
    ) -> usize {
        let start = out.len();
        out.put_u32(0);
        self.name.clear();
        self.points.clear();
        let mut written = 0;
        for dp in points {
            // carbon: `point_pb.timestamp = int(datapoint[0])` — truncation toward zero.
            let t = dp.timestamp.trunc();
            if !(0.0..=f64::from(u32::MAX)).contains(&t) {
                skipped(Unencodable::Timestamp);
                continue;
            }
            let Ok(name) = std::str::from_utf8(dp.name) else {
                skipped(Unencodable::Name);
                continue;
            };
            if name != self.name || self.points.is_empty() {
                self.flush_metric(out);
                self.name.push_str(name);
            }
            self.points.push((t as u32, dp.value));
            written += 1;
        }
        self.flush_metric(out);
        let len = (out.len() - start - 4) as u32;
        out[start..start + 4].copy_from_slice(&len.to_be_bytes());
        written
    }

    /// Writes the pending metric as `Payload.metrics` field 1 and empties the scratch.
    fn flush_metric(&mut self, out: &mut BytesMut) {
        if self.points.is_empty() {
            self.name.clear();
            return;
        }
        let name_len = if self.name.is_empty() {
            0
        } else {
            1 + varint_len(self.name.len() as u64) + self.name.len()
        };
        let points_len: usize = self
            .points
            .iter()
            .map(|&(t, v)| {
                let n = point_len(t, v);
                1 + varint_len(n as u64) + n
            })
            .sum();
        let metric_len = name_len + points_len;
        out.reserve(1 + varint_len(metric_len as u64) + metric_len);
        out.put_u8(0x0a); // Payload.metrics, field 1, length-delimited
        put_varint(out, metric_len as u64);
        if !self.name.is_empty() {
            out.put_u8(0x0a); // Metric.metric, field 1, length-delimited
            put_varint(out, self.name.len() as u64);
            out.put_slice(self.name.as_bytes());
        }
        for &(t, v) in &self.points {
            out.put_u8(0x12); // Metric.points, field 2, length-delimited
            put_varint(out, point_len(t, v) as u64);
            if t != 0 {
                out.put_u8(0x08); // Point.timestamp, field 1, varint
                put_varint(out, u64::from(t));
            }
            if v != 0.0 {
                out.put_u8(0x11); // Point.value, field 2, 64-bit
                out.put_f64_le(v);
            }
        }
        self.name.clear();
        self.points.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// carbon.proto's `Point`.
    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub struct Point {
        /// Seconds since the epoch (carbon's client sends `int(timestamp)`).
        #[prost(uint32, tag = "1")]
        pub timestamp: u32,
        /// The value.
        #[prost(double, tag = "2")]
        pub value: f64,
    }

    /// carbon.proto's `Metric`: one name and its points.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Metric {
        /// The metric name.
        #[prost(string, tag = "1")]
        pub metric: String,
        /// Its datapoints.
        #[prost(message, repeated, tag = "2")]
        pub points: Vec<Point>,
    }

    /// carbon.proto's `Payload`: the body of one length-prefixed message.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Payload {
        /// The metrics.
        #[prost(message, repeated, tag = "1")]
        pub metrics: Vec<Metric>,
    }

    type Points = Vec<(Vec<u8>, f64, f64)>;

    fn decode(payload: &[u8]) -> Result<(Points, DropCounts), DropReason> {
        let mut drops = DropCounts::default();
        let mut got = Vec::new();
        ProtobufDecoder::new()
            .decode(payload, &mut drops, |n, t, v| got.push((n.to_vec(), t, v)))?;
        Ok((got, drops))
    }

    fn payload(metrics: &[(&str, &[(u32, f64)])]) -> Vec<u8> {
        Payload {
            metrics: metrics
                .iter()
                .map(|(name, points)| Metric {
                    metric: (*name).to_owned(),
                    points: points
                        .iter()
                        .map(|&(timestamp, value)| Point { timestamp, value })
                        .collect(),
                })
                .collect(),
        }
        .encode_to_vec()
    }

    #[test]
    fn decodes_what_prost_encodes() {
        let p = payload(&[
            ("a.b", &[(1_700_000_000, 1.5), (1_700_000_060, -2.0)]),
            ("温度.🔥", &[(0, 0.0)]),
            ("empty.points", &[]),
        ]);
        let (got, drops) = decode(&p).expect("decodes");
        assert!(drops.is_empty());
        assert_eq!(
            got,
            vec![
                (b"a.b".to_vec(), 1.7e9, 1.5),
                (b"a.b".to_vec(), 1_700_000_060.0, -2.0),
                ("温度.🔥".as_bytes().to_vec(), 0.0, 0.0),
            ]
        );
        assert_eq!(decode(b"").map(|r| r.0.len()), Ok(0));
    }

    /// Bytes `carbon_pb2` (python 3.11, protobuf 3.20) produced for
    /// `Payload(metrics=[Metric(metric='x.y', points=[Point(timestamp=1700000000, value=2.5)])])`,
    /// and for a point at timestamp 0 with value -0.0 (proto3 leaves both out: an empty point).
    #[test]
    fn decodes_carbon_pb2_bytes() {
        let p = b"\n\x16\n\x03x.y\x12\x0f\x08\x80\xe2\xcf\xaa\x06\x11\x00\x00\x00\x00\x00\x00\x04@";
        let (got, _) = decode(p).expect("decodes");
        assert_eq!(got, vec![(b"x.y".to_vec(), 1.7e9, 2.5)]);
        let (got, _) = decode(b"\n\x05\n\x01z\x12\x00").expect("decodes");
        assert_eq!(got, vec![(b"z".to_vec(), 0.0, 0.0)]);
    }

    #[test]
    fn unknown_fields_wrong_wire_types_and_groups_are_skipped() {
        let mut p = Vec::new();
        p.extend_from_slice(b"\x10\x05"); // Payload field 2 (varint): unknown
        p.extend_from_slice(b"\x1b\x08\x01\x1c"); // field 3 group { field 1 = 1 } end
        // Metric: name twice (last wins), an unknown fixed32, a point whose timestamp is a
        // fixed32 (wrong wire type: skipped, stays 0) and whose value is set twice.
        let point = b"\x0d\x01\x00\x00\x00\x11\x00\x00\x00\x00\x00\x00\xf0?\x11\x00\x00\x00\x00\x00\x00\x00@";
        let mut metric = Vec::new();
        metric.extend_from_slice(b"\x0a\x01z\x0a\x03a.b\x1d\x00\x00\x00\x00\x12");
        metric.push(point.len() as u8);
        metric.extend_from_slice(point);
        p.push(0x0a);
        p.push(metric.len() as u8);
        p.extend_from_slice(&metric);
        let (got, _) = decode(&p).expect("decodes");
        assert_eq!(got, vec![(b"a.b".to_vec(), 0.0, 2.0)]);
    }

    #[test]
    fn malformed_frames_are_rejected_whole() {
        let good = payload(&[("a", &[(1, 1.0)])]);
        for cut in 1..good.len() {
            assert_eq!(decode(&good[..cut]).map(|r| r.0), Err(BAD), "cut at {cut}");
        }
        assert_eq!(decode(b"\x00\x01").map(|r| r.0), Err(BAD), "field 0");
        assert_eq!(decode(b"\x0c").map(|r| r.0), Err(BAD), "stray end group");
        assert_eq!(decode(b"\x0e").map(|r| r.0), Err(BAD), "wire type 6");
        assert_eq!(
            decode(b"\x1b\x24").map(|r| r.0),
            Err(BAD),
            "mismatched end group"
        );
        let long_varint = [
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ];
        assert_eq!(
            decode(&long_varint).map(|r| r.0),
            Err(BAD),
            "11-byte varint"
        );
        assert_eq!(
            decode(b"\x0a\xff\xff\xff\xff\x0f").map(|r| r.0),
            Err(BAD),
            "length past the end"
        );
        let deep: Vec<u8> = std::iter::repeat_n(0x1b, 40).collect();
        assert_eq!(
            decode(&deep).map(|r| r.0),
            Err(BAD),
            "groups nested too deep"
        );
    }

    #[test]
    fn a_name_that_is_not_utf8_drops_only_its_points() {
        let mut p = payload(&[("ok", &[(1, 1.0)])]);
        // Metric { metric: b"\xff", points: [Point{1, 2.0}, Point{2, 3.0}] }
        let bad = b"\x0a\x01\xff\x12\x0b\x08\x01\x11\x00\x00\x00\x00\x00\x00\x00@\x12\x0b\x08\x02\x11\x00\x00\x00\x00\x00\x00\x08@";
        p.push(0x0a);
        p.push(bad.len() as u8);
        p.extend_from_slice(bad);
        let (got, drops) = decode(&p).expect("decodes");
        assert_eq!(got, vec![(b"ok".to_vec(), 1.0, 1.0)]);
        assert_eq!(drops.get(DropReason::BadUtf8), 2);
    }

    #[test]
    fn encoder_frames_groups_runs_and_skips_what_protobuf_cannot_carry() {
        let dps = [
            (&b"a"[..], 1_700_000_000.9, 1.0),
            (&b"a"[..], 1_700_000_001.0, 2.0),
            (&b"b"[..], -0.5, 3.0),
            (&b"c"[..], -1.0, 4.0),
            (&b"d"[..], 4_294_967_296.0, 5.0),
            (&b"\xff"[..], 1.0, 6.0),
            (&b"a"[..], 7.0, f64::INFINITY),
        ];
        let mut out = BytesMut::new();
        let mut skipped = Vec::new();
        let written = ProtobufEncoder::new().encode_message(
            dps.iter().map(|&(name, timestamp, value)| Datapoint {
                name,
                timestamp,
                value,
            }),
            &mut out,
            |why| skipped.push(why),
        );
        assert_eq!(written, 4);
        assert_eq!(
            skipped,
            vec![
                Unencodable::Timestamp,
                Unencodable::Timestamp,
                Unencodable::Name
            ]
        );
        let len = u32::from_be_bytes([out[0], out[1], out[2], out[3]]) as usize;
        assert_eq!(len, out.len() - 4);
        let decoded = Payload::decode(&out[4..]).expect("prost decodes the encoder's output");
        let names: Vec<&str> = decoded.metrics.iter().map(|m| m.metric.as_str()).collect();
        assert_eq!(names, vec!["a", "b", "a"]);
        assert_eq!(
            decoded.metrics[0].points,
            vec![
                Point {
                    timestamp: 1_700_000_000,
                    value: 1.0
                },
                Point {
                    timestamp: 1_700_000_001,
                    value: 2.0
                }
            ]
        );
        assert_eq!(decoded.metrics[1].points[0].timestamp, 0, "int(-0.5) == 0");
        let mut empty = BytesMut::new();
        ProtobufEncoder::new().encode_message(std::iter::empty(), &mut empty, |_| {});
        assert_eq!(&empty[..], b"\x00\x00\x00\x00");
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Arbitrary bytes never panic, and whatever decodes agrees with prost where prost
            /// accepts the bytes too.
            #[test]
            fn arbitrary_bytes_never_panic_and_agree_with_prost(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
                let ours = decode(&bytes);
                if let (Ok((got, drops)), Ok(theirs)) = (&ours, Payload::decode(&bytes[..]))
                    && drops.is_empty()
                {
                    let want: Points = theirs.metrics.iter().flat_map(|m| {
                        m.points.iter().map(|p| (m.metric.as_bytes().to_vec(), f64::from(p.timestamp), p.value))
                    }).collect();
                    prop_assert_eq!(got.len(), want.len());
                    for (g, w) in got.iter().zip(&want) {
                        prop_assert_eq!(&g.0, &w.0);
                        prop_assert_eq!(g.1, w.1);
                        prop_assert_eq!(g.2.to_bits(), w.2.to_bits());
                    }
                }
            }

            /// Whatever the encoder writes, prost and the decoder read back bit for bit.
            #[test]
            fn encode_decode_round_trip(points in proptest::collection::vec(
                ("[a-c]{1,3}", 0u32.., any::<f64>()), 0..50)) {
                let mut out = BytesMut::new();
                let written = ProtobufEncoder::new().encode_message(
                    points.iter().map(|(n, t, v)| Datapoint { name: n.as_bytes(), timestamp: f64::from(*t), value: *v }),
                    &mut out,
                    |_| {},
                );
                prop_assert_eq!(written, points.len());
                let (got, _) = decode(&out[4..]).expect("decodes");
                prop_assert_eq!(got.len(), points.len());
                for (g, p) in got.iter().zip(&points) {
                    prop_assert_eq!(&g.0[..], p.0.as_bytes());
                    prop_assert_eq!(g.1, f64::from(p.1));
                    // proto3 leaves a zero value out, so -0.0 comes back as 0.0 (carbon's too).
                    let want = if p.2 == 0.0 { 0.0 } else { p.2 };
                    prop_assert_eq!(g.2.to_bits(), want.to_bits());
                }
                prop_assert!(Payload::decode(&out[4..]).is_ok());
            }
        }
    }
}
