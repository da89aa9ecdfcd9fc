//! The protobuf receiver (`listen.protobuf_tcp`, carbon's `PROTOBUF_RECEIVER_PORT`) fed frames
//! made by carbon 1.1.10's own `carbon_pb2` (Python, in the test venv): every point arrives at
//! the sink with its name, timestamp and value; a frame that is not a `Payload` is dropped and
//! counted while the connection goes on; a length over the frame limit closes the connection.

use anthracite_testkit as testkit;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anthracite::DropReason;
use anthracite_sink::{Key, Received, Sink, SinkProtocol};
use testkit::relay::{TestRelay, config_for};
use testkit::venv::run_python_json;

const WAIT: Duration = Duration::from_secs(30);

/// Builds one framed `Payload` per input group with carbon's `carbon_pb2` (each metric's
/// points grouped as carbon's protobuf client does) and prints the frames as hex.
const MAKE_FRAMES: &str = r#"
import json, struct, sys
from carbon.carbon_pb2 import Payload
groups = json.load(sys.stdin)
out = []
for group in groups:
    payload = Payload()
    metrics = {}
    for name, ts, value in group:
        m = metrics.get(name)
        if m is None:
            m = payload.metrics.add()
            m.metric = name
            metrics[name] = m
        p = m.points.add()
        p.timestamp = ts
        p.value = value
    body = payload.SerializeToString()
    out.append((struct.pack("!I", len(body)) + body).hex())
print(json.dumps(out))
"#;

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

fn key(name: &str, ts: u32, value: f64) -> Key {
    Received {
        path: name.to_owned(),
        timestamp: f64::from(ts),
        value,
    }
    .key()
}

#[test]
fn carbon_pb2_frames_arrive_point_for_point() {
    // Three frames: repeated names (grouped into one Metric with several points), unicode and
    // tagged names, a large timestamp, negative and fractional values.
    let base = 1_700_000_000u32;
    let groups: Vec<Vec<(String, u32, f64)>> = (0..3)
        .map(|g| {
            (0..400)
                .map(|i| {
                    let name = match i % 4 {
                        0 => format!("pb.host{}.cpu", i % 9),
                        1 => format!("pb.東京.温度.{g}"),
                        2 => format!("pb.tagged;dc=北京;k=v{}", i % 5),
                        _ => format!("pb.g{g}.m{i}"),
                    };
                    (
                        name,
                        base + g * 1000 + i,
                        f64::from(i) * -0.25 + f64::from(g),
                    )
                })
                .collect()
        })
        .collect();
    let frames: Vec<String> = run_python_json(
        "carbon_pb2 frames",
        MAKE_FRAMES,
        &serde_json::to_value(&groups).expect("json"),
        Duration::from_secs(60),
    );
    let sink = Sink::start("sink", SinkProtocol::Pickle);
    let relay = TestRelay::start(&config_for(&[format!("{}:a", sink.addr())], ""));
    let mut conn = TcpStream::connect(relay.protobuf).expect("connect protobuf receiver");
    for (i, frame) in frames.iter().enumerate() {
        conn.write_all(&hex(frame)).expect("send frame");
        if i == 0 {
            // Not a Payload: a length-delimited field whose length runs past the frame.
            conn.write_all(&[0, 0, 0, 3, 0x0a, 0x7f, 0x00])
                .expect("send bad frame");
        }
    }
    drop(conn);
    let total: usize = groups.iter().map(Vec::len).sum();
    assert_eq!(sink.wait_for_count(total, WAIT), total);
    let mut want: HashMap<Key, usize> = HashMap::new();
    for (name, ts, value) in groups.iter().flatten() {
        *want.entry(key(name, *ts, *value)).or_default() += 1;
    }
    assert_eq!(sink.multiset(), want);
    let s = relay.wait_stats("bad frame counted", WAIT, |s| {
        s.ingest.invalid.get(DropReason::BadProtobuf) == 1
    });
    assert_eq!(s.ingest.received, total as u64);
    assert_eq!(s.ingest.invalid.total(), 1, "{s:?}");
    assert!(sink.errors().is_empty(), "{:?}", sink.errors());
}

#[test]
fn frame_over_the_limit_closes_the_connection_and_is_counted() {
    let sink = Sink::start("sink", SinkProtocol::Pickle);
    let relay = TestRelay::start(&config_for(
        &[format!("{}:a", sink.addr())],
        "[listen]\nmax_protobuf_frame = 1024\n",
    ));
    let mut conn = TcpStream::connect(relay.protobuf).expect("connect");
    conn.write_all(&2048u32.to_be_bytes()).expect("send length");
    conn.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut buf = [0u8; 16];
    let n = conn.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the relay closes the connection");
    let s = relay.wait_stats("frame_too_long counted", WAIT, |s| {
        s.ingest.invalid.get(DropReason::FrameTooLong) == 1
    });
    assert_eq!(s.ingest.received, 0);
    assert_eq!(sink.count(), 0);
}
