//! One worker's side of the lease table for one stream: the renewer and taker loops, shard
//! sync, fenced checkpoints, release at shutdown, and the view the coordinator reads.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OnceCell, watch};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::held::{Fenced, Holder, LeaseGuard, Loss, Lost, fenced};
use super::lease::Checkpoint;
use super::sync::{Initial, plan};
use super::table::{Fence, LeaseTable, Outcome, TableError, Update};
use super::taker::{Act, Observer};
use crate::relay::source::checkpoint::StreamCheckpoint;
use crate::relay::source::shards::ListedShard;
use crate::relay::source::stats::{KinesisStats, LeaseLoss, LeaseMetrics, log_lease_loss};

/// How a worker uses the lease table.
#[derive(Clone, Debug)]
pub(crate) struct LeaseSettings {
    /// The stream (for logs).
    pub stream: String,
    /// This worker's `leaseOwner` value; unique among live workers.
    pub worker: String,
    /// A lease not renewed for this long (by the observer's clock) may be taken.
    pub duration: Duration,
    /// Where rows created when the table is first filled start.
    pub initial: Checkpoint,
    /// With `latest`: rows for shards already closed at first fill start as `SHARD_END`.
    pub skip_closed: bool,
}

/// A row as the coordinator needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RowView {
    pub parents: Vec<String>,
    pub ended: bool,
}

/// A held lease as the coordinator needs it.
#[derive(Clone, Debug)]
pub(crate) struct HeldView {
    pub guard: Arc<LeaseGuard>,
    pub tenure: u64,
    pub start: Checkpoint,
    /// A peer asked for the lease: stop the reader, commit, then [`Leases::release_handoff`].
    pub handoff: bool,
}

/// The table as of the last scan, and the leases held now.
#[derive(Clone, Debug, Default)]
pub(crate) struct LeaseView {
    pub rows: BTreeMap<String, RowView>,
    pub held: BTreeMap<String, HeldView>,
}

/// What one taker cycle did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Took {
    pub taken: Vec<String>,
    pub stolen: Vec<String>,
    /// Leases marked for handoff to this worker (their owners release them).
    pub marked: Vec<String>,
}

/// The worker's lease state for one stream, shared by the renewer, the taker, the checkpoint
/// store and the coordinator.
#[derive(Debug)]
pub(crate) struct Leases {
    table: Arc<dyn LeaseTable>,
    settings: LeaseSettings,
    migrate: Mutex<Option<StreamCheckpoint>>,
    ready: OnceCell<()>,
    holder: tokio::sync::Mutex<Holder>,
    observer: Mutex<Observer>,
    rng: Mutex<fastrand::Rng>,
    view: watch::Sender<Arc<LeaseView>>,
    wake: Notify,
    metrics: LeaseMetrics,
    failing: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section below is a plain read or assignment: a panic elsewhere cannot
    // leave the value half-updated.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Leases {
    /// `migrate`: a local checkpoint file's positions, written into the rows when this worker
    /// is the one that first fills the table.
    pub(crate) fn new(
        table: Arc<dyn LeaseTable>,
        settings: LeaseSettings,
        migrate: Option<StreamCheckpoint>,
        stats: Arc<KinesisStats>,
    ) -> Self {
        Self {
            holder: tokio::sync::Mutex::new(Holder::new(&settings.worker, settings.duration)),
            observer: Mutex::new(Observer::new(settings.duration)),
            rng: Mutex::new(fastrand::Rng::new()),
            metrics: LeaseMetrics::new(stats, &settings.worker),
            view: watch::Sender::new(Arc::new(LeaseView::default())),
            migrate: Mutex::new(migrate),
            ready: OnceCell::new(),
            wake: Notify::new(),
            failing: AtomicBool::new(false),
            table,
            settings,
        }
    }

    /// This worker's id.
    pub(crate) fn worker(&self) -> &str {
        &self.settings.worker
    }

    /// The lease duration.
    pub(crate) fn duration(&self) -> Duration {
        self.settings.duration
    }

    /// The view, updated after every taker cycle and every lost or released lease.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<LeaseView>> {
        self.view.subscribe()
    }

    /// Asks the taker for a cycle now (new rows, an ended shard).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    fn ok<T>(&self, r: Result<T, TableError>) -> Option<T> {
        match r {
            Ok(v) => {
                if self.failing.swap(false, Relaxed) {
                    info!(stream = %self.settings.stream, table = %self.table.name(), "lease table reachable again");
                }
                Some(v)
            }
            Err(e) => {
                self.metrics.stats().error();
                if !self.failing.swap(true, Relaxed) {
                    warn!(stream = %self.settings.stream, error = %e, "lease table call failed; retrying");
                }
                None
            }
        }
    }

    async fn ensure_table(&self) -> Result<(), TableError> {
        self.ready
            .get_or_try_init(|| self.table.ensure_table())
            .await
            .map(|_| ())
    }

    fn publish(&self, holder: &Holder) {
        let rows = lock(&self.observer)
            .rows()
            .map(|l| {
                (
                    l.key.clone(),
                    RowView {
                        parents: l.parents.clone(),
                        ended: l.ended(),
                    },
                )
            })
            .collect();
        let held = holder
            .leases()
            .iter()
            .map(|(k, h)| {
                (
                    k.clone(),
                    HeldView {
                        guard: h.guard.clone(),
                        tenure: h.tenure,
                        start: h.start.clone(),
                        handoff: h.handoff.is_some(),
                    },
                )
            })
            .collect();
        self.metrics.held(holder.leases().len());
        self.view.send_replace(Arc::new(LeaseView { rows, held }));
    }

    /// Counts each loss its reader had not already counted, and logs the episode.
    fn report_lost(&self, lost: &[Lost]) {
        for l in lost.iter().filter(|l| l.uncounted) {
            let (reason, why) = match l.why {
                Loss::Conflict => (LeaseLoss::Taken, "another worker took it"),
                Loss::Expired => (LeaseLoss::Expired, "not renewed for one lease duration"),
            };
            if let Some(line) = self.metrics.stats().lease_lost(reason, 1) {
                log_lease_loss(
                    &self.settings.stream,
                    &self.settings.worker,
                    &l.key,
                    why,
                    line,
                );
            }
        }
    }

    /// One renewer cycle; `now` is when the renewals are sent. A renewal that finds a handoff
    /// mark flags the lease in the view: the coordinator stops its reader, commits, and calls
    /// [`release_handoff`](Self::release_handoff).
    pub(crate) async fn renew_at(&self, now: Instant) -> Vec<Lost> {
        let mut holder = self.holder.lock().await;
        if holder.leases().is_empty() {
            return Vec::new();
        }
        let renewed = holder.renew(&self.table, now).await;
        for e in renewed.errors {
            self.ok::<()>(Err(e));
        }
        for (shard, to) in &renewed.handoffs {
            info!(stream = %self.settings.stream, %shard, worker = %self.settings.worker, to = %to, "shard lease requested by a peer; handing it off after the final checkpoint");
        }
        if !renewed.lost.is_empty() || !renewed.handoffs.is_empty() {
            self.report_lost(&renewed.lost);
            self.publish(&holder);
        }
        renewed.lost
    }

    /// Releases a lease being handed off, once its reader stopped and the checkpoint of what
    /// it delivered was committed: the peer that asked takes it from there.
    pub(crate) async fn release_handoff(&self, shard: &str) {
        let mut holder = self.holder.lock().await;
        let r = holder.release_handoff(&self.table, shard).await;
        if let Some(released) = self.ok(r) {
            info!(stream = %self.settings.stream, %shard, worker = %self.settings.worker, released, "shard lease handed off");
        }
        self.publish(&holder);
        drop(holder);
    }

    /// One taker cycle: scan, judge expiry at `clock()` after the scan, take what the rules
    /// say (each take fenced by the counter and owner seen).
    pub(crate) async fn take_at(&self, clock: impl Fn() -> Instant) -> Took {
        let mut took = Took::default();
        if self.ok(self.ensure_table().await).is_none() {
            return took;
        }
        let Some(rows) = self.ok(self.table.scan().await) else {
            return took;
        };
        let at = clock();
        let held: BTreeSet<String> = self.holder.lock().await.leases().keys().cloned().collect();
        let plan = {
            let mut observer = lock(&self.observer);
            observer.observe(rows, at);
            observer.plan(&self.settings.worker, &held, at, &mut lock(&self.rng))
        };
        for choice in plan {
            let lease = &choice.lease;
            let fence = Fence {
                counter: lease.counter,
                owner: lease.owner.clone(),
            };
            let worker = self.settings.worker.clone();
            let update = match choice.act {
                Act::Mark => Update::Mark { worker },
                Act::Take | Act::Steal => Update::Take { worker },
            };
            let sent = clock();
            let r = fenced(self.table.as_ref(), &lease.key, &fence, &update).await;
            let Some(Fenced::Written | Fenced::WrittenLate) = self.ok(r) else {
                // Someone else wrote the row since the scan; the next cycle sees it.
                continue;
            };
            let from = lease.owner.as_deref().unwrap_or("nobody");
            if choice.act == Act::Mark {
                info!(stream = %self.settings.stream, shard = %lease.key, worker = %self.settings.worker, from, "asked the owner to hand the shard lease over");
                took.marked.push(lease.key.clone());
                continue;
            }
            let steal = choice.act == Act::Steal;
            let answered = clock();
            self.holder
                .lock()
                .await
                .insert_taken(lease, sent, answered, steal);
            self.metrics.taken(steal);
            info!(
                stream = %self.settings.stream,
                shard = %lease.key,
                worker = %self.settings.worker,
                from,
                steal,
                checkpoint = %lease.checkpoint,
                "shard lease taken"
            );
            if steal {
                took.stolen.push(lease.key.clone());
            } else {
                took.taken.push(lease.key.clone());
            }
        }
        let holder = self.holder.lock().await;
        self.publish(&holder);
        took
    }

    /// Creates the rows of listed shards that have none, adds children to their parents,
    /// deletes ended rows of shards past retention. Wakes the taker when rows were created.
    pub(crate) async fn sync_shards(&self, listed: &[ListedShard]) -> Result<(), TableError> {
        self.ensure_table().await?;
        let rows = self.table.scan().await?;
        let first_fill = rows.is_empty();
        let p = {
            let migrate = lock(&self.migrate);
            let initial = Initial {
                checkpoint: self.settings.initial.clone(),
                skip_closed: self.settings.skip_closed,
                migrate: migrate.as_ref(),
            };
            plan(listed, &rows, &initial)
        };
        let mut created = 0;
        for lease in &p.create {
            if self.table.create(lease).await? == Outcome::Written {
                created += 1;
            }
        }
        for (parent, child) in &p.add_children {
            // A parent deleted meanwhile needs no children: ignore the conflict.
            let _ = self.table.add_child(parent, child).await?;
        }
        for key in &p.delete {
            let _ = self.table.delete_ended(key).await?;
        }
        if first_fill && p.migrated > 0 {
            info!(stream = %self.settings.stream, shards = p.migrated, "migrated checkpoint file positions into the lease table");
        }
        if first_fill {
            // Only the first fill may use the file; later rows start at TRIM_HORIZON.
            lock(&self.migrate).take();
        }
        if created > 0 {
            info!(stream = %self.settings.stream, created, "lease rows created for new shards");
            self.wake();
        }
        Ok(())
    }

    /// Writes the held shards' positions (and `SHARD_END`, which also releases the lease).
    pub(crate) async fn save(&self, cp: &StreamCheckpoint) -> Result<(), TableError> {
        let checkpoints = cp
            .shards
            .iter()
            .filter_map(|(k, s)| {
                let c = if s.ended {
                    Checkpoint::ShardEnd
                } else {
                    Checkpoint::At(s.position.clone()?)
                };
                Some((k.clone(), c))
            })
            .collect();
        let mut holder = self.holder.lock().await;
        let saved = holder.save(&self.table, checkpoints).await;
        self.report_lost(&saved.lost);
        for key in &saved.ended {
            info!(stream = %self.settings.stream, shard = %key, "shard ended; its lease holds SHARD_END and is released");
        }
        if !saved.lost.is_empty() || !saved.ended.is_empty() {
            self.publish(&holder);
        }
        drop(holder);
        if !saved.ended.is_empty() {
            self.wake();
        }
        match saved.errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Releases every held lease (graceful shutdown, after the final checkpoint); `now` is
    /// when the releases are sent.
    pub(crate) async fn release_all(&self, now: Instant) {
        let mut holder = self.holder.lock().await;
        let (released, errors) = holder.release_all(&self.table, now).await;
        for e in errors {
            self.ok::<()>(Err(e));
        }
        info!(stream = %self.settings.stream, worker = %self.settings.worker, released, "shard leases released");
        self.publish(&holder);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Loop {
    Renewer,
    Taker,
}

/// Starts the renewer (every lease duration ÷ 3) and the taker (as often, and when woken);
/// both stop when `stop` is cancelled.
pub(crate) fn spawn(leases: &Arc<Leases>, stop: &CancellationToken) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    for which in [Loop::Renewer, Loop::Taker] {
        tasks.spawn(run_loop(leases.clone(), stop.clone(), which));
    }
    tasks
}

async fn run_loop(leases: Arc<Leases>, stop: CancellationToken, which: Loop) {
    let mut tick = tokio::time::interval(leases.duration() / 3);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
            _ = leases.wake.notified(), if which == Loop::Taker => {}
        }
        match which {
            Loop::Renewer => {
                leases.renew_at(Instant::now()).await;
            }
            Loop::Taker => {
                leases.take_at(Instant::now).await;
            }
        }
    }
}
