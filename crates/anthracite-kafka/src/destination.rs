//! A Kafka topic as a destination: queue → partitioned messages → librdkafka's idempotent
//! producer → acknowledged delivery.
//!
//! The sender takes batches from the queue like the stream sender (up to `flush_bytes`,
//! lingering `linger` for more), groups their datapoints by partition — the partition
//! Kafka's default partitioner gives the key = metric name (murmur2, as the Java client), so
//! a series always lands in one partition and stays ordered — and packs each group into
//! messages of at most `max_datapoints_per_message` datapoints, as Graphite lines or as one
//! pickle payload (no length prefix). Each message is keyed by its first metric name; the
//! partition is set explicitly (librdkafka's own default partitioner is CRC32-based, not the
//! Java client's murmur2) and equals the Java default partitioner's choice for that key. Every message of the write is then awaited: the batches
//! count as sent only when the broker acknowledged all of them (`acks=all`, idempotence on, so
//! librdkafka's own retries cannot duplicate or reorder). A message librdkafka gives up on
//! (`message.timeout.ms`, 10 s by default: brokers down, the topic missing) sends the whole
//! write back to the front of the queue, which fills and spills like for any unreachable
//! carbon-cache; messages of that write already acknowledged are sent again (at-least-once).
//!
//! ## Down is down
//!
//! "Connected" means the brokers acknowledge. The time the sender waits for acknowledgements
//! counts as time waiting on the peer ([`Outbox::waiting_on_peer`]): a full memory tier
//! judges a destination whose writes wait that long as behind, holds its clients back at
//! most one `full_wait_ms`, and spills the rest, as for a carbon-cache that stops reading.
//! A write with no acknowledgement for the destination's write timeout ends the connection
//! as hung ([`Served::Hung`]): the destination is down, what arrives spills, and the spill
//! replays once a write is acknowledged again. Messages of a hung write still in librdkafka's
//! queue may be delivered as well when the brokers answer (at-least-once).
//!
//! librdkafka reconnects to the brokers by itself, but a producer can stop trying (seen after
//! a broker fenced itself on resume: no connection, no request, for minutes). So a producer
//! that has failed (connection attempts, writes) without an acknowledgement for
//! [`REBUILD_AFTER`] is torn down at the next connection attempt
//! and built again from the bootstrap list (counted in `anthracite_kafka_producer_rebuilds_total`,
//! logged once per episode). Its errors are counted (`anthracite_kafka_producer_errors_total`)
//! and logged once per episode, from the first error until a write is acknowledged again.
//!
//! The producer itself (its settings, delivery reports and polling thread) is in the
//! `producer` module.
//!
//! The partition count comes from the topic's metadata at each (re)connection and is
//! refreshed every `METADATA_REFRESH`; adding partitions moves series, as it does for any
//! keyed Kafka producer.

use std::time::{Duration, Instant};

use anthracite::destination::{
    BoxFuture, Datapoint, DestinationSettings, Outbox, Served, StreamDestination, Transport,
    encode_line, encode_pickle,
};
use bytes::BytesMut;
use metrics::{Counter, counter};
use rdkafka::producer::{BaseRecord, Producer as _};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use crate::config::{KafkaTarget, MessageFormat};
use crate::metric_names::facade as names;
use crate::producer::{Delivery, Events, Producer};

/// A producer with no acknowledgement for this long is built again at the next connection
/// attempt: longer than librdkafka's own reconnect backoff (at most 10 s) and than a message
/// timeout (10 s by default), so a producer that is still trying gets its chance first.
pub const REBUILD_AFTER: Duration = Duration::from_secs(30);

/// How often the topic's partition count is read again.
const METADATA_REFRESH: Duration = Duration::from_secs(60);
/// How long a metadata request may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// Kafka's murmur2 (the Java client's `Utils.murmur2`), used by its default partitioner:
/// `(murmur2(key) & 0x7fffffff) % partitions`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if let Some(&b) = rest.first() {
        h ^= u32::from(b);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner gives `key` among `partitions`.
pub fn partition_for(key: &[u8], partitions: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

/// One Kafka message: every datapoint in it maps to `partition`.
struct Message {
    partition: i32,
    /// The first metric name of the message. Every name in the message maps to
    /// `partition`, so the key does too: a consumer or a Java producer that partitions by
    /// this key agrees with us.
    key: Vec<u8>,
    payload: BytesMut,
}

/// Messages of one write, per partition.
#[derive(Default)]
struct Messages {
    out: Vec<Message>,
    datapoints: usize,
}

/// Groups `points` by partition and encodes them.
fn encode<'d>(
    points: impl Iterator<Item = Datapoint<'d>>,
    partitions: i32,
    format: MessageFormat,
    per_message: usize,
) -> Messages {
    let partitions = partitions.max(1);
    let mut groups: Vec<Vec<Datapoint<'d>>> = (0..partitions).map(|_| Vec::new()).collect();
    let mut m = Messages::default();
    for dp in points {
        let p = partition_for(dp.name, partitions) as usize;
        if let Some(g) = groups.get_mut(p) {
            g.push(dp);
            m.datapoints += 1;
        }
    }
    for (p, group) in groups.iter().enumerate() {
        for chunk in group.chunks(per_message.max(1)) {
            let key = chunk.first().map(|dp| dp.name.to_vec()).unwrap_or_default();
            let mut buf = BytesMut::new();
            match format {
                MessageFormat::Lines => {
                    for &dp in chunk {
                        encode_line(dp, &mut buf);
                    }
                }
                MessageFormat::Pickle => {
                    encode_pickle(chunk.iter().copied(), &mut buf);
                    // The TCP framing's length prefix: a Kafka message has its own length.
                    let _ = buf.split_to(4);
                }
            }
            m.out.push(Message {
                partition: p as i32,
                key,
                payload: buf,
            });
        }
    }
    m
}

/// Why a write was not acknowledged.
enum Failed {
    Kafka(String),
    /// Nothing was acknowledged (nor taken into librdkafka's queue) for the stall limit.
    Hung(Duration),
    Aborted,
}

/// Sends every message and waits for every acknowledgement; a write that makes no progress
/// (no message taken, no acknowledgement) for the outbox's stall limit is hung.
async fn send(
    producer: &Producer,
    topic: &str,
    messages: &Messages,
    outbox: &Outbox<'_>,
) -> Result<(), Failed> {
    let limit = outbox.stall_limit();
    let mut progress = Instant::now();
    let stalled = |since: Instant| async move {
        match limit {
            Some(t) => tokio::time::sleep_until((since + t).into()).await,
            None => std::future::pending().await,
        }
    };
    let mut pending: Vec<Delivery> = Vec::with_capacity(messages.out.len());
    for message in &messages.out {
        let (delivered, delivery) = oneshot::channel();
        let mut record = BaseRecord::<[u8], [u8], _>::with_opaque_to(topic, Box::new(delivered))
            .partition(message.partition)
            .key(&message.key[..])
            .payload(&message.payload[..]);
        loop {
            match producer.base().send(record) {
                Ok(()) => {
                    pending.push(delivery);
                    progress = Instant::now();
                    break;
                }
                // librdkafka's local queue is full: let it drain.
                Err((
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull,
                    ),
                    r,
                )) => {
                    record = r;
                    let wait = outbox.waiting_on_peer(tokio::time::sleep(Duration::from_millis(5)));
                    tokio::select! {
                        _ = outbox.aborted() => return Err(Failed::Aborted),
                        _ = stalled(progress) => return Err(Failed::Hung(progress.elapsed())),
                        _ = wait => {}
                    }
                }
                Err((e, _)) => return Err(Failed::Kafka(e.to_string())),
            }
        }
    }
    let mut failure = None;
    for delivery in pending {
        let result = tokio::select! {
            _ = outbox.aborted() => return Err(Failed::Aborted),
            _ = stalled(progress) => return Err(Failed::Hung(progress.elapsed())),
            r = outbox.waiting_on_peer(delivery) => r,
        };
        progress = Instant::now();
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(_) => failure = failure.or(Some("the producer closed".to_string())),
        }
    }
    match failure {
        None => Ok(()),
        Some(e) => Err(Failed::Kafka(e)),
    }
}

/// The topic's partition count (blocking metadata request on the blocking pool).
async fn partitions(producer: &Producer, topic: &str) -> Result<i32, String> {
    let (p, t) = (producer.clone(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        p.base()
            .client()
            .fetch_metadata(Some(&t), METADATA_TIMEOUT)
            .map_err(|e| e.to_string())
            .and_then(|m| {
                let topic = m
                    .topics()
                    .iter()
                    .find(|x| x.name() == t)
                    .ok_or_else(|| format!("topic {t} not in the metadata"))?;
                if let Some(e) = topic.error() {
                    return Err(format!("topic {t}: {:?}", e));
                }
                match topic.partitions().len() {
                    0 => Err(format!("topic {t} has no partitions (does it exist?)")),
                    n => Ok(n as i32),
                }
            })
    })
    .await
    .map_err(|e| e.to_string())?
}

/// A validated `protocol = "kafka"` destination: the topic it writes to.
#[derive(Debug)]
pub struct KafkaDestination {
    target: KafkaTarget,
}

impl KafkaDestination {
    /// A destination writing to `target`.
    pub fn new(target: KafkaTarget) -> Self {
        Self { target }
    }
}

impl StreamDestination for KafkaDestination {
    fn transport(&self, settings: &DestinationSettings) -> Box<dyn Transport> {
        Box::new(Sender {
            target: self.target.clone(),
            per_message: settings.max_datapoints_per_message,
            events: Events::new(&settings.name),
            rebuilds: counter!(names::PRODUCER_REBUILDS, "destination" => settings.name.clone()),
            rebuilding: false,
            producer: None,
            failing_since: None,
            partitions: None,
        })
    }
}

/// The Kafka side of a destination task: the producer (made at the first connection and kept
/// while it makes progress: librdkafka reconnects to the brokers by itself) and the topic's
/// partition count.
struct Sender {
    target: KafkaTarget,
    per_message: usize,
    events: Events,
    rebuilds: Counter,
    /// An episode of rebuilds is open (logged at its first rebuild).
    rebuilding: bool,
    producer: Option<Producer>,
    /// The first failure (a connection attempt, a write) since the producer was built or
    /// last had a write acknowledged: an idle destination is not a silent producer.
    failing_since: Option<Instant>,
    /// The partition count and when it was read.
    partitions: Option<(i32, Instant)>,
}

impl Sender {
    /// The producer, built (again) when there is none or it has failed without an
    /// acknowledgement for [`REBUILD_AFTER`].
    fn producer(&mut self) -> std::io::Result<Producer> {
        if let Some(p) = &self.producer {
            let failing = self.failing_since.map(|t| t.elapsed());
            if failing.is_none_or(|f| f < REBUILD_AFTER) {
                return Ok(p.clone());
            }
            self.rebuilds.increment(1);
            if !self.rebuilding {
                self.rebuilding = true;
                warn!(destination = %self.events.destination, failing_secs = failing.unwrap_or_default().as_secs(), "kafka producer: failing without an acknowledgement for too long; building it again from the bootstrap list (counted in anthracite_kafka_producer_rebuilds_total, logged once until a write is acknowledged)");
            }
            // Its polling thread destroys it, off the runtime's workers.
            self.producer = None;
        }
        let p = Producer::new(&self.target, self.events.clone())?;
        self.producer = Some(p.clone());
        self.failing_since = None;
        Ok(p)
    }

    /// A connection attempt or a write failed.
    fn failed(&mut self) {
        self.failing_since.get_or_insert_with(Instant::now);
    }

    /// A write was acknowledged.
    fn acknowledged(&mut self) {
        self.failing_since = None;
        self.events.acknowledged();
        if std::mem::take(&mut self.rebuilding) {
            info!(destination = %self.events.destination, "kafka producer: the rebuilt producer is acknowledged");
        }
    }
}

impl Transport for Sender {
    /// "Connecting" reads the topic's partition count: brokers unreachable or the topic
    /// missing are failed attempts, retried with backoff while the data waits in the queue.
    fn connect(&mut self) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(async move {
            let producer = self.producer()?;
            match partitions(&producer, &self.target.topic).await {
                Ok(n) => {
                    self.partitions = Some((n, Instant::now()));
                    Ok(())
                }
                Err(e) => {
                    self.failed();
                    Err(std::io::Error::other(e))
                }
            }
        })
    }

    fn serve<'a>(&'a mut self, outbox: Outbox<'a>) -> BoxFuture<'a, Served> {
        Box::pin(self.deliver(outbox))
    }
}

impl Sender {
    /// Delivers writes until one is not acknowledged, the queue ends, or shutdown.
    async fn deliver(&mut self, outbox: Outbox<'_>) -> Served {
        let served = self.deliver_until_failure(outbox).await;
        if matches!(served, Served::Lost(_) | Served::Hung(_)) {
            self.failed();
        }
        served
    }

    async fn deliver_until_failure(&mut self, mut outbox: Outbox<'_>) -> Served {
        let Some(producer) = self.producer.clone() else {
            return Served::Lost(std::io::ErrorKind::NotConnected.into());
        };
        loop {
            let n = match self.partitions {
                Some((n, at)) if at.elapsed() < METADATA_REFRESH => n,
                _ => match partitions(&producer, &self.target.topic).await {
                    Ok(n) => {
                        self.partitions = Some((n, Instant::now()));
                        n
                    }
                    Err(e) => {
                        self.partitions = None;
                        return Served::Lost(std::io::Error::other(e));
                    }
                },
            };
            if let Err(end) = outbox.next_write().await {
                return end;
            }
            let messages = encode(outbox.datapoints(), n, self.target.format, self.per_message);
            match send(&producer, &self.target.topic, &messages, &outbox).await {
                Ok(()) => {
                    outbox.delivered(messages.datapoints, messages.out.len(), 0);
                    self.acknowledged();
                }
                Err(Failed::Aborted) => {
                    outbox.requeue();
                    return Served::Aborted;
                }
                Err(Failed::Hung(silent)) => {
                    outbox.requeue();
                    self.partitions = None;
                    return Served::Hung(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "no acknowledgement from the brokers for {} ms",
                            silent.as_millis()
                        ),
                    ));
                }
                Err(Failed::Kafka(e)) => {
                    debug!(destination = %outbox.name(), error = %e, "kafka write not acknowledged; requeued");
                    outbox.requeue();
                    self.partitions = None;
                    return Served::Lost(std::io::Error::other(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_the_java_client() {
        // Values of org.apache.kafka.common.utils.Utils.murmur2 (its unit test vectors).
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
            -58897971
        );
        assert_eq!(murmur2(b"abc"), 479470107);
    }

    #[test]
    fn a_series_keeps_its_partition_and_messages_hold_at_most_per_message() {
        let names: Vec<(Vec<u8>, f64)> = (0..10)
            .map(|i| {
                (
                    format!("a.b.{}", i % 3).into_bytes(),
                    1_700_000_000.0 + f64::from(i),
                )
            })
            .collect();
        let points = || {
            names.iter().map(|(name, timestamp)| Datapoint {
                name,
                timestamp: *timestamp,
                value: 1.0,
            })
        };
        let m = encode(points(), 4, MessageFormat::Lines, 2);
        assert_eq!(m.datapoints, 10);
        for message in &m.out {
            let lines: Vec<&[u8]> = message.payload[..]
                .split(|&c| c == b'\n')
                .filter(|l| !l.is_empty())
                .collect();
            assert!(lines.len() <= 2);
            let first = lines[0].split(|&c| c == b' ').next().expect("a name");
            assert_eq!(message.key, first, "the key is the message's first name");
            assert_eq!(partition_for(&message.key, 4), message.partition);
            for l in lines {
                let name = l.split(|&c| c == b' ').next().expect("a name");
                assert_eq!(partition_for(name, 4), message.partition);
            }
        }
        let m = encode(points(), 1, MessageFormat::Pickle, 500);
        assert_eq!(m.out.len(), 1);
        assert_eq!(m.out[0].key, b"a.b.0");
        assert_eq!(&m.out[0].payload[..3], b"\x80\x02]", "no length prefix");
    }
}
