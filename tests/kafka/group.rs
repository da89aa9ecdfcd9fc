//! Three `anthracite` processes in one consumer group on a 6-partition topic: the group
//! balances, a SIGKILLed member's partitions move with duplicates only after its last
//! commit, a SIGTERMed member hands over with none.

use std::net::SocketAddr;
use std::time::Duration;

use anthracite_sink::{Sink, SinkProtocol};
use anthracite_testkit::RelayProcess;
use anthracite_testkit::free_ports;
use anthracite_testkit::kafka::broker::{Broker, shared};
use anthracite_testkit::kafka::client;
use anthracite_testkit::kafka::traffic::{
    LONG, consumer_toml, counts, line_messages, metric, wait_delivered,
};
use anthracite_testkit::wait_for;

const TOPIC: &str = "group-six";
const GROUP: &str = "relays";
const PARTITIONS: i32 = 6;
const ASSIGNED: &str = "anthracite_kafka_assigned_partitions";

/// Partitions each relay holds now (by admin address).
fn assignment(admins: &[SocketAddr]) -> Vec<u64> {
    admins
        .iter()
        .map(|a| metric(*a, ASSIGNED, &[("group", GROUP)]) as u64)
        .collect()
}

async fn wait_assignment(admins: &[SocketAddr], want: &[u64], what: &str) {
    wait_for(what, LONG, || async { assignment(admins) == want }).await;
}

/// Produces `messages` in slices over a few seconds, so that a signal sent meanwhile finds
/// the relays mid-stream.
fn produce_slowly(bootstrap: String, messages: Vec<(i32, Vec<u8>)>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let producer = client::producer(&bootstrap);
        for slice in messages.chunks(300) {
            client::send_many(&producer, TOPIC, slice).await;
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_of_three_balances_and_hands_over_on_sigkill_and_sigterm() {
    let _turn = shared().await;
    let broker = Broker::shared();
    broker.create_topic(TOPIC, PARTITIONS).await;
    let received = Sink::start("received", SinkProtocol::Pickle);

    let sink = received.addr();
    let dir = anthracite_testkit::scratch("kafka-tests", "group");
    let ports = free_ports(3);
    let admins: Vec<SocketAddr> = ports
        .iter()
        .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
        .collect();
    let sinks = [format!("{sink}:a")];
    let mut relays: Vec<RelayProcess> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let toml = consumer_toml(&broker.bootstrap, TOPIC, GROUP, &sinks, *port, "");
            crate::anthracite(&format!("relay{i}"))
                .toml(&dir, &toml)
                .start()
        })
        .collect();

    // Phase 1: every line delivered, the partitions spread two per relay.
    let producer = client::producer(&broker.bootstrap);
    client::send_many(&producer, TOPIC, &line_messages("one", PARTITIONS, 0..100)).await;
    wait_delivered(&received, "one", 600, "phase 1 (three relays)").await;
    wait_assignment(&admins, &[2, 2, 2], "two partitions per relay").await;

    // Phase 2: SIGKILL relay 0 mid-stream. Its partitions move to the others, which start at
    // its last commit: whatever arrives twice is after that commit.
    let writer = produce_slowly(
        broker.bootstrap.clone(),
        line_messages("two", PARTITIONS, 0..600),
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    relays[0].signal("KILL");
    let _ = relays[0].exit_status(LONG).await;
    let last_commit = client::committed(&broker.bootstrap, GROUP, TOPIC, PARTITIONS);
    // What existed when it died: it cannot have read further.
    let end_at_kill = client::end_offsets(&broker.bootstrap, TOPIC, PARTITIONS);
    writer.await.expect("producer task");
    wait_delivered(&received, "two", 3600, "phase 2 (after SIGKILL)").await;
    wait_assignment(&admins[1..], &[3, 3], "the killed relay's partitions moved").await;
    // Phase 1 wrote offsets 0..100 of each partition, phase 2 100..700.
    let two = counts(&received, "two");
    let mut duplicates = 0;
    let mut bound = 0;
    for p in 0..PARTITIONS {
        let committed = last_commit.get(&p).copied().unwrap_or(0);
        let end = end_at_kill.get(&p).copied().unwrap_or(700);
        bound += (end - committed.clamp(100, 700)).max(0);
        for ((_, i), n) in two.range((p, 0)..=(p, i64::MAX)) {
            if *n > 1 {
                assert!(
                    100 + *i >= committed,
                    "partition {p}: message {i} delivered {n} times, but it was committed (at {committed}) before the kill"
                );
                duplicates += n - 1;
            }
        }
    }
    assert!(
        duplicates as i64 <= bound,
        "{duplicates} duplicates, more than the {bound} messages between the last commits and the end of the partitions at the kill"
    );
    eprintln!(
        "SIGKILL: {duplicates} duplicate datapoints (bound {bound}: messages between its last commits and the partitions' ends at the kill)"
    );

    // Phase 3: SIGTERM relay 1 mid-stream: it commits what it delivered before releasing
    // its partitions, so nothing arrives twice.
    let writer = produce_slowly(
        broker.bootstrap.clone(),
        line_messages("three", PARTITIONS, 0..600),
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    relays[1].signal("TERM");
    let status = relays[1].exit_status(LONG).await;
    assert!(
        status.success(),
        "relay 1 exited with {status} after SIGTERM:\n{}",
        relays[1].log_tail(20)
    );
    writer.await.expect("producer task");
    wait_delivered(&received, "three", 3600, "phase 3 (after SIGTERM)").await;
    wait_assignment(&admins[2..], &[6], "relay 2 holds every partition").await;
    let three = counts(&received, "three");
    let twice: Vec<_> = three.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "SIGTERM handoff duplicated {} datapoints, e.g. {:?}",
        twice.len(),
        twice.iter().take(5).collect::<Vec<_>>()
    );
    relays[2].assert_running("the end of the test");
    let log = relays[1].log();
    assert!(
        log.contains("delivered offsets committed; leaving the group"),
        "relay 1 did not log its final commit:\n{}",
        relays[1].log_tail(30)
    );
}
