//! The test's own Kafka clients (librdkafka, not anthracite's code): produce Graphite
//! messages, read a topic back, and read a group's committed offsets.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};

/// A producer with acknowledged, idempotent writes.
pub fn producer(bootstrap: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "2")
        .create()
        .expect("a Kafka producer")
}

/// Sends `payload` to `partition` of `topic` (with `timestamp_ms`, when given); waits for
/// the acknowledgement.
pub async fn send(
    producer: &FutureProducer,
    topic: &str,
    partition: i32,
    payload: &[u8],
    timestamp_ms: Option<i64>,
) {
    let mut record = FutureRecord::<(), [u8]>::to(topic)
        .partition(partition)
        .payload(payload);
    if let Some(ts) = timestamp_ms {
        record = record.timestamp(ts);
    }
    producer
        .send(record, Duration::from_secs(30))
        .await
        .unwrap_or_else(|(e, _)| panic!("produce to {topic}/{partition}: {e}"));
}

/// Committed offsets of `group` on `topic`'s `partitions` (partition → offset; absent when
/// none is committed).
pub fn committed(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("a Kafka consumer for committed offsets");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = consumer
        .committed_offsets(tpl, Duration::from_secs(20))
        .expect("committed offsets");
    got.elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect()
}

/// Every message of `topic` from the beginning, as `(partition, key, payload)`, read until
/// `expected` are in hand (or panics after `limit`).
pub fn read_all(
    bootstrap: &str,
    topic: &str,
    expected: usize,
    limit: Duration,
) -> Vec<(i32, Option<Vec<u8>>, Vec<u8>)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("test-reader-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("a Kafka consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let end = std::time::Instant::now() + limit;
    let mut out = Vec::new();
    while out.len() < expected {
        assert!(
            std::time::Instant::now() < end,
            "read {} of {expected} messages of {topic}",
            out.len()
        );
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            out.push((
                m.partition(),
                m.key().map(<[u8]>::to_vec),
                m.payload().unwrap_or_default().to_vec(),
            ));
        }
    }
    out
}

/// Sends every `(partition, payload)` to `topic` at once (in order per partition: the
/// producer is idempotent) and waits for every acknowledgement.
pub async fn send_many(producer: &FutureProducer, topic: &str, messages: &[(i32, Vec<u8>)]) {
    let mut pending = Vec::with_capacity(messages.len());
    for (partition, payload) in messages {
        let record = FutureRecord::<(), [u8]>::to(topic)
            .partition(*partition)
            .payload(&payload[..]);
        pending.push(producer.send(record, Duration::from_secs(30)));
    }
    for p in pending {
        p.await
            .unwrap_or_else(|(e, _)| panic!("produce to {topic}: {e}"));
    }
}

/// The end offset (next offset) of each of `topic`'s `partitions`.
pub fn end_offsets(bootstrap: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("a Kafka consumer for watermarks");
    (0..partitions)
        .map(|p| {
            let (_, high) = consumer
                .fetch_watermarks(topic, p, Duration::from_secs(20))
                .expect("watermarks");
            (p, high)
        })
        .collect()
}
