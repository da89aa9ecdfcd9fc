//! Kafka with `anthracite` processes, as a source (consumer groups) and as a destination (the
//! durable pipeline), against one real Apache Kafka broker (KRaft, from Maven Central, started by
//! `anthracite_testkit::kafka`). One test binary, one broker; the tests take turns
//! (`anthracite_testkit::kafka::exclusive`) because two of them stop or freeze the broker and
//! the others run fleets of relays on two cores.

mod failover;
mod group;
mod pipeline;

/// The `anthracite` binary this test run built, as a relay process named `name` to start.
fn anthracite(name: &str) -> anthracite_testkit::RelayCommand {
    anthracite_testkit::RelayCommand::new(env!("CARGO_BIN_EXE_anthracite")).name(name)
}
