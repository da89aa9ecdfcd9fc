//! The destination's producer: librdkafka's producer, its delivery reports as futures, its
//! client errors counted, and a polling thread that waits without spinning.
//!
//! rust-rdkafka's `FutureProducer` polls on its own thread in slices of 100 ms, and each slice
//! ends in a busy loop: `BaseProducer::poll` polls until its deadline with the time left
//! truncated to whole milliseconds, which is 0 (return at once) for the last millisecond. That
//! is about 1 ms of CPU per slice, 10 ms per second, with nothing to send. The thread here polls
//! in slices of [`POLL_SLICE`], so the same busy millisecond comes once per slice. Delivery
//! reports do not wait for a slice to end: each one wakes the thread as it arrives.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use metrics::{Counter, counter};
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, ProducerContext};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use crate::config::KafkaTarget;
use crate::metric_names::facade as names;

/// How long one poll of the producer's thread lasts: each ends in about 1 ms of busy polling
/// (see the module documentation), and a dropped producer is destroyed at the end of the slice
/// under way.
pub const POLL_SLICE: Duration = Duration::from_secs(5);

/// The outcome of one message: acknowledged, or librdkafka's error.
pub type Delivery = oneshot::Receiver<Result<(), String>>;

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

/// The producer's client context: librdkafka's errors, counted and logged once per episode
/// (from the first error until a write is acknowledged again) instead of at ERROR each time,
/// and each message's delivery report handed to its waiting write. Its clones (one in each
/// producer built) share the episode.
#[derive(Clone)]
pub struct Events {
    /// The destination's name, in log lines.
    pub destination: Arc<str>,
    errors: Counter,
    /// An episode of errors is open.
    failing: Arc<AtomicBool>,
}

impl Events {
    /// The context of `destination`'s producers.
    pub fn new(destination: &str) -> Self {
        Self {
            destination: destination.into(),
            errors: counter!(names::PRODUCER_ERRORS, "destination" => destination.to_string()),
            failing: Arc::new(AtomicBool::new(false)),
        }
    }

    /// A write was acknowledged: the episode of errors, if any, is over.
    pub fn acknowledged(&self) {
        if self.failing.swap(false, Relaxed) {
            info!(destination = %self.destination, "kafka producer: the brokers acknowledge again");
        }
    }
}

impl ClientContext for Events {
    fn error(&self, error: KafkaError, reason: &str) {
        self.errors.increment(1);
        if !self.failing.swap(true, Relaxed) {
            warn!(destination = %self.destination, %error, reason, "kafka producer: client error (further ones counted in anthracite_kafka_producer_errors_total, not logged, until the brokers acknowledge again)");
        } else {
            debug!(destination = %self.destination, %error, reason, "kafka producer: client error");
        }
    }
}

impl ProducerContext for Events {
    type DeliveryOpaque = Box<oneshot::Sender<Result<(), String>>>;

    fn delivery(&self, result: &DeliveryResult<'_>, waiting: Self::DeliveryOpaque) {
        // The write may have given up on the message (hung, aborted): nobody to tell then.
        let _ = waiting.send(result.as_ref().map(|_| ()).map_err(|(e, _)| e.to_string()));
    }
}

/// A producer and its polling thread. Clones share both; when the last clone is dropped the
/// thread stops at the end of its slice and destroys the producer there, off the runtime
/// (destroying a producer waits for librdkafka's threads).
#[derive(Clone)]
pub struct Producer(Arc<Running>);

struct Running {
    client: Arc<BaseProducer<Events>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

impl Producer {
    /// A producer for `target` reporting to `events`, its polling thread started.
    pub fn new(target: &KafkaTarget, events: Events) -> std::io::Result<Self> {
        let client: BaseProducer<Events> = client_config(target)
            .create_with_context(events)
            .map_err(|e| {
                std::io::Error::other(format!(
                    "kafka producer cannot be created (a property librdkafka refuses?): {e}"
                ))
            })?;
        let client = Arc::new(client);
        let stop = Arc::new(AtomicBool::new(false));
        let (polled, stopped) = (client.clone(), stop.clone());
        std::thread::Builder::new()
            .name("kafka-producer".into())
            .spawn(move || {
                while !stopped.load(Relaxed) {
                    polled.poll(POLL_SLICE);
                }
            })?;
        Ok(Self(Arc::new(Running { client, stop })))
    }

    /// librdkafka's producer, to send with and to read metadata from.
    pub fn base(&self) -> &BaseProducer<Events> {
        &self.0.client
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MessageFormat;
    use rdkafka::producer::BaseRecord;

    /// The polling thread is what hands delivery reports to their writes: a message librdkafka
    /// gives up on (no broker listens) must reach its waiting write as an error.
    #[tokio::test]
    async fn a_message_nobody_takes_reports_its_error_to_the_write() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = closed.local_addr().expect("its address").port();
        drop(closed);
        let target = KafkaTarget {
            brokers: format!("127.0.0.1:{port}"),
            topic: "nowhere".into(),
            format: MessageFormat::Lines,
            client_id: "test".into(),
            properties: [("message.timeout.ms".to_string(), "200".to_string())].into(),
        };
        let producer = Producer::new(&target, Events::new("test")).expect("a producer");
        let (delivered, delivery) = oneshot::channel();
        let record = BaseRecord::<[u8], [u8], _>::with_opaque_to("nowhere", Box::new(delivered))
            .partition(0)
            .payload(&b"a.b 1 1700000000\n"[..]);
        assert!(
            producer.base().send(record).is_ok(),
            "the message is queued"
        );
        let report = tokio::time::timeout(Duration::from_secs(30), delivery)
            .await
            .expect("a delivery report within 30 s")
            .expect("the report reaches the write");
        assert!(report.is_err(), "no broker acknowledged it: {report:?}");
    }
}
