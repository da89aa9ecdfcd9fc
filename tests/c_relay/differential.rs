//! The real carbon-c-relay 3.7.3 and `anthracite run --carbon-c-relay-config` on the same
//! configuration file, one after the other, each in front of fresh sinks on the destination
//! ports, fed byte-identical input; then the lines every destination received are compared
//! exactly (as multisets: carbon-c-relay's dispatchers and anthracite's connections do not
//! promise an order across connections).
//!
//! The cases cover input cleansing, matches in order with fall-through, `stop`, `validate`
//! and `blackhole`, rewrites with every modifier, and every cluster type with all members up
//! (`forward`, `any_of`, `failover`, `carbon_ch`, `fnv1a_ch` with instances, `jump_fnv1a_ch`,
//! `replication`), `include` with a glob, and a UDP listener.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anthracite_testkit::c_relay::{self, CRelay};
use anthracite_testkit::{free_ports, scratch};

/// How long the sinks must see nothing new before a run counts as delivered.
const QUIET: Duration = Duration::from_millis(600);
/// How long a run lasts at least: carbon-c-relay's servers may pause between batches.
const SETTLE: Duration = Duration::from_millis(1500);
/// Bound on one run's delivery.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(20);

/// One configuration to compare.
struct Case {
    /// For messages and the scratch directory.
    name: &'static str,
    /// The configuration; `{L}` is the listening port, `{D0}`… the destination ports.
    conf: &'static str,
    /// Extra files beside it (name, contents, with the same placeholders).
    files: &'static [(&'static str, &'static str)],
    /// How many destination ports the configuration names.
    dests: usize,
    /// The lines sent (each ends with `\n` unless the case tests otherwise).
    input: Vec<u8>,
    /// Send over UDP (one datagram per line) instead of one TCP connection.
    udp: bool,
    /// Send a third of the lines each over `{L}`, `{L2}` and the Unix socket `{S}`.
    mixed: bool,
    /// For aggregations: the input made at the moment of sending from `base` (see
    /// [`aligned_now`]) instead of `input`; timestamps within a day of `base` are compared as offsets from it.
    timed: Option<fn(i64) -> Vec<u8>>,
    /// How long a run lasts at least (the aggregations' expiry).
    settle: Duration,
    /// Compare the names each destination received, not the lines (statistics: their
    /// values are each relay's own).
    names_only: bool,
    /// Destinations that are down (nothing listens on their port).
    down: &'static [usize],
    /// Groups of destinations compared as one (an `any_of` cluster with a member down:
    /// carbon-c-relay moves the down member's queue to the others in random order).
    merged: &'static [&'static [usize]],
    /// Flags for both relays besides `-w 1`.
    args: &'static [&'static str],
}

impl Default for Case {
    fn default() -> Self {
        Case {
            name: "",
            conf: "",
            files: &[],
            dests: 0,
            input: Vec::new(),
            udp: false,
            mixed: false,
            timed: None,
            settle: SETTLE,
            names_only: false,
            down: &[],
            merged: &[],
            args: &[],
        }
    }
}

/// Bytes received by one sink: every connection's bytes, each connection on its own.
pub(crate) type Received = Arc<Mutex<Vec<Vec<u8>>>>;

/// Plain TCP listeners on the destination ports that keep whatever arrives.
pub(crate) struct Sinks {
    stop: Arc<AtomicBool>,
    pub(crate) received: Vec<Received>,
    threads: Vec<JoinHandle<()>>,
}

/// Binds a sink's port, waiting a moment while another process still holds it (a relay of an
/// earlier case that is exiting); bounded, then a clear failure.
fn bind_sink(port: u16) -> TcpListener {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(l) => return l,
            Err(e) if e.kind() == ErrorKind::AddrInUse && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("sink: bind 127.0.0.1:{port}: {e}"),
        }
    }
}

impl Sinks {
    /// Sinks on `ports`, but for the indices in `down`, which get none (they receive
    /// nothing).
    pub(crate) fn start(ports: &[u16], down: &[usize]) -> Sinks {
        let stop = Arc::new(AtomicBool::new(false));
        let mut received = Vec::new();
        let mut threads = Vec::new();
        for (i, &port) in ports.iter().enumerate() {
            if down.contains(&i) {
                received.push(Received::default());
                continue;
            }
            let listener = bind_sink(port);
            listener
                .set_nonblocking(true)
                .expect("sink: nonblocking listener");
            let got: Received = Arc::default();
            received.push(got.clone());
            let stop = stop.clone();
            threads.push(thread::spawn(move || sink_loop(&listener, &got, &stop)));
        }
        Sinks {
            stop,
            received,
            threads,
        }
    }

    /// Lines received so far.
    pub(crate) fn lines(&self) -> usize {
        self.received
            .iter()
            .map(|r| {
                r.lock()
                    .expect("sink lock")
                    .iter()
                    .map(|c| c.iter().filter(|&&b| b == b'\n').count())
                    .sum::<usize>()
            })
            .sum()
    }

    /// Waits until `want` lines arrived and nothing new for [`QUIET`], at least `settle`
    /// after the start, bounded by [`DELIVERY_TIMEOUT`]; then stops and returns each sink's
    /// lines, sorted.
    pub(crate) fn finish(self, want: usize, settle: Duration) -> Vec<Vec<String>> {
        let start = Instant::now();
        let deadline = start + DELIVERY_TIMEOUT;
        let mut last = (self.lines(), Instant::now());
        while Instant::now() < deadline {
            thread::sleep(Duration::from_millis(25));
            let now = self.lines();
            if now != last.0 {
                last = (now, Instant::now());
            } else if now >= want && last.1.elapsed() >= QUIET && start.elapsed() >= settle {
                break;
            }
        }
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().expect("sink thread");
        }
        self.received
            .iter()
            .map(|r| {
                let mut lines: Vec<String> = r
                    .lock()
                    .expect("sink lock")
                    .iter()
                    .flat_map(|conn| {
                        String::from_utf8_lossy(conn)
                            .split_inclusive('\n')
                            .map(str::to_owned)
                            .collect::<Vec<_>>()
                    })
                    .collect();
                lines.sort();
                lines
            })
            .collect()
    }
}

fn sink_loop(listener: &TcpListener, got: &Received, stop: &AtomicBool) {
    let mut conns: Vec<(TcpStream, usize)> = Vec::new();
    let mut buf = [0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let mut idle = true;
        if let Ok((s, _)) = listener.accept() {
            s.set_nonblocking(true).expect("sink: nonblocking stream");
            let mut g = got.lock().expect("sink lock");
            g.push(Vec::new());
            conns.push((s, g.len() - 1));
            idle = false;
        }
        for (s, slot) in &mut conns {
            match s.read(&mut buf) {
                Ok(0) => {}
                Ok(n) => {
                    got.lock().expect("sink lock")[*slot].extend_from_slice(&buf[..n]);
                    idle = false;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => {}
            }
        }
        if idle {
            thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Where a case's relays listen: `{L}`, `{L2}` (a second TCP address) and `{S}` (a Unix
/// socket).
struct Listen {
    port: u16,
    second: u16,
    socket: std::path::PathBuf,
}

/// The configuration text with its ports filled in.
fn fill(text: &str, listen: &Listen, dests: &[u16]) -> String {
    let mut out = text
        .replace("{L2}", &listen.second.to_string())
        .replace("{L}", &listen.port.to_string())
        .replace("{S}", &listen.socket.display().to_string());
    // Highest first, so that `{D1}` is not taken for `{D10}`'s start.
    for (i, port) in dests.iter().enumerate().rev() {
        out = out.replace(&format!("{{D{i}}}"), &port.to_string());
    }
    out
}

/// Waits for the start of an even second (at most 2 s) and returns it: aggregation buckets
/// are aligned to their interval (2 s in the cases), so both relays see the same phase.
fn aligned_now() -> i64 {
    loop {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970");
        let secs = now.as_secs() as i64;
        if secs % 2 == 0 && now.subsec_millis() < 200 {
            return secs;
        }
        let left = Duration::from_secs(2 - (secs % 2) as u64)
            - Duration::from_nanos(u64::from(now.subsec_nanos()));
        thread::sleep(
            left.min(Duration::from_millis(100))
                .max(Duration::from_millis(1)),
        );
    }
}

/// Sends the case's input to `addr` (with `mixed`: a third of the lines each to `{L}`,
/// `{L2}` and `{S}`); returns the base of a timed input.
fn send(case: &Case, listen: &Listen) -> Option<i64> {
    let addr: SocketAddr = ([127, 0, 0, 1], listen.port).into();
    let base = case.timed.map(|_| aligned_now());
    let input = match (case.timed, base) {
        (Some(make), Some(base)) => make(base),
        _ => case.input.clone(),
    };
    if case.udp {
        let s = UdpSocket::bind("127.0.0.1:0").expect("bind a UDP sender");
        for line in input.split_inclusive(|&b| b == b'\n') {
            s.send_to(line, addr).expect("send a datagram");
            // Bounded pacing: the receivers' socket buffers are not what is compared.
            thread::sleep(Duration::from_millis(1));
        }
    } else if case.mixed {
        let mut parts = [Vec::new(), Vec::new(), Vec::new()];
        for (i, line) in input.split_inclusive(|&b| b == b'\n').enumerate() {
            parts[i % 3].extend_from_slice(line);
        }
        TcpStream::connect(addr)
            .and_then(|mut s| s.write_all(&parts[0]))
            .expect("send to the first TCP listener");
        TcpStream::connect(("127.0.0.1", listen.second))
            .and_then(|mut s| s.write_all(&parts[1]))
            .expect("send to the second TCP listener");
        std::os::unix::net::UnixStream::connect(&listen.socket)
            .and_then(|mut s| s.write_all(&parts[2]))
            .expect("send to the Unix socket");
    } else {
        let mut s = TcpStream::connect(addr).expect("connect to the relay");
        s.write_all(&input).expect("send the input");
    }
    base
}

/// Each line's timestamp (its last field) as an offset from `base` when it is within a day
/// of it.
fn relative(got: Vec<Vec<String>>, base: Option<i64>) -> Vec<Vec<String>> {
    let Some(base) = base else {
        return got;
    };
    got.into_iter()
        .map(|lines| {
            let mut out: Vec<String> = lines
                .into_iter()
                .map(|l| {
                    let body = l.trim_end_matches('\n');
                    match body.rsplit_once(' ') {
                        Some((head, ts)) => match ts.parse::<i64>() {
                            Ok(t) if (t - base).abs() < 86_400 => {
                                format!("{head} base{:+}\n", t - base)
                            }
                            _ => l,
                        },
                        None => l,
                    }
                })
                .collect();
            out.sort();
            out
        })
        .collect()
}

/// Runs `case` through carbon-c-relay and through anthracite; returns what each destination
/// received from each.
fn run(case: &Case) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let dir = scratch("c_relay", case.name);
    let ports = free_ports(case.dests + 2);
    let listen = Listen {
        port: ports[0],
        second: ports[1],
        socket: dir.join("relay.sock"),
    };
    let dests = &ports[2..];
    let conf = dir.join("relay.conf");
    std::fs::write(&conf, fill(case.conf, &listen, dests)).expect("write relay.conf");
    for (name, text) in case.files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create an include directory");
        }
        std::fs::write(&path, fill(text, &listen, dests)).expect("write an included file");
    }
    let addr: SocketAddr = ([127, 0, 0, 1], listen.port).into();
    // One worker: the early-crash window is short. Statistics (every 60 s by default) come
    // after a run ends.
    let args: Vec<&str> = ["-w", "1"].iter().chain(case.args).copied().collect();

    let sinks = Sinks::start(dests, case.down);
    let theirs = {
        let relay = CRelay::start(&conf, &dir, &args, addr);
        let base = send(case, &listen);
        let got = sinks.finish(0, case.settle);
        let _ = relay.pid();
        relative(got, base)
    };
    let want: usize = if case.names_only {
        0
    } else {
        theirs.iter().map(Vec::len).sum()
    };

    let sinks = Sinks::start(dests, case.down);
    let ours = {
        let mut relay = crate::relay_on(&dir, &conf, &args.join(" ")).start();
        relay.wait_listening(&[listen.port]);
        let base = send(case, &listen);
        let got = sinks.finish(want, case.settle);
        relay.stop();
        relative(got, base)
    };
    let (theirs, ours) = if case.names_only {
        (names_of(theirs), names_of(ours))
    } else {
        (merge(theirs, case.merged), merge(ours, case.merged))
    };
    // What each delivered, per destination, for a look after a failure.
    for (who, got) in [("carbon-c-relay", &theirs), ("anthracite", &ours)] {
        let text: String = got
            .iter()
            .enumerate()
            .flat_map(|(d, lines)| lines.iter().map(move |l| format!("D{d} {l}")))
            .collect();
        std::fs::write(dir.join(format!("{who}.received")), text).expect("write what arrived");
    }
    (theirs, ours)
}

/// Each group's lines under its first destination (the others left empty).
fn merge(mut got: Vec<Vec<String>>, groups: &[&[usize]]) -> Vec<Vec<String>> {
    for group in groups {
        let Some((&first, rest)) = group.split_first() else {
            continue;
        };
        for &d in rest {
            let lines = std::mem::take(&mut got[d]);
            got[first].extend(lines);
        }
        got[first].sort();
    }
    got
}

/// The distinct names each destination received.
fn names_of(got: Vec<Vec<String>>) -> Vec<Vec<String>> {
    got.into_iter()
        .map(|lines| {
            let mut names: Vec<String> = lines
                .iter()
                .map(|l| l.split(' ').next().unwrap_or_default().to_owned() + "\n")
                .collect();
            names.sort();
            names.dedup();
            names
        })
        .collect()
}

/// Runs `case` and asserts every destination received the same lines from both.
fn assert_same(case: &Case) {
    let (theirs, ours) = run(case);
    let total: usize = theirs.iter().map(Vec::len).sum();
    assert!(
        total > 0,
        "{}: carbon-c-relay delivered nothing (the case proves nothing)",
        case.name
    );
    let mut diffs = String::new();
    for (d, (t, o)) in theirs.iter().zip(&ours).enumerate() {
        if t != o {
            diffs.push_str(&describe(d, t, o));
        }
    }
    assert!(
        diffs.is_empty(),
        "{}: destinations differ\n{diffs}",
        case.name
    );
}

/// The lines one side has more of than the other.
fn describe(dest: usize, theirs: &[String], ours: &[String]) -> String {
    let mut count: BTreeMap<&str, i64> = BTreeMap::new();
    for l in theirs {
        *count.entry(l).or_default() += 1;
    }
    for l in ours {
        *count.entry(l).or_default() -= 1;
    }
    let mut out = format!(
        "destination {dest}: carbon-c-relay {} lines, anthracite {}\n",
        theirs.len(),
        ours.len()
    );
    for (line, n) in count.iter().filter(|(_, n)| **n != 0).take(20) {
        let who = if *n > 0 {
            "only carbon-c-relay"
        } else {
            "only anthracite"
        };
        out.push_str(&format!("  {who} ×{}: {line:?}\n", n.abs()));
    }
    out
}

/// `n` names spread over a few levels, for the hashing clusters.
fn names(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        out.extend_from_slice(
            format!(
                "sys.host{:02}.cpu{}.{} {}.{} {}\n",
                i % 37,
                i % 5,
                ["user", "idle", "Iowait", "st"][i % 4],
                i,
                i % 10,
                1_700_000_000 + i
            )
            .as_bytes(),
        );
    }
    out
}

#[test]
fn cleansing_matches_carbon_c_relay() {
    c_relay::require();
    let input = b"plain.name 1 1700000000\n\
        ..leading.dots 2 1700000000\n\
        trailing.dot. 3 1700000000\n\
        double..dots...here 4 1700000000\n\
        tab\tseparated\t5\t1700000000\n\
        many   spaces   6    1700000000\n\
        bad/chars@in(name) 7 1700000000\n\
        allowed-_:#chars 8 1700000000\n\
        value.text 1.50 1700000000\n\
        value.exp 5e0 1700000000\n\
        value.dots 1..5 1700000000\n\
        value.sep .5 1700000000\n\
        tagged.name;tag=v/x;other=y 9 1700000000\n\
        tagged.dot.;t=v 10 1700000000\n\
        crlf.line 11 1700000000\r\n\
        novalue\n\
        \n\
        ...\n\
        utf8.caf\xc3\xa9 12 1700000000\n\
        last.line 13 1700000000\n"
        .to_vec();
    assert_same(&Case {
        name: "cleansing",
        conf: "listen type linemode 127.0.0.1:{L} proto tcp;\n\
               cluster all forward 127.0.0.1:{D0};\n\
               match * send to all;\n",
        files: &[],
        dests: 1,
        input,
        udp: false,
        timed: None,
        settle: SETTLE,
        names_only: false,
        ..Case::default()
    });
}

#[test]
fn matches_fall_through_stop_validate_and_blackhole() {
    c_relay::require();
    let mut input = Vec::new();
    for name in [
        "a.x.count",
        "a.y.count",
        "b.x.count",
        "b.y.time",
        "c.x.count",
        "c.gone",
        "d.valid",
        "d.logged",
        "e.twice",
        "f.other",
    ] {
        for (v, ts) in [
            ("1", "1700000000"),
            ("2.5", "1700000060"),
            ("x", "1700000120"),
        ] {
            input.extend_from_slice(format!("{name} {v} {ts}\n").as_bytes());
        }
    }
    assert_same(&Case {
        name: "matches",
        conf: "listen type linemode 127.0.0.1:{L} proto tcp;\n\
               cluster one forward 127.0.0.1:{D0};\n\
               cluster two forward 127.0.0.1:{D1};\n\
               cluster three forward 127.0.0.1:{D2};\n\
               match ^a\\. send to one;\n\
               match ^a\\.x send to two stop;\n\
               match ^b\\. \\.count$ send to one two;\n\
               match ^c\\.gone send to blackhole;\n\
               match ^c\\. send to three stop;\n\
               match ^d\\. validate ^[0-9.]+[[:space:]] else drop send to two;\n\
               match ^d\\.logged validate ^[0-9]+[[:space:]] else log send to three;\n\
               match ^e\\. ^e\\.tw send to one;\n\
               match * send to three;\n",
        files: &[],
        dests: 3,
        input,
        udp: false,
        timed: None,
        settle: SETTLE,
        names_only: false,
        ..Case::default()
    });
}

#[test]
fn rewrites_with_every_modifier() {
    c_relay::require();
    let mut input = Vec::new();
    for name in [
        "Servers.WebHost01.CPU.Total",
        "Servers.DB.Host.Mem",
        "app.Front-End.Latency",
        "keep.As.Is",
        "x.y.z",
    ] {
        input.extend_from_slice(format!("{name} 42 1700000000\n").as_bytes());
    }
    assert_same(&Case {
        name: "rewrites",
        conf: "listen type linemode 127.0.0.1:{L} proto tcp;\n\
               cluster before forward 127.0.0.1:{D0};\n\
               cluster after forward 127.0.0.1:{D1};\n\
               match * send to before;\n\
               rewrite ^Servers\\.([^.]+)\\.(.*)$ into srv.\\_1.\\^2;\n\
               rewrite ^srv\\.db\\.(.*)$ into database.\\.1;\n\
               rewrite ^app\\.([^.]+)\\.(.*) into apps.\\_.1.\\2.\\1;\n\
               rewrite ^x\\. into rewritten.x.;\n\
               match * send to after;\n",
        files: &[],
        dests: 2,
        input,
        udp: false,
        timed: None,
        settle: SETTLE,
        names_only: false,
        ..Case::default()
    });
}

#[test]
fn forward_any_of_and_failover_with_every_member_up() {
    c_relay::require();
    assert_same(&Case {
        name: "forward_any_of_failover",
        conf: "listen type linemode 127.0.0.1:{L} proto tcp;\n\
               cluster fw forward 127.0.0.1:{D0} 127.0.0.1:{D1};\n\
               cluster any any_of 127.0.0.1:{D2} 127.0.0.1:{D3} 127.0.0.1:{D4};\n\
               cluster fo failover 127.0.0.1:{D5} 127.0.0.1:{D6};\n\
               match ^sys\\.host0 send to fw;\n\
               match * send to any fo;\n",
        files: &[],
        dests: 7,
        input: names(300),
        udp: false,
        timed: None,
        settle: SETTLE,
        names_only: false,
        ..Case::default()
    });
}

#[test]
fn consistent_hashing_clusters_with_replication() {
    c_relay::require();
    assert_same(&Case {
        name: "consistent_hashing",
        conf: "listen type linemode 127.0.0.1:{L} proto tcp;\n\
               cluster carbon carbon_ch replication 2\n\
                   127.0.0.1:{D0}=a 127.0.0.1:{D1}=b 127.0.0.1:{D2}=c;\n\
               cluster fnv fnv1a_ch\n\
                   127.0.0.1:{D3}=1 127.0.0.1:{D4}=x2 127.0.0.1:{D5};\n\
               cluster jump jump_fnv1a_ch replication 2\n\
                   127.0.0.1:{D6}=10 127.0.0.1:{D7}=9 127.0.0.1:{D8}=b 127.0.0.1:{D9}=a;\n\
               match * send to carbon fnv jump;\n",
        files: &[],
        dests: 10,
        input: names(400),
        udp: false,
        timed: None,
        settle: SETTLE,
        names_only: false,
        ..Case::default()
    });
}

#[test]
fn include_with_a_glob_and_a_udp_listener() {
    c_relay::require();
    assert_same(&Case {
        name: "include_udp",
        conf: "listen type linemode 127.0.0.1:{L} proto udp;\n\
               listen type linemode 127.0.0.1:{L} proto tcp;\n\
               include conf.d/*.conf;\n\
               match * send to rest;\n",
        files: &[
            (
                "conf.d/10-clusters.conf",
                "cluster cpu forward 127.0.0.1:{D0};\ncluster rest forward 127.0.0.1:{D1};\n",
            ),
            (
                "conf.d/20-cpu.conf",
                "match \\.cpu[0-2]\\. send to cpu stop;\n",
            ),
        ],
        dests: 2,
        input: names(60),
        udp: true,
        timed: None,
        settle: SETTLE,
        names_only: false,
        ..Case::default()
    });
}

/// Datapoints for the aggregations: two hosts, three series each, in the bucket before and
/// the bucket of `base` (the first closes about a second after sending, the second about
/// three), values with fractions and repeats.
fn aggregated_input(base: i64) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..48 {
        let value = [0.25, 3.5, 3.75, 10.0, 2.5, 7.125, 0.5, 3.5][i % 8] + (i / 8) as f64;
        out.extend_from_slice(
            format!(
                "sys.h{}.cpu.c{} {} {}\n",
                i % 2,
                i % 3,
                value,
                base - 2 + (i % 4) as i64
            )
            .as_bytes(),
        );
        out.extend_from_slice(format!("app.req{} {} {}\n", i % 2, i, base - 1).as_bytes());
    }
    out
}

#[test]
fn aggregations_with_every_compute_and_timestamp_mode() {
    c_relay::require();
    assert_same(&Case {
        name: "aggregations",
        conf: "listen type linemode 127.0.0.1:{L} proto tcp;\n\
               cluster out forward 127.0.0.1:{D0};\n\
               cluster fed forward 127.0.0.1:{D1};\n\
               aggregate ^sys\\.([^.]+)\\.cpu\\.(.*)$\n\
                 every 2 seconds expire after 3 seconds timestamp at start of bucket\n\
                 compute sum write to agg.\\1.sum\n\
                 compute count write to agg.\\1.count\n\
                 compute max write to agg.\\1.max\n\
                 compute min write to agg.\\1.min\n\
                 compute average write to agg.\\1.avg\n\
                 send to out;\n\
               aggregate ^sys\\.([^.]+)\\.cpu\\.\n\
                 every 2 seconds expire after 3 seconds timestamp at middle of bucket\n\
                 compute median write to agg.\\1.median\n\
                 compute percentile90 write to agg.\\1.p90\n\
                 compute percentile5 write to agg.\\1.p5\n\
                 compute variance write to agg.\\1.var\n\
                 compute stddev write to agg.\\1.sd\n\
                 send to out;\n\
               aggregate ^app\\.req\n\
                 every 2 seconds expire after 3 seconds timestamp at end of bucket\n\
                 compute sum write to total.requests\n\
                 ;\n\
               match ^total\\. send to fed stop;\n\
               match ^app\\. send to blackhole;\n",
        files: &[],
        dests: 2,
        input: Vec::new(),
        udp: false,
        timed: Some(aggregated_input),
        settle: Duration::from_secs(7),
        names_only: false,
        ..Case::default()
    });
}

#[test]
fn statistics_names_as_carbon_c_relay_submits_them() {
    c_relay::require();
    assert_same(&Case {
        name: "statistics",
        conf: "listen type linemode 127.0.0.1:{L} proto tcp;\n\
               cluster stats forward 127.0.0.1:{D0};\n\
               cluster data forward 127.0.0.1:{D1} 127.0.0.1:{D1} proto udp;\n\
               statistics submit every 1 seconds reset counters after interval\n\
                 prefix with relays.test send to stats stop;\n\
               aggregate ^agg\\.in every 10 seconds expire after 20 seconds\n\
                 compute sum write to agg.out send to data;\n\
               match * send to data;\n",
        files: &[],
        dests: 2,
        input: names(20),
        udp: false,
        timed: None,
        settle: Duration::from_millis(2500),
        names_only: true,
        ..Case::default()
    });
}

#[test]
fn failover_and_any_of_with_a_member_down() {
    c_relay::require();
    assert_same(&Case {
        name: "member_down",
        conf: "listen type linemode 127.0.0.1:{L} proto tcp;\n\
               cluster any any_of 127.0.0.1:{D0} 127.0.0.1:{D1} 127.0.0.1:{D2};\n\
               cluster fo failover 127.0.0.1:{D3} 127.0.0.1:{D4};\n\
               match * send to any fo;\n",
        dests: 5,
        input: names(200),
        down: &[1, 3],
        merged: &[&[0, 2]],
        settle: Duration::from_secs(3),
        ..Case::default()
    });
}

#[test]
fn allowed_characters_flag_changes_cleansing() {
    c_relay::require();
    assert_same(&Case {
        name: "allowed_chars",
        conf: "listen type linemode 127.0.0.1:{L} proto tcp;\n\
               cluster all forward 127.0.0.1:{D0};\n\
               match * send to all;\n",
        dests: 1,
        input: b"a/b@c:d#e-f_g 1 1700000000\n\
                 tag;t=v/x 2 1700000000\n\
                 semi;colon;name 3 1700000000\n"
            .to_vec(),
        args: &["-c", "/@;"],
        ..Case::default()
    });
}

#[test]
fn several_tcp_listeners_and_a_unix_socket() {
    c_relay::require();
    assert_same(&Case {
        name: "listeners",
        conf: "listen type linemode\n\
                 127.0.0.1:{L} proto tcp\n\
                 127.0.0.1:{L2} proto tcp\n\
                 {S} proto unix\n\
               ;\n\
               cluster all forward 127.0.0.1:{D0};\n\
               match * send to all;\n",
        dests: 1,
        input: names(90),
        mixed: true,
        ..Case::default()
    });
}
