//! anthracite against the real carbon 1.1.10 (from PyPI, in the venv the test support builds):
//! carbon-cache end to end, carbon-relay differential runs, carbon.conf.example, Python's
//! pickle. One test binary (one link) for the whole group.

#[path = "../support/mod.rs"]
mod support;

mod conf_example;
mod differential;
mod differential_aggregator;
mod differential_dropin;
mod e2e;
mod pickle_python;
mod protobuf_receiver;
mod support_selftest;
