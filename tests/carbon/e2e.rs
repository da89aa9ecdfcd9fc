//! End to end against the real carbon-cache 1.1.10: two caches `a` and `b`, anthracite in
//! process in front of them (carbon_ch), datapoints in by line and by pickle, out by pickle
//! (10,000 datapoints) or by protobuf into the caches' protobuf receivers (carbon's `protobuf`
//! plugin, `PROTOBUF_RECEIVER_PORT`; 4,000 datapoints). Every whisper file must exist on
//! exactly the cache carbon's own ring picks, with the values sent, and on no other cache.

use anthracite_testkit as testkit;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anthracite::{Config, Relay};
use testkit::carbon::CarbonCaches;
use testkit::placement::carbon_ring_placement;
use testkit::whisper::{Stored, wait_for_whisper};
use testkit::{send_lines, send_pickle, unix_now};

/// Graphite-like names with some variety: shared prefixes, many directories, unicode
/// components, a long component. No tags: the caches run with ENABLE_TAGS = False.
fn name(i: usize) -> String {
    match i % 11 {
        0 => format!("e2e.ünïcødé.数据.g{}.m{i}", i % 7),
        1 => format!("e2e.long.{}.m{i}", "x".repeat(120 + i % 50)),
        _ => format!("e2e.g{}.host-{}.cpu.m{i}", i % 40, i % 97),
    }
}

#[test]
fn every_datapoint_lands_on_the_cache_carbon_picks() {
    end_to_end("pickle", 5_000, |c| c.pickle_destination());
}

#[test]
fn protobuf_out_lands_on_the_cache_carbon_picks() {
    end_to_end("protobuf", 2_000, |c| c.protobuf_destination());
}

/// `count` names, two datapoints each, relayed with `protocol` to the caches' receivers that
/// `destination` names.
fn end_to_end(
    protocol: &str,
    count: usize,
    destination: fn(&testkit::carbon::CacheInstance) -> String,
) {
    let mut caches = CarbonCaches::start(&["a", "b"]);
    let destinations: Vec<String> = caches.instances.iter().map(destination).collect();
    let config = Config::from_toml_str(&format!(
        r#"
[listen]
line_tcp = "127.0.0.1:0"
pickle_tcp = "127.0.0.1:0"
[destinations]
servers = [{}]
protocol = "{protocol}"
[router]
method = "consistent-hashing"
hash_type = "carbon_ch"
[telemetry]
interval_secs = 0
"#,
        destinations
            .iter()
            .map(|d| format!("{d:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .expect("anthracite config");

    // The relay runs on its own runtime; this thread stays synchronous (sockets, Python).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (line, pickle) = rt.block_on(async {
        (
            tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind line listener"),
            tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind pickle listener"),
        )
    });
    let line_addr: SocketAddr = line.local_addr().unwrap();
    let pickle_addr: SocketAddr = pickle.local_addr().unwrap();
    let relay = Relay::builder(config)
        .line_listener(line)
        .pickle_listener(pickle)
        .build()
        .expect("build relay");
    let handle = relay.handle();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = rt.spawn(relay.run(async {
        let _ = stop_rx.await;
    }));

    // Every name gets one point by line and one by pickle, at distinct timestamps within the
    // last 20 minutes (the caches keep 1 s resolution for a day).
    let base = unix_now() - 1_200;
    let names: Vec<String> = (0..count).map(name).collect();
    let by_line: Vec<(String, i64, f64)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), base + (i % 500) as i64, i as f64 + 0.5))
        .collect();
    let by_pickle: Vec<(String, i64, f64)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (
                n.clone(),
                base + 600 + (i % 500) as i64,
                -(i as f64) * 0.25 - 1.0,
            )
        })
        .collect();
    for chunk in by_line.chunks(count / 4) {
        send_lines(line_addr, chunk);
    }
    for chunk in by_pickle.chunks(count / 2) {
        send_pickle(pickle_addr, chunk, 500);
    }

    // Fail fast (and say why) if anthracite did not take everything in, before polling whisper.
    let sent = 2 * count as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = handle.stats();
        if s.ingest.received + s.ingest.invalid.total() >= sent {
            assert_eq!(
                s.ingest.received, sent,
                "anthracite rejected datapoints: {s:?}"
            );
            break;
        }
        assert!(
            !running.is_finished(),
            "anthracite's run() ended early: {s:?}"
        );
        assert!(
            Instant::now() < deadline,
            "anthracite accepted {} of {sent} datapoints within 60 s: {s:?}",
            s.ingest.received
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let mut expected: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    for (n, t, v) in by_line.iter().chain(&by_pickle) {
        expected.entry(n.clone()).or_default().push((*t, *v));
    }
    for points in expected.values_mut() {
        points.sort_by_key(|p| p.0);
    }
    let found = wait_for_whisper(&mut caches, &expected, base - 10, Duration::from_secs(150));

    let placement = carbon_ring_placement(&destinations.join(", "), "carbon_ch", &names, 1, true);
    let mut per_cache = [0usize; 2];
    let mut wrong = Vec::new();
    for (n, place) in names.iter().zip(&placement) {
        assert_eq!(place.len(), 1, "rf1 placement of {n:?}: {place:?}");
        let home = place[0];
        per_cache[home] += 1;
        for (idx, stored) in found.iter().enumerate() {
            let got = stored.get(n);
            if idx == home {
                let want = Stored::Points(expected[n].clone());
                if got != Some(&want) {
                    wrong.push(format!(
                        "{n:?}: on cache {} (carbon's pick) holds {got:?}, sent {want:?}",
                        caches.instances[idx].name
                    ));
                }
            } else if let Some(s) = got {
                wrong.push(format!(
                    "{n:?}: also on cache {} ({s:?}); carbon puts it on {} only",
                    caches.instances[idx].name, caches.instances[home].name
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} problems over {count} names (misplaced or wrong values); first ones:\n{}",
        wrong.len(),
        wrong[..wrong.len().min(10)].join("\n")
    );
    assert!(
        per_cache.iter().all(|&n| n > 0),
        "ring used only one cache: {per_cache:?}"
    );

    let stats = handle.stats();
    assert_eq!(
        stats.ingest.received,
        2 * count as u64,
        "anthracite received count: {stats:?}"
    );

    let _ = stop_tx.send(());
    let report = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), running).await })
        .expect("relay shut down within 60 s")
        .expect("relay task did not panic")
        .expect("relay run returned Ok");
    assert!(
        report.undelivered.iter().all(|(_, n)| *n == 0),
        "undelivered: {:?}",
        report.undelivered
    );
}
