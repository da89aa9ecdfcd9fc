//! The Kinesis destination: an edge relay (a real `anthracite` process) writes KPL-aggregated
//! records to kinesalite, the Kinesis source of a second relay reads them into a capture sink.
//! And what an edge does when its stream is missing or its endpoint unreachable.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::fleet::{self, RelayProcess};
use crate::harness::*;
use anthracite_kinesis::kpl::{Deaggregated, deaggregate};
use anthracite_sink::{Received, Sink, SinkProtocol};
use anthracite_testkit::kinesalite::Kinesalite;
use anthracite_testkit::wait_for;
use anthracite_testkit::{free_ports, send_lines};

/// An edge relay listening for lines on `port`, its one destination the Kinesis stream.
fn edge_toml(port: u16, stream: &str, endpoint: &str) -> String {
    format!(
        "[listen]\nline_tcp = \"127.0.0.1:{port}\"\npickle_tcp = \"\"\n\
         [destinations]\nbackoff_min_ms = 20\nbackoff_max_ms = 200\nconnect_timeout_ms = 2000\n\
         servers = [{{ address = \"kinesis:1:edge\", protocol = \"kinesis\", stream = \"{stream}\", region = \"us-east-1\", endpoint_url = \"{endpoint}\" }}]\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 10\n"
    )
}

fn start_edge(dir: &std::path::Path, stream: &str, endpoint: &str) -> (RelayProcess, SocketAddr) {
    let port = free_ports(1)[0];
    let relay = fleet::start_toml(dir, "edge", &edge_toml(port, stream, endpoint));
    (relay, SocketAddr::from(([127, 0, 0, 1], port)))
}

/// Sends `points` once the edge accepts connections.
async fn send_when_listening(addr: SocketAddr, points: Vec<(String, i64, f64)>) {
    wait_for("the edge listening", LONG, || {
        let up = std::net::TcpStream::connect(addr).is_ok();
        async move { up }
    })
    .await;
    tokio::task::spawn_blocking(move || {
        for chunk in points.chunks(5_000) {
            send_lines(addr, chunk);
        }
    })
    .await
    .expect("send lines");
}

fn points(n: u32) -> Vec<(String, i64, f64)> {
    (0..n)
        .map(|i| {
            (
                format!("pipe.host{}.m", i % 500),
                1_700_000_000,
                f64::from(i),
            )
        })
        .collect()
}

/// Every record in the stream, from the start of every shard.
async fn stream_records(k: &Kinesalite, stream: &str) -> Vec<bytes::Bytes> {
    let client = k.client();
    let mut out = Vec::new();
    for shard in k.shard_ids(stream).await {
        let mut it = client
            .get_shard_iterator()
            .stream_name(stream)
            .shard_id(&shard)
            .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("GetShardIterator")
            .shard_iterator()
            .map(str::to_string);
        while let Some(i) = it.take() {
            let r = client
                .get_records()
                .shard_iterator(i)
                .send()
                .await
                .expect("GetRecords");
            if r.records().is_empty() {
                break;
            }
            out.extend(
                r.records()
                    .iter()
                    .map(|x| bytes::Bytes::copy_from_slice(x.data().as_ref())),
            );
            it = r.next_shard_iterator().map(str::to_string);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_to_kinesis_to_source_delivers_every_datapoint_in_kpl_aggregates() {
    let k = Kinesalite::start().await;
    k.create_stream("pipeline", 2).await;
    let dir = fleet::scratch("kinesis-destination");
    let (mut edge, addr) = start_edge(&dir, "pipeline", &k.endpoint);
    let received = Sink::start("received", SinkProtocol::Pickle);

    let dest = received.addr();
    let consumer = start_relay(&relay_toml(&dest.to_string(), ""), None).await;
    let cp = tempfile::tempdir().expect("tempdir");
    let source = run_source(&k, source_config("pipeline", cp.path()), &consumer, None).await;
    const N: u32 = 20_000;
    send_when_listening(addr, points(N)).await;
    wait_for("every datapoint through the stream", LONG, || {
        let n = received.count();
        async move { n >= N as usize }
    })
    .await;
    edge.assert_running("the end of the test");
    source.stop().await;
    consumer.shutdown().await;
    let mut seen: HashMap<u32, usize> = HashMap::new();
    for Received {
        path: name,
        timestamp: ts,
        value: v,
    } in received.received()
    {
        assert_eq!(ts, 1_700_000_000.0);
        let i = v as u32;
        assert_eq!(
            name,
            format!("pipe.host{}.m", i % 500),
            "value {v} under {name}"
        );
        *seen.entry(i).or_default() += 1;
    }
    assert_eq!(seen.len(), N as usize, "every datapoint delivered");
    assert!(
        seen.values().all(|&n| n == 1),
        "exactly once in a clean run"
    );
    let records = stream_records(&k, "pipeline").await;
    let aggregated = records
        .iter()
        .filter(|r| matches!(deaggregate(r), Deaggregated::Aggregated(_)))
        .count();
    eprintln!("{N} datapoints in {} Kinesis records", records.len());
    assert_eq!(aggregated, records.len(), "every record is a KPL aggregate");
    assert!(
        records.len() < N as usize / 50,
        "{} records for {N} datapoints",
        records.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_stream_queues_logs_and_delivers_once_it_exists_unreachable_endpoint_never_panics()
{
    let k = Kinesalite::start().await;
    let dir = fleet::scratch("kinesis-destination-missing");
    let (mut edge, addr) = start_edge(&dir, "later", &k.endpoint);
    const N: u32 = 3_000;
    send_when_listening(addr, points(N)).await;
    let log = edge.log_path().to_path_buf();
    let logged = |what: &'static str| {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        async move { text.contains(what) }
    };
    wait_for("the missing stream logged", LONG, || {
        logged("cannot connect")
    })
    .await;
    let text = std::fs::read_to_string(&log).expect("edge log");
    assert!(
        text.contains("kinesis:1:edge"),
        "names the destination:\n{text}"
    );
    assert!(text.contains("later"), "names the stream:\n{text}");
    assert_eq!(
        text.matches("cannot connect").count(),
        1,
        "logged once per episode:\n{text}"
    );
    edge.assert_running("while the stream is missing");
    // The stream appears: what waited in the queue is delivered.
    k.create_stream("later", 1).await;
    let received = Sink::start("received", SinkProtocol::Pickle);

    let dest = received.addr();
    let consumer = start_relay(&relay_toml(&dest.to_string(), ""), None).await;
    let cp = tempfile::tempdir().expect("tempdir");
    let source = run_source(&k, source_config("later", cp.path()), &consumer, None).await;
    wait_for("the queued datapoints delivered", LONG, || {
        let n = received.count();
        async move { n >= N as usize }
    })
    .await;
    source.stop().await;
    consumer.shutdown().await;
    let values: std::collections::BTreeSet<u32> =
        received.received().iter().map(|r| r.value as u32).collect();
    assert_eq!(
        values.len(),
        N as usize,
        "nothing lost while the stream was missing"
    );
    edge.signal("TERM");
    let status = edge.exit_status(LONG).await;
    assert!(status.success(), "edge exited with {status}");

    // An endpoint nobody listens on: counted connection failures, one warning, no panic, and a
    // clean exit that reports what it could not deliver.
    let closed = free_ports(1)[0];
    let dir = fleet::scratch("kinesis-destination-unreachable");
    let (mut edge, addr) = start_edge(&dir, "any", &format!("http://127.0.0.1:{closed}"));
    send_when_listening(addr, points(100)).await;
    let log = edge.log_path().to_path_buf();
    wait_for("the unreachable endpoint logged", LONG, || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        async move { text.contains("cannot connect") }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    edge.assert_running("with its endpoint unreachable");
    edge.signal("TERM");
    let status = edge.exit_status(LONG).await;
    assert!(status.success(), "edge exited with {status}");
    let text = std::fs::read_to_string(&log).expect("edge log");
    assert!(!text.contains("panicked"), "{text}");
    assert_eq!(text.matches("cannot connect").count(), 1, "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("undelivered at shutdown") && l.contains("datapoints=100")),
        "the 100 queued datapoints counted as undelivered:\n{text}"
    );
}
