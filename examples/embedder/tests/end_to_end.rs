//! The embedding guide end to end, against the crate root only: injected listeners (plaintext
//! on a Unix socket, the admin endpoints on TCP), an ingestor awaiting delivery, a reload from
//! code that adds a destination, shutdown, and every datapoint found exactly where `route`
//! says.

use std::collections::BTreeMap;
use std::time::Duration;

use anthracite::{Config, Delivery, OutputProtocol, Placement, Pushed, Relay};
use anthracite_embedder::LineSink;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

const PER_PHASE: usize = 300;

fn config(destinations: &[String]) -> Config {
    Config::builder()
        .destinations(destinations.iter().cloned())
        .protocol(OutputProtocol::Line)
        .telemetry_interval(None)
        .shutdown_grace(Duration::from_secs(10))
        .build()
        .expect("a valid configuration")
}

/// Waits (bounded) until the sinks together hold `count` datapoints.
async fn until_received(sinks: &[LineSink], count: u32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let total: u32 = sinks.iter().flat_map(|s| s.names().into_values()).sum();
        if total >= count || tokio::time::Instant::now() > deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedder_reloads_from_code_and_every_datapoint_lands_where_route_says() {
    let sinks = [
        LineSink::start().await.expect("sink a"),
        LineSink::start().await.expect("sink b"),
        LineSink::start().await.expect("sink c"),
    ];
    let all: Vec<String> = ["a", "b", "c"]
        .iter()
        .zip(&sinks)
        .map(|(i, s)| s.destination(i))
        .collect();
    let first = config(&all[..2]);
    let placement_first = Placement::new(&first).expect("router");

    let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
    let admin_addr = admin.local_addr().expect("admin addr");
    let dir = std::env::temp_dir().join(format!("anthracite-embedder-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let socket = dir.join("line.sock");
    let _ = std::fs::remove_file(&socket);
    let unix = UnixListener::bind(&socket).expect("bind unix socket");

    let relay = Relay::builder(first)
        .line_connections(unix)
        .admin_listener(admin)
        .build()
        .expect("relay builds");
    let handle = relay.handle();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(relay.run(async {
        let _ = stopped.await;
    }));

    // Phase 1: an ingestor, a TCP client and a Unix-socket client.
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    let mut ingestor = handle.ingestor();
    for i in 0..PER_PHASE {
        let name = format!("embed.one.ingestor.{i}");
        let pushed = ingestor.push(name.as_bytes(), 1_700_000_000.0, i as f64);
        assert!(
            matches!(pushed, Pushed::Accepted | Pushed::FlushNow),
            "{pushed:?}"
        );
        expected.insert(name.clone(), placement_first.destinations(&name)[0].clone());
    }
    let flushed = ingestor.flush().await;
    assert_eq!(
        (flushed.queued, flushed.dropped),
        (PER_PHASE as u64, 0),
        "{flushed:?}"
    );
    assert_eq!(ingestor.receipt().delivered().await, Delivery::Settled);

    let mut text = String::new();
    for i in 0..PER_PHASE {
        let name = format!("embed.one.unix.{i}");
        text.push_str(&format!("{name} {i} 1700000000\n"));
        expected.insert(name.clone(), placement_first.destinations(&name)[0].clone());
    }
    let mut u = UnixStream::connect(&socket).await.expect("connect unix");
    u.write_all(text.as_bytes()).await.expect("send unix");
    u.shutdown().await.expect("close unix");
    let mut admin = TcpStream::connect(admin_addr).await.expect("connect admin");
    admin
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")
        .await
        .expect("ask /healthz");
    let mut answer = String::new();
    admin
        .read_to_string(&mut answer)
        .await
        .expect("read /healthz");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    until_received(&sinks, 2 * PER_PHASE as u32).await;

    // Reload from code: a third destination joins the ring.
    let second = config(&all);
    let placement_second = Placement::new(&second).expect("router");
    handle.reload(second).await.expect("reload applies");
    let mut ingestor = handle.ingestor();
    for i in 0..PER_PHASE {
        let name = format!("embed.two.ingestor.{i}");
        ingestor.push(name.as_bytes(), 1_700_000_060.0, i as f64);
        let want = placement_second.destinations(&name)[0].clone();
        assert_eq!(handle.route(&name), vec![want.clone()], "{name}");
        expected.insert(name, want);
    }
    ingestor.flush().await;
    assert_eq!(ingestor.receipt().delivered().await, Delivery::Settled);

    let _ = stop.send(());
    let report = running.await.expect("relay task").expect("relay runs");
    assert!(report.undelivered.is_empty(), "{report:?}");
    until_received(&sinks, expected.len() as u32).await;

    let mut wrong = Vec::new();
    for (sink, dest) in sinks.iter().zip(&all) {
        for (name, count) in sink.names() {
            match expected.get(&name) {
                Some(want) if want == dest && count == 1 => {}
                other => wrong.push(format!("{name} ×{count} at {dest}, expected {other:?}")),
            }
        }
    }
    let arrived: usize = sinks.iter().map(|s| s.names().len()).sum();
    assert!(wrong.is_empty(), "misplaced: {wrong:?}");
    assert_eq!(arrived, expected.len(), "every datapoint arrived once");
    assert!(
        sinks[2].names().keys().any(|n| n.starts_with("embed.two.")),
        "the added destination took its share"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
