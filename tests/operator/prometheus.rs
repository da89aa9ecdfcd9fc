//! `dist/`'s alert rules and Grafana dashboard against Debian's Prometheus: `promtool check
//! rules` and `promtool test rules` (a unit test for every alert), then a real Prometheus on
//! loopback scraping a relay (one destination up, one down and spilling, some bad input, a
//! Kinesis stream read through a lease table and a Kafka topic read in a consumer group) must
//! return series for every expression of the dashboard.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anthracite_sink::{Sink, SinkProtocol};
use anthracite_testkit as testkit;
use testkit::dynamodb::DynamoDbLocal;
use testkit::http::get;
use testkit::kafka::{Broker, client};
use testkit::kinesalite::{self, Kinesalite};
use testkit::process::{ManagedChild, output_with_timeout};

const WAIT: Duration = Duration::from_secs(90);

fn dist(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("dist")
        .join(file)
}

fn promtool(args: &[&str]) -> String {
    testkit::apt::require("promtool", "prometheus");
    let mut cmd = Command::new("promtool");
    cmd.args(args);
    let out = output_with_timeout("promtool", cmd, Vec::new(), WAIT);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

/// The names after `key:` on lines of `text` (a YAML list of alerts or of alert tests).
fn yaml_values(text: &str, key: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim().trim_start_matches("- ");
            Some(l.strip_prefix(key)?.trim().to_string())
        })
        .collect()
}

#[test]
fn alert_rules_pass_promtool_and_every_alert_has_a_unit_test() {
    let rules = dist("anthracite-alerts.yml");
    let tests = dist("tests/anthracite-alerts.test.yml");
    let checked = promtool(&["check", "rules", &rules.display().to_string()]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", &tests.display().to_string()]);
    assert!(tested.contains("SUCCESS"), "{tested}");

    let alerts = yaml_values(&std::fs::read_to_string(&rules).expect("rules"), "alert:");
    let covered = yaml_values(
        &std::fs::read_to_string(&tests).expect("tests"),
        "alertname:",
    );
    assert!(alerts.len() >= 6, "{alerts:?}");
    let untested: Vec<_> = alerts.difference(&covered).collect();
    assert!(
        untested.is_empty(),
        "alerts without a promtool test: {untested:?}"
    );
    for a in &alerts {
        assert!(
            std::fs::read_to_string(&rules)
                .expect("rules")
                .contains(&format!("alert: {a}\n        expr:")),
            "{a}"
        );
    }
}

/// Every `(row title, expression)` of the dashboard.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(dist("grafana-dashboard.json")).expect("dashboard");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("dashboard is JSON");
    let mut row = String::new();
    let mut out = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        if p["type"] == "row" {
            row = p["title"].as_str().unwrap_or_default().to_string();
            continue;
        }
        for t in p["targets"].as_array().expect("targets") {
            out.push((row.clone(), t["expr"].as_str().expect("expr").to_string()));
        }
    }
    out
}

/// The metric names an expression reads.
fn metric_names(expr: &str) -> Vec<String> {
    let re = regex::Regex::new(r"\b((?:anthracite|process)_[a-z_]+)\b").expect("regex");
    re.captures_iter(expr).map(|c| c[1].to_string()).collect()
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Series an instant query returns (panics on a query error: a malformed expression).
fn series(prometheus: SocketAddr, expr: &str) -> usize {
    let (status, body) = get(
        prometheus,
        &format!("/api/v1/query?query={}", percent_encode(expr)),
    )
    .expect("query Prometheus");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    assert!(
        status == 200 && v["status"] == "success",
        "query failed ({status}): {expr}\n{body}"
    );
    v["data"]["result"].as_array().map_or(0, Vec::len)
}

/// The streams the scraped relay reads, so the Kinesis, Kinesis-lease and Kafka panels have
/// series too: kinesalite with a lease table in DynamoDB Local, and a topic on the Kafka
/// broker, each holding a few datapoints. The servers stay up while the returned guard lives.
struct Streams {
    kinesalite: Kinesalite,
    dynamodb: &'static DynamoDbLocal,
    kafka: &'static Broker,
    producer: rdkafka::producer::FutureProducer,
}

const STREAM: &str = "dashboard";
const TOPIC: &str = "dashboard";

impl Streams {
    fn start(rt: &tokio::runtime::Runtime) -> Streams {
        let dynamodb = DynamoDbLocal::shared();
        let kafka = Broker::shared();
        let kinesalite = rt.block_on(async {
            let k = Kinesalite::start().await;
            k.create_stream(STREAM, 2).await;
            kafka.create_topic(TOPIC, 2).await;
            k
        });
        Streams {
            kinesalite,
            dynamodb,
            kafka,
            producer: client::producer(&kafka.bootstrap),
        }
    }

    /// The relay's `[[kinesis]]` (lease table mode) and `[[kafka]]` sections.
    fn sources_toml(&self) -> String {
        format!(
            "[[kinesis]]\nstream = \"{STREAM}\"\nendpoint_url = \"{}\"\n\
             poll_idle_ms = 200\npoll_busy_ms = 200\nshard_sync_interval_secs = 1\n\
             checkpoint_interval_secs = 0.5\nlease_table = \"dashboard-leases\"\n\
             dynamodb_endpoint_url = \"{}\"\nworker_id = \"scraped\"\nlease_duration_secs = 3\n\
             [[kafka]]\nbrokers = [\"{}\"]\ntopics = [\"{TOPIC}\"]\ngroup_id = \"dashboard\"\n\
             commit_interval_ms = 200\n\
             properties = {{ \"statistics.interval.ms\" = \"1000\" }}\n",
            self.kinesalite.endpoint, self.dynamodb.endpoint, self.kafka.bootstrap
        )
    }

    /// A few datapoints into every shard of the stream and every partition of the topic.
    fn put(&self, rt: &tokio::runtime::Runtime, round: u64) {
        let now = testkit::unix_now();
        rt.block_on(async {
            for key in ["a", "b", "c", "d"] {
                let line = format!("stream.kinesis.{key} {round} {now}\n");
                self.kinesalite.put(STREAM, key, line.as_bytes()).await;
            }
            for partition in 0..2 {
                let line = format!("stream.kafka.p{partition} {round} {now}\n");
                client::send(&self.producer, TOPIC, partition, line.as_bytes(), None).await;
            }
        });
    }
}

#[test]
fn every_dashboard_query_returns_series_from_prometheus_scraping_a_relay() {
    testkit::apt::require("prometheus", "prometheus");
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let streams = Streams::start(&rt);
    let up = Sink::start("up", SinkProtocol::Pickle);
    let ports = testkit::free_ports(4);
    let (down_port, admin_port, prom_port, line_port) = (ports[0], ports[1], ports[2], ports[3]);
    let dir = tempfile::tempdir().expect("tempdir");
    // A relay process (not in-process): the Kinesis source takes its AWS credentials from
    // the environment the support sets, and the process_* series are the relay's own.
    let toml = format!(
        "[listen]\nline_tcp = \"127.0.0.1:{line_port}\"\npickle_tcp = \"\"\n\
         [destinations]\nservers = [\"127.0.0.1:{}:a\", \"127.0.0.1:{down_port}:b\"]\n\
         backoff_min_ms = 20\nbackoff_max_ms = 200\n\
         [destinations.queue]\nmax_datapoints = 2000\n\
         [destinations.spill]\ndir = {:?}\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 10\n\
         [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n{}",
        up.port(),
        dir.path().join("spill").display().to_string(),
        streams.sources_toml()
    );
    let mut relay = crate::anthracite("scraped")
        .toml(dir.path(), &toml)
        .envs(kinesalite::relay_env(dir.path()))
        .start();
    let admin: SocketAddr = ([127, 0, 0, 1], admin_port).into();
    let line: SocketAddr = ([127, 0, 0, 1], line_port).into();
    let deadline = Instant::now() + WAIT;
    while !matches!(get(admin, "/ready"), Ok((200, _))) {
        relay.assert_running("the relay to be ready");
        assert!(
            Instant::now() < deadline,
            "the relay was not ready after {WAIT:?}:\n{}",
            relay.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: anthracite\n    static_configs:\n      \
             - targets: ['{admin}']\n"
        ),
    )
    .expect("write prometheus.yml");
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"));
    let mut server = ManagedChild::spawn("prometheus", cmd, dir.path().join("prometheus.log"));
    let prometheus: SocketAddr = ([127, 0, 0, 1], prom_port).into();

    // Traffic on every source for a while, so rates have two samples to work with.
    let queries = dashboard_queries();
    assert!(queries.len() >= 20, "{queries:?}");
    for row in ["Kinesis", "Kinesis leases", "Kafka"] {
        assert!(
            queries.iter().any(|(r, _)| r == row),
            "the dashboard has no {row} row"
        );
    }
    let deadline = Instant::now() + WAIT;
    let mut missing: Vec<String>;
    let mut round = 0u64;
    loop {
        round += 1;
        let mut lines = Vec::new();
        for i in 0..200 {
            lines.push((format!("prom.m{i}"), 1_700_000_000, round as f64));
        }
        testkit::send_lines(line, &lines);
        let mut c = std::net::TcpStream::connect(line).expect("connect");
        std::io::Write::write_all(&mut c, b"prom.bad not-a-number 1700000000\n").expect("write");
        drop(c);
        streams.put(&rt, round);
        std::thread::sleep(Duration::from_millis(500));
        missing = match get(prometheus, "/-/ready") {
            Ok((200, _)) => queries
                .iter()
                .filter(|(_, e)| series(prometheus, &for_prometheus(e)) == 0)
                .map(|(row, e)| format!("[{row}] {e}"))
                .collect(),
            _ => vec!["(prometheus not ready)".into()],
        };
        if missing.is_empty() {
            break;
        }
        server.assert_running("prometheus to answer");
        relay.assert_running("every dashboard query to return series");
        assert!(
            Instant::now() < deadline,
            "dashboard queries with no series after {WAIT:?}:\n{}\nprometheus log:\n{}\nrelay log:\n{}",
            missing.join("\n"),
            server.log_tail(20),
            relay.log_tail(20)
        );
    }

    // No panel reads a name the relay does not export.
    let (_, scraped) = get(admin, "/metrics").expect("scrape");
    for (_, e) in &queries {
        for name in metric_names(e) {
            assert!(
                scraped.contains(&format!("\n{name}")),
                "{name} is not in /metrics"
            );
        }
    }
    drop(server);
    drop(relay);
    drop(streams);
}

/// A dashboard expression with Grafana's variables as Prometheus takes them.
fn for_prometheus(expr: &str) -> String {
    expr.replace("$__rate_interval", "15s")
        .replace("$instance", ".*")
        .replace("$job", ".*")
}
