//! The durable pipeline end to end, as processes: senders → edge relay → Kafka destination →
//! topic → consumer relay → two carbon_ch destinations (capture sinks). Every datapoint
//! arrives once at the destination carbon_ch gives it; with the broker stopped for 20 s the
//! edge queues and spills, then replays, and nothing is lost. Each message on the topic is
//! keyed by a metric name it holds, on that key's murmur2 partition.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anthracite::Config;
use anthracite_kafka::partition_for;

use anthracite_sink::{Received, Sink, SinkProtocol};
use anthracite_testkit::kafka::broker::{Broker, exclusive};
use anthracite_testkit::kafka::traffic::{LONG, consumer_toml, metric};
use anthracite_testkit::wait_for;
use anthracite_testkit::{free_ports, send_lines, unix_now};

const TOPIC: &str = "pipeline";

fn edge_toml(line: u16, admin: u16, bootstrap: &str, spill: &std::path::Path) -> String {
    format!(
        "[listen]\nline_tcp = \"127.0.0.1:{line}\"\npickle_tcp = \"\"\n\
         [destinations]\nbackoff_min_ms = 50\nbackoff_max_ms = 1000\n\
         servers = [{{ address = \"{bootstrap}:kafka\", protocol = \"kafka\", kafka = {{ topic = \"{TOPIC}\", format = \"pickle\", properties = {{ \"message.timeout.ms\" = \"3000\" }} }} }}]\n\
         [destinations.queue]\nmax_datapoints = 2000\nwhen_full = \"spill\"\n\
         [destinations.spill]\ndir = \"{}\"\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 10\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n",
        spill.display()
    )
}

fn points(tag: &str, n: usize) -> Vec<(String, i64, f64)> {
    let now = unix_now();
    (0..n)
        .map(|i| (format!("{tag}.m{i}"), now, i as f64))
        .collect()
}

/// Per name, the sinks (0: a, 1: b) it arrived at, with repeats.
fn arrivals(sinks: &[&Sink], tag: &str) -> BTreeMap<String, Vec<u16>> {
    let mut m: BTreeMap<String, Vec<u16>> = BTreeMap::new();
    for (i, s) in sinks.iter().enumerate() {
        for Received { path: name, .. } in s.received() {
            if name.starts_with(tag) {
                m.entry(name).or_default().push(i as u16);
            }
        }
    }
    m
}

/// The metric names of a pickle message (`[(name, (timestamp, value)), …]`, no length
/// prefix).
fn pickle_names(payload: &[u8]) -> Vec<Vec<u8>> {
    use serde_pickle::Value;
    let value = serde_pickle::value_from_slice(payload, serde_pickle::DeOptions::new())
        .expect("a pickle message");
    let Value::List(entries) = value else {
        panic!("a pickle message is not a list: {value:?}")
    };
    entries
        .into_iter()
        .map(|entry| match entry {
            Value::Tuple(t) | Value::List(t) => match t.first() {
                Some(Value::String(s)) => s.clone().into_bytes(),
                Some(Value::Bytes(b)) => b.clone(),
                other => panic!("an entry without a name: {other:?}"),
            },
            other => panic!("an entry that is not a pair: {other:?}"),
        })
        .collect()
}

/// Every message on the topic is keyed by a metric name it holds, and its partition is
/// what Kafka's default partitioner (murmur2 of the key, as the Java client) gives that key,
/// so a consumer partitioning by name agrees with the edge.
async fn messages_are_keyed_by_a_name_they_hold(bootstrap: &str) {
    let bootstrap = bootstrap.to_string();
    let messages = tokio::task::spawn_blocking(move || {
        let total: i64 = anthracite_testkit::kafka::client::end_offsets(&bootstrap, TOPIC, 4)
            .values()
            .sum();
        anthracite_testkit::kafka::client::read_all(&bootstrap, TOPIC, total as usize, LONG)
    })
    .await
    .expect("read the topic");
    assert!(!messages.is_empty());
    for (partition, key, payload) in &messages {
        let key = key.as_deref().expect("every message has a key");
        let names = pickle_names(payload);
        assert!(
            names.iter().any(|n| n == key),
            "key {:?} is not a name in its message",
            String::from_utf8_lossy(key)
        );
        assert_eq!(
            partition_for(key, 4),
            *partition,
            "key {:?} is not on its murmur2 partition",
            String::from_utf8_lossy(key)
        );
        for n in &names {
            assert_eq!(partition_for(n, 4), *partition);
        }
    }
}

async fn wait_all(sinks: &[&Sink], tag: &str, n: usize, what: &str) {
    wait_for(what, LONG, || async { arrivals(sinks, tag).len() >= n }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_to_kafka_to_caches_delivers_once_and_survives_a_broker_outage() {
    let _turn = exclusive().await;
    let broker = Broker::shared();
    broker.create_topic(TOPIC, 4).await;
    let got_a = Sink::start("got_a", SinkProtocol::Pickle);

    let a = got_a.addr();
    let got_b = Sink::start("got_b", SinkProtocol::Pickle);

    let b = got_b.addr();
    let sinks = [format!("{a}:a"), format!("{b}:b")];
    let dir = anthracite_testkit::scratch("kafka-tests", "pipeline");
    let ports = free_ports(3);
    let edge_admin = SocketAddr::from(([127, 0, 0, 1], ports[1]));
    let edge_line = SocketAddr::from(([127, 0, 0, 1], ports[0]));
    let _edge = crate::anthracite("edge")
        .toml(
            &dir,
            &edge_toml(ports[0], ports[1], &broker.bootstrap, &dir.join("spill")),
        )
        .start();
    let consumer = consumer_toml(
        &broker.bootstrap,
        TOPIC,
        "caches",
        &sinks,
        ports[2],
        "format = \"pickle\"",
    );
    let _consumer = crate::anthracite("consumer").toml(&dir, &consumer).start();
    wait_for("the edge relay listens", LONG, || async {
        std::net::TcpStream::connect(edge_line).is_ok()
    })
    .await;

    // carbon_ch, as the consumer relay routes.
    let router = anthracite::Placement::new(
        &Config::from_toml_str_with(
            &consumer,
            &anthracite::extension::Extensions::new().with(anthracite_kafka::Kafka),
        )
        .expect("config"),
    )
    .expect("router");
    let all = router.all_destinations();
    let place = |name: &str| {
        let first = &router.destinations(name)[0];
        all.iter().position(|d| d == first).expect("a destination") as u16
    };
    let sinks = [&got_a, &got_b];

    // Phase 1: every datapoint arrives once, where carbon_ch puts it.
    let one = points("one", 5000);
    for chunk in one.chunks(1000) {
        send_lines(edge_line, chunk);
    }
    wait_all(&sinks, "one", one.len(), "phase 1 through Kafka").await;
    for (name, at) in arrivals(&sinks, "one") {
        assert_eq!(at, vec![place(&name)], "{name} arrived at {at:?}");
    }
    messages_are_keyed_by_a_name_they_hold(&broker.bootstrap).await;

    // Phase 2: the broker stops for 20 s while the senders go on; the edge spills and
    // replays once it is back.
    broker.stop();
    let two = points("two", 10_000);
    for chunk in two.chunks(500) {
        send_lines(edge_line, chunk);
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    wait_for("the edge spilled", LONG, || async {
        metric(edge_admin, "anthracite_spilled_datapoints_total", &[]) > 0.0
    })
    .await;
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(Duration::from_millis(800))).await;
    broker.start();
    wait_all(&sinks, "two", two.len(), "phase 2 after the outage").await;
    let arrived = arrivals(&sinks, "two");
    let twice = arrived.values().filter(|at| at.len() > 1).count();
    for (name, at) in &arrived {
        assert!(
            at.iter().all(|&s| s == place(name)),
            "{name} arrived at {at:?}"
        );
    }
    eprintln!(
        "broker outage: {} datapoints sent, {} distinct delivered, {twice} delivered more than once",
        two.len(),
        arrived.len()
    );
    assert_eq!(arrived.len(), two.len(), "datapoints lost in the outage");
}
