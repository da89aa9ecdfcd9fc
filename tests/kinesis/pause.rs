//! A relay of a fleet stopped (SIGSTOP) past its lease while records flow, round after round:
//! its peers take its shards, and once it resumes it neither delivers a record written while
//! it was stopped nor writes the lease rows of the shards it lost. The records flow across
//! the stop, so a GetRecords call of the stopped relay is in flight, or a batch in its hands,
//! when it stops; the race between that batch and the lease check is what each round tries.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::LONG;
use crate::leases::{
    Puts, World, assert_checkpoints_monotonic, balanced, delivered_all, number, parse_update,
    put_one, wait_delivered,
};
use anthracite_kinesis::SequenceNumber;
use anthracite_sink::{Sink, SinkProtocol};
use anthracite_testkit::{proxy, wait_for};

/// Stop, take-over, resume and rebalance, this many times (each round about 30 s; two, as
/// in the Kafka pause test, keep the suite within CI's time).
const ROUNDS: usize = 2;
/// Keys the records spread over (the six shards all get some).
const KEYS: u32 = 24;

/// Writes one record at a time in the background (`lease.k<i % KEYS> <i> 1700000000`, `i`
/// counting up), except while held. What it wrote, and the next value, can be read at any
/// time: a value at or above [`Producer::next`] read at some instant is written after it.
struct Producer {
    next: Arc<AtomicU32>,
    hold: Arc<AtomicBool>,
    writing: Arc<AtomicBool>,
    puts: Arc<Mutex<Puts>>,
    task: tokio::task::JoinHandle<()>,
}

impl Producer {
    fn start(w: &World) -> Producer {
        let (next, hold, writing) = (
            Arc::new(AtomicU32::new(0)),
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let puts: Arc<Mutex<Puts>> = Arc::default();
        let (client, stream) = (w.k.client(), w.stream.clone());
        let task = tokio::spawn({
            let (next, hold, writing, puts) =
                (next.clone(), hold.clone(), writing.clone(), puts.clone());
            async move {
                loop {
                    if hold.load(SeqCst) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    writing.store(true, SeqCst);
                    let i = next.fetch_add(1, SeqCst);
                    let put = put_one(&client, &stream, i, KEYS).await;
                    puts.lock().expect("puts").insert(i, put);
                    writing.store(false, SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        });
        Producer {
            next,
            hold,
            writing,
            puts,
            task,
        }
    }

    /// Values from here on are written after this call.
    fn next(&self) -> u32 {
        self.next.load(SeqCst)
    }

    /// Stops writing; returns once every value below the one returned is written.
    async fn hold(&self) -> u32 {
        self.hold.store(true, SeqCst);
        wait_for("the producer's last write", LONG, || {
            let idle = !self.writing.load(SeqCst);
            async move { idle }
        })
        .await;
        self.next()
    }

    fn resume(&self) {
        self.hold.store(false, SeqCst);
    }

    fn puts(&self) -> Puts {
        self.puts.lock().expect("puts").clone()
    }
}

/// Waits until the kernel shows process `pid` stopped (state `T`).
async fn wait_stopped(pid: u32) {
    wait_for("the relay stopped", LONG, || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or_default()
            .to_string();
        async move { state == "T" }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_past_the_lease_while_records_flow_the_resumed_relay_delivers_nothing_written_during_its_pause_nor_writes_over_the_new_owner()
 {
    let w = World::new("sigstop", 6).await;
    // The paused relay talks to the table through a recording proxy: its writes after each
    // resume are checked one by one.
    let (endpoint, recording) = proxy::start_recording(&w.ddb.endpoint).await;
    let sinks: Vec<Sink> = ["recv_p", "recv_0", "recv_1"]
        .iter()
        .map(|name| Sink::start(name, SinkProtocol::Pickle))
        .collect();
    let mut paused = crate::fleet::start(&w.dir, &w.spec("rp", sinks[0].addr(), &endpoint));
    let mut peers = [
        w.relay("r0", sinks[1].addr()),
        w.relay("r1", sinks[2].addr()),
    ];
    let sampler = w.sampler();
    let settled = || {
        balanced(&sampler.last(), &[("rp", 2), ("r0", 2), ("r1", 2)])
            && sampler.unchanged_for(crate::fleet::SETTLED_SAMPLES)
    };
    sampler
        .wait_settled(
            "two leases each, settled",
            &[("rp", 2), ("r0", 2), ("r1", 2)],
            crate::fleet::SETTLED_SAMPLES,
        )
        .await;
    let producer = Producer::start(&w);
    let all: Vec<&Sink> = sinks.iter().collect();
    // Per round, the values written while the relay was stopped.
    let mut windows = Vec::new();
    for round in 0..ROUNDS {
        // Records flow, and the relay to be stopped delivers its share of them.
        let from = producer.next();
        wait_for(
            "records of this round delivered by every relay",
            LONG,
            || {
                let done = sinks.iter().all(|s| {
                    s.received()
                        .iter()
                        .filter(|r| r.value as u32 >= from)
                        .count()
                        >= 3
                });
                async move { done }
            },
        )
        .await;
        let mine: Vec<String> = sampler
            .last()
            .expect("a sample")
            .rows
            .iter()
            .filter(|r| r.owner.as_deref() == Some("rp"))
            .map(|r| r.key.clone())
            .collect();
        assert_eq!(mine.len(), 2, "round {round}: rp holds {mine:?}");
        paused.signal("STOP");
        wait_stopped(paused.pid()).await;
        let stopped_at = producer.next();
        wait_for("the peers take the stopped relay's leases", LONG, || {
            let s = sampler.last();
            let done = mine.iter().all(|k| {
                s.as_ref()
                    .and_then(|s| s.owner(k))
                    .is_some_and(|o| o == "r0" || o == "r1")
            });
            async move { done }
        })
        .await;
        // Everything written up to here, the pause's records included, is delivered and
        // checkpointed by the peers before the relay resumes: what it delivers afterwards of
        // the pause's records can only be a read of a shard it no longer held.
        let held_at = producer.hold().await;
        let puts = producer.puts();
        let mut tip: HashMap<String, SequenceNumber> = HashMap::new();
        for (_, (shard, seq)) in puts.range(..held_at) {
            let e = tip.entry(shard.clone()).or_insert_with(|| seq.clone());
            if seq > e {
                *e = seq.clone();
            }
        }
        let written: Puts = puts
            .range(..held_at)
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        wait_for(
            "everything delivered and checkpointed by the peers",
            LONG,
            || {
                let s = sampler.last();
                let done = delivered_all(&all, &written)
                    && tip.iter().all(|(shard, seq)| {
                        s.as_ref()
                            .and_then(|s| s.row(shard))
                            .and_then(|r| number(&r.checkpoint))
                            .is_some_and(|cp| cp >= seq)
                    });
                async move { done }
            },
        )
        .await;
        let mark = recording.lock().expect("recording").len();
        paused.signal("CONT");
        producer.resume();
        // It learns it lost its leases (a write refused on each), then gets its share back
        // by handoff.
        wait_for(
            "the resumed relay's writes on its old shards refused, then balanced again",
            LONG,
            || {
                let rec = recording.lock().expect("recording")[mark..].to_vec();
                let refused = mine.iter().all(|k| {
                    rec.iter().any(|e| {
                        parse_update(e).is_some_and(|(key, _)| &key == k) && e.status == 400
                    })
                });
                let done = refused && settled();
                async move { done }
            },
        )
        .await;
        // Never written over the new owner: after the resume, no write of the resumed relay
        // on a shard it lost succeeded until it took that shard again.
        let rec = recording.lock().expect("recording")[mark..].to_vec();
        for shard in &mine {
            for e in &rec {
                let Some((key, take)) = parse_update(e) else {
                    continue;
                };
                if &key != shard {
                    continue;
                }
                if take && e.status == 200 {
                    break;
                }
                assert_ne!(
                    e.status, 200,
                    "round {round}: rp wrote {shard} after resuming without holding it: {}",
                    e.body
                );
                assert!(
                    e.response.contains("ConditionalCheckFailed"),
                    "round {round}, {shard}: {}",
                    e.response
                );
            }
        }
        eprintln!(
            "round {round}: stopped holding {mine:?}; values {stopped_at}..{held_at} written while stopped"
        );
        windows.push(stopped_at..held_at);
        paused.assert_running("the end of a round");
    }
    let end = producer.hold().await;
    producer.task.abort();
    let puts = producer.puts();
    let written: Puts = puts.range(..end).map(|(k, v)| (*k, v.clone())).collect();
    wait_delivered("every record", &all, &written).await;
    for r in &mut peers {
        r.assert_running("the end of the test");
    }
    let samples = sampler.stop().await;
    // The resumed relay never delivered a record written while it was stopped.
    let from_paused: BTreeSet<u32> = sinks[0].received().iter().map(|r| r.value as u32).collect();
    for (round, window) in windows.iter().enumerate() {
        let leaked: Vec<u32> = window.clone().filter(|v| from_paused.contains(v)).collect();
        assert!(
            leaked.is_empty(),
            "round {round}: the resumed relay delivered {} records written while it was stopped (a second reader of a shard it had lost): {leaked:?}",
            leaked.len()
        );
    }
    let log = paused.log();
    assert!(
        log.contains("shard lease lost"),
        "the resumed relay did not log its lost leases:\n{}",
        paused.log_tail(40)
    );
    assert_checkpoints_monotonic(&samples);
}
