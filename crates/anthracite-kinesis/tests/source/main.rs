//! The Kinesis source in a relay of this process, against kinesalite (from npm, started by the
//! testkit): lines and KPL records, start positions, checkpoints, resharding, throttles, a
//! full downstream; and every KPL vector of `tests/compat/` through the codec. One test binary
//! (one kinesalite) for the group; the fleets of `anthracite` processes are the binary's own
//! suite (`tests/kinesis` at the workspace root).

mod harness;
mod ingest;
mod kpl_vectors;
mod resilience;
