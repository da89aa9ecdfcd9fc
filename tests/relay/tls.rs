//! TLS, both ways, over loopback with certificates made at test time.
//!
//! Towards destinations (`destinations.tls`, carbon's `DESTINATION_TRANSPORT = ssl`): a
//! destination whose certificate is signed by another CA, has expired, or names another host
//! fails every connection attempt with a log line saying why; the attempts are counted, the
//! data goes to the spill log, and nothing reaches the destination — neither inside TLS nor in
//! plaintext (a plaintext sink on the port sees no datapoint). With the right certificate the
//! same relay delivers.
//!
//! On the receivers (`listen.tls`): a TLS client's lines and pickle frames are relayed; a
//! plaintext client on the TLS port gets nothing relayed; with `client_ca` a client without a
//! certificate is refused.

use anthracite_testkit as testkit;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anthracite_sink::{Sink, SinkProtocol};
use testkit::relay::{TestRelay, config_for};
use testkit::tls::{ServerCert, TestCa};

const WAIT: Duration = Duration::from_secs(30);

/// Everything the relays in this binary log (one global subscriber; tests filter by port).
fn logs() -> &'static Mutex<Vec<u8>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || LogWriter(writer.clone()))
            .try_init();
        buf
    })
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Log lines mentioning `needle`.
fn log_lines(needle: &str) -> Vec<String> {
    String::from_utf8_lossy(&logs().lock().unwrap())
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_owned)
        .collect()
}

fn lines(prefix: &str, n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| format!("{prefix}.{i:05} {i} 1700000000\n").into_bytes())
        .collect()
}

/// A relay whose one destination is `port` on 127.0.0.1, over TLS trusting `ca`, spilling to
/// `spill` once 1,000 datapoints wait in memory.
fn tls_relay(port: u16, ca: &Path, spill: &Path) -> TestRelay {
    logs();
    TestRelay::start(&config_for(
        &[format!("127.0.0.1:{port}:a")],
        &format!(
            "[destinations.tls]\nca_file = {:?}\n\
             [destinations.queue]\nmax_datapoints = 1000\n\
             [destinations.spill]\ndir = {:?}\nsegment_bytes = 65536\nmax_bytes = 1048576\n",
            ca.display().to_string(),
            spill.display().to_string(),
        ),
    ))
}

/// Sends `n` lines, waits until the relay failed to connect at least twice, checks the data
/// is held (queued, mostly spilled) and nothing was sent, and returns the spill report.
fn refused(relay: TestRelay, n: usize, sink: &Sink, log_needle: &str, why: &str) {
    let mut c = TcpStream::connect(relay.line).expect("connect");
    c.write_all(&lines("tls.refused", n)).expect("write");
    drop(c);
    let s = relay.wait_stats(
        "connect failures, every datapoint queued, the overflow spilled",
        WAIT,
        |s| {
            s.ingest.received == n as u64
                && s.destinations[0].connect_failures >= 2
                && s.destinations[0].queued == n as u64
                && s.destinations[0].spill.spilled_datapoints > 0
        },
    );
    let d = &s.destinations[0];
    assert_eq!(d.sent, 0, "{why}: {d:?}");
    assert_eq!(d.dropped_total(), 0, "{why}: {d:?}");
    let report = relay.stop();
    assert_eq!(
        report.spilled.iter().map(|(_, n)| *n).sum::<u64>(),
        n as u64,
        "{why}: everything left in the spill log at shutdown: {report:?}"
    );
    assert_eq!(
        sink.count(),
        0,
        "{why}: the destination received datapoints"
    );
    let found = log_lines(log_needle);
    assert!(
        found
            .iter()
            .any(|l| l.contains("cannot connect") && l.contains(why)),
        "{why}: no log line for {log_needle} saying so; lines: {found:#?}"
    );
}

/// A TLS sink presenting `cert`.
fn tls_sink(cert: &ServerCert) -> Sink {
    Sink::start_tls("tls-sink", SinkProtocol::Pickle, cert.server_config())
}

#[test]
fn destination_certificate_from_another_ca_is_refused_and_data_spills() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trusted = TestCa::new("trusted CA");
    let other = TestCa::new("other CA");
    let sink = tls_sink(&other.server_cert(&["127.0.0.1", "localhost"]));
    let relay = tls_relay(
        sink.port(),
        &trusted.write(dir.path(), "ca.pem"),
        &dir.path().join("spill"),
    );
    let port = sink.port().to_string();
    refused(
        relay,
        5_000,
        &sink,
        &port,
        "invalid peer certificate: UnknownIssuer",
    );
}

#[test]
fn expired_destination_certificate_is_refused_and_data_spills() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("CA");
    let sink = tls_sink(&ca.expired_server_cert(&["127.0.0.1", "localhost"]));
    let relay = tls_relay(
        sink.port(),
        &ca.write(dir.path(), "ca.pem"),
        &dir.path().join("spill"),
    );
    let port = sink.port().to_string();
    refused(relay, 5_000, &sink, &port, "certificate expired");
}

#[test]
fn destination_certificate_for_another_name_is_refused_and_data_spills() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("CA");
    let sink = tls_sink(&ca.server_cert(&["cache.example.org"]));
    let relay = tls_relay(
        sink.port(),
        &ca.write(dir.path(), "ca.pem"),
        &dir.path().join("spill"),
    );
    let port = sink.port().to_string();
    refused(relay, 5_000, &sink, &port, "certificate not valid for name");
}

#[test]
fn tls_destination_never_falls_back_to_plaintext() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("CA");
    // A carbon-cache speaking plaintext on the port: it sees a ClientHello, no datapoint.
    let sink = Sink::start("plaintext", SinkProtocol::Line);
    let relay = tls_relay(
        sink.port(),
        &ca.write(dir.path(), "ca.pem"),
        &dir.path().join("spill"),
    );
    let port = sink.port().to_string();
    // The plaintext peer never answers the ClientHello: the handshake times out.
    refused(relay, 2_000, &sink, &port, "TLS handshake timed out");
}

#[test]
fn valid_destination_certificate_delivers_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("CA");
    let sink = tls_sink(&ca.server_cert(&["127.0.0.1"]));
    let relay = tls_relay(
        sink.port(),
        &ca.write(dir.path(), "ca.pem"),
        &dir.path().join("spill"),
    );
    let mut c = TcpStream::connect(relay.line).expect("connect");
    c.write_all(&lines("tls.ok", 5_000)).expect("write");
    drop(c);
    assert_eq!(sink.wait_for_count(5_000, WAIT), 5_000);
    let s = relay.wait_stats("all sent", WAIT, |s| s.destinations[0].sent == 5_000);
    assert_eq!(s.destinations[0].connect_failures, 0);
    assert!(sink.errors().is_empty(), "{:?}", sink.errors());
}

/// A rustls client trusting `ca`, optionally presenting `client`.
fn tls_client(
    addr: SocketAddr,
    ca: &TestCa,
    client: Option<&ServerCert>,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).expect("ca pem"))
        .expect("add root");
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots);
    let config = match client {
        Some(c) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(c.cert_pem.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .expect("client cert"),
                PrivateKeyDer::from_pem_slice(c.key_pem.as_bytes()).expect("client key"),
            )
            .expect("client auth"),
        None => builder.with_no_client_auth(),
    };
    let conn =
        rustls::ClientConnection::new(Arc::new(config), "127.0.0.1".try_into().expect("name"))
            .expect("client connection");
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(WAIT)).expect("timeout");
    rustls::StreamOwned::new(conn, tcp)
}

/// Writes `bytes` over TLS, then closes cleanly (close_notify) and waits for the relay to close.
fn send_tls(mut stream: rustls::StreamOwned<rustls::ClientConnection, TcpStream>, bytes: &[u8]) {
    stream.write_all(bytes).expect("tls write");
    stream.flush().expect("tls flush");
    stream.conn.send_close_notify();
    let _ = stream.flush();
    let _ = stream.sock.shutdown(std::net::Shutdown::Write);
    let mut buf = [0u8; 64];
    let _ = stream.read(&mut buf);
}

fn listen_tls(dir: &Path, ca: &TestCa, client_ca: bool) -> String {
    let (cert, key) = ca.server_cert(&["127.0.0.1"]).write(dir, "relay");
    let ca_path = ca.write(dir, "clients-ca.pem");
    format!(
        "[listen.tls]\ncert_file = {:?}\nkey_file = {:?}\n{}",
        cert.display().to_string(),
        key.display().to_string(),
        if client_ca {
            format!("client_ca = {:?}\n", ca_path.display().to_string())
        } else {
            String::new()
        }
    )
}

#[test]
fn tls_receivers_relay_tls_clients_and_ignore_plaintext_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("relay CA");
    let sink = Sink::start("sink", SinkProtocol::Pickle);
    let relay = TestRelay::start(&config_for(
        &[format!("{}:a", sink.addr())],
        &listen_tls(dir.path(), &ca, false),
    ));
    send_tls(
        tls_client(relay.line, &ca, None),
        &lines("tls.in.line", 1_000),
    );
    let mut pickle = Vec::new();
    let body = serde_pickle::to_vec(
        &vec![("tls.in.pickle", (1_700_000_000i64, 1.5f64)); 10],
        serde_pickle::SerOptions::new(),
    )
    .expect("pickle");
    pickle.extend_from_slice(&(body.len() as u32).to_be_bytes());
    pickle.extend_from_slice(&body);
    send_tls(tls_client(relay.pickle, &ca, None), &pickle);
    assert_eq!(sink.wait_for_count(1_010, WAIT), 1_010);

    // Plaintext on the TLS port: the handshake fails, nothing is parsed.
    let mut plain = TcpStream::connect(relay.line).expect("connect");
    let _ = plain.write_all(&lines("tls.in.plaintext", 100));
    let _ = plain.shutdown(std::net::Shutdown::Write);
    plain.set_read_timeout(Some(WAIT)).expect("timeout");
    // The relay answers the "ClientHello" with an alert and closes; nothing was parsed.
    let mut buf = [0u8; 512];
    while matches!(plain.read(&mut buf), Ok(n) if n > 0) {}
    let s = relay.handle.stats();
    assert_eq!(s.ingest.received, 1_010, "{s:?}");
    assert_eq!(s.ingest.invalid.total(), 0, "{s:?}");
    assert_eq!(sink.count(), 1_010);
}

#[test]
fn client_ca_refuses_clients_without_a_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("relay and clients CA");
    let sink = Sink::start("sink", SinkProtocol::Pickle);
    let relay = TestRelay::start(&config_for(
        &[format!("{}:a", sink.addr())],
        &listen_tls(dir.path(), &ca, true),
    ));
    let client_cert = ca.server_cert(&["client.example.org"]);
    send_tls(
        tls_client(relay.line, &ca, Some(&client_cert)),
        &lines("mtls.ok", 100),
    );
    assert_eq!(sink.wait_for_count(100, WAIT), 100);
    let mut anonymous = tls_client(relay.line, &ca, None);
    let _ = anonymous.write_all(&lines("mtls.anonymous", 100));
    let _ = anonymous.flush();
    // The relay refuses the handshake and closes: the read ends in an error or EOF.
    let mut buf = [0u8; 64];
    while matches!(anonymous.read(&mut buf), Ok(n) if n > 0) {}
    drop(anonymous);
    assert_eq!(relay.handle.stats().ingest.received, 100);
    assert_eq!(sink.count(), 100);
}

/// A self-signed certificate made by the usual `openssl req -x509 -newkey rsa:2048
/// -nodes …` one-liner (which sets `CA:TRUE`) given as the destination's trusted CA worked with
/// carbon-relay and failed with anthracite (`CaUsedAsEndEntity`; 0 of 3,624 delivered). A
/// destination presenting exactly a certificate configured as trusted is now accepted.
#[test]
fn ca_true_self_signed_destination_certificate_configured_as_trusted_is_accepted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cert = ServerCert::self_signed_ca(&["127.0.0.1", "localhost"]);
    let sink = tls_sink(&cert);
    let (trusted, _) = cert.write(dir.path(), "pinned");
    let relay = tls_relay(sink.port(), &trusted, &dir.path().join("spill"));
    let mut c = TcpStream::connect(relay.line).expect("connect");
    c.write_all(&lines("tls.pinned", 3_624)).expect("write");
    drop(c);
    assert_eq!(sink.wait_for_count(3_624, WAIT), 3_624);
    let s = relay.wait_stats("all sent", WAIT, |s| s.destinations[0].sent == 3_624);
    assert_eq!(s.destinations[0].connect_failures, 0);
    relay.stop();
}

/// The receivers' side: a client presenting exactly the CA:TRUE self-signed
/// certificate configured as `client_ca` is accepted (pinned), as OpenSSL would.
#[test]
fn ca_true_self_signed_client_certificate_configured_as_client_ca_is_accepted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("relay CA");
    let client = ServerCert::self_signed_ca(&["client.example"]);
    let (cert, key) = ca.server_cert(&["127.0.0.1"]).write(dir.path(), "relay");
    let (client_ca, _) = client.write(dir.path(), "client");
    let sink = Sink::start("sink", SinkProtocol::Pickle);
    let relay = TestRelay::start(&config_for(
        &[format!("{}:a", sink.addr())],
        &format!(
            "[listen.tls]\ncert_file = {:?}\nkey_file = {:?}\nclient_ca = {:?}\n",
            cert.display().to_string(),
            key.display().to_string(),
            client_ca.display().to_string()
        ),
    ));
    send_tls(
        tls_client(relay.line, &ca, Some(&client)),
        &lines("tls.pinned.client", 100),
    );
    assert_eq!(sink.wait_for_count(100, WAIT), 100);
    relay.stop();
}

/// Handshakes hold an admitted slot that is evicted like an idle connection's, time out after
/// 5 s, and count their failures: a valid TLS client is served while 150 clients stall in
/// their handshakes on a limit of 100 (the client's generous read timeout is the bound, not a
/// measurement). The scale stays small so that the stalled clients are all connected well
/// within the handshake timeout even on a loaded machine; otherwise the timeout, not the
/// eviction, would free the slots.
#[test]
fn valid_tls_client_is_served_while_150_handshakes_stall_on_a_limit_of_100() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("relay CA");
    let sink = Sink::start("sink", SinkProtocol::Pickle);
    let relay = TestRelay::start(&config_for(
        &[format!("{}:a", sink.addr())],
        &format!(
            "[listen]\nmax_connections = 100\n{}",
            listen_tls(dir.path(), &ca, false)
        ),
    ));
    let stalled: Vec<TcpStream> = (0..150)
        .filter_map(|_| TcpStream::connect_timeout(&relay.line, Duration::from_secs(1)).ok())
        .collect();
    assert!(stalled.len() >= 100, "{} stalled clients", stalled.len());
    // The stalled handshakes become evictable once silent for MIN_IDLE_TO_EVICT.
    std::thread::sleep(
        anthracite::unstable::receiver::admission::MIN_IDLE_TO_EVICT + Duration::from_millis(300),
    );
    send_tls(
        tls_client(relay.line, &ca, None),
        &lines("tls.through.stall", 100),
    );
    assert_eq!(sink.wait_for_count(100, WAIT), 100);
    let s = relay.handle.stats();
    let line = s
        .ingest
        .sources
        .iter()
        .find(|x| x.source == anthracite::Source::LineTcp)
        .expect("line source");
    assert!(line.tls_handshake_failures >= 1, "{line:?}");
    assert!(line.evicted >= 1, "{line:?}");
    drop(stalled);
    relay.stop();
}
