//! Kafka test support: one real Apache Kafka 4.1.1 broker per test binary (KRaft, single
//! node, from Maven Central: [`broker`]), clients that produce and inspect topics with
//! librdkafka ([`client`]), and fleets of `anthracite` processes ([`fleet`]). Binaries
//! including this also include `mod support;` (processes stopped by PID) and the Kinesis
//! support's pickle sink.

#![allow(dead_code)]

pub mod broker;
pub mod client;
pub mod fleet;

use std::future::Future;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Panics with `hint` unless `tool arg` runs and succeeds (a tool the test support needs).
pub fn require_tool(tool: &str, arg: &str, hint: &str) {
    let ok = Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "`{tool}` is not on PATH: {hint}");
}

/// Polls `cond` every 100 ms until it holds; panics with `what` after `limit`. A deadline for
/// a hung test, never a timing assertion.
pub async fn wait_for<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + limit;
    loop {
        if cond().await {
            return;
        }
        if tokio::time::Instant::now() > end {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
