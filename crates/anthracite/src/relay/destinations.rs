//! The destinations of a running relay: one queue and one task each, active (in the current
//! routing generation) or retiring (removed by a reload, still holding data).
//!
//! A retiring destination is handed to its own retirement task, which (1) waits until no
//! ingestor can push into its queue any more (every earlier routing generation that indexes
//! it is idle), (2) closes the queue so its destination task delivers what is left, and (3)
//! with a spill log, once that is done or the destination is known dead or the shutdown grace
//! period has passed, writes what is still in memory to the log and closes it (a destination
//! added back later replays it); a memory-only queue keeps delivering until the relay stops.
//! A reload that adds the destination back before (3) revives it: the queue takes pushes again
//! and a fresh task serves it. Relay shutdown interrupts retirements and settles their queues
//! with the others.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::RelayError;
use crate::destination::{self, DestinationConfig, DestinationSignals};
use crate::ingest::Routing;
use crate::queue::{DestinationQueue, DestinationStats, WhenFull};

/// How often a retirement checks whether the earlier generations are idle (a reload is rare;
/// polling keeps the data path free of wake-ups).
const IDLE_POLL: Duration = Duration::from_millis(10);

/// Opens a destination's queue: with its spill log (recovering what a previous run or a
/// previous retirement left there), or memory only.
pub(super) fn open_queue(d: &DestinationConfig) -> Result<Arc<DestinationQueue>, RelayError> {
    let s = Arc::new(DestinationStats::new(d.spec.to_string()));
    let q = match &d.spill {
        Some(spill) => {
            let q = DestinationQueue::with_spill(d.queue, s, spill.clone()).map_err(|source| {
                RelayError::Spill {
                    destination: d.spec.to_string(),
                    source,
                }
            })?;
            info!(destination = %d.spec, dir = %spill.dir.display(),
                when_full = d.queue.when_full.as_str(),
                recovered = q.queued_disk(), "spill log open");
            q
        }
        None => {
            if d.queue.when_full == WhenFull::DropNewest {
                info!(destination = %d.spec,
                    "no spill directory: a full queue drops the newest datapoints (as carbon-relay)");
            }
            DestinationQueue::new(d.queue, s)
        }
    };
    Ok(Arc::new(q))
}

/// The relay-wide shutdown signals every destination's own signals derive from.
#[derive(Clone, Debug, Default)]
pub(super) struct ShutdownSignals {
    /// Cancelled when shutdown drains the queues.
    pub(super) drain: CancellationToken,
    /// Cancelled when the grace period is over.
    pub(super) abort: CancellationToken,
    /// Cancelled when shutdown begins: retirements stop and hand their destination back.
    pub(super) stop_retiring: CancellationToken,
}

/// A destination with its queue and task.
pub(super) struct Live {
    pub(super) config: DestinationConfig,
    pub(super) queue: Arc<DestinationQueue>,
    /// Its own signals (children of the relay's), so it can be drained or stopped alone.
    signals: DestinationSignals,
    /// The destination task (`None` once it ended and was joined).
    task: Option<JoinHandle<()>>,
}

impl Live {
    /// Starts a task for `queue`.
    pub(super) fn start(
        config: DestinationConfig,
        queue: Arc<DestinationQueue>,
        signals: &ShutdownSignals,
    ) -> Self {
        let signals = DestinationSignals {
            drain: signals.drain.child_token(),
            abort: signals.abort.child_token(),
        };
        let task = tokio::spawn(destination::run(
            config.clone(),
            queue.clone(),
            signals.clone(),
        ));
        Self {
            config,
            queue,
            signals,
            task: Some(task),
        }
    }

    /// Waits for the task, at most `limit` (`None`: as long as it takes); true once it ended.
    async fn wait(&mut self, limit: Option<Duration>) -> bool {
        let Some(task) = self.task.as_mut() else {
            return true;
        };
        let ended = match limit {
            Some(limit) => tokio::time::timeout(limit, task).await.is_ok(),
            None => {
                let _ = task.await;
                true
            }
        };
        if ended {
            self.task = None;
        }
        ended
    }

    /// Stops the task at once (in-flight data goes back to the queue) and waits for it.
    async fn stop(&mut self) {
        self.signals.abort.cancel();
        self.wait(None).await;
    }

    /// Stops the task at once (in-flight data goes back to the queue) and starts a new one
    /// with `config` on the same queue (a reload that changed how the destination is talked
    /// to, or revived it).
    pub(super) async fn restart(
        mut self,
        config: DestinationConfig,
        signals: &ShutdownSignals,
    ) -> Self {
        self.stop().await;
        Self::start(config, self.queue, signals)
    }

    /// Waits for the task; after `deadline` it is stopped at once.
    pub(super) async fn join(&mut self, deadline: tokio::time::Instant) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if !self.wait(Some(left)).await {
            self.stop().await;
        }
    }
}

/// How a retirement ended.
pub(super) enum Outcome {
    /// A reload added the destination back: here it is, its queue open again.
    Revived(Live),
    /// The relay is shutting down: settle it with the others.
    Interrupted(Live),
    /// Everything was delivered, or the rest is in its spill log (closed).
    Finalized,
}

/// A destination being retired.
pub(super) struct Retiring {
    pub(super) config: DestinationConfig,
    revive: CancellationToken,
    task: JoinHandle<Outcome>,
}

impl Retiring {
    /// Starts retiring `live`; `generations` are the earlier routing generations (those that
    /// may still route to it); `removed` is the relay's list of removed destinations' queues
    /// (for the books), from which it takes itself once finalized.
    pub(super) fn start(
        live: Live,
        generations: Vec<Arc<Routing>>,
        grace: Duration,
        signals: &ShutdownSignals,
        removed: Arc<Mutex<Vec<Arc<DestinationQueue>>>>,
    ) -> Self {
        let revive = CancellationToken::new();
        let config = live.config.clone();
        let task = tokio::spawn(retire(
            live,
            generations,
            grace,
            revive.clone(),
            signals.stop_retiring.clone(),
            removed,
        ));
        Self {
            config,
            revive,
            task,
        }
    }

    /// True once the retirement ended on its own.
    pub(super) fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Takes the destination back: `Some(live)` while its queue still exists, `None` once it
    /// was finalized (its data, if any, is in its spill log).
    pub(super) async fn revive(self) -> Option<Live> {
        self.revive.cancel();
        match self.task.await {
            Ok(Outcome::Revived(live) | Outcome::Interrupted(live)) => Some(live),
            Ok(Outcome::Finalized) | Err(_) => None,
        }
    }

    /// For shutdown: the destination, if its retirement had not finished.
    pub(super) async fn interrupt(self) -> Option<Live> {
        match self.task.await {
            Ok(Outcome::Revived(live) | Outcome::Interrupted(live)) => Some(live),
            Ok(Outcome::Finalized) | Err(_) => None,
        }
    }
}

async fn retire(
    live: Live,
    generations: Vec<Arc<Routing>>,
    grace: Duration,
    revive: CancellationToken,
    stop: CancellationToken,
    removed: Arc<Mutex<Vec<Arc<DestinationQueue>>>>,
) -> Outcome {
    let name = live.config.spec.to_string();
    // (1) No ingestor may push any more: every generation that routes to the queue is idle.
    while !generations.iter().all(|g| g.is_idle()) {
        tokio::select! {
            _ = revive.cancelled() => return Outcome::Revived(live),
            _ = stop.cancelled() => return Outcome::Interrupted(live),
            _ = tokio::time::sleep(IDLE_POLL) => {}
        }
    }
    drop(generations);
    // (2) Deliver what is left.
    live.queue.close();
    let mut live = live;
    let spill = live.queue.has_spill();
    if spill {
        // A destination known dead stops at once; its data stays in the log.
        live.signals.drain.cancel();
    }
    tokio::select! {
        _ = live.wait(spill.then_some(grace)) => {}
        _ = revive.cancelled() => {
            live.queue.reopen();
            return Outcome::Revived(live);
        }
        _ = stop.cancelled() => return Outcome::Interrupted(live),
    }
    // (3) Keep the rest on disk.
    live.stop().await;
    let (dropped, on_disk) = live.queue.shut_down().await;
    info!(destination = %name, left_on_disk = on_disk, dropped,
        "removed destination retired (what it held is in its spill log, replayed if it is added back)");
    removed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|q| !Arc::ptr_eq(q, &live.queue));
    Outcome::Finalized
}
