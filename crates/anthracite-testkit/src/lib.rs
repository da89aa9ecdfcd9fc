//! anthracite's test support: real processes and servers on loopback sockets, shared by the
//! workspace's integration suites (the root `tests/` binaries, and the stream crates' own).
//!
//! Everything here talks to real programs over 127.0.0.1, starts them on free ports, bounds
//! every wait, and stops what it started by PID:
//!
//! - [`relay_process`]: `anthracite` as a process — the one way a test runs the relay's
//!   binary ([`RelayCommand`] → [`RelayProcess`]: config, readiness, signals, logs).
//! - [`relay`]: anthracite in-process on loopback listeners, on its own runtime thread.
//! - [`process`]: any other child process with a bounded life ([`process::ManagedChild`]).
//! - [`cargo`]: where this build's binaries are, and building another package's binary.
//! - [`http`]: GET the admin endpoints, read Prometheus text.
//! - [`tls`]: a CA and server certificates made at test time (rcgen).
//! - [`venv`]: one Python 3.11 venv per checkout with `carbon==1.1.10`, `whisper==1.1.10` and
//!   `mmh3`, built once and shared by every test binary (file lock + completion marker).
//! - [`carbon`]: real `carbon-cache.py` instances ([`carbon::CarbonCaches`]), a real
//!   `carbon-relay.py` ([`carbon::CarbonRelay`]) and `carbon-aggregator.py`.
//! - [`whisper`]: read back what the caches stored, one Python process per batch of names.
//! - [`placement`]: ask carbon's own `ConsistentHashingRouter` where names go.
//! - [`java_server`]: Java servers resolved from Maven Central (`servers/<name>/pom.xml`).
//! - [`apt`]: Debian packages (Chromium, Prometheus, lintian) installed when missing.
//! - [`c_relay`]: the real carbon-c-relay 3.7.3 (Debian's package), in its test modes.
//! - [`c_relay_build`]: carbon-c-relay 3.7.3 built from Debian's source with gzip, lz4 and
//!   snappy.
//! - [`proxy`]: a fault-injecting or recording HTTP proxy (in front of kinesalite or DynamoDB
//!   Local).
//! - `kinesalite`, `dynamodb` (feature `kinesis`): a local Kinesis (kinesalite from npm,
//!   `servers/kinesalite/`) and DynamoDB Local (`servers/dynamodb-local/`), with AWS clients.
//! - `kafka` (feature `kafka`): one Apache Kafka broker per test binary
//!   (`servers/kafka-broker/`) and librdkafka clients of the test's own.
//!
//! The stand-in carbon-cache that receives what a relay sends is `anthracite-sink`'s `Sink`.
//! The testkit depends on the `anthracite` library only (for the in-process relay), never on
//! another crate of the workspace, so every crate's tests can use it.

#![warn(missing_docs)]

pub mod apt;
pub mod c_relay;
pub mod c_relay_build;
pub mod carbon;
pub mod cargo;
#[cfg(feature = "kinesis")]
pub mod dynamodb;
pub mod http;
pub mod java_server;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "kinesis")]
pub mod kinesalite;
pub mod placement;
pub mod process;
pub mod proxy;
pub mod relay;
pub mod relay_process;
pub mod tls;
pub mod venv;
pub mod whisper;

pub use relay_process::{RelayCommand, RelayProcess, scratch};

use std::future::Future;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Panics with `hint` unless `tool arg` runs and succeeds (a tool the test support needs).
pub fn require_tool(tool: &str, arg: &str, hint: &str) {
    let ok = Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "`{tool}` is not on PATH: {hint}");
}

/// Polls `cond` every 50 ms until it holds; panics with `what` after `limit`. A deadline for
/// a hung test, never a timing assertion.
pub async fn wait_for<F, Fut>(what: &str, limit: Duration, cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for_or(what, limit, cond, String::new).await;
}

/// [`wait_for`], adding what `state` says on timeout (what the test was waiting on, as it
/// last stood).
pub async fn wait_for_or<F, Fut>(
    what: &str,
    limit: Duration,
    mut cond: F,
    state: impl FnOnce() -> String,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + limit;
    loop {
        if cond().await {
            return;
        }
        if tokio::time::Instant::now() > end {
            panic!("timed out waiting for {what}\n{}", state());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reserves `n` distinct free loopback ports for processes that will listen on them: binds them
/// all at once (so they are distinct), then releases them.
///
/// The ports come from below the kernel's ephemeral range (`ip_local_port_range`), walked by
/// a process-wide cursor from a per-process offset: a port released here is then not handed
/// out as the source port of some other test's outgoing connection, or to a `bind(…:0)`, in
/// the moment before its listener binds it (carbon-relay failing with `EADDRINUSE`).
pub fn free_ports(n: usize) -> Vec<u16> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static CURSOR: AtomicUsize = AtomicUsize::new(0);
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<usize>().ok())
        .unwrap_or(32_768);
    const LOW: usize = 10_000;
    let mut listeners = Vec::with_capacity(n);
    if ephemeral_start > LOW + 1_000 {
        let span = ephemeral_start - LOW;
        let offset = std::process::id() as usize * 7_919;
        let mut tries = 0;
        while listeners.len() < n && tries < span {
            tries += 1;
            let port = LOW + (offset + CURSOR.fetch_add(1, Ordering::Relaxed)) % span;
            if let Ok(l) = TcpListener::bind(("127.0.0.1", port as u16)) {
                listeners.push(l);
            }
        }
    }
    while listeners.len() < n {
        listeners
            .push(TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a free port"));
    }
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .expect("local_addr of a bound listener")
                .port()
        })
        .collect()
}

/// Takes the machine's turn at carbon's fixed ports (2003, 2004, 2013, 2014) and the admin's
/// 8080, which a few tests must use as they are: the bare binary on carbon-relay's defaults,
/// the README's quick start, the embedding example while carbon's ports are taken. The
/// returned file holds an exclusive lock on one file in the system's temporary directory, so
/// those tests take turns across threads, test binaries and checkouts; dropping it lets the
/// next one in.
pub fn fixed_ports_turn() -> std::fs::File {
    let path = std::env::temp_dir().join("anthracite-fixed-ports.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open the fixed ports' lock file {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
    file
}

/// Panics, naming the port, unless every one of `ports` is free on every address (a
/// test about to start something on fixed ports, during its [`fixed_ports_turn`]).
pub fn assert_ports_free(ports: &[u16]) {
    for &port in ports {
        if let Err(e) = TcpListener::bind(("0.0.0.0", port)) {
            panic!(
                "port {port} is taken ({e}); this test needs it free: stop whatever listens \
                 there (`ss -ltnp 'sport = :{port}'` shows it)"
            );
        }
    }
}

/// Sends `path value timestamp\n` lines over one TCP connection to `addr` and closes it.
pub fn send_lines(addr: std::net::SocketAddr, points: &[(String, i64, f64)]) {
    use std::io::Write;
    let mut text = String::new();
    for (path, ts, value) in points {
        text.push_str(&format!("{path} {value:?} {ts}\n"));
    }
    let mut conn = std::net::TcpStream::connect(addr)
        .unwrap_or_else(|e| panic!("connect to {addr} to send lines: {e}"));
    conn.write_all(text.as_bytes())
        .unwrap_or_else(|e| panic!("send lines to {addr}: {e}"));
    conn.shutdown(std::net::Shutdown::Write).ok();
}

/// Sends `points` as carbon pickle frames (4-byte big-endian length + pickle of
/// `[(path, (timestamp, value)), …]`, encoded by `serde_pickle`), at most `per_frame` per frame,
/// over one TCP connection to `addr`, and closes it.
pub fn send_pickle(addr: std::net::SocketAddr, points: &[(String, i64, f64)], per_frame: usize) {
    use std::io::Write;
    let mut bytes = Vec::new();
    for chunk in points.chunks(per_frame.max(1)) {
        let payload: Vec<(&str, (i64, f64))> = chunk
            .iter()
            .map(|(p, t, v)| (p.as_str(), (*t, *v)))
            .collect();
        let body = serde_pickle::to_vec(&payload, serde_pickle::SerOptions::new())
            .expect("serde_pickle encodes datapoints");
        bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&body);
    }
    let mut conn = std::net::TcpStream::connect(addr)
        .unwrap_or_else(|e| panic!("connect to {addr} to send pickle: {e}"));
    conn.write_all(&bytes)
        .unwrap_or_else(|e| panic!("send pickle to {addr}: {e}"));
    conn.shutdown(std::net::Shutdown::Write).ok();
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

/// The golden compatibility data from the real systems (carbon 1.1.10, the KPL), committed
/// unchanged in `tests/compat/` (its README says how each file was made).
pub const COMPAT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/compat");

/// `tests/compat/<file>`, read in place.
pub fn compat_path(file: &str) -> std::path::PathBuf {
    std::path::Path::new(COMPAT_DIR).join(file)
}

/// The workspace's root directory (where the top `Cargo.toml` is).
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..")
}

/// `<target dir>/tmp`, what Cargo gives integration tests as `CARGO_TARGET_TMPDIR`: scratch
/// that outlives a test binary (installed servers, the carbon venv, kept logs).
pub fn target_tmp() -> std::path::PathBuf {
    cargo::target_dir().join("tmp")
}
