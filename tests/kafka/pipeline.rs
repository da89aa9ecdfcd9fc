//! The durable pipeline end to end, as processes: senders → edge relay → Kafka destination →
//! topic → consumer relay → two carbon_ch destinations (capture sinks). Every datapoint
//! arrives once at the destination carbon_ch gives it; with the broker stopped for 20 s the
//! edge queues and spills, then replays, and nothing is lost. Each message on the topic is
//! keyed by a metric name it holds, on that key's murmur2 partition. With the broker frozen
//! (SIGSTOP) three times, edges in both formats hold their clients at most `full_wait_ms` once,
//! spill, and deliver everything after each resume.

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

/// `full_wait_ms` of the frozen-broker edges: the longest a client may be held, once.
const FULL_WAIT_MS: u64 = 2000;

/// An edge of the frozen-broker test: `format` messages to `topic`; a memory tier that a few
/// seconds of traffic fill, and a write timeout shorter than a freeze.
fn frozen_edge_toml(
    line: u16,
    admin: u16,
    bootstrap: &str,
    topic: &str,
    format: &str,
    spill: &std::path::Path,
) -> String {
    format!(
        "[listen]\nline_tcp = \"127.0.0.1:{line}\"\npickle_tcp = \"\"\n\
         [destinations]\nbackoff_min_ms = 50\nbackoff_max_ms = 1000\nwrite_timeout_ms = 4000\n\
         servers = [{{ address = \"{bootstrap}:kafka\", protocol = \"kafka\", kafka = {{ topic = \"{topic}\", format = \"{format}\" }} }}]\n\
         [destinations.queue]\nmax_datapoints = 1000\nwhen_full = \"spill\"\nfull_wait_ms = {FULL_WAIT_MS}\n\
         [destinations.spill]\ndir = \"{}\"\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 10\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n",
        spill.display()
    )
}

/// The metric names of every message of `topic` (`format` `lines` or `pickle`).
async fn names_on(
    bootstrap: &str,
    topic: &str,
    format: &str,
) -> std::collections::BTreeSet<String> {
    let (bootstrap, topic, format) = (bootstrap.to_string(), topic.to_string(), format.to_string());
    tokio::task::spawn_blocking(move || {
        let total: i64 = anthracite_testkit::kafka::client::end_offsets(&bootstrap, &topic, 2)
            .values()
            .sum();
        let messages =
            anthracite_testkit::kafka::client::read_all(&bootstrap, &topic, total as usize, LONG);
        let mut names = std::collections::BTreeSet::new();
        for (_, _, payload) in messages {
            if format == "pickle" {
                for n in pickle_names(&payload) {
                    names.insert(String::from_utf8_lossy(&n).into_owned());
                }
            } else {
                for l in payload.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
                    let n = l.split(|&c| c == b' ').next().unwrap_or_default();
                    names.insert(String::from_utf8_lossy(n).into_owned());
                }
            }
        }
        names
    })
    .await
    .expect("read the topic")
}

/// The broker frozen (SIGSTOP) and resumed three times while clients send to two edges, one
/// per message format. During each freeze the edges hold their clients at most once, for at
/// most `full_wait_ms` (plus a second), and spill the rest; after each resume the producer
/// reconnects and both tiers drain; at the end every datapoint sent is on its topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_broker_spills_at_the_edge_and_the_producer_reconnects_every_time() {
    let _turn = exclusive().await;
    let broker = Broker::shared();
    let formats = ["lines", "pickle"];
    let dir = anthracite_testkit::scratch("kafka-tests", "frozen");
    let ports = free_ports(4);
    let mut edges = Vec::new();
    for (i, format) in formats.iter().enumerate() {
        let topic = format!("frozen-{format}");
        broker.create_topic(&topic, 2).await;
        let (line, admin) = (ports[2 * i], ports[2 * i + 1]);
        std::fs::create_dir_all(dir.join(format)).expect("the edge's directory");
        let edge = crate::anthracite(&format!("edge-{format}"))
            .toml(
                &dir.join(format),
                &frozen_edge_toml(
                    line,
                    admin,
                    &broker.bootstrap,
                    &topic,
                    format,
                    &dir.join(format).join("spill"),
                ),
            )
            .start();
        let line = SocketAddr::from(([127, 0, 0, 1], line));
        let admin = SocketAddr::from(([127, 0, 0, 1], admin));
        wait_for("the edge relay listens", LONG, || async {
            std::net::TcpStream::connect(line).is_ok()
        })
        .await;
        edges.push((edge, line, admin, topic, *format));
    }
    let total = |admin: SocketAddr, name: &str| metric(admin, name, &[]);
    let mut sent = 0usize;
    let mut longest_hold = Duration::ZERO;
    for round in 0..3 {
        // A little before the freeze: the destinations are connected and acknowledged.
        let before = points(&format!("r{round}"), 200);
        for (_, line, ..) in &edges {
            send_lines(*line, &before);
        }
        sent += before.len();
        for (_, _, admin, ..) in &edges {
            wait_for("delivered before the freeze", LONG, || async {
                total(*admin, "anthracite_sent_datapoints_total") >= sent as f64
            })
            .await;
        }
        let spilled: Vec<f64> = edges
            .iter()
            .map(|(_, _, admin, ..)| total(*admin, "anthracite_spilled_datapoints_total"))
            .collect();
        let waits: Vec<f64> = edges
            .iter()
            .map(|(_, _, admin, ..)| total(*admin, "anthracite_destination_full_waits_total"))
            .collect();
        let pid = broker.pid();
        assert_ne!(pid, 0, "the broker runs");
        signal(pid, "STOP");
        // 5 s of traffic while the broker is frozen: five memory tiers' worth.
        for step in 0..20 {
            let chunk = points(&format!("r{round}s{step}"), 250);
            for (_, line, ..) in &edges {
                send_lines(*line, &chunk);
            }
            sent += chunk.len();
            // A client is held only while its edge waits for room: the edge has taken each
            // chunk within full_wait_ms and a second (a bound the relay promises, generous
            // for a loaded machine: the chunk itself takes milliseconds).
            let at = std::time::Instant::now();
            for (_, _, admin, ..) in &edges {
                wait_for("the edge takes what its clients send", LONG, || async {
                    total(*admin, "anthracite_received_datapoints_total") >= sent as f64
                })
                .await;
            }
            longest_hold = longest_hold.max(at.elapsed());
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        signal(pid, "CONT");
        for (i, (_, _, admin, _, format)) in edges.iter().enumerate() {
            let now = total(*admin, "anthracite_spilled_datapoints_total");
            assert!(
                now > spilled[i],
                "round {round}: the {format} edge held its clients instead of spilling"
            );
            let held = total(*admin, "anthracite_destination_full_waits_total") - waits[i];
            assert!(
                held <= 1.0,
                "round {round}: the {format} edge held its clients {held} times in one freeze"
            );
            // The producer reconnects: everything is acknowledged, both tiers drain.
            wait_for("the edge delivers after the freeze", LONG, || async {
                total(*admin, "anthracite_sent_datapoints_total") >= sent as f64
                    && total(*admin, "anthracite_spill_queue_datapoints") == 0.0
                    && total(*admin, "anthracite_queue_datapoints") == 0.0
            })
            .await;
        }
        eprintln!("round {round}: longest client hold {longest_hold:?}");
    }
    assert!(
        longest_hold <= Duration::from_millis(FULL_WAIT_MS + 1000),
        "a client was held {longest_hold:?}, more than full_wait_ms ({FULL_WAIT_MS} ms) and a second"
    );
    for (_, _, _, topic, format) in &edges {
        let names = names_on(&broker.bootstrap, topic, format).await;
        let mut expected = std::collections::BTreeSet::new();
        for round in 0..3 {
            expected.extend(points(&format!("r{round}"), 200).into_iter().map(|p| p.0));
            for step in 0..20 {
                expected.extend(
                    points(&format!("r{round}s{step}"), 250)
                        .into_iter()
                        .map(|p| p.0),
                );
            }
        }
        let lost: Vec<&String> = expected.difference(&names).collect();
        assert!(
            lost.is_empty(),
            "{format}: {} of {} datapoints never reached {topic}, e.g. {:?}",
            lost.len(),
            expected.len(),
            lost.first()
        );
    }
}

/// Sends `sig` (`STOP`, `CONT`) to the process `pid` (the broker).
fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill -{sig} {pid}");
}
