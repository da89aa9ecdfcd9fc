//! Emits the relay's own metrics into the stream every interval, routed like any datapoint.
//!
//! Names follow carbon: `<prefix>.relays.<host>-<instance>.<leaf>` and, per destination,
//! `….destinations.<host with . → _>:<port>:<instance>.<leaf>`. Counts are per interval.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::names::carbon as leaf;
use super::stats::{Source, StatsSnapshot};
use crate::config::TelemetryConfig;
use crate::ingest::{Pipeline, unix_now};
use crate::queue::DestinationDropReason;

/// carbon's destination component: `host:port:instance` with dots replaced by underscores
/// (`None` when there is no instance, as carbon's `%s` formatting gives).
pub fn destination_component(host: &str, port: u16, instance: Option<&str>) -> String {
    format!("{}:{}:{}", host, port, instance.unwrap_or("None")).replace('.', "_")
}

/// Builds one interval's datapoints from two snapshots.
pub fn interval_datapoints(
    root: &str,
    components: &[String],
    prev: &StatsSnapshot,
    now: &StatsSnapshot,
    peaks: &[u64],
) -> Vec<(String, f64)> {
    let received = |s: &StatsSnapshot| -> u64 {
        s.received_by_source
            .iter()
            .filter(|(src, _)| *src != Source::Internal)
            .map(|(_, n)| n)
            .sum()
    };
    let mut out = vec![
        (
            format!("{root}.{}", leaf::METRICS_RECEIVED),
            received(now).saturating_sub(received(prev)) as f64,
        ),
        (
            format!("{root}.{}", leaf::ACTIVE_CONNECTIONS),
            now.active_connections as f64,
        ),
        (
            format!("{root}.{}", leaf::INVALID_DATAPOINTS),
            now.invalid.total().saturating_sub(prev.invalid.total()) as f64,
        ),
    ];
    for (i, d) in now.destinations.iter().enumerate() {
        let (Some(p), Some(component)) = (prev.destinations.get(i), components.get(i)) else {
            continue;
        };
        let base = format!("{root}.destinations.{component}");
        let full = DestinationDropReason::QueueFull;
        out.push((
            format!("{base}.{}", leaf::ATTEMPTED_RELAYS),
            d.routed.saturating_sub(p.routed) as f64,
        ));
        out.push((
            format!("{base}.{}", leaf::SENT),
            d.sent.saturating_sub(p.sent) as f64,
        ));
        out.push((
            format!("{base}.{}", leaf::BATCHES_SENT),
            d.messages.saturating_sub(p.messages) as f64,
        ));
        out.push((
            format!("{base}.{}", leaf::FULL_QUEUE_DROPS),
            d.dropped(full).saturating_sub(p.dropped(full)) as f64,
        ));
        out.push((
            format!("{base}.{}", leaf::RELAY_MAX_QUEUE_LENGTH),
            peaks.get(i).copied().unwrap_or(0) as f64,
        ));
    }
    out
}

/// Runs until `stop` is cancelled, emitting one set of datapoints per interval.
pub async fn run(pipeline: Pipeline, config: TelemetryConfig, interval: Duration, stop: CancellationToken) {
    let root = config.metric_root();
    let components: Vec<String> = pipeline
        .router()
        .destinations()
        .iter()
        .map(|d| destination_component(&d.host, d.port, d.instance.as_deref()))
        .collect();
    let mut ingestor = pipeline.ingestor(Source::Internal);
    let mut prev = pipeline.stats().snapshot();
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let now = pipeline.stats().snapshot();
        let peaks: Vec<u64> = pipeline
            .stats()
            .destinations()
            .iter()
            .map(|d| d.depth().take_peak())
            .collect();
        let ts = unix_now();
        for (name, value) in interval_datapoints(&root, &components, &prev, &now, &peaks) {
            ingestor.push(name.as_bytes(), ts, value);
        }
        ingestor.flush().await;
        prev = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destination_component_matches_carbon() {
        assert_eq!(
            destination_component("127.0.0.1", 2104, Some("a")),
            "127_0_0_1:2104:a"
        );
        assert_eq!(
            destination_component("cache.example.com", 2004, None),
            "cache_example_com:2004:None"
        );
    }
}
