//! One relay (in process) reading Kafka: a backfill from a timestamp, and bad input of every
//! kind — unreachable brokers, a missing topic, messages that are not Graphite, a malformed
//! pickle — counted with reasons, logged, and never stalling another source.

use std::net::SocketAddr;

use anthracite::DropReason;

use anthracite_sink::{Sink, SinkProtocol};
use anthracite_testkit::free_ports;
use anthracite_testkit::kafka::broker::{Broker, exclusive};
use anthracite_testkit::kafka::client;
use anthracite_testkit::kafka::traffic::{
    GROUP_PROPERTIES, LONG, counts, metric, name, wait_delivered,
};
use anthracite_testkit::relay::TestRelay;
use anthracite_testkit::wait_for;

fn relay_toml(sink: SocketAddr, admin: u16, kafka: &str) -> String {
    format!(
        "[destinations]\nservers = [\"{sink}:a\"]\nbackoff_min_ms = 20\nbackoff_max_ms = 200\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 10\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n{kafka}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_from_a_timestamp_reads_exactly_the_messages_after_it() {
    let _turn = exclusive().await;
    let broker = Broker::shared();
    let topic = "backfill";
    broker.create_topic(topic, 2).await;
    // Message i of each partition is stamped 1 000 000 + i seconds (CreateTime): the
    // backfill starts at i = 60.
    let base_ms: i64 = 1_000_000_000;
    let producer = client::producer(&broker.bootstrap);
    for i in 0..100 {
        for p in 0..2 {
            let line = format!(
                "{} {i} {}\n",
                name("bf", p, i),
                anthracite_testkit::unix_now()
            );
            client::send(
                &producer,
                topic,
                p,
                line.as_bytes(),
                Some(base_ms + i * 1000),
            )
            .await;
        }
    }
    let received = Sink::start("received", SinkProtocol::Pickle);

    let sink = received.addr();
    let admin = free_ports(1)[0];
    let kafka = format!(
        "[[kafka]]\nbrokers = [\"{}\"]\ntopics = [\"{topic}\"]\ngroup_id = \"backfill\"\n\
         initial_offset = \"timestamp\"\ninitial_timestamp = 1970-01-12T13:47:40Z\n\
         commit_interval_ms = 200\n{GROUP_PROPERTIES}\n",
        broker.bootstrap
    );
    // 1970-01-12T13:47:40Z is 1 000 060 s after the epoch.
    let relay = TestRelay::start_with(
        &relay_toml(sink, admin, &kafka),
        &anthracite::extension::Extensions::new().with(anthracite_kafka::Kafka),
    );
    wait_delivered(&received, "bf", 80, "the backfill").await;
    // Everything before the timestamp stays unread, even once the relay is idle.
    let admin_addr = SocketAddr::from(([127, 0, 0, 1], admin));
    wait_for("the backfill committed", LONG, || async {
        client::committed(&broker.bootstrap, "backfill", topic, 2)
            .values()
            .all(|&o| o == 100)
    })
    .await;
    let got = counts(&received, "bf");
    let indices: Vec<i64> = got.keys().map(|(_, i)| *i).collect();
    assert_eq!(
        got.len(),
        80,
        "distinct datapoints read: {:?}",
        got.keys().take(5).collect::<Vec<_>>()
    );
    assert!(
        indices.iter().all(|&i| i >= 60),
        "read a message stamped before the timestamp"
    );
    assert!(got.values().all(|&n| n == 1), "a message was read twice");
    assert_eq!(
        metric(
            admin_addr,
            "anthracite_kafka_messages_total",
            &[("group", "backfill")]
        ),
        80.0
    );
    drop(relay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_and_dead_brokers_are_counted_and_never_stall_other_sources() {
    let _turn = exclusive().await;
    let broker = Broker::shared();
    broker.create_topic("bad-lines", 1).await;
    broker.create_topic("bad-pickle", 1).await;
    let producer = client::producer(&broker.bootstrap);
    let now = anthracite_testkit::unix_now();
    let good = format!("{} 1 {now}\n", name("ok", 0, 0));
    for m in [
        good.as_bytes(),
        b"{\"this\": \"is json, not graphite\"}".as_slice(),
        b"\x00\x01\x02 binary".as_slice(),
    ] {
        client::send(&producer, "bad-lines", 0, m, None).await;
    }
    let good_pickle = serde_pickle::to_vec(
        &vec![(name("ok", 1, 0), (now, 2.0))],
        serde_pickle::SerOptions::new(),
    )
    .expect("pickle");
    for m in [b"\x80\x02]q\x00(garbage".as_slice(), &good_pickle[..]] {
        client::send(&producer, "bad-pickle", 0, m, None).await;
    }
    let received = Sink::start("received", SinkProtocol::Pickle);

    let sink = received.addr();
    let admin = free_ports(1)[0];
    let kafka = format!(
        "[[kafka]]\nbrokers = [\"{b}\"]\ntopics = [\"bad-lines\"]\ngroup_id = \"bad-lines\"\n{GROUP_PROPERTIES}\n\
         [[kafka]]\nbrokers = [\"{b}\"]\ntopics = [\"bad-pickle\"]\ngroup_id = \"bad-pickle\"\nformat = \"pickle\"\n{GROUP_PROPERTIES}\n\
         [[kafka]]\nbrokers = [\"127.0.0.1:1\"]\ntopics = [\"nowhere\"]\ngroup_id = \"unreachable\"\n{GROUP_PROPERTIES}\n\
         [[kafka]]\nbrokers = [\"{b}\"]\ntopics = [\"no-such-topic\"]\ngroup_id = \"missing\"\n{GROUP_PROPERTIES}\n",
        b = broker.bootstrap
    );
    let relay = TestRelay::start_with(
        &relay_toml(sink, admin, &kafka),
        &anthracite::extension::Extensions::new().with(anthracite_kafka::Kafka),
    );
    let admin_addr = SocketAddr::from(([127, 0, 0, 1], admin));
    // The TCP receiver keeps working beside the failing sources.
    anthracite_testkit::send_lines(relay.line, &[(name("tcp", 0, 0), now, 3.0)]);
    wait_delivered(&received, "ok", 2, "the good Kafka messages").await;
    wait_delivered(&received, "tcp", 1, "the TCP line").await;
    wait_for("bad messages counted", LONG, || async {
        let m = |group, reason| {
            metric(
                admin_addr,
                "anthracite_kafka_bad_messages_total",
                &[("group", group), ("reason", reason)],
            )
        };
        m("bad-lines", "not_graphite") == 2.0 && m("bad-pickle", "bad_pickle") == 1.0
    })
    .await;
    wait_for("client errors counted", LONG, || async {
        metric(
            admin_addr,
            "anthracite_kafka_errors_total",
            &[("group", "unreachable")],
        ) > 0.0
            && metric(
                admin_addr,
                "anthracite_kafka_errors_total",
                &[("group", "missing")],
            ) > 0.0
    })
    .await;
    let stats = relay.handle.stats();
    assert!(
        stats.ingest.invalid.get(DropReason::BadFields) >= 2,
        "the JSON and binary lines counted as invalid: {stats:#?}"
    );
    assert_eq!(
        stats.ingest.invalid.get(DropReason::BadPickle),
        1,
        "{stats:#?}"
    );
    // The bad messages are committed like any other: they never block their partition.
    wait_for("offsets past the bad messages", LONG, || async {
        client::committed(&broker.bootstrap, "bad-lines", "bad-lines", 1).get(&0) == Some(&3)
            && client::committed(&broker.bootstrap, "bad-pickle", "bad-pickle", 1).get(&0)
                == Some(&2)
    })
    .await;
    drop(relay);
}
