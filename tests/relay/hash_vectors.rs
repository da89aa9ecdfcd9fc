//! carbon 1.1.10's own routing decisions (`tests/compat/carbon-hash-vectors.json`) against
//! anthracite's router: every case, every ring entry, every metric, every method.

use anthracite_testkit as support;

use std::sync::Arc;

use anthracite::unstable::router::{
    DestinationSpec, HashType, NodeKeys, RelayMethod, RouteCache, Router, RouterSpec, carbon_hash,
};
use serde_json::Value;

fn vectors() -> Value {
    let path = support::compat_path("carbon-hash-vectors.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read carbon's golden vectors at {}: {e}",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn hash_type(name: &str) -> HashType {
    match name {
        "carbon_ch" => HashType::CarbonCh,
        "fnv1a_ch" => HashType::Fnv1aCh,
        "mmh3_ch" => HashType::Mmh3Ch,
        other => panic!("unknown hash type {other:?} in vectors"),
    }
}

fn router(
    method: RelayMethod,
    ht: HashType,
    rf: usize,
    diverse: bool,
    destinations: &[DestinationSpec],
) -> Arc<Router> {
    Arc::new(
        Router::new(RouterSpec {
            method,
            hash_type: ht,
            replication_factor: rf,
            diverse_replicas: diverse,
            destinations: destinations.to_vec(),
            rules: Vec::new(),
            aggregation_rules: Vec::new(),
            c_relay: None,
        })
        .unwrap_or_else(|e| panic!("router build failed: {e}")),
    )
}

/// An expected route: a single index (`rf1`, `fast_rf1`) or a list.
fn indices(v: &Value) -> Vec<u16> {
    match v {
        Value::Number(n) => vec![n.as_u64().expect("index") as u16],
        Value::Array(a) => a
            .iter()
            .map(|x| x.as_u64().expect("index") as u16)
            .collect(),
        other => panic!("unexpected route value {other}"),
    }
}

#[test]
fn carbon_hash_vectors() {
    let v = vectors();
    let metrics: Vec<&str> = v["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .map(|m| m.as_str().expect("metric is a string"))
        .collect();
    assert_eq!(metrics.len(), 2000);
    assert_eq!(v["replica_count"].as_u64(), Some(100));

    let mut failures: Vec<String> = Vec::new();
    let mut checked = 0usize;
    let cases = v["cases"].as_array().expect("cases");
    for case in cases {
        let id = case["id"].as_str().expect("id");
        let ht = hash_type(case["hash_type"].as_str().expect("hash_type"));

        // Destinations: parse DESTINATIONS text like carbon.
        let conf = case["destinations_conf"]
            .as_str()
            .expect("destinations_conf");
        let parsed: Vec<DestinationSpec> = conf
            .split(',')
            .map(|d| DestinationSpec::parse(d.trim()).unwrap_or_else(|e| panic!("{id}: {e}")))
            .collect();
        let expected: Vec<(String, u16, Option<String>)> = case["destinations"]
            .as_array()
            .expect("destinations")
            .iter()
            .map(|d| {
                (
                    d[0].as_str().expect("host").to_owned(),
                    d[1].as_u64().expect("port") as u16,
                    d[2].as_str().map(str::to_owned),
                )
            })
            .collect();
        let got: Vec<(String, u16, Option<String>)> = parsed
            .iter()
            .map(|d| (d.host.clone(), d.port, d.instance.clone()))
            .collect();
        assert_eq!(got, expected, "{id}: parsed destinations");

        let ch = |rf, diverse| router(RelayMethod::ConsistentHashing, ht, rf, diverse, &parsed);
        let fast = |rf, diverse| router(RelayMethod::FastHashing, ht, rf, diverse, &parsed);
        let routers = [
            ("rf1", ch(1, false)),
            ("rf2_diverse", ch(2, true)),
            ("rf2_nondiverse", ch(2, false)),
            ("fast_rf1", fast(1, false)),
            ("fast_rf2_nondiverse", fast(2, false)),
        ];

        // The full ring, collisions bumped.
        let want_ring: Vec<(i64, u16)> = case["ring"]
            .as_array()
            .expect("ring")
            .iter()
            .map(|e| {
                (
                    e[0].as_i64().expect("pos"),
                    e[1].as_u64().expect("idx") as u16,
                )
            })
            .collect();
        let got_ring: Vec<(i64, u16)> = routers[0]
            .1
            .ring()
            .expect("consistent-hashing has a ring")
            .entries()
            .collect();
        if got_ring != want_ring {
            let first = got_ring
                .iter()
                .zip(&want_ring)
                .position(|(a, b)| a != b)
                .unwrap_or(got_ring.len().min(want_ring.len()));
            failures.push(format!(
                "{id}: ring differs (len {} vs {}), first at entry {first}: got {:?} want {:?}",
                got_ring.len(),
                want_ring.len(),
                got_ring.get(first),
                want_ring.get(first)
            ));
        }

        let pos = case["pos"].as_array().expect("pos");
        let mut out = Vec::new();
        for (key, router) in &routers {
            let want_all = case[*key]
                .as_array()
                .unwrap_or_else(|| panic!("{id}: {key}"));
            assert_eq!(want_all.len(), metrics.len(), "{id}: {key} length");
            // A 16 KiB cache (the metrics are ~140 KiB of names) evicts all the way through;
            // a big one holds everything.
            let small = RouteCache::new(router.clone(), 16 << 10);
            let big = RouteCache::new(router.clone(), 16 << 20);
            let mut cached = Vec::new();
            for (i, metric) in metrics.iter().enumerate() {
                let want = indices(&want_all[i]);
                router.route_into(metric.as_bytes(), &mut out);
                if out != want {
                    failures.push(format!(
                        "{id}: {key} for metric {metric:?}: got {out:?}, carbon {want:?}"
                    ));
                }
                for pass in 0..2 {
                    for (label, cache) in [("small", &small), ("big", &big)] {
                        cache.route_into(metric.as_bytes(), &mut cached);
                        if cached != out {
                            failures.push(format!(
                                "{id}: {key} {label} cache pass {pass} for metric {metric:?}: \
                                 got {cached:?}, uncached {out:?}"
                            ));
                        }
                    }
                }
                checked += 1;
            }
            // The batched path (the names a run of datapoints missed in the cache, their MD5s
            // computed sixteen at a time) answers exactly as carbon does, in runs of every fill.
            let names: Vec<&[u8]> = metrics.iter().map(|m| m.as_bytes()).collect();
            let mut many = Vec::new();
            for (c, chunk) in names.chunks(123).enumerate() {
                let mut spans = vec![(0u32, 0u32); chunk.len()];
                many.clear();
                router.route_many(chunk, &mut many, &mut spans);
                for (j, (metric, &(start, len))) in chunk.iter().zip(&spans).enumerate() {
                    let want = indices(&want_all[c * 123 + j]);
                    let got = &many[start as usize..(start + len) as usize];
                    if got != want {
                        failures.push(format!(
                            "{id}: {key} batched for metric {:?}: got {got:?}, carbon {want:?}",
                            String::from_utf8_lossy(metric)
                        ));
                    }
                }
            }
            assert!(
                small.len() < metrics.len() / 4 && small.accounted_bytes() <= small.budget(),
                "{id}: {key}: the small cache should have evicted ({} names, {} bytes)",
                small.len(),
                small.accounted_bytes()
            );
            assert_eq!(
                big.len(),
                metrics.len(),
                "{id}: {key}: the big cache holds all"
            );
            // A name is stored at its second lookup, so the passes above were answered by the
            // router; now every answer of the big cache comes from what it stored, and the
            // small one answers from what survived eviction.
            for (i, metric) in metrics.iter().enumerate() {
                let want = indices(&want_all[i]);
                assert!(
                    big.is_cached(metric.as_bytes()),
                    "{id}: {key}: {metric} cached"
                );
                for (label, cache) in [("small", &small), ("big", &big)] {
                    cache.route_into(metric.as_bytes(), &mut cached);
                    if cached != want {
                        failures.push(format!(
                            "{id}: {key} {label} cache, stored route for {metric:?}: \
                             got {cached:?}, carbon {want:?}"
                        ));
                    }
                }
            }
        }
        for (i, metric) in metrics.iter().enumerate() {
            let want = pos[i].as_i64().expect("pos");
            let got = carbon_hash(metric.as_bytes(), ht);
            if got != want {
                failures.push(format!(
                    "{id}: pos of metric {metric:?}: got {got}, carbon {want}"
                ));
            }
        }
    }

    // hash_examples: carbonHash(string, hash_type).
    let mut examples = 0;
    for (text, by_type) in v["hash_examples"].as_object().expect("hash_examples") {
        for (ht, want) in by_type.as_object().expect("hash types") {
            let got = carbon_hash(text.as_bytes(), hash_type(ht));
            if Some(got) != want.as_i64() {
                failures.push(format!(
                    "hash_examples {text:?} {ht}: got {got}, carbon {want}"
                ));
            }
            examples += 1;
        }
    }

    // replica_key_examples: "<types>, node ('host', 'inst'|None)[, replica N]" -> literal.
    let keys = NodeKeys::new();
    let node_re = regex::Regex::new(r"node \('([^']*)', (?:None|'([^']*)')\)(?:, replica (\d+))?")
        .expect("test regex");
    let mut replica_examples = 0;
    for (desc, want) in v["replica_key_examples"]
        .as_object()
        .expect("replica_key_examples")
    {
        let want = want.as_str().expect("string");
        let caps = node_re
            .captures(desc)
            .unwrap_or_else(|| panic!("cannot read replica example {desc:?}"));
        let server = &caps[1];
        let instance = caps.get(2).map(|m| m.as_str());
        let got = match caps.get(3) {
            None => keys.node_key(server, instance),
            Some(i) => {
                let i: usize = i.as_str().parse().expect("replica number");
                let types = desc.split(", node").next().unwrap_or("");
                let mut got = None;
                for ht in types.split('/').map(str::trim) {
                    let k = keys.replica_key(hash_type(ht), server, instance, i);
                    if got.as_ref().is_some_and(|g| g != &k) {
                        failures.push(format!("replica example {desc:?}: types disagree"));
                    }
                    got = Some(k);
                }
                got.unwrap_or_default()
            }
        };
        if got != want {
            failures.push(format!(
                "replica example {desc:?}: got {got:?}, carbon {want:?}"
            ));
        }
        replica_examples += 1;
    }

    eprintln!(
        "checked {} cases, {checked} (case, method, metric) routes, {examples} hash examples, \
         {replica_examples} replica key examples",
        cases.len()
    );
    if !failures.is_empty() {
        let shown: Vec<&String> = failures.iter().take(40).collect();
        panic!(
            "{} mismatches with carbon 1.1.10; first {}:\n{}",
            failures.len(),
            shown.len(),
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
