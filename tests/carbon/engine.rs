//! The differential engine: the real `carbon-relay.py` 1.1.10 and the real `anthracite` binary
//! (`anthracite run --carbon-config`) on the **same carbon.conf file**, one after the other, each
//! in front of fresh counting sinks on the destination ports, fed byte-identical input; then the
//! multisets of (destination, path, timestamp, value) they delivered are compared exactly.
//! `differential.rs` and `differential_dropin.rs` beside it hold the cases; their module docs
//! say what each proves.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anthracite_sink::{Sink, SinkProtocol};
use anthracite_testkit::RelayProcess;
use anthracite_testkit::carbon::{CarbonConf, CarbonRelay, write_carbon_conf};
use anthracite_testkit::tls::TestCa;
use anthracite_testkit::{free_ports, send_lines, send_pickle, unix_now};
/// Datapoints per chunk; chunks alternate plaintext and pickle.
const CHUNK: usize = 2_500;
/// Datapoints per pickle frame.
const PER_FRAME: usize = 500;
/// How long one chunk may take to be delivered before we stop pacing and go on (the comparison
/// then reports whatever is missing).
const CHUNK_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the sinks must see nothing new before a run counts as finished.
const QUIET: Duration = Duration::from_secs(2);
/// Bound on waiting for the sinks to go quiet.
const QUIET_TIMEOUT: Duration = Duration::from_secs(120);

/// [relay] keys every case shares: no self-metrics, queues far above the input (so carbon drops
/// nothing), flow control on (carbon's default: a full queue pauses the receivers).
pub const COMMON: &str = "MAX_QUEUE_SIZE = 1000000\n\
                      CARBON_METRIC_INTERVAL = 0\n\
                      USE_FLOW_CONTROL = True\n\
                      LOG_LISTENER_CONN_SUCCESS = False\n\
                      LOG_LISTENER_CONN_LOST = False\n";

/// One datapoint as sent: (path, timestamp, value).
pub type Point = (String, i64, f64);

/// What one relay delivered: (destination, path, timestamp bits, value bits) → copies.
type Delivered = BTreeMap<(String, String, u64, u64), usize>;

/// [relay] keys, and files for conf/ (name, contents).
pub type CaseConfig = (String, Vec<(&'static str, String)>);

/// A destination of a case: host as written in DESTINATIONS, optional instance.
pub type Dest = (&'static str, Option<&'static str>);

/// One configuration to compare.
pub struct Case {
    /// For messages and tempdir names.
    pub name: &'static str,
    /// DESTINATIONS entries (ports are allocated by the test).
    pub dests: &'static [Dest],
    /// [relay] keys of the case (besides the listener, DESTINATIONS and [`COMMON`] ones).
    pub keys: &'static str,
    /// Builds further [relay] keys besides the listener, DESTINATIONS and [`COMMON`] ones, and any
    /// extra files for conf/ (relay-rules.conf, aggregation-rules.conf), from the DESTINATIONS
    /// entries as written.
    pub config: fn(&[String]) -> CaseConfig,
    /// Datapoints to send.
    pub points: usize,
    /// The fewest copies of a datapoint with this name any correct relay delivers (pacing
    /// target and a sanity check that carbon's run is complete).
    pub min_copies: fn(&str) -> usize,
    /// Whether `min_copies` is exact (hashing without aggregation), checked on carbon's run.
    pub exact: bool,
    /// Hand-made payloads sent after the generated datapoints, each over its own connection
    /// (some make carbon close the connection), given a timestamp within the last day.
    pub raw: fn(i64) -> Vec<Payload>,
    /// Paths on which the relays are known to differ, with the copies each delivers (summed
    /// over destinations). These are asserted exactly — a change on either side fails the
    /// test — and only then left out of the multiset comparison.
    pub known_differences: &'static [KnownDifference],
    /// What the destinations speak (DESTINATION_PROTOCOL; pickle unless the case sets `line`).
    pub protocol: SinkProtocol,
    /// Transport, pooling and pacing variations (the drop-in cases).
    pub drop_in: DropIn,
}

/// What the drop-in cases vary beyond [relay] keys.
#[derive(Clone, Copy, Default)]
pub struct DropIn {
    /// Destination `i` listens on port slot `port_slots[i]` (destinations sharing a slot share
    /// `host:port` and one sink); `None`: a port each.
    pub port_slots: Option<&'static [usize]>,
    /// Sinks terminate TLS with a certificate for `localhost` and `127.0.0.1` signed by a CA
    /// made for the run, written to `conf/ca.pem`; `{conf_dir}` in the case's keys becomes the
    /// absolute conf directory.
    pub tls: bool,
    /// carbon-relay 1.1.10 refuses this carbon.conf: the test asserts that, then runs carbon on
    /// a copy with one substitution and compares anthracite's deliveries against that run.
    pub carbon_substitute: Option<CarbonSubstitute>,
    /// Datapoints per paced chunk (default [`CHUNK`]).
    pub chunk: Option<usize>,
}

/// How carbon's reference run differs when carbon refuses the shared carbon.conf.
#[derive(Clone, Copy)]
pub struct CarbonSubstitute {
    /// Text of carbon.conf replaced for carbon's run…
    pub from: &'static str,
    /// …by this.
    pub to: &'static str,
    /// What carbon's sinks speak then.
    pub protocol: SinkProtocol,
    /// What carbon-relay prints when it refuses the original.
    pub refusal: &'static str,
}

/// A documented divergence from carbon-relay 1.1.10 (docs/migrating.md material).
pub struct KnownDifference {
    pub path: &'static str,
    pub carbon: usize,
    pub anthracite: usize,
    pub why: &'static str,
}

/// Bytes for one connection to a relay's receiver.
pub enum Payload {
    /// Sent as-is to LINE_RECEIVER_PORT.
    Lines(Vec<u8>),
    /// Pickled and framed (4-byte big-endian length), one frame per value, sent to
    /// PICKLE_RECEIVER_PORT.
    Pickle(Vec<serde_pickle::Value>),
}

pub fn no_raw(_: i64) -> Vec<Payload> {
    Vec::new()
}

impl Case {
    /// A hashing case: [relay] keys only, no extra files, no hand-made payloads, every datapoint
    /// delivered exactly `copies` times, pickle destinations.
    pub fn hashing(
        name: &'static str,
        dests: &'static [Dest],
        keys: &'static str,
        points: usize,
        copies: fn(&str) -> usize,
    ) -> Case {
        Case {
            name,
            dests,
            keys,
            config: |_| (String::new(), vec![]),
            points,
            min_copies: copies,
            exact: true,
            raw: no_raw,
            known_differences: &[],
            protocol: SinkProtocol::Pickle,
            drop_in: DropIn::default(),
        }
    }
}

/// Every datapoint once.
pub fn one(_: &str) -> usize {
    1
}

/// Every datapoint twice.
pub fn two(_: &str) -> usize {
    2
}

/// The datapoints: a name pool a quarter the size of `n` (each name gets about four
/// datapoints at different timestamps), timestamps within the last day, distinct values.
fn datapoints(n: usize) -> Vec<Point> {
    let pool = (n / 4).max(1);
    let now = unix_now();
    let long_prefix: String = (0..12)
        .map(|s| format!("segment{s:02}_abcdefghijklmn"))
        .collect::<Vec<_>>()
        .join(".");
    (0..n)
        .map(|i| {
            let j = i % pool;
            let round = (i / pool) as i64;
            let name = match j % 8 {
                0 => format!("diff.plain.host{:03}.cpu.m{j}", j % 97),
                1 => format!("diff.東京.サーバー{}.温度.m{j}", j % 31),
                2 => format!("diff.emoji.🚀.🔥{}.m{j}", j % 13),
                3 => match (j / 8) % 3 {
                    0 => format!("diff.tagged.requests;host=h{};dc=北京;k=v{j}", j % 17),
                    1 => format!("~diff.tagged.requests;k=v{j};dc=北京;host=h{}", j % 17),
                    _ => format!(
                        "diff.om.requests{{host=\"h{}\",dc=\"x\",k=\"v{j}\"}}",
                        j % 17
                    ),
                },
                4 => format!("diff.long.{long_prefix}.m{j}"),
                5 => format!("Diff.WEB.Frontend{}.latency.m{j}", j % 7),
                6 => format!("diff.db.shard{}.queries.q.m{j}", j % 5),
                _ => format!("diff.web.api.{}.count.m{j}", ["get", "post", "put"][j % 3]),
            };
            let ts = now - 3_600 - round * 60 - (j % 600) as i64;
            let value = i as f64 * 0.5 - 1_234.25;
            (name, ts, value)
        })
        .collect()
}

/// Runs `case` on carbon-relay, then on anthracite, and asserts both delivered the same.
pub fn differential(case: &Case) {
    let dir = tempfile::Builder::new()
        .prefix(&format!("differential-{}-", case.name))
        .tempdir()
        .expect("tempdir");
    let slots: Vec<usize> = match case.drop_in.port_slots {
        Some(slots) => slots.to_vec(),
        None => (0..case.dests.len()).collect(),
    };
    let slot_ports = free_ports(slots.iter().max().map_or(0, |m| m + 1));
    let ports: Vec<u16> = slots.iter().map(|&s| slot_ports[s]).collect();
    let dests: Vec<String> = case
        .dests
        .iter()
        .zip(&ports)
        .map(|((host, instance), port)| match instance {
            Some(i) => format!("{host}:{port}:{i}"),
            None => format!("{host}:{port}"),
        })
        .collect();
    // One sink per distinct port, labelled by its destination (or `127.0.0.1:port` when
    // destinations share it).
    let mut sinks: Vec<(String, u16)> = Vec::new();
    for (d, &port) in dests.iter().zip(&ports) {
        match sinks.iter_mut().find(|(_, p)| *p == port) {
            Some(shared) => shared.0 = format!("127.0.0.1:{port}"),
            None => sinks.push((d.clone(), port)),
        }
    }
    let conf_dir = dir.path().join("conf");
    let (extra_keys, mut files) = (case.config)(&dests);
    let keys =
        format!("{}{extra_keys}", case.keys).replace("{conf_dir}", &conf_dir.display().to_string());
    let tls = case.drop_in.tls.then(|| {
        let ca = TestCa::new("anthracite differential CA");
        files.push(("ca.pem", ca.cert_pem.clone()));
        ca.server_cert(&["localhost", "127.0.0.1"]).server_config()
    });
    let files: Vec<(&str, &str)> = files.iter().map(|(n, b)| (*n, b.as_str())).collect();
    // The one carbon.conf both relays run on.
    let relay_section = format!("DESTINATIONS = {}\n{keys}{COMMON}", dests.join(", "));
    let conf = write_carbon_conf(dir.path(), &relay_section, &files);
    for w in warnings(&conf.path) {
        eprintln!("{}: anthracite warns: {w}", case.name);
    }
    let carbon_conf = match case.drop_in.carbon_substitute {
        None => None,
        Some(sub) => {
            let log = CarbonRelay::expect_refusal(&conf);
            assert!(
                log.contains(sub.refusal),
                "{}: carbon-relay 1.1.10 exited on the shared carbon.conf, but not with {:?}:\n{log}",
                case.name,
                sub.refusal
            );
            let carbon_dir = dir.path().join("carbon");
            assert!(
                relay_section.contains(sub.from),
                "{}: {:?} not in carbon.conf",
                case.name,
                sub.from
            );
            Some(write_carbon_conf(
                &carbon_dir,
                &relay_section.replace(sub.from, sub.to),
                &files,
            ))
        }
    };
    let carbon_sinks = SinkSetup {
        sinks: &sinks,
        protocol: case
            .drop_in
            .carbon_substitute
            .map_or(case.protocol, |s| s.protocol),
        tls: tls.clone(),
    };
    let anthracite_sinks = SinkSetup {
        sinks: &sinks,
        protocol: case.protocol,
        tls,
    };

    let points = datapoints(case.points);
    // Built once: both relays get byte-identical input (timestamps included).
    let raw = (case.raw)(unix_now() - 7_200);
    let min_total: usize = points.iter().map(|(p, _, _)| (case.min_copies)(p)).sum();

    let mut carbon = run(
        RelayKind::Carbon,
        carbon_conf.as_ref().unwrap_or(&conf),
        &carbon_sinks,
        &points,
        &raw,
        case,
    );
    let carbon_total: usize = carbon.delivered.values().sum();
    assert!(
        carbon_total > 0,
        "{}: carbon-relay delivered nothing\n{}",
        case.name,
        carbon.log_tail
    );
    if case.exact {
        assert_eq!(
            carbon_total, min_total,
            "{}: carbon-relay delivered {carbon_total} datapoints, the case expects exactly {min_total}: \
             the test's input or pacing is wrong, not anthracite\n{}",
            case.name, carbon.log_tail
        );
    } else {
        assert!(
            carbon_total >= min_total,
            "{}: carbon-relay delivered {carbon_total} datapoints, fewer than the {min_total} the \
             case expects at least: the test's input or pacing is wrong, not anthracite\n{}",
            case.name,
            carbon.log_tail
        );
    }

    let mut anthracite = run(
        RelayKind::Anthracite,
        &conf,
        &anthracite_sinks,
        &points,
        &raw,
        case,
    );
    for known in case.known_differences {
        let copies = |r: &Run| {
            r.delivered
                .iter()
                .filter(|(k, _)| k.1 == known.path)
                .map(|(_, n)| n)
                .sum::<usize>()
        };
        assert_eq!(
            (copies(&carbon), copies(&anthracite)),
            (known.carbon, known.anthracite),
            "{}: documented difference on {:?} changed (carbon, anthracite copies); it was: {}\n{}\n{}",
            case.name,
            known.path,
            known.why,
            carbon.log_tail,
            anthracite.log_tail
        );
        carbon.delivered.retain(|k, _| k.1 != known.path);
        anthracite.delivered.retain(|k, _| k.1 != known.path);
    }
    let labels: Vec<String> = sinks.iter().map(|(l, _)| l.clone()).collect();
    compare(case.name, &labels, &carbon, &anthracite);
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum RelayKind {
    Carbon,
    Anthracite,
}

/// A relay process under test.
enum Relay {
    Carbon(CarbonRelay),
    Anthracite(RelayProcess),
}

impl Relay {
    fn start(kind: RelayKind, conf: &CarbonConf) -> Relay {
        match kind {
            RelayKind::Carbon => Relay::Carbon(CarbonRelay::start(conf)),
            RelayKind::Anthracite => {
                let mut relay = crate::anthracite("anthracite")
                    .arg("run")
                    .arg("--carbon-config")
                    .arg(&conf.path)
                    .env("NO_COLOR", "1")
                    .log(conf.root.join("storage").join("log").join("anthracite.log"))
                    .start();
                relay.wait_listening(&[conf.line_port, conf.pickle_port]);
                Relay::Anthracite(relay)
            }
        }
    }

    fn log_tail(&self) -> String {
        match self {
            Relay::Carbon(c) => format!("--- carbon-relay log (tail) ---\n{}", c.log_tail(30)),
            Relay::Anthracite(c) => format!("--- anthracite log (tail) ---\n{}", c.log_tail(30)),
        }
    }

    fn assert_running(&mut self, waiting_for: &str) {
        match self {
            Relay::Carbon(c) => c.assert_running(waiting_for),
            Relay::Anthracite(c) => c.assert_running(waiting_for),
        }
    }

    fn stop(&mut self) {
        match self {
            Relay::Carbon(c) => c.stop(),
            Relay::Anthracite(c) => c.stop(),
        }
    }
}

/// What one run produced.
struct Run {
    kind: RelayKind,
    delivered: Delivered,
    log_tail: String,
}

/// The sinks of one run: (label, port) each, what they speak, and TLS.
struct SinkSetup<'a> {
    sinks: &'a [(String, u16)],
    protocol: SinkProtocol,
    tls: Option<Arc<rustls::ServerConfig>>,
}

/// Starts the sinks, the relay on `conf`, sends `points`, waits for delivery to finish,
/// stops the relay and collects what each sink received.
fn run(
    kind: RelayKind,
    conf: &CarbonConf,
    setup: &SinkSetup<'_>,
    points: &[Point],
    raw: &[Payload],
    case: &Case,
) -> Run {
    let sinks: Vec<Sink> = setup
        .sinks
        .iter()
        .map(|(label, port)| Sink::start_on_with(label, setup.protocol, *port, setup.tls.clone()))
        .collect();
    let total = |sinks: &[Sink]| sinks.iter().map(Sink::count).sum::<usize>();
    let mut relay = Relay::start(kind, conf);
    let line_addr = SocketAddr::from(([127, 0, 0, 1], conf.line_port));
    let pickle_addr = SocketAddr::from(([127, 0, 0, 1], conf.pickle_port));

    // Pacing: each chunk waits until at least one copy of everything sent so far is delivered.
    let mut expected_so_far = 0;
    for (k, chunk) in points
        .chunks(case.drop_in.chunk.unwrap_or(CHUNK))
        .enumerate()
    {
        if k % 2 == 0 {
            send_lines(line_addr, chunk);
        } else {
            send_pickle(pickle_addr, chunk, PER_FRAME);
        }
        expected_so_far += chunk
            .iter()
            .map(|(p, _, _)| (case.min_copies)(p))
            .sum::<usize>();
        let deadline = Instant::now() + CHUNK_TIMEOUT;
        while total(&sinks) < expected_so_far && Instant::now() < deadline {
            relay.assert_running(&format!("chunk {k} to be delivered"));
            thread::sleep(Duration::from_millis(20));
        }
    }
    for (k, payload) in raw.iter().enumerate() {
        let (addr, bytes) = match payload {
            Payload::Lines(bytes) => (line_addr, bytes.clone()),
            Payload::Pickle(frames) => (pickle_addr, pickle_frames(frames)),
        };
        send_raw(addr, &bytes, &format!("raw payload {k}"));
    }
    wait_quiet(&sinks, &mut relay, kind);
    // Stopping lets a relay flush whatever it still holds; then wait for that to land too.
    relay.stop();
    wait_quiet(&sinks, &mut relay, kind);

    let mut delivered = Delivered::new();
    for sink in &sinks {
        let errors = sink.errors();
        assert!(
            errors.is_empty(),
            "{}: sink {} saw undecodable data from {kind:?}: {:?}\n{}",
            case.name,
            sink.label(),
            &errors[..errors.len().min(5)],
            relay.log_tail()
        );
        for ((path, ts, value), n) in sink.multiset() {
            if path.starts_with("carbon.") {
                continue; // self-metrics (off anyway)
            }
            *delivered
                .entry((sink.label().to_owned(), path, ts, value))
                .or_insert(0) += n;
        }
    }
    Run {
        kind,
        delivered,
        log_tail: relay.log_tail(),
    }
}

/// Sends `bytes` over one connection and closes it; a relay that closes the connection first
/// (as carbon does on some bad input) is not an error.
fn send_raw(addr: SocketAddr, bytes: &[u8], what: &str) {
    let mut conn =
        TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr} for {what}: {e}"));
    let _ = conn.write_all(bytes);
    let _ = conn.shutdown(std::net::Shutdown::Write);
    // Wait for the relay to close its side, so payloads are processed one after the other.
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = [0u8; 64];
    let _ = conn.read(&mut buf);
}

fn pickle_frames(frames: &[serde_pickle::Value]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for frame in frames {
        let body = serde_pickle::value_to_vec(frame, serde_pickle::SerOptions::new())
            .expect("serde_pickle encodes a Value");
        bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&body);
    }
    bytes
}

/// Waits until no sink has received anything for [`QUIET`]; panics (with the relay's log) if
/// that does not happen within [`QUIET_TIMEOUT`].
fn wait_quiet(sinks: &[Sink], relay: &mut Relay, kind: RelayKind) {
    let deadline = Instant::now() + QUIET_TIMEOUT;
    let total = || sinks.iter().map(Sink::count).sum::<usize>();
    let mut last = total();
    let mut since = Instant::now();
    while since.elapsed() < QUIET {
        thread::sleep(Duration::from_millis(50));
        let now = total();
        if now != last {
            last = now;
            since = Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "{kind:?}: sinks still receiving after {QUIET_TIMEOUT:?} ({now} datapoints)\n{}",
            relay.log_tail()
        );
    }
}

/// Asserts both runs delivered the same multiset; on failure lists per-destination counts and
/// the first differences each way.
fn compare(case: &str, dests: &[String], carbon: &Run, anthracite: &Run) {
    if carbon.delivered == anthracite.delivered {
        return;
    }
    let mut msg = format!(
        "{case}: anthracite's deliveries differ from carbon-relay 1.1.10's on the same carbon.conf\n"
    );
    for d in dests {
        let count = |r: &Run| {
            r.delivered
                .iter()
                .filter(|(k, _)| &k.0 == d)
                .map(|(_, n)| n)
                .sum::<usize>()
        };
        writeln!(
            msg,
            "  {d}: carbon {} anthracite {}",
            count(carbon),
            count(anthracite)
        )
        .unwrap();
    }
    for (this, other) in [(carbon, anthracite), (anthracite, carbon)] {
        let missing: Vec<_> = this
            .delivered
            .iter()
            .filter(|(k, n)| other.delivered.get(*k).copied().unwrap_or(0) < **n)
            .collect();
        writeln!(
            msg,
            "{} (key, copies) delivered by {:?} more often than by {:?} (first 15):",
            missing.len(),
            this.kind,
            other.kind
        )
        .unwrap();
        for ((dest, path, ts, value), n) in missing.iter().take(15) {
            writeln!(
                msg,
                "  {dest} {path:?} ts={} value={} ×{n} (vs ×{})",
                f64::from_bits(*ts),
                f64::from_bits(*value),
                other
                    .delivered
                    .get(&(dest.clone(), path.clone(), *ts, *value))
                    .copied()
                    .unwrap_or(0)
            )
            .unwrap();
        }
    }
    panic!("{msg}\n{}\n{}", carbon.log_tail, anthracite.log_tail);
}

/// The warnings `anthracite check --carbon-config` prints for the shared carbon.conf (keys it
/// ignores), echoed to the test output so whoever reads a failure sees them; not asserted.
fn warnings(conf: &Path) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_anthracite"))
        .arg("check")
        .arg("--carbon-config")
        .arg(conf)
        .env("NO_COLOR", "1")
        .output();
    match out {
        Ok(o) => String::from_utf8_lossy(&o.stderr)
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("warn"))
            .map(str::to_owned)
            .collect(),
        Err(e) => vec![format!("cannot run anthracite check: {e}")],
    }
}
