//! A name's kept walk of the routes (`router::c_relay::plan`) replayed against the walk itself,
//! on programs read by the configuration reader (which sits a layer above the router).

use super::build::Builder;
use crate::router::c_relay::Program;
use crate::router::c_relay::plan::{encode, replay};
use crate::router::c_relay::route::{Env, Routed};

fn program(conf: &str) -> Program {
    let mut b = Builder::offline("relay.example");
    b.read_text("<text>", conf.as_bytes()).expect("valid");
    b.finish(None).0
}

/// A line and its server.
type Send = (String, u16);
/// An aggregator, compute, name, value and timestamp.
type Aggregated = (u32, u32, String, String, i64);

/// What a walk (or a replay) sends where, and aggregates, as text.
fn outcome(r: &Routed, line: &str) -> (Vec<Send>, Vec<Aggregated>) {
    let sends = r
        .sends
        .iter()
        .map(|&(v, s)| {
            let bytes = r.variant_of(v, line.as_bytes());
            (String::from_utf8_lossy(bytes).into_owned(), s)
        })
        .collect();
    let aggregates = r
        .aggregates
        .iter()
        .map(|h| {
            (
                h.aggregator,
                h.compute,
                String::from_utf8_lossy(r.aggregate_name(h)).into_owned(),
                format!("{:?}", h.value),
                h.epoch,
            )
        })
        .collect();
    (sends, aggregates)
}

fn walk(p: &Program, line: &str, down: &[u16]) -> Routed {
    let failed = |s: u16| down.contains(&s);
    let env = Env { failed: &failed };
    let mut r = Routed::default();
    let fs = line.find(' ').unwrap_or(line.len());
    p.route(line.as_bytes(), fs, b"", &env, &mut r);
    r
}

const CONF: &str = "\
    cluster any any_of 127.0.0.1:1 127.0.0.1:2 127.0.0.1:3;\n\
    cluster fo failover 127.0.0.1:4 127.0.0.1:5;\n\
    cluster ch carbon_ch replication 2 dynamic 127.0.0.1:6=a 127.0.0.1:7=b 127.0.0.1:8=c;\n\
    cluster jump jump_fnv1a_ch 127.0.0.1:9=1 127.0.0.1:10=2;\n\
    cluster fw forward 127.0.0.1:11;\n\
    match ^sys\\. send to fw;\n\
    rewrite ^sys\\.([A-Z]+)\\.(.*)$ into sys.\\_1.\\.2;\n\
    aggregate ^sys\\.([a-z]+)\\.([a-z_]+)$ every 10 seconds expire after 20 seconds\n\
      compute sum write to agg.\\1.sum compute percentile90 write to agg.\\^1.\\2.p90;\n\
    match ^sys\\.[a-z]+\\. send to any fo;\n\
    match ^(sys)\\.([a-z]+) route using \\2.\\1 send to ch;\n\
    match ^app\\. send to jump any stop;\n\
    match * send to ch fo;\n";

#[test]
fn a_replayed_plan_gives_what_the_walk_gives_whatever_is_down() {
    let p = program(CONF);
    let names = [
        "sys.HOST.cpu.user",
        "sys.Web01.load",
        "sys.abc.mem_free",
        "app.x.y",
        "other.metric",
        "sys.",
    ];
    let downs: [&[u16]; 5] = [&[], &[0], &[0, 1, 3], &[5, 6], &[0, 1, 2, 3, 4, 5, 6, 7]];
    let mut plan = Vec::new();
    let mut replayed = Routed::default();
    for name in names {
        let first = format!("{name} 12.5 1700000000");
        assert!(encode(
            &walk(&p, &first, &[]),
            first.as_bytes(),
            name.len(),
            &mut plan
        ));
        for (value, ts) in [("1", "1700000010"), ("-3e2", "1700000000"), ("7.25", "17")] {
            let line = format!("{name} {value} {ts}");
            for down in downs {
                let failed = |s: u16| down.contains(&s);
                let env = Env { failed: &failed };
                assert!(replay(
                    &plan,
                    &p,
                    line.as_bytes(),
                    name.len(),
                    &env,
                    &mut replayed
                ));
                let walked = walk(&p, &line, down);
                assert_eq!(
                    outcome(&replayed, &line),
                    outcome(&walked, &line),
                    "{line} with {down:?} down"
                );
                assert_eq!(replayed.blackholed, walked.blackholed, "{line}");
            }
        }
    }
    // The walks above did send somewhere, aggregate and rewrite.
    let w = walk(&p, "sys.HOST.cpu.user 1 2", &[]);
    assert!(
        outcome(&w, "")
            .0
            .iter()
            .any(|(l, _)| l.starts_with("sys.host.cpu_user "))
    );
    assert!(!walk(&p, "sys.abc.mem_free 1 2", &[]).aggregates.is_empty());
}

#[test]
fn walks_that_read_more_than_the_name_are_not_kept() {
    let p = program(
        "cluster fw forward 127.0.0.1:1;\n\
         match * validate ^[0-9]+\\ [0-9]+$ else drop send to fw;\n",
    );
    let mut plan = Vec::new();
    let line = "a.b 1 2";
    assert!(!encode(&walk(&p, line, &[]), line.as_bytes(), 3, &mut plan));
    // A `file ip` cluster writes the sender's address before the line.
    let p = program("cluster f file ip /tmp/anthracite-plan-test;\nmatch * send to f;\n");
    assert!(!encode(&walk(&p, line, &[]), line.as_bytes(), 3, &mut plan));
    // Without a timestamp, a line says nothing of how its name is aggregated.
    let p = program("cluster fw forward 127.0.0.1:1;\nmatch * send to fw;\n");
    assert!(!encode(&walk(&p, "a.b 1", &[]), b"a.b 1", 3, &mut plan));
}

#[test]
fn a_plan_holds_only_for_lines_no_longer_than_the_one_walked() {
    let p = program("cluster fw forward 127.0.0.1:1;\nmatch * send to fw;\n");
    let mut plan = Vec::new();
    assert!(encode(&walk(&p, "a.b 1 2", &[]), b"a.b 1 2", 3, &mut plan));
    let env = Env { failed: &|_| false };
    let mut r = Routed::default();
    assert!(replay(&plan, &p, b"a.b 3 4", 3, &env, &mut r));
    assert!(!replay(&plan, &p, b"a.b 10 2", 3, &env, &mut r));
    // A rewrite that does not fit carbon-c-relay's buffer with the text after the name is
    // not kept.
    let long = format!("a.{} {} 2", "x".repeat(12_000), "1".repeat(9_000));
    let p = program(
        "cluster fw forward 127.0.0.1:1;\n\
         rewrite ^a\\.(.*)$ into \\1.\\1;\nmatch * send to fw;\n",
    );
    let fs = long.find(' ').unwrap_or(0);
    let w = walk(&p, &long, &[]);
    assert!(w.overflowed);
    assert!(!encode(&w, long.as_bytes(), fs, &mut plan));
}
