//! A hung destination: its sink stops reading (paused, as a carbon-cache under SIGSTOP) for
//! 30 s while datapoints flow at a steady rate. The other destination keeps receiving what is
//! offered to it, the stopped one's connection is declared dead by the write timeout (logged
//! once, counted) and its data spills; once it reads again everything arrives. The relay runs
//! as its own process; the sinks are in this one. No timing assertions: counts delivered
//! during the stop relative to the offered count.

use anthracite_testkit as testkit;

use std::collections::HashSet;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anthracite::{Config, Placement};
use anthracite_sink::{Sink, SinkConfig, SinkProtocol};
use testkit::http::{get, parse_metrics, value};

/// Datapoints offered per second, and per tick of the sender.
const RATE: u64 = 30_000;
const TICK: Duration = Duration::from_millis(50);
const STOP: Duration = Duration::from_secs(30);
const NAMES: u64 = 2_000;

fn name(seq: u64) -> String {
    format!("hung.m{}", seq % NAMES)
}

/// A plaintext sink on 127.0.0.1:`port` with a small receive buffer, so that a paused sink
/// pushes back on the relay quickly.
fn start_sink(label: &str, port: u16) -> Sink {
    let config = SinkConfig {
        receive_buffer: Some(64 << 10),
        ..SinkConfig::new(label, SinkProtocol::Line)
    };
    Sink::bind(SocketAddr::from(([127, 0, 0, 1], port)), config)
        .unwrap_or_else(|e| panic!("sink {label} on port {port}: {e}"))
}

/// The sequence numbers (values) a sink has received so far.
fn received(sink: &Sink) -> Vec<u64> {
    sink.received().iter().map(|r| r.value as u64).collect()
}

/// Sends `RATE` datapoints per second over one connection until `stop`; `seq` counts them.
fn sender(addr: SocketAddr, seq: Arc<AtomicU64>, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut conn = TcpStream::connect(addr).expect("connect relay");
        let per_tick = RATE * TICK.as_millis() as u64 / 1000;
        let mut next = Instant::now();
        let mut buf = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            buf.clear();
            let first = seq.load(Ordering::SeqCst);
            for i in first..first + per_tick {
                buf.extend_from_slice(format!("{} {i} 1700000000\n", name(i)).as_bytes());
            }
            conn.write_all(&buf).expect("the relay keeps reading");
            seq.store(first + per_tick, Ordering::SeqCst);
            next += TICK;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                thread::sleep(wait);
            }
        }
    })
}

fn scrape(admin: SocketAddr) -> std::collections::BTreeMap<String, f64> {
    let (status, text) = get(admin, "/metrics").expect("scrape /metrics");
    assert_eq!(status, 200);
    parse_metrics(&text)
}

#[test]
fn hung_destination_spills_without_slowing_the_other_and_everything_arrives() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = testkit::free_ports(4);
    let (port_a, port_b, line, admin_port) = (ports[0], ports[1], ports[2], ports[3]);
    let sink_a = start_sink("sink-a", port_a);
    let sink_b = start_sink("sink-b", port_b);
    let dest_b = format!("127.0.0.1:{port_b}:b");
    let toml = format!(
        "[listen]\nline_tcp = \"127.0.0.1:{line}\"\npickle_tcp = \"\"\n\
         [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\
         [destinations]\nservers = [\"127.0.0.1:{port_a}:a\", \"{dest_b}\"]\n\
         protocol = \"line\"\nwrite_timeout_ms = 2000\nbackoff_min_ms = 100\nbackoff_max_ms = 1000\n\
         [destinations.queue]\nmax_datapoints = 5000\n\
         [destinations.spill]\ndir = {:?}\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 5\n",
        dir.path().join("spill").display().to_string()
    );
    let router = Placement::new(&Config::from_toml_str(&toml).expect("config")).expect("router");
    let all = router.all_destinations();
    // Which sink each name goes to (0: a, 1: b).
    let placement: Vec<u16> = (0..NAMES)
        .map(|i| {
            let first = &router.destinations(&name(i))[0];
            all.iter().position(|d| d == first).expect("a destination") as u16
        })
        .collect();
    let on = |sink: u16, range: std::ops::Range<u64>| -> Vec<u64> {
        range
            .filter(|&s| placement[(s % NAMES) as usize] == sink)
            .collect()
    };

    let mut relay = crate::anthracite("relay").toml(dir.path(), &toml).start();
    let admin: SocketAddr = ([127, 0, 0, 1], admin_port).into();
    relay.wait_ready(admin);

    let seq = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let feed = sender(([127, 0, 0, 1], line).into(), seq.clone(), stop.clone());
    thread::sleep(Duration::from_secs(5));

    sink_b.pause();
    let (seq_before, a_before) = (seq.load(Ordering::SeqCst), sink_a.count());
    let stopped_at = Instant::now();
    let mut spilled_during_stop = 0.0;
    while stopped_at.elapsed() < STOP {
        thread::sleep(Duration::from_millis(500));
        let m = scrape(admin);
        let d = [("destination", dest_b.as_str())];
        spilled_during_stop = value(&m, "anthracite_spilled_datapoints_total", &d).unwrap_or(0.0);
    }
    let (seq_after, a_after) = (seq.load(Ordering::SeqCst), sink_a.count());
    let m = scrape(admin);
    let timeouts = value(
        &m,
        "anthracite_destination_write_timeouts_total",
        &[("destination", dest_b.as_str())],
    )
    .unwrap_or(0.0);
    sink_b.resume();
    relay.assert_running("the stop to end");

    // a: delivery during the stop kept up with what was offered to it.
    let offered_a = on(0, seq_before..seq_after).len();
    let delivered_a = a_after - a_before;
    eprintln!(
        "hung figures: during the stop a received {delivered_a} of {offered_a} offered; \
         b: {timeouts} write timeouts, {spilled_during_stop} datapoints spilled"
    );
    assert!(
        offered_a > 100_000,
        "the sender kept its rate: {offered_a} offered to a during the stop"
    );
    assert!(
        delivered_a as f64 >= 0.9 * offered_a as f64,
        "a received {delivered_a} of the {offered_a} datapoints offered to it while b was stopped"
    );
    // b: declared dead (counted), its data spilled.
    assert!(timeouts >= 1.0, "write timeouts of b: {timeouts}");
    assert!(
        spilled_during_stop > 0.0,
        "b's data spilled while it was stopped"
    );

    thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::SeqCst);
    feed.join().expect("sender");
    let total = seq.load(Ordering::SeqCst);
    for (sink, out) in [(0u16, &sink_a), (1, &sink_b)] {
        let want: HashSet<u64> = on(sink, 0..total).into_iter().collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            // Fewer datapoints than wanted: some are missing, no need to compare sets.
            let got: HashSet<u64> = if out.count() < want.len() {
                HashSet::new()
            } else {
                received(out).into_iter().collect()
            };
            let missing = want.difference(&got).count();
            if missing == 0 {
                assert!(
                    got.is_subset(&want),
                    "sink {sink} got datapoints of the other"
                );
                break;
            }
            relay.assert_running("everything to arrive");
            assert!(
                Instant::now() < deadline,
                "sink {sink}: {missing} of {} datapoints never arrived",
                want.len()
            );
            thread::sleep(Duration::from_millis(200));
        }
    }
    relay.stop();
    let log = relay.log();
    let hung_lines = log
        .lines()
        .filter(|l| l.contains("destination not reading"))
        .count();
    eprintln!(
        "{}",
        log.lines()
            .filter(|l| l.contains("WARN") || l.contains("recovered"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(hung_lines, 1, "one warning per episode:\n{log}");
}

/// A destination that refuses connections is known dead: SIGTERM does not wait for the
/// shutdown grace period (600 s here) to deliver to it, and says so.
#[test]
fn sigterm_does_not_wait_the_grace_period_for_a_dead_destination() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = testkit::free_ports(2);
    let (line, down) = (ports[0], ports[1]);
    let toml = format!(
        "[listen]\nline_tcp = \"127.0.0.1:{line}\"\npickle_tcp = \"\"\n\
         [destinations]\nservers = [\"127.0.0.1:{down}:a\"]\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 600\n"
    );
    let mut relay = crate::anthracite("relay").toml(dir.path(), &toml).start();
    relay.wait_listening(&[line]);
    let mut conn = TcpStream::connect(("127.0.0.1", line)).expect("connect the relay");
    let mut payload = Vec::new();
    for i in 0..1000 {
        payload.extend_from_slice(format!("dead.m{i} {i} 1700000000\n").as_bytes());
    }
    conn.write_all(&payload).expect("write lines");
    drop(conn);
    relay.wait_log("cannot connect", Duration::from_secs(20));
    relay.signal("TERM");
    // Far less than the grace period: a relay that waited for it would fail here.
    let status = relay.wait_exit(
        Duration::from_secs(60),
        "SIGTERM waited for a dead destination",
    );
    assert!(status.success(), "{status}");
    let log = relay.log();
    assert!(log.contains("known dead at shutdown"), "{log}");
    assert!(log.contains("undelivered at shutdown"), "{log}");
}
