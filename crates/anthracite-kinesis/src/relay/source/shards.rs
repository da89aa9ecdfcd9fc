//! The stream's shards: listing (ListShards, paged) and the parent → child graph that decides
//! which shard may be read.
//!
//! Without leases, every listed shard is this relay's. A shard is ready when it is not ended,
//! not running, and every parent it names is ended — or unknown, because a parent past the
//! retention period is no longer listed and had been read (or can no longer be). With
//! `initial_position = latest`, shards already closed at the first listing are skipped (their
//! records are older than "now"), and open ones start at LATEST; shards discovered later
//! (children of a reshard) always start at TRIM_HORIZON so nothing written to them is missed.
//!
//! With leases, the graph follows the lease table ([`LeaseView`]): a shard is ready when this
//! worker holds its lease (still valid) and every parent's row holds `SHARD_END`, or the
//! parent has no row and is no longer listed.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::operation::list_shards::ListShardsError;
use tracing::warn;

use super::checkpoint::StreamCheckpoint;
use super::leases::Checkpoint;
use super::leases::worker::{HeldView, LeaseView};
use super::reader::StartAt;
use crate::config::InitialPosition;
use crate::config::KinesisConfig;
use crate::relay::error_text;

/// One shard as ListShards returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ListedShard {
    pub id: String,
    /// Parent and adjacent parent (a merge has two).
    pub parents: Vec<String>,
    /// Has an ending sequence number: no more records will be written to it.
    pub closed: bool,
    /// Starting and ending hash key.
    pub hash_range: Option<(String, String)>,
}

/// Lists every shard (all pages). `Err(true)` when the stream does not exist.
pub(crate) async fn list_shards(
    control: &Client,
    config: &KinesisConfig,
) -> Result<Vec<ListedShard>, bool> {
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
            out.push(ListedShard {
                id: s.shard_id().to_string(),
                parents: s
                    .parent_shard_id()
                    .into_iter()
                    .chain(s.adjacent_parent_shard_id())
                    .map(str::to_string)
                    .collect(),
                closed: s
                    .sequence_number_range()
                    .is_some_and(|r| r.ending_sequence_number().is_some()),
                hash_range: s.hash_key_range().map(|r| {
                    (
                        r.starting_hash_key().to_string(),
                        r.ending_hash_key().to_string(),
                    )
                }),
            });
        }
        match resp.next_token() {
            Some(t) if !t.is_empty() => token = Some(t.to_string()),
            _ => return Ok(out),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Run {
    Waiting,
    Running,
    /// Lease mode: read to the end here; ended once the table's row holds `SHARD_END` (the
    /// write can fail if the lease was stolen meanwhile, and then its new owner reads it).
    Finishing,
    Ended,
}

#[derive(Debug)]
pub(crate) struct Node {
    pub parents: Vec<String>,
    pub run: Run,
    pub start: StartAt,
    /// Lease mode: the lease while this worker holds it.
    pub lease: Option<HeldView>,
    /// Lease mode: the tenure whose reader last started (a new tenure resumes at the row's
    /// checkpoint, not at this worker's older progress).
    pub started_tenure: u64,
}

impl Node {
    fn new(parents: Vec<String>, run: Run, start: StartAt) -> Self {
        Self {
            parents,
            run,
            start,
            lease: None,
            started_tenure: 0,
        }
    }
}

/// Every known shard.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    nodes: HashMap<String, Node>,
    leased: bool,
    /// Lease mode: the ids of the last successful listing.
    listed: Option<HashSet<String>>,
}

impl Graph {
    pub(crate) fn new(leased: bool) -> Self {
        Self {
            leased,
            ..Self::default()
        }
    }

    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut Node> {
        self.nodes.get_mut(id)
    }

    /// A reader reached the shard's end (file mode: the shard is ended; lease mode: once the
    /// table says so).
    pub(crate) fn reader_ended(&mut self, id: &str) {
        let leased = self.leased;
        if let Some(n) = self.nodes.get_mut(id) {
            n.run = if leased { Run::Finishing } else { Run::Ended };
        }
    }

    /// File mode: children GetRecords named at the end of a shard join at once.
    pub(crate) fn add_children(&mut self, children: Vec<(String, Vec<String>)>) {
        if self.leased {
            return;
        }
        for (child, parents) in children {
            self.nodes
                .entry(child)
                .or_insert_with(|| Node::new(parents, Run::Waiting, StartAt::TrimHorizon));
        }
    }

    /// Lease mode: remembers which shards exist (a parent without a row that is no longer
    /// listed counts as ended).
    pub(crate) fn set_listed(&mut self, listed: &[ListedShard]) {
        self.listed = Some(listed.iter().map(|s| s.id.clone()).collect());
    }

    /// File mode: adds newly listed shards.
    pub(crate) fn merge_listing(
        &mut self,
        listed: &[ListedShard],
        progress: &Mutex<StreamCheckpoint>,
        config: &KinesisConfig,
        first: bool,
    ) {
        let Ok(mut p) = progress.lock() else {
            return;
        };
        let initial = StartAt::initial(config);
        let listed_ids: HashSet<&str> = listed.iter().map(|l| l.id.as_str()).collect();
        // Ended shards that aged out of the stream need no checkpoint entry any more.
        p.shards.retain(|id, cp| {
            !cp.ended || listed_ids.contains(id.as_str()) || self.nodes.contains_key(id)
        });
        for s in listed {
            if self.nodes.contains_key(&s.id) {
                continue;
            }
            let checkpointed = p.shards.get(&s.id);
            let ended = checkpointed.is_some_and(|c| c.ended);
            let has_position = checkpointed.is_some_and(|c| c.position.is_some());
            let skip_closed = first
                && config.initial_position == InitialPosition::Latest
                && s.closed
                && !has_position;
            let run = if ended || skip_closed {
                Run::Ended
            } else {
                Run::Waiting
            };
            if skip_closed && !ended {
                p.shards.entry(s.id.clone()).or_default().ended = true;
            }
            let start = if first { initial } else { StartAt::TrimHorizon };
            self.nodes
                .insert(s.id.clone(), Node::new(s.parents.clone(), run, start));
        }
    }

    /// Lease mode: follows the table and the leases held.
    pub(crate) fn apply_view(&mut self, view: &LeaseView) {
        for (id, row) in &view.rows {
            let node = self.nodes.entry(id.clone()).or_insert_with(|| {
                Node::new(row.parents.clone(), Run::Waiting, StartAt::TrimHorizon)
            });
            node.parents.clone_from(&row.parents);
            let held = view.held.contains_key(id);
            match node.run {
                Run::Waiting | Run::Finishing if row.ended => node.run = Run::Ended,
                // The lease went elsewhere before `SHARD_END` was recorded.
                Run::Finishing if !held => node.run = Run::Waiting,
                _ => {}
            }
        }
        for (id, node) in self.nodes.iter_mut() {
            node.lease = view.held.get(id).cloned();
        }
        for (id, held) in &view.held {
            self.nodes.entry(id.clone()).or_insert_with(|| {
                let mut n = Node::new(Vec::new(), Run::Waiting, StartAt::TrimHorizon);
                n.lease = Some(held.clone());
                n
            });
        }
    }

    /// Lease mode: shards whose lease a peer asked for, sorted.
    pub(crate) fn handoffs(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.lease.as_ref().is_some_and(|l| l.handoff))
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }

    fn parent_ended(&self, p: &str) -> bool {
        match self.nodes.get(p) {
            Some(n) => n.run == Run::Ended,
            None if self.leased => self.listed.as_ref().is_some_and(|l| !l.contains(p)),
            None => true,
        }
    }

    /// Shards that may start now, sorted.
    pub(crate) fn ready(&self, now: Instant) -> Vec<String> {
        let mut ready: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.run == Run::Waiting)
            .filter(|(_, n)| {
                !self.leased
                    || n.lease
                        .as_ref()
                        .is_some_and(|l| !l.handoff && l.guard.valid_at(now))
            })
            .filter(|(_, n)| n.parents.iter().all(|p| self.parent_ended(p)))
            .map(|(id, _)| id.clone())
            .collect();
        ready.sort();
        ready
    }

    /// Lease mode, when a reader starts for a new tenure: where it starts, and the progress
    /// entry reset to the row's checkpoint (this worker's older progress is stale).
    pub(crate) fn begin_tenure(
        &mut self,
        id: &str,
        progress: &Mutex<StreamCheckpoint>,
        config: &KinesisConfig,
    ) {
        let Some(node) = self.nodes.get_mut(id) else {
            return;
        };
        let Some(held) = &node.lease else {
            return;
        };
        if held.tenure == node.started_tenure {
            return;
        }
        node.started_tenure = held.tenure;
        node.start = match &held.start {
            Checkpoint::Latest => StartAt::Latest,
            Checkpoint::AtTimestamp => StartAt::initial(config),
            _ => StartAt::TrimHorizon,
        };
        if let Ok(mut p) = progress.lock() {
            let entry = p.shards.entry(id.to_string()).or_default();
            entry.position = held.start.position().cloned();
            entry.ended = false;
        }
    }
}
