//! Kafka test support: one real Apache Kafka 4.1.1 broker per test binary (KRaft, single
//! node, from Maven Central: [`broker`]), clients that produce and inspect topics with
//! librdkafka ([`client`]), and fleets of `anthracite` processes ([`fleet`]). Binaries
//! including this also include `mod support;` (processes stopped by PID) and the Kinesis
//! support's pickle sink.

#![allow(dead_code)]

pub mod broker;
pub mod client;
pub mod fleet;

#[allow(unused_imports)]
pub use crate::support::wait_for;
