//! The Kinesis source against a real local Kinesis (kinesalite): restarts from checkpoints,
//! resharding, injected throttles and expiries, a full downstream.

use std::sync::Arc;
use std::time::Duration;

use crate::harness::*;
use anthracite_kinesis::FileStore;
use anthracite_kinesis::ShardEvent;
use anthracite_sink::{Sink, SinkProtocol};
use anthracite_testkit::kinesalite::Kinesalite;
use anthracite_testkit::{proxy, wait_for};

/// Puts records `range` of the restart test: one line each, over four partition keys.
async fn put_phase(k: &Kinesalite, range: std::ops::Range<u32>) {
    for i in range {
        k.put(
            "restart",
            &format!("k{}", i % 4),
            lines(&format!("r.k{}", i % 4), i * 10, 1).as_bytes(),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_from_checkpoint_no_loss_bounded_duplicates() {
    let k = Kinesalite::start().await;
    k.create_stream("restart", 2).await;
    let received = Sink::start("received", SinkProtocol::Pickle);

    let dest = received.addr();
    let relay = start_relay(&relay_toml(&dest.to_string(), ""), None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    put_phase(&k, 0..20).await;
    // Graceful stop: the final checkpoint covers everything delivered.
    let src = run_source(&k, source_config("restart", dir.path()), &relay, None).await;
    wait_for("phase 1", LONG, || {
        let n = received.count();
        async move { n >= 20 }
    })
    .await;
    src.stop().await;
    put_phase(&k, 20..40).await;
    let src = run_source(&k, source_config("restart", dir.path()), &relay, None).await;
    wait_for("phase 2", LONG, || {
        let n = received.count();
        async move { n >= 40 }
    })
    .await;
    // Crash: abort without the final checkpoint; the next run re-reads at most what came
    // after the last interval commit.
    src.task.abort();
    let _ = src.task.await;
    put_phase(&k, 40..60).await;
    let src = run_source(&k, source_config("restart", dir.path()), &relay, None).await;
    wait_for("phase 3", LONG, || {
        let all = received.received();
        async move { (0..60u32).all(|i| all.iter().any(|r| r.value == f64::from(i * 10))) }
    })
    .await;
    src.stop().await;
    relay.shutdown().await;
    let all = received.received();
    // No loss; the graceful restart added no duplicates, the crash at most phase 2's 20.
    for i in 0..60u32 {
        let n = all.iter().filter(|r| r.value == f64::from(i * 10)).count();
        assert!(n >= 1, "value {} lost", i * 10);
        if i < 20 {
            assert_eq!(n, 1, "graceful restart duplicated {}", i * 10);
        }
    }
    assert!(
        all.len() <= 60 + 20,
        "duplicates beyond one checkpoint interval: {}",
        all.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_in_the_middle_of_an_aggregate() {
    use anthracite_kinesis::kpl::{AggregatedRecord, Record, aggregate};
    let k = Kinesalite::start().await;
    k.create_stream("midagg", 1).await;
    let received = Sink::start("received", SinkProtocol::Pickle);

    let dest = received.addr();
    let relay = start_relay(&relay_toml(&dest.to_string(), ""), None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    k.put("midagg", "p", b"before.plain 1 1700000000\n").await;
    let agg = AggregatedRecord {
        partition_key_table: vec!["p".into()],
        explicit_hash_key_table: vec![],
        records: (0..5)
            .map(|i| Record {
                partition_key_index: 0,
                explicit_hash_key_index: None,
                data: bytes::Bytes::from(format!("agg.u{i} {i} 1700000000\n")),
                tags: vec![],
            })
            .collect(),
    };
    let (seq, shard) = k.put("midagg", "p", &aggregate(&agg)).await;
    k.put("midagg", "p", b"after.plain 1 1700000000\n").await;
    // As if a previous run had delivered user records 0 and 1 of the aggregate.
    std::fs::write(
        FileStore::path_for(dir.path(), "midagg"),
        format!(r#"{{"version":1,"stream":"midagg","shards":{{"{shard}":{{"position":{{"sequence":"{seq}","sub_sequence":1}},"ended":false}}}}}}"#),
    )
    .expect("write checkpoint");
    let src = run_source(&k, source_config("midagg", dir.path()), &relay, None).await;
    wait_for("rest of the aggregate", LONG, || {
        let n = received.count();
        async move { n >= 4 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    src.stop().await;
    relay.shutdown().await;
    let mut names: Vec<String> = received.received().into_iter().map(|r| r.path).collect();
    names.sort();
    assert_eq!(names, ["after.plain", "agg.u2", "agg.u3", "agg.u4"]);
    let cp = load_checkpoint(dir.path(), "midagg");
    let pos = cp.shards[&shard].position.clone().expect("position");
    assert_eq!(pos.sub_sequence, 0, "last record is the plain one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_and_merge_while_reading_children_wait_for_parents() {
    let k = Kinesalite::start().await;
    k.create_stream("reshard", 1).await;
    let received = Sink::start("received", SinkProtocol::Pickle);

    let dest = received.addr();
    let relay = start_relay(&relay_toml(&dest.to_string(), ""), None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let keys: Vec<String> = (0..8).map(|i| format!("key{i}")).collect();
    let mut value = 0u32;
    let mut put_round = async |k: &Kinesalite| {
        for _ in 0..4 {
            for key in &keys {
                k.put(
                    "reshard",
                    key,
                    lines(&format!("rs.{key}"), value, 1).as_bytes(),
                )
                .await;
                value += 1;
            }
        }
    };
    put_round(&k).await;
    let src = run_source(&k, source_config("reshard", dir.path()), &relay, None).await;
    let stats = src.stats.clone();
    wait_for("first round", LONG, || {
        let n = received.count();
        async move { n >= 32 }
    })
    .await;
    let parent = k.shard_ids("reshard").await[0].clone();
    k.client()
        .split_shard()
        .stream_name("reshard")
        .shard_to_split(&parent)
        .new_starting_hash_key("170141183460469231731687303715884105728")
        .send()
        .await
        .expect("SplitShard");
    k.wait_active("reshard").await;
    put_round(&k).await;
    let ids = k.shard_ids("reshard").await;
    let children: Vec<String> = ids.iter().filter(|s| **s != parent).cloned().collect();
    assert_eq!(children.len(), 2, "{ids:?}");
    k.client()
        .merge_shards()
        .stream_name("reshard")
        .shard_to_merge(&children[0])
        .adjacent_shard_to_merge(&children[1])
        .send()
        .await
        .expect("MergeShards");
    k.wait_active("reshard").await;
    put_round(&k).await;
    wait_for("all three rounds", LONG, || {
        let n = received.count();
        async move { n >= 96 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    src.stop().await;
    relay.shutdown().await;
    assert_eq!(received.count(), 96);
    for key in &keys {
        let vals = values_for(&received, &format!("rs.{key}"));
        assert_eq!(vals.len(), 12, "{key}");
        assert_increasing(&vals, key);
    }
    let events = stats.events();
    let at = |e: ShardEvent| {
        events
            .iter()
            .position(|x| *x == e)
            .unwrap_or_else(|| panic!("{e:?} missing in {events:?}"))
    };
    let merged = k
        .shard_ids("reshard")
        .await
        .into_iter()
        .find(|s| *s != parent && !children.contains(s))
        .expect("merged shard");
    for c in &children {
        assert!(
            at(ShardEvent::Ended(parent.clone())) < at(ShardEvent::Started(c.clone())),
            "{events:?}"
        );
        assert!(
            at(ShardEvent::Ended(c.clone())) < at(ShardEvent::Started(merged.clone())),
            "{events:?}"
        );
    }
    let cp = load_checkpoint(dir.path(), "reshard");
    assert!(
        cp.shards[&parent].ended && children.iter().all(|c| cp.shards[c].ended),
        "{cp:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttles_and_expired_iterators_lose_and_duplicate_nothing() {
    let k = Kinesalite::start().await;
    k.create_stream("faults", 2).await;
    let faults = Arc::new(proxy::Faults {
        throttle_every: 3,
        expire_every: 5,
        ..Default::default()
    });
    let endpoint = proxy::start(&k.endpoint, faults.clone()).await;
    let received = Sink::start("received", SinkProtocol::Pickle);

    let dest = received.addr();
    let relay = start_relay(&relay_toml(&dest.to_string(), ""), None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = source_config("faults", dir.path());
    c.max_records = 7;
    let src = run_source(&k, c, &relay, Some(&endpoint)).await;
    let stats = src.stats.clone();
    for i in 0..60u32 {
        let key = format!("f{}", i % 6);
        k.put(
            "faults",
            &key,
            lines(&format!("fault.{key}"), i * 2, 2).as_bytes(),
        )
        .await;
    }
    wait_for("every line", LONG, || {
        let n = received.count();
        async move { n >= 120 }
    })
    .await;
    wait_for("faults seen", LONG, || {
        let s = stats.snapshot();
        async move { s.throttles >= 2 && s.expired_iterators >= 2 }
    })
    .await;
    src.stop().await;
    relay.shutdown().await;
    assert_eq!(received.count(), 120, "no loss, no duplicates");
    for i in 0..6 {
        let vals = values_for(&received, &format!("fault.f{i}"));
        assert_eq!(vals.len(), 20);
        assert_increasing(&vals, "fault key");
    }
    let s = stats.snapshot();
    assert_eq!(
        s.throttles,
        faults.throttled.load(std::sync::atomic::Ordering::SeqCst)
    );
    assert_eq!(
        s.expired_iterators,
        faults.expired.load(std::sync::atomic::Ordering::SeqCst)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downstream_full_pauses_polling_and_checkpoint_stays_behind() {
    use anthracite_kinesis::SequenceNumber;
    let k = Kinesalite::start().await;
    k.create_stream("full", 1).await;
    // Reserve a port with nothing listening: the destination cannot drain its queue.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let dest = format!("127.0.0.1:{port}");
    let relay = start_relay(
        &relay_toml(&dest, "[destinations.queue]\nmax_datapoints = 100\n"),
        None,
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut seqs = Vec::new();
    for i in 0..60u32 {
        let (seq, _) = k
            .put("full", "one", lines("full.m", i * 10, 10).as_bytes())
            .await;
        seqs.push(SequenceNumber::new(seq).expect("seq"));
    }
    let mut c = source_config("full", dir.path());
    c.max_records = 10;
    c.queue_high_water = 0.5;
    let src = run_source(&k, c, &relay, None).await;
    let stats = src.stats.clone();
    wait_for("polling paused", LONG, || {
        let s = stats.snapshot();
        async move { s.paused >= 1 && s.checkpoints >= 1 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let snap = relay.handle.stats();
    let d = &snap.destinations[0];
    assert_eq!(d.dropped_total(), 0, "nothing dropped while paused: {d:?}");
    assert!(d.routed < 600, "reading went on while full: {d:?}");
    let cp = load_checkpoint(dir.path(), "full");
    let pos = cp
        .shards
        .values()
        .next()
        .and_then(|s| s.position.clone())
        .expect("a position");
    let delivered_records = (d.routed / 10) as usize;
    assert!(delivered_records >= 1);
    assert!(
        pos.sequence <= seqs[delivered_records - 1],
        "checkpoint ahead of delivery"
    );
    // The destination comes up: everything arrives, nothing was dropped.
    let received = Sink::start_on("received", SinkProtocol::Pickle, port);
    wait_for("all after the destination came up", LONG, || {
        let n = received.count();
        async move { n >= 600 }
    })
    .await;
    src.stop().await;
    let snap = relay.handle.stats();
    assert_eq!(snap.destinations[0].dropped_total(), 0);
    relay.shutdown().await;
    assert_eq!(received.count(), 600);
}
