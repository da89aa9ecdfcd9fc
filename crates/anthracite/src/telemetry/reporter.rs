//! Emits the relay's own metrics into the stream every interval, routed like any datapoint.
//!
//! Names follow carbon: `<prefix>.relays.<host>-<instance>.<leaf>` and, per destination,
//! `….destinations.<host with . → _>:<port>:<instance>.<leaf>`; per Kinesis stream
//! `….kinesis.<stream>.<leaf>`. Counters are reported as their increase over the interval
//! (carbon's counts are per interval), gauges as sampled at report time. The values are the
//! relay's [figures](super::components), the same that `/metrics` renders.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::TelemetryConfig;
use super::components::destination_path;
use super::process::ProcessUsage;
use super::snapshot::StatsSnapshot;
use crate::figure::{Component, Fold, Kind};
use crate::ingest::{Pipeline, Source, unix_now};
use crate::metric_names::carbon as leaf;
use crate::queue::DestinationStats;

/// What the reporter and `/metrics` read from a running relay.
pub(crate) trait Books: Send + Sync {
    /// Every counter now: the ingest side, each destination in ring order, then destinations
    /// a reload removed that still hold data.
    fn snapshot(&self) -> StatsSnapshot;
    /// The live books of the same destinations (for carbon's `relayMaxQueueLength`, the
    /// peak depth since the previous report).
    fn destination_stats(&self) -> Vec<Arc<DestinationStats>>;
    /// Components of other sources with figures of their own (Kinesis streams).
    fn sources(&self) -> Vec<Component>;
}

/// Every component a relay reports: itself, its destinations, its other sources.
pub(crate) fn all_components(books: &dyn Books) -> Vec<Component> {
    let mut out = super::components::components(&books.snapshot());
    out.extend(books.sources());
    out
}

/// Turns components into carbon datapoints, one interval at a time.
#[derive(Debug)]
pub(crate) struct CarbonReport {
    root: String,
    /// Each counter's total at the previous report, by full name.
    last: HashMap<String, f64>,
}

impl CarbonReport {
    /// A report under `root` whose first interval counts from `baseline`.
    pub(crate) fn new(root: String, baseline: &[Component]) -> Self {
        let mut r = Self {
            root,
            last: HashMap::new(),
        };
        for (name, kind, value) in r.fold(baseline) {
            if kind == Kind::Counter {
                r.last.insert(name, value);
            }
        }
        r
    }

    /// Folds figures sharing a leaf; keeps the order of first appearance.
    fn fold(&self, components: &[Component]) -> Vec<(String, Kind, f64)> {
        let mut out: Vec<(String, Kind, f64)> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        for c in components {
            for f in &c.figures {
                let Some(l) = &f.carbon else { continue };
                let name = if c.path.is_empty() {
                    format!("{}.{}", self.root, l.name)
                } else {
                    format!("{}.{}.{}", self.root, c.path, l.name)
                };
                match index.get(&name) {
                    Some(&i) => {
                        let v = &mut out[i].2;
                        *v = match l.fold {
                            Fold::Sum => *v + f.value,
                            Fold::Max => v.max(f.value),
                        };
                    }
                    None => {
                        index.insert(name.clone(), out.len());
                        out.push((name, f.kind, f.value));
                    }
                }
            }
        }
        out
    }

    /// One interval's datapoints: counters as their increase since the previous call (a
    /// leaf seen for the first time counts from zero), gauges as they are.
    pub(crate) fn interval(&mut self, components: &[Component]) -> Vec<(String, f64)> {
        let folded = self.fold(components);
        let mut out = Vec::with_capacity(folded.len());
        for (name, kind, value) in folded {
            let v = match kind {
                Kind::Gauge => value,
                Kind::Counter => {
                    let prev = self.last.insert(name.clone(), value).unwrap_or(0.0);
                    (value - prev).max(0.0)
                }
            };
            out.push((name, v));
        }
        out
    }
}

/// Runs until `stop` is cancelled, emitting one set of datapoints per interval.
pub(crate) async fn run(
    pipeline: Pipeline,
    books: Arc<dyn Books>,
    config: TelemetryConfig,
    interval: Duration,
    stop: CancellationToken,
) {
    let root = config.metric_root();
    let mut ingestor = pipeline.ingestor(Source::Internal);
    let mut report = CarbonReport::new(root.clone(), &all_components(&*books));
    let mut usage = ProcessUsage::default();
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let ts = unix_now();
        let mut points = report.interval(&all_components(&*books));
        for d in books.destination_stats() {
            let peak = d.depth().take_peak();
            points.push((
                format!(
                    "{root}.{}.{}",
                    destination_path(d.name()),
                    leaf::RELAY_MAX_QUEUE_LENGTH
                ),
                peak as f64,
            ));
        }
        if let Some(cpu) = usage.cpu_percent() {
            points.push((format!("{root}.{}", leaf::CPU_USAGE), cpu));
        }
        if let Some(rss) = ProcessUsage::rss_bytes() {
            points.push((format!("{root}.{}", leaf::MEM_USAGE), rss as f64));
        }
        for (name, value) in points {
            // Counted like any datapoint if it is dropped; nothing more to do here.
            let _ = ingestor.push(name.as_bytes(), ts, value);
        }
        ingestor.flush().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figure::Figure;
    use crate::protocol::DropReason;
    use crate::queue::DestinationDropReason;
    use crate::telemetry::components::components;

    #[test]
    fn interval_has_carbon_leaves_and_counts_per_interval() {
        let ingest = crate::ingest::IngestStats::new();
        let dest = crate::queue::DestinationStats::new("h:1:a");
        let snapshot = || StatsSnapshot::collect(ingest.snapshot(), [&dest]);
        let mut report = CarbonReport::new("carbon.relays.x-a".into(), &components(&snapshot()));
        ingest.record_filtered(2, 3);
        dest.add_queued_until_connected(4);
        dest.add_spilled(5, 100);
        let mut drops = crate::protocol::DropCounts::default();
        drops.add(crate::protocol::DropReason::BadValue);
        ingest.record_parsed(Source::LineTcp, 10, &drops);
        ingest.record_parsed(Source::PickleTcp, 5, &drops);
        ingest.record_parsed(Source::Internal, 7, &Default::default());
        let points = report.interval(&components(&snapshot()));
        let get = |n: &str| points.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        assert_eq!(get("carbon.relays.x-a.blacklistMatches"), Some(2.0));
        assert_eq!(get("carbon.relays.x-a.whitelistRejects"), Some(3.0));
        // The relay's own datapoints are not counted as received (carbon's rule).
        assert_eq!(get("carbon.relays.x-a.metricsReceived"), Some(15.0));
        assert_eq!(get("carbon.relays.x-a.activeConnections"), Some(0.0));
        assert_eq!(
            get("carbon.relays.x-a.invalidDatapoints.bad_value"),
            Some(2.0)
        );
        assert_eq!(
            get("carbon.relays.x-a.invalidDatapoints.too_long"),
            Some(0.0)
        );
        let d = "carbon.relays.x-a.destinations.h:1:a";
        assert_eq!(get(&format!("{d}.queuedUntilConnected")), Some(4.0));
        assert_eq!(get(&format!("{d}.spilledDatapoints")), Some(5.0));
        assert_eq!(get(&format!("{d}.connected")), Some(0.0));
        for leafname in [
            "attemptedRelays",
            "sent",
            "batchesSent",
            "fullQueueDrops",
            "replayedDatapoints",
            "spillQueueDatapoints",
            "spillDiskBytes",
            "spillOldestAgeSeconds",
            "writeTimeouts",
            "fullWaits",
            "movedDatapoints.out",
            "movedDatapoints.in",
            "droppedDatapoints.queue_full",
            "droppedDatapoints.spill_full",
        ] {
            assert_eq!(get(&format!("{d}.{leafname}")), Some(0.0), "{leafname}");
        }
        // The next interval counts only what happened since.
        dest.add_spilled(1, 10);
        let points = report.interval(&components(&snapshot()));
        let get = |n: &str| points.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        assert_eq!(get(&format!("{d}.spilledDatapoints")), Some(1.0));
        assert_eq!(get("carbon.relays.x-a.metricsReceived"), Some(0.0));
    }

    /// Only `queue_full` reached the carbon self-metrics (`fullQueueDrops`); a spill
    /// log that could not take data dropped `spill_full` / `spill_io` datapoints that no series
    /// showed. Every reason of both kinds is a series: `droppedDatapoints.<reason>` per
    /// destination, `invalidDatapoints.<reason>` for the receivers, and the kernel's UDP drops.
    #[test]
    fn every_drop_reason_is_a_carbon_self_metric() {
        let ingest = crate::ingest::IngestStats::new();
        let dest = crate::queue::DestinationStats::new("h:1:a");
        let snapshot = || StatsSnapshot::collect(ingest.snapshot(), [&dest]);
        let mut report = CarbonReport::new("r".into(), &components(&snapshot()));
        for (i, r) in DestinationDropReason::ALL.into_iter().enumerate() {
            dest.add_dropped(r, i as u64 + 1);
        }
        let mut drops = crate::protocol::DropCounts::default();
        for r in DropReason::ALL {
            drops.add(r);
        }
        ingest.record_parsed(Source::LineTcp, 0, &drops);
        ingest.udp_kernel_dropped(3);
        let points = report.interval(&components(&snapshot()));
        let get = |n: &str| points.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        for (i, r) in DestinationDropReason::ALL.into_iter().enumerate() {
            let name = format!("r.destinations.h:1:a.droppedDatapoints.{}", r.as_str());
            assert_eq!(get(&name), Some(i as f64 + 1.0), "{name}");
        }
        for r in DropReason::ALL {
            let name = format!("r.invalidDatapoints.{}", r.as_str());
            assert_eq!(get(&name), Some(1.0), "{name}");
        }
        assert_eq!(get("r.udpKernelDrops"), Some(3.0));
    }

    #[test]
    fn figures_sharing_a_leaf_fold_by_sum_or_max() {
        let stream = |behind: [f64; 2], records: [u64; 2]| Component {
            path: "kinesis.s".into(),
            figures: (0..2)
                .flat_map(|i| {
                    [
                        Figure::gauge(behind[i]).carbon_folded("millisBehindLatest", Fold::Max),
                        Figure::counter(records[i]).carbon("recordsRead"),
                    ]
                })
                .collect(),
        };
        let mut report = CarbonReport::new("r".into(), &[stream([0.0, 0.0], [0, 0])]);
        let points = report.interval(&[stream([300.0, 1200.0], [10, 20])]);
        assert_eq!(
            points,
            vec![
                ("r.kinesis.s.millisBehindLatest".to_string(), 1200.0),
                ("r.kinesis.s.recordsRead".to_string(), 30.0),
            ]
        );
    }
}
