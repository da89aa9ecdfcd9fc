//! The Kinesis Data Streams source against kinesalite (from npm, pinned in
//! `tests/kinesalite/`). One test binary (one link) for the whole group.

#[path = "../support_kinesis/mod.rs"]
mod support_kinesis;

mod ingest;
mod kpl_vectors;
mod resilience;
