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

/// Polls `cond` every 50 ms until it holds; panics with `what` after `limit`. A deadline for
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
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
