//! Proves the carbon test support works on its own, without anthracite: datapoints sent
//! straight to a real carbon-cache come back from whisper, carbon's placement matches the golden
//! vectors, tagged names map to carbon's `_tagged/…` paths, and a real carbon-relay forwards to
//! counting sinks.

use anthracite_testkit as testkit;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anthracite_sink::{Sink, SinkProtocol};
use testkit::carbon::{CarbonCaches, CarbonRelay, write_carbon_conf};
use testkit::placement::carbon_ring_placement;
use testkit::whisper::{Stored, wait_for_whisper, whisper_rel_paths};
use testkit::{compat_path, send_lines, send_pickle, unix_now};

#[test]
fn line_and_pickle_to_carbon_cache_read_back_from_whisper() {
    let mut caches = CarbonCaches::start(&["a"]);
    let now = unix_now();
    let base = now - 300;
    let line: Vec<(String, i64, f64)> = (0..5)
        .map(|i| (format!("selftest.line.m{i}"), base + i, i as f64 + 0.5))
        .collect();
    let pickle: Vec<(String, i64, f64)> = (0..5)
        .flat_map(|i| {
            [
                (
                    format!("selftest.pickle.m{i}"),
                    base + 10 + i,
                    -(i as f64) * 0.25,
                ),
                (
                    format!("selftest.pickle.m{i}"),
                    base + 20 + i,
                    1e10 + i as f64,
                ),
            ]
        })
        .collect();
    let inst = caches.get("a");
    send_lines(inst.line_addr(), &line);
    send_pickle(inst.pickle_addr(), &pickle, 3);

    let mut expected: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    for (p, t, v) in line.iter().chain(&pickle) {
        expected.entry(p.clone()).or_default().push((*t, *v));
    }
    let found = wait_for_whisper(&mut caches, &expected, base - 10, Duration::from_secs(60));
    for (name, want) in &expected {
        let got = found[0].get(name).unwrap_or(&Stored::Missing);
        assert_eq!(
            got,
            &Stored::Points(want.clone()),
            "whisper content of {name}"
        );
    }
}

#[test]
fn whisper_paths_follow_carbon_tag_normalization() {
    let names: Vec<String> = ["a.b.c", "cpu.usage;host=a;dc=x", "cpu.usage;dc=x;host=a"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let paths = whisper_rel_paths(&names);
    assert_eq!(paths[0], PathBuf::from("a/b/c.wsp"));
    // Both tag orders normalize to the same series; its file name is the SHA-256 of
    // "cpu.usage;dc=x;host=a" in _tagged/<h[0:3]>/<h[3:6]>/<h>.wsp.
    assert_eq!(paths[1], paths[2]);
    let s = paths[1].to_string_lossy().into_owned();
    let parts: Vec<&str> = s.split('/').collect();
    assert_eq!(parts.len(), 4, "{s}");
    assert_eq!(parts[0], "_tagged");
    let h = parts[3].strip_suffix(".wsp").expect(".wsp suffix");
    assert_eq!(h.len(), 64, "{s}");
    assert_eq!(parts[1], &h[0..3]);
    assert_eq!(parts[2], &h[3..6]);
}

#[test]
fn placement_matches_golden_vectors() {
    let path = compat_path("carbon-hash-vectors.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text).expect("vectors are JSON");
    let names: Vec<String> = v["metrics"].as_array().expect("metrics")[..50]
        .iter()
        .map(|m| m.as_str().expect("metric is a string").to_owned())
        .collect();
    let case = v["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| {
            c["destinations_conf"] == "127.0.0.1:2104:a, 127.0.0.1:2204:b"
                && c["hash_type"] == "carbon_ch"
        })
        .expect("case 127.0.0.1:2104:a, 127.0.0.1:2204:b / carbon_ch");
    let want: Vec<Vec<usize>> = case["rf1"].as_array().unwrap()[..50]
        .iter()
        .map(|d| vec![d.as_u64().unwrap() as usize])
        .collect();
    let got = carbon_ring_placement(
        "127.0.0.1:2104:a, 127.0.0.1:2204:b",
        "carbon_ch",
        &names,
        1,
        true,
    );
    assert_eq!(got, want);
}

#[test]
fn carbon_relay_forwards_to_counting_sinks() {
    let sinks = [
        Sink::start("a", SinkProtocol::Pickle),
        Sink::start("b", SinkProtocol::Pickle),
    ];
    let dests = format!(
        "127.0.0.1:{}:a, 127.0.0.1:{}:b",
        sinks[0].port(),
        sinks[1].port()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = write_carbon_conf(
        dir.path(),
        &format!(
            "RELAY_METHOD = consistent-hashing\nDESTINATIONS = {dests}\nMAX_QUEUE_SIZE = 100000\n\
             CARBON_METRIC_INTERVAL = 0\nLOG_LISTENER_CONN_SUCCESS = False\n"
        ),
        &[],
    );
    let relay = CarbonRelay::start(&conf);
    let ts = unix_now() - 60;
    let points: Vec<(String, i64, f64)> = (0..200)
        .map(|i| (format!("selftest.relay.m{i}"), ts, i as f64))
        .collect();
    send_lines(([127, 0, 0, 1], relay.line_port).into(), &points[..100]);
    send_pickle(
        ([127, 0, 0, 1], relay.pickle_port).into(),
        &points[100..],
        50,
    );

    let names: Vec<String> = points.iter().map(|p| p.0.clone()).collect();
    let placement = carbon_ring_placement(&dests, "carbon_ch", &names, 1, true);
    let mut want = [0usize; 2];
    for p in &placement {
        want[p[0]] += 1;
    }
    for (sink, n) in sinks.iter().zip(want) {
        sink.wait_for_count(n, Duration::from_secs(60));
    }
    for (i, (sink, n)) in sinks.iter().zip(want).enumerate() {
        assert_eq!(
            sink.wait_quiet(Duration::from_millis(500), Duration::from_secs(30)),
            n
        );
        assert!(sink.errors().is_empty(), "{:?}", sink.errors());
        let got = sink.multiset();
        for ((name, t, v), place) in points.iter().zip(&placement) {
            let key = (name.clone(), (*t as f64).to_bits(), v.to_bits());
            let expect = usize::from(place[0] == i);
            // -0.0 normalization does not matter here: values are non-negative, 0.0 included.
            assert_eq!(
                got.get(&key).copied().unwrap_or(0),
                expect,
                "{name} at sink {i}"
            );
        }
    }
    drop(relay);
}

/// The control for carbon_e2e: the same verification path (placement by carbon's ring, whisper
/// read-back of both caches) with the datapoints sent straight to the cache carbon picks. If
/// this passes and carbon_e2e fails, the fault is anthracite's, not the support's.
#[test]
fn direct_to_carbon_placement_verifies_on_two_caches() {
    let mut caches = CarbonCaches::start(&["a", "b"]);
    let dests = caches.pickle_destinations();
    let base = unix_now() - 600;
    let names: Vec<String> = (0..1_000)
        .map(|i| format!("selftest.control.g{}.m{i}", i % 13))
        .collect();
    let placement = carbon_ring_placement(&dests, "carbon_ch", &names, 1, true);
    let mut expected: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    for c in 0..2 {
        let mine: Vec<(String, i64, f64)> = names
            .iter()
            .zip(&placement)
            .enumerate()
            .filter(|(_, (_, p))| p[0] == c)
            .map(|(i, (n, _))| (n.clone(), base + (i % 300) as i64, i as f64 * 1.5))
            .collect();
        for (n, t, v) in &mine {
            expected.insert(n.clone(), vec![(*t, *v)]);
        }
        let (line, pickle) = mine.split_at(mine.len() / 2);
        send_lines(caches.instances[c].line_addr(), line);
        send_pickle(caches.instances[c].pickle_addr(), pickle, 500);
    }
    let found = wait_for_whisper(&mut caches, &expected, base - 10, Duration::from_secs(120));
    for (n, place) in names.iter().zip(&placement) {
        let home = place[0];
        assert_eq!(
            found[home].get(n),
            Some(&Stored::Points(expected[n].clone())),
            "{n}"
        );
        assert_eq!(found[1 - home].get(n), None, "{n} also on the other cache");
    }
}
