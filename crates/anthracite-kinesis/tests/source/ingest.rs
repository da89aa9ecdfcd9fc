//! The Kinesis source against a real local Kinesis (kinesalite): lines, KPL vectors, start
//! positions, configuration through the relay, a missing stream, a corrupt checkpoint.

use std::time::Duration;

use crate::harness::*;
use anthracite::{Config, Relay};
use anthracite_kinesis::FileStore;
use anthracite_kinesis::KinesisSource;
use anthracite_sink::{Sink, SinkProtocol};
use anthracite_testkit::kinesalite::Kinesalite;
use anthracite_testkit::wait_for;
use base64::Engine;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_shard_multi_line_records_exact_counts_and_order() {
    let k = Kinesalite::start().await;
    k.create_stream("lines", 3).await;
    let received = Sink::start("received", SinkProtocol::Pickle);

    let dest = received.addr();
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
        let n = received.count();
        async move { n >= expected }
    })
    .await;
    src.stop().await;
    relay.shutdown().await;
    assert_eq!(
        received.count(),
        expected,
        "exactly once through a clean run"
    );
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
    let received = Sink::start("received", SinkProtocol::Pickle);

    let dest = received.addr();
    let relay = start_relay(&relay_toml(&dest.to_string(), ""), None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(anthracite_testkit::compat_path("kpl-vectors.json"))
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
        let n = received.count();
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
    let got: Vec<String> = received.received().into_iter().map(|r| r.path).collect();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_and_at_timestamp_start_positions() {
    use anthracite_kinesis::config::InitialPosition;
    let k = Kinesalite::start().await;
    k.create_stream("pos", 2).await;
    let received = Sink::start("received", SinkProtocol::Pickle);

    let dest = received.addr();
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
        let n = received.count();
        async move { n >= 6 }
    })
    .await;
    src.stop().await;
    assert!(received.received().iter().all(|r| r.path == "new.line"));

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
        let n = received.count();
        async move { n >= 12 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    src.stop().await;
    relay.shutdown().await;
    let all = received.received();
    assert_eq!(all.len(), 12, "{all:?}");
    assert_eq!(all.iter().filter(|r| r.path == "ts.line").count(), 6);
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
    let kinesis = anthracite_kinesis::Kinesis::new().with_sdk_config(k.sdk_config());
    let extensions = anthracite::extension::Extensions::new().with(kinesis);
    let config = Config::from_toml_str_with(&toml, &extensions).expect("config");
    let relay = Relay::builder(config).build().expect("build");
    let err = relay.run(async {}).await.expect_err("relay must not start");
    assert!(err.to_string().contains("corrupt"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_stream_runs_with_the_relay_and_shutdown_writes_final_checkpoint() {
    let k = Kinesalite::start().await;
    k.create_stream("wired", 2).await;
    let received = Sink::start("received", SinkProtocol::Pickle);

    let dest = received.addr();
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
        let n = received.count();
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
    let received = Sink::start("received", SinkProtocol::Pickle);

    let dest = received.addr();
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
        let n = received.count();
        async move { n >= 1 }
    })
    .await;
    src.stop().await;
    relay.shutdown().await;
    assert_eq!(received.count(), 1);
}
