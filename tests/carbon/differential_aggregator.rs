//! anthracite as carbon-aggregator against the real `carbon-aggregator.py` 1.1.10: the same
//! carbon.conf (`[aggregator]`), aggregation-rules.conf and rewrite-rules.conf, the same input
//! sent to both at the same moments, captured at carbon-cache stand-ins (counting sinks). For
//! every `(destination, name, interval)` the last value delivered must be identical, and so
//! must the sets of `(destination, name, interval)`.
//!
//! The input covers every method, several rules per name, `<<field>>`, two rules producing one
//! output, a name that is itself an aggregate output, `[pre]` and `[post]` rewrites with group
//! references, values whose sum depends on the order of addition, and late datapoints inside
//! and outside the window of `MAX_AGGREGATION_INTERVALS`. `FORWARD_ALL` on and off run side
//! by side (four daemons at once). Frequency 5 s, `WRITE_BACK_FREQUENCY` 1 s and a window of
//! 2 intervals keep the run to about fifteen seconds.
//!
//! Output templates carbon's `%` formatting raises on, or formats surprisingly, each on names
//! that rules before and after it match too: a `TypeError` (`%d`, and `%c` of a field longer
//! than one character) only skips its rule; a `KeyError` (`<<path>>` in the output, a field
//! the input lacks) or a `ValueError` (a trailing `%`) stops the datapoint at the rule (the
//! rules after it and `FORWARD_ALL` never see it); `%s` writes the whole groupdict, `%%` a
//! `%`, `%(x)r` the field's repr. Both daemons report their self-metrics every second (names
//! under `carbon.`, left out of the comparison); anthracite's
//! `aggregateTemplateFailures.{rule_skipped,datapoint_stopped}` must add up to the datapoints
//! of those families.
//!
//! Timing: the run starts at the beginning of a 5-second interval `base`, so every "current"
//! datapoint falls in `base` or before and nothing the test sends in time lands on an
//! interval boundary race. Datapoints for `base - 60` are older than the window: each daemon
//! sends that interval once at its next tick and frees it; the batch sent 2.5 s later starts
//! again from empty in both.

use std::collections::BTreeMap;
use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use anthracite_testkit as testkit;

use anthracite_sink::{Sink, SinkProtocol};
use testkit::RelayProcess;
use testkit::carbon::CarbonAggregator;
use testkit::{free_ports, send_lines};

const FREQUENCY: i64 = 5;
/// Where both daemons' self-metrics go (`CARBON_METRIC_PREFIX`).
const SELF_METRICS: &str = "carbon.";

const RULES: &str = "\
# every method over the hosts of an app
agg.<app>.requests.sum (5) = sum svc.<app>.<host>.requests
agg.<app>.requests.avg (5) = avg svc.<app>.<host>.requests
agg.<app>.requests.min (5) = min svc.<app>.<host>.requests
agg.<app>.requests.max (5) = max svc.<app>.<host>.requests
agg.<app>.requests.count (5) = count svc.<app>.<host>.requests
agg.<app>.requests.p50 (5) = p50 svc.<app>.<host>.requests
agg.<app>.requests.p75 (5) = p75 svc.<app>.<host>.requests
agg.<app>.requests.p80 (5) = p80 svc.<app>.<host>.requests
agg.<app>.requests.p90 (5) = p90 svc.<app>.<host>.requests
agg.<app>.requests.p95 (5) = p95 svc.<app>.<host>.requests
agg.<app>.requests.p99 (5) = p99 svc.<app>.<host>.requests
agg.<app>.requests.p999 (5) = p999 svc.<app>.<host>.requests

# <<field>> spans dots
agg.deep.<path>.total (5) = sum deep.<<path>>.leaf

# two rules, one output (the first fixes the method; both add)
agg.shared.total (5) = sum svc.<app>.<host>.requests
agg.shared.total (5) = max other.<x>.requests

# an output that its own input pattern matches (svc.web.all.requests is not forwarded)
svc.<app>.all.requests (5) = sum svc.<app>.<host>.requests

# output templates carbon's formatting fails on, with rules before and after on the same names
tk.before.<app> (5) = sum tk.<app>.<host>.hits
tk.%d.<app> (5) = sum tk.<app>.<host>.hits
tk.after.<app> (5) = avg tk.<app>.<host>.hits
tv.before.<app> (5) = sum tv.<app>.<host>.hits
tv.<app>.100% (5) = sum tv.<app>.<host>.hits
tv.after.<app> (5) = sum tv.<app>.<host>.hits
tf.before.<app> (5) = max tf.<app>.<host>.hits
tf.<app>.<zone> (5) = sum tf.<app>.<host>.hits
tf.after.<app> (5) = sum tf.<app>.<host>.hits
apps.<team>.before (5) = sum apps.<team>.<<path>>.*.count
apps.<team>.<<path>>.rollup (5) = avg apps.<team>.<<path>>.*.count
apps.<team>.after (5) = sum apps.<team>.<<path>>.*.count
tc.%(host)c (5) = sum tc.<host>.hits
tc.after (5) = count tc.<host>.hits
# ... and ones it formats: the whole groupdict, a literal %, a repr
td.%s (5) = max td.<app>.<host>.hits
td.100%%.<app> (5) = count td.<app>.<host>.hits
td.%(app)r (5) = sum td.<app>.<host>.hits
";

const REWRITE: &str = "\
[pre]
^raw\\.(\\w+)\\.(\\w+)\\.requests$ = svc.\\1.\\2.requests
[post]
^svc\\.(?P<app>\\w+)\\. = fwd.\\g<app>.
^other\\.(\\w+) = other.renamed_\\1
";

/// One daemon under test with its two destination stand-ins.
struct Daemon {
    label: String,
    line: SocketAddr,
    sinks: Vec<Sink>,
    process: Process,
}

enum Process {
    Carbon(CarbonAggregator),
    Anthracite(RelayProcess),
}

impl Daemon {
    fn start(dir: &Path, label: &str, forward_all: bool, anthracite: bool) -> Daemon {
        let root = dir.join(label);
        let conf_dir = root.join("conf");
        fs::create_dir_all(&conf_dir).expect("create conf dir");
        fs::create_dir_all(root.join("storage").join("log")).expect("create storage/log");
        let sinks: Vec<Sink> = ["a", "b"]
            .iter()
            .map(|i| Sink::start(&format!("{label}:{i}"), SinkProtocol::Pickle))
            .collect();
        let ports = free_ports(2);
        let conf = format!(
            "[aggregator]\n\
             LINE_RECEIVER_INTERFACE = 127.0.0.1\n\
             LINE_RECEIVER_PORT = {}\n\
             PICKLE_RECEIVER_INTERFACE = 127.0.0.1\n\
             PICKLE_RECEIVER_PORT = {}\n\
             ENABLE_UDP_LISTENER = False\n\
             DESTINATIONS = 127.0.0.1:{}:a, 127.0.0.1:{}:b\n\
             FORWARD_ALL = {}\n\
             MAX_AGGREGATION_INTERVALS = 2\n\
             WRITE_BACK_FREQUENCY = 1\n\
             CARBON_METRIC_INTERVAL = 1\n\
             MAX_QUEUE_SIZE = 100000\n",
            ports[0],
            ports[1],
            sinks[0].port(),
            sinks[1].port(),
            if forward_all { "True" } else { "False" },
        );
        let path = conf_dir.join("carbon.conf");
        fs::write(&path, conf).expect("write carbon.conf");
        fs::write(conf_dir.join("aggregation-rules.conf"), RULES).expect("write rules");
        fs::write(conf_dir.join("rewrite-rules.conf"), REWRITE).expect("write rewrite rules");
        fs::write(
            conf_dir.join("storage-schemas.conf"),
            testkit::carbon::STORAGE_SCHEMAS,
        )
        .expect("write storage-schemas.conf");
        let process = if anthracite {
            Process::Anthracite(start_anthracite(&root, &path, &ports))
        } else {
            Process::Carbon(CarbonAggregator::start(&root, &path, &ports))
        };
        Daemon {
            label: label.to_owned(),
            line: SocketAddr::from(([127, 0, 0, 1], ports[0])),
            sinks,
            process,
        }
    }

    /// anthracite's whole log (empty for carbon).
    fn anthracite_log(&self) -> String {
        match &self.process {
            Process::Carbon(_) => String::new(),
            Process::Anthracite(a) => a.log(),
        }
    }

    fn log_tail(&self) -> String {
        match &self.process {
            Process::Carbon(c) => c.log_tail(40),
            Process::Anthracite(a) => a.log_tail(40),
        }
    }

    fn assert_running(&mut self) {
        match &mut self.process {
            Process::Carbon(c) => c.assert_running("the run to finish"),
            Process::Anthracite(a) => a.assert_running("the run to finish"),
        }
    }

    /// `(destination, name, interval bits) → last value bits`, `-0.0` as `0.0` (the sinks'
    /// normalisation: pickle keeps the sign, but a consumer's storage does not); self-metrics
    /// left out.
    fn last_values(&self) -> BTreeMap<(String, String, u64), u64> {
        let mut out = BTreeMap::new();
        for (dest, sink) in ["a", "b"].iter().zip(&self.sinks) {
            for r in sink.received() {
                if r.path.starts_with(SELF_METRICS) {
                    continue;
                }
                let (path, ts, value) = r.key();
                out.insert((dest.to_string(), path, ts), value);
            }
        }
        out
    }

    /// Datapoints delivered, self-metrics left out.
    fn total(&self) -> usize {
        self.sinks
            .iter()
            .flat_map(Sink::received)
            .filter(|r| !r.path.starts_with(SELF_METRICS))
            .count()
    }

    /// The sum of every self-metric datapoint whose name ends in `.{leaf}`.
    fn self_metric_sum(&self, leaf: &str) -> f64 {
        let suffix = format!(".{leaf}");
        self.sinks
            .iter()
            .flat_map(Sink::received)
            .filter(|r| r.path.starts_with(SELF_METRICS) && r.path.ends_with(&suffix))
            .map(|r| r.value)
            .sum()
    }
}

fn start_anthracite(root: &Path, conf: &Path, ports: &[u16]) -> RelayProcess {
    let mut relay = crate::anthracite("anthracite --aggregator")
        .arg("run")
        .arg("--carbon-config")
        .arg(conf)
        .arg("--aggregator")
        .env("NO_COLOR", "1")
        .log(root.join("storage").join("log").join("anthracite.log"))
        .start();
    relay.wait_listening(ports);
    relay
}

/// Deterministic input: every name family the rules cover, plus names no rule matches.
fn batch(base: i64, phase: u32) -> Vec<(String, i64, f64)> {
    // Sums of these depend on the order they are added in.
    let values = [
        1e16, 1.0, -1e16, 0.1, 0.2, 0.3, -0.0, 3.5, 7.25, -2.0, 1e-9, 42.0,
    ];
    let mut out = Vec::new();
    let mut k = phase as usize * 5;
    let mut next = || {
        k += 1;
        values[(k * 7) % values.len()]
    };
    let (current, inside, outside) = (base, base - 3, base - 60);
    let stamps: &[i64] = match phase {
        0 => &[current, current + 1, current + 4],
        1 => &[current + 2, inside, outside],
        _ => &[inside, outside, outside + 1],
    };
    for &ts in stamps {
        for app in ["web", "api", "db"] {
            for host in 0..4 {
                out.push((format!("svc.{app}.h{host}.requests"), ts, next()));
                out.push((format!("raw.{app}.r{host}.requests"), ts, next()));
            }
        }
        out.push(("svc.web.all.requests".into(), ts, next()));
        for path in ["a.b.c", "x", "a.b"] {
            out.push((format!("deep.{path}.leaf"), ts, next()));
        }
        for x in ["p", "q"] {
            out.push((format!("other.{x}.requests"), ts, next()));
        }
        out.push(("unmatched.metric".into(), ts, next()));
        for family in ["tk", "tv", "tf", "td"] {
            for app in ["web", "api"] {
                for host in 0..2 {
                    out.push((format!("{family}.{app}.h{host}.hits"), ts, next()));
                }
            }
        }
        for path in ["a.b", "c"] {
            out.push((format!("apps.t1.{path}.h0.count"), ts, next()));
        }
        for host in ["a", "bb"] {
            out.push((format!("tc.{host}.hits"), ts, next()));
        }
    }
    out
}

/// How many datapoints of `points` meet a rule whose template carbon's formatting raises on:
/// `(rule skipped, datapoint stopped)`.
fn template_failures(points: &[(String, i64, f64)]) -> (u64, u64) {
    let count = |f: &dyn Fn(&str) -> bool| points.iter().filter(|p| f(&p.0)).count() as u64;
    let skipped = count(&|n| n.starts_with("tk.") || n == "tc.bb.hits");
    let stopped =
        count(&|n| n.starts_with("tv.") || n.starts_with("tf.") || n.starts_with("apps."));
    (skipped, stopped)
}

fn wait_quiet(daemons: &mut [Daemon]) {
    let quiet = Duration::from_secs(3);
    let deadline = Instant::now() + Duration::from_secs(60);
    let total = |d: &[Daemon]| d.iter().map(Daemon::total).sum::<usize>();
    let mut last = total(daemons);
    let mut since = Instant::now();
    while since.elapsed() < quiet {
        thread::sleep(Duration::from_millis(100));
        for d in daemons.iter_mut() {
            d.assert_running();
        }
        let now = total(daemons);
        if now != last {
            last = now;
            since = Instant::now();
        }
        assert!(Instant::now() < deadline, "sinks never went quiet");
    }
}

fn sleep_until(t: f64) {
    let now = now_f64();
    if t > now {
        thread::sleep(Duration::from_secs_f64(t - now));
    }
}

fn now_f64() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn diff(
    label: &str,
    carbon: &BTreeMap<(String, String, u64), u64>,
    ours: &BTreeMap<(String, String, u64), u64>,
) -> String {
    let mut msg = String::new();
    for (k, v) in carbon {
        match ours.get(k) {
            None => msg.push_str(&format!(
                "  {label}: only carbon: {} {} @{} = {}\n",
                k.0,
                k.1,
                f64::from_bits(k.2),
                f64::from_bits(*v)
            )),
            Some(o) if o != v => msg.push_str(&format!(
                "  {label}: {} {} @{}: carbon {} anthracite {}\n",
                k.0,
                k.1,
                f64::from_bits(k.2),
                f64::from_bits(*v),
                f64::from_bits(*o)
            )),
            _ => {}
        }
    }
    for (k, v) in ours {
        if !carbon.contains_key(k) {
            msg.push_str(&format!(
                "  {label}: only anthracite: {} {} @{} = {}\n",
                k.0,
                k.1,
                f64::from_bits(k.2),
                f64::from_bits(*v)
            ));
        }
    }
    msg
}

#[test]
fn aggregator_matches_carbon_aggregator() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut daemons = vec![
        Daemon::start(dir.path(), "carbon-forward", true, false),
        Daemon::start(dir.path(), "anthracite-forward", true, true),
        Daemon::start(dir.path(), "carbon-noforward", false, false),
        Daemon::start(dir.path(), "anthracite-noforward", false, true),
    ];
    // Start early in an interval, so the whole run's "current" data is in `base`.
    let now = now_f64();
    let mut base = (now as i64) - (now as i64).rem_euclid(FREQUENCY);
    if now - base as f64 > 0.3 {
        base += FREQUENCY;
        sleep_until(base as f64 + 0.05);
    }
    let start = base as f64;
    let (mut skipped, mut stopped) = (0, 0);
    for (phase, at) in [(0u32, 0.1), (1, 2.0), (2, 4.5)] {
        sleep_until(start + at);
        let points = batch(base, phase);
        let (s, t) = template_failures(&points);
        (skipped, stopped) = (skipped + s, stopped + t);
        for d in &daemons {
            send_lines(d.line, &points);
        }
    }
    wait_quiet(&mut daemons);
    let maps: Vec<_> = daemons.iter().map(Daemon::last_values).collect();
    let mut failures = String::new();
    for pair in [(0, 1), (2, 3)] {
        let (c, a) = (&daemons[pair.0], &daemons[pair.1]);
        let label = format!("{} vs {}", c.label, a.label);
        assert!(
            maps[pair.0].len() > 100,
            "{label}: carbon delivered too little to compare ({})\n{}",
            maps[pair.0].len(),
            c.log_tail()
        );
        let d = diff(&label, &maps[pair.0], &maps[pair.1]);
        if !d.is_empty() {
            failures.push_str(&d);
            failures.push_str(&format!(
                "--- {} log ---\n{}\n--- {} log ---\n{}\n",
                c.label,
                c.log_tail(),
                a.label,
                a.log_tail()
            ));
        }
    }
    // The run exercised what it claims to: aggregates of every kind, forwarded originals
    // renamed by [post], and the freed interval sent twice with different values.
    let forward = &maps[0];
    let has = |prefix: &str| forward.keys().any(|k| k.1.starts_with(prefix));
    assert!(has("agg.web.requests.p999") && has("agg.deep.a.b.c.total") && has("agg.shared.total"));
    assert!(has("fwd.web.h0.requests") && has("other.renamed_p"));
    assert!(
        has("svc.web.all.requests") && !has("fwd.web.all.requests"),
        "an aggregate output is not forwarded, and aggregates skip [post]"
    );
    assert!(
        !maps[2].keys().any(|k| k.1.starts_with("fwd.")),
        "FORWARD_ALL off forwards nothing"
    );
    // The template cases did what carbon does with them.
    assert!(has("tk.before.web") && has("tk.after.web") && has("tk.web.h0.hits"));
    assert!(
        !forward.keys().any(|k| k.1.starts_with("tk.%")),
        "TypeError: no output"
    );
    assert!(has("tv.before.web") && !has("tv.after.") && !has("tv.web."));
    assert!(has("tf.before.web") && !has("tf.after.") && !has("tf.web."));
    assert!(has("apps.t1.before") && !has("apps.t1.after") && !has("apps.t1.a.b.h0"));
    assert!(has("tc.a") && has("tc.after"));
    assert!(has("td.{'app': 'web', 'host': 'h0'}") && has("td.100%.web") && has("td.'web'"));
    // Started on the same file as carbon, warning about each such rule by its line.
    let log = daemons[1].anthracite_log();
    for rule in [
        "tk.%d.<app>",
        "tv.<app>.100%",
        "tf.<app>.<zone>",
        "apps.<team>.<<path>>.rollup",
        "tc.%(host)c",
        "td.%s",
    ] {
        let line = RULES
            .lines()
            .position(|l| l.starts_with(&format!("{rule} ")))
            .map(|i| i + 1)
            .expect("the rule is in RULES");
        assert!(
            log.contains(&format!("aggregation-rules.conf: line {line}: ")),
            "no warning naming line {line} ({rule}) in anthracite's log:\n{log}"
        );
    }
    for (label, d) in [("forward", &daemons[1]), ("noforward", &daemons[3])] {
        let counted = (
            d.self_metric_sum("aggregateTemplateFailures.rule_skipped"),
            d.self_metric_sum("aggregateTemplateFailures.datapoint_stopped"),
        );
        assert_eq!(
            counted,
            (skipped as f64, stopped as f64),
            "{label}: anthracite's template failure counters (rule_skipped, datapoint_stopped)"
        );
    }
    assert!(
        failures.is_empty(),
        "anthracite differs from carbon-aggregator 1.1.10:\n{failures}"
    );
}
