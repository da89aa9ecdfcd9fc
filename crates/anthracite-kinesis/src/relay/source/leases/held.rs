//! The leases one worker holds: renewal, fenced checkpoints, release, and the guard each
//! shard reader consults before delivering a batch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::lease::{Checkpoint, Lease};
use super::table::{Fence, LeaseTable, Outcome, TableError, Update};

/// Whether a shard's lease is this worker's to read: lost at once when a write fails its
/// condition, expired by this worker's own clock when no renewal succeeded for one lease
/// duration (a peer may take it from then on), and — after a steal — not yet valid until the
/// previous owner's lease has certainly lapsed.
#[derive(Debug)]
pub(crate) struct LeaseGuard {
    base: Instant,
    /// Nanoseconds after `base`.
    valid_from: AtomicU64,
    /// Nanoseconds after `base`.
    valid_until: AtomicU64,
    lost: CancellationToken,
    /// The loss of this tenure was counted (by the renewer, a checkpoint, or the reader,
    /// whichever found it first).
    counted: AtomicBool,
}

fn nanos_after(base: Instant, t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX)
}

impl LeaseGuard {
    fn new(base: Instant, valid_from: Instant, valid_until: Instant) -> Self {
        Self {
            base,
            valid_from: AtomicU64::new(nanos_after(base, valid_from)),
            valid_until: AtomicU64::new(nanos_after(base, valid_until)),
            lost: CancellationToken::new(),
            counted: AtomicBool::new(false),
        }
    }

    /// True for the first caller only: the loss of this tenure is counted once, whoever
    /// notices it first.
    pub(crate) fn first_to_count_loss(&self) -> bool {
        !self.counted.swap(true, Relaxed)
    }

    /// Valid at `now`: not lost, past any steal delay, renewed within one lease duration.
    pub(crate) fn valid_at(&self, now: Instant) -> bool {
        let t = nanos_after(self.base, now);
        !self.lost.is_cancelled()
            && t >= self.valid_from.load(Relaxed)
            && t < self.valid_until.load(Relaxed)
    }

    /// Stolen so recently that the previous owner may still be reading.
    pub(crate) fn pending_at(&self, now: Instant) -> bool {
        nanos_after(self.base, now) < self.valid_from.load(Relaxed)
    }

    /// Valid now.
    pub(crate) fn valid(&self) -> bool {
        self.valid_at(Instant::now())
    }

    /// Cancelled when the lease is lost (or released).
    pub(crate) fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    fn extend(&self, until: Instant) {
        self.valid_until
            .store(nanos_after(self.base, until), Relaxed);
    }

    fn lose(&self) {
        self.lost.cancel();
    }
}

/// Why a held lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loss {
    /// A renewal or checkpoint failed its condition: another worker took the lease.
    Conflict,
    /// No renewal succeeded for one lease duration (table unreachable, process paused).
    Expired,
}

/// One held lease.
#[derive(Debug)]
pub(crate) struct HeldLease {
    /// The `leaseCounter` the row has (as written by this worker).
    pub counter: u64,
    pub guard: Arc<LeaseGuard>,
    /// Increases with every take, so the coordinator tells a new tenure from the old one.
    pub tenure: u64,
    /// The row's checkpoint when it was taken: where reading resumes.
    pub start: Checkpoint,
    /// The newest checkpoint in the row (taken or written in this tenure).
    pub written: Checkpoint,
    /// Renewed within one lease duration before this instant.
    pub valid_until: Instant,
    /// A peer marked the lease for handoff: this worker stops its reader, checkpoints what
    /// it delivered and releases the lease; it no longer renews it.
    pub handoff: Option<String>,
}

/// A lease lost during an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Lost {
    /// The shard.
    pub key: String,
    /// Why.
    pub why: Loss,
    /// Not counted yet (its reader had not already found the lease expired).
    pub uncounted: bool,
}

/// What a checkpoint write did.
#[derive(Debug, Default)]
pub(crate) struct Saved {
    /// Shards whose row now holds the new checkpoint.
    pub written: usize,
    /// Leases released because their shard ended.
    pub ended: Vec<String>,
    /// Leases lost (the write failed its condition).
    pub lost: Vec<Lost>,
    /// Writes that failed otherwise (retried at the next commit).
    pub errors: Vec<TableError>,
}

/// What a renewal cycle found.
#[derive(Debug, Default)]
pub(crate) struct Renewed {
    /// Leases lost (a peer took them, or they expired by this worker's clock).
    pub lost: Vec<Lost>,
    /// `(shard, peer)`: leases a peer asked for; this worker hands them off.
    pub handoffs: Vec<(String, String)>,
    /// Calls that failed (retried next cycle).
    pub errors: Vec<TableError>,
}

/// The leases this worker holds.
#[derive(Debug)]
pub(crate) struct Holder {
    worker: String,
    duration: Duration,
    leases: BTreeMap<String, HeldLease>,
    tenures: u64,
}

/// Is `new` further along than `old`? Checkpoints only move forward within a tenure.
pub(crate) fn ahead(new: &Checkpoint, old: &Checkpoint) -> bool {
    match (new, old) {
        (_, Checkpoint::ShardEnd) => false,
        (Checkpoint::ShardEnd, _) => true,
        (Checkpoint::At(n), Checkpoint::At(o)) => n > o,
        (Checkpoint::At(_), _) => true,
        _ => false,
    }
}

/// What a fenced write did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fenced {
    /// The condition held and the row was written.
    Written,
    /// The write failed its condition, but a read shows it had landed (the SDK retried a
    /// request that had in fact been applied).
    WrittenLate,
    /// The row changed since it was read: another worker wrote it.
    Conflict,
    /// A renewal found the row unchanged but marked: `worker` asks for the lease.
    HandoffRequested(String),
}

/// Runs one fenced write. A conflict on a counter-moving write is double-checked with a read:
/// when the SDK retried a request that had in fact landed, the row shows this write's result
/// (counter + 1, the new owner) and the write counts as done; when a renewal failed only on a
/// handoff mark, the row is as this worker left it plus the mark.
pub(crate) async fn fenced(
    table: &dyn LeaseTable,
    key: &str,
    fence: &Fence,
    update: &Update,
) -> Result<Fenced, TableError> {
    match table.update(key, fence, update).await? {
        Outcome::Written => Ok(Fenced::Written),
        Outcome::Conflict if update.bumps_counter() => {
            let Some(row) = table.get(key).await? else {
                return Ok(Fenced::Conflict);
            };
            let landed = row.counter == fence.counter.saturating_add(1)
                && row.owner.as_deref() == update.owner_after(fence.owner.as_deref());
            Ok(match row.handoff {
                _ if landed => Fenced::WrittenLate,
                Some(to) if *update == Update::Renew && fence.matches(&row) => {
                    Fenced::HandoffRequested(to)
                }
                _ => Fenced::Conflict,
            })
        }
        Outcome::Conflict => Ok(Fenced::Conflict),
    }
}

impl Holder {
    pub(super) fn new(worker: &str, duration: Duration) -> Self {
        Self {
            worker: worker.to_string(),
            duration,
            leases: BTreeMap::new(),
            tenures: 0,
        }
    }

    pub(super) fn leases(&self) -> &BTreeMap<String, HeldLease> {
        &self.leases
    }

    fn fence(&self, held: &HeldLease) -> Fence {
        Fence {
            counter: held.counter,
            owner: Some(self.worker.clone()),
        }
    }

    /// Records a lease this worker just took: `row` as it was before the take, `sent` when the
    /// take was sent (validity counts from then, never from the answer), `answered` when it
    /// was answered. A stolen lease's previous owner may read until its last renewal + one
    /// lease duration, which is before `answered` + one lease duration: the new guard is not
    /// valid before that, so no two workers ever read one shard at the same time.
    pub(super) fn insert_taken(
        &mut self,
        row: &Lease,
        sent: Instant,
        answered: Instant,
        steal: bool,
    ) -> Arc<LeaseGuard> {
        let valid_until = sent + self.duration;
        let valid_from = if steal {
            answered + self.duration
        } else {
            sent
        };
        let guard = Arc::new(LeaseGuard::new(sent, valid_from, valid_until));
        self.tenures += 1;
        if let Some(old) = self.leases.insert(
            row.key.clone(),
            HeldLease {
                counter: row.counter.saturating_add(1),
                guard: guard.clone(),
                tenure: self.tenures,
                start: row.checkpoint.clone(),
                written: row.checkpoint.clone(),
                valid_until,
                handoff: None,
            },
        ) {
            old.guard.lose();
        }
        guard
    }

    /// Drops a lease: its reader stops at once. True when the loss is still to be counted
    /// (its reader had not counted it).
    pub(super) fn lose(&mut self, key: &str) -> bool {
        match self.leases.remove(key) {
            Some(h) => {
                h.guard.lose();
                h.guard.first_to_count_loss()
            }
            None => false,
        }
    }

    /// Renews every held lease not being handed off (concurrently), `now` being when the
    /// requests are sent.
    pub(super) async fn renew(&mut self, table: &Arc<dyn LeaseTable>, now: Instant) -> Renewed {
        let mut calls = JoinSet::new();
        for (key, held) in self.leases.iter().filter(|(_, h)| h.handoff.is_none()) {
            let (table, key, fence) = (table.clone(), key.clone(), self.fence(held));
            calls.spawn(async move {
                let r = fenced(table.as_ref(), &key, &fence, &Update::Renew).await;
                (key, r)
            });
        }
        let mut out = Renewed::default();
        let mut results = Vec::with_capacity(self.leases.len());
        while let Some(joined) = calls.join_next().await {
            match joined {
                Ok(r) => results.push(r),
                Err(e) => out.errors.push(TableError::Service {
                    table: table.name().to_string(),
                    operation: "renew task",
                    message: e.to_string(),
                }),
            }
        }
        for (key, r) in results {
            let Some(held) = self.leases.get_mut(&key) else {
                continue;
            };
            match r {
                Ok(Fenced::Written) => {
                    held.counter += 1;
                    held.valid_until = now + self.duration;
                    held.guard.extend(held.valid_until);
                }
                // A write found landed by a read may have landed before `now`: it does not
                // extend validity (the next renewal will).
                Ok(Fenced::WrittenLate) => held.counter += 1,
                Ok(Fenced::HandoffRequested(to)) => {
                    held.handoff = Some(to.clone());
                    out.handoffs.push((key, to));
                }
                Ok(Fenced::Conflict) => out.lost.push(Lost {
                    key,
                    why: Loss::Conflict,
                    uncounted: false,
                }),
                Err(e) => out.errors.push(e),
            }
        }
        // Leases not renewed for one lease duration count as lost by this worker's clock. A
        // lease being handed off is no longer renewed: its reader stops when its validity runs
        // out, but the final checkpoint and the transfer, both fenced, may still land (they
        // fail if a peer took the lease meanwhile); it is dropped a lease duration later.
        for (key, held) in &self.leases {
            let until = match held.handoff {
                Some(_) => held.valid_until + self.duration,
                None => held.valid_until,
            };
            if now >= until && !out.lost.iter().any(|l| &l.key == key) {
                out.lost.push(Lost {
                    key: key.clone(),
                    why: Loss::Expired,
                    uncounted: false,
                });
            }
        }
        for l in &mut out.lost {
            l.uncounted = self.lose(&l.key);
        }
        out
    }

    /// Hands one lease over to the peer that asked, after its reader stopped and its
    /// checkpoint was written: the peer takes it from that checkpoint. `Ok(false)` when this
    /// worker no longer held it or a peer wrote the row meanwhile.
    pub(super) async fn release_handoff(
        &mut self,
        table: &Arc<dyn LeaseTable>,
        key: &str,
    ) -> Result<bool, TableError> {
        let Some(held) = self.leases.get(key) else {
            return Ok(false);
        };
        let Some(to) = held.handoff.clone() else {
            return Ok(false);
        };
        let fence = self.fence(held);
        // The reader has stopped; dropping the lease first means no new reader starts while
        // the transfer is out.
        self.lose(key);
        let r = fenced(table.as_ref(), key, &fence, &Update::Transfer { to }).await?;
        Ok(matches!(r, Fenced::Written | Fenced::WrittenLate))
    }

    /// Writes `checkpoints` (shard → checkpoint) for the leases held, skipping any that is not
    /// ahead of what the row holds. `SHARD_END` also releases the lease.
    pub(super) async fn save(
        &mut self,
        table: &Arc<dyn LeaseTable>,
        checkpoints: Vec<(String, Checkpoint)>,
    ) -> Saved {
        let mut calls = JoinSet::new();
        for (key, cp) in checkpoints {
            let Some(held) = self.leases.get(&key) else {
                continue;
            };
            if !ahead(&cp, &held.written) {
                continue;
            }
            let update = match cp {
                Checkpoint::ShardEnd => Update::End,
                cp => Update::Checkpoint(cp),
            };
            let (table, fence) = (table.clone(), self.fence(held));
            calls.spawn(async move {
                let r = fenced(table.as_ref(), &key, &fence, &update).await;
                (key, update, r)
            });
        }
        let mut saved = Saved::default();
        while let Some(joined) = calls.join_next().await {
            let Ok((key, update, r)) = joined else {
                continue;
            };
            match r {
                Ok(Fenced::Written | Fenced::WrittenLate) => {
                    saved.written += 1;
                    match update {
                        Update::End => {
                            self.leases.remove(&key);
                            saved.ended.push(key);
                        }
                        Update::Checkpoint(cp) => {
                            if let Some(h) = self.leases.get_mut(&key) {
                                h.written = cp;
                            }
                        }
                        _ => {}
                    }
                }
                Ok(Fenced::Conflict | Fenced::HandoffRequested(_)) => {
                    let uncounted = self.lose(&key);
                    saved.lost.push(Lost {
                        key,
                        why: Loss::Conflict,
                        uncounted,
                    });
                }
                Err(e) => saved.errors.push(e),
            }
        }
        saved
    }

    /// Releases every held lease (graceful shutdown, after the final checkpoint): peers may
    /// take them at once. A lease stolen so recently that its previous owner may still be
    /// reading is not released but left to expire, so the next owner waits for that too.
    /// Returns how many were released and the errors.
    pub(super) async fn release_all(
        &mut self,
        table: &Arc<dyn LeaseTable>,
        now: Instant,
    ) -> (usize, Vec<TableError>) {
        let mut calls = JoinSet::new();
        for (key, held) in std::mem::take(&mut self.leases) {
            held.guard.lose();
            if held.guard.pending_at(now) {
                continue;
            }
            let (table, fence) = (table.clone(), self.fence(&held));
            calls
                .spawn(async move { fenced(table.as_ref(), &key, &fence, &Update::Release).await });
        }
        let mut released = 0;
        let mut errors = Vec::new();
        while let Some(joined) = calls.join_next().await {
            match joined {
                Ok(Ok(Fenced::Written | Fenced::WrittenLate)) => released += 1,
                // Already taken by a peer: nothing to release.
                Ok(Ok(Fenced::Conflict | Fenced::HandoffRequested(_))) => {}
                Ok(Err(e)) => errors.push(e),
                Err(_) => {}
            }
        }
        (released, errors)
    }
}
