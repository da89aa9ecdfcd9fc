//! Each default in one place: the code. What the documentation shows is checked against what
//! `anthracite check` resolves: here the tables of docs/configuration.md (every default shown
//! as a value, every key of the schema has a row, every range holds at its bounds); in
//! `example` relay.toml.example, in `schema` the doc comments of the `relay.toml` schema.
//!
//! What the code resolves comes from `anthracite check` on two probe configurations that hold
//! every section (`[[rules]]` needs a method of its own) and only the keys a section requires.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use regex::Regex;
use toml::{Table, Value};

use crate::blocks::check_config;
use crate::markdown::{code_spans, tables};
use crate::root;

/// Keys the reference documents that `anthracite check` leaves out while they hold their
/// default (the schema skips them when unset or empty), so their defaults are stated in words.
/// Each is held to being absent from the resolved configuration: an entry goes when the code
/// starts printing it.
const OMITTED: &[&str] = &[
    "listen.tls.cert_file",
    "listen.tls.key_file",
    "listen.tls.client_ca",
    "router.aggregation_rules",
    "destinations.tls.ca_file",
    "destinations.tls.server_name",
    "destinations.tls.client_cert",
    "destinations.tls.client_key",
    "destinations.queue.when_full",
    "destinations.servers.compression",
    "destinations.servers.when_full",
    "destinations.servers.spill_fallback",
    "destinations.servers.max_queue_datapoints",
    "destinations.servers.max_queue_bytes",
    "destinations.servers.spill_max_bytes",
    "destinations.servers.replay_rate",
    "destinations.servers.stream",
    "destinations.servers.region",
    "destinations.servers.endpoint_url",
    "kinesis.initial_timestamp",
    "kinesis.lease_duration_secs",
    "kafka.initial_timestamp",
];

/// Optional tables the schema has (absent: off).
pub(crate) const OPTIONAL_TABLES: &[&str] = &["listen.tls", "destinations.tls"];

/// Keys the probes set (what a section requires to validate): resolved, but not defaults.
pub(crate) const PROBED: &[&str] = &[
    "destinations.servers",
    "destinations.servers.address",
    "destinations.servers.protocol",
    "destinations.servers.kafka.topic",
    "rules.pattern",
    "rules.destinations",
    "kinesis.stream",
    "kinesis.checkpoint_dir",
    "kafka.brokers",
    "kafka.topics",
];

/// Sections that are arrays of tables; the first entry stands for all.
const ARRAYS: &[&str] = &["rules", "kinesis", "kafka"];

/// Every section, and the keys a section requires.
const PROBE_ALL: &str = r#"
[destinations]
servers = ["127.0.0.1:2104:a", { address = "127.0.0.1:9092:k", protocol = "kafka", kafka = { topic = "t" } }]
[aggregation]
[rewrite]
[[kinesis]]
stream = "s"
checkpoint_dir = "/var/lib/anthracite/kinesis"
[[kafka]]
brokers = ["127.0.0.1:9092"]
topics = ["t"]
"#;

/// `[[rules]]`, whose first rule is not the default one.
const PROBE_RULES: &str = r#"
[router]
method = "rules"
[destinations]
servers = ["127.0.0.1:2104:a"]
[[rules]]
pattern = "^a"
destinations = ["127.0.0.1:2104:a"]
[[rules]]
default = true
destinations = ["127.0.0.1:2104:a"]
"#;

/// What the code resolves: values by dotted key (the first entry of an array of tables), and
/// every key and table that exists.
pub(crate) struct Resolved {
    pub(crate) leaves: BTreeMap<String, Value>,
    pub(crate) paths: BTreeSet<String>,
}

impl Resolved {
    pub(crate) fn known(&self, key: &str) -> bool {
        self.paths.contains(key) || OMITTED.contains(&key) || OPTIONAL_TABLES.contains(&key)
    }
}

pub(crate) fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Flattens a configuration: every leaf with its dotted key (all entries of an array of
/// tables when `every_entry`, else the first), and every path.
pub(crate) fn flatten(
    prefix: &str,
    value: &Value,
    every_entry: bool,
    leaves: &mut Vec<(String, Value)>,
    paths: &mut BTreeSet<String>,
) {
    match value {
        Value::Table(t) if t.is_empty() => {
            paths.insert(prefix.to_owned());
            leaves.push((prefix.to_owned(), value.clone()));
        }
        Value::Table(t) => {
            if !prefix.is_empty() {
                paths.insert(prefix.to_owned());
            }
            for (k, v) in t {
                flatten(&join(prefix, k), v, every_entry, leaves, paths);
            }
        }
        Value::Array(a) if ARRAYS.contains(&prefix) => {
            let entries = a.iter().filter(|v| v.is_table());
            for (i, entry) in entries.enumerate() {
                if i == 0 || every_entry {
                    flatten(prefix, entry, every_entry, leaves, paths);
                }
            }
        }
        Value::Array(a) => {
            paths.insert(prefix.to_owned());
            leaves.push((prefix.to_owned(), value.clone()));
            // A server list mixes strings and tables: the tables' keys are keys too.
            let entries = a.iter().filter(|v| v.is_table());
            for (i, entry) in entries.enumerate() {
                if i == 0 || every_entry {
                    flatten(prefix, entry, every_entry, leaves, paths);
                }
            }
        }
        _ => {
            paths.insert(prefix.to_owned());
            leaves.push((prefix.to_owned(), value.clone()));
        }
    }
}

/// `anthracite check` on a probe: the resolved configuration as TOML.
fn resolve(probe: &str) -> Table {
    let parsed: Table = toml::from_str(probe).expect("a probe is TOML");
    let out = check_config(parsed, "a probe configuration").unwrap_or_else(|e| panic!("{e}"));
    toml::from_str(&out)
        .unwrap_or_else(|e| panic!("`anthracite check` printed no TOML: {e}\n{out}"))
}

/// What the code resolves, once per test run.
pub(crate) fn resolved() -> &'static Resolved {
    static RESOLVED: OnceLock<Resolved> = OnceLock::new();
    RESOLVED.get_or_init(|| {
        let mut leaves = BTreeMap::new();
        let mut paths = BTreeSet::new();
        for probe in [PROBE_ALL, PROBE_RULES] {
            let mut found = Vec::new();
            flatten(
                "",
                &Value::Table(resolve(probe)),
                false,
                &mut found,
                &mut paths,
            );
            for (k, v) in found {
                leaves.entry(k).or_insert(v);
            }
        }
        Resolved { leaves, paths }
    })
}

/// Two values that are the same setting: numbers by value (`600` is `600.0`).
pub(crate) fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Integer(x), Value::Float(y)) | (Value::Float(y), Value::Integer(x)) => {
            (*x as f64) == *y
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Table(x), Value::Table(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// A TOML value written alone (`"0.0.0.0:2003"`, `600`, `[]`).
fn toml_value(text: &str) -> Option<Value> {
    toml::from_str::<Table>(&format!("v = {text}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
}

/// One row of a reference table.
struct Row {
    line: usize,
    key: String,
    default: String,
    range: String,
}

/// The reference tables of docs/configuration.md: a table whose header is
/// `key | default | range | …`, keys relative to the first code span of its heading
/// (`` `[listen]` `` → `listen.`).
fn reference() -> Vec<Row> {
    let text = std::fs::read_to_string(root().join("docs/configuration.md"))
        .expect("docs/configuration.md");
    let mut rows = Vec::new();
    for table in tables(&text) {
        let header: Vec<&str> = table.header.iter().map(String::as_str).collect();
        if header.get(..3) != Some(&["key", "default", "range"][..]) {
            continue;
        }
        let section = code_spans(&table.heading)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("the heading {:?} names its section", table.heading));
        let section = section.trim_matches(['[', ']']).to_owned();
        for (line, cells) in table.rows {
            let key = code_spans(&cells[0])
                .into_iter()
                .next()
                .unwrap_or_else(|| panic!("docs/configuration.md:{line}: a key in code"));
            rows.push(Row {
                line,
                key: join(&section, &key),
                default: cells.get(1).cloned().unwrap_or_default(),
                range: cells.get(2).cloned().unwrap_or_default(),
            });
        }
    }
    rows
}

#[test]
fn the_reference_shows_the_defaults_the_code_resolves() {
    let r = resolved();
    let rows = reference();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    let mut compared = 0;
    for row in &rows {
        let at = format!("docs/configuration.md:{}: {}", row.line, row.key);
        if !seen.insert(row.key.clone()) {
            problems.push(format!("{at}: a second row for the key"));
        }
        if !r.known(&row.key) {
            problems.push(format!("{at}: the schema has no such key"));
            continue;
        }
        let Some(value) = r.leaves.get(&row.key) else {
            continue;
        };
        if PROBED.contains(&row.key.as_str()) {
            continue;
        }
        let shown = row
            .default
            .starts_with('`')
            .then(|| code_spans(&row.default).into_iter().next())
            .flatten()
            .and_then(|s| toml_value(&s));
        match shown {
            Some(shown) if same(&shown, value) => compared += 1,
            Some(shown) => problems.push(format!(
                "{at}: the default shown is {shown}, the code resolves {value}"
            )),
            None => problems.push(format!(
                "{at}: the default is not shown as a TOML value in code ({:?}); the code resolves {value}",
                row.default
            )),
        }
    }
    for key in r.leaves.keys() {
        if !seen.contains(key) {
            problems.push(format!(
                "{key}: resolved by the code, missing from docs/configuration.md"
            ));
        }
    }
    for key in OMITTED {
        if r.paths.contains(*key) {
            problems.push(format!(
                "{key}: `anthracite check` prints it now: take it out of OMITTED and show its default"
            ));
        }
        if !seen.contains(*key) {
            problems.push(format!("{key}: missing from docs/configuration.md"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(compared >= 90, "only {compared} defaults compared");
}

/// The bounds a range cell states: `1 – 1,000,000`, `0 (off), or 100 – 3,600,000`,
/// `64 – 4 GiB − 1`, `at least 200`. A bound given by another key is `None`.
#[derive(Debug, PartialEq)]
struct Bounds {
    min: Option<f64>,
    max: Option<f64>,
    zero_off: bool,
}

fn number(text: &str) -> Option<f64> {
    let text = text.trim();
    let (text, minus_one) = match text
        .strip_suffix("− 1")
        .or_else(|| text.strip_suffix("- 1"))
    {
        Some(t) => (t.trim(), 1.0),
        None => (text, 0.0),
    };
    let re = Regex::new(r"^([0-9][0-9,]*(?:\.[0-9]+)?)\s*(KiB|MiB|GiB|TiB|PiB)?$").expect("regex");
    let c = re.captures(text)?;
    let n: f64 = c[1].replace(',', "").parse().ok()?;
    let unit = match c.get(2).map(|m| m.as_str()) {
        Some("KiB") => 1024f64,
        Some("MiB") => 1024f64.powi(2),
        Some("GiB") => 1024f64.powi(3),
        Some("TiB") => 1024f64.powi(4),
        Some("PiB") => 1024f64.powi(5),
        _ => 1.0,
    };
    Some(n * unit - minus_one)
}

fn bounds(cell: &str) -> Option<Bounds> {
    let plain = Regex::new(r"\([^)]*\)")
        .expect("regex")
        .replace_all(cell, "");
    let alternatives: Vec<&str> = plain
        .split(", or ")
        .flat_map(|a| a.split(" or "))
        .map(str::trim)
        .collect();
    let zero_off = alternatives.contains(&"0");
    let last = alternatives.last()?;
    let (min, max) = if let Some(n) = last.strip_prefix("at least ") {
        (number(n), None)
    } else {
        let (a, b) = last.split_once(" – ")?;
        (number(a), number(b))
    };
    (min.is_some() || max.is_some()).then_some(Bounds { min, max, zero_off })
}

/// Sets a dotted key in a configuration (in the first entry of an array of tables).
pub(crate) fn set(config: &mut Table, key: &str, value: Value) {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().expect("a key");
    let mut table = config;
    for part in parts {
        let next = table
            .entry(part)
            .or_insert_with(|| Value::Table(Table::new()));
        table = match next {
            Value::Array(a) => a
                .iter_mut()
                .find_map(Value::as_table_mut)
                .expect("an entry to set the key in"),
            Value::Table(t) => t,
            other => panic!("{key}: {other} is not a table"),
        };
    }
    table.insert(last.to_owned(), value);
}

/// Ranges that depend on other keys are tested with those keys at their widest.
const WIDEST: &[(&str, i64)] = &[
    ("listen.max_frame_buffer_bytes", 64 << 30),
    ("destinations.backoff_max_ms", 3_600_000),
    ("destinations.spill.max_bytes", 1 << 50),
    ("kinesis.backoff_max_ms", 3_600_000),
    ("kinesis.poll_idle_ms", 3_600_000),
];

/// Whether `anthracite check` takes `key = value`; when it refuses, its message must name the
/// key.
fn accepts(key: &str, value: Value) -> Result<bool, String> {
    let mut config: Table = toml::from_str(PROBE_ALL).expect("the probe is TOML");
    set(
        &mut config,
        "destinations.spill.dir",
        Value::String("spill".into()),
    );
    for (k, v) in WIDEST {
        if *k != key {
            set(&mut config, k, Value::Integer(*v));
        }
    }
    let shown = value.to_string();
    set(&mut config, key, value);
    match check_config(config, &format!("{key} = {shown}")) {
        Ok(_) => Ok(true),
        Err(e) => {
            let leaf = key.rsplit('.').next().unwrap_or(key);
            if e.contains(leaf) {
                Ok(false)
            } else {
                Err(format!(
                    "{key} = {shown} was refused for another reason:\n{e}"
                ))
            }
        }
    }
}

#[test]
fn the_ranges_in_the_reference_hold_at_their_bounds() {
    let r = resolved();
    let mut problems = Vec::new();
    let mut tested = 0;
    for row in reference() {
        let (Some(b), Some(default)) = (bounds(&row.range), r.leaves.get(&row.key)) else {
            continue;
        };
        let at = format!(
            "docs/configuration.md:{}: {} ({})",
            row.line, row.key, row.range
        );
        let int = default.is_integer();
        let value = |x: f64| {
            if int {
                Value::Integer(x as i64)
            } else {
                Value::Float(x)
            }
        };
        let mut probes = Vec::new();
        if let Some(min) = b.min {
            probes.push((min, true));
            let below = if int {
                min - 1.0
            } else if min > 0.0 {
                min / 2.0
            } else {
                -1.0
            };
            if below >= 0.0 || !int {
                probes.push((below, b.zero_off && below == 0.0));
            }
        }
        if b.zero_off {
            probes.push((0.0, true));
        }
        if let Some(max) = b.max {
            probes.push((max, true));
            probes.push((max + 1.0, false));
        }
        for (x, expected) in probes {
            match accepts(&row.key, value(x)) {
                Ok(got) if got == expected => {}
                Ok(got) => problems.push(format!(
                    "{at}: {} is {} by the code",
                    value(x),
                    if got { "accepted" } else { "refused" }
                )),
                Err(e) => problems.push(format!("{at}: {e}")),
            }
        }
        tested += 1;
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    assert!(tested >= 30, "only {tested} ranges tested");
}

#[test]
fn the_range_reader_reads_the_reference_forms() {
    let b = |min, max, zero_off| Some(Bounds { min, max, zero_off });
    assert_eq!(bounds("1 – 1,000,000"), b(Some(1.0), Some(1e6), false));
    assert_eq!(
        bounds("0 (off), or 100 – 3,600,000"),
        b(Some(100.0), Some(3.6e6), true)
    );
    assert_eq!(bounds("0 (off) – 7200"), b(Some(0.0), Some(7200.0), false));
    assert_eq!(
        bounds("4096 – 4 GiB − 1"),
        b(Some(4096.0), Some(4294967295.0), false)
    );
    assert_eq!(
        bounds("`backoff_min_ms` – 3,600,000"),
        b(None, Some(3.6e6), false)
    );
    assert_eq!(bounds("at least 200"), b(Some(200.0), None, false));
    assert_eq!(
        bounds("0 (never), or 0.001 – 31,536,000"),
        b(Some(0.001), Some(31536000.0), true)
    );
    assert_eq!(bounds("`IP:port`, or `\"\"`"), None);
    assert_eq!(bounds("a positive number"), None);
}

/// The `[limits]` of the overlay example in docs/migrating-c-relay.md are the defaults
/// `anthracite check` resolves on a carbon-c-relay configuration without an overlay, key for
/// key.
#[test]
fn the_c_relay_overlay_shows_the_limits_the_code_resolves() {
    let page = "docs/migrating-c-relay.md";
    let text = std::fs::read_to_string(root().join(page)).expect("read the migrating page");
    let fence = crate::markdown::fences(&text)
        .into_iter()
        .find(|f| f.info.iter().any(|w| w == "c-relay-overlay"))
        .unwrap_or_else(|| panic!("{page}: no c-relay-overlay block"));
    let overlay: Table = toml::from_str(&fence.body).expect("the overlay block is TOML");
    let shown: BTreeMap<String, String> = match overlay.get("limits") {
        Some(Value::Table(t)) => t.iter().map(|(k, v)| (k.clone(), v.to_string())).collect(),
        other => panic!("{page}:{}: no [limits] table: {other:?}", fence.line),
    };

    let out = check_c_relay("cluster a forward 127.0.0.1:2003;\nmatch * send to a;\n");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resolved: BTreeMap<String, String> = stdout
        .lines()
        .skip_while(|l| *l != "# overlay [limits]:")
        .skip(1)
        .map_while(|l| l.strip_prefix("#   "))
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    assert!(!resolved.is_empty(), "check printed no limits:\n{stdout}");
    assert_eq!(
        shown, resolved,
        "{page}:{}: [limits] against the code",
        fence.line
    );
}

#[test]
fn the_expression_size_bound_in_the_c_relay_page_is_the_one_check_enforces() {
    let page = "docs/migrating-c-relay.md";
    let text = std::fs::read_to_string(root().join(page)).expect("read the migrating page");
    let out =
        check_c_relay("cluster a forward 127.0.0.1:2003;\nmatch ((a{40}){40}){40} send to a;\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the expression was accepted");
    let bound: u64 = stderr
        .split_once("more than ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no bound in check's error: {stderr}"));
    // The page writes it with thousands separators.
    let digits = bound.to_string();
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let shown = format!("more than {grouped} copies of its parts");
    assert!(text.contains(&shown), "{page} does not say `{shown}`");
}

/// `anthracite check` on a carbon-c-relay configuration of `conf`, in a scratch directory.
fn check_c_relay(conf: &str) -> std::process::Output {
    let dir = crate::scratch();
    std::fs::write(dir.path().join("relay.conf"), conf).expect("write relay.conf");
    let mut cmd = std::process::Command::new(crate::anthracite());
    cmd.args(["check", "--carbon-c-relay-config", "relay.conf"])
        .current_dir(dir.path());
    crate::run_bounded(cmd, "anthracite check --carbon-c-relay-config")
}

/// The row of the operations page's memory table that starts with `start`.
fn memory_row(start: &str) -> String {
    let page = std::fs::read_to_string(root().join("docs/operations.md")).expect("operations.md");
    page.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("the operations page has no row starting {start:?}"))
        .to_string()
}

/// The operations page's memory table states the receive buffers' bounds the receivers use:
/// a read buffer per sending connection, and what a connection held back by a full queue
/// keeps instead.
#[test]
fn the_read_buffer_bounds_in_operations_are_the_receivers() {
    use anthracite::unstable::receiver::{MAX_COMPACT, READ_BUFFER};
    let row = memory_row("| connection read buffers |");
    for stated in [
        format!(
            "{} KiB per connection while its client is sending",
            READ_BUFFER >> 10
        ),
        format!(
            "up to {} KiB) while a full queue holds it back",
            MAX_COMPACT >> 10
        ),
    ] {
        assert!(
            row.contains(&stated),
            "the row does not say {stated:?}: {row}"
        );
    }
}

/// The memory the docs give a queued or pending datapoint besides its name ("names + N
/// bytes"), wherever they give it, is what the queues count.
#[test]
fn the_bytes_per_datapoint_in_the_docs_are_what_queues_count() {
    use anthracite::unstable::batch::POINT_OVERHEAD;
    let stated = Regex::new(r"names \+ (\d+) bytes").expect("regex");
    for file in [
        "docs/operations.md",
        "docs/configuration.md",
        "relay.toml.example",
    ] {
        let text = std::fs::read_to_string(root().join(file)).expect(file);
        let found: Vec<&str> = stated
            .captures_iter(&text)
            .filter_map(|c| c.get(1))
            .map(|m| m.as_str())
            .collect();
        assert!(
            !found.is_empty(),
            "{file} no longer says \"names + N bytes\""
        );
        for n in found {
            assert_eq!(
                n,
                POINT_OVERHEAD.to_string(),
                "{file} says names + {n} bytes per datapoint; a queue counts {POINT_OVERHEAD}"
            );
        }
    }
}

/// How long a carbon-c-relay cluster member must have been failing before its queue moves,
/// as the migration guide gives it.
#[test]
fn the_hand_over_wait_in_the_migration_guide_is_the_relays() {
    use anthracite::unstable::relay::FAIL_WAIT;
    let page = std::fs::read_to_string(root().join("docs/migrating-c-relay.md"))
        .expect("migrating-c-relay.md");
    let stated = format!("has been failing for {} s", FAIL_WAIT.as_secs_f64());
    assert!(
        page.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains(&stated),
        "the migration guide does not say {stated:?}"
    );
}

/// The spare batches' bound in the operations page's memory table is the queues'.
#[test]
fn the_spare_batches_bound_in_operations_is_the_queues() {
    use anthracite::unstable::queue::{MAX_SPARE_BYTES, QueueLimits, spare_bytes};
    let row = memory_row("| spare batches ");
    let stated = format!(
        "| `max_bytes` / 2 per destination, at most {} MiB | 2 × {} MiB |",
        MAX_SPARE_BYTES >> 20,
        spare_bytes(QueueLimits::default().max_bytes) >> 20
    );
    assert!(
        row.contains(&stated),
        "the row does not say {stated:?}: {row}"
    );
}
