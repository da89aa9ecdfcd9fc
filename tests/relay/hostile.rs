//! Probed as an adversary would: names too long for any protocol, large pickle
//! frames from many connections at once, a flood of idle connections, UDP faster than the
//! relay reads. Every assertion is a count or a bound the relay enforces and accounts for
//! (never a timing, never RSS).

use anthracite_testkit as testkit;

use std::io::Write;
use std::net::{TcpStream, UdpSocket};
use std::time::Duration;

use anthracite::DropReason;
use anthracite::unstable::batch::Datapoint;
use anthracite::unstable::protocol::pickle::encode_message;
use anthracite::unstable::receiver::READ_BUFFER;
use anthracite::{Pushed, Source};
use anthracite_sink::{Sink, SinkProtocol};
use bytes::BytesMut;
use testkit::relay::{TestRelay, config_for};

const WAIT: Duration = Duration::from_secs(60);

fn received_from(s: &anthracite::StatsSnapshot, source: Source) -> u64 {
    s.ingest
        .received_by_source
        .iter()
        .find(|(src, _)| *src == source)
        .map_or(0, |(_, n)| *n)
}

/// A name of any length was accepted and copied into caches and batches (1 MB
/// names inside 1 MB pickle frames took gigabytes). Names over `listen.max_name_length` are
/// dropped and counted as `name_too_long` by every source: plaintext over TCP and UDP,
/// pickle, an embedding program, and the Kinesis reader's line feeder.
#[test]
fn max_name_length_drops_and_counts_in_every_protocol() {
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let relay = TestRelay::start(&config_for(
        &[format!("{}:a", sink.addr())],
        "[listen]\nmax_name_length = 100\n",
    ));
    let long = format!("long.{}", "x".repeat(96));
    assert_eq!(long.len(), 101);
    let ts = testkit::unix_now();
    let mut sources = 0;
    testkit::send_lines(
        relay.line,
        &[(long.clone(), ts, 1.0), ("ok.line".into(), ts, 1.0)],
    );
    sources += 1;
    testkit::send_pickle(
        relay.pickle,
        &[(long.clone(), ts, 1.0), ("ok.pickle".into(), ts, 1.0)],
        10,
    );
    sources += 1;
    let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp client");
    udp.send_to(
        format!("{long} 1 {ts}\nok.udp 1 {ts}\n").as_bytes(),
        relay.udp,
    )
    .expect("send datagram");
    sources += 1;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut ingestor = relay.handle.ingestor();
        assert_eq!(
            ingestor.push(long.as_bytes(), ts as f64, 1.0),
            Pushed::Invalid(DropReason::NameTooLong)
        );
        assert!(ingestor.push(b"ok.embedded", ts as f64, 1.0).is_accepted());
        ingestor.flush().await;
        // What a stream source (a Kinesis record, a Kafka message) does with a message.
        let text = format!("{long} 1 {ts}\nok.stream 1 {ts}\n");
        ingestor.message(text.as_bytes(), 16_384);
        ingestor.flush().await;
    });
    sources += 2;
    let s = relay.wait_stats("every long name counted", WAIT, |s| {
        s.ingest.invalid.get(DropReason::NameTooLong) == sources as u64
    });
    assert_eq!(
        s.ingest.invalid.total(),
        sources as u64,
        "{:?}",
        s.ingest.invalid
    );
    assert_eq!(sink.wait_for_count(sources, WAIT), sources);
    assert_eq!(sink.wait_quiet(Duration::from_millis(200), WAIT), sources);
    assert!(
        sink.received().iter().all(|r| r.path.starts_with("ok.")),
        "no long name was relayed"
    );
    relay.stop();
}

/// One protocol-2 pickle frame (length prefix included) of `n` datapoints whose names are
/// 25 bytes: 4 + 5 + 50 × n bytes.
fn frame(first: usize, n: usize) -> Vec<u8> {
    let names: Vec<String> = (first..first + n)
        .map(|i| format!("big.frame.{i:015}"))
        .collect();
    let mut out = BytesMut::new();
    encode_message(
        names.iter().map(|name| Datapoint {
            name: name.as_bytes(),
            timestamp: 1.7e9,
            value: 1.0,
        }),
        &mut out,
    );
    out.to_vec()
}

/// Every connection could hold a whole `max_pickle_frame` buffer (and its decoder
/// scratch) at once, and kept both after the frame: hostile clients took gigabytes that were
/// still held after they left. Frames over the 64 KiB read buffer now come out of one
/// relay-wide budget (`listen.max_frame_buffer_bytes`): with room for two 1 MB frames, four
/// connections each midway through one hold at most the budget plus their ordinary buffers;
/// the other two wait, then deliver; and a client that leaves leaves nothing behind.
#[test]
fn large_pickle_frames_stay_within_the_frame_budget_and_are_released() {
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let budget = 2_200_000;
    let relay = TestRelay::start(&config_for(
        &[format!("{}:a", sink.addr())],
        &format!("[listen]\nmax_frame_buffer_bytes = {budget}\n"),
    ));
    let per_frame = 20_000;
    let frames: Vec<Vec<u8>> = (0..4).map(|c| frame(c * per_frame, per_frame)).collect();
    assert!(frames[0].len() > 900_000 && frames[0].len() <= (1 << 20) + 4);
    // Every client sends the start of its frame and stops there.
    let mut conns: Vec<TcpStream> = frames
        .iter()
        .map(|f| {
            let mut c = TcpStream::connect(relay.pickle).expect("connect");
            c.write_all(&f[..1000]).expect("write frame start");
            c
        })
        .collect();
    let bound = (budget + 4 * READ_BUFFER + 4 * (256 << 10)) as u64;
    let held = frames[0].len() as u64 * 2;
    let s = relay.wait_stats("two frames admitted", WAIT, |s| {
        s.ingest.active_connections == 4 && s.ingest.buffered_bytes >= held
    });
    assert!(
        s.ingest.buffered_bytes <= bound,
        "{} > {bound}",
        s.ingest.buffered_bytes
    );
    // Room for two frames: the other two clients wait with their ordinary buffers.
    let three = 3 * frames[0].len() as u64;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(10));
        let b = relay.handle.stats().ingest.buffered_bytes;
        assert!(b <= bound, "receive buffers hold {b} bytes, bound {bound}");
        assert!(
            b < three,
            "receive buffers hold {b} bytes: a third frame was admitted"
        );
    }
    for (c, f) in conns.iter_mut().zip(&frames) {
        c.write_all(&f[1000..]).expect("write frame rest");
        c.shutdown(std::net::Shutdown::Write).ok();
    }
    assert_eq!(sink.wait_for_count(4 * per_frame, WAIT), 4 * per_frame);
    drop(conns);
    let s = relay.wait_stats("clients gone", WAIT, |s| s.ingest.active_connections == 0);
    assert_eq!(
        s.ingest.buffered_bytes, 0,
        "a client that left holds nothing"
    );
    assert_eq!(received_from(&s, Source::PickleTcp), 4 * per_frame as u64);
    assert_eq!(s.ingest.invalid.total(), 0, "{:?}", s.ingest.invalid);
    relay.stop();
}

/// Clients held back by a full queue each kept a whole read buffer while they waited: a
/// thousand of them held 64 MiB of mostly consumed buffers. A connection whose flush has to
/// wait now keeps only what it has not consumed (here its partial last line), and reads on
/// into a whole buffer once the queue has room.
#[test]
fn clients_held_back_by_a_full_queue_hold_only_their_partial_lines() {
    // The destination is down (nothing drains the queue) until the clients are held back.
    let sink = Sink::start("a", SinkProtocol::Pickle);
    sink.go_down().expect("sink down");
    let relay = TestRelay::start(&config_for(
        &[format!("{}:a", sink.addr())],
        "[destinations.queue]\nwhen_full = \"block\"\nmax_datapoints = 50\n",
    ));
    let (clients, lines) = (20, 100);
    let partial = b"held.back.partial 1";
    let mut conns: Vec<TcpStream> = (0..clients)
        .map(|c| {
            let mut payload = Vec::new();
            for i in 0..lines {
                payload.extend_from_slice(format!("held.c{c}.m{i} {i} 1700000000\n").as_bytes());
            }
            payload.extend_from_slice(partial);
            let mut conn = TcpStream::connect(relay.line).expect("connect");
            conn.write_all(&payload)
                .expect("write lines and a partial one");
            conn
        })
        .collect();
    // Every client's lines are read and wait for the queue (which holds 50 of them): each
    // connection holds its partial line and nothing else.
    let held = (clients * partial.len()) as u64;
    let s = relay.wait_stats("every client read and held back", WAIT, |s| {
        s.ingest.active_connections == clients as u64 && s.ingest.buffered_bytes == held
    });
    let d = &s.destinations[0];
    assert_eq!((d.queued, d.sent), (50, 0), "{d:?}");
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(10));
        let b = relay.handle.stats().ingest.buffered_bytes;
        assert_eq!(
            b, held,
            "held-back clients hold {b} bytes of receive buffers"
        );
    }
    sink.come_back().expect("sink back");
    for c in &mut conns {
        c.write_all(b" 1700000000\n").expect("end the partial line");
        c.shutdown(std::net::Shutdown::Write).ok();
    }
    let total = clients * (lines + 1);
    assert_eq!(sink.wait_for_count(total, WAIT), total);
    drop(conns);
    let s = relay.wait_stats("clients gone", WAIT, |s| s.ingest.active_connections == 0);
    assert_eq!(
        s.ingest.buffered_bytes, 0,
        "a client that left holds nothing"
    );
    assert_eq!(received_from(&s, Source::LineTcp), total as u64);
    relay.stop();
}

/// With the connection limit reached by idle sockets, every new client's connect
/// succeeded and its first write was lost, silently. At the limit the connection idle the
/// longest is now closed to admit the new one (counted as evicted).
#[test]
fn idle_flood_does_not_lock_out_clients() {
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let limit = 20;
    let relay = TestRelay::start(&config_for(
        &[format!("{}:a", sink.addr())],
        &format!("[listen]\nmax_connections = {limit}\n"),
    ));
    let idle: Vec<TcpStream> = (0..limit)
        .map(|_| TcpStream::connect(relay.line).expect("connect idle client"))
        .collect();
    relay.wait_stats("the flood holds every slot", WAIT, |s| {
        s.ingest.active_connections == limit as u64
    });
    // The relay evicts only connections silent for a second (so busy clients are never the
    // ones closed): let the flood be that old.
    std::thread::sleep(
        anthracite::unstable::receiver::admission::MIN_IDLE_TO_EVICT + Duration::from_millis(200),
    );
    let ts = testkit::unix_now();
    let points: Vec<(String, i64, f64)> = (0..100)
        .map(|i| (format!("real.client.{i}"), ts, i as f64))
        .collect();
    for round in 0..3 {
        let batch: Vec<_> = points.iter().skip(round * 33).take(33).cloned().collect();
        testkit::send_lines(relay.line, &batch);
    }
    testkit::send_lines(relay.line, &points[99..]);
    assert_eq!(sink.wait_for_count(100, WAIT), 100);
    let s = relay.handle.stats();
    assert!(s.ingest.evicted_connections >= 1, "{s:?}");
    assert_eq!(s.ingest.rejected_connections, 0, "{s:?}");
    drop(idle);
    relay.stop();
}

/// Datagrams the kernel dropped because the relay's socket buffer was full were
/// invisible. They are read from the socket's drop counter (`SO_RXQ_OVFL`) and reported: every
/// datagram sent is either received or counted as a kernel drop.
#[test]
fn udp_kernel_drops_are_reported() {
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
    let addr = socket.local_addr().expect("addr");
    // Small buffer, drop counter on, and nobody reading yet: most of a burst is dropped.
    anthracite::unstable::receiver::udp::prepare_socket(&socket, Some(4096))
        .expect("prepare udp socket");
    let client = UdpSocket::bind("127.0.0.1:0").expect("bind client");
    let ts = testkit::unix_now();
    let burst = 2000;
    for i in 0..burst {
        client
            .send_to(format!("udp.burst.{i} 1 {ts}\n").as_bytes(), addr)
            .expect("send datagram");
    }
    let relay = TestRelay::start_with_udp(
        &config_for(
            &[format!("{}:a", sink.addr())],
            "[listen]\nudp_recv_buffer = 4096\n",
        ),
        socket,
    );
    // A drop is reported by the next datagram the kernel queues: keep sending markers until
    // every datagram sent is accounted for.
    let mut sent = burst;
    let deadline = std::time::Instant::now() + WAIT;
    let s = loop {
        let s = relay.handle.stats();
        if s.ingest.udp_kernel_drops > 0
            && received_from(&s, Source::LineUdp) + s.ingest.udp_kernel_drops == sent
        {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sent {sent}, received {}, kernel drops {}",
            received_from(&s, Source::LineUdp),
            s.ingest.udp_kernel_drops
        );
        client
            .send_to(format!("udp.marker.{sent} 1 {ts}\n").as_bytes(), addr)
            .expect("send marker");
        sent += 1;
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(s.ingest.udp_kernel_drops >= burst / 2, "{s:?}");
    let received = received_from(&s, Source::LineUdp) as usize;
    assert_eq!(sink.wait_for_count(received, WAIT), received);
    relay.stop();
}

/// At the process's file-descriptor limit `accept` failed with one log line and the
/// clients queued in the backlog hung. Failed accepts now back off and are counted, and out of
/// descriptors the relay closes its idlest connection to give one back, so a real client
/// queued behind a flood of idle ones gets through. (The real binary, with a low `ulimit -n`.)
#[test]
fn out_of_file_descriptors_does_not_hang_queued_clients() {
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let dir = tempfile::tempdir().expect("tempdir");
    let port = testkit::free_ports(1)[0];
    let toml = format!(
        "[listen]\nline_tcp = \"127.0.0.1:{port}\"\npickle_tcp = \"\"\n\
         [destinations]\nservers = [\"{}:a\"]\n[telemetry]\ninterval_secs = 0\n",
        sink.addr()
    );
    let mut relay = crate::anthracite("relay")
        .toml(dir.path(), &toml)
        .env("RUST_LOG", "warn")
        .max_open_files(48)
        .start();
    let deadline = std::time::Instant::now() + WAIT;
    let mut idle = Vec::new();
    while idle.is_empty() {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(c) => idle.push(c),
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("relay did not listen: {e}"),
        }
    }
    // More idle clients than the relay has descriptors: the rest wait in the backlog.
    for _ in 0..80 {
        idle.push(TcpStream::connect(("127.0.0.1", port)).expect("connect idle client"));
    }
    std::thread::sleep(
        anthracite::unstable::receiver::admission::MIN_IDLE_TO_EVICT + Duration::from_millis(200),
    );
    let ts = testkit::unix_now();
    let points: Vec<(String, i64, f64)> = (0..50)
        .map(|i| (format!("fd.client.{i}"), ts, 1.0))
        .collect();
    testkit::send_lines(format!("127.0.0.1:{port}").parse().expect("addr"), &points);
    assert_eq!(sink.wait_for_count(50, WAIT), 50);
    relay.assert_running("the queued client's datapoints");
    assert!(
        relay.log_tail(50).contains("accept failed"),
        "the relay ran out of descriptors: {}",
        relay.log_tail(50)
    );
    drop(idle);
    relay.stop();
}

/// The listen queue the kernel gives a listener, as `ss` reports it (`Send-Q` of a listening
/// socket is its backlog).
/// Waits for the relay to bind it.
fn listen_backlog(port: u16) -> u32 {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let text = loop {
        let out = std::process::Command::new("ss")
            .args(["-ltnH", &format!("sport = :{port}")])
            .output()
            .expect("ss (iproute2) is needed to read a listener's backlog");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !text.trim().is_empty() {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no listener on port {port} after 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let line = text.lines().next().unwrap_or_default();
    line.split_whitespace()
        .nth(2)
        .and_then(|q| q.parse().ok())
        .unwrap_or_else(|| panic!("unexpected ss line {line:?}"))
}

/// The listeners used the runtime's fixed backlog (a burst of 5,000 connects
/// overflowed it 2,221 times). A listener the relay binds gets `listen.backlog`, 1,024 by
/// default (capped by the kernel's `net.core.somaxconn`). A real process binding its own ports.
#[test]
fn listen_backlog_is_configured_and_defaults_to_1024() {
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let ports = testkit::free_ports(2);
    let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(u32::MAX);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut relays = Vec::new();
    for (port, backlog) in [(ports[0], "backlog = 777\n"), (ports[1], "")] {
        let listen =
            format!("[listen]\nline_tcp = \"127.0.0.1:{port}\"\npickle_tcp = \"\"\n{backlog}");
        let toml = config_for(&[format!("{}:a", sink.addr())], &listen);
        relays.push(
            crate::anthracite(&format!("relay-{port}"))
                .toml(dir.path(), &toml)
                .start(),
        );
    }
    assert_eq!(
        listen_backlog(ports[0]),
        777.min(somaxconn),
        "listen.backlog = 777"
    );
    assert_eq!(listen_backlog(ports[1]), 1024.min(somaxconn), "the default");
    for mut r in relays {
        r.stop();
    }
}

/// Pickle and protobuf names holding `\n`, `\r`, tab or space passed through, and a
/// line destination received `evil.a 1 1700000000\nevil.injected 1 …` as two metrics, one
/// named by the sender, nothing counted. Every such name is now dropped where every source
/// passes (ingest), counted as `whitespace_in_name`: 0 forged names reach a line sink.
#[test]
fn forged_names_with_whitespace_never_reach_a_line_sink() {
    use anthracite::unstable::protocol::protobuf::ProtobufEncoder;
    let sink = Sink::start("a", SinkProtocol::Line);
    let relay = TestRelay::start(
        &config_for(&[format!("{}:a", sink.addr())], "")
            .replace("[destinations]\n", "[destinations]\nprotocol = \"line\"\n"),
    );
    let ts = testkit::unix_now();
    let forged: Vec<String> = [
        "evil.a 1 1700000000\nevil.injected",
        "evil.b\revil.cr",
        "evil.c\tevil.tab",
        "evil.d evil.space",
        "evil.e\u{b}evil.vt",
        "evil.f\u{1f}evil.us",
        "evil.g\u{2028}evil.ls",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut points: Vec<(String, i64, f64)> = forged.iter().map(|n| (n.clone(), ts, 1.0)).collect();
    points.push(("ok.pickle".into(), ts, 1.0));
    testkit::send_pickle(relay.pickle, &points, 100);
    let mut frame = BytesMut::new();
    ProtobufEncoder::new().encode_message(
        forged
            .iter()
            .map(|n| n.as_str())
            .chain(["ok.protobuf"])
            .map(|name| Datapoint {
                name: name.as_bytes(),
                timestamp: ts as f64,
                value: 2.0,
            }),
        &mut frame,
        |_| panic!("encodable"),
    );
    let mut conn = TcpStream::connect(relay.protobuf).expect("connect protobuf");
    conn.write_all(&frame).expect("send protobuf frame");
    drop(conn);
    let expected = 2 * forged.len() as u64;
    let s = relay.wait_stats("every forged name counted", WAIT, |s| {
        s.ingest.invalid.get(DropReason::WhitespaceInName) == expected
    });
    assert_eq!(s.ingest.invalid.total(), expected, "{:?}", s.ingest.invalid);
    assert_eq!(sink.wait_for_count(2, WAIT), 2);
    assert_eq!(sink.wait_quiet(Duration::from_millis(300), WAIT), 2);
    let paths: Vec<String> = sink.received().iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        paths.iter().filter(|p| !p.starts_with("ok.")).count(),
        0,
        "forged names at the line sink: {paths:?}"
    );
    assert!(sink.errors().is_empty(), "{:?}", sink.errors());
    relay.stop();
}

/// With forced kernel drops the counter reported 124,925 of 125,561: a drop is
/// carried by the next datagram the kernel queues, so the drops after the last one were never
/// read. The socket's own counter is read at shutdown: with no datagram sent after the burst,
/// every datagram is either received or counted as dropped.
#[test]
fn udp_drops_after_the_last_datagram_are_read_at_shutdown() {
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
    let addr = socket.local_addr().expect("addr");
    anthracite::unstable::receiver::udp::prepare_socket(&socket, Some(4096))
        .expect("prepare udp socket");
    let client = UdpSocket::bind("127.0.0.1:0").expect("bind client");
    let ts = testkit::unix_now();
    let burst = 2000u64;
    for i in 0..burst {
        client
            .send_to(format!("udp.last.{i} 1 {ts}\n").as_bytes(), addr)
            .expect("send datagram");
    }
    let relay = TestRelay::start_with_udp(
        &config_for(
            &[format!("{}:a", sink.addr())],
            "[listen]\nudp_recv_buffer = 4096\n",
        ),
        socket,
    );
    relay.wait_stats("the queued datagrams read", WAIT, |s| {
        received_from(s, Source::LineUdp) > 0
    });
    let report = relay.stop();
    let s = &report.stats;
    assert!(s.ingest.udp_kernel_drops >= burst / 2, "{s:?}");
    assert_eq!(
        received_from(s, Source::LineUdp) + s.ingest.udp_kernel_drops,
        burst,
        "received {} + dropped {}",
        received_from(s, Source::LineUdp),
        s.ingest.udp_kernel_drops
    );
}
