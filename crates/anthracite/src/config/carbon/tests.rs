use super::*;

fn import(conf: &str) -> Result<CarbonImport, ConfigError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("carbon.conf");
    std::fs::write(&path, conf).expect("write carbon.conf");
    load(&CarbonOptions::new(&path))
}

fn import_with(
    conf: &str,
    files: &[(&str, &str)],
    instance: &str,
) -> Result<CarbonImport, ConfigError> {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write file");
    }
    let path = dir.path().join("carbon.conf");
    std::fs::write(&path, conf).expect("write carbon.conf");
    let mut o = CarbonOptions::new(&path);
    o.instance = instance.into();
    load(&o)
}

#[test]
fn carbon_defaults_apply_when_keys_are_absent() {
    let c = import("[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = 127.0.0.1:2004\n")
        .expect("imports");
    let cfg = &c.config;
    assert_eq!(cfg.listen.line_tcp, "0.0.0.0:2003".parse().ok());
    assert_eq!(cfg.listen.pickle_tcp, "0.0.0.0:2004".parse().ok());
    assert_eq!(cfg.listen.line_udp, None);
    assert_eq!(cfg.listen.max_pickle_frame, 1 << 20);
    assert_eq!(cfg.destinations[0].queue.max_datapoints, 1000);
    assert_eq!(cfg.destinations[0].max_datapoints_per_message, 500);
    assert_eq!(
        cfg.telemetry.interval,
        Some(std::time::Duration::from_secs(60))
    );
    assert_eq!(cfg.telemetry.prefix, "carbon");
    assert_eq!(cfg.telemetry.instance, "a");
    assert!(cfg.router.diverse_replicas);
    assert_eq!(cfg.router.hash_type, HashType::CarbonCh);
    assert_eq!(cfg.ingest.lists, None);
    // carbon's default USE_FLOW_CONTROL = True is back-pressure: the block policy.
    assert_eq!(
        cfg.destinations[0].queue.when_full,
        crate::queue::WhenFull::Block
    );
    let off = import("[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = 127.0.0.1:2004\nUSE_FLOW_CONTROL = False\n")
        .expect("imports");
    assert_eq!(
        off.config.destinations[0].queue.when_full,
        crate::queue::WhenFull::DropNewest
    );
}

#[test]
fn instance_section_overrides_relay_and_default_feeds_both() {
    let conf = "[DEFAULT]\nCARBON_METRIC_PREFIX = dflt\n[relay]\nRELAY_METHOD = consistent-hashing\nline_receiver_port = 2013\nDESTINATIONS = 127.0.0.1:2104:a, [::1]:2204:b\nENABLE_UDP_LISTENER = yes\nUDP_RECEIVER_INTERFACE = ::\nMAX_QUEUE_SIZE = inf\nCARBON_METRIC_INTERVAL = 0\nUSE_FLOW_CONTROL = off\n[relay:b]\nLINE_RECEIVER_PORT = 2113\nPICKLE_RECEIVER_PORT = 0\nMIN_TIMESTAMP_RESOLUTION = 10\nBOGUS_KEY = 1\nLOG_UPDATES = False\n";
    let c = import_with(conf, &[], "b").expect("imports");
    let cfg = &c.config;
    assert_eq!(cfg.listen.line_tcp, "0.0.0.0:2113".parse().ok());
    assert_eq!(cfg.listen.pickle_tcp, None, "port 0 disables, as in carbon");
    assert_eq!(cfg.listen.line_udp, "[::]:2003".parse().ok());
    assert_eq!(cfg.destinations[1].spec.host, "::1");
    assert_eq!(
        cfg.destinations[0].queue.max_datapoints, 1_000_000_000,
        "inf: the largest value allowed"
    );
    assert_eq!(cfg.telemetry.interval, None);
    assert_eq!(cfg.telemetry.prefix, "dflt");
    assert_eq!(cfg.telemetry.instance, "b");
    assert_eq!(cfg.ingest.min_timestamp_resolution, 10);
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("BOGUS_KEY") && w.contains("not a carbon"))
    );
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("LOG_UPDATES") && w.contains("not implemented"))
    );
    assert!(
        !c.warnings.iter().any(|w| w.contains("USE_FLOW_CONTROL")),
        "{:?}",
        c.warnings
    );
    let a = import_with(conf, &[], "a").expect("instance a");
    assert_eq!(a.config.listen.line_tcp, "0.0.0.0:2013".parse().ok());
}

#[test]
fn bad_values_and_duplicates_name_key_and_file() {
    for (conf, key) in [
        (
            "[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = 127.0.0.1:2104:a, 127.0.0.1:2204:a\n",
            "DESTINATIONS",
        ),
        (
            "[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = h:1\nDIVERSE_REPLICAS = maybe\n",
            "DIVERSE_REPLICAS",
        ),
        (
            "[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = h:1\nLINE_RECEIVER_PORT = x\n",
            "LINE_RECEIVER_PORT",
        ),
        (
            "[relay]\nRELAY_METHOD = hashing\nDESTINATIONS = h:1\n",
            "RELAY_METHOD",
        ),
        (
            "[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = h:1\nDESTINATION_PROTOCOL = amqp\n",
            "DESTINATION_PROTOCOL",
        ),
        (
            "[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = h:1\nCARBON_METRIC_PREFIX = 50%\n",
            "carbon_metric_prefix",
        ),
    ] {
        let err = import(conf).expect_err(key).to_string();
        assert!(err.contains(key), "{key}: {err}");
        assert!(err.contains("carbon.conf"), "{key}: {err}");
    }
}

#[test]
fn fast_methods_default_to_mmh3_like_carbon() {
    let c = import("[relay]\nRELAY_METHOD = fast-hashing\nDESTINATIONS = h:1:a\n").expect("fast");
    assert_eq!(c.config.router.hash_type, HashType::Mmh3Ch);
    let c = import(
        "[relay]\nRELAY_METHOD = fast-hashing\nROUTER_HASH_TYPE = fnv1a_ch\nDESTINATIONS = h:1:a\n",
    )
    .expect("fast fnv");
    assert_eq!(c.config.router.hash_type, HashType::Fnv1aCh);
}

const RULES_CONF: &str = "[relay]\nDESTINATIONS = 127.0.0.1:2104:a, 127.0.0.1:2204:b\n";

#[test]
fn relay_rules_in_file_order_default_last() {
    let rules = "[default]\ndefault = true\ndestinations = 127.0.0.1:2104:a\n\n[cpu]\npattern = ^CPU\\.\ndestinations = 127.0.0.1:2204:b, 10.0.0.9:2004:z\ncontinue = yes\n\n[mem]\npattern = mem\ndestinations = 127.0.0.1:2104:a\n[off]\ndefault = false\ndestinations = 127.0.0.1:2104:a\n";
    let c = import_with(RULES_CONF, &[("relay-rules.conf", rules)], "a").expect("rules");
    let r = &c.config.router.rules;
    assert_eq!(r.len(), 3);
    let pattern = |i: usize| r[i].pattern.as_ref().map(|p| p.as_str().to_string());
    assert_eq!(pattern(0).as_deref(), Some("^CPU\\."));
    assert!(r[0].continue_matching);
    assert_eq!(r[0].destinations, vec![1], "unknown destination skipped");
    assert_eq!(pattern(1).as_deref(), Some("mem"));
    assert_eq!(pattern(2), None);
    assert!(c.warnings.iter().any(|w| w.contains("10.0.0.9:2004:z")));
    let router = crate::router::Router::new(c.config.router.clone()).expect("router");
    let mut out = Vec::new();
    router.route_into(b"cpu.mem.x", &mut out);
    assert_eq!(out, vec![1, 0]);
}

#[test]
fn relay_rules_errors_name_file_and_section() {
    for (rules, needle) in [
        ("[x]\npattern = a\n", "destinations"),
        (
            "[x]\npattern = a\ndestinations = 127.0.0.1:2104:a\n",
            "default",
        ),
        (
            "[x]\npattern = a\ndefault = true\ndestinations = 127.0.0.1:2104:a\n",
            "[x] pattern",
        ),
        (
            "[x]\ndefault = true\ndestinations = 127.0.0.1:2104:a\n[y]\ndefault = 1\ndestinations = 127.0.0.1:2104:a\n",
            "[y] default",
        ),
        (
            "[x]\npattern = (a\ndestinations = 127.0.0.1:2104:a\n[d]\ndefault = true\ndestinations = 127.0.0.1:2104:a\n",
            "[x] pattern",
        ),
        (
            "[x]\npattern = a\ncontinue = perhaps\ndestinations = 127.0.0.1:2104:a\n[d]\ndefault = true\ndestinations = 127.0.0.1:2104:a\n",
            "[x] continue",
        ),
    ] {
        let err = import_with(RULES_CONF, &[("relay-rules.conf", rules)], "a")
            .expect_err(needle)
            .to_string();
        assert!(err.contains("relay-rules.conf"), "{needle}: {err}");
        assert!(err.contains(needle), "{needle}: {err}");
    }
    let nowhere = import_with(
        RULES_CONF,
        &[(
            "relay-rules.conf",
            "[d]\ndefault = true\ndestinations = 10.1.1.1:1:q\n",
        )],
        "a",
    )
    .expect("carbon starts with a rule that sends nowhere");
    assert!(
        nowhere
            .warnings
            .iter()
            .any(|w| w.contains("[d] destinations") && w.contains("nowhere"))
    );
    let err = import_with(RULES_CONF, &[], "a")
        .expect_err("missing file")
        .to_string();
    assert!(err.contains("relay-rules.conf"), "{err}");
}

#[test]
fn aggregation_rules_feed_the_aggregated_router() {
    let conf = "[relay]\nRELAY_METHOD = aggregated-consistent-hashing\nDESTINATIONS = 127.0.0.1:2104:a, 127.0.0.1:2204:b, 127.0.0.1:2304:c\nREPLICATION_FACTOR = 1\n";
    let agg = "# comment\n\n<env>.all.cpu (60) = sum <env>.*.cpu\n";
    let c = import_with(conf, &[("aggregation-rules.conf", agg)], "a").expect("aggregated");
    assert_eq!(c.config.router.aggregation_rules.len(), 1);
    let router = crate::router::Router::new(c.config.router.clone()).expect("router");
    let mut by_agg = Vec::new();
    let mut direct = Vec::new();
    router.route_into(b"prod.host7.cpu", &mut by_agg);
    let plain = crate::router::Router::new(crate::router::RouterSpec {
        method: RelayMethod::ConsistentHashing,
        ..c.config.router.clone()
    })
    .expect("plain");
    plain.route_into(b"prod.all.cpu", &mut direct);
    assert_eq!(by_agg, direct, "routed by its aggregate name");
    let mut raw_name = Vec::new();
    let mut expect = Vec::new();
    router.route_into(b"other.metric", &mut raw_name);
    plain.route_into(b"other.metric", &mut expect);
    assert_eq!(raw_name, expect, "no rule matches: routed by its own name");

    // carbon-relay: a TypeError rule takes no part; a KeyError one drops the datapoint, even
    // when a rule before it resolved the name.
    let agg = "<env>.all.cpu (60) = sum <env>.*.cpu\n\
               x.%d (60) = sum <env>.*.cpu\n\
               <env>.<nope> (60) = sum <env>.*.mem\n";
    let c = import_with(conf, &[("aggregation-rules.conf", agg)], "a").expect("carbon starts");
    let router = crate::router::Router::new(c.config.router.clone()).expect("router");
    let mut typed = Vec::new();
    router.route_into(b"prod.host7.cpu", &mut typed);
    assert_eq!(typed, by_agg, "the TypeError rule takes no part");
    let mut dropped = Vec::new();
    router.route_into(b"prod.host7.mem", &mut dropped);
    assert_eq!(
        dropped,
        Vec::<u16>::new(),
        "no destination: carbon-relay drops it"
    );

    let err = import_with(
        conf,
        &[("aggregation-rules.conf", "x (1) = median y\n")],
        "a",
    )
    .expect_err("bad method")
    .to_string();
    assert!(
        err.contains("aggregation-rules.conf") && err.contains("line 1"),
        "{err}"
    );
    let missing = import_with(conf, &[], "a").expect("missing file is carbon's empty rules");
    assert!(
        missing
            .warnings
            .iter()
            .any(|w| w.contains("aggregation-rules.conf"))
    );
}

#[test]
fn whitelist_paths_come_from_the_conf_dir() {
    let c = import(
        "[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = h:1\nUSE_WHITELIST = true\n",
    )
    .expect("imports");
    let lists = c.config.ingest.lists.expect("lists on");
    assert!(
        lists
            .whitelist
            .expect("whitelist")
            .ends_with("whitelist.conf")
    );
    assert!(
        lists
            .blacklist
            .expect("blacklist")
            .ends_with("blacklist.conf")
    );
}

/// `METRIC_CLIENT_IDLE_TIMEOUT = inf` panicked converting infinity to a duration
/// (exit 101 in `check` and `run`); it is a configuration error naming the setting.
#[test]
fn idle_timeout_inf_is_a_config_error() {
    let base = "[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = 127.0.0.1:2004\n";
    for value in ["inf", "nan", "-5", "1e20"] {
        let err = import(&format!("{base}METRIC_CLIENT_IDLE_TIMEOUT = {value}\n"))
            .expect_err(value)
            .to_string();
        assert!(
            err.contains("[relay] METRIC_CLIENT_IDLE_TIMEOUT") && err.contains("carbon.conf"),
            "{value}: {err}"
        );
    }
    let c = import(&format!("{base}METRIC_CLIENT_IDLE_TIMEOUT = None\n")).expect("None = never");
    assert_eq!(c.config.listen.idle_timeout, None);
}

/// `MAX_QUEUE_SIZE = 1e99` was accepted silently; out-of-range values name the
/// carbon setting, `inf` is the largest queue allowed.
#[test]
fn max_queue_size_out_of_range_is_a_config_error() {
    let base = "[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = 127.0.0.1:2004\n";
    for (key, value) in [
        ("MAX_QUEUE_SIZE", "1e99"),
        ("MAX_QUEUE_SIZE", "0"),
        ("MAX_RECEIVER_CONNECTIONS", "1e99"),
        ("MAX_DATAPOINTS_PER_MESSAGE", "0"),
        ("CARBON_METRIC_INTERVAL", "inf"),
        ("REPLICATION_FACTOR", "0"),
        ("DESTINATIONS", "127.0.0.1:0:a"),
        ("DESTINATIONS", "127.0.0.1:2104:"),
    ] {
        let conf = if key == "DESTINATIONS" {
            format!("[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = {value}\n")
        } else {
            format!("{base}{key} = {value}\n")
        };
        let err = import(&conf).expect_err(value).to_string();
        assert!(err.contains(key), "{key} = {value}: {err}");
    }
    let c = import(&format!(
        "{base}MAX_QUEUE_SIZE = inf\nMAX_RECEIVER_CONNECTIONS = inf\n"
    ))
    .expect("inf");
    assert_eq!(c.config.destinations[0].queue.max_datapoints, 1_000_000_000);
    assert_eq!(c.config.listen.max_connections, 1_000_000);
}

#[test]
fn drop_in_destination_and_receiver_keys_are_honoured_without_warnings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("ca.pem");
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
    std::fs::write(&ca, cert.cert.pem()).expect("write ca");
    let c = import(&format!(
        "[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = h:1:a, h:1:b\n\
         DESTINATION_PROTOCOL = protobuf\nDESTINATION_TRANSPORT = ssl\nDESTINATION_SSL_CA = {}\n\
         DESTINATION_POOL_REPLICAS = True\n\
         PROTOBUF_RECEIVER_INTERFACE = 127.0.0.1\nPROTOBUF_RECEIVER_PORT = 2005\n",
        ca.display()
    ))
    .expect("imports");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let cfg = &c.config;
    assert_eq!(cfg.listen.protobuf_tcp, "127.0.0.1:2005".parse().ok());
    assert!(cfg.pool_replicas);
    let d = &cfg.destinations[0];
    assert_eq!(d.protocol, crate::destination::OutputProtocol::Protobuf);
    let tls = d.tls.as_ref().expect("tls");
    assert_eq!(tls.settings().ca_file.as_deref(), Some(ca.as_path()));
    assert_eq!(
        tls.settings().server_name,
        None,
        "checked against each host, as carbon"
    );

    let c = import("[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = h:1\nDESTINATION_PROTOCOL = udp\n")
        .expect("udp");
    assert_eq!(
        c.config.destinations[0].protocol,
        crate::destination::OutputProtocol::Udp
    );
    assert!(
        c.warnings.iter().any(|w| w.contains("no UDP client")),
        "{:?}",
        c.warnings
    );
    let off = import("[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = h:1\n")
        .expect("defaults");
    assert_eq!(off.config.listen.protobuf_tcp, None);
    assert!(off.config.destinations[0].tls.is_none());
    assert!(!off.config.pool_replicas);
    let err = import("[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = h:1\nDESTINATION_TRANSPORT = ssl\nDESTINATION_SSL_CA = /nonexistent/ca.pem\n")
        .expect_err("missing CA file");
    assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
}

#[test]
fn relay_rule_with_python_look_ahead_loads_and_a_broken_one_names_file_and_section() {
    let c = import_with(
        "[relay]\nDESTINATIONS = h:1:a, h:2:b\n",
        &[(
            "relay-rules.conf",
            "[not-db]\npattern = ^servers\\.(?!db)\ndestinations = h:1:a\n[default]\ndefault = true\ndestinations = h:2:b\n",
        )],
        "a",
    )
    .expect("look-ahead accepted");
    assert_eq!(c.config.router.rules.len(), 2);
    let err = import_with(
        "[relay]\nDESTINATIONS = h:1:a\n",
        &[(
            "relay-rules.conf",
            "[bad]\npattern = (?<=a+)b(\ndestinations = h:1:a\n[default]\ndefault = true\ndestinations = h:1:a\n",
        )],
        "a",
    )
    .expect_err("neither engine accepts it")
    .to_string();
    assert!(
        err.contains("relay-rules.conf") && err.contains("[bad] pattern"),
        "{err}"
    );
}

#[test]
fn the_aggregator_keeps_its_state_under_storage_dir() {
    let root = tempfile::tempdir().expect("tempdir");
    let conf_dir = root.path().join("conf");
    std::fs::create_dir_all(&conf_dir).expect("conf dir");
    std::fs::write(
        conf_dir.join("aggregation-rules.conf"),
        "o (60) = sum i.*\n",
    )
    .expect("rules");
    let path = conf_dir.join("carbon.conf");
    let state_dir = |conf: &str, instance: &str| {
        std::fs::write(&path, conf).expect("write carbon.conf");
        let mut o = CarbonOptions::new(&path);
        o.aggregator = true;
        o.instance = instance.into();
        let c = load(&o).expect("imports");
        let warned = c.warnings.iter().any(|w| w.contains("STORAGE_DIR"));
        let a = c.config.aggregation.expect("aggregation");
        (a.state_dir, a.checkpoint_interval.is_some(), warned)
    };
    // The standard layout: <root>/conf/carbon.conf → <root>/storage.
    let conf = "[aggregator]\nDESTINATIONS = 127.0.0.1:2004\n";
    assert_eq!(
        state_dir(conf, "a"),
        (
            Some(root.path().join("storage").join("anthracite-aggregator-a")),
            true,
            false
        )
    );
    let conf = "[aggregator]\nDESTINATIONS = 127.0.0.1:2004\nSTORAGE_DIR = /var/lib/graphite\n";
    assert_eq!(
        state_dir(conf, "b"),
        (
            Some(std::path::PathBuf::from(
                "/var/lib/graphite/anthracite-aggregator-b"
            )),
            true,
            false
        )
    );
}

#[test]
fn storage_dir_follows_carbons_precedence() {
    let conf = Path::new("/opt/graphite/conf");
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    let none = env(&[]);
    assert_eq!(
        storage_dir(None, conf, &none),
        Path::new("/opt/graphite/storage")
    );
    let root = env(&[("GRAPHITE_ROOT", "/srv/g")]);
    assert_eq!(storage_dir(None, conf, &root), Path::new("/srv/g/storage"));
    let both = env(&[
        ("GRAPHITE_ROOT", "/srv/g"),
        ("GRAPHITE_STORAGE_DIR", "/data"),
    ]);
    assert_eq!(storage_dir(None, conf, &both), Path::new("/data"));
    assert_eq!(storage_dir(Some("/set"), conf, &both), Path::new("/set"));
    // carbon's "None" and an empty value are unset.
    assert_eq!(
        storage_dir(Some("None"), conf, &root),
        Path::new("/srv/g/storage")
    );
    assert_eq!(
        storage_dir(Some(""), conf, &root),
        Path::new("/srv/g/storage")
    );
}

/// carbon-aggregator and carbon-relay start on any output template; so does the import, with
/// a warning naming the file, the line and what carbon does with the rule.
#[test]
fn rules_carbon_starts_on_are_imported_with_warnings() {
    let root = tempfile::tempdir().expect("tempdir");
    let rules = root.path().join("aggregation-rules.conf");
    std::fs::write(
        &rules,
        "# carbon starts on every line of this file\n\
         apps.<team>.<<path>>.rollup (60) = avg apps.<team>.<<path>>.*.count\n\
         apps.<team>.all (60) = sum apps.<team>.<<path>>.*.count\n\
         \n\
         b.<zone>.sum (60) = sum b.<host>.*\n\
         c.100% (60) = sum c.*\n\
         d.%d (60) = sum d.*\n",
    )
    .expect("rules");
    let path = root.path().join("carbon.conf");
    for (section, aggregator) in [
        ("[aggregator]\n", true),
        (
            "[relay]\nRELAY_METHOD = aggregated-consistent-hashing\n",
            false,
        ),
    ] {
        std::fs::write(&path, format!("{section}DESTINATIONS = 127.0.0.1:2004\n"))
            .expect("write carbon.conf");
        let mut o = CarbonOptions::new(&path);
        o.aggregator = aggregator;
        let c = load(&o).expect("carbon starts on it: so does anthracite");
        let rule_warnings: Vec<&String> = c
            .warnings
            .iter()
            .filter(|w| w.contains("aggregation-rules.conf: line"))
            .collect();
        let at = |line: usize, what: &str| {
            let needle = format!("aggregation-rules.conf: line {line}: ");
            assert!(
                rule_warnings
                    .iter()
                    .any(|w| w.contains(&needle) && w.contains(what)),
                "{section}: no warning for line {line} ({what}) in {rule_warnings:#?}"
            );
        };
        at(2, "KeyError ('%(path)s')");
        at(5, "KeyError ('zone')");
        at(6, "ValueError (incomplete format)");
        at(7, "TypeError");
        assert_eq!(rule_warnings.len(), 4, "{rule_warnings:#?}");
        let effect = if aggregator {
            "the datapoint stops at this rule"
        } else {
            "carbon-relay drops those datapoints"
        };
        assert!(rule_warnings[0].contains(effect), "{}", rule_warnings[0]);
    }
}
