//! Kafka with `anthracite` processes, as a source (consumer groups) and as a destination (the
//! durable pipeline), against one real Apache Kafka broker (KRaft, from Maven Central, started by
//! `anthracite_testkit::kafka`). One test binary, one broker; the two tests that stop or freeze
//! the broker each run alone (`anthracite_testkit::kafka::exclusive`), the fleets that leave it
//! running run beside each other on their own topics and groups (`shared`).

mod failover;
mod group;
mod pipeline;

/// The `anthracite` binary this test run built, as a relay process named `name` to start.
fn anthracite(name: &str) -> anthracite_testkit::RelayCommand {
    anthracite_testkit::RelayCommand::new(env!("CARGO_BIN_EXE_anthracite")).name(name)
}
