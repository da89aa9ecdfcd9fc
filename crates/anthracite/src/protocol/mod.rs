//! Wire formats: decode and encode, no I/O.
//!
//! - [`line`](mod@line): Graphite plaintext (`path value timestamp\n`), carbon 1.1.10's parsing rules,
//!   plus the line encoder for `protocol = "line"` destinations.
//! - [`pickle`]: carbon's pickle framing (4-byte big-endian length + pickle), a safe decoder
//!   for protocols 0–5 that executes nothing, and the protocol-2 encoder used towards
//!   carbon-cache.
//!
//! - [`protobuf`]: carbon's protobuf framing (4-byte big-endian length + `carbon.Payload`), a
//!   zero-copy decoder and the encoder for `protocol = "protobuf"` destinations.
//!
//! - [`number`]: Python's `float()` grammar and `repr(float)`, shared by both.
//!
//! Both decoders report problems as small `Copy` enums whose [`DropReason::as_str`] is the
//! `reason` label of the drop counter.

pub(crate) mod c_relay;
pub(crate) mod line;
pub(crate) mod number;
pub(crate) mod pickle;
pub(crate) mod protobuf;
pub(crate) mod tags;

/// A parsed datapoint: `(name, timestamp, value)`.
pub(crate) type Point<'a> = (&'a [u8], f64, f64);

/// Datapoints handed on together as one run (decoded, routed, fed to the aggregator): enough to
/// overlap the memory waits of their lookups, few enough to live on the stack.
pub(crate) const RUN: usize = 128;

/// Why one datapoint (or one frame) was not accepted. Doubles as a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// Line longer than the configured maximum (carbon closes the connection; we drop the line).
    TooLong,
    /// Line or name is not valid UTF-8.
    BadUtf8,
    /// Not exactly three whitespace-separated fields.
    BadFields,
    /// Value is not a decimal float.
    BadValue,
    /// Value is NaN (carbon drops these silently; we count them).
    NanValue,
    /// Timestamp is not a decimal float.
    BadTimestamp,
    /// Timestamp is NaN or infinite (carbon loses the connection; we drop the line).
    NonFiniteTimestamp,
    /// Last line of a stream had no terminating newline.
    Unterminated,
    /// Pickle frame could not be decoded (or used a forbidden opcode); all of it is dropped.
    BadPickle,
    /// A pickle entry was not `(path, (timestamp, value))`.
    BadPickleEntry,
    /// Pickle or protobuf length prefix over the frame limit; the connection is closed.
    FrameTooLong,
    /// Metric name empty.
    EmptyName,
    /// No routing rule sends this name anywhere (a rules config with an empty destination
    /// list; carbon drops these silently).
    NoDestination,
    /// Protobuf frame could not be parsed; all of it is dropped.
    BadProtobuf,
    /// Metric name longer than `listen.max_name_length` (any protocol).
    NameTooLong,
    /// Metric name holding whitespace as Python's `str.split()` sees it (space, `\t`, `\n`,
    /// `\r`, `\x0b`, `\x0c`, `\x1c`–`\x1f`, Unicode spaces). carbon's plaintext receiver
    /// splits on these, so only pickle, protobuf, Kinesis or an embedder can send such a name;
    /// a line or UDP destination would write it as a second metric of the sender's choosing.
    WhitespaceInName,
    /// Pickle or protobuf frame whose datapoints (names + 24 bytes each) would take more than
    /// the whole decoded-size budget (`listen.max_frame_buffer_bytes`); all of it is dropped.
    DecodedTooLarge,
    /// A carbon-c-relay configuration sent the line to no cluster and no aggregation:
    /// `send to blackhole`, a `validate … else drop` that failed, or no `match` that took it
    /// (carbon-c-relay's `metricsBlackholed`). The configuration asks for it, so it is counted
    /// but opens no drop episode.
    Blackholed,
}

impl DropReason {
    /// Every reason, for registering counters up front.
    pub const ALL: [DropReason; 18] = [
        DropReason::TooLong,
        DropReason::BadUtf8,
        DropReason::BadFields,
        DropReason::BadValue,
        DropReason::NanValue,
        DropReason::BadTimestamp,
        DropReason::NonFiniteTimestamp,
        DropReason::Unterminated,
        DropReason::BadPickle,
        DropReason::BadPickleEntry,
        DropReason::FrameTooLong,
        DropReason::EmptyName,
        DropReason::NoDestination,
        DropReason::BadProtobuf,
        DropReason::NameTooLong,
        DropReason::WhitespaceInName,
        DropReason::DecodedTooLarge,
        DropReason::Blackholed,
    ];

    /// Stable snake_case label used in metrics and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            DropReason::TooLong => "too_long",
            DropReason::BadUtf8 => "bad_utf8",
            DropReason::BadFields => "bad_fields",
            DropReason::BadValue => "bad_value",
            DropReason::NanValue => "nan_value",
            DropReason::BadTimestamp => "bad_timestamp",
            DropReason::NonFiniteTimestamp => "non_finite_timestamp",
            DropReason::Unterminated => "unterminated",
            DropReason::BadPickle => "bad_pickle",
            DropReason::BadPickleEntry => "bad_pickle_entry",
            DropReason::FrameTooLong => "frame_too_long",
            DropReason::EmptyName => "empty_name",
            DropReason::NoDestination => "no_destination",
            DropReason::BadProtobuf => "bad_protobuf",
            DropReason::NameTooLong => "name_too_long",
            DropReason::WhitespaceInName => "whitespace_in_name",
            DropReason::DecodedTooLarge => "decoded_too_large",
            DropReason::Blackholed => "blackholed",
        }
    }

    /// Position in [`DropReason::ALL`], for per-reason counter arrays.
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// Per-reason drop tallies, kept per connection and flushed to metrics per batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts(pub [u64; DropReason::ALL.len()]);

impl DropCounts {
    /// Counts one drop.
    #[inline]
    pub fn add(&mut self, reason: DropReason) {
        self.0[reason.index()] += 1;
    }

    /// Total over all reasons.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Count for one reason.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.0[reason.index()]
    }

    /// True when nothing was dropped.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&n| n == 0)
    }

    /// Resets every tally to zero.
    pub fn clear(&mut self) {
        self.0 = [0; DropReason::ALL.len()];
    }
}

/// carbon's `metricReceived` normalisation, shared by every receiver.
///
/// Drops NaN values, replaces a timestamp whose integer part is `-1` with `now`, and rejects
/// non-finite timestamps (where carbon would raise and lose the connection).
#[inline]
pub fn normalize(timestamp: f64, value: f64, now: f64) -> Result<(f64, f64), DropReason> {
    if value.is_nan() {
        return Err(DropReason::NanValue);
    }
    if !timestamp.is_finite() {
        return Err(DropReason::NonFiniteTimestamp);
    }
    // Python's int() truncates toward zero: int(-1.5) == -1 also means "now". The integer
    // part is -1 exactly for -2 < t <= -1 (two compares instead of a call to libm's `trunc`,
    // which x86-64's baseline instruction set has no instruction for).
    if timestamp > -2.0 && timestamp <= -1.0 {
        return Ok((now, value));
    }
    Ok((timestamp, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_whose_integer_part_is_minus_one_mean_now() {
        let now = 1.7e9;
        let edges = [
            -2.0,
            f64::from_bits((-2.0f64).to_bits() - 1), // just above -2
            -1.5,
            -1.0,
            f64::from_bits((-1.0f64).to_bits() + 1), // just below -1
            f64::from_bits((-1.0f64).to_bits() - 1), // just above -1
            -0.5,
            -0.0,
            0.0,
            1.0,
            -1e300,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
        ];
        let mut rng = fastrand::Rng::with_seed(3);
        let random = (0..100_000).map(|_| (rng.f64() - 0.5) * 8.0);
        for t in edges.into_iter().chain(random) {
            let want = if t.trunc() == -1.0 { now } else { t };
            assert_eq!(
                normalize(t, 1.0, now).map(|(t, _)| t.to_bits()),
                Ok(want.to_bits()),
                "{t:e}"
            );
        }
    }
}
