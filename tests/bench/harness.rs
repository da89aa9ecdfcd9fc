//! Integration tests of the bench harness over real loopback sockets. No timing assertions.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anthracite_bench::generator::{self, NameOrder, SendCounters, SendPlan};
use anthracite_bench::scenario::{Names, Overrides, Protocol, Scenario};
use anthracite_bench::{BenchArgs, RunOptions, TargetSpec, run_once};
use anthracite_sink::{Histogram, Keep, Sink, SinkConfig, SinkProtocol};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PYTHON: &str = "python3.11";

/// Runs real Python; fails loudly (never skips) when python3.11 is missing.
fn python(script: &str, stdin: Option<&[u8]>) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new(PYTHON)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{PYTHON} is required by this test (pickle frames come from real Python): {e}")
        });
    if let Some(input) = stdin
        && let Some(mut s) = child.stdin.take()
    {
        s.write_all(input).unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{PYTHON} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn names(count: usize) -> Vec<String> {
    let n = Names {
        count,
        ..Names::default()
    };
    (0..count).map(|i| generator::name(&n, i)).collect()
}

/// A sink as the harness runs one: counting (and keeping names when `record`), values read
/// as send instants on a clock started now.
fn counting(protocol: SinkProtocol, record: bool) -> SinkConfig {
    SinkConfig {
        protocol,
        keep: if record { Keep::Names } else { Keep::Count },
        clock: Some(Instant::now()),
        ..SinkConfig::default()
    }
}

fn start_sink(protocol: SinkProtocol, record: bool) -> Sink {
    Sink::bind("127.0.0.1:0".parse().unwrap(), counting(protocol, record)).unwrap()
}

/// Waits (bounded) until the sink has counted `n` datapoints, then a little longer so that
/// any surplus would show.
async fn settle(sink: &Sink, n: u64) -> u64 {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let d = sink.stats().delivered();
        if d >= n || Instant::now() > until {
            tokio::time::sleep(Duration::from_millis(100)).await;
            return sink.stats().delivered();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Datapoints with a latency measurement.
fn stamped(sink: &Sink) -> u64 {
    let mut h = Histogram::new();
    sink.stats().merge_latency_into(&mut h);
    h.count()
}

async fn generator_into_sink(protocol: Protocol, points: u64, conns: usize) {
    let sink = start_sink(SinkProtocol::Auto, true);
    let names = names(1000);
    let epoch = Instant::now();
    let counters = Arc::new(SendCounters::new());
    let mut tasks = Vec::new();
    let mut rendered = 0;
    for c in 0..conns {
        let p = generator::render(
            &names,
            NameOrder::partitioned(c, conns),
            points,
            protocol,
            333,
            1_700_000_000,
        );
        // What it sends is what it says: newlines / frames counted independently.
        match protocol {
            Protocol::Line => {
                assert_eq!(memchr::memchr_iter(b'\n', &p.bytes).count() as u64, points)
            }
            Protocol::Pickle => {
                let (mut at, mut frames) = (0, 0);
                while at < p.bytes.len() {
                    let len = u32::from_be_bytes(p.bytes[at..at + 4].try_into().unwrap());
                    at += 4 + len as usize;
                    frames += 1;
                }
                assert_eq!(at, p.bytes.len());
                assert_eq!(frames, points.div_ceil(333));
            }
        }
        rendered += p.datapoints();
        let s = TcpStream::connect(sink.addr()).await.unwrap();
        let plan = SendPlan {
            passes: Some(1),
            deadline: Instant::now() + Duration::from_secs(60),
            rate: 0.0,
        };
        tasks.push(tokio::spawn(generator::send(
            s,
            p,
            plan,
            epoch,
            counters.clone(),
        )));
    }
    let mut sent = 0;
    for t in tasks {
        sent += t.await.unwrap().unwrap().1;
    }
    let expected = points * conns as u64;
    assert_eq!(rendered, expected);
    assert_eq!(sent, expected);
    assert_eq!(counters.sent.load(Ordering::Relaxed), expected);
    assert_eq!(settle(&sink, expected).await, expected);
    assert_eq!(sink.stats().bad(), 0);
    assert_eq!(sink.stats().unstamped(), 0);
    assert_eq!(stamped(&sink), expected);
    assert_eq!(sink.stats().distinct_names(), 1000);
    sink.stop();
}

#[tokio::test]
async fn generator_line_counts_are_exact() {
    generator_into_sink(Protocol::Line, 10_007, 3).await;
}

#[tokio::test]
async fn generator_pickle_counts_are_exact() {
    generator_into_sink(Protocol::Pickle, 10_007, 3).await;
}

#[tokio::test]
async fn paced_generator_sends_exact_count() {
    let sink = start_sink(SinkProtocol::Line, false);
    let names = names(50);
    let p = generator::render(
        &names,
        NameOrder::partitioned(0, 1),
        2_000,
        Protocol::Line,
        20,
        1_700_000_000,
    );
    let s = TcpStream::connect(sink.addr()).await.unwrap();
    let plan = SendPlan {
        passes: Some(1),
        deadline: Instant::now() + Duration::from_secs(30),
        rate: 20_000.0,
    };
    let (_, sent) = generator::send(s, p, plan, Instant::now(), Arc::new(SendCounters::new()))
        .await
        .unwrap();
    assert_eq!(sent, 2_000);
    assert_eq!(settle(&sink, 2_000).await, 2_000);
    sink.stop();
}

/// carbon-style frames for every pickle protocol, from real Python, into a sink over TCP.
#[tokio::test]
async fn sink_decodes_python_pickle_protocols_0_to_5() {
    let script = r#"
import pickle, struct, sys
for proto in range(6):
    pts = [("a.b.c%d" % i, (1700000000 + i, float(i * 10))) for i in range(100)]
    pts.append((b"bytes.name", (1700000000, 7)))    # bytes name, int value
    p = pickle.dumps(pts, protocol=proto)
    sys.stdout.buffer.write(struct.pack("!L", len(p)) + p)
"#;
    let frames = python(script, None);
    let mut at = 0;
    let mut chunks = Vec::new();
    while at < frames.len() {
        let len = u32::from_be_bytes(frames[at..at + 4].try_into().unwrap()) as usize;
        chunks.push(&frames[at..at + 4 + len]);
        at += 4 + len;
    }
    assert_eq!(chunks.len(), 6);
    for (proto, frame) in chunks.iter().enumerate() {
        let sink = start_sink(SinkProtocol::Auto, true);
        let mut s = TcpStream::connect(sink.addr()).await.unwrap();
        // Split inside the length prefix: partial frames must wait for the rest.
        let (head, tail) = frame.split_at(3);
        s.write_all(head).await.unwrap();
        s.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        s.write_all(tail).await.unwrap();
        s.shutdown().await.unwrap();
        assert_eq!(settle(&sink, 101).await, 101, "protocol {proto}");
        assert_eq!(sink.stats().bad(), 0, "protocol {proto}");
        let names = sink.stats().with_names(|n| n.clone());
        assert!(names.contains(&b"a.b.c42"[..]), "protocol {proto}");
        assert!(names.contains(&b"bytes.name"[..]), "protocol {proto}");
        // Every value was read: as a latency when it could be a send instant, else counted.
        let unstamped = sink.stats().unstamped();
        assert_eq!(stamped(&sink) + unstamped, 101, "protocol {proto}");
        sink.stop();
    }
}

#[tokio::test]
async fn sink_counts_lines_and_rejects_malformed_ones() {
    let sink = start_sink(SinkProtocol::Auto, false);
    let mut s = TcpStream::connect(sink.addr()).await.unwrap();
    s.write_all(b"a.b 1.5 1700000000\r\nc.d 2 1700000000\nbad line\n")
        .await
        .unwrap();
    s.shutdown().await.unwrap();
    assert_eq!(settle(&sink, 2).await, 2);
    assert_eq!(sink.stats().bad(), 1);
    sink.stop();
}

/// The generator's pickle frames are what carbon's unpickler expects.
#[test]
fn generator_pickle_frames_load_in_python() {
    let names = names(10);
    let p = generator::render(
        &names,
        NameOrder::partitioned(0, 1),
        25,
        Protocol::Pickle,
        10,
        1_700_000_000,
    );
    let script = r#"
import pickle, struct, sys
data = sys.stdin.buffer.read()
at, n = 0, 0
while at < len(data):
    (length,) = struct.unpack("!L", data[at:at + 4])
    for name, (ts, value) in pickle.loads(data[at + 4:at + 4 + length]):
        assert isinstance(name, str) and ts == 1700000000.0 and value == 0.0, (name, ts, value)
        n += 1
    at += 4 + length
print(n)
"#;
    let out = python(script, Some(&p.bytes));
    assert_eq!(String::from_utf8_lossy(&out).trim(), "25");
}

/// A stand-in relay: forwards every byte to one sink. Lets the whole runner be exercised by
/// address without depending on anthracite's own parsing and routing.
async fn forwarder(sink: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut out) = TcpStream::connect(sink).await else {
                    return;
                };
                let mut buf = vec![0u8; 64 << 10];
                while let Ok(n) = inbound.read(&mut buf).await {
                    if n == 0 || out.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn runner_by_address_reports_zero_loss_and_a_chart() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let relay = forwarder(SocketAddr::from(([127, 0, 0, 1], port))).await;
    let scenario = Scenario::from_toml_str(
        "name = \"t\"\n[sinks]\ncount = 1\nrecord_names = true\n\
         [names]\ncount = 5000\n[limits]\nquiet_secs = 3\n",
    )
    .unwrap()
    .validate(&Overrides {
        datapoints: Some(20_000),
        ..Default::default()
    })
    .unwrap();
    let opts = RunOptions {
        sink_ports: vec![port],
        ..Default::default()
    };
    let spec = TargetSpec::Address {
        addr: relay,
        pid: Some(std::process::id()),
    };
    let r = run_once(&scenario, &spec, &opts).await.unwrap();
    assert_eq!(r.sent, 20_000);
    assert_eq!(r.delivered, 20_000, "{}", r.table());
    assert_eq!(r.lost, 0);
    assert!(r.is_consistent(), "{r:#?}");
    assert_eq!(r.latency.count, 20_000);
    assert_eq!(r.placement_conflicts, Some(0));
    assert_eq!(r.sinks[0].distinct_names, Some(5000));
    assert_eq!(r.sinks[0].expected, Some(20_000));
    assert!(r.relay_cpu_secs.is_some() && r.peak_rss_bytes.is_some());
    assert!(r.generator_ceiling_rate > 0.0);
    assert!(!r.timeline.is_empty());
    let svg = anthracite_bench::chart::render_svg(&r).unwrap();
    assert!(svg.starts_with("<svg"));
}

#[test]
fn non_loopback_target_is_refused() {
    let args = BenchArgs {
        target: "203.0.113.7:2003".into(),
        ..Default::default()
    };
    assert!(args.target_spec().is_err());
}

/// The end-to-end check: 50k datapoints through anthracite in-process, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_anthracite_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("e2e.toml");
    std::fs::write(
        &scenario,
        "name = \"e2e\"\n[load]\ndatapoints = 50000\nconnections = 2\n\
         [names]\ncount = 10000\n[sinks]\ncount = 2\nrecord_names = true\n\
         [limits]\nquiet_secs = 3\n",
    )
    .unwrap();
    let json = dir.path().join("r.json");
    let svg = dir.path().join("r.svg");
    let args = BenchArgs {
        scenario,
        target: "in-process".into(),
        json: Some(json.clone()),
        svg: Some(svg.clone()),
        no_progress: true,
        rounds: Some(1),
        ..Default::default()
    };
    let r = anthracite_bench::run(args).await.unwrap();
    assert_eq!(r.sent, 50_000);
    assert_eq!(r.delivered, 50_000, "{}", r.table());
    assert_eq!(r.lost, 0);
    assert!(r.is_consistent());
    assert_eq!(r.placement_conflicts, Some(0));
    assert!(
        r.sinks
            .iter()
            .all(|s| s.delivered > 0 && s.lost == Some(0) && s.placement_lost == Some(0)),
        "{}",
        r.table()
    );
    let l = &r.latency;
    assert_eq!(l.count, 50_000);
    assert!(l.p50_us <= l.p99_us && l.p99_us <= l.p999_us && l.p999_us <= l.max_us);
    assert!(r.relay_cpu_secs.is_some() && r.cpu_secs_per_million.is_some());
    assert!(r.capacity.is_some());
    let parsed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(parsed["delivered"], 50_000);
    assert!(parsed["latency"]["p99_us"].is_u64());
    assert!(std::fs::read_to_string(svg).unwrap().starts_with("<svg"));
}

/// A down sink drops its connections and refuses new ones, then accepts on the same port.
#[tokio::test]
async fn down_sink_refuses_then_accepts_on_the_same_port() {
    let sink = start_sink(SinkProtocol::Auto, false);
    let before = TcpStream::connect(sink.addr()).await.unwrap();
    sink.schedule_outage(Duration::ZERO, Duration::from_secs(1));
    // Bounded wait for the refusal, then for the re-bind; no timing is asserted.
    let until = Instant::now() + Duration::from_secs(10);
    let mut refused = false;
    let mut accepted_again = false;
    while Instant::now() < until {
        match TcpStream::connect(sink.addr()).await {
            Err(_) => refused = true,
            Ok(mut s) if refused => {
                s.write_all(b"a.b 1 1700000000\n").await.unwrap();
                s.shutdown().await.unwrap();
                accepted_again = true;
                break;
            }
            Ok(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "the sink never refused a connection");
    assert!(accepted_again, "the sink never came back");
    assert_eq!(settle(&sink, 1).await, 1);
    drop(before);
    sink.stop();
}

/// A slow sink still counts every datapoint exactly.
#[tokio::test]
async fn slow_sink_counts_exactly() {
    let sink = Sink::bind(
        "127.0.0.1:0".parse().unwrap(),
        SinkConfig {
            slow_bytes_per_sec: Some(200_000),
            ..counting(SinkProtocol::Auto, false)
        },
    )
    .unwrap();
    let p = generator::render(
        &names(100),
        NameOrder::partitioned(0, 1),
        3_000,
        Protocol::Pickle,
        100,
        1_700_000_000,
    );
    let s = TcpStream::connect(sink.addr()).await.unwrap();
    let plan = SendPlan {
        passes: Some(1),
        deadline: Instant::now() + Duration::from_secs(30),
        rate: 0.0,
    };
    let (_, sent) = generator::send(s, p, plan, Instant::now(), Arc::new(SendCounters::new()))
        .await
        .unwrap();
    assert_eq!(sent, 3_000);
    assert_eq!(settle(&sink, 3_000).await, 3_000);
    sink.stop();
}

/// `--compare` against a relay started as a process (another anthracite, by PID) and the
/// in-process one: both lose nothing, the process is measured from /proc, ratios exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_in_process_against_an_anthracite_process() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("cmp.toml");
    std::fs::write(
        &scenario,
        "name = \"cmp\"\n[load]\ndatapoints = 20000\nconnections = 2\n\
         [names]\ncount = 2000\n[sinks]\ncount = 2\n[limits]\nquiet_secs = 3\n",
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_anthracite");
    let args = BenchArgs {
        scenario,
        compare: vec![
            "inproc=in-process".into(),
            format!("proc={bin} --config {{config:bench/relays/anthracite.toml}}"),
        ],
        rounds: Some(1),
        no_progress: true,
        ..Default::default()
    };
    let r = anthracite_bench::run(args).await.unwrap();
    let c = r.comparison.expect("comparison attached");
    assert_eq!(c.entries.len(), 2);
    assert!(c.entries.iter().all(|e| e.lost == 0), "{}", c.table());
    let proc_entry = c.entries.iter().find(|e| e.name == "proc").unwrap();
    assert!(proc_entry.cpu_secs_per_million.is_some());
    assert_eq!(c.ratios.len(), 1);
    assert_eq!(c.ratios[0].throughput.len(), 1);
}

/// The rule of `bench::sweep`, recomputed from a JSON row: nothing lost, p99 within target,
/// and the rate really offered.
fn meets_target(row: &serde_json::Value, p99_target_ms: f64) -> bool {
    let offered = row["offered_rate"].as_f64().unwrap();
    row["lost"].as_i64().unwrap() <= 0
        && row["sent"].as_u64().unwrap() > 0
        && row["p99_us"]
            .as_u64()
            .is_some_and(|p| p as f64 <= p99_target_ms * 1e3)
        && row["send_rate"].as_f64().unwrap() >= 0.95 * offered
}

/// Checks a sweep's JSON: one row per (rate, relay) in order, counts that add up, and each
/// knee the highest rate meeting the target. Returns the knees by relay.
fn check_sweep_json(json: &serde_json::Value, rates: &[f64], relays: &[&str]) -> Vec<Option<f64>> {
    let target = json["p99_target_ms"].as_f64().unwrap();
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), rates.len() * relays.len(), "{json:#}");
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["offered_rate"].as_f64(), Some(rates[i / relays.len()]));
        assert_eq!(row["target"].as_str(), Some(relays[i % relays.len()]));
        let (sent, delivered) = (
            row["sent"].as_u64().unwrap(),
            row["delivered"].as_u64().unwrap(),
        );
        assert!(sent > 0 && delivered <= sent, "{row:#}");
        assert_eq!(row["lost"].as_i64(), Some(sent as i64 - delivered as i64));
        let verdict_ok = row["verdict"] == "ok";
        assert_eq!(verdict_ok, meets_target(row, target), "{row:#}");
    }
    let knees: Vec<Option<f64>> = relays
        .iter()
        .map(|relay| {
            rows.iter()
                .filter(|r| r["target"] == *relay && meets_target(r, target))
                .filter_map(|r| r["offered_rate"].as_f64())
                .max_by(f64::total_cmp)
        })
        .collect();
    for (relay, knee) in relays.iter().zip(&knees) {
        let reported = json["knees"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["target"] == *relay)
            .unwrap();
        assert_eq!(reported["rate"].as_f64(), *knee, "{relay}: {json:#}");
    }
    assert_eq!(json["knee"].as_f64(), knees[0]);
    knees
}

const SMALL_SWEEP: &str = "name = \"small-sweep\"\n\
    [load]\ndatapoints = 2000\nconnections = 2\n\
    [names]\ncount = 500\n[sinks]\ncount = 2\n\
    [limits]\nquiet_secs = 2\n\
    [sweep]\nrates = [8000, 2000, 4000]\nstep_secs = 0.5\np99_target_ms = 1000\n";

/// `anthracite bench SCENARIO --sweep --json --svg`, as a user runs it (stderr a pipe): the
/// table with a row per rate, the knee line last, progress lines on stderr, JSON whose knee
/// follows from its rows, and an SVG with the latency and loss series.
#[test]
fn sweep_prints_rows_and_knee_and_writes_json_and_svg() {
    // `anthracite bench` runs the harness beside `anthracite`.
    anthracite_testkit::cargo::workspace_binary("anthracite-bench");
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("small-sweep.toml");
    std::fs::write(&scenario, SMALL_SWEEP).unwrap();
    let (json, svg) = (dir.path().join("s.json"), dir.path().join("s.svg"));
    let out = Command::new(env!("CARGO_BIN_EXE_anthracite"))
        .arg("bench")
        .arg(&scenario)
        .arg("--sweep")
        .arg("--json")
        .arg(&json)
        .arg("--svg")
        .arg(&svg)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");

    let parsed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let knees = check_sweep_json(&parsed, &[2000.0, 4000.0, 8000.0], &["in-process"]);

    // The table: a header, one row per rate in ascending order, the knee line last.
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("sweep small-sweep: 3 rates"),
        "{stdout}"
    );
    let rows: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.trim_start().starts_with("in-process"))
        .collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    for (row, rate) in rows.iter().zip(["2.0k", "4.0k", "8.0k"]) {
        assert_eq!(row.split_whitespace().nth(1), Some(rate), "{stdout}");
    }
    let expected_knee = match knees[0] {
        Some(r) => format!("knee: {r:.0} datapoints/s"),
        None => "knee: none (no rate met the target)".into(),
    };
    assert_eq!(
        lines.last().copied(),
        Some(expected_knee.as_str()),
        "{stdout}"
    );

    // stderr is not a terminal: progress lines, one run start per rate at least.
    let starts = stderr.lines().filter(|l| l.contains("sending")).count();
    assert_eq!(starts, 3, "{stderr}");
    let done = stderr
        .lines()
        .filter(|l| l.contains(": done after"))
        .count();
    assert_eq!(done, 3, "{stderr}");

    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    for series in ["p50", "p99", "loss %", "p99 target 1000 ms"] {
        assert!(svg.contains(series), "no {series:?} in the SVG");
    }
    assert!(svg.matches("<polyline").count() >= 3, "{svg}");
}

/// `--sweep --compare`: every relay at every rate, alternating at each rate, one combined
/// table and a knee per relay (the in-process relay and another anthracite as a process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_compare_gives_every_relay_a_row_per_rate_and_a_knee() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("small-sweep.toml");
    std::fs::write(&scenario, SMALL_SWEEP).unwrap();
    let json = dir.path().join("c.json");
    let bin = env!("CARGO_BIN_EXE_anthracite");
    let args = BenchArgs {
        scenario,
        sweep: true,
        rates: Some(vec![4000.0, 2000.0]),
        compare: vec![
            "inproc=in-process".into(),
            format!("proc={bin} --config {{config:bench/relays/anthracite.toml}}"),
        ],
        json: Some(json.clone()),
        no_progress: true,
        ..Default::default()
    };
    let anthracite_bench::Swept::Rates(r) = anthracite_bench::run_sweep(args).await.unwrap() else {
        panic!("a sweep over rates reports rates");
    };
    assert!(r.is_consistent(), "{}", r.table());
    assert_eq!(r.targets, ["inproc", "proc"]);
    let parsed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    check_sweep_json(&parsed, &[2000.0, 4000.0], &["inproc", "proc"]);
    // The process is measured from /proc like any other relay command.
    assert!(
        r.rows
            .iter()
            .filter(|row| row.target == "proc")
            .all(|row| row.cpu_secs_per_million.is_some() && row.peak_rss_bytes.is_some()),
        "{}",
        r.table()
    );
    let table = r.table();
    assert!(
        table.contains("knee: ") && table.contains("(proc)"),
        "{table}"
    );
    assert!(
        table
            .trim_end()
            .lines()
            .last()
            .unwrap()
            .ends_with("(inproc)"),
        "{table}"
    );
}
