//! What a member of a carbon-c-relay `any_of` or `failover` cluster (or of a `dynamic` ring)
//! still holds when it goes down moves to the other members, as carbon-c-relay 3.7.3 does
//! (`server.c`: each server's *secondaries* are the members of its cluster).
//!
//! Routing already passes over a member that is down for new lines (`ingest::c_relay`); this
//! moves the lines queued for it before it went down, or while every member was down. Every
//! tick of the carbon-c-relay clock ([`TICK`], the period of carbon-c-relay's server loop):
//!
//! - A member is **down** once its connection has been failing for [`FAIL_WAIT_TICKS`]
//!   ticks in a row (carbon-c-relay's `FAIL_WAIT_TIME`, [`FAIL_WAIT`] in all): not connected,
//!   with an attempt failed or the connection lost. A member of an `any_of` cluster or a
//!   `dynamic` ring also offloads while its memory queue is *critical*: less room than one
//!   hand-over chunk (carbon-c-relay's `LEN_CRITICAL`: less room than its batch size).
//! - Its waiting lines go, oldest first, a chunk at a time ([`chunk`]), to the other members
//!   that are not failing: for `failover` in configuration order (the first that takes them
//!   gets them), for `any_of` in an order shuffled for every chunk, passing over members
//!   whose queue is critical too, so that the members that are up share a down member's
//!   load.
//! - A receiver takes only what fits in its memory tier (`DestinationQueue::hand_over`);
//!   what fits nowhere stays queued where it was, and waits for that member or for room
//!   elsewhere at the next tick. carbon-c-relay drops what it cannot put back; nothing is
//!   dropped here.
//! - With a spill directory, a down member's spill log drains too: its records are replayed
//!   into its memory tier as it empties (at the log's replay rate) and move on from there. An
//!   operator expects nothing to wait for a dead member while another can take it.
//!
//! Each move is counted on both queues (`moved`, out and in) and per cluster.

use std::collections::HashMap;
use std::time::Duration;

use tracing::info;

use super::c_relay_aggregates::TICK;
use crate::ingest::Routing;
use crate::queue::{DestinationQueue, DestinationStats};
use crate::router::Strategy;
use crate::router::c_relay::ClusterKind;

/// Ticks a member's connection must have been failing before its queue moves: carbon-c-relay's
/// `FAIL_WAIT_TIME`, counted in its server loops ([`FAIL_WAIT`] in all).
pub(super) const FAIL_WAIT_TICKS: u32 = 6;

/// How long a member's connection must have been failing before its queue moves.
pub const FAIL_WAIT: Duration = TICK.saturating_mul(FAIL_WAIT_TICKS);

/// Datapoints moved per step, and the room below which a queue is critical: a tenth of the
/// member's memory bound (`-q`), as carbon-c-relay's default batch size (`-b`, 2,500) is a
/// tenth of its default queue size (25,000).
fn chunk(q: &DestinationQueue) -> usize {
    (q.limits().max_datapoints / 10).max(1)
}

/// True when `q`'s memory tier has less room than one chunk (in datapoints, or in bytes: a
/// tenth of its byte bound).
fn critical(q: &DestinationQueue) -> bool {
    let (points, bytes_ok) = q.memory_room(q.limits().max_bytes / 10);
    points < chunk(q) || !bytes_ok
}

/// True when `q` holds lines that could move: waiting in memory, or in its spill log (which
/// a hand-over replays into memory first).
fn holds(q: &DestinationQueue) -> bool {
    !q.is_empty() || q.queued_disk() > 0
}

/// How a cluster's members hand their queues over.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `failover`: only a member that is down, to the others in configuration order.
    Failover,
    /// `any_of`, `dynamic` rings: also a member whose queue is critical, to the others in a
    /// shuffled order, passing over critical ones.
    AnyOf,
}

/// The hand-over's memory between ticks.
#[derive(Debug, Default)]
pub(super) struct HandOver {
    /// Consecutive ticks each destination (by name: a reload renumbers them) was failing.
    failing: HashMap<String, u32>,
    /// Destinations whose current down episode has been logged.
    logged: Vec<String>,
}

impl HandOver {
    /// One tick's look at a destination: true once its connection has been failing for
    /// [`FAIL_WAIT_TICKS`] ticks in a row.
    fn down(&mut self, stats: &DestinationStats) -> bool {
        let name = stats.name();
        if stats.is_failing() {
            let n = self.failing.entry(name.to_owned()).or_insert(0);
            *n = n.saturating_add(1);
            *n >= FAIL_WAIT_TICKS
        } else {
            self.failing.remove(name);
            self.logged.retain(|l| l != name);
            false
        }
    }

    /// One tick on the current routing.
    pub(super) fn tick(&mut self, routing: &Routing) {
        let Strategy::CRelay(p) = routing.router.strategy() else {
            return;
        };
        let queues = &routing.queues;
        let down: Vec<bool> = queues.iter().map(|q| self.down(q.stats())).collect();
        for c in &p.program.clusters {
            let mode = match c.kind {
                ClusterKind::Failover => Mode::Failover,
                ClusterKind::AnyOf | ClusterKind::Ch { dynamic: true, .. } => Mode::AnyOf,
                _ => continue,
            };
            let mut members: Vec<u16> = Vec::with_capacity(c.members.len());
            for &m in &c.members {
                if usize::from(m) < queues.len() && !members.contains(&m) {
                    members.push(m);
                }
            }
            for &m in &members {
                let from = &queues[usize::from(m)];
                let is_down = down[usize::from(m)];
                if !holds(from) || !(is_down || mode == Mode::AnyOf && critical(from)) {
                    continue;
                }
                let moved = offload(queues, m, &members, mode, is_down);
                let name = from.stats().name();
                if moved > 0 && is_down && !self.logged.iter().any(|l| l == name) {
                    self.logged.push(name.to_owned());
                    info!(destination = %name, cluster = %c.name, datapoints = moved,
                        "member down: its queued lines go to the other members");
                }
            }
        }
    }
}

/// Moves member `m`'s waiting lines to the other `members`, a chunk at a time, while it is
/// down (or, for `any_of`, while its queue is critical) and someone takes them; returns how
/// many moved.
fn offload(
    queues: &[std::sync::Arc<DestinationQueue>],
    m: u16,
    members: &[u16],
    mode: Mode,
    down: bool,
) -> usize {
    let from = &queues[usize::from(m)];
    let step = chunk(from);
    let mut order: Vec<u16> = members.iter().copied().filter(|&r| r != m).collect();
    let mut total = 0;
    while holds(from) && (down || mode == Mode::AnyOf && critical(from)) {
        if mode == Mode::AnyOf {
            // A different order per chunk: no member that is up takes all of it.
            fastrand::shuffle(&mut order);
        }
        let mut moved = 0;
        for &r in &order {
            let to = &queues[usize::from(r)];
            if to.stats().is_failing() || mode == Mode::AnyOf && critical(to) {
                continue;
            }
            moved += from.hand_over(to, step.saturating_sub(moved));
            if moved >= step {
                break;
            }
        }
        total += moved;
        if moved == 0 {
            break;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::batch::Batch;
    use crate::queue::QueueLimits;

    fn queue(name: &str, max_datapoints: usize) -> Arc<DestinationQueue> {
        let limits = QueueLimits {
            max_datapoints,
            ..QueueLimits::default()
        };
        Arc::new(DestinationQueue::new(
            limits,
            Arc::new(DestinationStats::new(name)),
        ))
    }

    fn lines(q: &DestinationQueue, n: usize) {
        let mut b = Batch::new();
        for i in 0..n {
            b.push(format!("m.{i}").as_bytes(), i as f64, 1.0)
                .expect("batch has room");
        }
        q.push(b);
    }

    #[test]
    fn a_member_is_down_after_fail_wait_ticks_of_failing_and_up_again_at_once() {
        let stats = DestinationStats::new("h:1:a");
        let mut h = HandOver::default();
        assert!(!h.down(&stats), "never failed");
        stats.connect_failed(&"refused");
        for _ in 1..FAIL_WAIT_TICKS {
            assert!(!h.down(&stats));
        }
        assert!(h.down(&stats), "failing for FAIL_WAIT_TICKS ticks");
        stats.set_connected(true);
        assert!(!h.down(&stats));
        stats.set_connected(false);
        assert!(!h.down(&stats), "the count starts again");
    }

    #[test]
    fn failover_hands_over_in_configuration_order_to_members_not_failing() {
        // A down; B failing too; C with room for 20; D with room for the rest.
        let queues = [
            queue("a:1:", 100),
            queue("b:1:", 100),
            queue("c:1:", 20),
            queue("d:1:", 100),
        ];
        lines(&queues[0], 50);
        queues[1].stats().connect_failed(&"refused");
        let moved = offload(&queues, 0, &[0, 1, 2, 3], Mode::Failover, true);
        assert_eq!(moved, 50);
        let queued: Vec<usize> = queues.iter().map(|q| q.queued()).collect();
        assert_eq!(queued, [0, 0, 20, 30]);
        // Not down: a failover member keeps its queue however full.
        lines(&queues[3], 70);
        assert_eq!(offload(&queues, 3, &[0, 1, 2, 3], Mode::Failover, false), 0);
        assert_eq!(queues[3].queued(), 100);
    }

    #[test]
    fn any_of_offloads_a_critical_queue_passing_over_critical_members() {
        // A is up but critical (room for less than a tenth of it); B is critical too.
        let queues = [queue("a:1:", 100), queue("b:1:", 100), queue("c:1:", 100)];
        lines(&queues[0], 95);
        lines(&queues[1], 95);
        let moved = offload(&queues, 0, &[0, 1, 2], Mode::AnyOf, false);
        assert!(moved > 0 && !critical(&queues[0]), "moved {moved}");
        let queued: Vec<usize> = queues.iter().map(|q| q.queued()).collect();
        assert_eq!(queued, [95 - moved, 95, moved]);
        // What fits nowhere stays: every other member is critical now.
        lines(&queues[2], 100 - moved);
        lines(&queues[0], 100 - queues[0].queued());
        assert_eq!(offload(&queues, 0, &[0, 1, 2], Mode::AnyOf, true), 0);
        assert_eq!(queues[0].queued(), 100);
    }
}
