//! Where each datapoint *should* land, so loss can be split per destination for any relay.
//!
//! Every harness-configured relay (in-process anthracite, the carbon-relay and
//! carbon-c-relay templates) routes with carbon's consistent-hashing ring (`carbon_ch`) over the
//! sinks named `127.0.0.1:PORT:a`, `…:b`, … with replication 1. anthracite's router is
//! carbon-exact, so it predicts the sink of each name; replaying the generator's name sequence
//! gives the expected count per sink, and `expected − delivered` is that destination's loss.
//! The figure is only meaningful for relays routed that way; the report says so.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;

use super::generator::NameOrder;
use super::target::instance;
use anthracite::unstable::router::{DestinationSpec, HashType, RelayMethod, Router, RouterSpec};
use anthracite_sink::SinkStats;

/// Names received by more than one sink (each should land on exactly one with replication 1).
pub fn placement_conflicts(sinks: &[Arc<SinkStats>]) -> u64 {
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut conflicts = 0;
    for s in sinks {
        s.with_names(|names| {
            for n in names {
                if !seen.insert(n.clone()) {
                    conflicts += 1;
                }
            }
        });
    }
    conflicts
}

/// Expected datapoints per sink, given the datapoints each connection actually sent and the
/// length of each connection's name cycle (its payload). `None` if the ring cannot be built.
pub fn expected_per_sink(
    names: &[String],
    sinks: &[SocketAddr],
    shared: bool,
    sent_per_connection: &[u64],
    cycle_per_connection: &[u64],
) -> Option<Vec<u64>> {
    let destinations = sinks
        .iter()
        .enumerate()
        .map(|(i, a)| DestinationSpec::parse(&format!("{a}:{}", instance(i))).ok())
        .collect::<Option<Vec<_>>>()?;
    let router = Router::new(RouterSpec {
        method: RelayMethod::ConsistentHashing,
        hash_type: HashType::CarbonCh,
        replication_factor: 1,
        diverse_replicas: true,
        destinations,
        rules: Vec::new(),
        aggregation_rules: Vec::new(),
        c_relay: None,
    })
    .ok()?;
    let mut out = Vec::with_capacity(1);
    let dest_of: Vec<u16> = names
        .iter()
        .map(|n| {
            router.route_into(n.as_bytes(), &mut out);
            out.first().copied().unwrap_or(u16::MAX)
        })
        .collect();
    let k = sent_per_connection.len();
    let mut expected = vec![0u64; sinks.len()];
    for (c, (&sent, &cycle)) in sent_per_connection
        .iter()
        .zip(cycle_per_connection)
        .enumerate()
    {
        if cycle == 0 {
            continue;
        }
        // Same sequence as generator::render.
        let order = NameOrder {
            conn: c,
            conns: k,
            shared,
        };
        let mut per_cycle = vec![0u64; sinks.len()];
        let full = sent / cycle;
        let partial = sent % cycle;
        for j in 0..cycle {
            let d = dest_of[order.index(j as usize, names.len())] as usize;
            if let Some(slot) = per_cycle.get_mut(d) {
                *slot += 1;
            }
            if j < partial
                && let Some(slot) = expected.get_mut(d)
            {
                *slot += 1;
            }
        }
        for (e, p) in expected.iter_mut().zip(per_cycle) {
            *e += p * full;
        }
    }
    Some(expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_counts_add_up_to_what_was_sent() {
        let n = crate::scenario::Names::default();
        let names: Vec<String> = (0..1000).map(|i| crate::generator::name(&n, i)).collect();
        let sinks: Vec<SocketAddr> = vec![
            "127.0.0.1:2104".parse().unwrap(),
            "127.0.0.1:2204".parse().unwrap(),
        ];
        let e = expected_per_sink(&names, &sinks, false, &[2500, 1234], &[1000, 1000]).unwrap();
        assert_eq!(e.iter().sum::<u64>(), 3734);
        assert!(e.iter().all(|&x| x > 0));
    }

    /// The expectation replays exactly the names the generator renders, in either order.
    #[test]
    fn expected_counts_match_the_rendered_payloads() {
        use crate::generator::render;
        use crate::scenario::Protocol;
        let n = crate::scenario::Names::default();
        let names: Vec<String> = (0..700).map(|i| crate::generator::name(&n, i)).collect();
        let sinks: Vec<SocketAddr> = vec![
            "127.0.0.1:2104".parse().unwrap(),
            "127.0.0.1:2204".parse().unwrap(),
            "127.0.0.1:2304".parse().unwrap(),
        ];
        let router = Router::new(RouterSpec {
            method: RelayMethod::ConsistentHashing,
            hash_type: HashType::CarbonCh,
            replication_factor: 1,
            diverse_replicas: true,
            destinations: sinks
                .iter()
                .enumerate()
                .map(|(i, a)| DestinationSpec::parse(&format!("{a}:{}", instance(i))).unwrap())
                .collect(),
            rules: Vec::new(),
            aggregation_rules: Vec::new(),
            c_relay: None,
        })
        .unwrap();
        for shared in [false, true] {
            // 3 connections; each sends one and a half of its cycles of 400 datapoints.
            let mut counted = vec![0u64; sinks.len()];
            let mut out = Vec::new();
            for conn in 0..3 {
                let order = NameOrder {
                    conn,
                    conns: 3,
                    shared,
                };
                let p = render(&names, order, 400, Protocol::Line, 50, 1_700_000_000);
                let lines: Vec<&[u8]> = p.bytes.split(|&b| b == b'\n').collect();
                for line in lines.iter().chain(&lines[..200]).filter(|l| !l.is_empty()) {
                    let name = line.split(|&b| b == b' ').next().unwrap();
                    router.route_into(name, &mut out);
                    counted[out[0] as usize] += 1;
                }
            }
            let e = expected_per_sink(&names, &sinks, shared, &[600; 3], &[400; 3]).unwrap();
            assert_eq!(e, counted, "shared = {shared}");
        }
    }
}
