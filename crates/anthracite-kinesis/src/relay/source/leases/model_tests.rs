//! Workers racing on one in-memory table, with simulated clocks, crashes, pauses, graceful
//! shutdowns and joins, checked against the design's invariants:
//!
//! 1. at every instant, at most one worker's guard is valid for a shard;
//! 2. a row's checkpoint never moves backwards (a stale owner never overwrites a new one's);
//! 3. after a graceful shutdown or a handoff the next owner resumes exactly where the last
//!    one stopped;
//! 4. once the fleet is stable, every unfinished lease is held by exactly one live worker
//!    and each holds ⌊n/w⌋ or ⌈n/w⌉.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::held::ahead;
use super::lease::{Checkpoint, Lease};
use super::memory::MemTable;
use super::table::{Fence, LeaseTable, Outcome, Update};
use super::worker::{LeaseSettings, Leases};
use crate::relay::source::checkpoint::{
    Position, SequenceNumber, ShardCheckpoint, StreamCheckpoint,
};
use crate::relay::source::shards::ListedShard;
use crate::relay::source::stats::KinesisStats;

const L: Duration = Duration::from_secs(9);

fn pos(n: u64) -> Position {
    Position {
        sequence: SequenceNumber::new(n.to_string()).unwrap_or_else(|e| panic!("{e}")),
        sub_sequence: 0,
    }
}

fn number(cp: &Checkpoint) -> u64 {
    cp.position()
        .and_then(|p| p.sequence.as_str().parse().ok())
        .unwrap_or(0)
}

fn listed(n: usize) -> Vec<ListedShard> {
    (0..n)
        .map(|i| ListedShard {
            id: format!("shard-{i:02}"),
            parents: vec![],
            closed: false,
            hash_range: None,
        })
        .collect()
}

#[derive(PartialEq, Eq, Clone, Copy, Debug)]
enum State {
    Running,
    Paused,
}

struct Worker {
    leases: Arc<Leases>,
    /// This worker's clock runs at the same rate as everyone's, from its own origin.
    offset: Duration,
    state: State,
    /// Per shard: (tenure, last delivered position).
    delivered: HashMap<String, (u64, u64)>,
}

struct Sim {
    table: Arc<MemTable>,
    base: Instant,
    t: Duration,
    workers: BTreeMap<String, Worker>,
    next_id: usize,
    rng: fastrand::Rng,
    /// Highest checkpoint seen per row.
    high: HashMap<String, Checkpoint>,
    /// Shard → position a gracefully stopped worker had delivered and released at, or a
    /// handing-off worker had delivered and handed over at.
    released_at: HashMap<String, u64>,
    seed: u64,
    /// What happened, for failure messages.
    log: Vec<String>,
}

impl Sim {
    fn new(seed: u64) -> Self {
        Self {
            table: Arc::new(MemTable::new()),
            base: Instant::now(),
            t: Duration::ZERO,
            workers: BTreeMap::new(),
            next_id: 0,
            rng: fastrand::Rng::with_seed(seed),
            high: HashMap::new(),
            released_at: HashMap::new(),
            seed,
            log: Vec::new(),
        }
    }

    fn note(&mut self, what: String) {
        let rows: Vec<String> = self
            .table
            .rows()
            .iter()
            .map(|r| {
                format!(
                    "{}:{}:{}",
                    r.key,
                    r.owner.as_deref().unwrap_or("-"),
                    r.counter
                )
            })
            .collect();
        self.log
            .push(format!("t={:?} {what} | {}", self.t, rows.join(" ")));
    }

    fn set_state(&mut self, id: &str, state: State) {
        if let Some(w) = self.workers.get_mut(id) {
            w.state = state;
        }
        self.note(format!("{id} {state:?}"));
    }

    fn history(&self) -> String {
        let from = self.log.len().saturating_sub(60);
        self.log[from..].join("\n")
    }

    fn now(&self, w: &Worker) -> Instant {
        self.base + w.offset + self.t
    }

    fn join(&mut self) -> String {
        let id = format!("w{}", self.next_id);
        self.next_id += 1;
        let leases = Leases::new(
            self.table.clone(),
            LeaseSettings {
                stream: "model".into(),
                worker: id.clone(),
                duration: L,
                initial: Checkpoint::TrimHorizon,
                skip_closed: false,
            },
            None,
            Arc::new(KinesisStats::new("model")),
        );
        let offset = Duration::from_millis(self.rng.u64(0..20_000));
        self.workers.insert(
            id.clone(),
            Worker {
                leases: Arc::new(leases),
                offset,
                state: State::Running,
                delivered: HashMap::new(),
            },
        );
        id
    }

    fn pick(&mut self, state: State) -> Option<String> {
        let ids: Vec<String> = self
            .workers
            .iter()
            .filter(|(_, w)| w.state == state)
            .map(|(k, _)| k.clone())
            .collect();
        (!ids.is_empty()).then(|| ids[self.rng.usize(..ids.len())].clone())
    }

    /// Delivers a few records on every shard whose guard is valid and whose lease is not
    /// being handed off (that reader has stopped); returns the positions to commit.
    fn deliver(&mut self, id: &str, end_shard: bool) -> StreamCheckpoint {
        let mut cp = StreamCheckpoint::default();
        let Some(w) = self.workers.get(id) else {
            return cp;
        };
        let now = self.now(w);
        let view = w.leases.subscribe().borrow().clone();
        let mut delivered = w.delivered.clone();
        for (shard, held) in &view.held {
            if !held.guard.valid_at(now) || held.handoff {
                continue;
            }
            let entry = delivered
                .entry(shard.clone())
                .or_insert((held.tenure, number(&held.start)));
            if entry.0 != held.tenure {
                *entry = (held.tenure, number(&held.start));
            }
            entry.1 += self.rng.u64(1..4);
            cp.shards.insert(
                shard.clone(),
                ShardCheckpoint {
                    position: Some(pos(entry.1)),
                    ended: end_shard && self.rng.u8(..50) == 0,
                },
            );
        }
        if let Some(w) = self.workers.get_mut(id) {
            w.delivered = delivered;
        }
        cp
    }

    /// Delivers a few records on every shard it may read, then commits.
    async fn deliver_and_save(&mut self, id: &str, end_shard: bool) {
        let cp = self.deliver(id, end_shard);
        let Some(w) = self.workers.get(id) else {
            return;
        };
        let r = w.leases.save(&cp).await;
        self.note(format!(
            "{id} save {:?} {r:?}",
            cp.shards.keys().collect::<Vec<_>>()
        ));
    }

    /// What the coordinator does for each lease a peer asked for: its reader has stopped;
    /// commit what it delivered, then hand over. Records where each was handed over.
    async fn complete_handoffs(&mut self, id: &str) {
        let Some(w) = self.workers.get(id) else {
            return;
        };
        let view = w.leases.subscribe().borrow().clone();
        let mut cp = StreamCheckpoint::default();
        for (shard, held) in view.held.iter().filter(|(_, h)| h.handoff) {
            let at = match w.delivered.get(shard) {
                Some((tenure, at)) if *tenure == held.tenure => *at,
                _ => number(&held.start),
            };
            if at > 0 {
                cp.shards.insert(
                    shard.clone(),
                    ShardCheckpoint {
                        position: Some(pos(at)),
                        ended: false,
                    },
                );
            }
        }
        if view.held.values().all(|h| !h.handoff) {
            return;
        }
        let _ = w.leases.save(&cp).await;
        for (shard, _) in view.held.iter().filter(|(_, h)| h.handoff) {
            w.leases.release_handoff(shard).await;
            if let Some(row) = self.table.rows().into_iter().find(|r| &r.key == shard)
                && row.owner.as_deref() != Some(id)
            {
                self.released_at
                    .insert(shard.clone(), number(&row.checkpoint));
            }
        }
        self.note(format!("{id} handed off"));
    }

    async fn step(&mut self, churn: bool) {
        match self.rng.u8(..100) {
            0..=29 => {
                self.t += Duration::from_millis(self.rng.u64(0..L.as_millis() as u64 / 2));
            }
            30..=49 => {
                if let Some(id) = self.pick(State::Running) {
                    let w = &self.workers[&id];
                    let now = self.now(w);
                    let lost = w.leases.renew_at(now).await;
                    self.note(format!("{id} renew lost={lost:?}"));
                }
            }
            50..=69 => {
                if let Some(id) = self.pick(State::Running) {
                    self.take(&id).await;
                }
            }
            70..=84 => {
                if let Some(id) = self.pick(State::Running) {
                    self.deliver_and_save(&id, churn).await;
                }
            }
            85..=89 => {
                if let Some(id) = self.pick(State::Running) {
                    self.complete_handoffs(&id).await;
                }
            }
            90..=92 if churn => {
                // Crash: the worker vanishes without a word.
                if self.workers.len() > 1
                    && let Some(id) = self.pick(State::Running)
                {
                    self.workers.remove(&id);
                    self.note(format!("{id} crash"));
                }
            }
            93..=94 if churn => {
                if let Some(id) = self.pick(State::Running) {
                    self.set_state(&id, State::Paused);
                }
            }
            95..=96 if churn => {
                if let Some(id) = self.pick(State::Paused) {
                    self.set_state(&id, State::Running);
                }
            }
            97 if churn => {
                // Graceful shutdown: final checkpoint, then release.
                if self.workers.len() > 1
                    && let Some(id) = self.pick(State::Running)
                {
                    self.deliver_and_save(&id, false).await;
                    let w = self.workers.remove(&id).unwrap_or_else(|| unreachable!());
                    let view = w.leases.subscribe().borrow().clone();
                    let now = self.now(&w);
                    w.leases.release_all(now).await;
                    self.note(format!("{id} shutdown"));
                    for shard in view.held.keys() {
                        if let Some(row) = self.table.rows().into_iter().find(|r| &r.key == shard)
                            && row.owner.is_none()
                        {
                            self.released_at
                                .insert(shard.clone(), number(&row.checkpoint));
                        }
                    }
                }
            }
            98..=99 if churn && self.workers.len() < 6 => {
                let id = self.join();
                self.note(format!("{id} joins"));
            }
            _ => {}
        }
    }

    async fn check(&mut self) {
        let seed = self.seed;
        // 1. One valid guard per shard at any instant.
        let mut valid: HashMap<String, Vec<String>> = HashMap::new();
        for (id, w) in &self.workers {
            let now = self.now(w);
            for (shard, held) in &w.leases.subscribe().borrow().held {
                if held.guard.valid_at(now) {
                    valid.entry(shard.clone()).or_default().push(id.clone());
                }
            }
        }
        for (shard, holders) in &valid {
            assert!(
                holders.len() <= 1,
                "seed {seed}: {shard} validly held by {holders:?} at t={:?}\n{}",
                self.t,
                self.history()
            );
        }
        // 2. Checkpoints only move forward.
        for row in self.table.rows() {
            let high = self
                .high
                .entry(row.key.clone())
                .or_insert(Checkpoint::TrimHorizon);
            assert!(
                !ahead(high, &row.checkpoint),
                "seed {seed}: {} went back from {high} to {}",
                row.key,
                row.checkpoint
            );
            *high = row.checkpoint.clone();
        }
    }

    /// A taker cycle; 3. a released shard's next owner starts where it was released.
    async fn take(&mut self, id: &str) {
        let w = &self.workers[id];
        let now = self.now(w);
        let took = w.leases.take_at(|| now).await;
        let view = w.leases.subscribe().borrow().clone();
        self.note(format!("{id} take {took:?}"));
        for shard in took.taken.iter().chain(&took.stolen) {
            if let Some(at) = self.released_at.remove(shard) {
                let start = &view.held[shard].start;
                assert!(
                    number(start) >= at,
                    "seed {}: {shard} released at {at}, retaken at {start}",
                    self.seed
                );
            }
        }
    }

    /// Runs the survivors for a while with no churn: every cycle a renewal, a take and a save.
    async fn settle(&mut self) {
        for w in self.workers.values_mut() {
            w.state = State::Running;
        }
        for _ in 0..60 {
            self.t += L / 3;
            let ids: Vec<String> = self.workers.keys().cloned().collect();
            for id in &ids {
                let w = &self.workers[id];
                let now = self.now(w);
                w.leases.renew_at(now).await;
                self.complete_handoffs(id).await;
            }
            for id in &ids {
                self.take(id).await;
                self.deliver_and_save(id, false).await;
            }
            self.check().await;
        }
    }

    /// 4. Every unfinished lease held by one live worker; counts within ⌊n/w⌋..=⌈n/w⌉.
    fn assert_balanced(&self) {
        let seed = self.seed;
        let rows: Vec<Lease> = self
            .table
            .rows()
            .into_iter()
            .filter(|r| !r.ended())
            .collect();
        let mut counts: BTreeMap<String, usize> =
            self.workers.keys().map(|k| (k.clone(), 0)).collect();
        for row in &rows {
            let owner = row
                .owner
                .clone()
                .unwrap_or_else(|| panic!("seed {seed}: {} unowned", row.key));
            let w = self
                .workers
                .get(&owner)
                .unwrap_or_else(|| panic!("seed {seed}: {} owned by dead {owner}", row.key));
            assert!(
                w.leases.subscribe().borrow().held.contains_key(&row.key),
                "seed {seed}: {owner} owns {} in the table but does not hold it",
                row.key
            );
            *counts.entry(owner).or_default() += 1;
        }
        let (n, wk) = (rows.len(), self.workers.len());
        for (w, c) in &counts {
            assert!(
                (n / wk..=n.div_ceil(wk)).contains(c),
                "seed {seed}: {w} holds {c} of {n} over {wk} workers: {counts:?}\n{}",
                self.history()
            );
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn racing_workers_keep_the_invariants_through_crashes_pauses_and_shutdowns() {
    for seed in 0..80 {
        let mut sim = Sim::new(seed);
        for _ in 0..3 {
            sim.join();
        }
        let first = sim.workers.keys().next().cloned().unwrap_or_default();
        sim.workers[&first]
            .leases
            .sync_shards(&listed(7))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for _ in 0..400 {
            sim.step(true).await;
            sim.check().await;
        }
        sim.settle().await;
        sim.assert_balanced();
    }
}

#[tokio::test(flavor = "current_thread")]
async fn sixteen_workers_race_for_one_lease_exactly_one_wins() {
    let table = Arc::new(MemTable::new());
    let row = Lease::new("shard-00", Checkpoint::TrimHorizon);
    assert_eq!(table.create(&row).await.ok(), Some(Outcome::Written));
    assert_eq!(table.create(&row).await.ok(), Some(Outcome::Conflict));
    let fence = Fence {
        counter: 0,
        owner: None,
    };
    let mut wins = 0;
    for i in 0..16 {
        let take = Update::Take {
            worker: format!("w{i}"),
        };
        if table.update("shard-00", &fence, &take).await.ok() == Some(Outcome::Written) {
            wins += 1;
        }
    }
    assert_eq!(wins, 1);
    let rows = table.rows();
    assert_eq!(rows[0].counter, 1);
    assert_eq!(rows[0].owner.as_deref(), Some("w0"));
}

#[tokio::test(flavor = "current_thread")]
async fn paused_owner_neither_checkpoints_over_the_new_owner_nor_stays_valid() {
    let mut sim = Sim::new(7);
    let a = sim.join();
    let b = sim.join();
    for w in sim.workers.values_mut() {
        w.offset = Duration::ZERO;
    }
    sim.workers[&a]
        .leases
        .sync_shards(&listed(1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let now = sim.now(&sim.workers[&a]);
    let took = sim.workers[&a].leases.take_at(|| now).await;
    assert_eq!(took.taken.len(), 1);
    sim.deliver_and_save(&a, false).await;
    let a_view = sim.workers[&a].leases.subscribe().borrow().clone();
    let guard = a_view.held["shard-00"].guard.clone();
    // A pauses; B watches the counter stand still for a lease duration, then takes it.
    if let Some(w) = sim.workers.get_mut(&a) {
        w.state = State::Paused;
    }
    let now = sim.now(&sim.workers[&b]);
    sim.workers[&b].leases.take_at(|| now).await;
    sim.t += L + Duration::from_millis(1);
    let now = sim.now(&sim.workers[&b]);
    let took = sim.workers[&b].leases.take_at(|| now).await;
    assert_eq!(took.taken, ["shard-00"]);
    assert!(
        !guard.valid_at(sim.now(&sim.workers[&a])),
        "A's guard expired by A's clock"
    );
    for _ in 0..3 {
        sim.deliver_and_save(&b, false).await;
    }
    let b_cp = sim.table.rows()[0].checkpoint.clone();
    // A resumes: its checkpoint write fails its condition and loses the lease.
    if let Some(w) = sim.workers.get_mut(&a) {
        w.state = State::Running;
    }
    let mut stale = StreamCheckpoint::default();
    stale.shards.insert(
        "shard-00".into(),
        ShardCheckpoint {
            position: Some(pos(1_000_000)),
            ended: false,
        },
    );
    let _ = sim.workers[&a].leases.save(&stale).await;
    assert!(
        guard.lost().is_cancelled(),
        "the reader's guard is cancelled"
    );
    let row = sim.table.rows()[0].clone();
    assert_eq!(row.checkpoint, b_cp, "B's checkpoint stands");
    assert_eq!(row.owner.as_deref(), Some(b.as_str()));
    assert_eq!(row.owner_switches, 0, "B checkpointed since the switch");
    assert_eq!(sim.workers[&a].leases.subscribe().borrow().held.len(), 0);
}

/// A table that answers every call with an error while `down` is set.
#[derive(Debug)]
struct Flaky {
    inner: MemTable,
    down: std::sync::atomic::AtomicBool,
}

impl Flaky {
    fn check(&self) -> Result<(), super::table::TableError> {
        if self.down.load(std::sync::atomic::Ordering::Relaxed) {
            Err(super::table::TableError::Service {
                table: "flaky".into(),
                operation: "any",
                message: "unreachable".into(),
            })
        } else {
            Ok(())
        }
    }
}

impl LeaseTable for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    fn ensure_table(&self) -> super::table::TableFuture<'_, ()> {
        Box::pin(async move { self.check() })
    }
    fn scan(&self) -> super::table::TableFuture<'_, Vec<Lease>> {
        Box::pin(async move {
            self.check()?;
            self.inner.scan().await
        })
    }
    fn get<'a>(&'a self, key: &'a str) -> super::table::TableFuture<'a, Option<Lease>> {
        Box::pin(async move {
            self.check()?;
            self.inner.get(key).await
        })
    }
    fn create<'a>(&'a self, lease: &'a Lease) -> super::table::TableFuture<'a, Outcome> {
        Box::pin(async move {
            self.check()?;
            self.inner.create(lease).await
        })
    }
    fn update<'a>(
        &'a self,
        key: &'a str,
        fence: &'a Fence,
        update: &'a Update,
    ) -> super::table::TableFuture<'a, Outcome> {
        Box::pin(async move {
            self.check()?;
            self.inner.update(key, fence, update).await
        })
    }
    fn add_child<'a>(
        &'a self,
        key: &'a str,
        child: &'a str,
    ) -> super::table::TableFuture<'a, Outcome> {
        Box::pin(async move {
            self.check()?;
            self.inner.add_child(key, child).await
        })
    }
    fn delete_ended<'a>(&'a self, key: &'a str) -> super::table::TableFuture<'a, Outcome> {
        Box::pin(async move {
            self.check()?;
            self.inner.delete_ended(key).await
        })
    }
}

#[tokio::test(flavor = "current_thread")]
async fn table_unreachable_for_a_lease_duration_expires_the_lease_by_the_own_clock() {
    let table = Arc::new(Flaky {
        inner: MemTable::new(),
        down: false.into(),
    });
    let leases = Leases::new(
        table.clone(),
        LeaseSettings {
            stream: "model".into(),
            worker: "w".into(),
            duration: L,
            initial: Checkpoint::TrimHorizon,
            skip_closed: false,
        },
        None,
        Arc::new(KinesisStats::new("model")),
    );
    leases
        .sync_shards(&listed(1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let t0 = Instant::now();
    assert_eq!(leases.take_at(|| t0).await.taken.len(), 1);
    let guard = leases.subscribe().borrow().held["shard-00"].guard.clone();
    table.down.store(true, std::sync::atomic::Ordering::Relaxed);
    for i in 1..3u32 {
        assert!(leases.renew_at(t0 + L / 3 * i).await.is_empty());
        assert!(
            guard.valid_at(t0 + L / 3 * i),
            "still within the lease duration"
        );
    }
    assert!(
        !guard.valid_at(t0 + L),
        "not valid once a lease duration passed"
    );
    let lost = leases.renew_at(t0 + L).await;
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].why, super::held::Loss::Expired);
    assert!(guard.lost().is_cancelled());
}

/// Two workers with clocks from one origin, `shards` leases all held by the first.
async fn one_holds_everything(seed: u64, shards: usize) -> (Sim, String, String) {
    let mut sim = Sim::new(seed);
    let a = sim.join();
    sim.workers[&a]
        .leases
        .sync_shards(&listed(shards))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let b = sim.join();
    for w in sim.workers.values_mut() {
        w.offset = Duration::ZERO;
    }
    let now = sim.now(&sim.workers[&a]);
    let took = sim.workers[&a].leases.take_at(|| now).await;
    assert_eq!(took.taken.len(), shards, "a alone takes every lease");
    (sim, a, b)
}

async fn take(sim: &Sim, id: &str) -> super::worker::Took {
    let now = sim.now(&sim.workers[id]);
    sim.workers[id].leases.take_at(|| now).await
}

#[tokio::test(flavor = "current_thread")]
async fn a_joining_worker_gets_its_share_by_handoff_resuming_exactly_where_the_owner_stopped() {
    let (mut sim, a, b) = one_holds_everything(21, 2).await;
    sim.deliver_and_save(&a, false).await;
    // Delivered past the last checkpoint: a plain steal would read these records again.
    let _ = sim.deliver(&a, false);
    let took = take(&sim, &b).await;
    assert_eq!(took.marked.len(), 1, "{took:?}");
    assert!(took.taken.is_empty() && took.stolen.is_empty());
    let shard = took.marked[0].clone();
    let delivered = sim.workers[&a].delivered[&shard].1;
    assert!(
        number(
            &sim.table
                .rows()
                .into_iter()
                .find(|r| r.key == shard)
                .unwrap_or_else(|| unreachable!())
                .checkpoint
        ) < delivered
    );
    // b waits for the owner: its pending mark counts as its own lease.
    assert_eq!(take(&sim, &b).await, Default::default());
    sim.t += L / 3;
    let now = sim.now(&sim.workers[&a]);
    assert!(sim.workers[&a].leases.renew_at(now).await.is_empty());
    let view = sim.workers[&a].leases.subscribe().borrow().clone();
    assert!(view.held[&shard].handoff, "the renewal found the mark");
    assert!(
        !view
            .held
            .values()
            .filter(|h| !h.handoff)
            .any(|h| !h.guard.valid_at(now))
    );
    sim.complete_handoffs(&a).await;
    sim.check().await;
    let row = sim
        .table
        .rows()
        .into_iter()
        .find(|r| r.key == shard)
        .unwrap_or_else(|| unreachable!());
    assert_eq!(
        (row.owner.as_deref(), row.handoff.as_deref()),
        (Some(b.as_str()), Some(b.as_str())),
        "handed over, awaiting b's take"
    );
    assert_eq!(
        number(&row.checkpoint),
        delivered,
        "the owner committed what it delivered"
    );
    let took = take(&sim, &b).await;
    assert_eq!(
        took.taken,
        std::slice::from_ref(&shard),
        "handed over: taken, not stolen"
    );
    let view = sim.workers[&b].leases.subscribe().borrow().clone();
    assert_eq!(
        number(&view.held[&shard].start),
        delivered,
        "zero duplicates"
    );
    assert!(
        view.held[&shard].guard.valid_at(sim.now(&sim.workers[&b])),
        "readable at once"
    );
    sim.check().await;
    assert_eq!(sim.workers[&a].leases.subscribe().borrow().held.len(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn an_owner_dying_mid_handoff_loses_nothing_its_successor_resumes_at_the_last_checkpoint() {
    for dies_after_checkpoint in [false, true] {
        let (mut sim, a, b) = one_holds_everything(22, 2).await;
        sim.deliver_and_save(&a, false).await;
        let _ = sim.deliver(&a, false);
        let took = take(&sim, &b).await;
        let shard = took.marked[0].clone();
        let delivered = sim.workers[&a].delivered[&shard].1;
        let now = sim.now(&sim.workers[&a]);
        sim.workers[&a].leases.renew_at(now).await;
        assert!(sim.workers[&a].leases.subscribe().borrow().held[&shard].handoff);
        if dies_after_checkpoint {
            let mut cp = StreamCheckpoint::default();
            cp.shards.insert(
                shard.clone(),
                ShardCheckpoint {
                    position: Some(pos(delivered)),
                    ended: false,
                },
            );
            sim.workers[&a]
                .leases
                .save(&cp)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let checkpoint = number(
            &sim.table
                .rows()
                .into_iter()
                .find(|r| r.key == shard)
                .unwrap_or_else(|| unreachable!())
                .checkpoint,
        );
        // a dies before releasing: nothing happens to the row until it expires.
        sim.workers.remove(&a);
        sim.t += L / 2;
        assert_eq!(
            take(&sim, &b).await,
            Default::default(),
            "neither released nor expired"
        );
        sim.t += L;
        let took = take(&sim, &b).await;
        assert!(took.taken.contains(&shard), "expired: taken ({took:?})");
        let start = number(&sim.workers[&b].leases.subscribe().borrow().held[&shard].start);
        assert_eq!(start, checkpoint, "resumes at the last checkpoint");
        assert!(start <= delivered, "nothing a delivered is skipped");
        if dies_after_checkpoint {
            assert_eq!(
                start, delivered,
                "the checkpoint had landed: no duplicates either"
            );
        }
        sim.check().await;
    }
}
