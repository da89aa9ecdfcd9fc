//! A counting carbon sink: a loopback TCP listener that accepts any number of connections and
//! records every datapoint it receives, decoding pickle with `serde_pickle` or protobuf with
//! its own prost types (both independent of anthracite's decoders), or plaintext lines;
//! optionally behind TLS (rustls), or a UDP socket reading plaintext datagrams. Threads, not
//! tokio, so it works beside any runtime.

use std::collections::HashMap;
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_pickle::{DeOptions, Value};

/// What the sink expects on its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkProtocol {
    /// 4-byte big-endian length + pickle of `[(path, (timestamp, value)), …]`.
    Pickle,
    /// `path value timestamp\n`.
    Line,
    /// 4-byte big-endian length + carbon.proto `Payload`.
    Protobuf,
    /// `path value timestamp\n` lines in UDP datagrams (each datagram whole lines).
    Udp,
}

/// carbon.proto, declared here so the sink does not share anthracite's decoder.
mod carbon_proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Point {
        #[prost(uint32, tag = "1")]
        pub timestamp: u32,
        #[prost(double, tag = "2")]
        pub value: f64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Metric {
        #[prost(string, tag = "1")]
        pub metric: String,
        #[prost(message, repeated, tag = "2")]
        pub points: Vec<Point>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Payload {
        #[prost(message, repeated, tag = "1")]
        pub metrics: Vec<Metric>,
    }
}

/// One received datapoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    /// Metric path, as sent.
    pub path: String,
    /// Timestamp as a float (carbon sends floats).
    pub timestamp: f64,
    /// Value.
    pub value: f64,
}

/// Multiset key of a datapoint: path and the bit patterns of timestamp and value (`-0.0`
/// normalized to `0.0`), so equal datapoints compare equal exactly.
pub type Key = (String, u64, u64);

impl Received {
    /// This datapoint's multiset key.
    pub fn key(&self) -> Key {
        (self.path.clone(), bits(self.timestamp), bits(self.value))
    }
}

fn bits(x: f64) -> u64 {
    if x == 0.0 {
        0.0f64.to_bits()
    } else {
        x.to_bits()
    }
}

#[derive(Default)]
struct State {
    received: Vec<Received>,
    errors: Vec<String>,
    connections: usize,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
}

/// A running sink; dropping it stops its threads.
pub struct CountingSink {
    /// Label for messages (e.g. the destination it stands for).
    pub label: String,
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
    udp: bool,
}

fn new_shared() -> Arc<Shared> {
    Arc::new(Shared {
        state: Mutex::new(State::default()),
        changed: Condvar::new(),
        stop: AtomicBool::new(false),
    })
}

fn record(shared: &Shared, points: Vec<Received>, errors: Vec<String>) {
    if !points.is_empty() || !errors.is_empty() {
        let mut st = shared.state.lock().unwrap();
        st.received.extend(points);
        st.errors.extend(errors);
        shared.changed.notify_all();
    }
}

impl CountingSink {
    /// Binds 127.0.0.1:0 and starts accepting.
    pub fn start(label: &str, protocol: SinkProtocol) -> CountingSink {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind sink on 127.0.0.1:0");
        Self::serve_on(label, protocol, listener)
    }

    /// Binds 127.0.0.1:`port` (e.g. a destination that comes up late) and starts accepting.
    /// Retries for up to 10 s while the port is still in use; then panics.
    pub fn start_on(label: &str, protocol: SinkProtocol, port: u16) -> CountingSink {
        Self::start_on_with(label, protocol, port, None)
    }

    /// Like [`start_on`](Self::start_on), terminating TLS with `tls` when given (TCP
    /// protocols only).
    pub fn start_on_with(
        label: &str,
        protocol: SinkProtocol,
        port: u16,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> CountingSink {
        if protocol == SinkProtocol::Udp {
            return Self::serve_udp_on(label, port);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", port)) {
                Ok(l) => break l,
                Err(e) if e.kind() == ErrorKind::AddrInUse && Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("sink {label}: bind 127.0.0.1:{port}: {e}"),
            }
        };
        Self::serve_tcp(label, protocol, listener, tls)
    }

    /// A TLS sink on 127.0.0.1:0 presenting `tls`'s certificate.
    pub fn start_tls(
        label: &str,
        protocol: SinkProtocol,
        tls: Arc<rustls::ServerConfig>,
    ) -> CountingSink {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind sink on 127.0.0.1:0");
        Self::serve_tcp(label, protocol, listener, Some(tls))
    }

    fn serve_on(label: &str, protocol: SinkProtocol, listener: TcpListener) -> CountingSink {
        Self::serve_tcp(label, protocol, listener, None)
    }

    /// Datagrams on 127.0.0.1:`port` (0: any), each decoded as whole plaintext lines.
    fn serve_udp_on(label: &str, port: u16) -> CountingSink {
        let socket = UdpSocket::bind(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("sink {label}: bind udp 127.0.0.1:{port}: {e}"));
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("udp read timeout");
        let addr = socket.local_addr().expect("sink local_addr");
        let shared = new_shared();
        let s = shared.clone();
        let acceptor = thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            while !s.stop.load(Ordering::SeqCst) {
                match socket.recv(&mut buf) {
                    Ok(n) => {
                        let (points, mut errors, consumed) = decode_lines(&buf[..n]);
                        if consumed != n {
                            errors.push(format!("datagram ends inside a line ({n} bytes)"));
                        }
                        record(&s, points, errors);
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        });
        CountingSink {
            label: label.to_owned(),
            addr,
            shared,
            acceptor: Some(acceptor),
            udp: true,
        }
    }

    fn serve_tcp(
        label: &str,
        protocol: SinkProtocol,
        listener: TcpListener,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> CountingSink {
        let addr = listener.local_addr().expect("sink local_addr");
        let shared = new_shared();
        let acc_shared = shared.clone();
        let acceptor = thread::spawn(move || {
            for conn in listener.incoming() {
                if acc_shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                acc_shared.state.lock().unwrap().connections += 1;
                let s = acc_shared.clone();
                let tls = tls.clone();
                thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
                    match tls {
                        None => serve(conn, protocol, &s),
                        Some(config) => match rustls::ServerConnection::new(config) {
                            Ok(session) => {
                                serve(rustls::StreamOwned::new(session, conn), protocol, &s)
                            }
                            Err(e) => record(&s, Vec::new(), vec![format!("tls session: {e}")]),
                        },
                    }
                });
            }
        });
        CountingSink {
            label: label.to_owned(),
            addr,
            shared,
            acceptor: Some(acceptor),
            udp: false,
        }
    }

    /// The sink's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The sink's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Datapoints received so far.
    pub fn count(&self) -> usize {
        self.shared.state.lock().unwrap().received.len()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.state.lock().unwrap().connections
    }

    /// A copy of every datapoint received so far, in arrival order per connection.
    pub fn received(&self) -> Vec<Received> {
        self.shared.state.lock().unwrap().received.clone()
    }

    /// Decode errors seen so far (bad frames or lines), with their reasons.
    pub fn errors(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().errors.clone()
    }

    /// The multiset of received datapoints: key → how many times it arrived.
    pub fn multiset(&self) -> HashMap<Key, usize> {
        let mut m = HashMap::new();
        for r in &self.shared.state.lock().unwrap().received {
            *m.entry(r.key()).or_insert(0) += 1;
        }
        m
    }

    /// Waits until at least `n` datapoints have arrived and returns the count; panics after
    /// `timeout` saying how many arrived.
    pub fn wait_for_count(&self, n: usize, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.state.lock().unwrap();
        loop {
            if st.received.len() >= n {
                return st.received.len();
            }
            let now = Instant::now();
            if now >= deadline {
                panic!(
                    "sink {} ({}): waited {timeout:?} for {n} datapoints, got {} over {} connections; decode errors: {:?}",
                    self.label,
                    self.addr,
                    st.received.len(),
                    st.connections,
                    st.errors.iter().take(5).collect::<Vec<_>>()
                );
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap()
                .0;
        }
    }

    /// Waits until no datapoint has arrived for `quiet`, bounded by `timeout`; returns the count.
    /// Panics if the stream never goes quiet within `timeout`.
    pub fn wait_quiet(&self, quiet: Duration, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        let mut last = self.count();
        let mut since = Instant::now();
        loop {
            thread::sleep(Duration::from_millis(50));
            let now = self.count();
            if now != last {
                last = now;
                since = Instant::now();
            } else if since.elapsed() >= quiet {
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "sink {}: still receiving after {timeout:?} ({now} datapoints)",
                self.label
            );
        }
    }
}

impl Drop for CountingSink {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor so it sees the flag; connection threads notice within a read timeout
        // (a UDP sink's thread notices within its own).
        if !self.udp {
            let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        }
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}

fn serve(mut conn: impl Read, protocol: SinkProtocol, shared: &Shared) {
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        match conn.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                let (points, errors, consumed) = match protocol {
                    SinkProtocol::Pickle => decode_pickle_frames(&buf),
                    SinkProtocol::Protobuf => decode_protobuf_frames(&buf),
                    SinkProtocol::Line | SinkProtocol::Udp => decode_lines(&buf),
                };
                buf.drain(..consumed);
                record(shared, points, errors);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::InvalidData => {
                // A TLS handshake or record the sink refused (or that the client aborted).
                record(shared, Vec::new(), vec![format!("tls: {e}")]);
                return;
            }
            Err(_) => break,
        }
    }
    if !buf.is_empty() {
        let mut st = shared.state.lock().unwrap();
        st.errors
            .push(format!("{} bytes left undecoded at close", buf.len()));
        shared.changed.notify_all();
    }
}

/// Calls `each` with every complete length-prefixed frame at the start of `buf`; returns the
/// bytes consumed.
fn frames(buf: &[u8], mut each: impl FnMut(&[u8])) -> usize {
    let mut at = 0;
    while buf.len() - at >= 4 {
        let len = u32::from_be_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
        if buf.len() - at - 4 < len {
            break;
        }
        each(&buf[at + 4..at + 4 + len]);
        at += 4 + len;
    }
    at
}

/// Decodes every complete frame at the start of `buf`: (datapoints, errors, bytes consumed).
fn decode_pickle_frames(buf: &[u8]) -> (Vec<Received>, Vec<String>, usize) {
    let mut points = Vec::new();
    let mut errors = Vec::new();
    let at = frames(buf, |frame| {
        match serde_pickle::value_from_slice(frame, DeOptions::new()) {
            Ok(v) => match datapoints_of(v) {
                Ok(mut p) => points.append(&mut p),
                Err(e) => errors.push(e),
            },
            Err(e) => errors.push(format!("unpickle: {e}")),
        }
    });
    (points, errors, at)
}

/// Decodes every complete protobuf frame at the start of `buf`.
fn decode_protobuf_frames(buf: &[u8]) -> (Vec<Received>, Vec<String>, usize) {
    use prost::Message;
    let mut points = Vec::new();
    let mut errors = Vec::new();
    let at = frames(buf, |frame| match carbon_proto::Payload::decode(frame) {
        Ok(p) => {
            for m in p.metrics {
                for pt in m.points {
                    points.push(Received {
                        path: m.metric.clone(),
                        timestamp: f64::from(pt.timestamp),
                        value: pt.value,
                    });
                }
            }
        }
        Err(e) => errors.push(format!("protobuf: {e}")),
    });
    (points, errors, at)
}

fn datapoints_of(v: Value) -> Result<Vec<Received>, String> {
    let items = match v {
        Value::List(items) | Value::Tuple(items) => items,
        other => return Err(format!("payload is not a list: {other:?}")),
    };
    items
        .into_iter()
        .map(|item| {
            let (path, dp) = pair(item)?;
            let path = match path {
                Value::String(s) => s,
                Value::Bytes(b) => String::from_utf8_lossy(&b).into_owned(),
                other => return Err(format!("path is not a string: {other:?}")),
            };
            let (ts, val) = pair(dp)?;
            Ok(Received {
                path,
                timestamp: number(ts)?,
                value: number(val)?,
            })
        })
        .collect()
}

fn pair(v: Value) -> Result<(Value, Value), String> {
    match v {
        Value::List(mut items) | Value::Tuple(mut items) if items.len() == 2 => {
            let b = items.pop().unwrap();
            let a = items.pop().unwrap();
            Ok((a, b))
        }
        other => Err(format!("expected a pair: {other:?}")),
    }
}

fn number(v: Value) -> Result<f64, String> {
    match v {
        Value::F64(x) => Ok(x),
        Value::I64(x) => Ok(x as f64),
        Value::Int(x) => x.to_string().parse().map_err(|e| format!("big int: {e}")),
        Value::String(s) => s
            .trim()
            .parse()
            .map_err(|e| format!("numeric string {s:?}: {e}")),
        other => Err(format!("not a number: {other:?}")),
    }
}

/// Decodes every complete line at the start of `buf`: (datapoints, errors, bytes consumed).
fn decode_lines(buf: &[u8]) -> (Vec<Received>, Vec<String>, usize) {
    let mut points = Vec::new();
    let mut errors = Vec::new();
    let mut at = 0;
    while let Some(nl) = buf[at..].iter().position(|&b| b == b'\n') {
        let raw = &buf[at..at + nl];
        at += nl + 1;
        let line = String::from_utf8_lossy(raw);
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [path, value, ts] => match (value.parse::<f64>(), ts.parse::<f64>()) {
                (Ok(value), Ok(timestamp)) => points.push(Received {
                    path: (*path).to_owned(),
                    timestamp,
                    value,
                }),
                _ => errors.push(format!("bad numbers in line {line:?}")),
            },
            _ => errors.push(format!("not 3 fields: {line:?}")),
        }
    }
    (points, errors, at)
}
