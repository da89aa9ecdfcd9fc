//! An in-process anthracite on loopback ports, on its own runtime thread, for sync tests.

use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use anthracite::extension::Extensions;
use anthracite::{Config, Relay, RelayHandle, ShutdownReport};

/// A running relay with injected listeners bound to 127.0.0.1:0.
pub struct TestRelay {
    /// Plaintext TCP address.
    pub line: SocketAddr,
    /// Pickle TCP address.
    pub pickle: SocketAddr,
    /// Plaintext UDP address.
    pub udp: SocketAddr,
    /// Protobuf TCP address.
    pub protobuf: SocketAddr,
    /// Counters and ingestors.
    pub handle: RelayHandle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<ShutdownReport>>,
}

impl TestRelay {
    /// Starts a relay on `toml` (listen addresses in it are ignored: all four receivers get
    /// fresh loopback sockets).
    pub fn start(toml: &str) -> TestRelay {
        Self::start_inner(toml, &Extensions::new(), None)
    }

    /// Like [`start`](Self::start), with the sections and protocols of `extensions` (a stream
    /// crate's tests pass their own).
    pub fn start_with(toml: &str, extensions: &Extensions) -> TestRelay {
        Self::start_inner(toml, extensions, None)
    }

    /// Like [`start`](Self::start), serving plaintext datagrams on `udp` (already bound).
    pub fn start_with_udp(toml: &str, udp: std::net::UdpSocket) -> TestRelay {
        Self::start_inner(toml, &Extensions::new(), Some(udp))
    }

    fn start_inner(
        toml: &str,
        extensions: &Extensions,
        udp: Option<std::net::UdpSocket>,
    ) -> TestRelay {
        let config =
            Config::from_toml_str_with(toml, extensions).expect("test relay config is valid");
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let line = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                let pickle = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                let udp = match udp {
                    Some(s) => {
                        s.set_nonblocking(true).expect("nonblocking");
                        tokio::net::UdpSocket::from_std(s).expect("udp socket")
                    }
                    None => tokio::net::UdpSocket::bind("127.0.0.1:0")
                        .await
                        .expect("bind"),
                };
                let protobuf = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                let addrs = (
                    line.local_addr().expect("addr"),
                    pickle.local_addr().expect("addr"),
                    udp.local_addr().expect("addr"),
                    protobuf.local_addr().expect("addr"),
                );
                let relay = Relay::builder(config)
                    .line_listener(line)
                    .pickle_listener(pickle)
                    .protobuf_listener(protobuf)
                    .udp_socket(udp)
                    .build()
                    .expect("relay builds");
                tx.send((addrs, relay.handle())).expect("report addresses");
                relay
                    .run(async {
                        let _ = stop_rx.await;
                    })
                    .await
                    .expect("relay runs")
            })
        });
        let ((line, pickle, udp, protobuf), handle) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("relay started within 10 s");
        TestRelay {
            line,
            pickle,
            udp,
            protobuf,
            handle,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// Waits until `pred(stats)` holds, panicking with the last stats after `timeout`.
    pub fn wait_stats(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&anthracite::StatsSnapshot) -> bool,
    ) -> anthracite::StatsSnapshot {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.handle.stats();
            if pred(&s) {
                return s;
            }
            if Instant::now() > deadline {
                panic!("timed out after {timeout:?} waiting for {what}; stats: {s:#?}");
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Shuts the relay down (the same path as SIGTERM) and returns its report.
    pub fn stop(mut self) -> ShutdownReport {
        self.stop_inner().expect("relay thread finished")
    }

    fn stop_inner(&mut self) -> Option<ShutdownReport> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.thread.take().and_then(|t| t.join().ok())
    }
}

impl Drop for TestRelay {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// A relay config with the given destinations (`host:port:instance`), pickle out, no
/// self-metrics, plus `extra` TOML appended.
pub fn config_for(destinations: &[String], extra: &str) -> String {
    let servers: Vec<String> = destinations.iter().map(|d| format!("{d:?}")).collect();
    format!(
        "[destinations]\nservers = [{}]\nbackoff_min_ms = 20\nbackoff_max_ms = 200\n\
         [telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 10\n{extra}",
        servers.join(", ")
    )
}
