//! The drop-in settings against the real carbon-relay 1.1.10 (the engine and its method are in
//! `engine.rs`; `differential.rs` holds the routing cases): the protobuf
//! destination protocol, TLS to the destinations, pooled replicas, a relay-rules pattern only
//! Python's `re` (and anthracite's backtracking fallback) understands, and UDP destinations.
//! Each case runs carbon-relay and anthracite on the same carbon.conf against counting sinks
//! and asserts identical delivered multisets of (destination, path, timestamp, value).
//!
//! UDP is the one case where the carbon.conf cannot be shared: carbon 1.1.10's
//! `carbon.conf.example` lists `udp` among the `DESTINATION_PROTOCOL` values, but carbon's
//! client has no UDP plugin and carbon-relay exits on it at startup. The case asserts that
//! refusal, then compares anthracite's datagrams against carbon's plaintext client (the same
//! carbon.conf with `DESTINATION_PROTOCOL = line`): the lines are the same, only the transport
//! differs. Its chunks are small so a paced chunk always fits the sinks' socket buffers
//! (datagrams a full buffer would drop are not the relay's doing).
//!
//! The line-digits case sends values of more than ten decimals and fractional timestamps to
//! `DESTINATION_PROTOCOL = line` destinations: carbon's line client writes `%.10f` values
//! without trailing zeros and `%d` timestamps, and the sinks must see the same numbers from both.
//!
//! Sizes: 5,000–10,000 datapoints per case (half by plaintext, half by pickle), enough for
//! every destination to get thousands.

use crate::engine::{CarbonSubstitute, Case, Dest, DropIn, Payload, differential, one};
use anthracite_sink::SinkProtocol;

const THREE: &[Dest] = &[
    ("127.0.0.1", Some("a")),
    ("127.0.0.1", Some("b")),
    ("127.0.0.1", Some("c")),
];

/// carbon's `CarbonProtobufClientProtocol` against anthracite's protobuf encoder; the sinks
/// decode with their own prost types.
#[test]
fn protobuf_destination_protocol() {
    differential(&Case {
        protocol: SinkProtocol::Protobuf,
        ..Case::hashing(
            "destination-protocol-protobuf",
            THREE,
            "RELAY_METHOD = consistent-hashing\nDESTINATION_PROTOCOL = protobuf\n",
            10_000,
            one,
        )
    });
}

/// `DESTINATION_TRANSPORT = ssl` with `DESTINATION_SSL_CA`: the sinks terminate TLS with a
/// certificate for `localhost` signed by a CA made for the run; both relays verify it against
/// that CA and the destination's host name.
#[test]
fn ssl_destination_transport() {
    differential(&Case {
        drop_in: DropIn {
            tls: true,
            ..DropIn::default()
        },
        ..Case::hashing(
            "destination-transport-ssl",
            &[
                ("localhost", Some("a")),
                ("localhost", Some("b")),
                ("localhost", Some("c")),
            ],
            "RELAY_METHOD = consistent-hashing\nDESTINATION_TRANSPORT = ssl\n\
             DESTINATION_SSL_CA = {conf_dir}/ca.pem\n",
            10_000,
            one,
        )
    });
}

/// `DESTINATION_POOL_REPLICAS = True` with instances `a` and `b` sharing one host:port and `c`
/// on its own, RF=2 without diverse replicas: a datapoint the ring places on `a` and `b` goes
/// once to their shared port (carbon collects the pool's least-loaded member into a set), one
/// placed on `a` or `b` and `c` goes to both ports.
#[test]
fn pool_replicas_share_host_and_port() {
    differential(&Case {
        exact: false,
        drop_in: DropIn {
            port_slots: Some(&[0, 0, 1]),
            ..DropIn::default()
        },
        ..Case::hashing(
            "destination-pool-replicas",
            THREE,
            "RELAY_METHOD = consistent-hashing\nREPLICATION_FACTOR = 2\nDIVERSE_REPLICAS = False\n\
             DESTINATION_POOL_REPLICAS = True\n",
            10_000,
            one,
        )
    });
}

/// A relay-rules file whose patterns need Python's `re`: a negative look-ahead and a
/// look-behind (the `regex` crate refuses both; anthracite falls back to its bounded
/// backtracking engine).
#[test]
fn relay_rules_with_look_around_patterns() {
    differential(&Case {
        config: |d| {
            let rules = format!(
                "[not-db-or-web]\npattern = ^diff\\.(?!db\\.|web\\.)\ndestinations = {a}\n\n\
                 [count-after-dot]\npattern = (?<=\\.)count\\.\ndestinations = {b}\ncontinue = true\n\n\
                 [default]\ndefault = true\ndestinations = {c}\n",
                a = d[0],
                b = d[1],
                c = d[2],
            );
            (
                "RELAY_METHOD = rules\n".into(),
                vec![("relay-rules.conf", rules)],
            )
        },
        min_copies: |name| {
            // `diff.web.api.<m>.count.…` matches the look-behind rule (continue) and then the
            // default; `Diff.WEB…` (re.I) and `diff.db…` fall to the default alone.
            let lower = name.to_lowercase();
            if lower.starts_with("diff.web.") && name.contains(".count.") {
                2
            } else {
                1
            }
        },
        ..Case::hashing("relay-rules-look-around", THREE, "", 10_000, one)
    });
}

/// `DESTINATION_PROTOCOL = udp`: carbon-relay 1.1.10 refuses it; anthracite's datagrams carry
/// what carbon's plaintext client sends over TCP.
#[test]
fn udp_destination_protocol_against_carbons_line_client() {
    differential(&Case {
        protocol: SinkProtocol::Udp,
        drop_in: DropIn {
            carbon_substitute: Some(CarbonSubstitute {
                from: "DESTINATION_PROTOCOL = udp",
                to: "DESTINATION_PROTOCOL = line",
                protocol: SinkProtocol::Line,
                refusal: "DESTINATION_PROTOCOL must be one of",
            }),
            chunk: Some(500),
            ..DropIn::default()
        },
        ..Case::hashing(
            "destination-protocol-udp",
            THREE,
            "RELAY_METHOD = consistent-hashing\nDESTINATION_PROTOCOL = udp\n",
            5_000,
            one,
        )
    });
}

/// carbon's line client writes `("%.10f" % v).rstrip('0').rstrip('.')` and `"%d" % t`; a relay
/// writing Python's repr instead delivered 755 of 3,624 values (`9.882973263293738e-06` for
/// carbon's `0.000009883`) and 107 timestamps (`…398.75` for `…398`) differently.
#[test]
fn line_destination_writes_carbons_ten_decimals_and_integer_timestamps() {
    differential(&Case {
        protocol: SinkProtocol::Line,
        points: 0,
        exact: false,
        raw: many_decimals,
        ..Case::hashing(
            "destination-line-digits",
            &[("127.0.0.1", Some("a")), ("127.0.0.1", Some("b"))],
            "RELAY_METHOD = consistent-hashing\nDESTINATION_PROTOCOL = line\n",
            0,
            one,
        )
    });
}

/// 4,000 datapoints (half plaintext, half pickle) whose values carry up to 17 significant
/// digits at magnitudes from 1e-14 to 1e22, both signs and negative zero, with timestamps
/// `ts + k/8 + 0.0625` (never whole).
fn many_decimals(ts: i64) -> Vec<Payload> {
    use serde_pickle::Value as V;
    let point = |i: usize| {
        let scale = 10f64.powi((i % 37) as i32 - 14);
        let mut value = (i as f64 * 0.618_033_988_749_895).sin() * scale;
        if i.is_multiple_of(101) {
            value = -0.0;
        }
        let timestamp = (ts - (i % 500) as i64) as f64 + (i % 8) as f64 / 8.0 + 0.0625;
        (format!("digits.m{}.v{i}", i % 97), timestamp, value)
    };
    let mut text = String::new();
    for i in 0..2_000 {
        let (name, timestamp, value) = point(i);
        text.push_str(&format!("{name} {value:?} {timestamp:?}\n"));
    }
    let frames = (2_000..4_000)
        .collect::<Vec<_>>()
        .chunks(500)
        .map(|chunk| {
            V::List(
                chunk
                    .iter()
                    .map(|&i| {
                        let (name, timestamp, value) = point(i);
                        V::Tuple(vec![
                            V::String(name),
                            V::Tuple(vec![V::F64(timestamp), V::F64(value)]),
                        ])
                    })
                    .collect(),
            )
        })
        .collect();
    vec![Payload::Lines(text.into_bytes()), Payload::Pickle(frames)]
}
