//! Kafka test support: one real Apache Kafka 4.1.1 broker per test binary (KRaft, single
//! node, from Maven Central: [`broker`]) and clients that produce and inspect topics with
//! librdkafka, not with anthracite's code ([`client`]).

pub mod broker;
pub mod client;
pub mod traffic;

pub use broker::{Broker, Turn, exclusive, shared};
