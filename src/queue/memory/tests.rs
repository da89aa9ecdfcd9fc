//! Unit tests of the memory tier and its policies.

use super::*;
use crate::telemetry::RelayStats;

fn queue(max_datapoints: usize, max_bytes: usize) -> DestinationQueue {
    let stats = RelayStats::new(&["d:1:a".to_string()]);
    let d = stats.destinations()[0].clone();
    DestinationQueue::new(
        QueueLimits {
            max_datapoints,
            max_bytes,
            when_full: WhenFull::DropNewest,
            spill_fallback: WhenFull::DropNewest,
        },
        d,
    )
}

fn batch(n: usize) -> Batch {
    let mut b = Batch::new();
    for i in 0..n {
        b.push(format!("m.{i}").as_bytes(), i as f64, 1.0);
    }
    b
}

#[test]
fn drop_newest_keeps_prefix_and_counts_exactly() {
    let q = queue(5, usize::MAX);
    assert_eq!(q.push(batch(3)).accepted, 3);
    let out = q.push(batch(4));
    assert_eq!((out.accepted, out.dropped), (2, 2));
    let snap = q.stats().snapshot();
    assert_eq!(snap.routed, 7);
    assert_eq!(snap.dropped(DestinationDropReason::QueueFull), 2);
    assert_eq!(snap.queued, 5);
}

#[test]
fn byte_bound_applies() {
    let per = 3 + crate::batch::POINT_OVERHEAD; // "m.0"
    let q = queue(usize::MAX, per * 2);
    let out = q.push(batch(3));
    assert_eq!((out.accepted, out.dropped), (2, 1));
}

#[test]
fn requeue_goes_first_and_accounting_holds() {
    let q = queue(100, usize::MAX);
    q.push(batch(2));
    q.push(batch(3));
    let first = q.try_pop().unwrap_or_default();
    assert_eq!(first.len(), 2);
    assert_eq!(q.queued(), 5);
    q.requeue(vec![first]);
    assert_eq!(q.try_pop().map(|b| b.len()), Some(2));
    q.ack(2, 1);
    let s = q.stats().snapshot();
    assert_eq!(s.routed, s.sent + s.dropped_total() + s.queued);
    assert_eq!(s.sent, 2);
}

#[tokio::test]
async fn pop_returns_none_after_close_and_drain() {
    let q = Arc::new(queue(100, usize::MAX));
    q.push(batch(1));
    q.close();
    assert!(q.pop().await.is_some());
    assert!(q.pop().await.is_none());
}
