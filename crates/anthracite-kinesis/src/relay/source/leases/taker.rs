//! Which leases to take: KCL 2.x's `LeaseTaker` rules, as pure functions of what one worker
//! has observed and its own clock, with KCL 3.x's graceful handoff in place of a balancing
//! steal: the taker marks a live worker's lease and waits for its owner to release it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::lease::Lease;

/// A row as this worker has seen it.
#[derive(Clone, Debug)]
struct Seen {
    lease: Lease,
    /// When this worker first saw the row's current counter (its own clock). `None`: first
    /// seen unowned, so never renewed.
    changed_at: Option<Instant>,
    /// When this worker first saw the row's current handoff mark (its own clock).
    marked_at: Option<Instant>,
}

/// The rows of the last scan, each with the time its counter last changed as this worker saw
/// it. That time is all expiry needs: no clock is shared between workers.
#[derive(Debug)]
pub(crate) struct Observer {
    duration: Duration,
    seen: HashMap<String, Seen>,
}

/// What to do with a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Act {
    /// Take it: unowned or expired.
    Take,
    /// Ask its live owner to hand it over (a balancing move): write the handoff mark.
    Mark,
    /// Take it from a live owner at once: the handoff this worker asked for was not done
    /// within one lease duration (an owner that ignores marks), so balance the old way.
    Steal,
}

/// A lease to act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Choice {
    /// The row as last seen (its counter and owner fence the write).
    pub lease: Lease,
    /// What to write.
    pub act: Act,
}

impl Observer {
    pub(super) fn new(duration: Duration) -> Self {
        Self {
            duration,
            seen: HashMap::new(),
        }
    }

    /// Records a scan that completed at `at`. Rows that vanished are forgotten.
    pub(super) fn observe(&mut self, rows: Vec<Lease>, at: Instant) {
        let mut next = HashMap::with_capacity(rows.len());
        for lease in rows {
            let changed_at = match self.seen.get(&lease.key) {
                Some(old) if old.lease.counter == lease.counter => old.changed_at,
                // The counter moved since the last scan, or this owned row is new to us:
                // count it as renewed when we saw it.
                Some(_) => Some(at),
                None if lease.owner.is_some() => Some(at),
                None => None,
            };
            let marked_at = match (self.seen.get(&lease.key), &lease.handoff) {
                (_, None) => None,
                (Some(old), Some(to)) if old.lease.handoff.as_ref() == Some(to) => old.marked_at,
                (_, Some(_)) => Some(at),
            };
            next.insert(
                lease.key.clone(),
                Seen {
                    lease,
                    changed_at,
                    marked_at,
                },
            );
        }
        self.seen = next;
    }

    /// Every row of the last scan.
    pub(super) fn rows(&self) -> impl Iterator<Item = &Lease> {
        self.seen.values().map(|s| &s.lease)
    }

    fn available(&self, s: &Seen, now: Instant) -> bool {
        !s.lease.ended()
            && (s.lease.owner.is_none()
                || s.changed_at
                    .is_none_or(|t| now.saturating_duration_since(t) > self.duration))
    }

    /// The leases worker `me` (holding `held`) should act on at `now`:
    ///
    /// - target per worker: ⌈leases ÷ workers⌉ (1 when there are at least as many workers as
    ///   leases), counting only unfinished leases and only workers that hold a live lease,
    ///   plus `me`; a lease marked for handoff counts for the worker that asked for it;
    /// - a lease handed over to `me` (owned by and marked for `me`, not held yet): take it;
    /// - a lease `me` marked and its owner did not hand over within one lease duration: steal
    ///   it (the fallback to a plain take);
    /// - if below target and some leases are unowned or expired: up to the shortfall of them,
    ///   in random order so workers do not all race for the same row;
    /// - else mark at most one unmarked lease of the most loaded worker for handoff, if it
    ///   holds more than the target, or exactly the target while `me` is short by more than
    ///   one.
    pub(super) fn plan(
        &self,
        me: &str,
        held: &BTreeSet<String>,
        now: Instant,
        rng: &mut fastrand::Rng,
    ) -> Vec<Choice> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        let mut available = Vec::new();
        let mut overdue = Vec::new();
        let mut adopt = Vec::new();
        let mut live = 0usize;
        for s in self.seen.values() {
            if s.lease.ended() {
                continue;
            }
            live += 1;
            let handed_to_me =
                s.lease.owner.as_deref() == Some(me) && s.lease.handoff.as_deref() == Some(me);
            if held.contains(&s.lease.key) {
                *counts.entry(me).or_default() += 1;
            } else if handed_to_me {
                *counts.entry(me).or_default() += 1;
                adopt.push(&s.lease);
            } else if self.available(s, now) {
                available.push(&s.lease);
            } else if let Some(to) = s.lease.handoff.as_deref() {
                *counts.entry(to).or_default() += 1;
                let late = s
                    .marked_at
                    .is_some_and(|t| now.saturating_duration_since(t) > self.duration);
                if to == me && late {
                    overdue.push(&s.lease);
                }
            } else if let Some(owner) = s.lease.owner.as_deref() {
                *counts.entry(owner).or_default() += 1;
            }
        }
        if !adopt.is_empty() || !overdue.is_empty() {
            adopt.sort_by(|a, b| a.key.cmp(&b.key));
            overdue.sort_by(|a, b| a.key.cmp(&b.key));
            let adopt = adopt.into_iter().map(|l| (l, Act::Take));
            let overdue = overdue.into_iter().map(|l| (l, Act::Steal));
            return adopt
                .chain(overdue)
                .map(|(l, act)| Choice {
                    lease: l.clone(),
                    act,
                })
                .collect();
        }
        let mine = *counts.entry(me).or_default();
        if live == 0 {
            return Vec::new();
        }
        let workers = counts.len();
        let target = if workers >= live {
            1
        } else {
            live.div_ceil(workers)
        };
        let needed = target.saturating_sub(mine);
        if needed == 0 {
            return Vec::new();
        }
        if !available.is_empty() {
            rng.shuffle(&mut available);
            return available
                .into_iter()
                .take(needed)
                .map(|l| Choice {
                    lease: l.clone(),
                    act: Act::Take,
                })
                .collect();
        }
        // Most loaded: highest count, ties broken by name so the choice is stable.
        let Some((&victim, &most)) = counts
            .iter()
            .filter(|(w, _)| **w != me)
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
        else {
            return Vec::new();
        };
        let steal = most > target || (most == target && needed > 1);
        if !steal {
            return Vec::new();
        }
        let mut candidates: Vec<&Lease> = self
            .seen
            .values()
            .filter(|s| {
                !s.lease.ended()
                    && s.lease.owner.as_deref() == Some(victim)
                    && s.lease.handoff.is_none()
                    && !self.available(s, now)
            })
            .map(|s| &s.lease)
            .collect();
        candidates.sort_by(|a, b| a.key.cmp(&b.key));
        rng.shuffle(&mut candidates);
        candidates
            .into_iter()
            .take(1)
            .map(|l| Choice {
                lease: l.clone(),
                act: Act::Mark,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::source::leases::lease::Checkpoint;

    fn lease(key: &str, owner: Option<&str>, counter: u64) -> Lease {
        Lease {
            owner: owner.map(str::to_string),
            counter,
            ..Lease::new(key, Checkpoint::TrimHorizon)
        }
    }

    fn held(keys: &[&str]) -> BTreeSet<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn expiry_is_judged_by_the_observers_clock_from_its_first_sight() {
        let t0 = Instant::now();
        let d = Duration::from_secs(10);
        let mut o = Observer::new(d);
        let mut rng = fastrand::Rng::with_seed(1);
        o.observe(vec![lease("a", Some("w1"), 5)], t0);
        // First seen owned: counts as renewed at t0.
        assert!(o.plan("me", &held(&[]), t0 + d, &mut rng).is_empty());
        o.observe(vec![lease("a", Some("w1"), 5)], t0 + d);
        let plan = o.plan(
            "me",
            &held(&[]),
            t0 + d + Duration::from_millis(1),
            &mut rng,
        );
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].act, Act::Take);
        // A renewal resets the observer's timer.
        o.observe(vec![lease("a", Some("w1"), 6)], t0 + d * 2);
        assert!(
            o.plan("me", &held(&[]), t0 + d * 2 + d / 2, &mut rng)
                .is_empty()
        );
    }

    #[test]
    fn marks_one_of_the_most_loaded_towards_ceiling_or_floor() {
        let t0 = Instant::now();
        let mut o = Observer::new(Duration::from_secs(10));
        let mut rng = fastrand::Rng::with_seed(2);
        let rows: Vec<Lease> = (0..6)
            .map(|i| lease(&format!("s{i}"), Some(if i < 5 { "a" } else { "b" }), 1))
            .collect();
        o.observe(rows, t0);
        let plan = o.plan("c", &held(&[]), t0, &mut rng);
        assert_eq!(plan.len(), 1, "at most one per cycle");
        assert_eq!(plan[0].act, Act::Mark, "a live owner is asked, not robbed");
        assert_eq!(plan[0].lease.owner.as_deref(), Some("a"));
        // Balanced 2/2/2: nobody steals.
        let rows: Vec<Lease> = (0..6)
            .map(|i| lease(&format!("s{i}"), Some(["a", "b", "c"][i % 3]), 1))
            .collect();
        o.observe(rows, t0);
        for me in ["a", "b", "c"] {
            let mine: Vec<&str> = ["s0", "s1", "s2", "s3", "s4", "s5"]
                .into_iter()
                .enumerate()
                .filter(|(i, _)| ["a", "b", "c"][i % 3] == me)
                .map(|(_, k)| k)
                .collect();
            assert!(o.plan(me, &held(&mine), t0, &mut rng).is_empty());
        }
        // 6 leases over 4 workers: 2,2,1,1 is balanced (⌈1.5⌉ / ⌊1.5⌋).
        let rows: Vec<Lease> = ["a", "a", "b", "b", "c", "d"]
            .iter()
            .enumerate()
            .map(|(i, w)| lease(&format!("s{i}"), Some(w), 1))
            .collect();
        o.observe(rows, t0);
        assert!(o.plan("d", &held(&["s5"]), t0, &mut rng).is_empty());
    }

    #[test]
    fn ended_leases_are_neither_taken_nor_counted() {
        let t0 = Instant::now();
        let mut o = Observer::new(Duration::from_secs(10));
        let mut rng = fastrand::Rng::with_seed(3);
        let mut done = lease("s0", None, 3);
        done.checkpoint = Checkpoint::ShardEnd;
        o.observe(vec![done, lease("s1", None, 0)], t0);
        let plan = o.plan("me", &held(&[]), t0, &mut rng);
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].lease.key, "s1");
    }

    #[test]
    fn a_pending_mark_counts_for_the_asker_and_falls_back_to_a_steal_after_a_lease_duration() {
        let t0 = Instant::now();
        let d = Duration::from_secs(9);
        let mut o = Observer::new(d);
        let mut rng = fastrand::Rng::with_seed(4);
        // a holds 3, c asked for one of them: c counts it as its own and asks for nothing more.
        let mut rows: Vec<Lease> = (0..4)
            .map(|i| lease(&format!("s{i}"), Some(if i < 3 { "a" } else { "b" }), 1))
            .collect();
        rows[0].handoff = Some("c".into());
        o.observe(rows.clone(), t0);
        assert!(o.plan("c", &held(&[]), t0, &mut rng).is_empty());
        // Nobody else marks a marked lease, nor counts it for its owner.
        let plan = o.plan("d", &held(&[]), t0, &mut rng);
        assert!(plan.iter().all(|c| c.lease.key != "s0"), "{plan:?}");
        // The owner keeps renewing but never releases (it ignores marks): after one lease
        // duration since c first saw its mark, c takes it the old way.
        for (i, r) in rows.iter_mut().enumerate() {
            r.counter = 2 + i as u64;
        }
        o.observe(rows.clone(), t0 + d);
        assert!(o.plan("c", &held(&[]), t0 + d, &mut rng).is_empty());
        for r in rows.iter_mut() {
            r.counter += 10;
        }
        let late = t0 + d + Duration::from_millis(1);
        o.observe(rows, late);
        let plan = o.plan("c", &held(&[]), late, &mut rng);
        assert_eq!(plan.len(), 1);
        assert_eq!(
            (plan[0].lease.key.as_str(), plan[0].act),
            ("s0", Act::Steal)
        );
    }
}
