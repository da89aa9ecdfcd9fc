//! `dist/`'s alert rules and Grafana dashboard against Debian's Prometheus: `promtool check
//! rules` and `promtool test rules` (a unit test for every alert), then a real Prometheus on
//! loopback scraping a relay (one destination up, one down and spilling, some bad input) must
//! return series for every expression of the dashboard.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support;
use support::http::get;
use support::process::{ManagedChild, output_with_timeout};
use support::relay::{TestRelay, config_for};
use support::sink::{CountingSink, SinkProtocol};

const WAIT: Duration = Duration::from_secs(90);

fn dist(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("dist")
        .join(file)
}

fn promtool(args: &[&str]) -> String {
    support::apt::require("promtool", "prometheus");
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

#[test]
fn every_dashboard_query_returns_series_from_prometheus_scraping_a_relay() {
    support::apt::require("prometheus", "prometheus");
    let up = CountingSink::start("up", SinkProtocol::Pickle);
    let ports = support::free_ports(3);
    let (down_port, admin_port, prom_port) = (ports[0], ports[1], ports[2]);
    let dir = tempfile::tempdir().expect("tempdir");
    let dests = vec![
        format!("127.0.0.1:{}:a", up.port()),
        format!("127.0.0.1:{down_port}:b"),
    ];
    let mut toml = config_for(&dests, "");
    toml.push_str(&format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\
         [destinations.queue]\nmax_datapoints = 2000\n\
         [destinations.spill]\ndir = {:?}\n",
        dir.path().join("spill").display().to_string()
    ));
    let relay = TestRelay::start(&toml);
    let admin: SocketAddr = ([127, 0, 0, 1], admin_port).into();

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

    // Traffic for a while, so rates have two samples to work with.
    let queries = dashboard_queries();
    assert!(queries.len() >= 20, "{queries:?}");
    let (kinesis, relay_side): (Vec<_>, Vec<_>) = queries
        .iter()
        .partition(|(row, _)| row.starts_with("Kinesis"));
    let deadline = Instant::now() + WAIT;
    let mut missing: Vec<&str>;
    let mut round = 0u64;
    loop {
        round += 1;
        let mut lines = Vec::new();
        for i in 0..200 {
            lines.push((format!("prom.m{i}"), 1_700_000_000, round as f64));
        }
        support::send_lines(relay.line, &lines);
        let mut c = std::net::TcpStream::connect(relay.line).expect("connect");
        std::io::Write::write_all(&mut c, b"prom.bad not-a-number 1700000000\n").expect("write");
        drop(c);
        std::thread::sleep(Duration::from_millis(500));
        missing = match get(prometheus, "/-/ready") {
            Ok((200, _)) => relay_side
                .iter()
                .filter(|(_, e)| series(prometheus, &for_prometheus(e)) == 0)
                .map(|(_, e)| e.as_str())
                .collect(),
            _ => vec!["(prometheus not ready)"],
        };
        if missing.is_empty() {
            break;
        }
        server.assert_running("prometheus to answer");
        assert!(
            Instant::now() < deadline,
            "dashboard queries with no series after {WAIT:?}:\n{}\nprometheus log:\n{}",
            missing.join("\n"),
            server.log_tail(20)
        );
    }

    // No panel reads a name the relay does not export: the relay-side names are in its
    // /metrics, the Kinesis ones (a stream and a lease table are not part of this run) are
    // Kinesis names of metric_names.rs, and each of their queries is valid.
    let (_, scraped) = get(admin, "/metrics").expect("scrape");
    for (_, e) in &relay_side {
        for name in metric_names(e) {
            assert!(
                scraped.contains(&format!("\n{name}")),
                "{name} is not in /metrics"
            );
        }
    }
    let names = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/anthracite/src/metric_names.rs"),
    )
    .expect("metric_names.rs");
    let kinesis_module = names
        .split("pub mod kinesis")
        .nth(1)
        .and_then(|m| m.split("\n}\n").next())
        .expect("the kinesis module of metric_names.rs");
    assert!(!kinesis.is_empty());
    for (_, e) in &kinesis {
        let _ = series(prometheus, &for_prometheus(e));
        for name in metric_names(e) {
            assert!(
                kinesis_module.contains(&format!("\"{name}\"")),
                "{name} is not a Kinesis metric name"
            );
        }
    }
    drop(server);
    relay.stop();
}

/// A dashboard expression with Grafana's variables as Prometheus takes them.
fn for_prometheus(expr: &str) -> String {
    expr.replace("$__rate_interval", "15s")
        .replace("$instance", ".*")
        .replace("$job", ".*")
}
