//! Kinesis test support: a real local Kinesis (kinesalite, pinned in `tests/kinesalite/`), a
//! fault-injecting (or recording) HTTP proxy, a pickle sink that counts what the relay
//! delivers, a real DynamoDB (DynamoDB Local, `tests/dynamodb-local/`) and fleets of relay
//! processes sharing a lease table. Binaries including this also include `mod support;`
//! (processes stopped by PID).

#![allow(dead_code)]

pub mod dynamodb;
pub mod fleet;
pub mod harness;
pub mod kinesalite;
pub mod proxy;
pub mod sink;

#[allow(unused_imports)]
pub use crate::support::{require_tool, wait_for};
