//! The Kinesis source against a real local Kinesis (kinesalite): lines, KPL, checkpoints,
//! start positions, resharding, injected faults, back-pressure and shutdown.
#![cfg(feature = "kinesis")]

mod support_kinesis;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anthracite::config::KinesisConfig;
use anthracite::receiver::kinesis::checkpoint::{FileStore, StreamCheckpoint};
use anthracite::receiver::kinesis::{KinesisSource, KinesisStats, ShardEvent};
use anthracite::{Config, Relay, RelayHandle};
use base64::Engine;
use support_kinesis::kinesalite::Kinesalite;
use support_kinesis::sink::{self, Received};
use support_kinesis::{proxy, wait_for};
use tokio_util::sync::CancellationToken;

const LONG: Duration = Duration::from_secs(90);

/// A relay with no listeners, delivering pickle to `dest`.
struct TestRelay {
    handle: RelayHandle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

fn relay_toml(dest: &str, extra: &str) -> String {
    format!(
        "[listen]\nline_tcp = \"\"\npickle_tcp = \"\"\n[destinations]\nservers = [\"{dest}:a\"]\nbackoff_min_ms = 20\nbackoff_max_ms = 200\n{extra}\n[telemetry]\ninterval_secs = 0\n"
    )
}

async fn start_relay(toml: &str, aws: Option<aws_config::SdkConfig>) -> TestRelay {
    let config = Config::from_toml_str(toml).expect("relay config");
    let mut builder = Relay::builder(config);
    if let Some(a) = aws {
        builder = builder.aws_sdk_config(a);
    }
    let relay = builder.build().expect("relay builds");
    let handle = relay.handle();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        relay
            .run(async {
                let _ = rx.await;
            })
            .await
            .expect("relay runs");
    });
    TestRelay {
        handle,
        stop: Some(tx),
        task,
    }
}

impl TestRelay {
    async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = self.task.await;
    }
}

fn source_config(stream: &str, dir: &Path) -> KinesisConfig {
    let mut c = KinesisConfig::new(stream, dir).expect("kinesis config");
    c.poll_idle = Duration::from_millis(200);
    c.poll_busy = Duration::from_millis(200);
    c.shard_sync_interval = Duration::from_secs(1);
    c.checkpoint_interval = Duration::from_millis(300);
    c.backoff_min = Duration::from_millis(20);
    c.backoff_max = Duration::from_millis(300);
    c
}

/// A source running on the relay's pipeline until `stop` is cancelled.
struct RunningSource {
    stats: Arc<KinesisStats>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

async fn run_source(
    k: &Kinesalite,
    config: KinesisConfig,
    relay: &TestRelay,
    endpoint: Option<&str>,
) -> RunningSource {
    let sdk = match endpoint {
        Some(e) => support_kinesis::kinesalite::sdk_config(e),
        None => k.sdk_config(),
    };
    let source = KinesisSource::new(config, Some(&sdk))
        .await
        .expect("source starts");
    let stats = source.stats();
    let stop = CancellationToken::new();
    let pipeline = relay.handle.pipeline().clone();
    let s = stop.clone();
    let task = tokio::spawn(async move { source.run(pipeline, s).await.expect("source runs") });
    RunningSource { stats, stop, task }
}

impl RunningSource {
    async fn stop(self) {
        self.stop.cancel();
        self.task.await.expect("source task");
    }
}

fn load_checkpoint(dir: &Path, stream: &str) -> StreamCheckpoint {
    use anthracite::receiver::kinesis::CheckpointStore;
    FileStore::new(dir, stream)
        .load()
        .expect("checkpoint loads")
}

fn values_for(received: &Received, prefix: &str) -> Vec<f64> {
    received
        .all()
        .into_iter()
        .filter(|(n, _, _)| n.starts_with(prefix))
        .map(|(_, _, v)| v)
        .collect()
}

fn assert_increasing(vals: &[f64], what: &str) {
    for w in vals.windows(2) {
        assert!(w[0] < w[1], "{what}: out of order: {} then {}", w[0], w[1]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_shard_multi_line_records_exact_counts_and_order() {
    let k = Kinesalite::start().await;
    k.create_stream("lines", 3).await;
    let (dest, received) = sink::start("127.0.0.1:0").await;
    let relay = start_relay(&relay_toml(&dest.to_string(), ""), None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut expected = 0usize;
    let mut malformed = 0u64;
    let keys = ["alpha", "bravo", "charlie", "delta", "echo"];
    for i in 0..12u32 {
        for key in keys {
            let a = i * 2;
            let b = a + 1;
            let data = match i % 4 {
                0 => format!("{key}.m {a} 1700000000\r\n{key}.m {b} 1700000000\r\n"),
                1 => format!("{key}.m {a} 1700000000\n{key}.m {b} 1700000000"),
                2 => {
                    malformed += 1;
                    format!(
                        "{key}.m {a} 1700000000\nnot a valid line at all\n\n{key}.m {b} 1700000000\n"
                    )
                }
                _ => format!("\n{key}.m {a} 1700000000\n\n{key}.m {b} 1700000000\n\n"),
            };
            expected += 2;
            k.put("lines", key, data.as_bytes()).await;
        }
    }
    // An empty-ish record (only newlines) and one with whitespace only: no datapoints.
    k.put("lines", "alpha", b"\n\r\n").await;
    let src = run_source(&k, source_config("lines", dir.path()), &relay, None).await;
    wait_for("every datapoint delivered", LONG, || {
        let n = received.len();
        async move { n >= expected }
    })
    .await;
    src.stop().await;
    relay.shutdown().await;
    assert_eq!(received.len(), expected, "exactly once through a clean run");
    for key in keys {
        let vals = values_for(&received, &format!("{key}."));
        assert_eq!(vals.len(), 24, "{key}");
        assert_increasing(&vals, key);
    }
    let cp = load_checkpoint(dir.path(), "lines");
    assert_eq!(cp.shards.len(), 3, "{cp:?}");
    assert!(cp.shards.values().all(|s| s.position.is_some() || !s.ended));
    let _ = malformed;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kpl_vectors_mixed_with_plain_records_in_one_batch() {
    let k = Kinesalite::start().await;
    k.create_stream("kpl", 1).await;
    let (dest, received) = sink::start("127.0.0.1:0").await;
    let relay = start_relay(&relay_toml(&dest.to_string(), ""), None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/compat/kpl-vectors.json"
    ))
    .expect("kpl-vectors.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let b64 = |s: &serde_json::Value| {
        base64::engine::general_purpose::STANDARD
            .decode(s.as_str().expect("str"))
            .expect("base64")
    };
    let mut entries = Vec::new();
    let mut expected_lines: Vec<String> = Vec::new();
    let mut plain_n = 0;
    let mut push_plain = |entries: &mut Vec<Vec<u8>>, expected_lines: &mut Vec<String>| {
        let line = format!("plain.p{plain_n} {plain_n} 1700000000");
        plain_n += 1;
        entries.push(format!("{line}\n").into_bytes());
        expected_lines.push(line);
    };
    for vector in v["vectors"].as_array().expect("vectors") {
        push_plain(&mut entries, &mut expected_lines);
        entries.push(b64(&vector["data_b64"]));
        for u in vector["user_records"].as_array().expect("user records") {
            for l in u["data_utf8"]
                .as_str()
                .expect("utf8")
                .split('\n')
                .filter(|l| !l.is_empty())
            {
                expected_lines.push(l.to_string());
            }
        }
    }
    for vector in v["negative"].as_array().expect("negative") {
        push_plain(&mut entries, &mut expected_lines);
        entries.push(b64(&vector["data_b64"]));
    }
    push_plain(&mut entries, &mut expected_lines);
    // One PutRecords call, one partition key: one shard, one GetRecords batch.
    let mut put = k.client().put_records().stream_name("kpl");
    for e in &entries {
        put = put.records(
            aws_sdk_kinesis::types::PutRecordsRequestEntry::builder()
                .partition_key("one")
                .data(aws_sdk_kinesis::primitives::Blob::new(e.clone()))
                .build()
                .expect("entry"),
        );
    }
    let out = put.send().await.expect("PutRecords");
    assert_eq!(out.failed_record_count(), Some(0));
    let src = run_source(&k, source_config("kpl", dir.path()), &relay, None).await;
    let stats = src.stats.clone();
    let n_entries = entries.len();
    wait_for("every record processed", LONG, || {
        let s = stats.snapshot();
        async move { s.records as usize >= n_entries }
    })
    .await;
    wait_for("valid lines delivered", LONG, || {
        let n = received.len();
        let want = expected_lines.len();
        async move { n >= want }
    })
    .await;
    src.stop().await;
    relay.shutdown().await;
    let s = stats.snapshot();
    let positives = v["vectors"].as_array().map_or(0, |a| a.len()) as u64;
    assert_eq!(s.kpl_aggregated, positives);
    // bad_md5 and magic_too_short carry the magic; plain_graphite does not.
    assert_eq!(s.kpl_corrupt, 2);
    let got: Vec<String> = received.all().into_iter().map(|(n, _, _)| n).collect();
    for line in &expected_lines {
        let name = line.split(' ').next().expect("name");
        let want = expected_lines
            .iter()
            .filter(|l| l.split(' ').next() == Some(name))
            .count();
        let have = got.iter().filter(|n| n.as_str() == name).count();
        // bad_md5 passes through as plain bytes, whose last lines may parse as well.
        assert!(have >= want, "{name}: {have} < {want}");
    }
    let user_records: u64 = v["vectors"]
        .as_array()
        .expect("v")
        .iter()
        .map(|x| x["user_records"].as_array().map_or(0, |u| u.len()) as u64)
        .sum();
    assert_eq!(s.user_records, user_records + 3 + plain_n as u64);
}

fn lines(prefix: &str, from: u32, n: u32) -> String {
    (from..from + n)
        .map(|i| format!("{prefix} {i} 1700000000\n"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_from_checkpoint_no_loss_bounded_duplicates() {
    let k = Kinesalite::start().await;
    k.create_stream("restart", 2).await;
    let (dest, received) = sink::start("127.0.0.1:0").await;
    let relay = start_relay(&relay_toml(&dest.to_string(), ""), None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    for i in 0..20 {
        k.put(
            "restart",
            &format!("k{}", i % 4),
            lines(&format!("r.k{}", i % 4), i * 10, 1).as_bytes(),
        )
        .await;
    }
    // Graceful stop: the final checkpoint covers everything delivered.
    let src = run_source(&k, source_config("restart", dir.path()), &relay, None).await;
    wait_for("phase 1", LONG, || {
        let n = received.len();
        async move { n >= 20 }
    })
    .await;
    src.stop().await;
    for i in 20..40 {
        k.put(
            "restart",
            &format!("k{}", i % 4),
            lines(&format!("r.k{}", i % 4), i * 10, 1).as_bytes(),
        )
        .await;
    }
    let src = run_source(&k, source_config("restart", dir.path()), &relay, None).await;
    wait_for("phase 2", LONG, || {
        let n = received.len();
        async move { n >= 40 }
    })
    .await;
    // Crash: abort without the final checkpoint; the next run re-reads at most what came
    // after the last interval commit.
    src.task.abort();
    let _ = src.task.await;
    for i in 40..60 {
        k.put(
            "restart",
            &format!("k{}", i % 4),
            lines(&format!("r.k{}", i % 4), i * 10, 1).as_bytes(),
        )
        .await;
    }
    let src = run_source(&k, source_config("restart", dir.path()), &relay, None).await;
    wait_for("phase 3", LONG, || {
        let r = received.clone();
        async move {
            let all = r.all();
            (0..60u32).all(|i| all.iter().any(|(_, _, v)| *v == f64::from(i * 10)))
        }
    })
    .await;
    src.stop().await;
    relay.shutdown().await;
    let all = received.all();
    // No loss; the graceful restart added no duplicates, the crash at most phase 2's 20.
    for i in 0..60u32 {
        let n = all
            .iter()
            .filter(|(_, _, v)| *v == f64::from(i * 10))
            .count();
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
    use anthracite::receiver::kinesis::kpl::{AggregatedRecord, Record, aggregate};
    let k = Kinesalite::start().await;
    k.create_stream("midagg", 1).await;
    let (dest, received) = sink::start("127.0.0.1:0").await;
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
        let n = received.len();
        async move { n >= 4 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    src.stop().await;
    relay.shutdown().await;
    let mut names: Vec<String> = received.all().into_iter().map(|(n, _, _)| n).collect();
    names.sort();
    assert_eq!(names, ["after.plain", "agg.u2", "agg.u3", "agg.u4"]);
    let cp = load_checkpoint(dir.path(), "midagg");
    let pos = cp.shards[&shard].position.clone().expect("position");
    assert_eq!(pos.sub_sequence, 0, "last record is the plain one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_and_at_timestamp_start_positions() {
    use anthracite::config::kinesis::InitialPosition;
    let k = Kinesalite::start().await;
    k.create_stream("pos", 2).await;
    let (dest, received) = sink::start("127.0.0.1:0").await;
    let relay = start_relay(&relay_toml(&dest.to_string(), ""), None).await;
    for i in 0..6 {
        k.put("pos", &format!("k{i}"), lines("old.line", i, 1).as_bytes())
            .await;
    }
    // latest: nothing from before the readers' first call.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = source_config("pos", dir.path());
    c.initial_position = InitialPosition::Latest;
    let src = run_source(&k, c, &relay, None).await;
    let stats = src.stats.clone();
    wait_for("both shards polled", LONG, || {
        let s = stats.snapshot();
        async move { s.polls >= 2 }
    })
    .await;
    for i in 0..6 {
        k.put("pos", &format!("k{i}"), lines("new.line", i, 1).as_bytes())
            .await;
    }
    wait_for("new lines", LONG, || {
        let n = received.len();
        async move { n >= 6 }
    })
    .await;
    src.stop().await;
    assert!(received.all().iter().all(|(n, _, _)| n == "new.line"));

    // at_timestamp: everything from the timestamp on, nothing before.
    let dir = tempfile::tempdir().expect("tempdir");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for i in 0..6 {
        k.put("pos", &format!("k{i}"), lines("ts.line", i, 1).as_bytes())
            .await;
    }
    let mut c = source_config("pos", dir.path());
    c.initial_position = InitialPosition::AtTimestamp;
    c.initial_timestamp = Some(t);
    let src = run_source(&k, c, &relay, None).await;
    wait_for("lines after the timestamp", LONG, || {
        let n = received.len();
        async move { n >= 12 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    src.stop().await;
    relay.shutdown().await;
    let all = received.all();
    assert_eq!(all.len(), 12, "{all:?}");
    assert_eq!(all.iter().filter(|(n, _, _)| n == "ts.line").count(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_checkpoint_file_is_a_clear_error() {
    let k = Kinesalite::start().await;
    k.create_stream("corrupt", 1).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = FileStore::path_for(dir.path(), "corrupt");
    std::fs::write(&path, b"{\"version\":1,\"stream\":\"corrupt\",\"shards\":{\"s\":{\"position\":{\"sequence\":\"12x\"").expect("write");
    let err = KinesisSource::new(source_config("corrupt", dir.path()), Some(&k.sdk_config()))
        .await
        .expect_err("corrupt checkpoint must not start");
    let msg = err.to_string();
    assert!(
        msg.contains("corrupt") && msg.contains(&path.display().to_string()),
        "{msg}"
    );
    // Through the relay: run fails before reading anything.
    let toml = relay_toml(
        "127.0.0.1:9",
        &format!(
            "[kinesis]\nstream = \"corrupt\"\nendpoint_url = \"{}\"\ncheckpoint_dir = \"{}\"\n",
            k.endpoint,
            dir.path().display()
        ),
    );
    let relay = Relay::builder(Config::from_toml_str(&toml).expect("config"))
        .aws_sdk_config(k.sdk_config())
        .build()
        .expect("build");
    let err = relay.run(async {}).await.expect_err("relay must not start");
    assert!(err.to_string().contains("corrupt"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_and_merge_while_reading_children_wait_for_parents() {
    let k = Kinesalite::start().await;
    k.create_stream("reshard", 1).await;
    let (dest, received) = sink::start("127.0.0.1:0").await;
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
        let n = received.len();
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
        let n = received.len();
        async move { n >= 96 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    src.stop().await;
    relay.shutdown().await;
    assert_eq!(received.len(), 96);
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
    let (dest, received) = sink::start("127.0.0.1:0").await;
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
        let n = received.len();
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
    assert_eq!(received.len(), 120, "no loss, no duplicates");
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
    use anthracite::receiver::kinesis::checkpoint::SequenceNumber;
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
    let (_, received) = sink::start(&dest).await;
    wait_for("all after the destination came up", LONG, || {
        let n = received.len();
        async move { n >= 600 }
    })
    .await;
    src.stop().await;
    let snap = relay.handle.stats();
    assert_eq!(snap.destinations[0].dropped_total(), 0);
    relay.shutdown().await;
    assert_eq!(received.len(), 600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_stream_runs_with_the_relay_and_shutdown_writes_final_checkpoint() {
    let k = Kinesalite::start().await;
    k.create_stream("wired", 2).await;
    let (dest, received) = sink::start("127.0.0.1:0").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut last = std::collections::BTreeMap::new();
    for i in 0..10u32 {
        let (seq, shard) = k
            .put("wired", &format!("w{i}"), lines("wired.m", i, 1).as_bytes())
            .await;
        last.insert(shard, seq);
    }
    // A long commit interval: only the shutdown commit can write the file.
    let toml = relay_toml(
        &dest.to_string(),
        &format!(
            "[[kinesis]]\nstream = \"wired\"\nendpoint_url = \"{}\"\ncheckpoint_dir = \"{}\"\ncheckpoint_interval_secs = 3600\npoll_idle_ms = 200\n",
            k.endpoint,
            dir.path().display()
        ),
    );
    let relay = start_relay(&toml, Some(k.sdk_config())).await;
    wait_for("delivery", LONG, || {
        let n = received.len();
        async move { n >= 10 }
    })
    .await;
    relay.shutdown().await;
    let cp = load_checkpoint(dir.path(), "wired");
    for (shard, seq) in &last {
        let pos = cp.shards[shard].position.clone().expect("position");
        assert_eq!(pos.sequence.as_str(), seq, "{shard}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_stream_is_retried_until_it_exists() {
    let k = Kinesalite::start().await;
    let (dest, received) = sink::start("127.0.0.1:0").await;
    let relay = start_relay(&relay_toml(&dest.to_string(), ""), None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let src = run_source(&k, source_config("late", dir.path()), &relay, None).await;
    let stats = src.stats.clone();
    wait_for("ListShards failures counted", LONG, || {
        let s = stats.snapshot();
        async move { s.errors >= 2 }
    })
    .await;
    k.create_stream("late", 1).await;
    k.put("late", "x", b"late.m 1 1700000000\n").await;
    wait_for("the record once the stream exists", LONG, || {
        let n = received.len();
        async move { n >= 1 }
    })
    .await;
    src.stop().await;
    relay.shutdown().await;
    assert_eq!(received.len(), 1);
}
