//! Kinesis destinations (`protocol = "kinesis"`): datapoints → KPL-aggregated records →
//! `PutRecords`.
//!
//! Each datapoint becomes one user record: its plaintext line, under the metric name as
//! partition key, so a series always maps to one shard. User records are packed per shard
//! into KPL aggregates ([`crate::kpl::AggregateBuilder`]) of at most
//! `AGGREGATE_BYTES`, the KPL's default `AggregationMaxSize`: the shard comes from the
//! name's MD5, as Kinesis computes it, against the open shards' hash ranges listed when the
//! destination connects, and the aggregate's outer partition key is its first user record's,
//! so Kinesis routes it where every record inside belongs. A name that is not UTF-8 or is
//! longer than Kinesis' 256-character limit is keyed by the hex of its MD5 instead. Any
//! anthracite Kinesis source (and the KCL) de-aggregates the records.
//!
//! The same queue as a carbon-cache sits in front (full policy, spill, replay). "Connecting"
//! lists the stream's shards, so a wrong endpoint, missing credentials or a missing stream
//! are connection failures (logged once per episode, retried with backoff, the data
//! queued). A round takes batches from the queue, encodes them, and `PutRecords` them, at
//! most 500 records or 5 MiB per call; records the service rejects (throttling, internal
//! errors) are retried alone with backoff until acknowledged. The round's datapoints count as
//! sent only once every record holding them was acknowledged. A round that makes no progress
//! for `write_timeout` (calls failing or timing out, every record throttled) marks the
//! destination dead like a hung carbon-cache: its batches go back to the queue (records the
//! stream had already acknowledged are sent again: at-least-once) and it reconnects.

use std::time::{Duration, Instant};

use anthracite::destination::{
    Backoff, BoxFuture, Datapoint, DestinationSettings, Outbox, Served, StreamDestination,
    Transport, encode_line,
};
use aws_config::{BehaviorVersion, Region};
use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use bytes::{Bytes, BytesMut};
use md5::{Digest, Md5};
use tracing::{debug, warn};

use super::error_text;
use crate::config::KinesisTarget;
use crate::kpl::{AggregateBuilder, MAX_RECORD_BYTES};

/// The KPL's default `AggregationMaxSize`: an aggregate of this size carries hundreds of
/// datapoints while a shard's 1 MiB/s write limit still takes about twenty of them a second.
const AGGREGATE_BYTES: usize = 51_200;
/// `PutRecords` limits: records and bytes (data plus partition keys) per call.
const CALL_RECORDS: usize = 500;
const CALL_BYTES: usize = 5 << 20;
/// Kinesis' limit on a partition key, in Unicode characters (checked in bytes: stricter).
const MAX_PARTITION_KEY: usize = 256;

/// One aggregated record waiting for its acknowledgement.
struct Pending {
    data: Bytes,
    key: String,
}

/// An open shard's hash key range, inclusive.
#[derive(Clone, Copy, Debug)]
struct Range {
    start: u128,
    end: u128,
}

/// A validated `protocol = "kinesis"` destination: the stream it writes to.
#[derive(Debug)]
pub struct KinesisDestination {
    target: KinesisTarget,
}

impl KinesisDestination {
    /// A destination writing to `target`.
    pub fn new(target: KinesisTarget) -> Self {
        Self { target }
    }
}

impl StreamDestination for KinesisDestination {
    fn transport(&self, settings: &DestinationSettings) -> Box<dyn Transport> {
        Box::new(Sender::new(self.target.clone(), settings))
    }
}

/// The Kinesis side of a destination task: the client and the encoding state it reuses.
pub(crate) struct Sender {
    name: String,
    target: KinesisTarget,
    connect_timeout: Duration,
    backoff: (Duration, Duration),
    client: Option<Client>,
    shards: Vec<Range>,
    aggregators: Vec<AggregateBuilder>,
    line: BytesMut,
    out: Vec<u8>,
}

/// Why a round stopped short.
enum RoundError {
    /// A call failed in a way retrying will not fix on this "connection" (stream missing,
    /// credentials, endpoint): reconnect.
    Lost(std::io::Error),
    /// No progress for the write timeout.
    Stalled(std::io::Error),
    GaveUp,
    Aborted,
}

impl Transport for Sender {
    fn connect(&mut self) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(self.list_shards())
    }

    fn serve<'a>(&'a mut self, outbox: Outbox<'a>) -> BoxFuture<'a, Served> {
        Box::pin(self.deliver(outbox))
    }
}

impl Sender {
    pub(crate) fn new(target: KinesisTarget, settings: &DestinationSettings) -> Self {
        Self {
            name: settings.name.clone(),
            target,
            connect_timeout: settings.connect_timeout,
            backoff: (settings.backoff_min, settings.backoff_max),
            client: None,
            shards: Vec::new(),
            aggregators: Vec::new(),
            line: BytesMut::with_capacity(512),
            out: Vec::with_capacity(AGGREGATE_BYTES + 1024),
        }
    }

    async fn client(&mut self) -> Client {
        if let Some(c) = &self.client {
            return c.clone();
        }
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(r) = &self.target.region {
            loader = loader.region(Region::new(r.clone()));
        }
        let sdk = loader.load().await;
        let mut conf = aws_sdk_kinesis::config::Builder::from(&sdk);
        if let Some(url) = &self.target.endpoint_url {
            conf = conf.endpoint_url(url);
        }
        let client = Client::from_conf(conf.build());
        self.client = Some(client.clone());
        client
    }

    /// Lists the stream's open shards (the destination's "connect").
    async fn list_shards(&mut self) -> std::io::Result<()> {
        let timeout = self.connect_timeout;
        let client = self.client().await;
        let list = async {
            let mut ranges = Vec::new();
            let mut token: Option<String> = None;
            loop {
                let req = match token.take() {
                    Some(t) => client.list_shards().next_token(t),
                    None => client.list_shards().stream_name(&self.target.stream),
                };
                let out = req.send().await.map_err(|e| io_error(&e))?;
                for s in out.shards() {
                    let open = s
                        .sequence_number_range()
                        .is_some_and(|r| r.ending_sequence_number().is_none());
                    let Some(r) = s.hash_key_range() else {
                        continue;
                    };
                    let parse = |t: &str| t.parse::<u128>().ok();
                    if let (true, Some(start), Some(end)) = (
                        open,
                        parse(r.starting_hash_key()),
                        parse(r.ending_hash_key()),
                    ) {
                        ranges.push(Range { start, end });
                    }
                }
                match out.next_token() {
                    Some(t) if !t.is_empty() => token = Some(t.to_string()),
                    _ => break,
                }
            }
            Ok::<_, std::io::Error>(ranges)
        };
        let mut ranges = tokio::time::timeout(timeout, list).await.map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, "ListShards timed out")
        })??;
        if ranges.is_empty() {
            return Err(std::io::Error::other(format!(
                "stream {} has no open shard",
                self.target.stream
            )));
        }
        ranges.sort_by_key(|r| r.start);
        self.shards = ranges;
        self.aggregators
            .resize_with(self.shards.len(), AggregateBuilder::new);
        Ok(())
    }

    /// Delivers writes from `outbox` until the stream fails, the queue ends, or shutdown.
    async fn deliver(&mut self, mut outbox: Outbox<'_>) -> Served {
        loop {
            if let Err(end) = outbox.next_write().await {
                return end;
            }
            let mut records = Vec::new();
            let encoded = self.encode(outbox.datapoints(), &mut records);
            match self.put_all(records, &outbox).await {
                Ok(()) => {
                    outbox.delivered(encoded.datapoints, encoded.records, encoded.unencodable);
                }
                Err(e) => {
                    outbox.requeue();
                    return match e {
                        RoundError::Lost(e) => Served::Lost(e),
                        RoundError::Stalled(e) => Served::Hung(e),
                        RoundError::GaveUp => Served::GaveUp,
                        RoundError::Aborted => Served::Aborted,
                    };
                }
            }
        }
    }

    /// The shard whose hash range holds `hash` (the last one when the listing has a gap).
    fn shard_of(&self, hash: u128) -> usize {
        let i = self.shards.partition_point(|r| r.start <= hash);
        let i = i.saturating_sub(1);
        debug_assert!(
            self.shards
                .get(i)
                .is_none_or(|r| hash <= r.end || i + 1 == self.shards.len())
        );
        i
    }

    /// Encodes a write's datapoints into aggregated records, per shard.
    fn encode<'d>(
        &mut self,
        points: impl Iterator<Item = Datapoint<'d>>,
        records: &mut Vec<Pending>,
    ) -> EncodedRound {
        let mut round = EncodedRound::default();
        let mut hex = [0u8; 32];
        for dp in points {
            let digest: [u8; 16] = Md5::digest(dp.name).into();
            let key: &[u8] = match std::str::from_utf8(dp.name) {
                Ok(k) if !k.is_empty() && k.len() <= MAX_PARTITION_KEY => dp.name,
                _ => {
                    hex_into(&digest, &mut hex);
                    &hex
                }
            };
            self.line.clear();
            encode_line(dp, &mut self.line);
            let need = AggregateBuilder::push_len(key.len(), self.line.len());
            if need + key.len() + 32 > MAX_RECORD_BYTES {
                round.unencodable += 1;
                continue;
            }
            let shard = if self.shards.len() > 1 {
                self.shard_of(u128::from_be_bytes(digest))
            } else {
                0
            };
            let Some(agg) = self.aggregators.get_mut(shard) else {
                round.unencodable += 1;
                continue;
            };
            if !agg.is_empty() && agg.encoded_len() + need > AGGREGATE_BYTES {
                finish(agg, &mut self.out, records);
                round.records += 1;
            }
            agg.push_bytes(key, None, &self.line);
            round.datapoints += 1;
        }
        for agg in self.aggregators.iter_mut().filter(|a| !a.is_empty()) {
            finish(agg, &mut self.out, records);
            round.records += 1;
        }
        round
    }

    /// Puts every record, retrying the ones the service rejects, until all are acknowledged.
    async fn put_all(
        &mut self,
        mut pending: Vec<Pending>,
        outbox: &Outbox<'_>,
    ) -> Result<(), RoundError> {
        let client = self.client().await;
        let mut backoff = Backoff::new(self.backoff.0, self.backoff.1);
        let mut progress_at = Instant::now();
        let mut warned = false;
        while !pending.is_empty() {
            if outbox.is_aborted() {
                return Err(RoundError::Aborted);
            }
            let limit = outbox.stall_limit();
            if let Some(limit) = limit
                && progress_at.elapsed() >= limit
            {
                if outbox.giving_up() {
                    return Err(RoundError::GaveUp);
                }
                return Err(RoundError::Stalled(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no record acknowledged for {} ms", limit.as_millis()),
                )));
            }
            let (mut n, mut bytes) = (0, 0);
            for p in &pending {
                let size = p.data.len() + p.key.len();
                if n == CALL_RECORDS || (n > 0 && bytes + size > CALL_BYTES) {
                    break;
                }
                n += 1;
                bytes += size;
            }
            let entries: Vec<PutRecordsRequestEntry> = pending[..n]
                .iter()
                .filter_map(|p| {
                    PutRecordsRequestEntry::builder()
                        .data(Blob::new(p.data.clone()))
                        .partition_key(&p.key)
                        .build()
                        .ok()
                })
                .collect();
            let call = client
                .put_records()
                .stream_name(&self.target.stream)
                .set_records(Some(entries))
                .send();
            let response = tokio::select! {
                _ = outbox.aborted() => return Err(RoundError::Aborted),
                r = with_limit(limit, call) => r,
            };
            let failed_at: Vec<usize> = match response {
                Some(Ok(out)) => out
                    .records()
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.error_code().is_some())
                    .map(|(i, _)| i)
                    .collect(),
                Some(Err(e)) => {
                    let missing = e
                        .as_service_error()
                        .is_some_and(|s| s.is_resource_not_found_exception());
                    let throttled = e.as_service_error().is_some_and(|s| {
                        s.is_provisioned_throughput_exceeded_exception()
                            || s.is_kms_throttling_exception()
                    });
                    if !throttled && (missing || e.as_service_error().is_none()) {
                        return Err(RoundError::Lost(io_error(&e)));
                    }
                    if !warned {
                        warned = true;
                        warn!(destination = %self.name, error = %error_text(&e), "PutRecords failed; retrying with backoff");
                    }
                    (0..n).collect()
                }
                // The call outlived the limit: judged by the stall check above.
                None => (0..n).collect(),
            };
            let acknowledged = n - failed_at.len();
            if acknowledged > 0 {
                progress_at = Instant::now();
                backoff.reset();
            }
            // Failed records stay, in order, ahead of the ones not sent yet.
            let mut keep = failed_at.into_iter().peekable();
            let mut i = 0;
            pending.retain(|_| {
                let k = i;
                i += 1;
                if k >= n {
                    return true;
                }
                if keep.peek() == Some(&k) {
                    keep.next();
                    return true;
                }
                false
            });
            if acknowledged < n {
                debug!(destination = %self.name, rejected = n - acknowledged, "records rejected (throttled or failed); retrying them");
                let wait = backoff.next_delay();
                tokio::select! {
                    _ = outbox.aborted() => return Err(RoundError::Aborted),
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
        Ok(())
    }
}

/// Round counts: datapoints encoded, records made, datapoints too large for a record.
#[derive(Debug, Default)]
struct EncodedRound {
    datapoints: usize,
    records: usize,
    unencodable: usize,
}

fn finish(agg: &mut AggregateBuilder, out: &mut Vec<u8>, records: &mut Vec<Pending>) {
    // Keys are UTF-8 (checked when pushed); a lossy conversion would never change them.
    let key = String::from_utf8_lossy(agg.first_partition_key()).into_owned();
    out.clear();
    agg.finish(out);
    records.push(Pending {
        data: Bytes::copy_from_slice(out),
        key,
    });
}

fn hex_into(digest: &[u8; 16], out: &mut [u8; 32]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in digest.iter().enumerate() {
        out[2 * i] = HEX[usize::from(b >> 4)];
        out[2 * i + 1] = HEX[usize::from(b & 0xf)];
    }
}

async fn with_limit<F: std::future::Future>(limit: Option<Duration>, f: F) -> Option<F::Output> {
    match limit {
        Some(l) => tokio::time::timeout(l, f).await.ok(),
        None => Some(f.await),
    }
}

fn io_error<E: std::error::Error + 'static>(e: &E) -> std::io::Error {
    std::io::Error::other(error_text(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kpl::{Deaggregated, deaggregate};

    fn sender(shards: &[(u128, u128)]) -> Sender {
        let mut s = Sender {
            name: "k".into(),
            target: KinesisTarget {
                stream: "s".into(),
                region: None,
                endpoint_url: None,
            },
            connect_timeout: Duration::from_secs(1),
            backoff: (Duration::from_millis(1), Duration::from_millis(2)),
            client: None,
            shards: shards
                .iter()
                .map(|&(start, end)| Range { start, end })
                .collect(),
            aggregators: Vec::new(),
            line: BytesMut::new(),
            out: Vec::new(),
        };
        s.aggregators
            .resize_with(shards.len(), AggregateBuilder::new);
        s
    }

    #[test]
    fn datapoints_are_aggregated_per_shard_keyed_by_name() {
        let half = u128::MAX / 2;
        let mut s = sender(&[(0, half), (half + 1, u128::MAX)]);
        let mut names: Vec<(Vec<u8>, f64, f64)> = (0..2000)
            .map(|i| {
                (
                    format!("servers.host{i}.cpu").into_bytes(),
                    1_700_000_000.0,
                    f64::from(i),
                )
            })
            .collect();
        names.push((vec![0xff, 0xfe], 1.0, 1.0));
        names.push((vec![b'x'; MAX_RECORD_BYTES], 1.0, 1.0));
        let points = names.iter().map(|(name, timestamp, value)| Datapoint {
            name,
            timestamp: *timestamp,
            value: *value,
        });
        let mut records = Vec::new();
        let round = s.encode(points, &mut records);
        assert_eq!((round.datapoints, round.unencodable), (2001, 1));
        assert_eq!(round.records, records.len());
        assert!(records.len() * 50 < 2001, "{} records", records.len());
        let mut seen = 0;
        for r in &records {
            assert!(r.data.len() <= AGGREGATE_BYTES, "{}", r.data.len());
            let Deaggregated::Aggregated(agg) = deaggregate(&r.data) else {
                panic!("not an aggregate");
            };
            let outer = s.shard_of(u128::from_be_bytes(Md5::digest(r.key.as_bytes()).into()));
            for u in &agg.records {
                let key = agg.partition_key(u);
                let Ok(line) = std::str::from_utf8(&u.data) else {
                    assert_eq!(
                        key.len(),
                        32,
                        "a name that is not UTF-8 is keyed by its MD5"
                    );
                    continue;
                };
                assert!(line.starts_with(&format!("{key} ")), "{key} / {line}");
                let shard = s.shard_of(u128::from_be_bytes(Md5::digest(key.as_bytes()).into()));
                assert_eq!(
                    shard, outer,
                    "every record of an aggregate belongs to its shard"
                );
                seen += 1;
            }
        }
        assert_eq!(seen, 2000);
    }
}
