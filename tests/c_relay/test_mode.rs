//! `anthracite route` against `carbon-c-relay -t` on configurations that use every cluster
//! type, rewrites with every modifier, validation, `route using`, blackholes, aggregations
//! and the optimiser, over names chosen to reach each of them, with `ssl` listeners and
//! members: carbon-c-relay's test mode is a second oracle for the member every cluster type
//! picks.

use anthracite_testkit::c_relay;

use super::anthracite;

/// Every cluster type and route construct.
const EVERY_CONSTRUCT: &str = r#"
listen type linemode 127.0.0.1:3098 proto tcp;
listen type linemode transport plain ssl relay.pem 127.0.0.1:3099 proto tcp /tmp/ssl.sock proto unix;
cluster sec forward 127.0.0.1:3024 transport plain ssl 127.0.0.1:3025;
cluster fwd forward 127.0.0.1:3001 127.0.0.1:3002;
cluster any any_of 127.0.0.1:3003 127.0.0.1:3004 127.0.0.1:3005;
cluster fail failover 127.0.0.1:3006 127.0.0.1:3007;
cluster cch carbon_ch replication 2
    127.0.0.1:3008=a 127.0.0.1:3009=b 127.0.0.2:3010 127.0.0.3:3011=7;
cluster fnv fnv1a_ch replication 2
    127.0.0.1:3012 127.0.0.1:3013 127.0.0.1:3014=0042 10.0.0.1:3015=xyz;
cluster jmp jump_fnv1a_ch replication 3
    127.0.0.1:3016=10 127.0.0.1:3017=9 127.0.0.1:3018 127.0.0.1:3019=abc 127.0.0.1:3020=2;
cluster dyn carbon_ch dynamic 127.0.0.1:3021 127.0.0.2:3022;
cluster viaudp forward 127.0.0.1:3023 proto udp;

match ^secure\. send to sec stop;
match ^sys\.
    validate ^[0-9.]+\ [0-9]+$ else drop
    send to fwd;
rewrite ^(app)\.([A-Za-z]+)\.(.*)$ into \1.\_2.\^3;
rewrite ^host\.([^.]+)\.(.*) into hosts.\.1.\2;
rewrite ^(upper)\.(.*)$ into \^.2.\_.1;
match ^app\. ^hosts\. send to any cch stop;
match (foo|foobar)(bar)? route using \1 send to fnv;
match [0-9]$ send to jmp fail;
match junk$ send to blackhole;
match ^logme validate ^x else log;
aggregate ^agg\.([^.]+)\.(.*)
    every 10 seconds expire after 30 seconds
    timestamp at start of bucket
    compute sum write to agg.sum.\1
    compute percentile90 write to agg.p90.\1
    compute count write to agg.count
    send to dyn;
match * send to cch viaudp;
"#;

fn names() -> String {
    let mut names = vec![
        "sys.cpu.load 1.5 1700000000",
        "sys.cpu.load abc 1700000000",
        "sys.mem",
        "app.Frontend.Latency.P99 3 1700000000",
        "app.x.y",
        "host.web01.example.com.cpu 1 2",
        "upper.a.b.c 1 2",
        "foobarbar.x 1 2",
        "foo.x 1 2",
        "a.b.c9 1 2",
        "x.junk 1 2",
        "logme.now 1 2",
        "agg.web.requests 5 1700000000",
        "agg.db.q 7",
        "plain.metric",
        "secure.metric 1 2",
    ];
    let generated: Vec<String> = (0..150)
        .map(|i| {
            format!(
                "svc{}.node{:03}.metric_{} {i} 1700000000",
                i % 7,
                i,
                i * 37 % 11
            )
        })
        .collect();
    let mut text: String = names.drain(..).map(|n| format!("{n}\n")).collect();
    for g in &generated {
        text.push_str(g);
        text.push('\n');
    }
    text
}

fn compare(test: &str, conf_text: &str, args: &[&str], input: &str) {
    c_relay::require();
    let dir = anthracite_testkit::scratch("c_relay", test);
    let conf = dir.join("relay.conf");
    std::fs::write(&conf, conf_text).expect("write configuration");
    let theirs = c_relay::test_mode(&conf, &dir, args, input.as_bytes());
    assert!(
        theirs.status.success(),
        "carbon-c-relay refused the configuration: {}",
        String::from_utf8_lossy(&theirs.stderr)
    );
    let ours = anthracite("route", &conf, &dir, args, input.as_bytes());
    assert!(
        ours.status.success(),
        "anthracite refused the configuration: {}",
        String::from_utf8_lossy(&ours.stderr)
    );
    let (ours, theirs) = (
        c_relay::without_settings(&ours.stdout),
        c_relay::without_settings(&theirs.stdout),
    );
    assert!(
        theirs.lines().count() > 100,
        "carbon-c-relay printed little:\n{theirs}"
    );
    assert_eq!(
        ours, theirs,
        "`anthracite route` (left) and `carbon-c-relay -t` (right) differ"
    );
}

#[test]
fn every_cluster_type_and_route_construct_prints_as_carbon_c_relay_t() {
    compare(
        "every_construct",
        EVERY_CONSTRUCT,
        &["-Hrelay.test.example"],
        &names(),
    );
}

#[test]
fn rings_stubs_and_hash_positions_print_as_carbon_c_relay_t_d() {
    compare(
        "every_construct_debug",
        EVERY_CONSTRUCT,
        &["-Hrelay.test.example", "-d"],
        &names(),
    );
}

#[test]
fn the_optimiser_groups_and_reorders_as_carbon_c_relay_does() {
    // 60 routes: groups of three or more share a block; a `stop` route moves its group.
    let mut conf =
        String::from("cluster a forward 127.0.0.1:3101;\ncluster b forward 127.0.0.1:3102;\n");
    for i in 0..20 {
        conf.push_str(&format!("match ^svc{i}\\.[a-z]+\\.requests send to a;\n"));
        conf.push_str(&format!("match ^svc{i}\\.[a-z]+\\.errors send to b;\n"));
    }
    for i in 0..10 {
        conf.push_str(&format!(
            "match ^dc{i}\\.latency{} send to a{};\n",
            i % 3,
            if i == 4 { " stop" } else { "" }
        ));
        conf.push_str(&format!("match x{i}\\.y send to b;\n"));
    }
    conf.push_str("match * send to b;\n");
    let mut input = String::new();
    for i in 0..20 {
        input.push_str(&format!("svc{i}.web.requests 1 2\nsvc{i}.web.errors 1 2\n"));
    }
    for i in 0..10 {
        input.push_str(&format!("dc{i}.latency{} 1 2\nx{i}.y 1 2\n", i % 3));
    }
    compare("optimiser", &conf, &["-Hrelay.test.example"], &input);
}
