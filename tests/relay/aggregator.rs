//! The aggregation stage as a process: its state file across SIGTERM, its checkpoints across
//! SIGKILL, its memory bound, and
//! bad rule files (at start: exit 2 naming file and line; at run time: a counted, refused
//! reload). Its agreement with carbon-aggregator.py is `tests/carbon/differential_aggregator.rs`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anthracite_testkit as testkit;

use anthracite::unstable::aggregator::{AggregationRules, Aggregator, AggregatorLimits};
use anthracite_sink::{Sink, SinkProtocol};
use testkit::RelayProcess;
use testkit::http::{get, parse_metrics, value};
use testkit::{free_ports, send_lines};

const RULES: &str = "\
agg.sum (60) = sum in.*
agg.p90 (60) = p90 in.*
agg.min (60) = min in.*
";

struct Setup {
    dir: tempfile::TempDir,
    line: SocketAddr,
    admin: SocketAddr,
    sink: Sink,
}

impl Setup {
    fn new(aggregation: &str) -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let sink = Sink::start("cache", SinkProtocol::Pickle);
        let ports = free_ports(2);
        let line = SocketAddr::from(([127, 0, 0, 1], ports[0]));
        let admin = SocketAddr::from(([127, 0, 0, 1], ports[1]));
        std::fs::write(dir.path().join("rules.conf"), RULES).expect("write rules");
        let s = Setup {
            dir,
            line,
            admin,
            sink,
        };
        s.configure(aggregation);
        s
    }

    /// (Re)writes relay.toml with these extra `[aggregation]` keys (read at the next start).
    fn configure(&self, aggregation: &str) {
        self.configure_with("interval_secs = 0", aggregation);
    }

    /// (Re)writes relay.toml with these `[telemetry]` and extra `[aggregation]` keys.
    fn configure_with(&self, telemetry: &str, aggregation: &str) {
        let toml = format!(
            "[listen]\nline_tcp = \"{}\"\npickle_tcp = \"\"\n\
             [admin]\nlisten = \"{}\"\n\
             [destinations]\nservers = [\"127.0.0.1:{}:a\"]\n\
             [destinations.spill]\ndir = \"{}\"\n\
             [telemetry]\n{telemetry}\n\
             [aggregation]\nrules_file = \"{}\"\nwrite_back_frequency_secs = 1\n{aggregation}\n",
            self.line,
            self.admin,
            self.sink.port(),
            self.dir.path().join("spill").display(),
            self.dir.path().join("rules.conf").display(),
        );
        std::fs::write(self.dir.path().join("relay.toml"), toml).expect("write relay.toml");
    }

    fn state_file(&self) -> std::path::PathBuf {
        self.dir.path().join("spill").join("aggregator.state")
    }

    /// The state file's header `(kind, datapoints)`, if it exists and parses.
    fn state_header(&self) -> Option<(String, u64)> {
        let bytes = std::fs::read(self.state_file()).ok()?;
        let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        Some((
            v.get("kind")?.as_str()?.to_owned(),
            v.get("datapoints")?.as_u64()?,
        ))
    }

    fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        value(&self.metrics(), name, labels)
    }

    fn start(&self) -> RelayProcess {
        static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut relay = crate::anthracite("anthracite")
            .config(&self.dir.path().join("relay.toml"))
            .env("NO_COLOR", "1")
            .log(self.dir.path().join(format!("anthracite-{run}.log")))
            .start();
        relay.wait_ready(self.admin);
        relay
    }

    /// The last value the sink got for `name` at `interval`, as bits.
    fn last(&self, name: &str, interval: f64) -> Option<u64> {
        self.sink
            .received()
            .iter()
            .rev()
            .find(|r| r.path == name && r.timestamp == interval)
            .map(|r| r.value.to_bits())
    }

    fn wait_for(&self, relay: &mut RelayProcess, what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done() {
            relay.assert_running(what);
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}\n{}",
                relay.log_tail(30)
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `second` to the run after the one that got `first` and waits until the
    /// aggregates over both arrive (which tells a restored interval from a lost one).
    fn send_second_and_expect_both(
        &self,
        relay: &mut RelayProcess,
        first: &[f64],
        second: &[f64],
        interval: f64,
    ) {
        send_lines(self.line, &points(second, first.len(), interval));
        let all: Vec<f64> = first.iter().chain(second).copied().collect();
        let want = expected(&all, interval);
        self.wait_for(relay, "the aggregates over both runs", || {
            want.iter()
                .all(|(name, bits)| self.last(name, interval) == Some(*bits))
        });
        // Without the state file the values would be over the second run alone.
        assert_ne!(
            expected(second, interval),
            want,
            "the test tells a restored interval from a lost one"
        );
    }

    fn metrics(&self) -> std::collections::BTreeMap<String, f64> {
        let (status, body) = get(self.admin, "/metrics").expect("GET /metrics");
        assert_eq!(status, 200);
        parse_metrics(&body)
    }
}

/// `in.h<offset + i>` = `values[i]`, one second into `interval`.
fn points(values: &[f64], offset: usize, interval: f64) -> Vec<(String, i64, f64)> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("in.h{}", i + offset), interval as i64 + 1, *v))
        .collect()
}

/// What one aggregator that never restarted computes over `values` (the reference).
fn expected(values: &[f64], interval: f64) -> Vec<(String, u64)> {
    let rules = AggregationRules::parse(RULES).expect("rules");
    let mut a = Aggregator::new(Arc::new(rules), AggregatorLimits::default());
    for (i, v) in values.iter().enumerate() {
        a.feed(format!("in.h{i}").as_bytes(), interval + 1.0, *v, 0.0);
    }
    let mut out = Vec::new();
    a.tick(1e12, &mut |n, _, v| out.push((n.to_owned(), v.to_bits())));
    out.sort();
    out
}

#[test]
fn sigterm_mid_interval_keeps_the_interval_value() {
    // Checkpoints run all along: the final state written at SIGTERM comes after them.
    let s = Setup::new("checkpoint_interval_secs = 0.1\n");
    let now = testkit::unix_now();
    let interval = (now - now.rem_euclid(60)) as f64;
    let first = [1e16, 1.0, 0.25, -0.0];
    let second = [-1e16, 3.5, 2.0];
    let mut relay = s.start();
    send_lines(s.line, &points(&first, 0, interval));
    s.wait_for(&mut relay, "the first aggregate and a checkpoint", || {
        s.last("agg.sum", interval).is_some()
            && s.metric(
                "anthracite_aggregator_checkpoints_total",
                &[("result", "written")],
            ) >= Some(1.0)
    });
    relay.stop();
    assert_eq!(
        s.state_header().map(|h| h.0).as_deref(),
        Some("final"),
        "SIGTERM writes the final state\n{}",
        relay.log_tail(20)
    );

    let mut relay = s.start();
    // What was read is at once a checkpoint of this run, so a crash now would be told apart.
    assert_eq!(s.state_header().map(|h| h.0).as_deref(), Some("checkpoint"));
    assert_eq!(
        s.metric("anthracite_aggregator_unclean_restarts_total", &[]),
        Some(0.0)
    );
    s.send_second_and_expect_both(&mut relay, &first, &second, interval);
}

/// The drop-in (`--carbon-config --aggregator`) keeps its open intervals across SIGTERM too:
/// carbon.conf names no spill directory, so the state goes under carbon's `STORAGE_DIR`
/// (`<root>/storage` for `<root>/conf/carbon.conf`), one directory per instance.
#[test]
fn the_drop_in_keeps_open_intervals_under_storage_dir() {
    let s = Setup::new("");
    let conf_dir = s.dir.path().join("conf");
    std::fs::create_dir_all(&conf_dir).expect("conf dir");
    std::fs::write(conf_dir.join("aggregation-rules.conf"), RULES).expect("write rules");
    let pickle = free_ports(1)[0];
    std::fs::write(
        conf_dir.join("carbon.conf"),
        format!(
            "[aggregator]\nLINE_RECEIVER_INTERFACE = 127.0.0.1\nLINE_RECEIVER_PORT = {}\n\
             PICKLE_RECEIVER_INTERFACE = 127.0.0.1\nPICKLE_RECEIVER_PORT = {pickle}\n\
             DESTINATIONS = 127.0.0.1:{}:a\nWRITE_BACK_FREQUENCY = 1\nCARBON_METRIC_INTERVAL = 0\n",
            s.line.port(),
            s.sink.port()
        ),
    )
    .expect("write carbon.conf");
    let state = s
        .dir
        .path()
        .join("storage")
        .join("anthracite-aggregator-b")
        .join("aggregator.state");
    let start = |run: &str| {
        let mut child = crate::anthracite("anthracite --aggregator")
            .arg("run")
            .arg("--carbon-config")
            .arg(conf_dir.join("carbon.conf"))
            .args(["--aggregator", "--instance", "b"])
            .env("NO_COLOR", "1")
            .env_remove("GRAPHITE_STORAGE_DIR")
            .env_remove("GRAPHITE_ROOT")
            .log(s.dir.path().join(format!("drop-in-{run}.log")))
            .start();
        s.wait_for(&mut child, "the line receiver", || {
            std::net::TcpStream::connect_timeout(&s.line, Duration::from_millis(200)).is_ok()
        });
        child
    };
    let now = testkit::unix_now();
    let interval = (now - now.rem_euclid(60)) as f64;
    let first = [0.1, 0.2, 7.0];
    let second = [0.3, -2.5];
    let mut relay = start("1");
    send_lines(s.line, &points(&first, 0, interval));
    s.wait_for(&mut relay, "the first aggregate", || {
        s.last("agg.sum", interval).is_some()
    });
    relay.stop();
    assert!(
        state.exists(),
        "SIGTERM writes {}\n{}",
        state.display(),
        relay.log_tail(20)
    );
    let mut relay = start("2");
    s.send_second_and_expect_both(&mut relay, &first, &second, interval);
    relay.stop();
}

/// A SIGKILL loses what was aggregated after the last checkpoint, for the open intervals only,
/// and the next start says so and counts it. Run 1 checkpoints periodically and is killed; run 2
/// restores that checkpoint (an unclean restart), re-checkpoints what it restored at once, gets
/// more values and is killed before its next checkpoint (an hour away); run 3 restores the
/// checkpoint of run 2 and gets the last values. The interval's final value is the reference
/// aggregate over run 1's and run 3's values: run 2's values are the loss.
#[test]
fn sigkill_loses_only_what_came_after_the_last_checkpoint_and_counts_it() {
    let s = Setup::new("checkpoint_interval_secs = 0.5\n");
    let now = testkit::unix_now();
    let interval = (now - now.rem_euclid(60)) as f64;
    let first = [1e16, 1.0, 0.25, -0.0];
    let lost = [7.0, -3.0];
    let last = [-1e16, 3.5, 2.0];
    let rules = RULES.lines().count() as u64;
    let unclean = |s: &Setup| {
        (
            s.metric("anthracite_aggregator_unclean_restarts_total", &[]),
            s.metric(
                "anthracite_aggregator_checkpoint_restored_intervals_total",
                &[],
            ),
        )
    };

    let mut relay = s.start();
    send_lines(s.line, &points(&first, 0, interval));
    s.wait_for(
        &mut relay,
        "a periodic checkpoint holding the first values",
        || s.state_header() == Some(("checkpoint".into(), rules * first.len() as u64)),
    );
    relay.kill();

    s.configure("checkpoint_interval_secs = 3600\n");
    let mut relay = s.start();
    assert_eq!(unclean(&s), (Some(1.0), Some(rules as f64)));
    let warning = "ended without writing its aggregator state";
    assert!(
        relay.log_tail(50).contains(warning),
        "{}",
        relay.log_tail(50)
    );
    // Restored, and at once checkpointed again by this run.
    assert_eq!(
        s.state_header(),
        Some(("checkpoint".into(), rules * first.len() as u64))
    );
    send_lines(s.line, &points(&lost, first.len(), interval));
    let held = rules * (first.len() + lost.len()) as u64;
    s.wait_for(&mut relay, "the lost values to be aggregated", || {
        s.metric("anthracite_aggregator_buffered_datapoints", &[]) == Some(held as f64)
    });
    relay.kill();
    assert_eq!(
        s.state_header(),
        Some(("checkpoint".into(), rules * first.len() as u64)),
        "no checkpoint after the lost values"
    );

    let mut relay = s.start();
    assert_eq!(unclean(&s), (Some(1.0), Some(rules as f64)));
    assert!(relay.log_tail(50).contains(warning));
    send_lines(s.line, &points(&last, first.len() + lost.len(), interval));
    let kept: Vec<f64> = first.iter().chain(&last).copied().collect();
    let want = expected(&kept, interval);
    s.wait_for(&mut relay, "the aggregates over runs 1 and 3", || {
        want.iter()
            .all(|(name, bits)| s.last(name, interval) == Some(*bits))
    });
    let everything: Vec<f64> = first.iter().chain(&lost).chain(&last).copied().collect();
    assert_ne!(
        expected(&everything, interval),
        want,
        "the test tells the lost values apart"
    );
    let without_checkpoint = expected(&last, interval);
    assert_ne!(
        without_checkpoint, want,
        "the test tells a restored checkpoint from none"
    );
}

#[test]
fn series_past_the_bound_are_dropped_and_counted() {
    let s = Setup::new("max_series = 3\n");
    std::fs::write(
        s.dir.path().join("rules.conf"),
        "out.<x> (60) = sum in.<x>\n",
    )
    .expect("write rules");
    let mut relay = s.start();
    let now = testkit::unix_now();
    let points: Vec<(String, i64, f64)> = (0..20).map(|i| (format!("in.n{i}"), now, 1.0)).collect();
    send_lines(s.line, &points);
    s.wait_for(&mut relay, "the drops to be counted", || {
        let m = s.metrics();
        value(
            &m,
            "anthracite_aggregator_dropped_total",
            &[("reason", "series_limit")],
        ) == Some(17.0)
    });
    let m = s.metrics();
    assert_eq!(value(&m, "anthracite_aggregator_series", &[]), Some(3.0));
    // Forwarded all the same (FORWARD_ALL).
    s.wait_for(&mut relay, "the originals", || {
        s.sink
            .received()
            .iter()
            .filter(|r| r.path.starts_with("in."))
            .count()
            == 20
    });
}

/// Far more output series than `max_series` (150,000 outputs, 300,000 datapoints over 300,000
/// input names, one connection): the aggregator holds `max_series` of them, the rule-verdict
/// cache `max_cached_names` names and the intervals `max_intervals_held`, so the process's peak
/// resident set (`VmHWM`) stays within the figure of docs/migrating.md for this configuration, and every
/// datapoint past the bound is counted as a `series_limit` drop in `/metrics` and in the carbon
/// self-metrics.
#[test]
fn more_output_series_than_the_bound_keep_peak_rss_within_the_readme_figure() {
    const MIB: u64 = 1 << 20;
    const MAX_SERIES: u64 = 10_000;
    const OUTPUTS: u64 = 150_000;
    const INPUTS_PER_OUTPUT: u64 = 2;
    let s = Setup::new("");
    s.configure_with(
        "interval_secs = 1\nhost = \"mtest\"",
        &format!(
            "forward_all = false\nmax_series = {MAX_SERIES}\nmax_intervals_held = {MAX_SERIES}\n\
             max_cached_names = {MAX_SERIES}\nmax_values = {MAX_SERIES}\n"
        ),
    );
    std::fs::write(
        s.dir.path().join("rules.conf"),
        "out.<x> (60) = sum in.<x>.*\n",
    )
    .expect("write rules");
    let mut relay = s.start();
    let baseline = testkit::process::peak_rss(relay.pid());
    let now = testkit::unix_now();
    let points: Vec<(String, i64, f64)> = (0..OUTPUTS)
        .flat_map(|o| (0..INPUTS_PER_OUTPUT).map(move |i| (format!("in.n{o:06}.{i}"), now, 1.0)))
        .collect();
    send_lines(s.line, &points);
    // The first MAX_SERIES outputs (one connection: arrival order) take every datapoint of
    // theirs; every datapoint of the others is a drop.
    let excess = (OUTPUTS - MAX_SERIES) * INPUTS_PER_OUTPUT;
    let dropped = |s: &Setup| {
        s.metric(
            "anthracite_aggregator_dropped_total",
            &[("reason", "series_limit")],
        )
    };
    s.wait_for(&mut relay, "every datapoint aggregated or dropped", || {
        s.metric("anthracite_aggregator_buffered_datapoints", &[])
            == Some((MAX_SERIES * INPUTS_PER_OUTPUT) as f64)
            && dropped(&s) == Some(excess as f64)
    });
    let peak = testkit::process::peak_rss(relay.pid());
    let m = s.metrics();
    assert_eq!(
        value(&m, "anthracite_aggregator_series", &[]),
        Some(MAX_SERIES as f64)
    );
    for reason in ["values_limit", "intervals_limit"] {
        assert_eq!(
            value(
                &m,
                "anthracite_aggregator_dropped_total",
                &[("reason", reason)]
            ),
            Some(0.0),
            "{reason}"
        );
    }
    // The carbon self-metric reports per interval: its values add up to the total.
    let leaf = "carbon.relays.mtest-a.aggregateDatapointsDropped.series_limit";
    s.wait_for(
        &mut relay,
        "the carbon self-metric to carry the drops",
        || {
            s.sink
                .received()
                .iter()
                .filter(|r| r.path == leaf)
                .map(|r| r.value)
                .sum::<f64>()
                == excess as f64
        },
    );
    relay.stop();
    // The figure of docs/migrating.md for this configuration ("Past carbon: bounded"): per output series
    // 1 KiB (its slot, name twice, index and timer entries, one interval's allocation), per
    // cached input name 512 bytes, per held interval 128 bytes, plus 8 MiB for the receive
    // path and allocator slack, over the idle process.
    let bound = MAX_SERIES * 1024 + MAX_SERIES * 512 + MAX_SERIES * 128 + 8 * MIB;
    eprintln!(
        "aggregator bound: peak RSS {:.1} MiB over a {:.1} MiB baseline (+{:.1} MiB); bound +{:.1} MiB",
        peak as f64 / MIB as f64,
        baseline as f64 / MIB as f64,
        (peak - baseline) as f64 / MIB as f64,
        bound as f64 / MIB as f64
    );
    assert!(
        peak <= baseline + bound,
        "peak RSS {peak} bytes is over the baseline {baseline} + the documented figure {bound}"
    );
}

#[test]
fn bad_rule_files_exit_2_at_start_and_are_refused_at_reload() {
    let s = Setup::new("reload_interval_secs = 0.2\n");
    let rules = s.dir.path().join("rules.conf");
    std::fs::write(
        &rules,
        "# ok\nout.a (60) = sum in.*\nout.b (60) = median in.*\n",
    )
    .expect("write rules");
    let out = Command::new(env!("CARGO_BIN_EXE_anthracite"))
        .args(["check", "--config"])
        .arg(s.dir.path().join("relay.toml"))
        .output()
        .expect("run anthracite check");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rules.conf") && err.contains("line 3"),
        "{err}"
    );
    assert!(err.contains("median"), "{err}");

    std::fs::write(&rules, "out.a (60) = sum in.*\n").expect("write rules");
    let mut relay = s.start();
    write_later(&rules, "out.a (60) = sum in.*\nout.b (0) = sum in.*\n");
    s.wait_for(&mut relay, "the rejected reload", || {
        value(
            &s.metrics(),
            "anthracite_aggregator_rule_reloads_total",
            &[("result", "rejected")],
        ) == Some(1.0)
    });
    // The rules in force stay.
    let now = testkit::unix_now();
    send_lines(s.line, &[("in.x".to_owned(), now, 2.0)]);
    let interval = (now - now.rem_euclid(60)) as f64;
    s.wait_for(&mut relay, "an aggregate by the old rules", || {
        s.last("out.a", interval) == Some(2.0f64.to_bits())
    });
}

/// Rewrites `path` with a modification time the watcher cannot mistake for the previous one.
fn write_later(path: &Path, text: &str) {
    thread::sleep(Duration::from_millis(20));
    std::fs::write(path, text).expect("rewrite rules");
}
