//! The Kafka source in a relay of this process, against one real Apache Kafka 4.x broker
//! (KRaft, from Maven Central, started by `anthracite_testkit::kafka`): a backfill from a
//! timestamp, bad input of every kind, the lag while fetching is paused, the broker-side
//! group protocol, and the test support itself. One test binary, one
//! broker; consumer groups of `anthracite` processes and the Kafka destination are the
//! binary's own suite (`tests/kafka` at the workspace root).

mod broker;
mod group;
mod source;
