//! The stream's coordinator: shard discovery, reader tasks and checkpoint commits.
//!
//! It owns the shared [`StreamCheckpoint`] that readers update after each flush, and commits
//! it through the [`CheckpointStore`] on an interval, whenever a shard ends, and once more
//! after every reader stopped at shutdown. Which shards may be read is the shard graph's call
//! (`shards.rs`).
//!
//! With a lease table it also runs the worker's renewer and taker ([`super::leases`]), syncs
//! listed shards into lease rows, follows the lease view, hands a lease a peer asked for over
//! (stop its reader, commit, release), and at shutdown stops taking, commits the final
//! checkpoint, then releases every lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_sdk_kinesis::Client;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::KinesisError;
use super::checkpoint::{CheckpointStore, StreamCheckpoint};
use super::leases::worker::{LeaseView, Leases, spawn as spawn_leases};
use super::reader::{ReaderExit, ShardReader, sleep_or_stop};
use super::shards::{Graph, Run, list_shards};
use super::stats::{KinesisStats, ShardEvent};
use crate::config::KinesisConfig;
use anthracite::extension::SourceContext;

/// Everything a coordinator runs with.
pub(crate) struct Parts {
    pub config: Arc<KinesisConfig>,
    pub store: Arc<dyn CheckpointStore>,
    pub checkpoint: StreamCheckpoint,
    pub control: Client,
    pub data: Client,
    pub stats: Arc<KinesisStats>,
    pub relay: SourceContext,
    /// Lease mode.
    pub leases: Option<Arc<Leases>>,
}

/// What every reader is built from.
struct ReaderContext {
    config: Arc<KinesisConfig>,
    control: Client,
    data: Client,
    stats: Arc<KinesisStats>,
    relay: SourceContext,
    progress: Arc<Mutex<StreamCheckpoint>>,
}

/// The running readers, one task per shard.
struct Readers {
    ctx: ReaderContext,
    set: JoinSet<(String, ReaderExit)>,
    task_ids: HashMap<tokio::task::Id, String>,
    /// Each reader's stop token (a child of its lease's token in lease mode).
    tokens: HashMap<String, CancellationToken>,
    stop: CancellationToken,
}

impl Readers {
    /// Starts every shard the graph says is ready.
    fn start_ready(&mut self, graph: &mut Graph) {
        for id in graph.ready(std::time::Instant::now()) {
            graph.begin_tenure(&id, &self.ctx.progress, &self.ctx.config);
            let Some(node) = graph.get_mut(&id) else {
                continue;
            };
            node.run = Run::Running;
            let resume = self
                .ctx
                .progress
                .lock()
                .ok()
                .and_then(|p| p.shards.get(&id).and_then(|c| c.position.clone()));
            let lease = node.lease.as_ref().map(|l| l.guard.clone());
            let token = match &lease {
                Some(g) => g.lost().child_token(),
                None => self.stop.child_token(),
            };
            let reader = ShardReader {
                config: self.ctx.config.clone(),
                control: self.ctx.control.clone(),
                data: self.ctx.data.clone(),
                relay: self.ctx.relay.clone(),
                stats: self.ctx.stats.clone(),
                progress: self.ctx.progress.clone(),
                shard_id: id.clone(),
                resume,
                start: node.start,
                lease,
            };
            self.ctx.stats.event(ShardEvent::Started(id.clone()));
            self.tokens.insert(id.clone(), token.clone());
            let key = id.clone();
            let handle = self.set.spawn(async move { (id, reader.run(token).await) });
            self.task_ids.insert(handle.id(), key);
        }
    }

    /// The next reader to finish: `(shard, exit)`, or `(shard, None)` when it panicked.
    async fn next(&mut self) -> Option<(Option<String>, Option<ReaderExit>)> {
        let joined = self.set.join_next_with_id().await?;
        self.ctx.stats.shard_active(false);
        Some(match joined {
            Ok((id, (shard, exit))) => {
                self.task_ids.remove(&id);
                self.tokens.remove(&shard);
                (Some(shard), Some(exit))
            }
            Err(e) => {
                warn!(stream = %self.ctx.config.stream_name, error = %e, "shard reader failed; restarting it");
                let shard = self.task_ids.remove(&e.id());
                if let Some(s) = &shard {
                    self.tokens.remove(s);
                }
                (shard, None)
            }
        })
    }

    /// Stops every reader; each flushes what it parsed and publishes its position.
    async fn stop_all(&mut self) {
        self.stop.cancel();
        for t in self.tokens.values() {
            t.cancel();
        }
        while let Some(joined) = self.set.join_next().await {
            self.ctx.stats.shard_active(false);
            if let Err(e) = joined {
                warn!(stream = %self.ctx.config.stream_name, error = %e, "shard reader failed during shutdown");
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Stops one shard's reader (it delivers the batch in hand and publishes its position);
    /// false when none runs.
    fn stop_one(&self, shard: &str) -> bool {
        match self.tokens.get(shard) {
            Some(t) => {
                t.cancel();
                true
            }
            None => false,
        }
    }
}

/// The stream's checkpoint store and what it last committed.
struct Commits<'a> {
    store: &'a Arc<dyn CheckpointStore>,
    progress: &'a Mutex<StreamCheckpoint>,
    stats: &'a KinesisStats,
    config: &'a KinesisConfig,
}

impl Commits<'_> {
    async fn commit(&self, committed: &StreamCheckpoint) -> StreamCheckpoint {
        commit_now(
            self.store,
            self.progress,
            committed,
            self.stats,
            self.config,
        )
        .await
    }
}

/// The next lease view (pending forever without leases).
async fn view_changed(view: &mut Option<watch::Receiver<Arc<LeaseView>>>) -> Arc<LeaseView> {
    match view {
        Some(rx) => {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            rx.borrow_and_update().clone()
        }
        None => std::future::pending().await,
    }
}

/// Runs the stream until `shutdown`, then commits the final checkpoint (and, with leases,
/// releases them).
pub(crate) async fn run(parts: Parts, shutdown: CancellationToken) -> Result<(), KinesisError> {
    let Parts {
        config,
        store,
        checkpoint,
        control,
        data,
        stats,
        relay,
        leases,
    } = parts;
    let progress = Arc::new(Mutex::new(checkpoint));
    let mut graph = Graph::new(leases.is_some());
    let mut readers = Readers {
        ctx: ReaderContext {
            config: config.clone(),
            control: control.clone(),
            data,
            stats: stats.clone(),
            relay,
            progress: progress.clone(),
        },
        set: JoinSet::new(),
        task_ids: HashMap::new(),
        tokens: HashMap::new(),
        stop: CancellationToken::new(),
    };
    let stop_leases = CancellationToken::new();
    let mut lease_tasks = leases.as_ref().map(|l| spawn_leases(l, &stop_leases));
    let mut view = leases.as_ref().map(|l| l.subscribe());
    let mut committed = snapshot(&progress);
    let commits = Commits {
        store: &store,
        progress: &progress,
        stats: &stats,
        config: &config,
    };
    let mut last_commit = Instant::now();
    let mut first_listing = true;
    let mut list_backoff = config.backoff_min;

    let mut sync = tokio::time::interval(config.shard_sync_interval);
    sync.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut commit = tokio::time::interval(config.checkpoint_interval);
    commit.set_missed_tick_behavior(MissedTickBehavior::Delay);
    commit.reset();

    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            Some((shard, exit)) = readers.next(), if !readers.is_empty() => {
                let node = shard.as_deref().and_then(|s| graph.get_mut(s));
                match (node, exit) {
                    (Some(_), Some(ReaderExit::Ended { children })) => {
                        let shard = shard.unwrap_or_default();
                        graph.reader_ended(&shard);
                        stats.event(ShardEvent::Ended(shard));
                        // Shard end is a commit point: the children must never restart the
                        // parent after a crash (with leases: SHARD_END releases the lease).
                        committed = commit_now(&store, &progress, &committed, &stats, &config).await;
                        last_commit = Instant::now();
                        graph.add_children(children);
                        sync.reset_immediately();
                    }
                    // Shutdown, a lost lease, a handoff, or a panic: the shard may start again
                    // (with leases, only while held).
                    (Some(n), _) => {
                        n.run = Run::Waiting;
                        // Handoff: everything the reader delivered is in the progress now;
                        // commit it, then release, so the peer resumes exactly there.
                        if n.lease.as_ref().is_some_and(|l| l.handoff)
                            && let (Some(l), Some(shard)) = (&leases, shard.as_deref())
                        {
                            committed = commits.commit(&committed).await;
                            last_commit = Instant::now();
                            l.release_handoff(shard).await;
                        }
                    }
                    (None, _) => {}
                }
                readers.start_ready(&mut graph);
            }
            v = view_changed(&mut view) => {
                graph.apply_view(&v);
                // A peer asked for these leases: a running reader stops first (its exit
                // finishes the handoff below); one not running has nothing in hand.
                for shard in graph.handoffs() {
                    if !readers.stop_one(&shard)
                        && let Some(l) = &leases
                    {
                        committed = commits.commit(&committed).await;
                        l.release_handoff(&shard).await;
                    }
                }
                readers.start_ready(&mut graph);
            }
            _ = sync.tick() => {
                match list_shards(&control, &config).await {
                    Ok(listed) => {
                        list_backoff = config.backoff_min;
                        match &leases {
                            Some(l) => {
                                if let Err(e) = l.sync_shards(&listed).await {
                                    stats.error();
                                    warn!(stream = %config.stream_name, error = %e, "shard sync into the lease table failed; retrying at the next sync");
                                }
                                graph.set_listed(&listed);
                            }
                            None => graph.merge_listing(&listed, &progress, &config, first_listing),
                        }
                        first_listing = false;
                        readers.start_ready(&mut graph);
                    }
                    Err(missing) => {
                        stats.error();
                        if missing {
                            warn!(stream = %config.stream_name, "stream not found (deleted or not created yet); retrying");
                        }
                        let wait = list_backoff;
                        list_backoff = (list_backoff * 2).min(config.backoff_max);
                        if sleep_or_stop(wait, &shutdown).await {
                            break;
                        }
                        sync.reset_immediately();
                    }
                }
            }
            _ = commit.tick() => {
                committed = commit_now(&store, &progress, &committed, &stats, &config).await;
                last_commit = Instant::now();
            }
        }
        stats.checkpoint_age(last_commit.elapsed().as_secs_f64());
    }

    // No new leases while stopping; the ones held stay valid through the final checkpoint.
    stop_leases.cancel();
    if let Some(tasks) = lease_tasks.as_mut() {
        while tasks.join_next().await.is_some() {}
    }
    readers.stop_all().await;
    let cp = snapshot(&progress);
    let saved = store.save(&cp).await;
    if saved.is_ok() {
        stats.checkpointed();
        stats.checkpoint_age(0.0);
        info!(stream = %config.stream_name, "final checkpoint committed");
    }
    // Released even after a failed final checkpoint: a peer re-reads from the last one
    // committed now rather than a lease duration later.
    if let Some(l) = &leases {
        l.release_all(std::time::Instant::now()).await;
    }
    saved.map_err(|source| KinesisError::Checkpoint {
        stream: config.stream_name.clone(),
        source,
    })
}

fn snapshot(progress: &Mutex<StreamCheckpoint>) -> StreamCheckpoint {
    progress.lock().map(|p| p.clone()).unwrap_or_default()
}

/// Saves the shared checkpoint if it changed; returns what is now committed. A failed save is
/// logged and retried at the next commit point (the readers keep their positions).
async fn commit_now(
    store: &Arc<dyn CheckpointStore>,
    progress: &Mutex<StreamCheckpoint>,
    committed: &StreamCheckpoint,
    stats: &KinesisStats,
    config: &KinesisConfig,
) -> StreamCheckpoint {
    let cp = snapshot(progress);
    if &cp == committed {
        stats.checkpoint_age(0.0);
        return cp;
    }
    match store.save(&cp).await {
        Ok(()) => {
            stats.checkpointed();
            stats.checkpoint_age(0.0);
            cp
        }
        Err(e) => {
            stats.error();
            warn!(stream = %config.stream_name, error = %e, "checkpoint commit failed; will retry");
            committed.clone()
        }
    }
}
