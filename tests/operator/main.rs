//! What an operator runs around a relay, each against the real tool: the status page in a
//! real browser (headless Chromium), the alert rules under `promtool`, the Grafana
//! dashboard's queries through a real Prometheus scraping a relay that also reads a Kinesis
//! stream (kinesalite, leases in DynamoDB Local) and a Kafka topic (one KRaft broker), the
//! Debian package, and the README's quick start exactly as written. One test binary (one
//! link) for the group, one server of each kind; the Debian tools are installed by the test
//! support when missing.

#[path = "../support/mod.rs"]
mod support;
#[path = "../support_kafka/mod.rs"]
mod support_kafka;
#[path = "../support_kinesis/mod.rs"]
mod support_kinesis;

mod deb;
mod prometheus;
mod quickstart;
mod status_page;
