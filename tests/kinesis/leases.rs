//! Many relays, one stream: real `anthracite` processes sharing a kinesalite stream through a
//! lease table in DynamoDB Local, with SIGKILL, SIGTERM, SIGSTOP, resharding and migration
//! from a checkpoint file. Timings are never asserted: failover is measured in the lease
//! table's own state transitions and renewal counts.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::fleet::{self, RelayProcess, RelaySpec, Sample, Sampler};
use crate::harness::{LONG, lines};
use anthracite_kinesis::unstable::leases::{
    Checkpoint, Fence, Lease, LeaseTable, MemTable, Outcome, Update,
};
use anthracite_kinesis::{FileStore, SequenceNumber};
use anthracite_sink::{Received, Sink, SinkProtocol};
use anthracite_testkit::dynamodb::DynamoDbLocal;
use anthracite_testkit::kinesalite::Kinesalite;
use anthracite_testkit::{proxy, wait_for};

/// One test's world: a stream on its own kinesalite, a table on the shared DynamoDB Local.
pub(crate) struct World {
    pub(crate) k: Kinesalite,
    pub(crate) ddb: &'static DynamoDbLocal,
    pub(crate) dir: PathBuf,
    pub(crate) stream: String,
    pub(crate) table: String,
    /// The relays' lease duration.
    pub(crate) lease_secs: f64,
}

impl World {
    pub(crate) async fn new(test: &str, shards: i32) -> World {
        let ddb = tokio::task::spawn_blocking(DynamoDbLocal::shared)
            .await
            .expect("DynamoDB Local");
        let k = Kinesalite::start().await;
        let stream = format!("{test}-stream");
        k.create_stream(&stream, shards).await;
        World {
            k,
            ddb,
            dir: fleet::scratch(test),
            stream,
            table: format!("{test}-leases"),
            lease_secs: fleet::LEASE_SECS,
        }
    }

    pub(crate) fn spec<'a>(
        &'a self,
        worker: &'a str,
        sink: SocketAddr,
        dynamodb: &'a str,
    ) -> RelaySpec<'a> {
        RelaySpec {
            worker,
            stream: &self.stream,
            sink: sink.to_string(),
            kinesis: &self.k.endpoint,
            dynamodb,
            table: &self.table,
            checkpoint_dir: None,
            lease_secs: self.lease_secs,
        }
    }

    pub(crate) fn relay(&self, worker: &str, sink: SocketAddr) -> RelayProcess {
        fleet::start(&self.dir, &self.spec(worker, sink, &self.ddb.endpoint))
    }

    /// Relays r0, r1, r2 delivering to one sink, and a sampler of the table.
    async fn trio_on_one_sink(&self) -> (Sink, Sampler, Vec<RelayProcess>) {
        let received = Sink::start("received", SinkProtocol::Pickle);

        let sink = received.addr();
        let sampler = self.sampler();
        let relays = ["r0", "r1", "r2"]
            .iter()
            .map(|id| self.relay(id, sink))
            .collect();
        (received, sampler, relays)
    }

    pub(crate) fn sampler(&self) -> Sampler {
        Sampler::start(fleet::table(&self.ddb.endpoint, &self.table))
    }
}

/// Where each record went: value → (shard, sequence number).
pub(crate) type Puts = BTreeMap<u32, (String, SequenceNumber)>;

/// Puts one line per record, `lease.k<i%keys> <i> 1700000000`, pausing `pace` between records.
async fn put(
    client: aws_sdk_kinesis::Client,
    stream: String,
    range: std::ops::Range<u32>,
    keys: u32,
    pace: Duration,
) -> Puts {
    let mut out = Puts::new();
    for i in range {
        out.insert(i, put_one(&client, &stream, i, keys).await);
        tokio::time::sleep(pace).await;
    }
    out
}

/// Puts record `i`, `lease.k<i%keys> <i> 1700000000`: the shard and sequence number it got.
pub(crate) async fn put_one(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    i: u32,
    keys: u32,
) -> (String, SequenceNumber) {
    let key = format!("k{}", i % keys);
    let r = client
        .put_record()
        .stream_name(stream)
        .partition_key(&key)
        .data(aws_sdk_kinesis::primitives::Blob::new(lines(
            &format!("lease.{key}"),
            i,
            1,
        )))
        .send()
        .await
        .expect("PutRecord");
    let seq = SequenceNumber::new(r.sequence_number()).expect("sequence number");
    (r.shard_id().to_string(), seq)
}

/// How often each value arrived, over all sinks.
pub(crate) fn counts(sinks: &[&Sink]) -> HashMap<u32, usize> {
    let mut m = HashMap::new();
    for s in sinks {
        for Received { value: v, .. } in s.received() {
            *m.entry(v as u32).or_insert(0) += 1;
        }
    }
    m
}

pub(crate) fn delivered_all(sinks: &[&Sink], puts: &Puts) -> bool {
    let c = counts(sinks);
    puts.keys().all(|v| c.contains_key(v))
}

pub(crate) async fn wait_delivered(what: &str, sinks: &[&Sink], puts: &Puts) {
    wait_for(what, LONG, || {
        let done = delivered_all(sinks, puts);
        async move { done }
    })
    .await;
}

pub(crate) fn balanced(sample: &Option<Sample>, want: &[(&str, usize)]) -> bool {
    let want: BTreeMap<String, usize> = want.iter().map(|(w, n)| (w.to_string(), *n)).collect();
    sample.as_ref().is_some_and(|s| s.counts() == want)
}

pub(crate) fn number(cp: &Checkpoint) -> Option<&SequenceNumber> {
    cp.position().map(|p| &p.sequence)
}

/// Per shard, the checkpoint never moves backwards across samples.
pub(crate) fn assert_checkpoints_monotonic(samples: &[Sample]) {
    let mut high: HashMap<String, (usize, Checkpoint)> = HashMap::new();
    for s in samples {
        for r in &s.rows {
            if let Some((i, h)) = high.get(&r.key) {
                let back = match (&r.checkpoint, h) {
                    (Checkpoint::At(a), Checkpoint::At(b)) => a < b,
                    (Checkpoint::ShardEnd, _) => false,
                    (_, Checkpoint::ShardEnd) => true,
                    (Checkpoint::At(_), _) => false,
                    (_, Checkpoint::At(_)) => true,
                    _ => false,
                };
                assert!(
                    !back,
                    "{}: checkpoint went back from {h} (sample {i}) to {} (sample {})",
                    r.key, r.checkpoint, s.index
                );
            }
            high.insert(r.key.clone(), (s.index, r.checkpoint.clone()));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_relays_on_six_shards_deliver_everything_each_shard_owned_once_balanced_two_each() {
    let w = World::new("three-relays", 6).await;
    let (received, sampler, mut relays) = w.trio_on_one_sink().await;
    // Records flow while the relays start and balance.
    let puts = put(
        w.k.client(),
        w.stream.clone(),
        0..120,
        12,
        Duration::from_millis(10),
    )
    .await;
    // Ten unchanged samples after balance, so the ownership checks below have a second of
    // settled table to read even when delivery and balance finish early.
    wait_for(
        "every record, and two leases each for ten samples",
        LONG,
        || {
            let done = delivered_all(&[&received], &puts)
                && balanced(&sampler.last(), &[("r0", 2), ("r1", 2), ("r2", 2)])
                && sampler.unchanged_for(10);
            async move { done }
        },
    )
    .await;
    for r in &mut relays {
        r.assert_running("the end of the test");
    }
    let samples = sampler.stop().await;
    let live: BTreeSet<&str> = ["r0", "r1", "r2"].into();
    let first_full = samples
        .iter()
        .position(|s| s.rows.len() == 6 && s.rows.iter().all(|r| r.owner.is_some()))
        .expect("a sample with every shard owned");
    assert!(
        samples.len() - first_full >= 10,
        "too few samples after ownership settled: {}",
        samples.len() - first_full
    );
    for s in &samples[first_full..] {
        assert_eq!(s.rows.len(), 6, "sample {}", s.index);
        for r in &s.rows {
            let owner = r.owner.as_deref().unwrap_or("nobody");
            assert!(
                live.contains(owner),
                "sample {}: {} owned by {owner}, not exactly one live worker",
                s.index,
                r.key
            );
        }
    }
    let c = counts(&[&received]);
    for v in puts.keys() {
        assert!(c.get(v).is_some_and(|n| *n >= 1), "record {v} lost");
    }
}

/// Starts three relays (each with its own sink) and waits until they hold two leases each
/// and have settled, before any record is written.
async fn balanced_trio(w: &World) -> (Vec<RelayProcess>, Vec<Sink>, Sampler) {
    let mut sinks = Vec::new();
    let mut relays = Vec::new();
    for id in ["r0", "r1", "r2"] {
        let received = Sink::start("received", SinkProtocol::Pickle);

        let addr = received.addr();
        relays.push(w.relay(id, addr));
        sinks.push(received);
    }
    let sampler = w.sampler();
    // Balanced, and no steal still waiting for its victim's lease to lapse: from here on,
    // no lease moves unless the test moves it.
    sampler
        .wait_settled(
            "two leases each, settled",
            &[("r0", 2), ("r1", 2), ("r2", 2)],
            fleet::SETTLED_SAMPLES,
        )
        .await;
    (relays, sinks, sampler)
}

/// Writes 240 records over a few seconds in the background and returns once a third have
/// arrived: the producer, and the shards r2 holds at that moment.
async fn mid_stream(
    w: &World,
    sinks: &[Sink],
    sampler: &Sampler,
) -> (tokio::task::JoinHandle<Puts>, Vec<String>) {
    let producer = tokio::spawn(put(
        w.k.client(),
        w.stream.clone(),
        0..240,
        24,
        Duration::from_millis(15),
    ));
    wait_for("a third of the records", LONG, || {
        let n: usize = sinks.iter().map(|s| s.count()).sum();
        async move { n >= 80 }
    })
    .await;
    let before = sampler.last().expect("a sample");
    let r2: Vec<String> = before
        .rows
        .iter()
        .filter(|r| r.owner.as_deref() == Some("r2"))
        .map(|r| r.key.clone())
        .collect();
    assert_eq!(r2.len(), 2, "{:?}", before.counts());
    (producer, r2)
}

/// Waits until every record arrived and r0 and r1 hold three leases each.
async fn survivors_take_over(sampler: &Sampler, sinks: &[&Sink], puts: &Puts) {
    wait_for(
        "every record, and three leases each for the survivors",
        LONG,
        || {
            let done =
                delivered_all(sinks, puts) && balanced(&sampler.last(), &[("r0", 3), ("r1", 3)]);
            async move { done }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_one_of_three_its_shards_taken_within_a_lease_duration_duplicates_only_after_its_last_checkpoint()
 {
    let w = World::new("sigkill", 6).await;
    let (mut relays, sinks, sampler) = balanced_trio(&w).await;
    let (producer, killed_shards) = mid_stream(&w, &sinks, &sampler).await;
    relays[2].signal("KILL");
    relays[2].exit_status(LONG).await;
    let dead_from = sampler.all().len();
    let puts = producer.await.expect("producer");
    let all: Vec<&Sink> = sinks.iter().collect();
    survivors_take_over(&sampler, &all, &puts).await;
    let samples = sampler.stop().await;

    for shard in &killed_shards {
        // After the kill nobody writes the row until a survivor takes it: its checkpoint there
        // is the killed relay's last.
        let dead: Vec<&Sample> = samples[dead_from..]
            .iter()
            .take_while(|s| s.owner(shard) == Some("r2"))
            .collect();
        let last_dead = dead
            .last()
            .unwrap_or_else(|| panic!("{shard}: taken before the first sample after the kill"));
        let final_row = last_dead.row(shard).expect("row");
        let taken = &samples[last_dead.index + 1];
        let survivor = taken.owner(shard).expect("an owner").to_string();
        assert!(
            survivor == "r0" || survivor == "r1",
            "{shard} went from r2 to {survivor}"
        );
        // Measured in the survivor's own renewals (one per lease_duration / 3): from the first
        // sample showing r2's last renewal to the takeover, at least a lease duration (3
        // renewals, less one for sampling) and at most a lease duration plus one taker cycle,
        // plus the survivor's first sight of that renewal and sampling on both ends (7).
        let first_seen = samples
            .iter()
            .find(|s| s.row(shard).is_some_and(|r| r.counter == final_row.counter))
            .expect("r2's last counter seen");
        let steady = samples[first_seen.index]
            .rows
            .iter()
            .find(|r| {
                r.owner.as_deref() == Some(survivor.as_str())
                    && samples[first_seen.index..=taken.index]
                        .iter()
                        .all(|s| s.owner(&r.key) == Some(survivor.as_str()))
            })
            .expect("a lease the survivor held throughout");
        let renewals = taken.row(&steady.key).expect("row").counter - steady.counter;
        assert!(
            (2..=7).contains(&renewals),
            "{shard}: taken after {renewals} renewals of {survivor}'s {}",
            steady.key
        );
        let taken_row = taken.row(shard).expect("row");
        assert!(
            taken_row.counter > final_row.counter,
            "the take moved the counter"
        );
        assert_eq!(taken_row.parents, final_row.parents);

        // Duplicates: only records r2 delivered after its last checkpoint of this shard, each
        // delivered once more by the survivor.
        let c = counts(&all);
        let last_cp = number(&final_row.checkpoint).cloned();
        let r2_values: BTreeSet<u32> = sinks[2].received().iter().map(|r| r.value as u32).collect();
        let mut duplicated = 0;
        for (v, (s, seq)) in &puts {
            let n = c.get(v).copied().unwrap_or(0);
            if s != shard || n < 2 {
                continue;
            }
            duplicated += 1;
            assert_eq!(n, 2, "record {v} delivered {n} times");
            assert!(r2_values.contains(v), "record {v} duplicated but not by r2");
            assert!(
                last_cp.as_ref().is_none_or(|cp| seq > cp),
                "record {v} ({seq}) duplicated though r2 had checkpointed {}",
                final_row.checkpoint
            );
        }
        eprintln!(
            "{shard}: r2 → {survivor} after {renewals} renewals, {duplicated} records delivered twice"
        );
    }
    let c = counts(&all);
    for (v, (s, _)) in &puts {
        let n = c.get(v).copied().unwrap_or(0);
        assert!(n >= 1, "record {v} lost");
        if !killed_shards.contains(s) {
            assert_eq!(n, 1, "record {v} of a survivor's shard delivered {n} times");
        }
    }
    assert_checkpoints_monotonic(&samples);
}

/// The lease duration of the handoff tests.
const HANDOFF_LEASE_SECS: f64 = 10.0;

/// Starts r0 and r1 (each with its own sink) and waits until they hold three leases each and
/// have settled.
async fn balanced_pair(w: &World) -> (Vec<RelayProcess>, Vec<Sink>, Sampler) {
    let mut sinks = Vec::new();
    let mut relays = Vec::new();
    for id in ["r0", "r1"] {
        let received = Sink::start("received", SinkProtocol::Pickle);

        let addr = received.addr();
        relays.push(w.relay(id, addr));
        sinks.push(received);
    }
    let sampler = w.sampler();
    // Samples 100 ms apart spanning more than a lease duration.
    let settled = (w.lease_secs * 15.0) as usize;
    sampler
        .wait_settled(
            "three leases each, settled",
            &[("r0", 3), ("r1", 3)],
            settled,
        )
        .await;
    (relays, sinks, sampler)
}

/// Writes `count` records in the background (24 keys over the shards) and returns once 60
/// have arrived.
async fn producing(w: &World, sinks: &[Sink], count: u32) -> tokio::task::JoinHandle<Puts> {
    let producer = tokio::spawn(put(
        w.k.client(),
        w.stream.clone(),
        0..count,
        24,
        Duration::from_millis(15),
    ));
    wait_for("the first records", LONG, || {
        let n: usize = sinks.iter().map(|s| s.count()).sum();
        async move { n >= 60 }
    })
    .await;
    producer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_joining_a_balanced_pair_takes_its_share_by_handoff_with_zero_duplicates() {
    // A lease long enough that renewals never lapse on a loaded machine: a lapse moves a
    // lease the old way (re-reading since the last checkpoint), which is not what this tests.
    let mut w = World::new("join-handoff", 6).await;
    w.lease_secs = HANDOFF_LEASE_SECS;
    let (mut relays, mut sinks, sampler) = balanced_pair(&w).await;
    let producer = producing(&w, &sinks, 400).await;
    let received = Sink::start("received", SinkProtocol::Pickle);

    let addr = received.addr();
    relays.push(w.relay("r2", addr));
    sinks.push(received);
    let puts = producer.await.expect("producer");
    let all: Vec<&Sink> = sinks.iter().collect();
    wait_for("every record, and two leases each", LONG, || {
        let done = delivered_all(&all, &puts)
            && balanced(&sampler.last(), &[("r0", 2), ("r1", 2), ("r2", 2)]);
        async move { done }
    })
    .await;
    for r in &mut relays {
        r.assert_running("the end of the test");
    }
    let samples = sampler.stop().await;
    let marks: BTreeSet<&str> = samples
        .iter()
        .flat_map(|s| &s.rows)
        .filter(|r| r.handoff.as_deref() == Some("r2"))
        .map(|r| r.key.as_str())
        .collect();
    assert!(!marks.is_empty(), "r2 never asked for a lease");
    let log = std::fs::read_to_string(relays[2].log_path()).expect("r2's log");
    assert!(
        !log.contains("steal=true"),
        "r2 fell back to stealing:\n{}",
        relays[2].log_tail(40)
    );
    let c = counts(&all);
    let twice: Vec<u32> = puts
        .keys()
        .filter(|v| c.get(v).copied().unwrap_or(0) > 1)
        .copied()
        .collect();
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    assert_eq!(c.len(), puts.len(), "every record exactly once");
    // r2 took its share while records flowed, from where the old owners stopped.
    assert!(sinks[2].count() > 0, "r2 delivered nothing");
    eprintln!(
        "r2 asked for {marks:?}; delivered r0 {}, r1 {}, r2 {}",
        sinks[0].count(),
        sinks[1].count(),
        sinks[2].count()
    );
    assert_checkpoints_monotonic(&samples);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_during_a_handoff_loses_nothing() {
    // A lease long enough that renewals never lapse on a loaded machine: a lapse moves a
    // lease the old way (re-reading since the last checkpoint), which is not what this tests.
    let mut w = World::new("handoff-kill", 6).await;
    w.lease_secs = HANDOFF_LEASE_SECS;
    let (mut relays, mut sinks, sampler) = balanced_pair(&w).await;
    let producer = producing(&w, &sinks, 400).await;
    let received = Sink::start("received", SinkProtocol::Pickle);

    let addr = received.addr();
    relays.push(w.relay("r2", addr));
    sinks.push(received);
    // The moment a lease of r0 or r1 is marked for r2, its owner dies (before or while it
    // hands the lease over).
    let mut victim = None;
    wait_for("r2 asking for a lease", LONG, || {
        victim = sampler.last().and_then(|s| {
            s.rows
                .iter()
                .find(|r| r.handoff.as_deref() == Some("r2") && r.owner.as_deref() != Some("r2"))
                .and_then(|r| r.owner.clone())
        });
        let done = victim.is_some();
        async move { done }
    })
    .await;
    let victim = victim.expect("an owner");
    let (dead, survivor) = if victim == "r0" { (0, 1) } else { (1, 0) };
    relays[dead].signal("KILL");
    relays[dead].exit_status(LONG).await;
    let puts = producer.await.expect("producer");
    let all: Vec<&Sink> = sinks.iter().collect();
    let survivor_id = format!("r{survivor}");
    wait_for(
        "every record, and three leases each for the survivors",
        LONG,
        || {
            let done = delivered_all(&all, &puts)
                && balanced(&sampler.last(), &[(survivor_id.as_str(), 3), ("r2", 3)]);
            async move { done }
        },
    )
    .await;
    let samples = sampler.stop().await;
    // Nothing lost; a record is read twice only if the dead relay had delivered it (past its
    // last checkpoint).
    let c = counts(&all);
    let from_dead: BTreeSet<u32> = sinks[dead]
        .received()
        .iter()
        .map(|r| r.value as u32)
        .collect();
    let mut duplicated = 0;
    for v in puts.keys() {
        let n = c.get(v).copied().unwrap_or(0);
        assert!(n >= 1, "record {v} lost");
        assert!(n <= 2, "record {v} delivered {n} times");
        if n == 2 {
            duplicated += 1;
            assert!(
                from_dead.contains(v),
                "record {v} duplicated but not by {victim}"
            );
        }
    }
    eprintln!("{victim} killed during a handoff: {duplicated} records delivered twice");
    assert_checkpoints_monotonic(&samples);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_one_of_three_its_shards_move_with_zero_duplicates() {
    let w = World::new("sigterm", 6).await;
    let (mut relays, sinks, sampler) = balanced_trio(&w).await;
    let (producer, moved) = mid_stream(&w, &sinks, &sampler).await;
    relays[2].signal("TERM");
    let status = relays[2].exit_status(LONG).await;
    assert!(status.success(), "r2 exited with {status}");
    let puts = producer.await.expect("producer");
    let all: Vec<&Sink> = sinks.iter().collect();
    survivors_take_over(&sampler, &all, &puts).await;
    let samples = sampler.stop().await;
    let c = counts(&all);
    let twice: Vec<u32> = puts
        .keys()
        .filter(|v| c.get(v).copied().unwrap_or(0) > 1)
        .copied()
        .collect();
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    assert_eq!(c.len(), puts.len(), "every record exactly once");
    let last = samples.last().expect("samples");
    for shard in &moved {
        let owner = last.owner(shard).unwrap_or("nobody");
        assert!(owner == "r0" || owner == "r1", "{shard} owned by {owner}");
    }
    // r2 delivered its share before it left, and the survivors resumed where it stopped.
    assert!(sinks[2].count() > 0);
    assert_checkpoints_monotonic(&samples);
}

/// The lease key and whether the call was a take (sets the owner to a new value); `None` for
/// other calls and for handoff marks.
pub(crate) fn parse_update(e: &proxy::Exchange) -> Option<(String, bool)> {
    if !e.target.ends_with(".UpdateItem") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&e.body).ok()?;
    let key = v["Key"]["leaseKey"]["S"].as_str()?.to_string();
    let expr = v["UpdateExpression"].as_str().unwrap_or_default();
    // A handoff mark asks the owner for the lease; it writes neither ownership nor checkpoint.
    if expr == "SET #ho = :ho" {
        return None;
    }
    Some((key, expr.contains("#lo = :nw")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_and_merge_while_three_relays_run_parents_before_children_nothing_lost() {
    let w = World::new("reshard", 1).await;
    let (received, sampler, mut relays) = w.trio_on_one_sink().await;
    let parent = w.k.shard_ids(&w.stream).await[0].clone();
    wait_for("the shard leased", LONG, || {
        let done = sampler.last().is_some_and(|s| s.owner(&parent).is_some());
        async move { done }
    })
    .await;
    let client = w.k.client();
    let mut value = 0u32;
    let mut puts = Puts::new();
    let mut round = async |puts: &mut Puts| {
        let next = put(
            client.clone(),
            w.stream.clone(),
            value..value + 32,
            8,
            Duration::ZERO,
        )
        .await;
        value += 32;
        puts.extend(next);
    };
    round(&mut puts).await;
    wait_delivered("round 1", &[&received], &puts).await;
    w.k.client()
        .split_shard()
        .stream_name(&w.stream)
        .shard_to_split(&parent)
        .new_starting_hash_key("170141183460469231731687303715884105728")
        .send()
        .await
        .expect("SplitShard");
    w.k.wait_active(&w.stream).await;
    round(&mut puts).await;
    let children: Vec<String> =
        w.k.shard_ids(&w.stream)
            .await
            .into_iter()
            .filter(|s| *s != parent)
            .collect();
    assert_eq!(children.len(), 2);
    w.k.client()
        .merge_shards()
        .stream_name(&w.stream)
        .shard_to_merge(&children[0])
        .adjacent_shard_to_merge(&children[1])
        .send()
        .await
        .expect("MergeShards");
    w.k.wait_active(&w.stream).await;
    round(&mut puts).await;
    let merged =
        w.k.shard_ids(&w.stream)
            .await
            .into_iter()
            .find(|s| *s != parent && !children.contains(s))
            .expect("merged shard");
    wait_for("all three rounds, parents ended", LONG, || {
        let s = sampler.last();
        let ended = |k: &str| {
            s.as_ref()
                .and_then(|s| s.row(k))
                .is_some_and(|r| r.checkpoint == Checkpoint::ShardEnd)
        };
        let done = delivered_all(&[&received], &puts)
            && ended(&parent)
            && children.iter().all(|c| ended(c));
        async move { done }
    })
    .await;
    for r in &mut relays {
        r.assert_running("the end");
    }
    let samples = sampler.stop().await;
    // Per key, the first delivery of each value comes in order: the parent's records before
    // the children's, the children's before the merged shard's.
    let mut seen = BTreeSet::new();
    let mut per_key: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for Received {
        path: name,
        value: v,
        ..
    } in received.received()
    {
        if seen.insert(v as u32) {
            per_key.entry(name).or_default().push(v);
        }
    }
    assert_eq!(per_key.len(), 8);
    for (key, vals) in &per_key {
        assert_eq!(vals.len(), 12, "{key}");
        for pair in vals.windows(2) {
            assert!(pair[0] < pair[1], "{key}: {} before {}", pair[0], pair[1]);
        }
    }
    let last = fleet::table(&w.ddb.endpoint, &w.table)
        .scan()
        .await
        .expect("scan");
    let row = |k: &str| {
        last.iter()
            .find(|r| r.key == k)
            .unwrap_or_else(|| panic!("no row {k}"))
            .clone()
    };
    let mut kids = children.clone();
    kids.sort();
    assert_eq!(row(&parent).children, kids);
    for c in &children {
        assert_eq!(row(c).parents, std::slice::from_ref(&parent));
        assert_eq!(row(c).children, std::slice::from_ref(&merged));
    }
    assert_eq!(row(&merged).parents, kids);
    assert!(row(&merged).owner.is_some(), "the merged shard is leased");
    // Parents ended before any child was read: a child's row leaves TRIM_HORIZON (its first
    // checkpoint) only in samples where its parents already hold SHARD_END.
    for s in &samples {
        for r in &s.rows {
            if r.checkpoint.position().is_some() {
                for p in &r.parents {
                    if let Some(pr) = s.row(p) {
                        assert_eq!(
                            pr.checkpoint,
                            Checkpoint::ShardEnd,
                            "sample {}: {} read before its parent {p} ended",
                            s.index,
                            r.key
                        );
                    }
                }
            }
        }
    }
    assert_checkpoints_monotonic(&samples);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_with_a_checkpoint_file_migrates_its_positions_into_an_empty_lease_table() {
    let w = World::new("migrate", 2).await;
    let received = Sink::start("received", SinkProtocol::Pickle);

    let sink = received.addr();
    let cp_dir = w.dir.join("checkpoints");
    let phase1 = put(w.k.client(), w.stream.clone(), 0..20, 4, Duration::ZERO).await;
    // One relay, file checkpoints (no lease table), reads phase 1 and stops gracefully.
    let mut single = fleet::start(
        &w.dir,
        &RelaySpec {
            worker: "single",
            table: "",
            checkpoint_dir: Some(&cp_dir),
            ..w.spec("single", sink, &w.ddb.endpoint)
        },
    );
    wait_delivered("phase 1", &[&received], &phase1).await;
    single.signal("TERM");
    assert!(single.exit_status(LONG).await.success());
    let file = FileStore::new(&cp_dir, &w.stream)
        .read()
        .expect("checkpoint file");
    assert_eq!(file.shards.len(), 2, "{file:?}");
    let phase2 = put(w.k.client(), w.stream.clone(), 20..40, 4, Duration::ZERO).await;
    // The fleet's first relay: same checkpoint_dir, empty lease table.
    let sampler = w.sampler();
    let mut leased = fleet::start(
        &w.dir,
        &RelaySpec {
            checkpoint_dir: Some(&cp_dir),
            ..w.spec("fleet-0", sink, &w.ddb.endpoint)
        },
    );
    wait_delivered("phase 2", &[&received], &phase2).await;
    leased.assert_running("the end");
    // The rows exist before phase 2 can be read, but a scan of a busy DynamoDB Local may not
    // have seen them yet: wait (bounded) until one sample holds every shard's row.
    let deadline = std::time::Instant::now() + LONG;
    while !sampler
        .last()
        .is_some_and(|s| file.shards.keys().all(|k| s.row(k).is_some()))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no sample of the lease table holds every shard's row"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let samples = sampler.stop().await;
    let c = counts(&[&received]);
    for v in phase1.keys().chain(phase2.keys()) {
        assert_eq!(c.get(v), Some(&1), "record {v}: not exactly once");
    }
    // Each row started at the file's position, never at TRIM_HORIZON.
    for (shard, entry) in &file.shards {
        let at = entry
            .position
            .as_ref()
            .expect("a position")
            .sequence
            .clone();
        let first = samples
            .iter()
            .find_map(|s| s.row(shard))
            .unwrap_or_else(|| panic!("no row for {shard}"));
        let cp = number(&first.checkpoint).unwrap_or_else(|| {
            panic!(
                "{shard} started at {} instead of the file's position",
                first.checkpoint
            )
        });
        assert!(cp >= &at, "{shard}: row at {cp}, file at {at}");
    }
    let log = std::fs::read_to_string(leased.log_path()).unwrap_or_default();
    assert!(
        log.contains("migrated checkpoint file positions into the lease table"),
        "{}",
        leased.log_tail(20)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_local_agrees_with_the_in_memory_model_and_sixteen_racers_get_one_lease() {
    let ddb = tokio::task::spawn_blocking(DynamoDbLocal::shared)
        .await
        .expect("DynamoDB Local");
    let real = fleet::table(&ddb.endpoint, "model-agreement");
    real.ensure_table().await.expect("create table");
    real.ensure_table().await.expect("existing table");
    let model = MemTable::new();
    let seq = |s: &str, sub| {
        Checkpoint::At(anthracite_kinesis::Position {
            sequence: SequenceNumber::new(s).expect("seq"),
            sub_sequence: sub,
        })
    };
    let fence = |counter, owner: Option<&str>| Fence {
        counter,
        owner: owner.map(str::to_string),
    };
    let take = |w: &str| Update::Take {
        worker: w.to_string(),
    };
    let mark = |w: &str| Update::Mark {
        worker: w.to_string(),
    };
    let mut a = Lease::new("shard-a", Checkpoint::TrimHorizon);
    a.parents = vec!["p1".into(), "p2".into()];
    a.hash_range = Some(("0".into(), "42".into()));
    enum Op {
        Create(Lease),
        Update(&'static str, Fence, Update),
        AddChild(&'static str, &'static str),
        Delete(&'static str),
    }
    let script = vec![
        Op::Create(a.clone()),
        Op::Create(a.clone()),
        Op::Update("shard-a", fence(0, None), take("w1")),
        Op::Update("shard-a", fence(0, None), take("w2")),
        Op::Update("shard-a", fence(1, Some("w1")), Update::Renew),
        Op::Update("shard-a", fence(1, Some("w1")), Update::Renew),
        Op::Update("shard-a", fence(2, Some("w2")), Update::Renew),
        Op::Update(
            "shard-a",
            fence(2, Some("w1")),
            Update::Checkpoint(seq(
                "49590338271490256608559692538361571095921575989136588802",
                4,
            )),
        ),
        Op::Update(
            "shard-a",
            fence(2, Some("w2")),
            Update::Checkpoint(seq("7", 0)),
        ),
        Op::Update("shard-a", fence(2, Some("w1")), take("w2")),
        // A graceful handoff: w9 marks, w2's renewal and a second mark fail on the mark, w2
        // checkpoints and transfers, w9 takes what it was handed.
        Op::Update("shard-a", fence(3, Some("w2")), mark("w9")),
        Op::Update("shard-a", fence(3, Some("w2")), mark("w8")),
        Op::Update("shard-a", fence(3, Some("w2")), Update::Renew),
        Op::Update(
            "shard-a",
            fence(3, Some("w2")),
            Update::Checkpoint(seq(
                "49590338271490256608559692538361571095921575989136588802",
                5,
            )),
        ),
        Op::Update(
            "shard-a",
            fence(3, Some("w2")),
            Update::Transfer { to: "w9".into() },
        ),
        Op::Update("shard-a", fence(4, Some("w9")), take("w9")),
        Op::Update("shard-a", fence(5, Some("w9")), Update::Renew),
        Op::Update("shard-a", fence(6, Some("w9")), Update::Release),
        Op::Update("shard-a", fence(7, None), take("w3")),
        Op::Update("shard-a", fence(8, Some("w3")), Update::End),
        Op::Delete("shard-a"),
        Op::Create(Lease::new("shard-b", Checkpoint::Latest)),
        Op::AddChild("shard-b", "c1"),
        Op::AddChild("shard-b", "c1"),
        Op::AddChild("shard-b", "c0"),
        Op::AddChild("missing", "c0"),
        Op::Delete("shard-b"),
        Op::Create(Lease::new("shard-c", Checkpoint::AtTimestamp)),
    ];
    for (i, op) in script.iter().enumerate() {
        let (r, m) = match op {
            Op::Create(l) => (real.create(l).await, model.create(l).await),
            Op::Update(k, f, u) => (real.update(k, f, u).await, model.update(k, f, u).await),
            Op::AddChild(k, c) => (real.add_child(k, c).await, model.add_child(k, c).await),
            Op::Delete(k) => (real.delete_ended(k).await, model.delete_ended(k).await),
        };
        let r = r.unwrap_or_else(|e| panic!("step {i}: {e}"));
        assert_eq!(Some(r), m.ok(), "step {i}");
        let mut rows = real.scan().await.expect("scan");
        rows.sort_by(|x, y| x.key.cmp(&y.key));
        assert_eq!(rows, model.rows(), "step {i}");
    }
    // Sixteen workers race for one lease with the same fence: exactly one wins.
    let mut racers = tokio::task::JoinSet::new();
    for i in 0..16 {
        let t = real.clone();
        racers.spawn(async move {
            t.update("shard-c", &fence(0, None), &take(&format!("racer-{i}")))
                .await
                .expect("update")
        });
    }
    let mut wins = 0;
    while let Some(r) = racers.join_next().await {
        if r.expect("racer") == Outcome::Written {
            wins += 1;
        }
    }
    assert_eq!(wins, 1);
    let row = real.get("shard-c").await.expect("get").expect("row");
    assert_eq!(row.counter, 1);
    assert!(row.owner.is_some_and(|o| o.starts_with("racer-")));
}
