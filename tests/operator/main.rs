//! What an operator runs around a relay, each against the real tool: the status page in a
//! real browser (headless Chromium), the alert rules under `promtool`, the Grafana
//! dashboard's queries through a real Prometheus scraping a relay that also reads a Kinesis
//! stream (kinesalite, leases in DynamoDB Local) and a Kafka topic (one KRaft broker), the
//! Debian package, and the README's quick start exactly as written. One test binary (one
//! link) for the group, one server of each kind; the Debian tools are installed by the test
//! support when missing.

mod deb;
mod prometheus;
mod quickstart;
mod status_page;

/// The `anthracite` binary this test run built, as a relay process named `name` to start.
fn anthracite(name: &str) -> anthracite_testkit::RelayCommand {
    anthracite_testkit::RelayCommand::new(env!("CARGO_BIN_EXE_anthracite")).name(name)
}
