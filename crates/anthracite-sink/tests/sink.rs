//! The sink over real loopback sockets: what it records of each protocol and transport, and
//! how it misbehaves when asked to. Every wait is bounded; no timing is asserted.

use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anthracite_sink::{Histogram, Keep, Sink, SinkConfig, SinkProtocol};

const WAIT: Duration = Duration::from_secs(20);

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn send(addr: SocketAddr, bytes: &[u8]) {
    let mut conn = TcpStream::connect(addr).expect("connect the sink");
    conn.write_all(bytes).expect("write");
}

fn pickle_frame(points: &[(&str, (f64, f64))]) -> Vec<u8> {
    let body = serde_pickle::to_vec(&points, serde_pickle::SerOptions::new()).expect("pickle");
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// A carbon.proto `Payload` of one metric with `points`, length-prefixed (encoded by hand:
/// field 1 metrics, each field 1 name and field 2 points of fixed32 timestamp, double value).
fn protobuf_frame(name: &str, points: &[(u32, f64)]) -> Vec<u8> {
    let mut metric = vec![0x0a, name.len() as u8];
    metric.extend_from_slice(name.as_bytes());
    for (ts, value) in points {
        let mut point = vec![0x08];
        let mut t = *ts;
        while t >= 0x80 {
            point.push((t as u8) | 0x80);
            t >>= 7;
        }
        point.push(t as u8);
        point.push(0x11);
        point.extend_from_slice(&value.to_le_bytes());
        metric.push(0x12);
        metric.push(point.len() as u8);
        metric.extend_from_slice(&point);
    }
    let mut payload = vec![0x0a, metric.len() as u8];
    payload.extend_from_slice(&metric);
    let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&payload);
    frame
}

#[test]
fn records_every_datapoint_of_each_protocol() {
    let line = Sink::start("line", SinkProtocol::Line);
    send(line.addr(), b"a.b 1.5 1700000000\nc.d 2 1700000001\r\n");
    let pickle = Sink::start("pickle", SinkProtocol::Pickle);
    send(
        pickle.addr(),
        &pickle_frame(&[("p.a", (1.7e9, 3.0)), ("p.b", (1.7e9, -0.0))]),
    );
    let protobuf = Sink::start("protobuf", SinkProtocol::Protobuf);
    send(
        protobuf.addr(),
        &protobuf_frame("q.a", &[(1_700_000_000, 4.25), (1_700_000_060, 5.0)]),
    );
    for sink in [&line, &pickle, &protobuf] {
        assert_eq!(sink.wait_for_count(2, WAIT), 2, "{}", sink.label());
        assert!(sink.errors().is_empty(), "{:?}", sink.errors());
        assert_eq!(sink.connections(), 1);
    }
    let r = line.received();
    assert_eq!(
        (r[1].path.as_str(), r[1].value, r[1].timestamp),
        ("c.d", 2.0, 1_700_000_001.0)
    );
    let r = pickle.received();
    assert_eq!((r[0].path.as_str(), r[0].value), ("p.a", 3.0));
    assert_eq!(
        pickle
            .multiset()
            .get(&("p.b".into(), 1.7e9f64.to_bits(), 0.0f64.to_bits())),
        Some(&1)
    );
    let r = protobuf.received();
    assert_eq!(
        (r[1].path.as_str(), r[1].value, r[1].timestamp),
        ("q.a", 5.0, 1_700_000_060.0)
    );
}

#[test]
fn a_partial_line_at_close_and_a_malformed_line_are_errors() {
    let sink = Sink::start("line", SinkProtocol::Line);
    send(
        sink.addr(),
        b"ok 1 1700000000\nnot a datapoint line\ntorn 2",
    );
    assert_eq!(sink.wait_for_count(1, WAIT), 1);
    let deadline = Instant::now() + WAIT;
    while sink.errors().len() < 2 {
        assert!(Instant::now() < deadline, "errors: {:?}", sink.errors());
        std::thread::sleep(Duration::from_millis(10));
    }
    let errors = sink.errors();
    assert!(
        errors.iter().any(|e| e.contains("not 3 fields")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("6 bytes left undecoded")),
        "{errors:?}"
    );
    assert_eq!(sink.stats().bad(), 2);
}

#[test]
fn udp_datagrams_are_whole_lines() {
    let sink = Sink::start("udp", SinkProtocol::Udp);
    let client = UdpSocket::bind(loopback()).expect("bind a client");
    client
        .send_to(b"u.a 1 1700000000\nu.b 2 1700000000\n", sink.addr())
        .expect("send");
    assert_eq!(sink.wait_for_count(2, WAIT), 2);
    client
        .send_to(b"u.c 3 1700000000\nu.d 4", sink.addr())
        .expect("send");
    assert_eq!(sink.wait_for_count(3, WAIT), 3);
    let deadline = Instant::now() + WAIT;
    while sink.errors().is_empty() {
        assert!(Instant::now() < deadline, "no error for a torn datagram");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(sink.errors()[0].contains("datagram ends inside a line"));
}

#[test]
fn tls_is_terminated_with_the_given_certificate() {
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
    let cert = params.self_signed(&key).expect("self-signed certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .expect("server config");
    let sink = Sink::start_tls("tls", SinkProtocol::Pickle, Arc::new(server));

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(cert.der().clone())
        .expect("trust the certificate");
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let session = rustls::ClientConnection::new(
        Arc::new(client),
        "localhost".try_into().expect("server name"),
    )
    .expect("client session");
    let tcp = TcpStream::connect(sink.addr()).expect("connect");
    let mut tls = rustls::StreamOwned::new(session, tcp);
    tls.write_all(&pickle_frame(&[("t.a", (1.7e9, 7.0))]))
        .expect("write over TLS");
    tls.flush().expect("flush");
    assert_eq!(sink.wait_for_count(1, WAIT), 1);
    assert_eq!(sink.received()[0].path, "t.a");
    tls.conn.send_close_notify();
    let _ = tls.flush();
}

/// A paused sink counts nothing while its connections stay open; resumed, it reads it all.
#[test]
fn a_paused_sink_reads_nothing_until_resumed() {
    let sink = Sink::start("hung", SinkProtocol::Line);
    let mut conn = TcpStream::connect(sink.addr()).expect("connect");
    conn.write_all(b"before 1 1700000000\n").expect("write");
    assert_eq!(sink.wait_for_count(1, WAIT), 1);
    sink.pause();
    let mut payload = Vec::new();
    for i in 0..1000 {
        payload.extend_from_slice(format!("during.{i} {i} 1700000000\n").as_bytes());
    }
    conn.write_all(&payload).expect("write while paused");
    // Long enough for a sink that ignored the pause to count some of it.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(sink.count(), 1, "nothing counted while paused");
    sink.resume();
    assert_eq!(sink.wait_for_count(1001, WAIT), 1001);
}

#[test]
fn a_down_sink_refuses_then_listens_on_the_same_port() {
    let sink = Sink::start("dead", SinkProtocol::Line);
    let mut before = TcpStream::connect(sink.addr()).expect("connect");
    before.write_all(b"a 1 1700000000\n").expect("write");
    assert_eq!(sink.wait_for_count(1, WAIT), 1);
    sink.go_down().expect("go down");
    assert!(
        TcpStream::connect(sink.addr()).is_err(),
        "a down sink refuses connections"
    );
    sink.come_back().expect("come back");
    send(sink.addr(), b"b 2 1700000000\n");
    assert_eq!(sink.wait_for_count(2, WAIT), 2);
    assert_eq!(sink.connections(), 2);
}

/// `anthracite sink`'s output: plaintext lines as received, pickle datapoints as lines.
#[test]
fn an_echoing_sink_writes_each_datapoint_as_a_line() {
    let out = Arc::new(Mutex::new(Vec::<u8>::new()));
    let config = SinkConfig {
        keep: Keep::Count,
        echo: Some(out.clone()),
        ..SinkConfig::new("echo", SinkProtocol::Auto)
    };
    let sink = Sink::bind(loopback(), config).expect("bind");
    send(sink.addr(), b"l.a 1.50 1700000000\n");
    assert_eq!(sink.wait_for_count(1, WAIT), 1);
    send(sink.addr(), &pickle_frame(&[("p.a", (1700000000.0, 42.0))]));
    assert_eq!(sink.wait_for_count(2, WAIT), 2);
    sink.stop();
    let text = String::from_utf8(out.lock().expect("echo").clone()).expect("text");
    assert_eq!(text, "l.a 1.50 1700000000\np.a 42 1700000000\n");
}

/// Values that are send instants (microseconds on the sink's clock) give latencies; others
/// are counted as unstamped.
#[test]
fn a_counting_sink_measures_latency_from_stamped_values() {
    let clock = Instant::now();
    std::thread::sleep(Duration::from_millis(5));
    let config = SinkConfig {
        keep: Keep::Count,
        clock: Some(clock),
        ..SinkConfig::new("count", SinkProtocol::Line)
    };
    let sink = Sink::bind(loopback(), config).expect("bind");
    send(sink.addr(), b"s.a 1000 1700000000\ns.b 0.5 1700000000\n");
    assert_eq!(sink.wait_for_count(2, WAIT), 2);
    let mut latency = Histogram::new();
    sink.stats().merge_latency_into(&mut latency);
    assert_eq!(latency.count(), 1);
    assert_eq!(sink.stats().unstamped(), 1);
    assert!(
        sink.received().is_empty(),
        "a counting sink keeps no datapoints"
    );
}
