//! What anthracite keeps on a carbon-c-relay configuration where carbon-c-relay loses it: a
//! member that is down under `any_of`, `failover` and `carbon_ch` with `--spill-dir` (nothing
//! lost, the spill counted), a SIGHUP reload that keeps a member's queue and an unchanged
//! aggregation's buckets, the bound on open aggregation series (counted), and lines sent to
//! the blackhole (counted as blackholed, without a drop warning). anthracite
//! alone, in front of plain sinks; the members that are down get a sink later, on the same
//! port.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anthracite_testkit::http::{get, parse_metrics, sum, value};
use anthracite_testkit::{RelayProcess, free_ports, scratch, unix_now};

/// Bound on every wait of these tests (a hung test's deadline, not a timing assertion).
pub(super) const LIMIT: Duration = Duration::from_secs(30);

/// A plain TCP listener that keeps the lines it receives.
pub(super) struct Sink {
    stop: Arc<AtomicBool>,
    lines: Arc<Mutex<Vec<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl Sink {
    pub(super) fn start(port: u16) -> Sink {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("sink: bind 127.0.0.1:{port}: {e}"));
        listener.set_nonblocking(true).expect("sink: nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, lines) = (stop.clone(), lines.clone());
            thread::spawn(move || {
                let mut conns: Vec<(TcpStream, Vec<u8>)> = Vec::new();
                let mut buf = [0u8; 65536];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((s, _)) = listener.accept() {
                        s.set_nonblocking(true).expect("sink: nonblocking stream");
                        conns.push((s, Vec::new()));
                    }
                    let mut idle = true;
                    for (s, pending) in &mut conns {
                        if let Ok(n @ 1..) = s.read(&mut buf) {
                            idle = false;
                            pending.extend_from_slice(&buf[..n]);
                            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                                let line: Vec<u8> = pending.drain(..=end).collect();
                                lines
                                    .lock()
                                    .expect("sink lock")
                                    .push(String::from_utf8_lossy(&line[..end]).into_owned());
                            }
                        }
                    }
                    if idle {
                        thread::sleep(Duration::from_millis(5));
                    }
                }
            })
        };
        Sink {
            stop,
            lines,
            thread: Some(thread),
        }
    }

    pub(super) fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("sink lock").clone()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `text` with `{L}`, `{A}` (admin) and `{D0}`… filled in.
pub(super) fn fill(text: &str, listen: u16, admin: u16, dests: &[u16]) -> String {
    let mut out = text
        .replace("{L}", &listen.to_string())
        .replace("{A}", &admin.to_string());
    for (i, port) in dests.iter().enumerate().rev() {
        out = out.replace(&format!("{{D{i}}}"), &port.to_string());
    }
    out
}

/// anthracite on `conf` with the overlay `overlay` (its admin listener at `admin`),
/// `--spill-dir dir/spill` and the carbon-c-relay flags `args`.
pub(super) fn start(
    dir: &Path,
    conf: &str,
    overlay: &str,
    args: &str,
    admin: SocketAddr,
) -> RelayProcess {
    std::fs::write(dir.join("relay.conf"), conf).expect("write relay.conf");
    std::fs::write(dir.join("overlay.toml"), overlay).expect("write overlay.toml");
    let mut relay = crate::relay_on(dir, "relay.conf", args)
        .args(["--carbon-c-relay-overlay", "overlay.toml"])
        .arg("--spill-dir")
        .arg(dir.join("spill"))
        .start();
    relay.wait_ready(admin);
    relay
}

pub(super) fn send(port: u16, text: &str) {
    TcpStream::connect(("127.0.0.1", port))
        .and_then(|mut s| s.write_all(text.as_bytes()))
        .expect("send to the relay");
}

pub(super) fn metrics(admin: SocketAddr) -> BTreeMap<String, f64> {
    match get(admin, "/metrics") {
        Ok((200, body)) => parse_metrics(&body),
        other => panic!("GET /metrics: {other:?}"),
    }
}

/// The names of the lines `sinks` received.
fn names(sinks: &[&Sink]) -> BTreeSet<String> {
    sinks
        .iter()
        .flat_map(|s| s.lines())
        .map(|l| l.split(' ').next().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn members_down_under_any_of_failover_and_carbon_ch_with_spill_lose_nothing() {
    let dir = scratch("c_relay", "members_down_spill");
    let ports = free_ports(8);
    let (listen, admin_port, d) = (ports[0], ports[1], &ports[2..]);
    let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
    let conf = fill(
        "cluster anyof any_of 127.0.0.1:{D0} 127.0.0.1:{D1};\n\
         cluster fail failover 127.0.0.1:{D2} 127.0.0.1:{D3};\n\
         cluster ring carbon_ch 127.0.0.1:{D4} 127.0.0.1:{D5};\n\
         match ^a\\. send to anyof stop;\n\
         match ^f\\. send to fail stop;\n\
         match ^c\\. send to ring stop;\n",
        listen,
        admin_port,
        d,
    );
    let overlay = fill(
        "[admin]\nlisten = \"127.0.0.1:{A}\"\n",
        listen,
        admin_port,
        d,
    );
    // D0 (an any_of member), D2 (the failover's first) and D4 (a ring member) are down.
    let up: Vec<Sink> = [1, 3, 5].iter().map(|&i| Sink::start(d[i])).collect();
    // A memory tier of 100 datapoints per member (carbon-c-relay's -q; -b below it): the
    // rest spills.
    let mut relay = start(
        &dir,
        &conf,
        &overlay,
        &format!("-p {listen} -q 100 -b 50"),
        admin,
    );
    let mut sent: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut text = String::new();
    for prefix in ["a", "f", "c"] {
        for i in 0..300 {
            let name = format!("{prefix}.m{i}");
            text.push_str(&format!("{name} {i} 1700000000\n"));
            sent.entry(prefix).or_default().insert(name);
        }
    }
    send(listen, &text);
    relay.wait_until("the down ring member's datapoints on disk", LIMIT, || {
        let m = metrics(admin);
        value(
            &m,
            "anthracite_c_relay_cluster_spill_datapoints",
            &[("cluster", "ring"), ("type", "carbon_ch")],
        )
        .is_some_and(|v| v > 0.0)
    });
    let m = metrics(admin);
    for (cluster, kind) in [
        ("anyof", "any_of"),
        ("fail", "failover"),
        ("ring", "carbon_ch"),
    ] {
        let labels = [("cluster", cluster), ("type", kind)];
        assert_eq!(
            value(&m, "anthracite_c_relay_cluster_members", &labels),
            Some(2.0),
            "{cluster}"
        );
        assert_eq!(
            value(&m, "anthracite_c_relay_cluster_members_up", &labels),
            Some(1.0),
            "{cluster}: one member down"
        );
    }
    let down: Vec<Sink> = [0, 2, 4].iter().map(|&i| Sink::start(d[i])).collect();
    let clusters = [("a", 0), ("f", 1), ("c", 2)];
    relay.wait_until("every line at a member of its cluster", LIMIT, || {
        clusters
            .iter()
            .all(|(p, k)| names(&[&up[*k], &down[*k]]) == sent[p])
    });
    let m = metrics(admin);
    assert!(
        sum(&m, "anthracite_spilled_datapoints_total", &[]) > 0.0,
        "the spill was used"
    );
    assert_eq!(
        sum(
            &m,
            "anthracite_c_relay_cluster_dropped_datapoints_total",
            &[]
        ),
        0.0,
        "nothing dropped"
    );
    relay.stop();
}

#[test]
fn reloads_keep_a_members_queue_and_an_unchanged_aggregations_buckets() {
    let dir = scratch("c_relay", "reload_keeps");
    let ports = free_ports(4);
    let (listen, admin_port, d) = (ports[0], ports[1], &ports[2..]);
    let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
    let before = "cluster out forward 127.0.0.1:{D0};\n\
                  cluster held forward 127.0.0.1:{D1};\n\
                  aggregate ^in\\.x$ every 3 seconds expire after 4 seconds\n    \
                  timestamp at start of bucket compute sum write to agg.sum send to out stop;\n\
                  match ^h\\. send to held stop;\n";
    // A new route: the same aggregations, whose state both configurations share.
    let routed = format!("{before}match ^new\\. send to out stop;\n");
    // Another aggregation besides: a new list, into which the kept one's buckets move.
    let aggregated = format!(
        "{routed}aggregate ^other$ every 60 seconds expire after 120 seconds\n    \
         compute sum write to other.sum send to out stop;\n"
    );
    let overlay = fill(
        "[admin]\nlisten = \"127.0.0.1:{A}\"\n",
        listen,
        admin_port,
        d,
    );
    let out = Sink::start(d[0]);
    let mut relay = start(
        &dir,
        &fill(before, listen, admin_port, d),
        &overlay,
        &format!("-p {listen} -q 100 -b 50"),
        admin,
    );
    // Held for the member that is down: 100 in memory, the rest on disk.
    let held: String = (0..250)
        .map(|i| format!("h.m{i} {i} 1700000000\n"))
        .collect();
    send(listen, &held);
    // The third of the series' four buckets (carbon-c-relay's first starts at
    // `(now - expire) / interval * interval`): it starts at most a second ago and is written
    // 4 to 6 s after its start, after the reload.
    let now = unix_now();
    let bucket = (now - 4) / 3 * 3 + 6;
    send(listen, &format!("in.x 1 {bucket}\n"));
    relay.wait_until(
        "the series open, the held lines partly on disk",
        LIMIT,
        || {
            let m = metrics(admin);
            let on_disk = value(
                &m,
                "anthracite_c_relay_cluster_spill_datapoints",
                &[("cluster", "held"), ("type", "forward")],
            );
            value(&m, "anthracite_c_relay_aggregation_series", &[]) == Some(1.0)
                && on_disk.is_some_and(|v| v > 0.0)
        },
    );
    for (n, (text, point)) in [(&routed, "in.x 2"), (&aggregated, "in.x 3")]
        .into_iter()
        .enumerate()
    {
        std::fs::write(dir.join("relay.conf"), fill(text, listen, admin_port, d))
            .expect("rewrite relay.conf");
        relay.signal("HUP");
        relay.wait_until("the reload applied", LIMIT, || {
            value(
                &metrics(admin),
                "anthracite_config_reloads_total",
                &[("result", "applied")],
            ) == Some(n as f64 + 1.0)
        });
        send(listen, &format!("{point} {bucket}\n"));
    }
    send(listen, "new.m 5 1700000000\n");
    let held_sink = Sink::start(d[1]);
    relay.wait_until("the held lines and the aggregate", LIMIT, || {
        held_sink.lines().len() >= 250 && out.lines().len() >= 2
    });
    let want: BTreeSet<String> = (0..250).map(|i| format!("h.m{i}")).collect();
    assert_eq!(names(&[&held_sink]), want, "the member's queue kept");
    let mut got = out.lines();
    got.sort();
    assert_eq!(
        got,
        vec![
            format!("agg.sum 6.000000 {bucket}"),
            "new.m 5 1700000000".to_owned()
        ],
        "one aggregate of the three datapoints, and the new route"
    );
    relay.stop();
}

#[test]
fn the_open_aggregation_series_bound_drops_new_series_counted() {
    let dir = scratch("c_relay", "series_bound");
    let ports = free_ports(3);
    let (listen, admin_port, d) = (ports[0], ports[1], &ports[2..]);
    let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
    let conf = "cluster out forward 127.0.0.1:{D0};\n\
                aggregate ^in\\.([a-z]+)$ every 60 seconds expire after 120 seconds\n    \
                compute sum write to agg.\\1 send to out stop;\n";
    let overlay = "[admin]\nlisten = \"127.0.0.1:{A}\"\n[limits]\nmax_aggregation_series = 2\n";
    let _out = Sink::start(d[0]);
    let mut relay = start(
        &dir,
        &fill(conf, listen, admin_port, d),
        &fill(overlay, listen, admin_port, d),
        &format!("-p {listen}"),
        admin,
    );
    let now = unix_now();
    send(
        listen,
        &["a", "b", "c", "d", "a", "b"]
            .iter()
            .map(|n| format!("in.{n} 1 {now}\n"))
            .collect::<String>(),
    );
    relay.wait_until("the bound's drops counted", LIMIT, || {
        let m = metrics(admin);
        value(
            &m,
            "anthracite_c_relay_aggregation_dropped_total",
            &[("reason", "series_limit")],
        ) == Some(2.0)
    });
    let m = metrics(admin);
    assert_eq!(
        value(&m, "anthracite_c_relay_aggregation_series", &[]),
        Some(2.0)
    );
    relay.wait_log("the open series bound is reached", LIMIT);
    relay.stop();
}

#[test]
fn blackholed_lines_are_counted_in_metrics_and_statistics_without_a_drop_warning() {
    let dir = scratch("c_relay", "blackholed");
    let ports = free_ports(3);
    let (listen, admin_port, d) = (ports[0], ports[1], &ports[2..]);
    let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
    let conf = "cluster out forward 127.0.0.1:{D0};\n\
                statistics submit every 1 seconds prefix with stats send to out stop;\n\
                match ^gone\\. send to blackhole;\n\
                match ^kept\\. send to out;\n";
    let out = Sink::start(d[0]);
    let mut relay = start(
        &dir,
        &fill(conf, listen, admin_port, d),
        &fill(
            "[admin]\nlisten = \"127.0.0.1:{A}\"\n",
            listen,
            admin_port,
            d,
        ),
        &format!("-p {listen}"),
        admin,
    );
    // Three sent to the blackhole, two that no match takes: carbon-c-relay counts all five.
    send(
        listen,
        "gone.a 1 1700000000\ngone.b 1 1700000000\ngone.c 1 1700000000\n\
         other.a 1 1700000000\nother.b 1 1700000000\nkept.a 1 1700000000\n",
    );
    relay.wait_until("five blackholed in the statistics", LIMIT, || {
        out.lines()
            .iter()
            .any(|l| l.starts_with("stats.metricsBlackholed 5 "))
    });
    let m = metrics(admin);
    assert_eq!(
        sum(
            &m,
            "anthracite_invalid_datapoints_total",
            &[("reason", "blackholed")]
        ),
        5.0
    );
    assert_eq!(
        sum(
            &m,
            "anthracite_invalid_datapoints_total",
            &[("reason", "no_destination")]
        ),
        0.0
    );
    assert!(out.lines().iter().any(|l| l.starts_with("kept.a 1 ")));
    relay.stop();
    let log = relay.log();
    assert!(
        !log.contains("dropping datapoints"),
        "a blackhole opened a drop episode:\n{log}"
    );
}
