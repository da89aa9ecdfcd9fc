//! The Kinesis Data Streams source against kinesalite (from npm, pinned in
//! `tests/kinesalite/`), and fleets of relays sharing a stream through a lease table in
//! DynamoDB Local (from Maven Central, `tests/dynamodb-local/`). One test binary (one link) for
//! the whole group.

#[path = "../support/mod.rs"]
mod support;
#[path = "../support_kinesis/mod.rs"]
mod support_kinesis;

mod destination;
mod ingest;
mod kpl_vectors;
mod leases;
mod resilience;
