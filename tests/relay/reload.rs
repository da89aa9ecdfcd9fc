//! Reload under load (a real process, SIGHUP): 500,000 datapoints over 4 connections while the
//! configuration is reloaded 5 times — add a destination (and move the pickle listener),
//! remove one, change the routing to rules, an invalid file, back to the first. No client
//! connection is closed, every datapoint arrives at a destination that a configuration in
//! force when it was received chose, nothing is lost, and the removed destination's spilled
//! data is kept (and delivered once it is back).

use anthracite_testkit as testkit;

use std::collections::HashSet;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anthracite::{Config, Placement};
use anthracite_sink::{Sink, SinkProtocol};
use testkit::RelayProcess;
use testkit::http::{get, parse_metrics, value};

const CONNECTIONS: u64 = 4;
const PER_CONNECTION: u64 = 125_000;
const NAMES: u64 = 1_000;
/// Lines per write and writes per second, per connection (12,500 datapoints/s each).
const CHUNK: u64 = 250;
const TICK: Duration = Duration::from_millis(20);
const WAIT: Duration = Duration::from_secs(120);

fn name(conn: u64, i: u64) -> String {
    format!("rl.c{conn}.n{}", i % NAMES)
}

/// The value carries the connection and the sequence number.
fn value_of(conn: u64, i: u64) -> u64 {
    conn * 1_000_000 + i
}

struct Ports {
    line: u16,
    pickle: [u16; 2],
    admin: u16,
    dests: [u16; 4],
}

/// relay.toml with `servers` (indices into the four destinations), the pickle listener on
/// `pickle`, and `routing` appended.
fn config(p: &Ports, spill: &Path, servers: &[usize], pickle: u16, routing: &str) -> String {
    let list: Vec<String> = servers
        .iter()
        .map(|&i| format!("\"127.0.0.1:{}:{}\"", p.dests[i], ["a", "b", "c", "d"][i]))
        .collect();
    format!(
        "[listen]\nline_tcp = \"127.0.0.1:{}\"\npickle_tcp = \"127.0.0.1:{pickle}\"\n\
         [admin]\nlisten = \"127.0.0.1:{}\"\n\
         [destinations]\nservers = [{}]\nbackoff_min_ms = 20\nbackoff_max_ms = 500\n\
         [destinations.queue]\nmax_datapoints = 5000\n\
         [destinations.spill]\ndir = {:?}\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 5\n{routing}",
        p.line,
        p.admin,
        list.join(", "),
        spill.display().to_string()
    )
}

/// Waits until `/metrics` counts `n` reloads with `result`.
fn wait_reloads(admin: SocketAddr, relay: &mut RelayProcess, result: &str, n: f64) {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok((200, text)) = get(admin, "/metrics") {
            let m = parse_metrics(&text);
            if value(&m, "anthracite_config_reloads_total", &[("result", result)]) >= Some(n) {
                return;
            }
        }
        relay.assert_running("a reload");
        assert!(Instant::now() < deadline, "reload {n} ({result}) not seen");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn reload_under_load_keeps_connections_routes_by_the_config_in_force_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spill = dir.path().join("spill");
    let ports = testkit::free_ports(9);
    let p = Ports {
        line: ports[0],
        pickle: [ports[1], ports[2]],
        admin: ports[3],
        dests: [ports[4], ports[5], ports[6], ports[7]],
    };
    // a, b and d are up; c is down (its data spills) until the very end.
    let sinks: Vec<Option<Sink>> = (0..4)
        .map(|i| {
            (i != 2).then(|| Sink::start_on(&format!("d{i}"), SinkProtocol::Pickle, p.dests[i]))
        })
        .collect();
    let rules = "[router]\nmethod = \"rules\"\n\
                 [[rules]]\npattern = \"[0-4]$\"\ndestinations = [\"127.0.0.1:{d}:d\"]\n\
                 [[rules]]\ndefault = true\ndestinations = [\"127.0.0.1:{a}:a\"]\n"
        .replace("{d}", &p.dests[3].to_string())
        .replace("{a}", &p.dests[0].to_string());
    // The configurations, in the order they are in force (the invalid one never is).
    let c0 = config(&p, &spill, &[0, 1, 2], p.pickle[0], "");
    let epochs = [
        c0.clone(),
        config(&p, &spill, &[0, 1, 2, 3], p.pickle[1], ""),
        config(&p, &spill, &[0, 1, 3], p.pickle[1], ""),
        config(&p, &spill, &[0, 1, 3], p.pickle[1], &rules),
        c0.clone(),
    ];
    // Destination port each configuration sends each name to.
    let placement: Vec<Vec<u16>> = epochs
        .iter()
        .map(|text| {
            let config = Config::from_toml_str(text).expect("valid config");
            let router = Placement::new(&config).expect("router");
            (0..CONNECTIONS * NAMES)
                .map(|k| {
                    let first = &router.destinations(&name(k / NAMES, k % NAMES))[0];
                    let port = first.split(':').nth(1).expect("host:port:instance");
                    port.parse::<u16>().expect("a port")
                })
                .collect()
        })
        .collect();
    let config_path = dir.path().join("relay.toml");
    std::fs::write(&config_path, &c0).expect("write config");
    let pid_file = dir.path().join("relay.pid");
    let mut relay = crate::anthracite("relay")
        .config(&config_path)
        .arg("--pid-file")
        .arg(&pid_file)
        .start();
    let admin: SocketAddr = ([127, 0, 0, 1], p.admin).into();
    relay.wait_ready(admin);

    // Four senders at a steady rate; each notes the epoch it saw at every write.
    let epoch = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let epoch_of: Arc<Mutex<Vec<Vec<u8>>>> =
        Arc::new(Mutex::new(vec![
            vec![0; PER_CONNECTION as usize];
            CONNECTIONS as usize
        ]));
    let conns: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|_| TcpStream::connect(("127.0.0.1", p.line)).expect("connect relay"))
        .collect();
    let senders: Vec<_> = conns
        .iter()
        .enumerate()
        .map(|(c, conn)| {
            let mut conn = conn.try_clone().expect("clone connection");
            let (epoch, sent, epoch_of) = (epoch.clone(), sent.clone(), epoch_of.clone());
            thread::spawn(move || {
                let c = c as u64;
                let mut next = Instant::now();
                let mut buf = Vec::new();
                for start in (0..PER_CONNECTION).step_by(CHUNK as usize) {
                    let e = epoch.load(Ordering::SeqCst) as u8;
                    buf.clear();
                    for i in start..(start + CHUNK).min(PER_CONNECTION) {
                        buf.extend_from_slice(
                            format!("{} {} 1700000000\n", name(c, i), value_of(c, i)).as_bytes(),
                        );
                    }
                    {
                        let mut log = epoch_of.lock().expect("epoch log");
                        for i in start..(start + CHUNK).min(PER_CONNECTION) {
                            log[c as usize][i as usize] = e;
                        }
                    }
                    conn.write_all(&buf)
                        .expect("the connection stays open across reloads");
                    sent.fetch_add(CHUNK, Ordering::SeqCst);
                    next += TICK;
                    if let Some(wait) = next.checked_duration_since(Instant::now()) {
                        thread::sleep(wait);
                    }
                }
            })
        })
        .collect();

    let invalid = "[router\nthis is not toml";
    let steps: [(&str, bool); 5] = [
        (&epochs[1], true),
        (&epochs[2], true),
        (&epochs[3], true),
        (invalid, false),
        (&epochs[4], true),
    ];
    let (mut applied, mut rejected) = (0.0, 0.0);
    let total = CONNECTIONS * PER_CONNECTION;
    for (k, (text, valid)) in steps.iter().enumerate() {
        // Reloads spread over the stream: the next one once another sixth is sent.
        let due = (k as u64 + 1) * total / 6;
        while sent.load(Ordering::SeqCst) < due {
            relay.assert_running("the stream");
            thread::sleep(Duration::from_millis(5));
        }
        std::fs::write(&config_path, text).expect("write config");
        // `kill -HUP`, and once `anthracite reload` with the pid file the relay wrote.
        let hup = if k == 3 {
            Command::new(env!("CARGO_BIN_EXE_anthracite"))
                .arg("reload")
                .arg("--pid-file")
                .arg(&pid_file)
                .status()
                .expect("run anthracite reload")
        } else {
            Command::new("kill")
                .args(["-HUP", &relay.pid().to_string()])
                .status()
                .expect("send SIGHUP")
        };
        assert!(hup.success());
        if *valid {
            applied += 1.0;
            wait_reloads(admin, &mut relay, "applied", applied);
            epoch.fetch_add(1, Ordering::SeqCst);
        } else {
            rejected += 1.0;
            wait_reloads(admin, &mut relay, "rejected", rejected);
        }
        match k {
            // The pickle listener moved: the new address accepts, the old one no longer.
            0 => {
                assert!(TcpStream::connect(("127.0.0.1", p.pickle[1])).is_ok());
                let deadline = Instant::now() + WAIT;
                while TcpStream::connect(("127.0.0.1", p.pickle[0])).is_ok() {
                    assert!(
                        Instant::now() < deadline,
                        "old pickle address still accepting"
                    );
                    thread::sleep(Duration::from_millis(20));
                }
            }
            // c removed: what it spilled stays on disk.
            1 => {
                let deadline = Instant::now() + WAIT;
                loop {
                    let on_disk: u64 = walk(&spill)
                        .iter()
                        .filter(|f| f.to_string_lossy().contains(&format!("_{}_c", p.dests[2])))
                        .filter_map(|f| std::fs::metadata(f).ok())
                        .map(|m| m.len())
                        .sum();
                    if on_disk > 0 {
                        break;
                    }
                    assert!(Instant::now() < deadline, "c's spill log is empty");
                    thread::sleep(Duration::from_millis(50));
                }
            }
            _ => {}
        }
    }
    assert!(
        TcpStream::connect(("127.0.0.1", p.pickle[0])).is_ok(),
        "back on the first pickle address"
    );
    for s in senders {
        s.join().expect("sender");
    }
    assert_eq!(sent.load(Ordering::SeqCst), total);
    // Every client connection is still open.
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, text) = get(admin, "/metrics").expect("scrape");
        let m = parse_metrics(&text);
        let received = value(
            &m,
            "anthracite_received_datapoints_total",
            &[("source", "line_tcp")],
        );
        if received == Some(total as f64) {
            assert_eq!(
                value(
                    &m,
                    "anthracite_connections_active",
                    &[("source", "line_tcp")]
                ),
                Some(CONNECTIONS as f64),
                "no client connection was closed"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "received {received:?} of {total}"
        );
        thread::sleep(Duration::from_millis(50));
    }
    // c comes up: what it held (on disk through its removal) arrives.
    let sink_c = Sink::start_on("d2", SinkProtocol::Pickle, p.dests[2]);
    let sinks: Vec<(u16, &Sink)> = sinks
        .iter()
        .enumerate()
        .map(|(i, s)| (p.dests[i], s.as_ref().unwrap_or(&sink_c)))
        .collect();
    let deadline = Instant::now() + WAIT;
    let arrived = loop {
        let mut seen: HashSet<u64> = HashSet::new();
        let mut arrivals = Vec::new();
        for (port, sink) in &sinks {
            for r in sink.received() {
                seen.insert(r.value as u64);
                arrivals.push((*port, r.path, r.value as u64));
            }
        }
        if seen.len() as u64 == total {
            break arrivals;
        }
        relay.assert_running("everything to arrive");
        assert!(
            Instant::now() < deadline,
            "{} of {total} datapoints arrived",
            seen.len()
        );
        thread::sleep(Duration::from_millis(200));
    };
    let epoch_of = epoch_of.lock().expect("epoch log");
    let mut by_epoch = [0u64; 5];
    // Destination d is in configurations 1 to 3 only.
    let mut to_d = [0u64; 5];
    for (port, path, v) in &arrived {
        let (c, i) = (v / 1_000_000, v % 1_000_000);
        assert_eq!(path, &name(c, i), "value and name match");
        let e = usize::from(epoch_of[c as usize][i as usize]);
        let k = (c * NAMES + i % NAMES) as usize;
        // Routed by the configuration in force when it was sent, or the next one (it may have
        // waited in a socket buffer while a reload was applied; reloads are a sixth of the
        // stream apart, so never two).
        let allowed = e..(e + 2).min(epochs.len());
        let chosen = allowed.clone().find(|&j| placement[j][k] == *port);
        assert!(
            chosen.is_some(),
            "{path} (sent under configuration {e}) arrived at port {port}; configurations {allowed:?} send it to {:?}",
            allowed.clone().map(|j| placement[j][k]).collect::<Vec<_>>()
        );
        by_epoch[e] += 1;
        if *port == p.dests[3] {
            to_d[e] += 1;
        }
    }
    eprintln!(
        "reload figures: datapoints sent per configuration {by_epoch:?}; {} arrivals for {total}",
        arrived.len()
    );
    assert!(
        by_epoch.iter().all(|&n| n > 10_000),
        "every configuration carried load: {by_epoch:?}"
    );
    assert!(
        to_d[1..=3].iter().all(|&n| n > 0),
        "the reloads that add d routed data to it: {to_d:?}"
    );
    drop(conns);
    relay.stop();
    assert!(!pid_file.exists(), "the pid file is removed at exit");
    let log = relay.log();
    assert!(!log.contains("panicked"), "{log}");
    let reloaded: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("configuration reloaded"))
        .collect();
    assert_eq!(reloaded.len(), 4, "{log}");
    assert!(
        reloaded[0].contains(&format!("destinations added: 127.0.0.1:{}:d", p.dests[3])),
        "{}",
        reloaded[0]
    );
    assert!(reloaded[0].contains("pickle receiver"), "{}", reloaded[0]);
    assert!(
        reloaded[1].contains(&format!("destinations removed: 127.0.0.1:{}:c", p.dests[2])),
        "{}",
        reloaded[1]
    );
    assert!(reloaded[2].contains("routing changed"), "{}", reloaded[2]);
    assert!(
        reloaded[3].contains(&format!("127.0.0.1:{}:c", p.dests[2])),
        "{}",
        reloaded[3]
    );
    let rejected: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("configuration reload rejected"))
        .collect();
    assert_eq!(rejected.len(), 1, "{log}");
    assert!(rejected[0].contains("relay.toml"), "{}", rejected[0]);
}

/// Every file below `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// Awaits `f` on a runtime of the test thread's own (the relay runs on another).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// A memory-only destination that is down when a reload removes it keeps what it holds (it
/// has nowhere else to go); added back, the same queue is revived and delivers it all.
#[test]
fn removed_destination_added_back_before_it_is_retired_keeps_its_queue() {
    use testkit::relay::{TestRelay, config_for};
    let up = Sink::start("a", SinkProtocol::Pickle);
    let down_port = testkit::free_ports(1)[0];
    let a = format!("127.0.0.1:{}:a", up.port());
    let b = format!("127.0.0.1:{down_port}:b");
    let both = config_for(&[a.clone(), b.clone()], "");
    let relay = TestRelay::start(&both);
    let send = |from: u64, n: u64| {
        let mut c = TcpStream::connect(relay.line).expect("connect");
        let mut buf = Vec::new();
        for i in from..from + n {
            buf.extend_from_slice(format!("rv.n{} {i} 1700000000\n", i % 100).as_bytes());
        }
        c.write_all(&buf).expect("write");
    };
    send(0, 2_000);
    let s = relay.wait_stats("b holds its share", WAIT, |s| {
        s.ingest.received == 2_000 && s.destinations[1].queued == s.destinations[1].routed
    });
    let held = s.destinations[1].routed;
    assert!(held > 0);

    let reloaded =
        block_on(relay.handle.reload(
            Config::from_toml_str(&config_for(std::slice::from_ref(&a), "")).expect("config"),
        ))
        .expect("reload removing b");
    assert!(
        reloaded
            .changes
            .iter()
            .any(|c| c == &format!("destinations removed: {b}")),
        "{reloaded:?}"
    );
    send(2_000, 1_000);
    let s = relay.wait_stats(
        "new data goes to a only; b still holds its share",
        WAIT,
        |s| {
            s.ingest.received == 3_000
                && s.destinations.len() == 1
                && s.destinations[0].sent == s.destinations[0].routed
                && s.removed.len() == 1
        },
    );
    assert_eq!(s.removed[0].name, b);
    assert_eq!(s.removed[0].queued, held, "b keeps what it held");
    assert_eq!(s.destinations[0].routed, 3_000 - held);

    let reloaded = block_on(
        relay
            .handle
            .reload(Config::from_toml_str(&both).expect("config")),
    )
    .expect("reload adding b back");
    assert!(
        reloaded
            .changes
            .iter()
            .any(|c| c == &format!("destinations added back: {b}")),
        "{reloaded:?}"
    );
    let sink_b = Sink::start_on("b", SinkProtocol::Pickle, down_port);
    sink_b.wait_for_count(held as usize, WAIT);
    let s = relay.wait_stats("b delivered", WAIT, |s| s.destinations[1].queued == 0);
    assert_eq!(
        s.destinations[1].sent, held,
        "the same queue and books, revived"
    );
    assert!(s.removed.is_empty());
    assert_eq!(up.count() as u64, 3_000 - held);
    // A file that does not validate is rejected; the relay goes on as it was.
    let bad = block_on(relay.handle.reload_with(|| {
        Config::from_toml_str(
            "[router]\nreplication_factor = 0\n[destinations]\nservers = [\"127.0.0.1:1:a\"]\n",
        )
    }));
    assert!(
        matches!(bad, Err(anthracite::ReloadError::Config(_))),
        "{bad:?}"
    );
    let s = relay.handle.stats();
    assert_eq!((s.reloads.applied, s.reloads.rejected), (2, 1));
    assert_eq!(s.destinations.len(), 2);
}
