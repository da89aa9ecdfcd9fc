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
