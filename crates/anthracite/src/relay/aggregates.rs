//! The aggregator's clock: runs the series timers and hands the aggregates to an internal
//! ingestor (so they take the ordinary route → queue path and are neither rewritten nor
//! aggregated again), re-reads changed rule files, and writes the state file at shutdown.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::aggregator::{Aggregation, state, unix_now};
use crate::config::aggregation::{AggregationConfig, read_rewrite, read_rules};
use crate::ingest::{Pipeline, Source};

/// Longest sleep between two looks at the timers: a series created meanwhile is due no
/// earlier than one period after its creation, so ticks are late by at most this.
const POLL: Duration = Duration::from_millis(50);

/// Restores the state file, if any (before receivers start).
pub(super) fn restore(aggregation: &Aggregation, config: &AggregationConfig) {
    let Some(dir) = &config.state_dir else {
        return;
    };
    match state::restore(&mut aggregation.lock(), dir) {
        Ok(0) => {}
        Ok(n) => info!(series = n, dir = %dir.display(), "aggregator state restored"),
        Err(e) => error!(error = %e, "aggregator state not restored"),
    }
}

/// A rule file and the modification time of the version in force.
struct Watched {
    path: PathBuf,
    seen: Option<SystemTime>,
}

impl Watched {
    fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            seen: mtime(path),
        }
    }

    /// True when the file changed (or appeared, or vanished) since it was last seen.
    fn changed(&mut self) -> bool {
        let now = mtime(&self.path);
        if now == self.seen {
            return false;
        }
        self.seen = now;
        true
    }
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Runs until `stop`, then writes the state file (when configured).
pub(super) async fn run(
    aggregation: Arc<Aggregation>,
    config: AggregationConfig,
    pipeline: Pipeline,
    stop: CancellationToken,
) {
    let mut ingestor = pipeline.ingestor(Source::Internal);
    let mut rules = config.rules_file.as_deref().map(Watched::new);
    let mut rewrite = config.rewrite_file.as_deref().map(Watched::new);
    let mut next_check = tokio::time::Instant::now() + config.reload_interval;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(POLL) => {}
        }
        {
            let mut core = aggregation.lock();
            core.tick(unix_now(), &mut |name, interval, value| {
                let _ = ingestor.push(name.as_bytes(), interval, value);
            });
        }
        if ingestor.pending_datapoints() > 0 {
            ingestor.flush().await;
        }
        if tokio::time::Instant::now() >= next_check {
            next_check = tokio::time::Instant::now() + config.reload_interval;
            reload(&aggregation, rules.as_mut(), rewrite.as_mut());
        }
    }
    ingestor.flush().await;
    if let Some(dir) = &config.state_dir {
        match state::save(&aggregation.lock(), dir) {
            Ok(n) => info!(series = n, dir = %dir.display(), "aggregator state written"),
            Err(e) => error!(error = %e, "aggregator state not written: open intervals are lost"),
        }
    } else {
        let s = aggregation.stats();
        if s.buffered > 0 {
            warn!(
                series = s.series,
                datapoints = s.buffered,
                "open aggregation intervals lost at shutdown (set aggregation.state_dir or destinations.spill.dir to keep them)"
            );
        }
    }
}

/// Re-reads the rule files that changed; a file that does not parse is refused whole.
fn reload(aggregation: &Aggregation, rules: Option<&mut Watched>, rewrite: Option<&mut Watched>) {
    if let Some(w) = rules
        && w.changed()
    {
        // carbon: a vanished rules file is an empty rule set.
        let read = if w.path.exists() {
            read_rules(&w.path)
        } else {
            Ok(Default::default())
        };
        match read {
            Ok(r) => {
                info!(file = %w.path.display(), rules = r.len(), "aggregation rules reloaded");
                aggregation.set_rules(r);
            }
            Err(e) => {
                aggregation.count_rejected_reload();
                error!(error = %e, "aggregation rules not reloaded: the rules in force stay");
            }
        }
    }
    if let Some(w) = rewrite
        && w.changed()
    {
        match read_rewrite(&w.path) {
            Ok(r) => {
                info!(file = %w.path.display(), "rewrite rules reloaded");
                aggregation.set_rewrite(r);
            }
            Err(e) => {
                aggregation.count_rejected_reload();
                error!(error = %e, "rewrite rules not reloaded: the rules in force stay");
            }
        }
    }
}
