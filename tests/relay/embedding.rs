//! The library as an embedder uses it, through the crate root only: delivery feedback from
//! `Ingestor::push`/`flush`, receipts, and an ingestor dropped with data pending.

use std::time::Duration;

use anthracite::{
    Config, Delivery, DestinationDropReason, DropReason, Pushed, Relay, RelayHandle,
    ShutdownReport, WhenFull,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use anthracite_sink::{Sink, SinkProtocol};

type Running = (
    RelayHandle,
    oneshot::Sender<()>,
    JoinHandle<Result<ShutdownReport, anthracite::RelayError>>,
);

fn start(config: Config) -> Running {
    let relay = Relay::builder(config).build().expect("relay builds");
    let handle = relay.handle();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(relay.run(async {
        let _ = rx.await;
    }));
    (handle, tx, task)
}

/// A loopback address nothing listens on: connections are refused.
fn refused_address() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    drop(l);
    format!("{addr}:a")
}

#[tokio::test]
async fn full_drop_newest_queue_reports_drops_to_the_embedder() {
    let config = Config::builder()
        .destinations([refused_address()])
        .queue_bounds(10, 1 << 20)
        .when_full(WhenFull::DropNewest)
        .telemetry_interval(None)
        .shutdown_grace(Duration::ZERO)
        .build()
        .expect("config");
    let (handle, stop, task) = start(config);
    let mut ingestor = handle.ingestor();
    for i in 0..25 {
        let pushed = ingestor.push(format!("embed.full.{i}").as_bytes(), 1.7e9, 1.0);
        assert_eq!(pushed, Pushed::Accepted);
    }
    assert_eq!(
        ingestor.push(b"embed.full.nan", 1.7e9, f64::NAN),
        Pushed::Invalid(DropReason::NanValue)
    );
    let flushed = ingestor.flush().await;
    assert_eq!((flushed.queued, flushed.dropped), (10, 15), "{flushed:?}");
    assert!(!flushed.waited);
    let s = handle.stats();
    let d = &s.destinations[0];
    assert_eq!(d.dropped(DestinationDropReason::QueueFull), 15);
    assert_eq!(d.routed, d.sent + d.dropped_total() + d.queued);
    drop(ingestor);
    let _ = stop.send(());
    let report = task.await.expect("join").expect("run");
    assert_eq!(report.undelivered, vec![(d.name.clone(), 10)]);
}

#[tokio::test]
async fn dropped_ingestor_with_pending_data_is_flushed_or_counted() {
    let config = Config::builder()
        .destinations([refused_address()])
        .queue_bounds(10, 1 << 20)
        .when_full(WhenFull::Block)
        .telemetry_interval(None)
        .shutdown_grace(Duration::ZERO)
        .build()
        .expect("config");
    let (handle, stop, task) = start(config);
    let mut ingestor = handle.ingestor();
    for i in 0..4 {
        assert!(
            ingestor
                .push(format!("embed.a.{i}").as_bytes(), 1.7e9, 1.0)
                .is_accepted()
        );
    }
    drop(ingestor);
    let s = handle.stats();
    assert_eq!(
        s.ingest.received, 4,
        "the dropped ingestor published its counters"
    );
    assert_eq!(s.destinations[0].queued, 4, "and handed its data over");

    // A second one finds the queue (policy `block`) with room for 6 of its 15: it cannot
    // wait in `drop`, so the rest is dropped and counted, not lost uncounted.
    let mut ingestor = handle.ingestor();
    for i in 0..15 {
        assert!(
            ingestor
                .push(format!("embed.b.{i}").as_bytes(), 1.7e9, 1.0)
                .is_accepted()
        );
    }
    drop(ingestor);
    let s = handle.stats();
    let d = &s.destinations[0];
    assert_eq!(s.ingest.received, 19);
    assert_eq!(d.routed, 19);
    assert_eq!(d.queued, 10);
    assert_eq!(d.dropped(DestinationDropReason::QueueFull), 9);
    let _ = stop.send(());
    task.await.expect("join").expect("run");
}

#[tokio::test]
async fn receipt_resolves_once_the_destination_has_the_data() {
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let config = Config::builder()
        .destinations([format!("{}:a", sink.addr())])
        .telemetry_interval(None)
        .build()
        .expect("config");
    let (handle, stop, task) = start(config);
    let mut ingestor = handle.ingestor();
    assert!(ingestor.receipt().is_empty());
    for round in 0..3 {
        for i in 0..1000 {
            let _ = ingestor.push(format!("embed.r{round}.{i}").as_bytes(), 1.7e9, 1.0);
        }
        let flushed = ingestor.flush().await;
        assert_eq!(flushed.queued, 1000);
        let receipt = ingestor.receipt();
        assert_eq!(receipt.delivered().await, Delivery::Settled);
        let d = &handle.stats().destinations[0];
        assert_eq!(
            d.sent,
            1000 * (round + 1),
            "settled means written and confirmed"
        );
        assert_eq!(d.queued, 0);
    }
    let _ = stop.send(());
    task.await.expect("join").expect("run");
    assert_eq!(sink.wait_for_count(3000, Duration::from_secs(10)), 3000);
}

#[tokio::test]
async fn receipt_reports_shutdown_when_data_is_left_on_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config::builder()
        .destinations([refused_address()])
        .queue_bounds(100, 1 << 20)
        .spill_dir(dir.path())
        .telemetry_interval(None)
        .shutdown_grace(Duration::ZERO)
        .build()
        .expect("config");
    let (handle, stop, task) = start(config);
    let mut ingestor = handle.ingestor();
    for i in 0..500 {
        let _ = ingestor.push(format!("embed.spill.{i}").as_bytes(), 1.7e9, 1.0);
    }
    assert_eq!(ingestor.flush().await.queued, 500);
    let receipt = ingestor.receipt();
    let waiting = tokio::spawn(async move { receipt.delivered().await });
    let _ = stop.send(());
    let report = task.await.expect("join").expect("run");
    assert_eq!(report.spilled.iter().map(|(_, n)| n).sum::<u64>(), 500);
    assert_eq!(waiting.await.expect("join"), Delivery::ShutDown);
}
