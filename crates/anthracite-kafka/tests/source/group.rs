//! The consumer in its group, in a relay of this process: the lag it reports while fetching
//! is paused follows the partitions' end, and the broker-side group protocol (KIP-848) reads
//! and commits like the classic one.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anthracite_sink::{Sink, SinkProtocol};
use anthracite_testkit::free_ports;
use anthracite_testkit::http::{get, parse_metrics};
use anthracite_testkit::kafka::broker::{Broker, exclusive};
use anthracite_testkit::kafka::client;
use anthracite_testkit::kafka::traffic::{LONG, metric, name, wait_delivered};
use anthracite_testkit::relay::TestRelay;
use anthracite_testkit::wait_for;

/// The relay's consumer lag per partition of `group` (partition → lag).
fn lags(admin: SocketAddr, group: &str) -> BTreeMap<i32, f64> {
    let Ok((200, body)) = get(admin, "/metrics") else {
        return BTreeMap::new();
    };
    let prefix = "anthracite_kafka_consumer_lag{";
    parse_metrics(&body)
        .into_iter()
        .filter(|(series, _)| {
            series.starts_with(prefix) && series.contains(&format!("group=\"{group}\""))
        })
        .filter_map(|(series, v)| {
            let p = series.split("partition=\"").nth(1)?.split('"').next()?;
            Some((p.parse().ok()?, v))
        })
        .collect()
}

fn one_message_each(
    tag: &str,
    partitions: i32,
    indices: std::ops::Range<i64>,
) -> Vec<(i32, Vec<u8>)> {
    let now = anthracite_testkit::unix_now();
    let mut out = Vec::new();
    for i in indices {
        for p in 0..partitions {
            out.push((p, format!("{} {i} {now}\n", name(tag, p, i)).into_bytes()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_while_fetching_is_paused_follows_the_end_offsets() {
    let _turn = exclusive().await;
    let broker = Broker::shared();
    let (topic, group) = ("lag-paused", "lag-paused");
    broker.create_topic(topic, 2).await;
    let producer = client::producer(&broker.bootstrap);
    // 60 datapoints: over the high-water mark of the queue (50), short of its size (100), so
    // the flush that finds it over never waits for room.
    client::send_many(&producer, topic, &one_message_each("lag", 2, 0..30)).await;
    // The only destination is down: what was read stays in its memory tier, over the
    // high-water mark, and the consumer pauses fetching.
    let down = Sink::start("down", SinkProtocol::Pickle);
    down.go_down().expect("the sink goes down");
    let admin = free_ports(1)[0];
    let admin_addr = SocketAddr::from(([127, 0, 0, 1], admin));
    let toml = format!(
        "[destinations]\nservers = [\"{}:a\"]\nbackoff_min_ms = 20\nbackoff_max_ms = 200\n\
         [destinations.queue]\nmax_datapoints = 100\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 1\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n\
         [[kafka]]\nbrokers = [\"{}\"]\ntopics = [\"{topic}\"]\ngroup_id = \"{group}\"\n\
         commit_interval_ms = 200\nqueue_high_water = 0.5\n\
         properties = {{ \"statistics.interval.ms\" = \"1000\" }}\n",
        down.addr(),
        broker.bootstrap
    );
    let relay = TestRelay::start_with(
        &toml,
        &anthracite::extension::Extensions::new().with(anthracite_kafka::Kafka),
    );
    wait_for(
        "the first messages read, then fetching paused",
        LONG,
        || async {
            metric(
                admin_addr,
                "anthracite_kafka_messages_total",
                &[("group", group)],
            ) > 0.0
                && metric(admin_addr, "anthracite_queue_datapoints", &[]) >= 50.0
        },
    )
    .await;
    // Written while the consumer does not fetch: only the watermarks show them.
    client::send_many(&producer, topic, &one_message_each("lag", 2, 100..400)).await;
    let bootstrap = broker.bootstrap.clone();
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let (b, g) = (bootstrap.clone(), group.to_string());
        let (end, committed) = tokio::task::spawn_blocking(move || {
            (
                client::end_offsets(&b, "lag-paused", 2),
                client::committed(&b, &g, "lag-paused", 2),
            )
        })
        .await
        .expect("offsets");
        let reported = lags(admin_addr, group);
        let expected: BTreeMap<i32, f64> = end
            .iter()
            .map(|(p, e)| (*p, (e - committed.get(p).copied().unwrap_or(0)) as f64))
            .collect();
        if reported == expected && expected.values().all(|&l| l >= 300.0) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lag reported while fetching is paused {reported:?} never followed the end offsets (expected {expected:?}, committed {committed:?})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    drop(relay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_group_protocol_reads_and_commits_like_the_classic_one() {
    let _turn = exclusive().await;
    let broker = Broker::shared();
    let (topic, group) = ("kip848", "kip848");
    broker.create_topic(topic, 3).await;
    let producer = client::producer(&broker.bootstrap);
    client::send_many(&producer, topic, &one_message_each("kip", 3, 0..50)).await;
    let received = Sink::start("received", SinkProtocol::Pickle);
    let admin = free_ports(1)[0];
    let admin_addr = SocketAddr::from(([127, 0, 0, 1], admin));
    let toml = format!(
        "[destinations]\nservers = [\"{}:a\"]\nbackoff_min_ms = 20\nbackoff_max_ms = 200\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 10\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n\
         [[kafka]]\nbrokers = [\"{}\"]\ntopics = [\"{topic}\"]\ngroup_id = \"{group}\"\n\
         group_protocol = \"consumer\"\ncommit_interval_ms = 200\n",
        received.addr(),
        broker.bootstrap
    );
    let relay = TestRelay::start_with(
        &toml,
        &anthracite::extension::Extensions::new().with(anthracite_kafka::Kafka),
    );
    wait_delivered(
        &received,
        "kip",
        150,
        "every message, through a KIP-848 group",
    )
    .await;
    assert_eq!(
        metric(
            admin_addr,
            "anthracite_kafka_assigned_partitions",
            &[("group", group)]
        ),
        3.0
    );
    wait_for("every offset committed", LONG, || async {
        let b = broker.bootstrap.clone();
        tokio::task::spawn_blocking(move || client::committed(&b, "kip848", "kip848", 3))
            .await
            .expect("committed")
            .values()
            .all(|&o| o == 50)
    })
    .await;
    let stats = relay.stop();
    assert_eq!(received.count(), 150, "each message once");
    drop(stats);
}
