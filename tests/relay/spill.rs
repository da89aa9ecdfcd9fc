//! The disk tier end to end over loopback sockets: an outage far over the memory bound loses
//! nothing and keeps order; a slow destination causes no drops; SIGTERM spills what is in
//! memory and a restart delivers it; SIGKILL loses nothing that reached the log and a corrupt
//! tail record is skipped and counted; an exhausted disk budget applies the fallback with
//! exact counters. No timing assertions: every wait is bounded, every check is a count.

use anthracite_testkit as testkit;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anthracite::DestinationDropReason;
use anthracite::unstable::queue::spill::{SpillConfig, SpillLog};
use anthracite_sink::{Sink, SinkProtocol};
use testkit::RelayProcess;
use testkit::relay::{TestRelay, config_for};

const WAIT: Duration = Duration::from_secs(120);

/// `n` lines starting at sequence `from`; the value carries the sequence number.
fn lines(from: usize, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * 32);
    for i in from..from + n {
        out.extend_from_slice(format!("sp.m{} {i} 1700000000\n", i % 5000).as_bytes());
    }
    out
}

fn send(addr: SocketAddr, data: &[u8]) {
    let mut c = TcpStream::connect(addr).expect("connect relay");
    c.write_all(data).expect("write lines");
}

/// Checks every sequence number in `0..n` arrived, first arrivals in order; returns the number
/// of duplicates.
fn check_all_in_order(sink: &Sink, n: usize) -> usize {
    let mut seen = vec![false; n];
    let mut last = None;
    let mut dups = 0;
    for r in sink.received() {
        let i = r.value as usize;
        assert!(i < n, "unexpected value {}", r.value);
        if seen[i] {
            dups += 1;
            continue;
        }
        seen[i] = true;
        if let Some(prev) = last {
            assert!(i > prev, "out of order: {i} after {prev}");
        }
        last = Some(i);
    }
    let missing = seen.iter().filter(|s| !**s).count();
    assert_eq!(missing, 0, "datapoints missing");
    dups
}

fn spill_extra(dir: &Path, more: &str) -> String {
    format!(
        "[destinations.queue]\nmax_datapoints = 20000\nmax_bytes = 2000000\n{more}\n\
         [destinations.spill]\ndir = {:?}\nsegment_bytes = 1048576\nmax_bytes = 268435456\n",
        dir.display().to_string()
    )
}

#[test]
fn outage_of_500k_datapoints_spills_and_replays_everything_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = testkit::free_ports(1)[0];
    let relay = TestRelay::start(&config_for(
        &[format!("127.0.0.1:{port}:a")],
        &spill_extra(dir.path(), ""),
    ));
    let n = 500_000;
    // One connection: order is defined per connection.
    let started = Instant::now();
    let mut c = TcpStream::connect(relay.line).expect("connect relay");
    for part in 0..5 {
        c.write_all(&lines(part * 100_000, 100_000))
            .expect("write lines");
    }
    drop(c);
    let s = relay.wait_stats("all routed and handed to disk", WAIT, |s| {
        let d = &s.destinations[0];
        d.routed == n as u64 && d.spill.spilled_datapoints + d.queued_memory == n as u64
    });
    let spilled_in = started.elapsed();
    let d = &s.destinations[0];
    assert_eq!(d.dropped_total(), 0, "{d:?}");
    assert!(d.queued_disk >= 480_000, "most of it is on disk: {d:?}");
    assert_eq!(d.routed, d.sent + d.dropped_total() + d.queued, "{d:?}");
    let sink = Sink::start_on("a", SinkProtocol::Pickle, port);
    let replay_started = Instant::now();
    sink.wait_for_count(n, WAIT);
    let s = relay.wait_stats("drained", WAIT, |s| s.destinations[0].queued == 0);
    // Figures for docs/benchmarks.md (printed with --nocapture), never asserted.
    eprintln!(
        "outage figures: {n} datapoints received and spilled in {:?} ({:.0}/s); replayed and \
         delivered in {:?} ({:.0}/s, includes the test sink's pickle decoding)",
        spilled_in,
        n as f64 / spilled_in.as_secs_f64(),
        replay_started.elapsed(),
        n as f64 / replay_started.elapsed().as_secs_f64()
    );
    let d = &s.destinations[0];
    assert_eq!((d.sent, d.dropped_total()), (n as u64, 0), "{d:?}");
    assert!(
        d.spill.memory_bytes_peak <= 2_000_000,
        "memory tier peaked at {} bytes",
        d.spill.memory_bytes_peak
    );
    assert_eq!(d.spill.replayed_datapoints, d.spill.spilled_datapoints);
    let dups = check_all_in_order(&sink, n);
    // No crash and no lost connection: the guarantee says no duplicates.
    assert_eq!((dups, sink.connections()), (0, 1));
    let report = relay.stop();
    assert!(report.undelivered.is_empty() && report.spilled.is_empty());
    assert_eq!(
        dir_bytes(dir.path(), "seg"),
        0,
        "a drained log leaves no segment"
    );
}

/// A pickle destination that reads about `bytes_per_sec` and counts nothing: a slow cache.
fn throttled_sink(bytes_per_sec: u64, stop: Arc<AtomicBool>) -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let total = Arc::new(AtomicU64::new(0));
    let t = total.clone();
    thread::spawn(move || {
        let Ok((mut c, _)) = listener.accept() else {
            return;
        };
        let start = Instant::now();
        let mut buf = [0u8; 4096];
        while !stop.load(Ordering::Relaxed) {
            let allowed = (start.elapsed().as_secs_f64() * bytes_per_sec as f64) as u64;
            if t.load(Ordering::Relaxed) >= allowed {
                thread::sleep(Duration::from_millis(5));
                continue;
            }
            match c.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(k) => {
                    t.fetch_add(k as u64, Ordering::Relaxed);
                }
            }
        }
    });
    (port, total)
}

#[test]
fn slow_destination_at_3k_per_second_under_40k_per_second_drops_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stop = Arc::new(AtomicBool::new(false));
    // A pickled datapoint here is about 40 bytes: 120 kB/s ≈ 3k datapoints/s.
    let (port, read_bytes) = throttled_sink(120_000, stop.clone());
    let config = config_for(
        &[format!("127.0.0.1:{port}:a")],
        &spill_extra(dir.path(), ""),
    )
    .replace("grace_secs = 10", "grace_secs = 1");
    let relay = TestRelay::start(&config);
    // 40k datapoints/s for 10 s, in 100 ms steps of 4000.
    let mut c = TcpStream::connect(relay.line).expect("connect");
    let start = Instant::now();
    let steps = 100;
    for step in 0..steps {
        c.write_all(&lines(step * 4000, 4000)).expect("write");
        let due = start + Duration::from_millis(100 * (step as u64 + 1));
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
    }
    drop(c);
    let n = steps * 4000;
    let s = relay.wait_stats("all routed, the backlog partly on disk", WAIT, |s| {
        let d = &s.destinations[0];
        d.routed == n as u64 && d.spill.spilled_datapoints > 0
    });
    let d = &s.destinations[0];
    assert_eq!(d.dropped_total(), 0, "{d:?}");
    stop.store(true, Ordering::Relaxed);
    let report = relay.stop();
    let d = &report.stats.destinations[0];
    assert_eq!(d.dropped_total(), 0, "{d:?}");
    assert_eq!(d.routed, d.sent + d.queued, "{d:?}");
    assert_eq!(report.spilled.first().map(|x| x.1), Some(d.queued_disk));
    assert!(read_bytes.load(Ordering::Relaxed) > 0);
}

fn dir_bytes(dir: &Path, ext: &str) -> u64 {
    let mut total = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            total += dir_bytes(&p, ext);
        } else if p.extension().is_some_and(|x| x == ext) {
            total += e.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    total
}

/// Starts the real binary on `config` (its default command: no `run`) and waits until its
/// line port accepts connections.
fn start_binary(dir: &Path, config: &str, line_port: u16) -> RelayProcess {
    static STARTS: AtomicU64 = AtomicU64::new(0);
    let path = dir.join("relay.toml");
    std::fs::write(&path, config).expect("write relay.toml");
    let start = STARTS.fetch_add(1, Ordering::Relaxed);
    let mut relay = crate::anthracite("relay")
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "warn")
        .log(dir.join(format!("relay-{start}.log")))
        .start();
    relay.wait_listening(&[line_port]);
    relay
}

fn binary_config(line_port: u16, dest_port: u16, spill: &Path, fsync: &str) -> String {
    format!(
        "[listen]\nline_tcp = \"127.0.0.1:{line_port}\"\npickle_tcp = \"\"\n\
         [destinations]\nservers = [\"127.0.0.1:{dest_port}:a\"]\nbackoff_min_ms = 20\nbackoff_max_ms = 200\n\
         [destinations.queue]\nmax_datapoints = 5000\n\
         [destinations.spill]\ndir = {:?}\nsegment_bytes = 262144\nmax_bytes = 268435456\nfsync = \"{fsync}\"\n\
         replay_rate = 200000\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 3\n",
        spill.display().to_string()
    )
}

/// Waits (bounded) for the relay to exit after a signal.
fn wait_exit(relay: &mut RelayProcess) -> std::process::ExitStatus {
    relay.wait_exit(Duration::from_secs(60), "relay did not exit within 60 s")
}

#[test]
fn sigterm_spills_memory_and_restart_delivers_all_100k() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spill = dir.path().join("spill");
    let ports = testkit::free_ports(2);
    let (line_port, dest_port) = (ports[0], ports[1]);
    let config = binary_config(line_port, dest_port, &spill, "interval");
    let mut relay = start_binary(dir.path(), &config, line_port);
    let n = 100_000;
    let mut c = TcpStream::connect(("127.0.0.1", line_port)).expect("connect");
    c.write_all(&lines(0, n)).expect("write");
    c.shutdown(std::net::Shutdown::Write).ok();
    // The relay reads to EOF before closing; waiting for that makes the test independent of
    // how long parsing takes.
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    relay.signal("TERM");
    assert!(wait_exit(&mut relay).success());
    assert!(dir_bytes(&spill, "seg") > 0, "the backlog is on disk");

    let sink = Sink::start_on("a", SinkProtocol::Pickle, dest_port);
    let mut relay = start_binary(dir.path(), &config, line_port);
    sink.wait_for_count(n, WAIT);
    relay.signal("TERM");
    assert!(wait_exit(&mut relay).success());
    let dups = check_all_in_order(&sink, n);
    assert_eq!(dups, 0);
    assert_eq!(dir_bytes(&spill, "seg"), 0, "replayed segments are deleted");
}

#[test]
fn sigkill_while_spilling_loses_nothing_logged_and_skips_a_corrupt_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spill = dir.path().join("spill");
    let ports = testkit::free_ports(2);
    let (line_port, dest_port) = (ports[0], ports[1]);
    let config = binary_config(line_port, dest_port, &spill, "always");
    let mut relay = start_binary(dir.path(), &config, line_port);
    // Load: a writer that keeps sending until the relay dies.
    let writer = thread::spawn(move || {
        let Ok(mut c) = TcpStream::connect(("127.0.0.1", line_port)) else {
            return;
        };
        for part in 0..100 {
            if c.write_all(&lines(part * 10_000, 10_000)).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + WAIT;
    while dir_bytes(&spill, "seg") < 600_000 {
        assert!(Instant::now() < deadline, "nothing spilled");
        thread::sleep(Duration::from_millis(5));
    }
    relay.signal("KILL");
    wait_exit(&mut relay);
    let _ = writer.join();

    // What the log holds after the kill (with fsync = always: everything fsynced).
    // The spill directory also holds the relay's lock file: take the destination's directory.
    let log_dir = std::fs::read_dir(&spill)
        .expect("spill dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .expect("destination dir");
    let mut logged = Vec::new();
    let torn_tail = {
        let (mut log, report) =
            SpillLog::open(&log_dir, SpillConfig::default()).expect("open spill log");
        // SIGKILL may land in the middle of a record write: at most the newest segment's tail
        // is torn (never fsynced, so not owed), and recovery skips it.
        assert!(report.damaged_segments <= 1, "{report:?}");
        while let Ok(Some(b)) = log.read_next() {
            logged.push(b.iter().map(|d| d.value as usize).collect::<Vec<_>>());
        }
        if report.damaged_segments == 1 {
            report.abandoned_bytes
        } else {
            0
        }
    };
    assert!(logged.len() > 1);
    let mut segs: Vec<_> = std::fs::read_dir(&log_dir)
        .expect("log dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segs.sort();
    let newest = segs.last().expect("a segment");
    let mut bytes = std::fs::read(newest).expect("read segment");
    // Cut a torn tail left by the kill, so the deliberate corruption below hits the last
    // complete record and is the only damage the restart sees.
    bytes.truncate(bytes.len() - torn_tail as usize);
    // Corrupt the last record of the newest segment (its last payload byte).
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(newest, &bytes).expect("write segment");
    let lost = logged.pop().unwrap_or_default();
    let expected: Vec<usize> = logged.into_iter().flatten().collect();

    // Restart (in process, to read the counters) with the destination up.
    let sink = Sink::start_on("a", SinkProtocol::Pickle, dest_port);
    let relay2 = TestRelay::start(&format!(
        "[destinations]\nservers = [\"127.0.0.1:{dest_port}:a\"]\nbackoff_min_ms = 20\nbackoff_max_ms = 200\n\
         [destinations.spill]\ndir = {:?}\nsegment_bytes = 262144\n[telemetry]\ninterval_secs = 0\n",
        spill.display().to_string()
    ));
    let s = relay2.handle.stats();
    let d = &s.destinations[0];
    assert_eq!(d.spill.recovered, expected.len() as u64, "{d:?}");
    assert_eq!(
        d.spill.damaged_segments, 1,
        "the corrupt tail is counted: {d:?}"
    );
    sink.wait_for_count(expected.len(), WAIT);
    let got: Vec<usize> = sink.received().iter().map(|r| r.value as usize).collect();
    assert_eq!(got, expected, "every fsynced record arrives once, in order");
    assert!(lost.iter().all(|v| !got.contains(v)) || lost.is_empty());
    relay2.stop();
}

/// A relay spilling to a 32 KiB disk budget (`drop_newest` fallback) with a memory tier of
/// `memory` datapoints, for one destination on `port`.
fn small_disk_relay(dir: &Path, port: u16, memory: u64, segment_bytes: u64) -> TestRelay {
    TestRelay::start(&config_for(
        &[format!("127.0.0.1:{port}:a")],
        &format!(
            "[destinations.queue]\nmax_datapoints = {memory}\nspill_fallback = \"drop_newest\"\n\
             [destinations.spill]\ndir = {:?}\nsegment_bytes = {segment_bytes}\nmax_bytes = 32768\n",
            dir.display().to_string()
        ),
    ))
}

#[test]
fn disk_budget_reached_applies_drop_newest_with_exact_counters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = testkit::free_ports(1)[0];
    let relay = small_disk_relay(dir.path(), port, 1000, 8192);
    let n = 20_000;
    send(relay.line, &lines(0, n));
    let s = relay.wait_stats("all routed and settled", WAIT, |s| {
        let d = &s.destinations[0];
        d.routed == n as u64
            && d.spill.spilled_datapoints
                + d.dropped(DestinationDropReason::SpillFull)
                + d.queued_memory
                == n as u64
    });
    let d = &s.destinations[0];
    let full = d.dropped(DestinationDropReason::SpillFull);
    assert!(full > 0, "{d:?}");
    assert_eq!(d.dropped_total(), full, "{d:?}");
    assert_eq!(d.routed, d.sent + d.dropped_total() + d.queued, "{d:?}");
    assert_eq!(d.queued, d.queued_memory + d.queued_disk);
    let kept = d.queued as usize;
    let sink = Sink::start_on("a", SinkProtocol::Pickle, port);
    sink.wait_for_count(kept, WAIT);
    let s = relay.wait_stats("drained", WAIT, |s| s.destinations[0].queued == 0);
    let d = &s.destinations[0];
    assert_eq!(
        (d.sent, d.dropped(DestinationDropReason::SpillFull)),
        (kept as u64, full)
    );
    assert_eq!(sink.wait_quiet(Duration::from_millis(300), WAIT), kept);
    let got: Vec<usize> = sink.received().iter().map(|r| r.value as usize).collect();
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "kept data stays in order"
    );
    relay.stop();
}

/// Entering disk mode moved the memory tier's batches to a spill log that could not
/// take them, and they were dropped: with a small disk the destination got fewer datapoints
/// than with no disk at all. A memory-only `drop_newest` queue keeps its 10,000 datapoints of
/// this outage; the spilling queue must keep at least as many, and count every drop.
#[test]
fn spill_disk_full_loses_no_more_than_memory_policy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = testkit::free_ports(1)[0];
    let memory = 10_000;
    let relay = small_disk_relay(dir.path(), port, memory, 16384);
    let n = 50_000;
    send(relay.line, &lines(0, n));
    // Settled: everything routed, nothing left on its way to the log, and every routed
    // datapoint either queued or dropped (a push counts its batch as routed before it queues
    // or drops it, so a snapshot can fall in between).
    let s = relay.wait_stats("all routed and settled", WAIT, |s| {
        let d = &s.destinations[0];
        d.routed == n as u64
            && d.queued_disk + d.spill.replayed_datapoints == d.spill.spilled_datapoints
            && d.routed == d.sent + d.dropped_total() + d.queued
    });
    let d = &s.destinations[0];
    let kept = d.queued;
    assert!(
        kept >= memory,
        "kept {kept} datapoints, a memory-only queue keeps {memory}: {d:?}"
    );
    assert_eq!(
        d.dropped_total(),
        d.dropped(DestinationDropReason::SpillFull),
        "{d:?}"
    );
    assert_eq!(d.routed, d.sent + d.dropped_total() + d.queued, "{d:?}");
    let sink = Sink::start_on("a", SinkProtocol::Pickle, port);
    sink.wait_for_count(kept as usize, WAIT);
    let s = relay.wait_stats("drained", WAIT, |s| s.destinations[0].queued == 0);
    let d = &s.destinations[0];
    assert_eq!(d.sent, kept, "{d:?}");
    assert_eq!(
        sink.wait_quiet(Duration::from_millis(300), WAIT),
        kept as usize
    );
    let got: Vec<usize> = sink.received().iter().map(|r| r.value as usize).collect();
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "kept data stays in order"
    );
    relay.stop();
}

/// After `rm -rf` of the spill directory and `mkdir` again, nothing spilled any more
/// (the per-destination directory was not made again: every later datapoint dropped), and the
/// replay looped on `ENOENT` with the lost records shown as queued, so the destination received
/// nothing once back. The disk tier now makes its directory again and goes on; the records
/// removed with the directory are counted as lost (`spill_corrupt`) instead of looping; the
/// destination receives everything spilled after the directory was removed and recreated.
#[test]
fn spill_dir_removed_and_recreated_resumes_and_delivers_what_was_spilled_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spill = dir.path().join("spill");
    let port = testkit::free_ports(1)[0];
    let relay = TestRelay::start(&config_for(
        &[format!("127.0.0.1:{port}:a")],
        &spill_extra(&spill, ""),
    ));
    let (before, after) = (60_000, 60_000);
    send(relay.line, &lines(0, before));
    relay.wait_stats("the first part spilled", WAIT, |s| {
        let d = &s.destinations[0];
        d.routed == before as u64 && d.queued_disk > 0
    });
    std::fs::remove_dir_all(&spill).expect("rm -rf spill dir");
    std::fs::create_dir(&spill).expect("mkdir spill dir");
    // The log notices its active segment is gone (an I/O error, counted) within a second.
    relay.wait_stats("the removal noticed", WAIT, |s| {
        s.destinations[0].spill.io_errors > 0
    });
    send(relay.line, &lines(before, after));
    let total = (before + after) as u64;
    relay.wait_stats("the second part spilled", WAIT, |s| {
        let d = &s.destinations[0];
        d.routed == total && d.spill.spilled_datapoints + d.queued_memory >= after as u64
    });
    assert!(
        dir_bytes(&spill, "seg") > 0,
        "spilling resumed into the recreated directory"
    );
    let sink = Sink::start_on("a", SinkProtocol::Pickle, port);
    let s = relay.wait_stats("drained", WAIT, |s| s.destinations[0].queued == 0);
    let d = &s.destinations[0];
    assert_eq!(d.routed, d.sent + d.dropped_total(), "{d:?}");
    assert_eq!(
        d.dropped_total(),
        d.dropped(DestinationDropReason::SpillCorrupt),
        "only the removed records are lost: {d:?}"
    );
    sink.wait_for_count(d.sent as usize, WAIT);
    let got: std::collections::HashSet<usize> =
        sink.received().iter().map(|r| r.value as usize).collect();
    let missing = (before..before + after)
        .filter(|i| !got.contains(i))
        .count();
    assert_eq!(
        missing, 0,
        "datapoints spilled after the recreation missing"
    );
    relay.stop();
}

/// A second relay started on the same spill directory started and replayed the first
/// one's logs (duplicates, or acknowledgements lost). The spill directory is now locked
/// (`flock`) for a relay's life: the second relay exits with the configuration-error code and
/// says which directory is in use, and the first goes on.
#[test]
fn second_relay_on_the_same_spill_dir_exits_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spill = dir.path().join("spill");
    let ports = testkit::free_ports(3);
    let mut first = start_binary(
        dir.path(),
        &binary_config(ports[0], ports[2], &spill, "interval"),
        ports[0],
    );
    let mut second = crate::anthracite("second")
        .toml(
            dir.path(),
            &binary_config(ports[1], ports[2], &spill, "interval"),
        )
        .start();
    let status = second.wait_exit(Duration::from_secs(60), "the second relay did not exit");
    let stderr = second.log();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is in use by another relay")
            && stderr.contains(&spill.display().to_string()),
        "{stderr}"
    );
    assert!(
        TcpStream::connect(("127.0.0.1", ports[1])).is_err(),
        "the second relay never listened"
    );
    assert!(first.exited().is_none(), "the first relay still runs");
    first.signal("TERM");
    assert!(wait_exit(&mut first).success());
}
