//! The clock of a carbon-c-relay configuration's aggregations: every 250 ms (carbon-c-relay's
//! expiry thread sleeps as long when idle) the buckets past their expiry are written and their
//! lines routed again like received lines; at shutdown, every completed bucket. It also
//! logs the episodes of the series bound: once when datapoints start being dropped for it,
//! once when a tick passes without such a drop. On the same clock, the queues of cluster
//! members that are down move to the other members (`c_relay_hand_over`).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::ingest::{Pipeline, Source, unix_now};
use crate::router::Strategy;

/// How often expired buckets are looked for, and queues of members that went down handed
/// over: the carbon-c-relay clock.
pub(super) const TICK: Duration = Duration::from_millis(250);

/// Runs until `stop`; the program is the pipeline's current one at each tick (a reload
/// keeps the buckets of the aggregations it keeps).
pub(super) async fn run(pipeline: Pipeline, stop: CancellationToken) {
    let mut ingestor = pipeline.ingestor(Source::Internal);
    let mut lines: Vec<u8> = Vec::new();
    let mut ends: Vec<usize> = Vec::new();
    let mut series_bound = LimitEpisode::new(
        "the open series bound",
        "datapoints of new series are dropped (limits.max_aggregation_series)",
    );
    let mut values_bound = LimitEpisode::new(
        "the bound on kept values",
        "datapoints of median, percentile, variance and stddev are dropped (limits.max_aggregation_values)",
    );
    let mut hand_over = super::c_relay_hand_over::HandOver::default();
    loop {
        let stopping = tokio::select! {
            _ = stop.cancelled() => true,
            _ = tokio::time::sleep(TICK) => false,
        };
        if !stopping {
            hand_over.tick(&pipeline.routing());
        }
        let router = pipeline.router();
        if let Strategy::CRelay(p) = router.strategy() {
            let mut state = p.aggregates.lock().unwrap_or_else(|e| e.into_inner());
            state.expire(&p.program, unix_now() as i64, stopping, &mut |line| {
                lines.extend_from_slice(line);
                ends.push(lines.len());
            });
            series_bound.observe(state.counts.series_limit, state.open_series());
            values_bound.observe(state.counts.values_limit, state.open_series());
        }
        let mut start = 0;
        for &end in &ends {
            let _ = ingestor.line(&lines[start..end]);
            start = end;
        }
        lines.clear();
        ends.clear();
        if ingestor.pending_datapoints() > 0 {
            ingestor.flush().await;
        }
        if stopping {
            break;
        }
    }
}

/// The episodes of one of the aggregations' bounds, for its log lines.
#[derive(Debug)]
struct LimitEpisode {
    /// The bound, and what it drops.
    bound: &'static str,
    drops: &'static str,
    /// The drop count at the last tick.
    seen: u64,
    /// The drop count when the current episode began, while one lasts.
    began: Option<u64>,
}

impl LimitEpisode {
    fn new(bound: &'static str, drops: &'static str) -> Self {
        Self {
            bound,
            drops,
            seen: 0,
            began: None,
        }
    }

    fn observe(&mut self, dropped: u64, open: usize) {
        let grew = dropped > self.seen;
        match (grew, self.began) {
            (true, None) => {
                tracing::warn!(
                    open_series = open,
                    "carbon-c-relay aggregations: {} is reached; {}",
                    self.bound,
                    self.drops
                );
                self.began = Some(self.seen);
            }
            (false, Some(began)) => {
                tracing::info!(
                    dropped = dropped - began,
                    open_series = open,
                    "carbon-c-relay aggregations: below {} again",
                    self.bound
                );
                self.began = None;
            }
            _ => {}
        }
        self.seen = dropped;
    }
}
