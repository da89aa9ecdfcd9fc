//! The Kinesis Data Streams source against kinesalite (from npm, pinned in the testkit's
//! `servers/kinesalite/`), and fleets of relays sharing a stream through a lease table in
//! DynamoDB Local (from Maven Central, `servers/dynamodb-local/`). One test binary (one link) for
//! the whole group.

mod destination;
mod fleet;
mod harness;
mod ingest;
mod kpl_vectors;
mod leases;
mod resilience;

/// The `anthracite` binary this test run built, as a relay process named `name` to start.
fn anthracite(name: &str) -> anthracite_testkit::RelayCommand {
    anthracite_testkit::RelayCommand::new(env!("CARGO_BIN_EXE_anthracite")).name(name)
}
