//! `ssl` on listeners and members against carbon-c-relay 3.7.3, with certificates made at test
//! time (one CA; both relays' listener certificates name another host, which neither checks):
//!
//! - Debian's carbon-c-relay (built with ssl) sends over `transport plain ssl` to anthracite's
//!   `listen … transport plain ssl PEM`, and anthracite's `transport plain ssl` member sends to
//!   carbon-c-relay's ssl listener; the source-built one does the same over `gzip ssl` (the
//!   compressed stream inside TLS). Every line arrives byte for byte.
//! - An anthracite member whose peer presents a certificate of another CA fails its
//!   handshakes: counted, the member down, its lines kept in its queue and delivered once the
//!   peer presents a certificate of the `-C` CA.
//! - A listener whose PEM file is missing refuses the start, naming the file and the line.
//!
//! One process of each carbon-c-relay build for the suite's ssl test.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anthracite_sink::{Sink, SinkProtocol};
use anthracite_testkit::c_relay::CRelay;
use anthracite_testkit::http::{get, parse_metrics, sum, value};
use anthracite_testkit::tls::TestCa;
use anthracite_testkit::{c_relay, c_relay_build, free_ports, scratch};

use crate::compression::{lines, send, sorted};
use crate::differential::Sinks;

/// How long a run lasts at least before its sinks are read.
const SETTLE: Duration = Duration::from_millis(800);
/// Bound on every wait (a hung test's deadline, not a timing assertion).
const LIMIT: Duration = Duration::from_secs(30);

fn metrics(admin: SocketAddr) -> BTreeMap<String, f64> {
    match get(admin, "/metrics") {
        Ok((200, body)) => parse_metrics(&body),
        other => panic!("GET /metrics: {other:?}"),
    }
}

#[test]
fn ssl_interoperates_with_carbon_c_relay_both_ways_and_a_refused_peer_keeps_its_lines() {
    c_relay::require();
    let built = c_relay_build::binary();
    let dir = scratch("c_relay", "ssl_interop");
    let ca = TestCa::new("relays' CA");
    let other_ca = TestCa::new("another CA");
    ca.write(&dir, "ca.pem");
    for (file, cert) in [
        ("ours.pem", ca.server_cert(&["anthracite.example.org"])),
        ("theirs.pem", ca.server_cert(&["c-relay.example.org"])),
    ] {
        std::fs::write(dir.join(file), format!("{}{}", cert.cert_pem, cert.key_pem))
            .expect("write a listener's PEM file");
    }
    let p = free_ports(11);
    let (c_plain, c_ssl, g_plain, g_ssl) = (p[0], p[1], p[2], p[3]);
    let (a_plain, a_ssl, a_gz_ssl, admin_port, sink, refused) =
        (p[4], p[5], p[6], p[7], p[8], p[9]);
    let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
    // Debian's build: plain ssl. The source-built one: gzip inside ssl.
    let debian = format!(
        "listen type linemode {c_plain} proto tcp ;\n\
         listen type linemode transport plain ssl theirs.pem {c_ssl} proto tcp ;\n\
         cluster sink forward 127.0.0.1:{sink} ;\n\
         cluster to_anthracite forward 127.0.0.1:{a_ssl} transport plain ssl ;\n\
         match ^cr\\. send to to_anthracite stop ;\n\
         match * send to sink stop ;\n"
    );
    let source_built = format!(
        "listen type linemode {g_plain} proto tcp ;\n\
         listen type linemode transport gzip ssl theirs.pem {g_ssl} proto tcp ;\n\
         cluster sink forward 127.0.0.1:{sink} ;\n\
         cluster to_anthracite forward 127.0.0.1:{a_gz_ssl} transport gzip ssl ;\n\
         match ^crgz\\. send to to_anthracite stop ;\n\
         match * send to sink stop ;\n"
    );
    let ours = format!(
        "listen type linemode {a_plain} proto tcp ;\n\
         listen type linemode transport plain ssl ours.pem {a_ssl} proto tcp ;\n\
         listen type linemode transport gzip ssl ours.pem {a_gz_ssl} proto tcp ;\n\
         cluster sink forward 127.0.0.1:{sink} ;\n\
         cluster to_c_relay forward 127.0.0.1:{c_ssl} transport plain ssl ;\n\
         cluster to_c_relay_gz forward 127.0.0.1:{g_ssl} transport gzip ssl ;\n\
         cluster refused forward 127.0.0.1:{refused} transport plain ssl ;\n\
         match ^an\\. send to to_c_relay stop ;\n\
         match ^angz\\. send to to_c_relay_gz stop ;\n\
         match ^kept\\. send to refused stop ;\n\
         match * send to sink stop ;\n"
    );
    for (file, text) in [
        ("debian.conf", debian),
        ("source-built.conf", source_built),
        ("anthracite.conf", ours),
        ("overlay.toml", format!("[admin]\nlisten = \"{admin}\"\n")),
    ] {
        std::fs::write(dir.join(file), text).expect("write a configuration");
    }

    let sinks = Sinks::start(&[sink], &[]);
    // The refused member's peer: a certificate of another CA.
    let other_cert = other_ca.server_cert(&["127.0.0.1", "localhost"]);
    let wrong = Sink::start_on_with(
        "peer of another CA",
        SinkProtocol::Line,
        refused,
        Some(other_cert.server_config()),
    );
    let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
    let ca_args = ["-w", "1", "-C", "ca.pem"];
    let debian_relay = CRelay::start(&dir.join("debian.conf"), &dir, &ca_args, at(c_plain));
    let built_relay = CRelay::start_binary(
        &built,
        &dir.join("source-built.conf"),
        &dir,
        &ca_args,
        at(g_plain),
    );
    let mut relay = crate::relay_on(&dir, "anthracite.conf", "-w 1 -C ca.pem")
        .args(["--carbon-c-relay-overlay", "overlay.toml"])
        .start();
    relay.wait_ready(admin);
    relay.wait_listening(&[a_plain, a_ssl, a_gz_ssl]);

    // The refused member first, while its reconnection backoff is short: its handshakes
    // fail, each counted; it is down and its lines wait in its queue.
    let kept = lines("kept", 200);
    send(a_plain, &kept);
    let member = format!("127.0.0.1:{refused}");
    let member = [("destination", member.as_str())];
    let cluster = [("cluster", "refused"), ("type", "forward")];
    relay.wait_until(
        "the refused member's lines queued after a failed handshake",
        LIMIT,
        || {
            let m = metrics(admin);
            sum(&m, "anthracite_destination_connect_failures_total", &member) >= 1.0
                && value(&m, "anthracite_c_relay_cluster_queued_datapoints", &cluster)
                    == Some(200.0)
        },
    );
    assert_eq!(
        value(
            &metrics(admin),
            "anthracite_c_relay_cluster_members_up",
            &cluster
        ),
        Some(0.0),
        "the member is down"
    );
    assert_eq!(wrong.count(), 0, "nothing reached the peer of another CA");
    assert!(
        relay.log().contains("UnknownIssuer"),
        "the refusal is logged with its reason:\n{}",
        relay.log_tail(20)
    );
    drop(wrong);
    // The same port now presents a certificate of the CA, for another name: the queue drains.
    let right = Sink::start_on_with(
        "peer of the CA",
        SinkProtocol::Line,
        refused,
        Some(ca.server_cert(&["elsewhere.example.org"]).server_config()),
    );

    // Both ways, plain and gzip inside ssl.
    let inputs = [
        (a_plain, lines("an", 300)),
        (a_plain, lines("angz", 300)),
        (c_plain, lines("cr", 300)),
        (g_plain, lines("crgz", 300)),
    ];
    for (port, input) in &inputs {
        send(*port, input);
    }
    let want = sorted(
        &inputs
            .iter()
            .flat_map(|(_, i)| i.clone())
            .collect::<Vec<u8>>(),
    );
    let got = sinks.finish(want.len(), SETTLE);
    let got = &got[0];
    let missing: Vec<&String> = want.iter().filter(|l| !got.contains(l)).take(5).collect();
    assert!(
        got == &want,
        "the sink received {} lines, {} expected; first missing: {missing:?}; anthracite's \
         log:\n{}\ncarbon-c-relay (Debian):\n{}\ncarbon-c-relay (source-built):\n{}",
        got.len(),
        want.len(),
        relay.log_tail(20),
        debian_relay.log_tail(20),
        built_relay.log_tail(20)
    );
    // carbon-c-relay takes a while to stop (it sleeps in its shutdown): both at once.
    let stopping = [
        std::thread::spawn(move || drop(debian_relay)),
        std::thread::spawn(move || drop(built_relay)),
    ];

    right.wait_for_count(200, LIMIT);
    let mut delivered: Vec<String> = right
        .received()
        .iter()
        .map(|r| format!("{} {} {}\n", r.path, r.value, r.timestamp))
        .collect();
    delivered.sort();
    assert_eq!(delivered, sorted(&kept), "every kept line, once");
    relay.assert_running("the ssl run");
    relay.stop();
    for t in stopping {
        t.join().expect("carbon-c-relay stopped");
    }
}

#[test]
fn ssl_listener_without_its_pem_file_refuses_to_start_naming_file_and_line() {
    let dir = scratch("c_relay", "ssl_missing_pem");
    let p = free_ports(2);
    std::fs::write(
        dir.join("relay.conf"),
        format!(
            "listen type linemode {} proto tcp ;\n\
             listen type linemode transport plain ssl missing.pem\n    {} proto tcp ;\n\
             cluster a forward 127.0.0.1:2003 ;\nmatch * send to a ;\n",
            p[0], p[1]
        ),
    )
    .expect("write relay.conf");
    let conf = dir.join("relay.conf");
    // `check` accepts it, as `carbon-c-relay -t -t` does (the file is read at start) …
    let check = crate::anthracite("check", &conf, &dir, &[], b"");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // … `run` refuses to start, as carbon-c-relay does.
    let run = crate::anthracite("run", &conf, &dir, &[], b"");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "started without its certificate");
    assert!(
        stderr.contains("relay.conf:2:") && stderr.contains("missing.pem"),
        "{stderr}"
    );
}
