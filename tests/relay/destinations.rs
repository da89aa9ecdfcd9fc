//! Destinations: a refusing destination does not slow the other, its data waits and arrives,
//! accounting is exact; shutdown flushes what is queued for a connected destination.

use anthracite_testkit as testkit;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use anthracite_sink::{Sink, SinkProtocol};
use testkit::relay::{TestRelay, config_for};

const WAIT: Duration = Duration::from_secs(30);

fn lines(prefix: &str, n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        out.extend_from_slice(format!("{prefix}.{i:06}.value {i} 1700000000\n").as_bytes());
    }
    out
}

#[test]
fn down_destination_queues_while_the_other_flows_then_catches_up() {
    let a = Sink::start("a", SinkProtocol::Pickle);
    // Reserve b's port but do not listen yet: connections are refused.
    let b_port = testkit::free_ports(1)[0];
    let b_dest = format!("127.0.0.1:{b_port}:b");
    let relay = TestRelay::start(&config_for(
        &[format!("{}:a", a.addr()), b_dest.clone()],
        "",
    ));
    let n = 20_000;
    let mut c = TcpStream::connect(relay.line).expect("connect");
    c.write_all(&lines("outage", n)).expect("write");
    drop(c);
    let s = relay.wait_stats("all parsed", WAIT, |s| s.ingest.received == n as u64);
    let to_a = s.destinations[0].routed as usize;
    let to_b = s.destinations[1].routed as usize;
    assert_eq!(to_a + to_b, n);
    assert!(
        to_a > 0 && to_b > 0,
        "both destinations get a share: {to_a} / {to_b}"
    );
    // a receives its whole share while b is down.
    assert_eq!(a.wait_for_count(to_a, WAIT), to_a);
    // A push counts its batch as routed before it queues it: wait for b's share to settle.
    let s = relay.wait_stats("b holds its share", WAIT, |s| {
        s.destinations[1].queued == to_b as u64
    });
    assert_eq!(s.destinations[1].sent, 0);
    for d in &s.destinations {
        assert_eq!(d.routed, d.sent + d.dropped_total() + d.queued, "{d:?}");
    }
    // b comes up on its port: the queue drains into it.
    let b = Sink::start_on("b", SinkProtocol::Pickle, b_port);
    assert_eq!(b.wait_for_count(to_b, WAIT), to_b);
    let s = relay.wait_stats("b drained", WAIT, |s| s.destinations[1].queued == 0);
    for d in &s.destinations {
        assert_eq!(d.routed, d.sent + d.dropped_total() + d.queued, "{d:?}");
        assert_eq!(d.dropped_total(), 0);
    }
    let report = relay.stop();
    assert!(report.undelivered.is_empty(), "{:?}", report.undelivered);
}

#[test]
fn full_queue_drops_newest_with_exact_counts() {
    let port = testkit::free_ports(1)[0];
    let relay = TestRelay::start(&config_for(
        &[format!("127.0.0.1:{port}:a")],
        "[destinations.queue]\nmax_datapoints = 1000\n",
    ));
    let mut c = TcpStream::connect(relay.line).expect("connect");
    c.write_all(&lines("full", 5000)).expect("write");
    drop(c);
    let s = relay.wait_stats("all parsed", WAIT, |s| s.ingest.received == 5000);
    let d = &s.destinations[0];
    assert_eq!(d.routed, 5000);
    assert_eq!(d.queued, 1000);
    assert_eq!(
        d.dropped(anthracite::DestinationDropReason::QueueFull),
        4000
    );
    // The queued 1000 are the oldest: they arrive once the destination is up.
    let sink = Sink::start_on("a", SinkProtocol::Pickle, port);
    assert_eq!(sink.wait_for_count(1000, WAIT), 1000);
    let first = sink.received().first().map(|r| r.path.clone());
    assert_eq!(first.as_deref(), Some("full.000000.value"));
}

#[test]
fn shutdown_flushes_everything_queued_for_a_connected_destination() {
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let relay = TestRelay::start(&config_for(&[format!("{}:a", sink.addr())], ""));
    let n = 50_000;
    let mut c = TcpStream::connect(relay.line).expect("connect");
    c.write_all(&lines("shutdown", n)).expect("write");
    drop(c);
    let report = relay.stop();
    assert_eq!(report.stats.ingest.received, n as u64);
    assert!(report.undelivered.is_empty(), "{:?}", report.undelivered);
    assert_eq!(sink.wait_for_count(n, WAIT), n);
}

/// carbon's line client writes `%.10f` values without trailing zeros and `%d` timestamps: the
/// fractional timestamp arrives truncated, as from carbon-relay.
#[test]
fn line_protocol_destination_gets_carbon_formatted_lines() {
    let sink = Sink::start("a", SinkProtocol::Line);
    let relay = TestRelay::start(&format!(
        "[destinations]\nservers = [{{ address = \"{}:a\", protocol = \"line\" }}]\n\
         [telemetry]\ninterval_secs = 0\n",
        sink.addr()
    ));
    let mut c = TcpStream::connect(relay.line).expect("connect");
    c.write_all(b"l.a 1.5 1700000000\nl.b 1e20 1700000000.5\nl.c -0.1 1700000001\n")
        .expect("write");
    drop(c);
    assert_eq!(sink.wait_for_count(3, WAIT), 3);
    let got: Vec<(String, f64, f64)> = sink
        .received()
        .into_iter()
        .map(|r| (r.path, r.timestamp, r.value))
        .collect();
    assert_eq!(
        got,
        vec![
            ("l.a".to_string(), 1_700_000_000.0, 1.5),
            ("l.b".to_string(), 1_700_000_000.0, 1e20),
            ("l.c".to_string(), 1_700_000_001.0, -0.1),
        ]
    );
}

#[test]
fn a_destination_named_twice_by_the_rules_gets_one_copy() {
    let a = Sink::start("a", SinkProtocol::Pickle);
    let b = Sink::start("b", SinkProtocol::Pickle);
    let (da, db) = (format!("{}:a", a.addr()), format!("{}:b", b.addr()));
    let relay = TestRelay::start(&config_for(
        &[da.clone(), db.clone()],
        &format!(
            "[router]\nmethod = \"rules\"\n\
             [[rules]]\npattern = \"^dup\\\\.\"\ndestinations = [\"{da}\"]\ncontinue = true\n\
             [[rules]]\npattern = \"dup\"\ndestinations = [\"{da}\", \"{db}\"]\n\
             [[rules]]\ndefault = true\ndestinations = [\"{db}\"]\n"
        ),
    ));
    let mut c = TcpStream::connect(relay.line).expect("connect");
    c.write_all(b"dup.x 1 1700000000\nother 2 1700000000\n")
        .expect("write");
    drop(c);
    assert_eq!(b.wait_for_count(2, WAIT), 2);
    assert_eq!(a.wait_for_count(1, WAIT), 1);
    let report = relay.stop();
    assert_eq!(report.stats.destinations[0].routed, 1, "one copy for a");
    assert_eq!(a.count(), 1);
}

/// carbon's `relayMaxQueueLength`: the deepest a destination's queue got in the interval.
/// Destination a is down and is the default for every datapoint sent; the relay's own metrics
/// go by a rule to b, a live sink, where a's `relayMaxQueueLength` must show the whole backlog
/// (and keep showing it while it waits: the peak restarts from the current depth).
#[test]
fn relay_max_queue_length_reports_a_down_destinations_backlog() {
    let a_port = testkit::free_ports(1)[0];
    let b = Sink::start("b", SinkProtocol::Pickle);
    let (da, db) = (format!("127.0.0.1:{a_port}:a"), format!("{}:b", b.addr()));
    let relay = TestRelay::start(&format!(
        "[destinations]\nservers = [{da:?}, {db:?}]\nbackoff_min_ms = 20\nbackoff_max_ms = 200\n\
         [telemetry]\ninterval_secs = 1\nhost = \"qtest\"\n[shutdown]\ngrace_secs = 1\n\
         [router]\nmethod = \"rules\"\n\
         [[rules]]\npattern = \"^carbon\\\\.relays\\\\.\"\ndestinations = [{db:?}]\n\
         [[rules]]\ndefault = true\ndestinations = [{da:?}]\n"
    ));
    let n = 1500;
    let mut c = TcpStream::connect(relay.line).expect("connect");
    c.write_all(&lines("backlog", n)).expect("write");
    drop(c);
    relay.wait_stats("all queued for a", WAIT, |s| {
        s.destinations[0].queued == n as u64
    });
    let name =
        format!("carbon.relays.qtest-a.destinations.127_0_0_1:{a_port}:a.relayMaxQueueLength");
    let deadline = std::time::Instant::now() + WAIT;
    let values = loop {
        let values: Vec<f64> = b
            .received()
            .into_iter()
            .filter(|r| r.path == name)
            .map(|r| r.value)
            .collect();
        // Two reports after the backlog was complete: both show all of it.
        if values.iter().filter(|&&v| v == n as f64).count() >= 2 {
            break values;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name}: {values:?} after {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        values.iter().all(|&v| (0.0..=n as f64).contains(&v)),
        "{values:?}"
    );
    relay.stop();
}
