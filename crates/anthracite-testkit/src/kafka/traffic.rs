//! What the Kafka suites share (the binary's consumer groups and pipeline, the crate's source):
//! relay configurations, datapoint names that say where they came from, and counting what the
//! sinks received.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::http::{get, parse_metrics, sum};
use anthracite_sink::{Received, Sink};

/// Deadline for a hung step (never a timing assertion).
pub const LONG: Duration = Duration::from_secs(120);

/// The group settings every consumer test uses: a dead member is noticed within seconds
/// (the broker's minimum session timeout is 6 s), commits are frequent.
pub const GROUP_PROPERTIES: &str = "properties = { \"session.timeout.ms\" = \"6000\", \"heartbeat.interval.ms\" = \"500\", \"statistics.interval.ms\" = \"1000\" }";

/// A relay that reads `topic` in `group` and delivers pickle to `sinks` (`host:port:instance`).
pub fn consumer_toml(
    bootstrap: &str,
    topic: &str,
    group: &str,
    sinks: &[String],
    admin: u16,
    extra_kafka: &str,
) -> String {
    let servers: Vec<String> = sinks.iter().map(|s| format!("{s:?}")).collect();
    format!(
        "[listen]\nline_tcp = \"\"\npickle_tcp = \"\"\n\
         [destinations]\nservers = [{}]\nbackoff_min_ms = 20\nbackoff_max_ms = 200\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 10\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n\
         [[kafka]]\nbrokers = [\"{bootstrap}\"]\ntopics = [\"{topic}\"]\ngroup_id = \"{group}\"\n\
         commit_interval_ms = 200\n{GROUP_PROPERTIES}\n{extra_kafka}\n",
        servers.join(", ")
    )
}

/// `tag.p<partition>.i<index>`: the index of a message in its partition is its offset on a
/// fresh topic written in order.
pub fn name(tag: &str, partition: i32, index: i64) -> String {
    format!("{tag}.p{partition}.i{index}")
}

/// `(partition, index)` of a name made by [`name`] with `tag`, `None` for other names.
pub fn parse_name(tag: &str, name: &str) -> Option<(i32, i64)> {
    let rest = name.strip_prefix(tag)?.strip_prefix(".p")?;
    let (p, i) = rest.split_once(".i")?;
    Some((p.parse().ok()?, i.parse().ok()?))
}

/// One message per datapoint: `indices` of every partition, as Graphite lines.
pub fn line_messages(
    tag: &str,
    partitions: i32,
    indices: std::ops::Range<i64>,
) -> Vec<(i32, Vec<u8>)> {
    let now = crate::unix_now();
    let mut out = Vec::new();
    for i in indices {
        for p in 0..partitions {
            out.push((p, format!("{} {i} {now}\n", name(tag, p, i)).into_bytes()));
        }
    }
    out
}

/// How many times each name with `tag` arrived.
pub fn counts(received: &Sink, tag: &str) -> BTreeMap<(i32, i64), usize> {
    let mut m = BTreeMap::new();
    for Received { path: n, .. } in received.received() {
        if let Some(k) = parse_name(tag, &n) {
            *m.entry(k).or_insert(0) += 1;
        }
    }
    m
}

/// Waits until every one of `expected` names with `tag` arrived at least once.
pub async fn wait_delivered(received: &Sink, tag: &str, expected: usize, what: &str) {
    let end = tokio::time::Instant::now() + LONG;
    loop {
        let got = counts(received, tag).len();
        if got >= expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "{what}: {got} of {expected} distinct datapoints delivered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The sum of `name` (labels containing `labels`) in a relay's `/metrics`; 0 when the relay
/// does not answer.
pub fn metric(admin: SocketAddr, name: &str, labels: &[(&str, &str)]) -> f64 {
    match get(admin, "/metrics") {
        Ok((200, body)) => sum(&parse_metrics(&body), name, labels),
        _ => 0.0,
    }
}
