//! Kinesis with `anthracite` processes: an edge relay writing a stream (kinesalite, from npm,
//! pinned in the testkit's `servers/kinesalite/`) read by another, and fleets of relays sharing
//! a stream through a lease table in DynamoDB Local (from Maven Central,
//! `servers/dynamodb-local/`). One test binary (one link) for the group; the source in a relay
//! of the test process is `crates/anthracite-kinesis`'s own suite.

mod destination;
mod fleet;
/// The in-process relay and source of the crate's own suite (one file for both suites; this one
/// uses part of it).
#[path = "../../crates/anthracite-kinesis/tests/source/harness.rs"]
#[allow(dead_code)]
mod harness;
mod leases;
mod pause;

/// The `anthracite` binary this test run built, as a relay process named `name` to start.
fn anthracite(name: &str) -> anthracite_testkit::RelayCommand {
    anthracite_testkit::RelayCommand::new(env!("CARGO_BIN_EXE_anthracite")).name(name)
}
