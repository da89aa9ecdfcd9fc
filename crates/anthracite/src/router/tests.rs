//! Router-level unit tests; carbon's golden vectors are checked in `tests/hash_vectors.rs`.

use super::*;

fn spec(method: RelayMethod, destinations: &[&str]) -> RouterSpec {
    RouterSpec {
        method,
        hash_type: HashType::CarbonCh,
        replication_factor: 1,
        diverse_replicas: true,
        destinations: destinations
            .iter()
            .map(|d| DestinationSpec::parse(d).unwrap())
            .collect(),
        rules: Vec::new(),
        aggregation_rules: Vec::new(),
        c_relay: None,
    }
}

fn route(router: &Router, name: &str) -> Vec<u16> {
    let mut out = vec![99];
    router.route_into(name.as_bytes(), &mut out);
    out
}

#[test]
fn parse_destination_forms() {
    let d = DestinationSpec::parse(" 127.0.0.1:2104:a ").unwrap();
    assert_eq!(
        (d.host.as_str(), d.port, d.instance.as_deref()),
        ("127.0.0.1", 2104, Some("a"))
    );
    let d = DestinationSpec::parse("carbon1:2004").unwrap();
    assert_eq!(
        (d.host.as_str(), d.port, d.instance),
        ("carbon1", 2004, None)
    );
    let d = DestinationSpec::parse("[2001:db8::5]:2004:e").unwrap();
    assert_eq!(
        (d.host.as_str(), d.port, d.instance.as_deref()),
        ("2001:db8::5", 2004, Some("e"))
    );
    let d = DestinationSpec::parse("[::1]:2004").unwrap();
    assert_eq!((d.host.as_str(), d.instance), ("::1", None));
    // carbon partitions once: the instance keeps later colons.
    let d = DestinationSpec::parse("h:1:a:b").unwrap();
    assert_eq!(d.instance.as_deref(), Some("a:b"));
}

#[test]
fn parse_destination_errors_name_the_text() {
    for bad in [
        "nocolon",
        ":2004",
        "h:port",
        "h:70000",
        "[::1]2004",
        "2001:db8::5:2004",
    ] {
        let err = DestinationSpec::parse(bad).unwrap_err();
        assert!(err.to_string().contains(bad), "{bad}: {err}");
    }
}

#[test]
fn destination_display_is_carbons_form() {
    for text in [
        "127.0.0.1:2104:a",
        "h:2004",
        "[2001:db8::5]:2004:e",
        "[::1]:2004",
    ] {
        assert_eq!(DestinationSpec::parse(text).unwrap().to_string(), text);
    }
}

#[test]
fn parse_list_splits_on_commas() {
    let list = DestinationSpec::parse_list("a:1:x, b:2 ,").unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[1].host, "b");
}

#[test]
fn router_rejects_bad_specs() {
    assert!(matches!(
        Router::new(spec(RelayMethod::ConsistentHashing, &[])),
        Err(RouterError::NoDestinations)
    ));
    // Port is not part of carbon's ring key.
    let err = Router::new(spec(RelayMethod::ConsistentHashing, &["h:1:a", "h:2:a"])).unwrap_err();
    assert!(matches!(err, RouterError::DuplicateDestination(_)));
    assert!(err.to_string().contains("h:2:a"), "{err}");
    let mut zero = spec(RelayMethod::FastHashing, &["h:1"]);
    zero.replication_factor = 0;
    assert!(matches!(
        Router::new(zero),
        Err(RouterError::ZeroReplicationFactor)
    ));
    assert!(matches!(
        Router::new(spec(RelayMethod::Rules, &["h:1"])),
        Err(RouterError::DefaultRuleCount(0))
    ));
}

#[test]
fn route_into_replaces_out() {
    let router = Router::new(spec(RelayMethod::ConsistentHashing, &["a:1", "b:1"])).unwrap();
    assert_eq!(route(&router, "foo.bar").len(), 1);
    assert_eq!(router.destinations().len(), 2);
}

#[test]
fn rules_router_routes_by_pattern() {
    let mut s = spec(RelayMethod::Rules, &["a:1", "b:1"]);
    s.rules = vec![
        RuleSpec {
            pattern: None,
            destinations: vec![0],
            continue_matching: false,
        },
        RuleSpec {
            pattern: Some(RuleSpec::compile("^carbon\\.").unwrap()),
            destinations: vec![1, 0],
            continue_matching: false,
        },
    ];
    let router = Router::new(s).unwrap();
    assert_eq!(route(&router, "carbon.agents.x"), vec![1, 0]);
    assert_eq!(route(&router, "servers.x"), vec![0]);
    assert!(router.ring().is_none());
}

#[test]
fn replication_factor_above_node_count_yields_each_node_once() {
    let mut s = spec(RelayMethod::ConsistentHashing, &["a:1", "b:1", "c:1"]);
    s.replication_factor = 5;
    s.diverse_replicas = false;
    let router = Router::new(s).unwrap();
    let mut got = route(&router, "x.y");
    got.sort_unstable();
    assert_eq!(got, vec![0, 1, 2]);
}

#[test]
fn router_is_shareable_and_cache_movable_between_tasks() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Router>();
    send::<RouteCache>();
}
