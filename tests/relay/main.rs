//! Integration tests of the relay itself over real loopback sockets: receivers, destinations,
//! spill, the command line, and the codecs against hostile input and carbon's hash vectors.
//! One test binary (one link) for the whole group.

mod admin;
mod aggregator;
mod cli;
mod destinations;
mod embedding;
mod features;
mod hash_vectors;
mod hostile;
mod hung;
mod line;
mod logs;
mod memory;
mod overload;
mod pickle;
mod pickle_malicious;
mod reload;
mod repository;
mod spill;
mod spill_log;
mod tls;

/// The `anthracite` binary this test run built, as a relay process named `name` to start.
fn anthracite(name: &str) -> anthracite_testkit::RelayCommand {
    anthracite_testkit::RelayCommand::new(env!("CARGO_BIN_EXE_anthracite")).name(name)
}
