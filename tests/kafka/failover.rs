//! A consumer group of three `anthracite` processes with the relay's default session (10 s,
//! heartbeats at a third): a SIGKILLed member's partitions move within the session and one
//! heartbeat, and a member stopped (SIGSTOP) past its session delivers, once resumed, nothing
//! of the partitions it lost.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anthracite_kafka::config::DEFAULT_SESSION_TIMEOUT_MS;
use anthracite_sink::{Sink, SinkProtocol};
use anthracite_testkit::RelayProcess;
use anthracite_testkit::free_ports;
use anthracite_testkit::kafka::broker::{Broker, shared};
use anthracite_testkit::kafka::client;
use anthracite_testkit::kafka::traffic::{LONG, counts, line_messages, metric};
use anthracite_testkit::wait_for;

const PARTITIONS: i32 = 6;
const ASSIGNED: &str = "anthracite_kafka_assigned_partitions";

/// A relay of `group` with the defaults of a relay (no session or heartbeat properties),
/// delivering to its own `sink`.
fn default_toml(bootstrap: &str, topic: &str, group: &str, sink: SocketAddr, admin: u16) -> String {
    format!(
        "[listen]\nline_tcp = \"\"\npickle_tcp = \"\"\n\
         [destinations]\nservers = [\"{sink}:a\"]\nbackoff_min_ms = 20\nbackoff_max_ms = 200\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 10\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n\
         [[kafka]]\nbrokers = [\"{bootstrap}\"]\ntopics = [\"{topic}\"]\ngroup_id = \"{group}\"\n\
         commit_interval_ms = 200\n"
    )
}

/// Three relays of `group` on a fresh 6-partition `topic`, each with its own sink, holding two
/// partitions each.
async fn three(
    broker: &Broker,
    topic: &str,
    group: &str,
) -> (Vec<RelayProcess>, Vec<SocketAddr>, Vec<Sink>) {
    broker.create_topic(topic, PARTITIONS).await;
    let dir = anthracite_testkit::scratch("kafka-tests", topic);
    let ports = free_ports(3);
    let sinks: Vec<Sink> = (0..3)
        .map(|i| Sink::start(&format!("{topic}{i}"), SinkProtocol::Pickle))
        .collect();
    let admins: Vec<SocketAddr> = ports
        .iter()
        .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
        .collect();
    let relays = ports
        .iter()
        .zip(&sinks)
        .enumerate()
        .map(|(i, (port, sink))| {
            crate::anthracite(&format!("{topic}{i}"))
                .toml(
                    &dir,
                    &default_toml(&broker.bootstrap, topic, group, sink.addr(), *port),
                )
                .start()
        })
        .collect();
    wait_for("two partitions per relay", LONG, || async {
        assignment(&admins, group) == [2, 2, 2]
    })
    .await;
    (relays, admins, sinks)
}

fn assignment(admins: &[SocketAddr], group: &str) -> Vec<u64> {
    admins
        .iter()
        .map(|a| metric(*a, ASSIGNED, &[("group", group)]) as u64)
        .collect()
}

/// The session and one heartbeat, as the relay sets them by default.
fn failover_bound() -> Duration {
    let session = Duration::from_millis(DEFAULT_SESSION_TIMEOUT_MS);
    session + session / 3
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_defaults_a_killed_members_partitions_move_within_the_session_and_a_heartbeat() {
    let _turn = shared().await;
    let broker = Broker::shared();
    let (topic, group) = ("failover", "failover");
    let (relays, admins, _sinks) = three(broker, topic, group).await;
    relays[0].signal("KILL");
    let killed = Instant::now();
    wait_for("the killed relay's partitions moved", LONG, || async {
        assignment(&admins[1..], group) == [3, 3]
    })
    .await;
    let moved = killed.elapsed();
    eprintln!("SIGKILL of one of three: partitions reassigned after {moved:?}");
    // The bound the issue sets: the session expires at most one session after the last
    // heartbeat, and the others learn it at their next heartbeat; a second covers the
    // rebalance itself and this test's polling of /metrics.
    let bound = failover_bound() + Duration::from_secs(1);
    assert!(
        moved <= bound,
        "the partitions of a killed member moved after {moved:?}, past {bound:?} (session {} ms and a heartbeat)",
        DEFAULT_SESSION_TIMEOUT_MS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_stopped_past_its_session_delivers_nothing_it_lost_when_it_resumes() {
    let _turn = shared().await;
    let broker = Broker::shared();
    let (topic, group) = ("paused", "paused");
    let (relays, admins, sinks) = three(broker, topic, group).await;
    let producer = client::producer(&broker.bootstrap);
    let mut next = 0i64;
    // Per round, the indices produced from the stop to the end of the round: a record of
    // these that the paused relay delivered, and another relay too, was read by the paused
    // relay from a partition it no longer owned. (Records before the stop may arrive twice:
    // its successor starts at its last commit.)
    let mut windows: Vec<(i64, i64)> = Vec::new();
    for round in 0..2 {
        // Records flow across the stop and the resume, in slices.
        let deadline = tokio::time::Instant::now() + LONG;
        let mut stopped_at = None;
        let mut resumed = false;
        let mut slice = 0;
        while !resumed || slice < 20 {
            let messages = line_messages("pause", PARTITIONS, next..next + 20);
            client::send_many(&producer, topic, &messages).await;
            next += 20;
            slice += 1;
            if slice == 4 && stopped_at.is_none() {
                relays[0].signal("STOP");
                stopped_at = Some(next);
            }
            if stopped_at.is_some() && !resumed && assignment(&admins[1..], group) == [3, 3] {
                // Its session expired and the others own its partitions: resume it.
                relays[0].signal("CONT");
                resumed = true;
                slice = 0;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: the stopped relay's partitions never moved"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        windows.push((stopped_at.unwrap_or(next), next));
        // It rejoins: the partitions spread again before the next round.
        wait_for("two partitions per relay again", LONG, || async {
            assignment(&admins, group) == [2, 2, 2]
        })
        .await;
        eprintln!("round {round}: stopped past the session, resumed, rejoined");
    }
    // Nothing lost: every record arrived somewhere.
    let total = (next as usize) * PARTITIONS as usize;
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let mut seen = std::collections::BTreeSet::new();
        for s in &sinks {
            seen.extend(counts(s, "pause").into_keys());
        }
        if seen.len() >= total {
            break;
        }
        let missing: Vec<(i32, i64)> = (0..PARTITIONS)
            .flat_map(|p| (0..next).map(move |i| (p, i)))
            .filter(|k| !seen.contains(k))
            .collect();
        if tokio::time::Instant::now() >= deadline {
            let metrics: Vec<String> = admins
                .iter()
                .map(|a| match anthracite_testkit::http::get(*a, "/metrics") {
                    Ok((_, body)) => body
                        .lines()
                        .filter(|l| {
                            !l.starts_with('#')
                                && (l.contains("kafka_consumer_lag")
                                    || l.contains("kafka_messages_total")
                                    || l.contains("assigned_partitions")
                                    || l.contains("queue_datapoints"))
                        })
                        .collect::<Vec<_>>()
                        .join("\n"),
                    Err(e) => e.to_string(),
                })
                .collect();
            panic!(
                "{} of {total} records never delivered (rounds {windows:?}), e.g. {:?}\n{}",
                missing.len(),
                missing.iter().take(10).collect::<Vec<_>>(),
                metrics.join("\n--\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let per_sink: Vec<BTreeMap<(i32, i64), usize>> =
        sinks.iter().map(|s| counts(s, "pause")).collect();
    let stale: Vec<(i32, i64)> = per_sink[0]
        .keys()
        .filter(|(p, i)| {
            windows.iter().any(|(from, to)| (*from..*to).contains(i))
                && (per_sink[1].contains_key(&(*p, *i)) || per_sink[2].contains_key(&(*p, *i)))
        })
        .copied()
        .collect();
    assert!(
        stale.is_empty(),
        "the resumed relay delivered {} records produced after its stop that their owner delivered too, e.g. {:?}",
        stale.len(),
        stale.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        !per_sink[0].is_empty() && !per_sink[1].is_empty() && !per_sink[2].is_empty(),
        "every relay delivered"
    );
}
