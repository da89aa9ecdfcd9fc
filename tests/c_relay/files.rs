//! `file` and `file ip` clusters: carbon-c-relay 3.7.3 and anthracite on the same
//! configuration and input (over TCP and UDP, from two loopback addresses) write the same
//! files; anthracite writes a new file at the path
//! after logrotate moved the old one away and a SIGHUP.

use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use anthracite_testkit::c_relay::{self, CRelay};
use anthracite_testkit::{free_ports, scratch};

/// Bound on one relay's writing of its files.
const LIMIT: Duration = Duration::from_secs(20);
/// How long the files must stay the same before carbon-c-relay counts as done.
const QUIET: Duration = Duration::from_millis(800);

/// The configuration with `{L}` the listening port and `{OUT}` the directory of the files.
const CONF: &str = "listen type linemode 127.0.0.1:{L} proto tcp 127.0.0.1:{L} proto udp;\n\
                    cluster lines file {OUT}/plain.txt;\n\
                    cluster withip file ip {OUT}/ip.txt;\n\
                    match ^a\\. send to lines;\n\
                    match * send to withip;\n";

fn lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_owned).collect();
    lines.sort();
    lines
}

/// Both files' lines, once they hold `want` lines together and have stayed the same for
/// [`QUIET`], bounded by [`LIMIT`].
fn settled(out: &Path, want: usize) -> (Vec<String>, Vec<String>) {
    let read = || (lines(&out.join("plain.txt")), lines(&out.join("ip.txt")));
    let deadline = Instant::now() + LIMIT;
    let mut last = (read(), Instant::now());
    while Instant::now() < deadline {
        thread::sleep(Duration::from_millis(25));
        let now = read();
        if now != last.0 {
            last = (now, Instant::now());
        } else if now.0.len() + now.1.len() >= want && last.1.elapsed() >= QUIET {
            break;
        }
    }
    last.0
}

/// `input` over TCP from 127.0.0.1, and `datagrams` over UDP from 127.0.0.2 (another
/// address for the `file ip` cluster to write), one line each.
fn send(port: u16, input: &[u8], datagrams: &[u8]) {
    TcpStream::connect(("127.0.0.1", port))
        .and_then(|mut s| s.write_all(input))
        .expect("send to the relay");
    let udp = UdpSocket::bind("127.0.0.2:0").expect("bind a UDP sender on 127.0.0.2");
    for line in datagrams.split_inclusive(|&b| b == b'\n') {
        udp.send_to(line, ("127.0.0.1", port))
            .expect("send a datagram");
        // Bounded pacing: the receivers' socket buffers are not what is compared.
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn file_and_file_ip_clusters_write_what_carbon_c_relay_writes_and_a_new_file_after_rotation() {
    c_relay::require();
    let dir = scratch("c_relay", "files");
    let port = free_ports(1)[0];
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut input = Vec::new();
    for i in 0..40 {
        let name = ["a.x", "b.y", "a..z", "c d"][i % 4];
        input.extend_from_slice(format!("{name}.m{i} {i}.5 {}\n", 1_700_000_000 + i).as_bytes());
    }
    let datagrams: Vec<u8> = (0..10)
        .flat_map(|i| format!("a.udp.m{i} {i} 1700000000\n").into_bytes())
        .collect();
    let conf = |side: &str| {
        let out = dir.join(side);
        std::fs::create_dir_all(&out).expect("create the files' directory");
        let path = dir.join(format!("{side}.conf"));
        let text = CONF
            .replace("{L}", &port.to_string())
            .replace("{OUT}", &out.display().to_string());
        std::fs::write(&path, text).expect("write the configuration");
        (path, out)
    };

    let (their_conf, their_out) = conf("theirs");
    let theirs = {
        let relay = CRelay::start(&their_conf, &dir, &["-w", "1"], addr);
        send(port, &input, &datagrams);
        // Every line to `withip` (40 + 10), and to `lines` those under `a.` once cleansed
        // (`a.x`, `a..z`, `a.udp`: 30). A loaded machine can hold carbon-c-relay's datagrams
        // past the quiet time, so the wait is for all of them (bounded by LIMIT).
        let got = settled(&their_out, 80);
        let _ = relay.pid();
        got
    };
    // The clients' addresses, as carbon-c-relay writes them before each line.
    let from = |ip: &str| theirs.1.iter().filter(|l| l.starts_with(ip)).count();
    assert!(
        !theirs.0.is_empty() && from("127.0.0.1 ") == 40 && from("127.0.0.2 ") == 10,
        "carbon-c-relay wrote {theirs:?} (the case proves nothing)"
    );

    let (our_conf, our_out) = conf("ours");
    let mut relay = crate::relay_on(&dir, &our_conf, "-w 1").start();
    relay.wait_listening(&[port]);
    send(port, &input, &datagrams);
    let ours = settled(&our_out, theirs.0.len() + theirs.1.len());
    assert_eq!(ours.0, theirs.0, "the file cluster's file");
    assert_eq!(ours.1, theirs.1, "the file ip cluster's file");

    // logrotate: the file moved away, then SIGHUP; the next lines go to a new file.
    let ip = our_out.join("ip.txt");
    let rotated = our_out.join("ip.txt.1");
    std::fs::rename(&ip, &rotated).expect("move the file away");
    relay.signal("HUP");
    send(port, b"after.rotation 1 1700000100\n", b"");
    relay.wait_until("a new file at the path", LIMIT, || {
        lines(&ip) == ["127.0.0.1 after.rotation 1 1700000100\n"]
    });
    assert_eq!(lines(&rotated), ours.1, "the moved file keeps what it had");
    relay.stop();
}
