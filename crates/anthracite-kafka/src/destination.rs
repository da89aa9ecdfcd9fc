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
//! The partition count comes from the topic's metadata at each (re)connection and is
//! refreshed every `METADATA_REFRESH`; adding partitions moves series, as it does for any
//! keyed Kafka producer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tracing::{debug, warn};

use super::{
    Backoff, DestinationConfig, DestinationSignals, Episode, Failure, KafkaTarget, MessageFormat,
    next_write,
};
use crate::batch::{Batch, Datapoint};
use crate::protocol::{line, pickle};
use crate::queue::DestinationQueue;

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

/// The producer's configuration: the relay's delivery keys, then the pass-through ones.
fn client_config(target: &KafkaTarget) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &target.brokers)
        .set("client.id", &target.client_id)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "10000");
    for (k, v) in &target.properties {
        c.set(k, v);
    }
    // librdkafka logs to the `log` facade; what an operator needs is logged here, once per
    // failure episode.
    c.set_log_level(rdkafka::config::RDKafkaLogLevel::Critical);
    c
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

/// Groups the datapoints of `batches` by partition and encodes them.
fn encode(
    batches: &[Batch],
    partitions: i32,
    format: MessageFormat,
    per_message: usize,
) -> Messages {
    let partitions = partitions.max(1);
    let mut groups: Vec<Vec<Datapoint<'_>>> = (0..partitions).map(|_| Vec::new()).collect();
    let mut m = Messages::default();
    for dp in batches.iter().flat_map(|b| b.iter()) {
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
                        line::encode_line(dp, &mut buf);
                    }
                }
                MessageFormat::Pickle => {
                    pickle::encode_message(chunk.iter().copied(), &mut buf);
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
    Aborted,
}

/// Sends every message and waits for every acknowledgement.
async fn send(
    producer: &FutureProducer,
    topic: &str,
    messages: &Messages,
    signals: &DestinationSignals,
) -> Result<(), Failed> {
    let mut pending = Vec::with_capacity(messages.out.len());
    for message in &messages.out {
        let mut record = FutureRecord::<[u8], [u8]>::to(topic)
            .partition(message.partition)
            .key(&message.key[..])
            .payload(&message.payload[..]);
        loop {
            match producer.send_result(record) {
                Ok(delivery) => {
                    pending.push(delivery);
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
                    tokio::select! {
                        _ = signals.abort.cancelled() => return Err(Failed::Aborted),
                        _ = tokio::time::sleep(Duration::from_millis(5)) => {}
                    }
                }
                Err((e, _)) => return Err(Failed::Kafka(e.to_string())),
            }
        }
    }
    let mut failure = None;
    for delivery in pending {
        let result = tokio::select! {
            _ = signals.abort.cancelled() => return Err(Failed::Aborted),
            r = delivery => r,
        };
        match result {
            Ok(Ok(_)) => {}
            Ok(Err((e, _))) => failure = failure.or(Some(e.to_string())),
            Err(_) => failure = failure.or(Some("the producer closed".to_string())),
        }
    }
    match failure {
        None => Ok(()),
        Some(e) => Err(Failed::Kafka(e)),
    }
}

/// The topic's partition count (blocking metadata request on the blocking pool).
async fn partitions(producer: &FutureProducer, topic: &str) -> Result<i32, String> {
    let (p, t) = (producer.clone(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        p.client()
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

/// Runs a `protocol = "kafka"` destination until its queue is closed and drained, `abort`
/// fires, or it is known dead when shutdown drains the queues.
pub(crate) async fn run(
    config: DestinationConfig,
    queue: Arc<DestinationQueue>,
    signals: DestinationSignals,
) {
    let name = config.spec.to_string();
    let Some(target) = config.kafka.clone() else {
        warn!(destination = %name, "protocol \"kafka\" without a kafka table; nothing is sent");
        return;
    };
    let stats = queue.stats().clone();
    let mut backoff = Backoff::new(config.backoff_min, config.backoff_max);
    let mut episode = Episode::default();
    let producer: FutureProducer = match client_config(&target).create() {
        Ok(p) => p,
        Err(e) => {
            warn!(destination = %name, error = %e, "kafka producer cannot be created (a property librdkafka refuses?); data stays queued");
            signals.abort.cancelled().await;
            return;
        }
    };
    let mut in_flight: Vec<Batch> = Vec::new();
    let mut count: Option<(i32, Instant)> = None;
    let connected_at = Instant::now();
    loop {
        if queue.is_closed() && queue.queued() == 0 {
            return;
        }
        let n = match count {
            Some((n, at)) if at.elapsed() < METADATA_REFRESH => n,
            _ => match partitions(&producer, &target.topic).await {
                Ok(n) => {
                    stats.set_connected(true);
                    count = Some((n, Instant::now()));
                    n
                }
                Err(e) => {
                    let error = std::io::Error::other(e);
                    stats.connect_failed(&error);
                    stats.set_connected(false);
                    count = None;
                    episode.failed(&name, Failure::Connect, &error, None);
                    if wait(&mut backoff, &signals, &queue).await {
                        return;
                    }
                    continue;
                }
            },
        };
        // Aborted, or drained and closed: the task ends either way.
        if next_write(
            &queue,
            &signals,
            config.flush_bytes,
            config.linger,
            &mut in_flight,
        )
        .await
        .is_some()
        {
            return;
        }
        let messages = encode(
            &in_flight,
            n,
            target.format,
            config.max_datapoints_per_message,
        );
        match send(&producer, &target.topic, &messages, &signals).await {
            Ok(()) => {
                backoff.reset();
                queue.recycle(in_flight.drain(..));
                queue.settle(messages.datapoints, messages.out.len(), &[]);
                episode.delivered(&name, connected_at);
            }
            Err(Failed::Aborted) => {
                queue.requeue(std::mem::take(&mut in_flight));
                return;
            }
            Err(Failed::Kafka(e)) => {
                debug!(destination = %name, error = %e, "kafka write not acknowledged; requeued");
                queue.requeue(std::mem::take(&mut in_flight));
                let error = std::io::Error::other(e);
                stats.connect_failed(&error);
                stats.set_connected(false);
                queue.connection_lost();
                count = None;
                episode.failed(&name, Failure::Lost, &error, None);
                if signals.drain.is_cancelled() {
                    warn!(destination = %name, "known dead at shutdown: not waiting for the grace period");
                    return;
                }
                if wait(&mut backoff, &signals, &queue).await {
                    return;
                }
            }
        }
    }
}

/// Backs off; true when the destination should stop (aborted, or draining while dead).
async fn wait(
    backoff: &mut Backoff,
    signals: &DestinationSignals,
    queue: &DestinationQueue,
) -> bool {
    if signals.drain.is_cancelled() {
        return true;
    }
    let delay = backoff.next_delay();
    tokio::select! {
        _ = signals.abort.cancelled() => true,
        _ = signals.drain.cancelled() => true,
        _ = tokio::time::sleep(delay) => false,
        _ = async {
            while !(queue.is_closed() && queue.queued() == 0) {
                queue.changed().await;
            }
        } => true,
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
        let mut b = Batch::new();
        for i in 0..10 {
            b.push(
                format!("a.b.{}", i % 3).as_bytes(),
                1_700_000_000.0 + f64::from(i),
                1.0,
            )
            .expect("room");
        }
        let m = encode(std::slice::from_ref(&b), 4, MessageFormat::Lines, 2);
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
        let m = encode(&[b], 1, MessageFormat::Pickle, 500);
        assert_eq!(m.out.len(), 1);
        assert_eq!(m.out[0].key, b"a.b.0");
        assert_eq!(&m.out[0].payload[..3], b"\x80\x02]", "no length prefix");
    }
}
