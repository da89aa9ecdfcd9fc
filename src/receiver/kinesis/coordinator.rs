//! The stream's coordinator: shard discovery, the parent → child graph, reader tasks and
//! checkpoint commits.
//!
//! It owns the shared [`StreamCheckpoint`] that readers update after each flush, and commits
//! it through the [`CheckpointStore`] on an interval, whenever a shard ends, and once more
//! after every reader stopped at shutdown.
//!
//! A shard is started when it is not ended, not running, and every parent it names is ended
//! — or unknown, because a parent past the retention period is no longer listed and had been
//! read (or can no longer be). With `initial_position = latest`, shards already closed at the
//! first listing are skipped (their records are older than "now"), and open ones start at
//! LATEST; shards discovered later (children of a reshard) always start at TRIM_HORIZON so
//! nothing written to them is missed.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::operation::list_shards::ListShardsError;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::KinesisError;
use super::checkpoint::{CheckpointStore, StreamCheckpoint};
use super::reader::{ReaderExit, ShardReader, StartAt, error_text, sleep_or_stop};
use super::stats::{KinesisStats, ShardEvent};
use crate::config::KinesisConfig;
use crate::config::kinesis::InitialPosition;
use crate::ingest::Pipeline;

/// Everything a coordinator runs with.
pub(crate) struct Parts {
    pub config: Arc<KinesisConfig>,
    pub store: Arc<dyn CheckpointStore>,
    pub checkpoint: StreamCheckpoint,
    pub control: Client,
    pub data: Client,
    pub stats: Arc<KinesisStats>,
    pub pipeline: Pipeline,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Run {
    Waiting,
    Running,
    Ended,
}

#[derive(Debug)]
struct Node {
    parents: Vec<String>,
    run: Run,
    start: StartAt,
}

/// A listed shard: id, parents, closed (has an ending sequence number).
type Listed = (String, Vec<String>, bool);

/// Runs the stream until `shutdown`, then commits the final checkpoint.
pub(crate) async fn run(parts: Parts, shutdown: CancellationToken) -> Result<(), KinesisError> {
    let Parts {
        config,
        store,
        checkpoint,
        control,
        data,
        stats,
        pipeline,
    } = parts;
    let progress = Arc::new(Mutex::new(checkpoint));
    let mut graph: HashMap<String, Node> = HashMap::new();
    let mut readers: JoinSet<(String, ReaderExit)> = JoinSet::new();
    let mut task_ids: HashMap<tokio::task::Id, String> = HashMap::new();
    let stop_readers = CancellationToken::new();
    let mut committed = snapshot(&progress);
    let mut last_commit = Instant::now();
    let mut first_listing = true;
    let mut list_backoff = config.backoff_min;

    let mut sync = tokio::time::interval(config.shard_sync_interval);
    sync.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut commit = tokio::time::interval(config.checkpoint_interval);
    commit.set_missed_tick_behavior(MissedTickBehavior::Delay);
    commit.reset();
    let mut relist_now = false;

    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            Some(joined) = readers.join_next(), if !readers.is_empty() => {
                stats.shard_active(false);
                match joined {
                    Ok((shard, ReaderExit::Ended { children })) => {
                        task_ids.retain(|_, s| s != &shard);
                        if let Some(n) = graph.get_mut(&shard) {
                            n.run = Run::Ended;
                        }
                        stats.event(ShardEvent::Ended(shard.clone()));
                        // Shard end is a commit point: the children must never restart the
                        // parent after a crash.
                        committed = commit_now(&store, &progress, &committed, &stats, &config).await;
                        last_commit = Instant::now();
                        for (child, parents) in children {
                            graph.entry(child).or_insert(Node {
                                parents,
                                run: Run::Waiting,
                                start: StartAt::TrimHorizon,
                            });
                        }
                        relist_now = true;
                    }
                    Ok((shard, ReaderExit::Stopped)) => {
                        task_ids.retain(|_, s| s != &shard);
                        if let Some(n) = graph.get_mut(&shard) {
                            n.run = Run::Waiting;
                        }
                    }
                    Err(e) => {
                        // A panicked reader: its shard starts again from its position.
                        warn!(stream = %config.stream_name, error = %e, "shard reader failed; restarting it");
                        if let Some(n) = task_ids.remove(&e.id()).and_then(|id| graph.get_mut(&id)) {
                            n.run = Run::Waiting;
                        }
                    }
                }
                start_ready(&mut graph, &mut readers, &mut task_ids, &progress, &config, &control, &data, &stats, &pipeline, &stop_readers);
                if relist_now {
                    relist_now = false;
                    sync.reset_immediately();
                }
            }
            _ = sync.tick() => {
                match list_shards(&control, &config).await {
                    Ok(listed) => {
                        list_backoff = config.backoff_min;
                        merge_listing(&mut graph, listed, &progress, &config, first_listing);
                        first_listing = false;
                        start_ready(&mut graph, &mut readers, &mut task_ids, &progress, &config, &control, &data, &stats, &pipeline, &stop_readers);
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

    // Readers flush what they parsed and publish their positions before they return.
    stop_readers.cancel();
    while let Some(joined) = readers.join_next().await {
        stats.shard_active(false);
        if let Err(e) = joined {
            warn!(stream = %config.stream_name, error = %e, "shard reader failed during shutdown");
        }
    }
    let cp = snapshot(&progress);
    let store2 = store.clone();
    let saved = tokio::task::spawn_blocking(move || store2.save(&cp))
        .await
        .map_err(|e| KinesisError::Task {
            stream: config.stream_name.clone(),
            message: e.to_string(),
        })?;
    saved.map_err(|source| KinesisError::Checkpoint {
        stream: config.stream_name.clone(),
        source,
    })?;
    stats.checkpointed();
    stats.checkpoint_age(0.0);
    info!(stream = %config.stream_name, "final checkpoint committed");
    Ok(())
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
    let s = store.clone();
    let c = cp.clone();
    match tokio::task::spawn_blocking(move || s.save(&c)).await {
        Ok(Ok(())) => {
            stats.checkpointed();
            stats.checkpoint_age(0.0);
            cp
        }
        Ok(Err(e)) => {
            warn!(stream = %config.stream_name, error = %e, "checkpoint commit failed; will retry");
            committed.clone()
        }
        Err(e) => {
            warn!(stream = %config.stream_name, error = %e, "checkpoint task failed; will retry");
            committed.clone()
        }
    }
}

/// Lists every shard (all pages). `Err(true)` when the stream does not exist.
async fn list_shards(control: &Client, config: &KinesisConfig) -> Result<Vec<Listed>, bool> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let req = control.list_shards();
        let req = match &token {
            // With a NextToken, the stream must not be named again.
            Some(t) => req.next_token(t),
            None => match &config.stream_arn {
                Some(arn) => req.stream_arn(arn),
                None => req.stream_name(&config.stream_name),
            },
        };
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                let missing = matches!(
                    e.as_service_error(),
                    Some(ListShardsError::ResourceNotFoundException(_))
                );
                if !missing {
                    warn!(stream = %config.stream_name, error = %error_text(&e), "ListShards failed; retrying");
                }
                return Err(missing);
            }
        };
        for s in resp.shards() {
            let parents = s
                .parent_shard_id()
                .into_iter()
                .chain(s.adjacent_parent_shard_id())
                .map(str::to_string)
                .collect();
            let closed = s
                .sequence_number_range()
                .is_some_and(|r| r.ending_sequence_number().is_some());
            out.push((s.shard_id().to_string(), parents, closed));
        }
        match resp.next_token() {
            Some(t) if !t.is_empty() => token = Some(t.to_string()),
            _ => return Ok(out),
        }
    }
}

fn merge_listing(
    graph: &mut HashMap<String, Node>,
    listed: Vec<Listed>,
    progress: &Mutex<StreamCheckpoint>,
    config: &KinesisConfig,
    first: bool,
) {
    let Ok(mut p) = progress.lock() else {
        return;
    };
    let initial = StartAt::initial(config);
    let listed_ids: std::collections::HashSet<&str> = listed.iter().map(|l| l.0.as_str()).collect();
    // Ended shards that aged out of the stream need no checkpoint entry any more.
    p.shards
        .retain(|id, cp| !cp.ended || listed_ids.contains(id.as_str()) || graph.contains_key(id));
    for (id, parents, closed) in &listed {
        if graph.contains_key(id) {
            continue;
        }
        let checkpointed = p.shards.get(id);
        let ended = checkpointed.is_some_and(|c| c.ended);
        let has_position = checkpointed.is_some_and(|c| c.position.is_some());
        let skip_closed =
            first && config.initial_position == InitialPosition::Latest && *closed && !has_position;
        let run = if ended || skip_closed {
            Run::Ended
        } else {
            Run::Waiting
        };
        if skip_closed && !ended {
            p.shards.entry(id.clone()).or_default().ended = true;
        }
        graph.insert(
            id.clone(),
            Node {
                parents: parents.clone(),
                run,
                start: if first { initial } else { StartAt::TrimHorizon },
            },
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn start_ready(
    graph: &mut HashMap<String, Node>,
    readers: &mut JoinSet<(String, ReaderExit)>,
    task_ids: &mut HashMap<tokio::task::Id, String>,
    progress: &Arc<Mutex<StreamCheckpoint>>,
    config: &Arc<KinesisConfig>,
    control: &Client,
    data: &Client,
    stats: &Arc<KinesisStats>,
    pipeline: &Pipeline,
    stop: &CancellationToken,
) {
    let ended: BTreeMap<String, bool> = graph
        .iter()
        .map(|(id, n)| (id.clone(), n.run == Run::Ended))
        .collect();
    let mut ready: Vec<&String> = graph
        .iter()
        .filter(|(_, n)| n.run == Run::Waiting)
        .filter(|(_, n)| {
            n.parents
                .iter()
                .all(|p| ended.get(p).copied().unwrap_or(true))
        })
        .map(|(id, _)| id)
        .collect();
    ready.sort();
    let ready: Vec<String> = ready.into_iter().cloned().collect();
    for id in ready {
        let Some(node) = graph.get_mut(&id) else {
            continue;
        };
        node.run = Run::Running;
        let resume = progress
            .lock()
            .ok()
            .and_then(|p| p.shards.get(&id).and_then(|c| c.position.clone()));
        let reader = ShardReader {
            config: config.clone(),
            control: control.clone(),
            data: data.clone(),
            pipeline: pipeline.clone(),
            stats: stats.clone(),
            progress: progress.clone(),
            shard_id: id.clone(),
            resume,
            start: node.start,
        };
        stats.event(ShardEvent::Started(id.clone()));
        let stop = stop.clone();
        let key = id.clone();
        let handle = readers.spawn(async move { (id, reader.run(stop).await) });
        task_ids.insert(handle.id(), key);
    }
}
