//! Lines queued for a member of an `any_of` or `failover` cluster that is down move to the
//! other members, as carbon-c-relay 3.7.3 moves them: every member is down (its sink
//! stopped) while the lines arrive, so each line is queued for the member its cluster picks
//! (`any_of`: by the name's hash, `failover`: the first); then the second member of each
//! cluster comes up and the first stays down. The lines queued for the first arrive at the
//! second, each once, counted as moved, and none reaches the first when it comes back
//! (anthracite); carbon-c-relay delivers the same lines in total (the differential).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anthracite_testkit::c_relay::{self, CRelay};
use anthracite_testkit::http::{sum, value};
use anthracite_testkit::{free_ports, scratch};

use crate::keeps::{LIMIT, Sink, fill, metrics, send, start};

/// Two clusters of two members each: `{D0}` and `{D2}` stay down, `{D1}` and `{D3}` come up.
const CONF: &str = "listen type linemode 127.0.0.1:{L} proto tcp;\n\
                    cluster anyof any_of 127.0.0.1:{D0} 127.0.0.1:{D1};\n\
                    cluster fail failover 127.0.0.1:{D2} 127.0.0.1:{D3};\n\
                    match ^a\\. send to anyof stop;\n\
                    match ^f\\. send to fail stop;\n";

/// Lines per cluster.
const LINES: usize = 150;

/// The input: `LINES` lines for each cluster.
fn input() -> String {
    ["a", "f"]
        .iter()
        .flat_map(|p| (0..LINES).map(move |i| format!("{p}.m{i} {i} 1700000000\n")))
        .collect()
}

/// Every line of the input, sorted.
fn input_lines() -> Vec<String> {
    let mut lines: Vec<String> = input().lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// What `sinks` received, every line, sorted (a line received twice is there twice).
fn received(sinks: &[&Sink]) -> Vec<String> {
    let mut lines: Vec<String> = sinks.iter().flat_map(|s| s.lines()).collect();
    lines.sort();
    lines
}

#[test]
fn lines_queued_for_a_member_that_is_down_move_to_the_others_once_counted() {
    let dir = scratch("c_relay", "moves");
    let ports = free_ports(6);
    let (listen, admin_port, d) = (ports[0], ports[1], &ports[2..]);
    let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
    let overlay = fill(
        "[admin]\nlisten = \"127.0.0.1:{A}\"\n",
        listen,
        admin_port,
        d,
    );
    // A memory queue of 100 per member: the failover's first member holds its 150 lines
    // partly in its spill log, which moves too.
    let first: Vec<Sink> = d.iter().map(|&p| Sink::start(p)).collect();
    let mut relay = start(
        &dir,
        &fill(CONF, listen, admin_port, d),
        &overlay,
        "-q 100 -b 10",
        admin,
    );
    let members_up = |want: f64| {
        let m = metrics(admin);
        [("anyof", "any_of"), ("fail", "failover")]
            .iter()
            .all(|(c, k)| {
                value(
                    &m,
                    "anthracite_c_relay_cluster_members_up",
                    &[("cluster", c), ("type", k)],
                ) == Some(want)
            })
    };
    relay.wait_until("every member connected", LIMIT, || {
        sum(&metrics(admin), "anthracite_destination_connected", &[]) == 4.0
    });
    // Every member's sink stops: the members go down.
    drop(first);
    relay.wait_until("every member down", LIMIT, || members_up(0.0));
    send(listen, &input());
    // The queued gauges count a batch on its way to the spill log; the spilled counter only
    // once the log stored it, so the wait is for both.
    relay.wait_until(
        "every line queued while every member is down, the failover's first member spilled",
        LIMIT,
        || {
            let m = metrics(admin);
            sum(&m, "anthracite_spilled_datapoints_total", &[]) > 0.0
                && ["anyof", "fail"].iter().all(|c| {
                    value(
                        &m,
                        "anthracite_c_relay_cluster_queued_datapoints",
                        &[
                            ("cluster", c),
                            ("type", if *c == "fail" { "failover" } else { "any_of" }),
                        ],
                    ) == Some(LINES as f64)
                })
        },
    );
    let up = [Sink::start(d[1]), Sink::start(d[3])];
    relay.wait_until("every line at the members that are up", LIMIT, || {
        received(&[&up[0], &up[1]]).len() >= 2 * LINES
    });
    relay.wait_until("every line counted as sent", LIMIT, || {
        sum(&metrics(admin), "anthracite_sent_datapoints_total", &[]) == (2 * LINES) as f64
    });
    assert_eq!(received(&[&up[0], &up[1]]), input_lines(), "each line once");
    let a: Vec<String> = up[0]
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("a."))
        .collect();
    assert_eq!(a.len(), LINES, "the any_of lines at its member that is up");

    let m = metrics(admin);
    let moved = |cluster: &str, kind: &str| {
        value(
            &m,
            "anthracite_c_relay_cluster_moved_datapoints_total",
            &[("cluster", cluster), ("type", kind)],
        )
        .unwrap_or(0.0)
    };
    // Every failover line was queued for its first member; the any_of lines hashed to both.
    assert_eq!(moved("fail", "failover"), LINES as f64);
    assert!(moved("anyof", "any_of") > 0.0, "{m:?}");
    let out = sum(
        &m,
        "anthracite_moved_datapoints_total",
        &[("direction", "out")],
    );
    let into = sum(
        &m,
        "anthracite_moved_datapoints_total",
        &[("direction", "in")],
    );
    assert_eq!(out, into);
    assert_eq!(out, moved("fail", "failover") + moved("anyof", "any_of"));
    // The books of every member: routed + moved in = sent + dropped + queued + moved out.
    let total = |name| sum(&m, name, &[]);
    assert_eq!(
        total("anthracite_routed_datapoints_total") + into,
        total("anthracite_sent_datapoints_total")
            + total("anthracite_dropped_datapoints_total")
            + total("anthracite_queue_datapoints")
            + total("anthracite_spill_queue_datapoints")
            + out
    );
    assert_eq!(total("anthracite_dropped_datapoints_total"), 0.0);

    // The members that were down come back: what moved is not sent again.
    let back = [Sink::start(d[0]), Sink::start(d[2])];
    relay.wait_until("every member up again", LIMIT, || members_up(2.0));
    send(listen, "a.after 1 1700000000\nf.after 1 1700000000\n");
    relay.wait_until("the lines sent after", LIMIT, || {
        received(&[&up[0], &up[1], &back[0], &back[1]]).len() >= 2 * LINES + 2
    });
    let mut all = received(&[&up[0], &up[1], &back[0], &back[1]]);
    all.retain(|l| !l.contains(".after "));
    assert_eq!(all, input_lines(), "each line once across all members");
    relay.stop();
}

#[test]
fn lines_queued_for_a_member_that_is_down_are_delivered_as_by_carbon_c_relay() {
    c_relay::require();
    let mut got = BTreeMap::new();
    for who in ["carbon-c-relay", "anthracite"] {
        let dir = scratch("c_relay", &format!("moves_{who}"));
        let ports = free_ports(5);
        let (listen, d) = (ports[0], &ports[1..]);
        let conf = dir.join("relay.conf");
        std::fs::write(&conf, fill(CONF, listen, 0, d)).expect("write relay.conf");
        let addr = SocketAddr::from(([127, 0, 0, 1], listen));
        let args = ["-w", "1"];
        // Every member down while the lines arrive, then the second of each cluster up.
        let lines = if who == "carbon-c-relay" {
            let relay = CRelay::start(&conf, &dir, &args, addr);
            send(listen, &input());
            let up = [Sink::start(d[1]), Sink::start(d[3])];
            let deadline = std::time::Instant::now() + LIMIT;
            while received(&[&up[0], &up[1]]).len() < 2 * LINES {
                assert!(
                    std::time::Instant::now() < deadline,
                    "carbon-c-relay delivered {} of {} lines\n{}",
                    received(&[&up[0], &up[1]]).len(),
                    2 * LINES,
                    relay.log_tail(20)
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            received(&[&up[0], &up[1]])
        } else {
            let mut relay = crate::relay_on(&dir, &conf, &args.join(" ")).start();
            relay.wait_listening(&[listen]);
            send(listen, &input());
            let up = [Sink::start(d[1]), Sink::start(d[3])];
            relay.wait_until("every line delivered", LIMIT, || {
                received(&[&up[0], &up[1]]).len() >= 2 * LINES
            });
            relay.stop();
            received(&[&up[0], &up[1]])
        };
        got.insert(who, lines);
    }
    assert_eq!(got["carbon-c-relay"], input_lines(), "carbon-c-relay");
    assert_eq!(got["anthracite"], got["carbon-c-relay"]);
}
