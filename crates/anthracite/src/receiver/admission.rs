//! Connection admission: a connection limit with eviction of the idlest connection, shared by
//! every TCP receiver (and, with its own limit, by the admin listener).
//!
//! carbon accepts connections up to `MAX_RECEIVER_CONNECTIONS` and closes the rest, so a flood
//! of idle sockets (or clients that went away without closing) locks every real client out
//! until something frees a slot. anthracite chooses **eviction**: when the limit is reached,
//! the connection that has been silent the longest is closed to admit the new one — provided
//! it has been silent for at least a minimum ([`MIN_IDLE_TO_EVICT`] for the receivers). Only when every connection is busy
//! is the new one refused. Both are counted (`evicted`, `rejected`) and logged once per
//! episode. A client that is sending is never the one evicted; one that is evicted sees its
//! connection closed, as with the idle timeout, and reconnects.
//!
//! Each admitted connection has a [`Slot`]: its last-activity time (one atomic store per read,
//! never per datapoint) and the token that tells it to close. The registry is scanned only at
//! the limit.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A receiver's connection silent for less than this is never evicted.
pub const MIN_IDLE_TO_EVICT: Duration = Duration::from_secs(1);

/// One admitted connection's shared state.
#[derive(Debug)]
pub(crate) struct Slot {
    /// Milliseconds since the registry's epoch at the last read.
    last_active_ms: AtomicU64,
    /// Cancelled to make the connection close (eviction).
    evict: CancellationToken,
}

impl Slot {
    /// Cancelled when the connection is evicted.
    pub(crate) fn evicted(&self) -> &CancellationToken {
        &self.evict
    }
}

#[derive(Debug, Default)]
struct Registry {
    slots: Vec<Option<Arc<Slot>>>,
    free: Vec<usize>,
    used: usize,
}

/// The connection limit and the registry of admitted connections. Cheap to share.
#[derive(Debug)]
pub(crate) struct Admission {
    /// Changed by a configuration reload (`listen.max_connections`).
    limit: AtomicUsize,
    /// A connection silent for less than this is never evicted.
    min_idle: Duration,
    epoch: Instant,
    registry: Mutex<Registry>,
    /// Wakes an accept loop waiting for an evicted connection to leave.
    freed: Notify,
}

/// An admitted connection; leaving (drop) frees its slot.
#[derive(Debug)]
pub(crate) struct Admitted {
    admission: Arc<Admission>,
    index: usize,
    slot: Arc<Slot>,
}

impl Admitted {
    /// Records activity (a read): the connection is not idle.
    pub(crate) fn touch(&self) {
        let now = self.admission.now_ms();
        self.slot.last_active_ms.store(now, Ordering::Relaxed);
    }

    /// The connection's shared state.
    pub(crate) fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut r = self.admission.lock();
        if let Some(entry) = r.slots.get_mut(self.index) {
            *entry = None;
            r.free.push(self.index);
            r.used -= 1;
        }
        drop(r);
        self.admission.freed.notify_waiters();
    }
}

impl Admission {
    /// At most `limit` connections at once; one silent for `min_idle` may be evicted for a
    /// newcomer.
    pub(crate) fn new(limit: usize, min_idle: Duration) -> Self {
        Self {
            limit: AtomicUsize::new(limit),
            min_idle,
            epoch: Instant::now(),
            registry: Mutex::new(Registry::default()),
            freed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // Every update is a few assignments: a poisoned lock is still consistent.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A reload changed the limit: connections over a lowered limit stay open (until they
    /// close or go idle and are evicted); new ones wait until the count is below it.
    pub(crate) fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// Connections admitted now.
    #[cfg(test)]
    pub fn active(&self) -> usize {
        self.lock().used
    }

    /// Admits a connection if there is room.
    pub(crate) fn try_admit(self: &Arc<Self>) -> Option<Admitted> {
        let mut r = self.lock();
        if r.used >= self.limit.load(Ordering::Relaxed) {
            return None;
        }
        let slot = Arc::new(Slot {
            last_active_ms: AtomicU64::new(self.now_ms()),
            evict: CancellationToken::new(),
        });
        let index = match r.free.pop() {
            Some(i) => {
                r.slots[i] = Some(slot.clone());
                i
            }
            None => {
                r.slots.push(Some(slot.clone()));
                r.slots.len() - 1
            }
        };
        r.used += 1;
        Some(Admitted {
            admission: self.clone(),
            index,
            slot,
        })
    }

    /// How long a connection must be silent before it may be evicted.
    pub(crate) fn min_idle(&self) -> Duration {
        self.min_idle
    }

    /// Tells the connection silent the longest (at least the minimum) to close. False when
    /// every connection is busy (or already told to close).
    pub(crate) fn evict_idlest(&self) -> bool {
        let now = self.now_ms();
        let min_idle = self.min_idle.as_millis() as u64;
        let r = self.lock();
        let victim = r
            .slots
            .iter()
            .flatten()
            .filter(|s| !s.evict.is_cancelled())
            .map(|s| (s.last_active_ms.load(Ordering::Relaxed), s))
            .filter(|(t, _)| now.saturating_sub(*t) >= min_idle)
            .min_by_key(|(t, _)| *t);
        match victim {
            Some((_, s)) => {
                s.evict.cancel();
                true
            }
            None => false,
        }
    }

    /// Admits a connection once a slot is free (after an eviction), waiting at most `wait`.
    pub(crate) async fn admit_within(self: &Arc<Self>, wait: Duration) -> Option<Admitted> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(a) = self.try_admit() {
                return Some(a);
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return self.try_admit();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_the_limit_the_idlest_connection_is_evicted_and_busy_ones_are_kept() {
        let a = Arc::new(Admission::new(2, MIN_IDLE_TO_EVICT));
        let first = a.try_admit().expect("room");
        let second = a.try_admit().expect("room");
        assert!(a.try_admit().is_none());
        // Nobody has been silent long enough yet.
        assert!(!a.evict_idlest());
        // Both go silent; then the second one reads again.
        std::thread::sleep(MIN_IDLE_TO_EVICT + Duration::from_millis(20));
        second.touch();
        assert!(a.evict_idlest());
        assert!(first.slot().evicted().is_cancelled());
        assert!(!second.slot().evicted().is_cancelled());
        // The evicted connection leaves: its slot admits the newcomer.
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move { a.admit_within(Duration::from_secs(5)).await })
        };
        drop(first);
        let third = waiter
            .await
            .expect("join")
            .expect("admitted after the eviction");
        assert_eq!(a.active(), 2);
        drop((second, third));
        assert_eq!(a.active(), 0);
    }
}
