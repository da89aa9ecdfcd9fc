//! Kafka as a source (consumer groups of `anthracite` processes) and as a destination,
//! against one real Apache Kafka 4.1.1 broker (KRaft, from Maven Central, started by
//! `tests/support_kafka/`). One test binary, one broker; the tests take turns
//! (`support_kafka::broker::exclusive`) because one of them stops the broker and the others
//! run fleets of relays on two cores.

#[path = "../support_kinesis/sink.rs"]
#[allow(dead_code)]
mod sink;
#[path = "../support/mod.rs"]
mod support;
#[path = "../support_kafka/mod.rs"]
mod support_kafka;

mod broker;
mod common;
mod group;
mod pipeline;
mod source;
