//! Memory the relay holds for names is bounded by configuration, however many distinct names
//! clients send (before the fix: 50k distinct 16 KB names on one connection held 819 MB in the old
//! per-connection route caches, and kept it after the client left).

use anthracite_testkit as testkit;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use anthracite::unstable::relay::route_cache;
use anthracite_sink::{Sink, SinkProtocol};
use testkit::relay::{TestRelay, config_for};

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn route_cache_memory_bounded_under_distinct_long_names() {
    const BUDGET: usize = 4 << 20;
    const NAMES: usize = 600;
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let relay = TestRelay::start(&config_for(
        &[format!("{}:a", sink.addr())],
        &format!(
            "[router]\nroute_cache_bytes = {BUDGET}\n[listen]\nmax_line_length = 20000\nmax_name_length = 20000\n"
        ),
    ));
    let cache = route_cache(&relay.handle);
    assert_eq!(cache.budget(), BUDGET);
    let mut conn = TcpStream::connect(relay.line).expect("connect line receiver");
    let mut sent = 0;
    let mut most_cached = 0;
    // Every name twice (a name is stored at its second sighting): 1,200 lines of 16 KiB,
    // about 19 MiB of names through a 4 MiB cache.
    for pass in 0..2 {
        for chunk in (0..NAMES).collect::<Vec<_>>().chunks(50) {
            let mut bytes = Vec::new();
            for &i in chunk {
                let mut name = format!("hostile.{i:05}.");
                name.push_str(&"x".repeat(16 * 1024 - name.len()));
                bytes.extend_from_slice(format!("{name} {pass} 1700000000\n").as_bytes());
            }
            conn.write_all(&bytes).expect("write");
            sent += chunk.len();
            assert_eq!(sink.wait_for_count(sent, WAIT), sent, "delivered so far");
            let accounted = cache.accounted_bytes();
            assert!(
                accounted <= BUDGET,
                "route cache holds {accounted} bytes, over its {BUDGET}-byte budget"
            );
            most_cached = most_cached.max(cache.len());
        }
    }
    drop(conn);
    // The long names were cached (the bound is not met by refusing them) and evicted (they
    // do not all fit).
    assert!(most_cached > 50, "at most {most_cached} names cached");
    assert!(
        cache.len() < NAMES,
        "{} of {NAMES} names cached",
        cache.len()
    );
    assert!(cache.accounted_bytes() <= BUDGET);
}

/// A protobuf frame (length prefix included): one metric named `name` with `points` points.
fn protobuf_frame(name: &str, points: usize) -> Vec<u8> {
    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    let mut metric = vec![0x0a];
    varint(name.len() as u64, &mut metric);
    metric.extend_from_slice(name.as_bytes());
    for i in 0..points {
        // Point { timestamp = 1 (varint), value = 2 (fixed64) }
        let mut point = vec![0x08];
        varint(1_700_000_000 + i as u64, &mut point);
        point.push(0x11);
        point.extend_from_slice(&(i as f64).to_le_bytes());
        metric.push(0x12);
        varint(point.len() as u64, &mut metric);
        metric.extend_from_slice(&point);
    }
    let mut payload = vec![0x0a];
    varint(metric.len() as u64, &mut payload);
    payload.extend_from_slice(&metric);
    let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&payload);
    frame
}

/// A protocol-2 pickle frame (length prefix included) of `repeats` entries that are all one
/// memoised `(name, (timestamp, value))` tuple: two bytes per entry after the first.
fn memo_pickle_frame(name: &str, repeats: usize) -> Vec<u8> {
    let mut p = vec![0x80, 0x02, b']', b'('];
    p.push(b'X');
    p.extend_from_slice(&(name.len() as u32).to_le_bytes());
    p.extend_from_slice(name.as_bytes());
    p.push(b'G');
    p.extend_from_slice(&1.7e9f64.to_be_bytes());
    p.push(b'G');
    p.extend_from_slice(&1.0f64.to_be_bytes());
    p.extend_from_slice(&[0x86, 0x86, b'q', 1]);
    for _ in 1..repeats {
        p.extend_from_slice(&[b'h', 1]);
    }
    p.extend_from_slice(b"e.");
    let mut frame = (p.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&p);
    frame
}

/// The frame budget counted a frame's bytes, not what they decode into. A ~0.94 MB
/// protobuf frame holding one 4 KB name with 55,000 points turns into ~230 MB of datapoints
/// (16 connections: 3.8 GB peak), and a 0.2 MB pickle frame whose memo repeats one 4 KB name
/// 100,000 times into ~410 MB (4 connections: 2.2 GB). What a frame decodes into now comes out
/// of a decoded-size budget as large as the frame budget; a frame decoding into more than all
/// of it is dropped (`decoded_too_large`). The real binary's peak resident set (`VmHWM`) under
/// 16 protobuf connections (8 of the shape, 8 that fit the budget and are relayed) and
/// 4 memo-heavy pickle connections stays within the memory bound of docs/operations.md for its
/// configuration.
#[test]
fn amplifying_frames_keep_peak_rss_within_the_readme_bound() {
    use std::net::SocketAddr;
    const MIB: u64 = 1 << 20;
    const QUEUE: u64 = 8 * MIB;
    const ROUTE_CACHE: u64 = 8 * MIB;
    const FRAMES: u64 = 64 * MIB;
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = testkit::free_ports(3);
    let mut relay = crate::anthracite("relay")
        .toml(
            dir.path(),
            &format!(
            "[listen]\nline_tcp = \"\"\npickle_tcp = \"127.0.0.1:{}\"\nprotobuf_tcp = \"127.0.0.1:{}\"\n\
             max_frame_buffer_bytes = {FRAMES}\n[router]\nroute_cache_bytes = {ROUTE_CACHE}\n\
             [admin]\nlisten = \"127.0.0.1:{}\"\n\
             [destinations]\nservers = [\"127.0.0.1:1:a\"]\nbackoff_min_ms = 50\nbackoff_max_ms = 500\n\
             [destinations.queue]\nmax_bytes = {QUEUE}\nwhen_full = \"drop_newest\"\n\
             [telemetry]\ninterval_secs = 0\n",
            ports[0], ports[1], ports[2]
            ),
        )
        .start();
    let admin = SocketAddr::from(([127, 0, 0, 1], ports[2]));
    relay.wait_ready(admin);
    let baseline = testkit::process::peak_rss(relay.pid());

    let name = format!("amplify.{}", "x".repeat(4096 - 8));
    assert_eq!(name.len(), 4096);
    let huge = protobuf_frame(&name, 55_000);
    let fits = protobuf_frame(&name, 12_000);
    let memo = memo_pickle_frame(&name, 100_000);
    assert!(
        huge.len() < 1 << 20 && huge.len() > 900_000,
        "{}",
        huge.len()
    );
    assert!(memo.len() < 210_000, "{}", memo.len());
    let clients: Vec<std::thread::JoinHandle<()>> = (0..20)
        .map(|c| {
            let (port, frame) = match c {
                0..8 => (ports[1], huge.clone()),
                8..16 => (ports[1], fits.clone()),
                _ => (ports[0], memo.clone()),
            };
            std::thread::spawn(move || {
                let mut conn = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                conn.write_all(&frame).expect("send frame");
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client");
    }
    let metric = |name: &str, labels: &[(&str, &str)]| {
        let text = testkit::http::get(admin, "/metrics").map_or(String::new(), |(_, b)| b);
        testkit::http::sum(&testkit::http::parse_metrics(&text), name, labels) as u64
    };
    let received = || metric("anthracite_received_datapoints_total", &[]);
    let too_large = || {
        metric(
            "anthracite_invalid_datapoints_total",
            &[("reason", "decoded_too_large")],
        )
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while (received() < 8 * 12_000 || too_large() < 12) && std::time::Instant::now() < deadline {
        relay.assert_running("every frame to be decoded or dropped");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!((received(), too_large()), (8 * 12_000, 12));
    let peak = testkit::process::peak_rss(relay.pid());
    relay.stop();
    // The "Memory" rows of docs/operations.md for this configuration: the memory tier and its spares, the
    // write buffers, the route cache, the frame budget and as much again for what frames
    // decode into, pickle decoding (128 × a 0.2 MB payload on each of two workers), and per
    // connection its read buffer, a read's worth of parsed datapoints and decoder scratch.
    let bound = QUEUE
        + QUEUE / 2
        + 2 * 128 * 1024
        + ROUTE_CACHE
        + 2 * FRAMES
        + 2 * 128 * memo.len() as u64
        + 20 * (64 + 256 + 256) * 1024;
    eprintln!(
        "amplifying frames: peak RSS {} MiB over a {} MiB baseline; documented bound {} MiB",
        peak / MIB,
        baseline / MIB,
        bound / MIB
    );
    assert!(
        peak <= baseline + bound,
        "peak RSS {peak} bytes is over the baseline {baseline} + the documented bound {bound}"
    );
}
