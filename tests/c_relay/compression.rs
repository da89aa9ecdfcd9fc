//! The compressed transports (`transport gzip|lz4|snappy` of carbon-c-relay, and zstd)
//! against carbon-c-relay 3.7.3 built from Debian's source with gzip, lz4 and snappy (the
//! test support builds it once per checkout; Debian's package has ssl only):
//!
//! - gzip and lz4 both ways: anthracite's members write to carbon-c-relay's compressed
//!   listeners, carbon-c-relay's members write to anthracite's; what carbon-c-relay itself
//!   writes is also captured and replayed to anthracite a few bytes per write, so its frames
//!   arrive split across reads;
//! - snappy and zstd anthracite to anthracite (carbon-c-relay 3.7.3's snappy reader fails
//!   after one block, and it has no zstd);
//! - bombs (gzip, lz4, zstd units decoding past `listen.max_decompressed_bytes`) refused and
//!   counted, the lines before them kept, the relay still serving.
//!
//! One carbon-c-relay process for the suite's interop test.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::thread;
use std::time::Duration;

use anthracite_testkit::c_relay::CRelay;
use anthracite_testkit::{RelayCommand, RelayProcess, c_relay_build, free_ports, scratch};

use crate::differential::Sinks;

/// How long a run lasts at least before its sinks are read.
const SETTLE: Duration = Duration::from_millis(800);

/// `n` lines named `prefix.<i>`, each with its own value and a fixed timestamp.
pub(crate) fn lines(prefix: &str, n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        let _ = writeln!(out, "{prefix}.host{:02}.metric{i} {i} 1700000000", i % 13);
    }
    out
}

/// The lines of `bytes`, sorted.
pub(crate) fn sorted(bytes: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(bytes)
        .split_inclusive('\n')
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

pub(crate) fn send(port: u16, bytes: &[u8]) {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .unwrap_or_else(|e| panic!("connect 127.0.0.1:{port}: {e}"));
    s.write_all(bytes).expect("send");
}

/// Sends `bytes` a few at a time, each write its own segment after a pause, so the reader
/// sees the stream in pieces that cut its frames anywhere.
fn dribble(port: u16, bytes: &[u8], step: usize) {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .unwrap_or_else(|e| panic!("connect 127.0.0.1:{port}: {e}"));
    s.set_nodelay(true).expect("nodelay");
    for piece in bytes.chunks(step) {
        s.write_all(piece).expect("send a piece");
        thread::sleep(Duration::from_micros(300));
    }
}

/// `anthracite run --carbon-c-relay-config conf` in `dir`, listening on `ports`.
fn anthracite(dir: &Path, conf: &Path, ports: &[u16]) -> RelayProcess {
    let mut relay = crate::relay_on(dir, conf, "-w 1").start();
    relay.wait_listening(ports);
    relay
}

#[test]
fn gzip_and_lz4_interoperate_with_carbon_c_relay_both_ways() {
    let built = c_relay_build::binary();
    let dir = scratch("c_relay", "compression_interop");
    // carbon-c-relay: plain, gzip, lz4 in; anthracite's gzip and lz4 listeners, two capture
    // sinks and the final sink out. anthracite: plain, gzip, lz4 in; carbon-c-relay's
    // listeners and the final sink out.
    let p = free_ports(10);
    let (c_plain, c_gz, c_lz, a_plain, a_gz, a_lz) = (p[0], p[1], p[2], p[3], p[4], p[5]);
    let (sink, cap_gz, cap_lz) = (p[6], p[7], p[8]);
    let theirs = format!(
        "listen type linemode {c_plain} proto tcp ;\n\
         listen type linemode transport gzip {c_gz} proto tcp ;\n\
         listen type linemode transport lz4 {c_lz} proto tcp ;\n\
         cluster sink forward 127.0.0.1:{sink} ;\n\
         cluster to_anthracite_gz forward 127.0.0.1:{a_gz} transport gzip ;\n\
         cluster to_anthracite_lz forward 127.0.0.1:{a_lz} transport lz4 ;\n\
         cluster capture_gz forward 127.0.0.1:{cap_gz} transport gzip ;\n\
         cluster capture_lz forward 127.0.0.1:{cap_lz} transport lz4 ;\n\
         match ^cr\\.gz\\. send to to_anthracite_gz stop ;\n\
         match ^cr\\.lz\\. send to to_anthracite_lz stop ;\n\
         match ^cap\\.gz\\. send to capture_gz stop ;\n\
         match ^cap\\.lz\\. send to capture_lz stop ;\n\
         match * send to sink stop ;\n"
    );
    let ours = format!(
        "listen type linemode {a_plain} proto tcp ;\n\
         listen type linemode transport gzip {a_gz} proto tcp ;\n\
         listen type linemode transport lz4 {a_lz} proto tcp ;\n\
         cluster sink forward 127.0.0.1:{sink} ;\n\
         cluster to_c_relay_gz forward 127.0.0.1:{c_gz} transport gzip ;\n\
         cluster to_c_relay_lz forward 127.0.0.1:{c_lz} transport lz4 ;\n\
         match ^gz\\. send to to_c_relay_gz stop ;\n\
         match ^lz\\. send to to_c_relay_lz stop ;\n\
         match * send to sink stop ;\n"
    );
    let (conf_theirs, conf_ours) = (dir.join("c-relay.conf"), dir.join("anthracite.conf"));
    std::fs::write(&conf_theirs, theirs).expect("write c-relay.conf");
    std::fs::write(&conf_ours, ours).expect("write anthracite.conf");

    let sinks = Sinks::start(&[sink, cap_gz, cap_lz], &[]);
    let c_relay = CRelay::start_binary(
        &built,
        &conf_theirs,
        &dir,
        &["-w", "1"],
        SocketAddr::from(([127, 0, 0, 1], c_plain)),
    );
    let mut relay = anthracite(&dir, &conf_ours, &[a_plain, a_gz, a_lz]);

    // carbon-c-relay writes its compressed streams to the capture sinks first.
    let (cap_gz_lines, cap_lz_lines) = (lines("cap.gz", 400), lines("cap.lz", 400));
    send(
        c_plain,
        &[cap_gz_lines.clone(), cap_lz_lines.clone()].concat(),
    );
    relay.wait_until(
        "carbon-c-relay's captured streams",
        Duration::from_secs(20),
        || {
            sinks.received[1..]
                .iter()
                .all(|r| r.lock().expect("sink lock").iter().any(|c| !c.is_empty()))
        },
    );
    thread::sleep(SETTLE);
    let captured = |i: usize| -> Vec<u8> { sinks.received[i].lock().expect("sink lock").concat() };
    let (gz_wire, lz_wire) = (captured(1), captured(2));
    assert_eq!(
        gz_wire.get(..3),
        Some(&[0x1F, 0x8B, 8][..]),
        "carbon-c-relay writes gzip"
    );
    assert_eq!(
        lz_wire.get(..4),
        Some(&0x184D_2204u32.to_le_bytes()[..]),
        "carbon-c-relay writes LZ4 frames"
    );
    // Replayed to anthracite a few bytes per write: every frame arrives in pieces.
    dribble(a_gz, &gz_wire, 7);
    dribble(a_lz, &lz_wire, 5);

    // Both ways: anthracite → carbon-c-relay (gz., lz.), carbon-c-relay → anthracite (cr.).
    // Each relay's lz4 frames are small enough to reach carbon-c-relay in one read (its 3.7.3
    // reader loses a frame split across reads).
    let inputs = [
        (a_plain, lines("gz", 300)),
        (a_plain, lines("lz", 300)),
        (c_plain, lines("cr.gz", 300)),
        (c_plain, lines("cr.lz", 300)),
    ];
    for (port, input) in &inputs {
        send(*port, input);
    }
    let mut want: Vec<u8> = inputs.iter().flat_map(|(_, i)| i.clone()).collect();
    want.extend_from_slice(&cap_gz_lines);
    want.extend_from_slice(&cap_lz_lines);
    let want = sorted(&want);
    let got = sinks.finish(want.len(), SETTLE);
    relay.assert_running("the interop run");
    relay.stop();
    drop(c_relay);
    let got = &got[0];
    let missing: Vec<&String> = want.iter().filter(|l| !got.contains(l)).take(5).collect();
    assert!(
        got == &want,
        "the sink received {} lines, {} expected; first missing: {missing:?}; anthracite's log:\n{}",
        got.len(),
        want.len(),
        relay.log_tail(20)
    );
}

#[test]
fn snappy_and_zstd_from_anthracite_to_anthracite() {
    let dir = scratch("c_relay", "compression_snappy_zstd");
    let p = free_ports(4);
    let (plain, snappy, zstd, sink) = (p[0], p[1], p[2], p[3]);
    // Each line goes out through a compressed member to the relay's own compressed listener,
    // renamed on the way so that it goes to the sink when it comes back.
    let conf = format!(
        "listen type linemode {plain} proto tcp ;\n\
         listen type linemode transport snappy {snappy} proto tcp ;\n\
         listen type linemode transport zstd {zstd} proto tcp ;\n\
         cluster sink forward 127.0.0.1:{sink} ;\n\
         cluster via_snappy forward 127.0.0.1:{snappy} transport snappy ;\n\
         cluster via_zstd forward 127.0.0.1:{zstd} transport zstd ;\n\
         match ^back\\. send to sink stop ;\n\
         rewrite ^(sn|zs)\\.(.*) into back.\\1.\\2 ;\n\
         match ^back\\.sn\\. send to via_snappy stop ;\n\
         match ^back\\.zs\\. send to via_zstd stop ;\n"
    );
    let path = dir.join("anthracite.conf");
    std::fs::write(&path, conf).expect("write anthracite.conf");
    let sinks = Sinks::start(&[sink], &[]);
    let mut relay = anthracite(&dir, &path, &[plain, snappy, zstd]);
    // More than one 32 KiB unit per write, so several snappy blocks follow each other.
    let (sn, zs) = (lines("sn", 3000), lines("zs", 3000));
    send(plain, &[sn.clone(), zs.clone()].concat());
    let want: Vec<String> = sorted(&[sn, zs].concat())
        .into_iter()
        .map(|l| format!("back.{l}"))
        .collect();
    let mut want = want;
    want.sort();
    let got = sinks.finish(want.len(), SETTLE);
    relay.assert_running("the snappy and zstd run");
    relay.stop();
    assert!(
        got[0] == want,
        "the sink received {} lines, {} expected; the relay's log:\n{}",
        got[0].len(),
        want.len(),
        relay.log_tail(20)
    );
}

/// A stream of `good` lines, then a unit of `zeros` bytes with no newline, in `kind`.
fn good_then_bomb(kind: &str, good: &[u8], zeros: usize) -> Vec<u8> {
    let bomb = vec![b'0'; zeros];
    match kind {
        "gzip" => {
            // At the best ratio, as a bomb is made.
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            gz.write_all(good).expect("compress");
            gz.flush().expect("flush");
            gz.write_all(&bomb).expect("compress");
            gz.finish().expect("finish")
        }
        "lz4" => {
            let frame = |data: &[u8]| {
                let mut f = lz4_flex::frame::FrameEncoder::new(Vec::new());
                f.write_all(data).expect("compress");
                f.finish().expect("finish")
            };
            [frame(good), frame(&bomb)].concat()
        }
        _ => {
            let mut z = zstd::stream::write::Encoder::new(Vec::new(), 3).expect("zstd");
            // The window the budget admits (a larger one is refused as bad_compression).
            z.window_log(17).expect("zstd window");
            z.write_all(good).expect("compress");
            z.flush().expect("flush");
            z.write_all(&bomb).expect("compress");
            z.finish().expect("finish")
        }
    }
}

/// The same lines alone, in `kind`.
fn compressed(kind: &str, good: &[u8]) -> Vec<u8> {
    match kind {
        "gzip" => {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(good).expect("compress");
            gz.finish().expect("finish")
        }
        "lz4" => {
            let mut f = lz4_flex::frame::FrameEncoder::new(Vec::new());
            f.write_all(good).expect("compress");
            f.finish().expect("finish")
        }
        _ => {
            let mut z = zstd::stream::write::Encoder::new(Vec::new(), 3).expect("zstd");
            z.window_log(17).expect("zstd window");
            z.write_all(good).expect("compress");
            z.finish().expect("finish")
        }
    }
}

#[test]
fn a_decompression_bomb_is_refused_and_counted_and_the_relay_keeps_serving() {
    use anthracite_testkit::http;
    for kind in ["gzip", "lz4", "zstd"] {
        let dir = scratch("c_relay", &format!("compression_bomb_{kind}"));
        let p = free_ports(3);
        let (listen, admin, sink) = (p[0], p[1], p[2]);
        // relay.toml's spelling of the same transports, with the smallest budget.
        let toml = format!(
            "[listen]\nline_tcp = \"127.0.0.1:{listen}\"\npickle_tcp = \"\"\n\
             line_tcp_compression = \"{kind}\"\nmax_decompressed_bytes = 131072\n\
             [admin]\nlisten = \"127.0.0.1:{admin}\"\n\
             [destinations]\nservers = [\"127.0.0.1:{sink}\"]\nprotocol = \"line\"\n"
        );
        let sinks = Sinks::start(&[sink], &[]);
        let mut relay = RelayCommand::new(env!("CARGO_BIN_EXE_anthracite"))
            .name("anthracite")
            .toml(&dir, &toml)
            .log(dir.join("anthracite.log"))
            .start();
        let admin: SocketAddr = ([127, 0, 0, 1], admin).into();
        relay.wait_ready(admin);
        let (before, after) = (lines("before", 200), lines("after", 200));
        // 4 MiB of one byte: a few KiB compressed, 32 times the budget.
        send(listen, &good_then_bomb(kind, &before, 4 << 20));
        send(listen, &compressed(kind, &after));
        let want = sorted(&[before, after].concat());
        let got = sinks.finish(want.len(), SETTLE);
        let metrics = http::get(admin, "/metrics").map_or(String::new(), |(_, b)| b);
        let refused = http::sum(
            &http::parse_metrics(&metrics),
            "anthracite_invalid_datapoints_total",
            &[("reason", "decompressed_too_large")],
        );
        relay.assert_running("the bomb to be refused");
        relay.stop();
        assert!(
            got[0] == want,
            "{kind}: {} lines delivered, {} expected (the lines before the bomb and on the next \
             connection); the relay's log:\n{}",
            got[0].len(),
            want.len(),
            relay.log_tail(20)
        );
        assert_eq!(refused, 1.0, "{kind}: one unit refused and counted");
        assert!(
            relay.log().contains("decompressed_too_large"),
            "{kind}: the refusal is logged"
        );
    }
}
