//! Pickle receiver over real loopback sockets: framing, bad frames, the frame limit.

use anthracite_testkit as testkit;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anthracite::DropReason;
use anthracite::unstable::batch::Datapoint;
use anthracite::unstable::protocol::pickle::encode_message;
use anthracite_sink::{Sink, SinkProtocol};
use bytes::BytesMut;
use testkit::relay::{TestRelay, config_for};

const WAIT: Duration = Duration::from_secs(20);

fn frame(points: &[(&str, f64, f64)]) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_message(
        points.iter().map(|&(n, ts, v)| Datapoint {
            name: n.as_bytes(),
            timestamp: ts,
            value: v,
        }),
        &mut out,
    );
    out.to_vec()
}

#[test]
fn bad_frame_is_dropped_and_the_connection_continues() {
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let relay = TestRelay::start(&config_for(&[format!("{}:a", sink.addr())], ""));
    let mut c = TcpStream::connect(relay.pickle).expect("connect");
    c.write_all(&frame(&[("p.one", 1_700_000_000.0, 1.0)]))
        .expect("write");
    // A GLOBAL os.system frame: rejected whole, nothing executed.
    let evil = b"cos\nsystem\n(S'echo pwned'\ntR.";
    c.write_all(&(evil.len() as u32).to_be_bytes())
        .expect("write");
    c.write_all(evil).expect("write");
    // Garbage of the declared length.
    c.write_all(&5u32.to_be_bytes()).expect("write");
    c.write_all(b"\x80\x02]q\x00").expect("write");
    c.write_all(&frame(&[
        ("p.two", 1_700_000_001.0, 2.5),
        ("p.three", 1_700_000_002.0, -3.0),
    ]))
    .expect("write");
    assert_eq!(sink.wait_for_count(3, WAIT), 3);
    let s = relay.wait_stats("bad frames counted", WAIT, |s| {
        s.ingest.invalid.total() >= 2
    });
    assert_eq!(s.ingest.invalid.get(DropReason::BadPickle), 2);
    assert_eq!(s.ingest.received, 3);
    let paths: Vec<String> = sink.received().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, vec!["p.one", "p.two", "p.three"]);
}

#[test]
fn length_prefix_over_the_limit_closes_the_connection() {
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let relay = TestRelay::start(&config_for(
        &[format!("{}:a", sink.addr())],
        "[listen]\nmax_pickle_frame = 1024\n",
    ));
    let mut c = TcpStream::connect(relay.pickle).expect("connect");
    c.write_all(&frame(&[("before", 1_700_000_000.0, 1.0)]))
        .expect("write");
    c.write_all(&(4096u32).to_be_bytes()).expect("write");
    c.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut byte = [0u8; 1];
    let n = c.read(&mut byte).unwrap_or(0);
    assert_eq!(n, 0, "relay closes a connection whose framing is lost");
    assert_eq!(sink.wait_for_count(1, WAIT), 1);
    let s = relay.wait_stats("frame counted", WAIT, |s| s.ingest.invalid.total() == 1);
    assert_eq!(s.ingest.invalid.get(DropReason::FrameTooLong), 1);
}
