//! Overload is back-pressure: when the relay itself is the bottleneck (CPU-bound
//! routing through hundreds of rules) and every destination is connected and reading, clients
//! are held back; no destination drops anything. Before the fix the full wait was wall-clock
//! time: a destination whose queue stayed near full because the relay could not keep up —
//! its writes completing as soon as they were issued — had its data dropped as `queue_full`
//! once `full_wait_ms` had passed.
//!
//! The relay runs as its own process (the `anthracite` binary) with a small memory queue and a
//! 1 s full wait, so the old drop shows within seconds; the sinks are in this process and read
//! as fast as the relay writes. No timing assertions: counts only (how often producers were
//! held back is printed, not asserted: how far the relay falls behind depends on the machine).

use anthracite_testkit as testkit;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use anthracite_sink::{Sink, SinkProtocol};
use anthracite_testkit::http::{get, parse_metrics, sum};

/// Rules in the table; each name matches exactly one, so a name tries half of them on average.
/// Each has a look-ahead: matched by backtracking, one rule at a time, so routing stays
/// CPU-bound however the linear rules are compiled.
const RULES: usize = 300;
/// Datapoints sent, over `CONNECTIONS` connections at full speed, every name distinct.
const DATAPOINTS: usize = 40_000;
const CONNECTIONS: usize = 4;

fn name(i: usize) -> String {
    format!("overload.g{}.host{i}.cpu", i % RULES)
}

/// Sends the names `range` (one datapoint each) as fast as the relay takes them.
fn send(addr: SocketAddr, range: std::ops::Range<usize>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut conn = TcpStream::connect(addr).expect("connect relay");
        let mut buf = Vec::new();
        for chunk in range.collect::<Vec<_>>().chunks(1_000) {
            buf.clear();
            for &i in chunk {
                buf.extend_from_slice(format!("{} {i} 1700000000\n", name(i)).as_bytes());
            }
            conn.write_all(&buf).expect("the relay keeps reading");
        }
    })
}

#[test]
fn cpu_bound_relay_holds_clients_back_instead_of_dropping_for_healthy_destinations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sinks: Vec<Sink> = ["a", "b", "c", "d"]
        .iter()
        .map(|l| Sink::start(l, SinkProtocol::Line))
        .collect();
    let servers: Vec<String> = sinks
        .iter()
        .map(|s| format!("\"{}:{}\"", s.addr(), s.label()))
        .collect();
    let ports = testkit::free_ports(2);
    let (line, admin_port) = (ports[0], ports[1]);
    let mut toml = format!(
        "[listen]\nline_tcp = \"127.0.0.1:{line}\"\npickle_tcp = \"\"\n\
         [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\
         [router]\nmethod = \"rules\"\n\
         [destinations]\nservers = [{}]\nprotocol = \"line\"\n\
         [destinations.queue]\nmax_datapoints = 2000\nfull_wait_ms = 1000\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 30\n",
        servers.join(", ")
    );
    for r in 0..RULES {
        toml.push_str(&format!(
            "[[rules]]\npattern = \"^overload\\\\.g{r}\\\\.(?!x)\"\ndestinations = [{}]\n",
            servers[r % servers.len()]
        ));
    }
    toml.push_str(&format!(
        "[[rules]]\ndefault = true\ndestinations = [{}]\n",
        servers[0]
    ));
    let mut relay = crate::anthracite("relay").toml(dir.path(), &toml).start();
    let admin: SocketAddr = ([127, 0, 0, 1], admin_port).into();
    relay.wait_ready(admin);

    let per = DATAPOINTS / CONNECTIONS;
    let senders: Vec<_> = (0..CONNECTIONS)
        .map(|c| send(([127, 0, 0, 1], line).into(), c * per..(c + 1) * per))
        .collect();
    for s in senders {
        s.join().expect("sender");
    }
    // Wait until the relay has settled every datapoint (sent or dropped), then for the sinks.
    let settled = |m: &std::collections::BTreeMap<String, f64>| {
        sum(m, "anthracite_sent_datapoints_total", &[])
            + sum(m, "anthracite_dropped_datapoints_total", &[])
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let metrics = loop {
        // A relay busy routing may answer late: a timed-out scrape is tried again.
        let Ok((200, text)) = get(admin, "/metrics") else {
            relay.assert_running("a scrape");
            assert!(Instant::now() < deadline, "/metrics never answered");
            continue;
        };
        let m = parse_metrics(&text);
        if settled(&m) >= DATAPOINTS as f64 {
            break m;
        }
        relay.assert_running("delivery");
        assert!(
            Instant::now() < deadline,
            "the relay settled {} of {DATAPOINTS} datapoints",
            settled(&m)
        );
        thread::sleep(Duration::from_millis(200));
    };
    let delivered: usize = sinks
        .iter()
        .map(|s| s.wait_quiet(Duration::from_millis(500), Duration::from_secs(30)))
        .sum();
    let dropped = sum(&metrics, "anthracite_dropped_datapoints_total", &[]);
    let full_waits = sum(&metrics, "anthracite_destination_full_waits_total", &[]);
    relay.stop();
    eprintln!(
        "overload figures: {delivered} delivered, {dropped} dropped, {full_waits} full waits"
    );
    assert_eq!(
        dropped,
        0.0,
        "healthy destinations dropped datapoints:\n{}",
        relay.log()
    );
    assert_eq!(delivered, DATAPOINTS, "every datapoint delivered");
}
