//! Integration tests of the relay itself over real loopback sockets: receivers, destinations,
//! spill, the command line, and the codecs against hostile input and carbon's hash vectors.
//! One test binary (one link) for the whole group.

#[path = "../support/mod.rs"]
mod support;

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
