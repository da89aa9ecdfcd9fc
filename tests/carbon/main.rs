//! anthracite against the real carbon 1.1.10 (from PyPI, in the venv the test support builds):
//! carbon-cache end to end, carbon-relay differential runs, carbon.conf.example, Python's
//! pickle. One test binary (one link) for the whole group.

mod conf_example;
mod differential;
mod differential_aggregator;
mod differential_dropin;
mod e2e;
mod engine;
mod pickle_python;
mod protobuf_receiver;
mod support_selftest;
mod templates;

/// The `anthracite` binary this test run built, as a relay process named `name` to start.
fn anthracite(name: &str) -> anthracite_testkit::RelayCommand {
    anthracite_testkit::RelayCommand::new(env!("CARGO_BIN_EXE_anthracite")).name(name)
}
