//! Plaintext receiver rules over real loopback sockets, raw bytes in, pickle out.

use anthracite_testkit as testkit;

use std::io::Write;
use std::net::{TcpStream, UdpSocket};
use std::time::Duration;

use anthracite::DropReason;
use anthracite_sink::{Sink, SinkProtocol};
use testkit::relay::{TestRelay, config_for};

const WAIT: Duration = Duration::from_secs(20);

fn one_destination() -> (Sink, TestRelay) {
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let relay = TestRelay::start(&config_for(&[format!("{}:a", sink.addr())], ""));
    (sink, relay)
}

fn send(relay: &TestRelay, bytes: &[u8]) {
    let mut c = TcpStream::connect(relay.line).expect("connect line receiver");
    c.write_all(bytes).expect("write");
}

#[test]
fn carbon_line_grammar_accepted_and_forwarded_exactly() {
    let (sink, relay) = one_destination();
    send(
        &relay,
        b"a.b.c 1.5 1700000000\r\n\
          sci 1e3 1.7e9\n\
          neg -2.25 +1700000001\n\
          tab\t3\t1700000002\n\
          spaces   4    1700000003  \n\
          big 1_000 1700000004\n\
          inf.value inf 1700000005\n\
          tagged;dc=x;host=h1 7 1700000006\n\
          unicode.\xe6\x97\xa5\xe6\x9c\xac 8 1700000007\n\
          tiny 0.1 1700000008.25\n",
    );
    let n = sink.wait_for_count(10, WAIT);
    assert_eq!(n, 10, "received: {:?}", sink.received());
    let got: Vec<(String, f64, f64)> = sink
        .received()
        .into_iter()
        .map(|r| (r.path, r.timestamp, r.value))
        .collect();
    let want = vec![
        ("a.b.c".to_string(), 1_700_000_000.0, 1.5),
        ("sci".to_string(), 1.7e9, 1000.0),
        ("neg".to_string(), 1_700_000_001.0, -2.25),
        ("tab".to_string(), 1_700_000_002.0, 3.0),
        ("spaces".to_string(), 1_700_000_003.0, 4.0),
        ("big".to_string(), 1_700_000_004.0, 1000.0),
        ("inf.value".to_string(), 1_700_000_005.0, f64::INFINITY),
        ("tagged;dc=x;host=h1".to_string(), 1_700_000_006.0, 7.0),
        ("unicode.日本".to_string(), 1_700_000_007.0, 8.0),
        ("tiny".to_string(), 1_700_000_008.25, 0.1),
    ];
    assert_eq!(got, want);
    let s = relay.stop().stats;
    assert_eq!(s.ingest.received, 10);
    assert!(s.ingest.invalid.is_empty(), "{:?}", s.ingest.invalid);
}

#[test]
fn timestamp_minus_one_means_now() {
    let (sink, relay) = one_destination();
    let before = testkit::unix_now() as f64;
    send(&relay, b"now.a 1 -1\nnow.b 2 -1.5\n");
    assert_eq!(sink.wait_for_count(2, WAIT), 2);
    for r in sink.received() {
        assert!(
            r.timestamp >= before - 1.0 && r.timestamp < before + 60.0,
            "{r:?}"
        );
    }
}

#[test]
fn bad_lines_are_counted_and_the_connection_keeps_going() {
    let (sink, relay) = one_destination();
    let mut payload = Vec::new();
    payload.extend_from_slice(b"ok.1 1 1700000000\n");
    payload.extend_from_slice(b"nan.value nan 1700000000\n");
    payload.extend_from_slice(b"two.fields 1\n");
    payload.extend_from_slice(b"four fields 1 1700000000\n");
    payload.extend_from_slice(b"bad.value x 1700000000\n");
    payload.extend_from_slice(b"bad.ts 1 tomorrow\n");
    payload.extend_from_slice(b"nan.ts 1 nan\n");
    payload.extend_from_slice(b"inf.ts 1 inf\n");
    payload.extend_from_slice(b"bad.\xff\xfe.utf8 1 1700000000\n");
    payload.extend_from_slice(b"\n");
    let long = vec![b'x'; 20_000];
    payload.extend_from_slice(&long);
    payload.extend_from_slice(b" 1 1700000000\n");
    payload.extend_from_slice(b"ok.2 2 1700000000\n");
    payload.extend_from_slice(b"unterminated 3 1700000000");
    send(&relay, &payload);
    let s = relay.wait_stats("every line accounted", WAIT, |s| {
        s.ingest.received + s.ingest.invalid.total() >= 13
    });
    assert_eq!(sink.wait_for_count(2, WAIT), 2);
    let paths: Vec<String> = sink.received().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, vec!["ok.1", "ok.2"]);
    assert_eq!(s.ingest.received, 2);
    let inv = s.ingest.invalid;
    assert_eq!(inv.get(DropReason::NanValue), 1);
    assert_eq!(
        inv.get(DropReason::BadFields),
        3,
        "two, four fields and the blank line"
    );
    assert_eq!(inv.get(DropReason::BadValue), 1);
    assert_eq!(inv.get(DropReason::BadTimestamp), 1);
    assert_eq!(inv.get(DropReason::NonFiniteTimestamp), 2);
    assert_eq!(inv.get(DropReason::BadUtf8), 1);
    assert_eq!(inv.get(DropReason::TooLong), 1);
    assert_eq!(inv.get(DropReason::Unterminated), 1);
    assert_eq!(inv.total(), 11);
}

#[test]
fn udp_datagrams_carry_several_lines() {
    let (sink, relay) = one_destination();
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind udp client");
    sock.send_to(b"udp.a 1 1700000000\nudp.b 2 1700000000", relay.udp)
        .expect("send");
    sock.send_to(b"udp.c 3 1700000000\r\nbad\n", relay.udp)
        .expect("send");
    assert_eq!(sink.wait_for_count(3, WAIT), 3);
    let s = relay.wait_stats("udp bad line counted", WAIT, |s| {
        s.ingest.invalid.total() == 1
    });
    assert_eq!(s.ingest.invalid.get(DropReason::BadFields), 1);
}

#[test]
fn connection_limit_and_idle_timeout_apply() {
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let relay = TestRelay::start(&config_for(
        &[format!("{}:a", sink.addr())],
        "[listen]\nmax_connections = 2\nidle_timeout_secs = 0.3\n",
    ));
    let a = TcpStream::connect(relay.line).expect("first");
    let b = TcpStream::connect(relay.line).expect("second");
    relay.wait_stats("two connections open", WAIT, |s| {
        s.ingest.active_connections == 2
    });
    let mut c = TcpStream::connect(relay.line).expect("third connects at TCP level");
    let s = relay.wait_stats("third rejected", WAIT, |s| {
        s.ingest.rejected_connections == 1
    });
    assert_eq!(s.ingest.active_connections, 2);
    // The rejected connection was closed by the relay: a read sees EOF (or a reset).
    c.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut byte = [0u8; 1];
    let n = std::io::Read::read(&mut c, &mut byte).unwrap_or(0);
    assert_eq!(n, 0);
    // Idle connections are closed by the timeout.
    relay.wait_stats("idle connections closed", WAIT, |s| {
        s.ingest.active_connections == 0
    });
    drop((a, b));
}
