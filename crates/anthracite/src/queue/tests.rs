//! Unit tests of the queue: the memory tier, its policies, the disk tier, positions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::batch::Batch;

fn stats() -> Arc<DestinationStats> {
    Arc::new(DestinationStats::new("d:1:a"))
}

fn queue(max_datapoints: usize, max_bytes: usize) -> DestinationQueue {
    let d = stats();
    DestinationQueue::new(
        QueueLimits {
            max_datapoints,
            max_bytes,
            when_full: WhenFull::DropNewest,
            spill_fallback: WhenFull::DropNewest,
            ..QueueLimits::default()
        },
        d,
    )
}

fn batch(n: usize) -> Batch {
    let mut b = Batch::new();
    for i in 0..n {
        b.push(format!("m.{i}").as_bytes(), i as f64, 1.0)
            .expect("batch has room");
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

fn seq_batch(start: usize, n: usize) -> Batch {
    let mut b = Batch::new();
    for i in start..start + n {
        b.push(format!("s.{i:08}").as_bytes(), i as f64, 1.0)
            .expect("batch has room");
    }
    b
}

fn spill_queue(
    dir: &std::path::Path,
    max_datapoints: usize,
    fallback: WhenFull,
    max_disk: u64,
) -> DestinationQueue {
    // These tests spill at once (their destinations are never connected anyway).
    delayed_spill_queue(dir, max_datapoints, fallback, max_disk, Duration::ZERO)
}

fn delayed_spill_queue(
    dir: &std::path::Path,
    max_datapoints: usize,
    fallback: WhenFull,
    max_disk: u64,
    full_wait: Duration,
) -> DestinationQueue {
    let d = stats();
    DestinationQueue::with_spill(
        QueueLimits {
            max_datapoints,
            max_bytes: usize::MAX / 4,
            when_full: WhenFull::Spill,
            spill_fallback: fallback,
            full_wait,
        },
        d,
        SpillSettings {
            dir: dir.to_path_buf(),
            log: crate::queue::spill::SpillConfig {
                max_bytes: max_disk,
                segment_bytes: 4096,
                ..Default::default()
            },
            replay_rate: None,
        },
    )
    .expect("open spill queue")
}

/// Pops and acks until `n` datapoints came out; returns their timestamps in order.
async fn consume(q: &DestinationQueue, n: usize) -> Vec<usize> {
    let mut got = Vec::new();
    while got.len() < n {
        let b = tokio::time::timeout(std::time::Duration::from_secs(20), q.pop())
            .await
            .expect("pop within 20 s")
            .expect("queue not closed");
        got.extend(b.iter().map(|dp| dp.timestamp as usize));
        q.ack(b.len(), 1);
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_wait_holds_producers_back_while_a_connected_destination_drains() {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = Arc::new(delayed_spill_queue(
        dir.path(),
        100,
        WhenFull::DropNewest,
        64 << 20,
        Duration::from_secs(60),
    ));
    q.stats().set_connected(true);
    let producer = {
        let q = q.clone();
        tokio::spawn(async move {
            let mut waited = false;
            for i in 0..100 {
                waited |= q.push_wait(seq_batch(i * 10, 10)).await.waited;
            }
            waited
        })
    };
    // A consumer slower than the producer: the memory tier is full most of the time.
    let mut got = Vec::new();
    while got.len() < 1000 {
        let b = tokio::time::timeout(Duration::from_secs(20), q.pop())
            .await
            .expect("pop within 20 s")
            .expect("queue not closed");
        got.extend(b.iter().map(|dp| dp.timestamp as usize));
        tokio::time::sleep(Duration::from_millis(1)).await;
        q.ack(b.len(), 1);
    }
    assert!(
        producer.await.expect("producer"),
        "the producer never waited"
    );
    assert_eq!(got, (0..1000).collect::<Vec<_>>());
    let s = q.stats().snapshot();
    assert_eq!((s.sent, s.dropped_total()), (1000, 0), "{s:?}");
    assert_eq!(
        s.spill.spilled_datapoints, 0,
        "a draining destination spilled: {s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_wait_is_bounded_ends_with_its_episode_and_is_skipped_when_disconnected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let delay = Duration::from_millis(300);
    let q = delayed_spill_queue(dir.path(), 100, WhenFull::DropNewest, 64 << 20, delay);
    q.stats().set_connected(true);
    for i in 0..10 {
        assert!(!q.push_wait(seq_batch(i * 10, 10)).await.waited);
    }
    // Full, connected, nothing drains because the peer does not read (a write waits on it):
    // held back for the delay, then spilled.
    q.stats().peer_wait_began();
    let started = Instant::now();
    let o = tokio::time::timeout(Duration::from_secs(20), q.push_wait(seq_batch(100, 10)))
        .await
        .expect("the spill delay ends");
    assert!(o.waited && o.accepted == 10, "{o:?}");
    assert!(
        started.elapsed() >= delay,
        "spilled after {:?}",
        started.elapsed()
    );
    // Overflow is on disk now: what follows goes behind it at once.
    let o = q.push_wait(seq_batch(110, 10)).await;
    assert!(!o.waited && o.accepted == 10, "{o:?}");
    let s = q.stats().snapshot();
    assert!(s.queued_disk >= 20, "{s:?}");
    q.stats().peer_wait_ended();
    assert_eq!(consume(&q, 120).await, (0..120).collect::<Vec<_>>());
    // Drained: the episode is over, and the next time the tier fills the wait starts afresh.
    q.stats().peer_wait_began();
    for i in 12..22 {
        assert!(!q.push_wait(seq_batch(i * 10, 10)).await.waited);
    }
    let started = Instant::now();
    let o = q.push_wait(seq_batch(220, 10)).await;
    assert!(
        o.waited && started.elapsed() >= delay,
        "{o:?} after {:?}",
        started.elapsed()
    );
    assert_eq!(q.stats().snapshot().full_waits, 2);

    // A destination that is not connected spills at once.
    let dir = tempfile::tempdir().expect("tempdir");
    let q = delayed_spill_queue(
        dir.path(),
        100,
        WhenFull::DropNewest,
        64 << 20,
        Duration::from_secs(60),
    );
    for i in 0..11 {
        assert!(!q.push_wait(seq_batch(i * 10, 10)).await.waited);
    }
    assert!(q.stats().snapshot().queued_disk > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connected_destination_gets_the_full_wait_before_drop_newest_applies() {
    for (wait, connected, failed, want_dropped) in [
        (Duration::from_secs(60), true, false, 0),
        (Duration::ZERO, true, false, 10),
        (Duration::from_secs(60), false, false, 10),
        // A write timed out lately: a hung peer gets no wait on its next connection.
        (Duration::from_secs(60), true, true, 10),
    ] {
        let q = Arc::new(DestinationQueue::new(
            QueueLimits {
                max_datapoints: 100,
                full_wait: wait,
                ..QueueLimits::default()
            },
            stats(),
        ));
        q.stats().set_connected(connected);
        if failed {
            q.stats().write_timed_out(&"no progress for 10 s");
        }
        for i in 0..10 {
            q.push_wait(seq_batch(i * 10, 10)).await;
        }
        let consumer = {
            let q = q.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let b = q.pop().await.expect("open");
                q.ack(b.len(), 1);
            })
        };
        let o = q.push_wait(seq_batch(100, 10)).await;
        consumer.await.expect("consumer");
        assert_eq!(
            o.dropped, want_dropped,
            "wait {wait:?} connected {connected} failed {failed}: {o:?}"
        );
        assert_eq!(o.waited, want_dropped == 0, "{o:?}");
        assert_eq!(
            q.stats().snapshot().full_waits,
            u64::from(want_dropped == 0)
        );
    }
}

/// A memory-only queue of 100 datapoints with `full_wait`, its destination connected.
fn connected_queue(full_wait: Duration) -> DestinationQueue {
    let q = DestinationQueue::new(
        QueueLimits {
            max_datapoints: 100,
            full_wait,
            ..QueueLimits::default()
        },
        stats(),
    );
    q.stats().set_connected(true);
    q
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_ends_the_full_wait_at_once() {
    let q = Arc::new(connected_queue(Duration::from_secs(600)));
    for i in 0..10 {
        q.push_wait(seq_batch(i * 10, 10)).await;
    }
    let producer = {
        let q = q.clone();
        tokio::spawn(async move { q.push_wait(seq_batch(100, 10)).await })
    };
    // Held by the full wait (nothing drains the queue).
    while q.stats().snapshot().full_waits == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(!producer.is_finished());
    // The destination task records the loss, then wakes the producers.
    q.stats().set_connected(false);
    q.stats().connect_failed(&"connection reset by peer");
    q.connection_lost();
    // Without the wake-up the producer would sit out its 600 s deadline.
    let o = tokio::time::timeout(Duration::from_secs(30), producer)
        .await
        .expect("the producer is released when the connection is lost")
        .expect("producer");
    assert_eq!((o.accepted, o.dropped), (0, 10), "{o:?}");
    assert!(o.waited);
}

/// A destination whose writes complete as soon as they are issued, behind producers
/// that outrun it (the relay CPU-bound: its sender task gets little time), for many times the
/// full wait. Before the fix the wait was wall-clock time and the producers' data was dropped
/// as `queue_full` once it ran out; now they wait as long as the destination makes progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_keeping_up_never_drops_however_long_producers_outrun_it() {
    let q = Arc::new(connected_queue(Duration::from_millis(250)));
    let producers: Vec<_> = (0..2)
        .map(|p| {
            let q = q.clone();
            tokio::spawn(async move {
                let mut dropped = 0;
                for i in 0..200 {
                    dropped += q.push_wait(seq_batch((p * 200 + i) * 10, 10)).await.dropped;
                }
                dropped
            })
        })
        .collect();
    // A consumer slower than its producers, its writes never waiting on a peer: 400 batches
    // at about 3 ms each, several times the full wait.
    let mut got = 0;
    while got < 4000 {
        let b = tokio::time::timeout(Duration::from_secs(20), q.pop())
            .await
            .expect("pop within 20 s")
            .expect("queue not closed");
        got += b.len();
        tokio::time::sleep(Duration::from_millis(3)).await;
        q.ack(b.len(), 1);
    }
    for p in producers {
        assert_eq!(p.await.expect("producer"), 0);
    }
    let s = q.stats().snapshot();
    assert_eq!((s.sent, s.dropped_total()), (4000, 0), "{s:?}");
    assert!(s.full_waits > 0, "the producers never waited: {s:?}");
    assert_eq!(s.overflows, [0; OverflowCause::ALL.len()], "{s:?}");
}

/// The other side of the full wait: a destination whose writes wait on its peer (it takes
/// less than it is offered) gets the policy after one window, counted as `behind`; one that
/// is not connected at once, counted as `down`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_behind_its_peer_or_down_gets_the_policy_with_its_cause() {
    let q = Arc::new(connected_queue(Duration::from_millis(100)));
    for i in 0..10 {
        q.push_wait(seq_batch(i * 10, 10)).await;
    }
    // Its writes make progress, slowly, while it waits on the peer all the time.
    q.stats().peer_wait_began();
    let consumer = {
        let q = q.clone();
        tokio::spawn(async move {
            while let Some(b) = q.pop().await {
                tokio::time::sleep(Duration::from_millis(20)).await;
                q.ack(b.len(), 1);
            }
        })
    };
    let mut dropped = 0;
    for i in 10..40 {
        dropped += q.push_wait(seq_batch(i * 10, 10)).await.dropped;
    }
    q.close();
    consumer.await.expect("consumer");
    let s = q.stats().snapshot();
    assert!(dropped > 0, "{s:?}");
    assert!(s.overflows[OverflowCause::Behind as usize] > 0, "{s:?}");
    assert_eq!(s.overflows[OverflowCause::Down as usize], 0, "{s:?}");

    let q = connected_queue(Duration::from_secs(600));
    q.stats().set_connected(false);
    for i in 0..11 {
        q.push_wait(seq_batch(i * 10, 10)).await;
    }
    let s = q.stats().snapshot();
    assert_eq!(s.dropped_total(), 10, "{s:?}");
    assert_eq!(s.overflows[OverflowCause::Down as usize], 1, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_larger_than_the_memory_tier_gets_no_full_wait() {
    // It cannot fit however far the tier drains: waiting would only delay it (and an empty
    // tier gets no acknowledgement to end the wait early). Found by the TLS delivery test,
    // whose one read of 5,000 lines meets a 1,000-datapoint tier.
    let q = connected_queue(Duration::from_secs(60));
    let o = tokio::time::timeout(Duration::from_secs(10), q.push_wait(seq_batch(0, 150)))
        .await
        .expect("no wait for a batch the tier can never hold");
    assert_eq!((o.accepted, o.dropped, o.waited), (100, 50, false), "{o:?}");
    assert_eq!(q.stats().snapshot().full_waits, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spill_overflow_replays_fifo_across_tiers_and_accounts_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = spill_queue(dir.path(), 100, WhenFull::DropNewest, 64 << 20);
    let mut next = 0;
    for _ in 0..200 {
        q.push_wait(seq_batch(next, 10)).await;
        next += 10;
    }
    let s = q.stats().snapshot();
    assert_eq!(s.routed, 2000);
    assert_eq!(s.queued, 2000);
    assert!(s.queued_disk >= 1900, "{s:?}");
    let got = consume(&q, 2000).await;
    assert_eq!(got, (0..2000).collect::<Vec<_>>());
    let s = q.stats().snapshot();
    assert_eq!(s.routed, s.sent + s.dropped_total() + s.queued, "{s:?}");
    assert_eq!((s.sent, s.queued, s.dropped_total()), (2000, 0, 0));
    assert!(s.spill.spilled_datapoints >= 1900);
    assert_eq!(s.spill.replayed_datapoints, s.spill.spilled_datapoints);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spill_budget_exhausted_drop_newest_counts_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = spill_queue(dir.path(), 100, WhenFull::DropNewest, 8192);
    for i in 0..400 {
        q.push_wait(seq_batch(i * 10, 10)).await;
    }
    // Let the spill thread finish the hand-over.
    let s = loop {
        let s = q.stats().snapshot();
        if s.spill.spilled_datapoints
            + s.dropped(DestinationDropReason::SpillFull)
            + s.queued_memory
            == s.routed
        {
            break s;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    assert!(s.dropped(DestinationDropReason::SpillFull) > 0, "{s:?}");
    assert_eq!(s.routed, s.sent + s.dropped_total() + s.queued, "{s:?}");
    let kept = s.queued as usize;
    let got = consume(&q, kept).await;
    assert!(got.windows(2).all(|w| w[0] < w[1]), "order kept");
    let s = q.stats().snapshot();
    assert_eq!((s.sent, s.queued), (kept as u64, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spill_budget_exhausted_block_waits_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = Arc::new(spill_queue(dir.path(), 100, WhenFull::Block, 8192));
    let producer = {
        let q = q.clone();
        tokio::spawn(async move {
            for i in 0..300 {
                q.push_wait(seq_batch(i * 10, 10)).await;
            }
        })
    };
    let got = consume(&q, 3000).await;
    producer.await.expect("producer");
    assert_eq!(got, (0..3000).collect::<Vec<_>>());
    let s = q.stats().snapshot();
    assert_eq!((s.sent, s.dropped_total(), s.queued), (3000, 0, 0));
}

#[test]
fn drop_oldest_evicts_front_and_counts() {
    let q = DestinationQueue::new(
        QueueLimits {
            max_datapoints: 10,
            max_bytes: usize::MAX,
            when_full: WhenFull::DropOldest,
            spill_fallback: WhenFull::DropNewest,
            ..QueueLimits::default()
        },
        stats(),
    );
    q.push(seq_batch(0, 6));
    q.push(seq_batch(6, 6));
    let s = q.stats().snapshot();
    assert_eq!(s.dropped(DestinationDropReason::DropOldest), 6);
    assert_eq!(s.queued, 6);
    assert_eq!(
        q.try_pop().and_then(|b| b.get(0).map(|d| d.timestamp)),
        Some(6.0)
    );
}

/// A `drop_oldest` queue of 100 datapoints over the spill log in `dir`, which a previous run
/// left holding 200 datapoints (timestamps 0..200, one record of 10 each), with the replay
/// under way: its first record (0..10) is in flight, the next ones wait in memory.
async fn replaying_drop_oldest_queue(dir: &std::path::Path) -> DestinationQueue {
    let previous = spill_queue(dir, 100, WhenFull::DropNewest, 1 << 20);
    for i in 0..20 {
        previous.push(seq_batch(i * 10, 10));
    }
    assert_eq!(previous.shut_down().await, (0, 200));
    let q = DestinationQueue::with_spill(
        QueueLimits {
            max_datapoints: 100,
            max_bytes: usize::MAX / 4,
            when_full: WhenFull::DropOldest,
            spill_fallback: WhenFull::DropNewest,
            full_wait: Duration::ZERO,
        },
        stats(),
        SpillSettings {
            dir: dir.to_path_buf(),
            log: crate::queue::spill::SpillConfig {
                max_bytes: 1 << 20,
                segment_bytes: 4096,
                ..Default::default()
            },
            replay_rate: None,
        },
    )
    .expect("reopen spill queue");
    assert_eq!(q.queued_disk(), 200);
    let first = tokio::time::timeout(Duration::from_secs(20), q.pop())
        .await
        .expect("replay within 20 s")
        .expect("queue not closed");
    assert_eq!(first.get(0).map(|d| d.timestamp), Some(0.0));
    assert!(q.len() >= 30, "replayed records wait in memory");
    q
}

/// Shuts `q` down and returns the timestamps of everything a queue reopened over its spill
/// directory `dir` replays.
async fn replayed_after_restart(q: DestinationQueue, dir: &std::path::Path) -> Vec<usize> {
    q.shut_down().await;
    drop(q);
    let q = spill_queue(dir, 100, WhenFull::DropNewest, 1 << 20);
    let n = q.queued_disk() as usize;
    consume(&q, n).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_records_evicted_by_drop_oldest_are_acknowledged_in_the_spill_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = replaying_drop_oldest_queue(dir.path()).await;
    q.ack(10, 1);
    let out = q.push(seq_batch(1000, 50));
    assert_eq!((out.accepted, out.evicted), (50, 30));
    let s = q.stats().snapshot();
    assert_eq!(s.dropped(DestinationDropReason::DropOldest), 30);
    assert_eq!(s.routed, s.sent + s.dropped_total() + s.queued, "{s:?}");
    // Neither the written record (0..10) nor the evicted ones (10..40) come back.
    let expected: Vec<usize> = (40..200).chain(1000..1050).collect();
    assert_eq!(replayed_after_restart(q, dir.path()).await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_records_evicted_behind_one_in_flight_are_acknowledged_once_it_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = replaying_drop_oldest_queue(dir.path()).await;
    let out = q.push(seq_batch(1000, 40));
    assert_eq!(out.evicted, 30);
    q.ack(10, 1);
    let expected: Vec<usize> = (40..200).chain(1000..1040).collect();
    assert_eq!(replayed_after_restart(q, dir.path()).await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_replayed_records_behind_one_in_flight_keeps_that_one_in_the_spill_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = replaying_drop_oldest_queue(dir.path()).await;
    let out = q.push(seq_batch(1000, 40));
    assert_eq!(out.evicted, 30);
    // The record in flight (0..10) is older than the evicted ones, and the log acknowledges
    // its oldest records first: acknowledging the evicted ones now would take it instead, and
    // a shutdown before it is written would lose it. So they wait for it, and the next run
    // replays them too (a duplicate of data counted as dropped, never a loss).
    let expected: Vec<usize> = (0..200).chain(1000..1040).collect();
    assert_eq!(replayed_after_restart(q, dir.path()).await, expected);
}

/// A memory-only queue of `max_datapoints` with policy `block`.
fn block_queue(max_datapoints: usize) -> DestinationQueue {
    DestinationQueue::new(
        QueueLimits {
            max_datapoints,
            max_bytes: usize::MAX,
            when_full: WhenFull::Block,
            spill_fallback: WhenFull::DropNewest,
            ..QueueLimits::default()
        },
        stats(),
    )
}

#[tokio::test]
async fn block_waits_for_ack_instead_of_dropping() {
    let q = Arc::new(block_queue(10));
    q.push_wait(seq_batch(0, 8)).await;
    let waiting = {
        let q = q.clone();
        tokio::spawn(async move { q.push_wait(seq_batch(8, 8)).await })
    };
    let got = consume(&q, 16).await;
    assert_eq!(got, (0..16).collect::<Vec<_>>());
    let out = waiting.await.expect("push");
    assert_eq!((out.accepted, out.dropped), (8, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spill_full_drop_oldest_discards_oldest_disk_records_and_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = spill_queue(dir.path(), 100, WhenFull::DropOldest, 3 * 4096);
    for i in 0..600 {
        q.push_wait(seq_batch(i * 10, 10)).await;
    }
    let s = loop {
        let s = q.stats().snapshot();
        if s.queued + s.dropped_total() == s.routed && s.queued_disk + s.queued_memory == s.queued {
            let settled = q.staged_bytes() == 0;
            if settled {
                break s;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    let oldest = s.dropped(DestinationDropReason::DropOldest);
    assert!(oldest > 0, "{s:?}");
    assert_eq!(s.routed, s.sent + s.dropped_total() + s.queued, "{s:?}");
    let kept = s.queued as usize;
    let got = consume(&q, kept).await;
    assert!(got.windows(2).all(|w| w[0] < w[1]), "order kept");
    // The newest datapoint survived: drop_oldest keeps recent data.
    assert_eq!(got.last().copied(), Some(5999));
}

mod model {
    //! The tiered queue against a `VecDeque` model: random pushes, pops, acks and requeues
    //! over a tiny memory bound, so batches cross the disk tier constantly. Every popped batch
    //! must be the model's next datapoints, and the books must balance.

    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Push(usize),
        Pop,
        Ack,
        Requeue,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1usize..40).prop_map(Op::Push),
            3 => Just(Op::Pop),
            2 => Just(Op::Ack),
            1 => Just(Op::Requeue),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn tiered_queue_matches_fifo_model(ops in proptest::collection::vec(op(), 1..120)) {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let dir = tempfile::tempdir().expect("tempdir");
                let q = spill_queue(dir.path(), 50, WhenFull::Block, 64 << 20);
                let mut pushed = 0usize;
                let mut next = 0usize; // next sequence number expected from a pop
                let mut in_flight: Vec<Batch> = Vec::new();
                for op in ops {
                    match op {
                        Op::Push(n) => {
                            q.push_wait(seq_batch(pushed, n)).await;
                            pushed += n;
                        }
                        Op::Pop => {
                            if let Some(b) = q.try_pop() {
                                let got: Vec<usize> = b.iter().map(|d| d.timestamp as usize).collect();
                                let want: Vec<usize> = (next..next + got.len()).collect();
                                assert_eq!(got, want, "FIFO across tiers");
                                next += got.len();
                                in_flight.push(b);
                            }
                        }
                        Op::Ack => {
                            let n: usize = in_flight.iter().map(Batch::len).sum();
                            in_flight.clear();
                            q.ack(n, 1);
                        }
                        Op::Requeue => {
                            next -= in_flight.iter().map(Batch::len).sum::<usize>();
                            q.requeue(std::mem::take(&mut in_flight));
                        }
                    }
                    let s = q.stats().snapshot();
                    assert_eq!(s.routed, pushed as u64);
                    assert_eq!(s.routed, s.sent + s.dropped_total() + s.queued, "{s:?}");
                }
                let n: usize = in_flight.iter().map(Batch::len).sum();
                q.ack(n, 1);
                let rest = consume(&q, pushed - next).await;
                assert_eq!(rest, (next..pushed).collect::<Vec<_>>());
                let s = q.stats().snapshot();
                assert_eq!((s.sent, s.queued, s.dropped_total()), (pushed as u64, 0, 0));
            });
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spill_io_error_applies_fallback_counts_and_recovers() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("dest");
    let q = spill_queue(&dir, 100, WhenFull::DropNewest, 64 << 20);
    // The directory disappears and a file takes its place: creating a segment fails.
    std::fs::remove_dir_all(&dir).expect("remove spill dir");
    std::fs::write(&dir, b"not a directory").expect("block the path");
    for i in 0..50 {
        q.push_wait(seq_batch(i * 10, 10)).await;
    }
    let settled = |s: &DestinationSnapshot, routed: u64| {
        s.routed == routed
            && s.spill.spilled_datapoints
                + s.dropped(DestinationDropReason::SpillIo)
                + s.queued_memory
                == routed
    };
    let s = loop {
        let s = q.stats().snapshot();
        if settled(&s, 500) {
            break s;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    assert!(s.dropped(DestinationDropReason::SpillIo) > 0, "{s:?}");
    assert_eq!(s.routed, s.sent + s.dropped_total() + s.queued, "{s:?}");
    // The disk comes back: spilling resumes.
    std::fs::remove_file(&dir).expect("unblock");
    std::fs::create_dir_all(&dir).expect("recreate");
    for i in 50..100 {
        q.push_wait(seq_batch(i * 10, 10)).await;
    }
    let s = loop {
        let s = q.stats().snapshot();
        if settled(&s, 1000) {
            break s;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    assert!(
        s.spill.spilled_datapoints > 0 && s.spill.io_errors > 0,
        "{s:?}"
    );
    let kept = s.queued as usize;
    let got = consume(&q, kept).await;
    assert!(got.windows(2).all(|w| w[0] < w[1]));
}

/// Entering disk mode moved the memory tier to a log that could not store it, and
/// the fallback dropped it. Moved batches the log refuses now come back to memory; only the
/// new data gets the fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spill_refusing_moved_batches_returns_them_to_memory() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("dest");
    let q = spill_queue(&dir, 100, WhenFull::DropNewest, 64 << 20);
    for i in 0..10 {
        q.push_wait(seq_batch(i * 10, 10)).await;
    }
    // The directory turns into a file: the log cannot create a segment.
    std::fs::remove_dir_all(&dir).expect("remove spill dir");
    std::fs::write(&dir, b"not a directory").expect("block the path");
    // Memory is full: this push enters disk mode and moves the 100 waiting datapoints.
    q.push_wait(seq_batch(100, 10)).await;
    let s = settled(&q, 10).await;
    assert_eq!(
        s.queued_memory, 100,
        "the memory tier kept its batches: {s:?}"
    );
    assert_eq!(s.dropped(DestinationDropReason::SpillIo), 10, "{s:?}");
    // While the log refuses, memory batches stay put and overflow gets the fallback.
    q.push_wait(seq_batch(110, 10)).await;
    let s = settled(&q, 20).await;
    assert_eq!((s.queued_memory, s.queued_disk), (100, 0), "{s:?}");
    assert_eq!(s.routed, s.sent + s.dropped_total() + s.queued, "{s:?}");
    let got = consume(&q, 100).await;
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}

/// Waits until nothing is on its way to the log and `dropped` datapoints were dropped.
async fn settled(q: &DestinationQueue, dropped: u64) -> DestinationSnapshot {
    loop {
        let s = q.stats().snapshot();
        if s.queued_disk == 0 && s.dropped_total() == dropped {
            return s;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Polls a future once: `Some` if it is ready now.
fn now_or_never<F: std::future::Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

#[test]
fn settled_waits_for_older_in_flight_data_even_when_newer_data_is_evicted() {
    let q = DestinationQueue::new(
        QueueLimits {
            max_datapoints: 10,
            max_bytes: usize::MAX,
            when_full: WhenFull::DropOldest,
            spill_fallback: WhenFull::DropNewest,
            ..QueueLimits::default()
        },
        stats(),
    );
    let first = q.push(seq_batch(0, 5));
    assert_eq!(first.mark, 5);
    let in_flight = q.try_pop().expect("batch");
    // Only 5 fit beside the 5 in flight: the batch keeps its newest 5 (positions 5..10).
    let second = q.push(seq_batch(5, 10));
    assert_eq!((second.accepted, second.evicted, second.mark), (5, 5, 10));
    // Room for 3 more evicts the waiting batch (positions 5..10), newer than what is in flight.
    let third = q.push(seq_batch(15, 3));
    assert_eq!((third.accepted, third.evicted, third.mark), (3, 5, 13));
    assert_eq!(
        now_or_never(q.settled(first.mark)),
        None,
        "the first batch is still in flight"
    );
    q.ack(in_flight.len(), 1);
    assert_eq!(now_or_never(q.settled(first.mark)), Some(Settled::Done));
    assert_eq!(now_or_never(q.settled(second.mark)), Some(Settled::Done));
    assert_eq!(now_or_never(q.settled(third.mark)), None);
    let last = q.try_pop().expect("batch");
    q.requeue(vec![last]);
    assert_eq!(
        now_or_never(q.settled(third.mark)),
        None,
        "requeued, not sent"
    );
    let last = q.try_pop().expect("batch");
    q.ack(last.len(), 1);
    assert_eq!(now_or_never(q.settled(third.mark)), Some(Settled::Done));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_follows_positions_through_the_disk_tier() {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = spill_queue(dir.path(), 20, WhenFull::DropNewest, 64 << 20);
    let mut marks = Vec::new();
    for i in 0..10 {
        marks.push(q.push_wait(seq_batch(i * 10, 10)).await.mark);
    }
    assert_eq!(marks, (1..=10).map(|i| i * 10).collect::<Vec<u64>>());
    assert!(q.queued_disk() > 0);
    let mut sent = 0;
    for (i, &mark) in marks.iter().enumerate() {
        while sent < mark {
            let b = q.pop().await.expect("open");
            sent += b.len() as u64;
            q.ack(b.len(), 1);
        }
        assert_eq!(
            now_or_never(q.settled(mark)),
            Some(Settled::Done),
            "batch {i}"
        );
        if let Some(&next) = marks.get(i + 1) {
            assert_eq!(now_or_never(q.settled(next)), None, "batch {}", i + 1);
        }
    }
}

/// A waker that records that it was woken.
struct Flag(std::sync::atomic::AtomicBool);

impl std::task::Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

type Waiting<F> = Vec<(std::pin::Pin<Box<F>>, Arc<Flag>)>;

/// Polls every woken producer of `waiting` (removing those that complete) until none is
/// woken; returns (wake-ups, completed pushes).
fn run_woken<F: std::future::Future<Output = PushOutcome>>(
    waiting: &mut Waiting<F>,
) -> (usize, usize) {
    use std::sync::atomic::Ordering::SeqCst;
    let (mut woken, mut done) = (0, 0);
    loop {
        let Some(i) = waiting.iter().position(|(_, f)| f.0.swap(false, SeqCst)) else {
            return (woken, done);
        };
        woken += 1;
        let (fut, flag) = &mut waiting[i];
        let waker = std::task::Waker::from(flag.clone());
        if let std::task::Poll::Ready(out) = fut
            .as_mut()
            .poll(&mut std::task::Context::from_waker(&waker))
        {
            assert_eq!((out.accepted, out.dropped), (1, 0));
            done += 1;
            waiting.remove(i);
        }
    }
}

#[test]
fn room_for_a_few_batches_wakes_a_few_of_many_waiting_producers_and_none_is_lost() {
    use std::sync::atomic::Ordering::SeqCst;
    let q = block_queue(10);
    for i in 0..10 {
        assert_eq!(q.push(seq_batch(i, 1)).accepted, 1);
    }
    // 50 connections wait for room, one datapoint each, polled by hand so that every
    // wake-up is seen.
    let mut waiting: Waiting<_> = (0..50)
        .map(|i| {
            let flag = Arc::new(Flag(false.into()));
            (Box::pin(q.push_wait(seq_batch(10 + i, 1))), flag)
        })
        .collect();
    for (fut, flag) in &mut waiting {
        let waker = std::task::Waker::from(flag.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(fut.as_mut().poll(&mut cx).is_pending());
    }
    // Room for four datapoints: four producers get in and one more looks and waits again;
    // the other 45 are not woken.
    for _ in 0..4 {
        q.try_pop().expect("queued");
    }
    q.ack(4, 4);
    assert_eq!(run_woken(&mut waiting), (5, 4));
    assert_eq!(waiting.len(), 46);
    // A producer woken for room that goes away before it looks (its connection closed)
    // hands the wake-up on: nothing waits for room that is there.
    q.try_pop().expect("queued");
    q.ack(1, 1);
    let gone = waiting
        .iter()
        .position(|(_, f)| f.0.load(SeqCst))
        .expect("one producer woken");
    drop(waiting.remove(gone));
    assert_eq!(run_woken(&mut waiting), (2, 1));
    assert_eq!(waiting.len(), 44);
    assert_eq!(q.stats().snapshot().queued, 10);
}

#[test]
fn the_memory_tier_counts_the_heap_its_batches_hold_and_written_batches_come_back_as_spares() {
    // Names of one length, so that every batch holds the same bytes.
    let filled_spare = |from: usize| {
        let mut b = Batch::with_capacity(1000, 32 << 10);
        for i in from..from + 200 {
            b.push(format!("servers.host{i:04}.cpu.user").as_bytes(), 1.0, 2.0)
                .expect("room");
        }
        b
    };
    let b = filled_spare(0);
    let (size, heap) = (b.size_bytes(), b.heap_bytes());
    assert!(heap > 2 * size, "{heap} for {size}");
    // Room for the batch with its unused room, then for only a little more than its
    // datapoints.
    let q = queue(usize::MAX, heap + size + size / 2);
    assert_eq!(q.push(b).accepted, 200);
    assert_eq!(q.stats().snapshot().spill.memory_bytes, heap as u64);
    // The second does not fit with its room: it gives the room back and fits.
    let out = q.push(filled_spare(200));
    assert_eq!((out.accepted, out.dropped), (200, 0));
    assert_eq!(
        q.stats().snapshot().spill.memory_bytes,
        (heap + size) as u64
    );
    // A third fits in part: the part kept holds only what it needs, so the bound holds.
    let out = q.push(filled_spare(400));
    assert_eq!(out.accepted + out.dropped, 200);
    assert!(out.accepted > 0 && out.dropped > 0, "{out:?}");
    let held = q.stats().snapshot().spill.memory_bytes;
    assert!(held <= (heap + size + size / 2) as u64, "{held}");
    let mut written = Vec::new();
    while let Some(b) = q.try_pop() {
        written.push(b);
    }
    q.ack(400 + out.accepted, written.len());
    assert_eq!(q.stats().snapshot().spill.memory_bytes, 0);
    // Written batches are kept for producers to fill again, within half the bound.
    q.recycle(written);
    let spare = q.spare();
    assert!(spare.is_empty());
    let kept = spare.heap_bytes();
    assert!(kept > 0 && kept <= q.limits().max_bytes / 2, "{kept}");
}

/// `routed + moved_in = sent + dropped + queued + moved_out`.
fn books_balance(s: &DestinationSnapshot) {
    assert_eq!(
        s.routed + s.moved_in,
        s.sent + s.dropped_total() + s.queued + s.moved_out,
        "{s:?}"
    );
}

#[test]
fn hand_over_moves_waiting_lines_oldest_first_within_the_receivers_bound() {
    let from = queue(100, usize::MAX);
    let to = queue(25, usize::MAX);
    for i in 0..4 {
        from.push(seq_batch(i * 10, 10));
    }
    // In flight: stays with its destination task.
    let in_flight = from.try_pop().unwrap_or_default();
    assert_eq!(from.hand_over(&to, usize::MAX), 25);
    assert_eq!(from.hand_over(&to, usize::MAX), 0, "the receiver is full");
    assert_eq!((from.queued(), to.queued()), (15, 25));
    let moved: Vec<usize> = std::iter::from_fn(|| to.try_pop())
        .flat_map(|b| b.iter().map(|dp| dp.timestamp as usize).collect::<Vec<_>>())
        .collect();
    assert_eq!(moved, (10..35).collect::<Vec<_>>());
    to.ack(25, 3);
    from.ack(in_flight.len(), 1);
    assert_eq!(from.hand_over(&to, 3), 3, "at most what is asked");
    let left: Vec<usize> = std::iter::from_fn(|| from.try_pop())
        .flat_map(|b| b.iter().map(|dp| dp.timestamp as usize).collect::<Vec<_>>())
        .collect();
    assert_eq!(left, (38..40).collect::<Vec<_>>());
    from.ack(2, 1);
    let (f, t) = (from.stats().snapshot(), to.stats().snapshot());
    assert_eq!((f.routed, f.sent, f.moved_out, f.queued), (40, 12, 28, 0));
    assert_eq!((t.routed, t.moved_in, t.sent, t.queued), (0, 28, 25, 3));
    books_balance(&f);
    books_balance(&t);
    assert_eq!(from.hand_over(&from, usize::MAX), 0, "never to itself");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_over_drains_the_spill_log_exactly_once_and_acknowledges_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let from = spill_queue(dir.path(), 100, WhenFull::DropNewest, 64 << 20);
    for i in 0..100 {
        from.push_wait(seq_batch(i * 10, 10)).await;
    }
    assert!(from.queued_disk() >= 900, "{:?}", from.stats().snapshot());
    let to = queue(1_000, usize::MAX);
    // A receiver in disk mode takes nothing: it is behind its own input.
    to.push(seq_batch(5_000, 5));
    assert_eq!(to.hand_over(&from, usize::MAX), 0);
    let own = to.try_pop().map_or(0, |b| b.len());
    to.ack(own, 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while from.queued() > 0 {
        assert!(Instant::now() < deadline, "{:?}", from.stats().snapshot());
        // Less than a replayed record (an eighth of the memory tier): it moves whole.
        if from.hand_over(&to, 5) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let mut got: Vec<usize> = std::iter::from_fn(|| to.try_pop())
        .flat_map(|b| b.iter().map(|dp| dp.timestamp as usize).collect::<Vec<_>>())
        .collect();
    assert_eq!(got.len(), 1000, "each line once");
    got.sort_unstable();
    assert_eq!(got, (0..1000).collect::<Vec<_>>());
    let f = from.stats().snapshot();
    assert_eq!((f.moved_out, f.queued, f.dropped_total()), (1000, 0, 0));
    books_balance(&f);
    books_balance(&to.stats().snapshot());
    // Every moved record was acknowledged in the log: a restart replays none of them.
    assert_eq!(from.shut_down().await, (0, 0));
    drop(from);
    let again = spill_queue(dir.path(), 100, WhenFull::DropNewest, 64 << 20);
    assert_eq!(again.stats().snapshot().spill.recovered, 0);
}
