//! Each default in one place: the code. What the documentation shows is checked against what
//! `anthracite check` resolves:
//!
//! - the tables of docs/configuration.md: every default shown as a value, every key of the
//!   schema has a row, and every range holds at its bounds;
//! - relay.toml.example: it passes `anthracite check` as it is and with every setting
//!   uncommented, shows every key, and shows each one's default unless the line says
//!   `# example`;
//! - the doc comments of the `relay.toml` schema (the `Raw*` structs): a default they state is
//!   the resolved one.
//!
//! What the code resolves comes from `anthracite check` on two probe configurations that hold
//! every section (`[[rules]]` needs a method of its own) and only the keys a section requires.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use regex::Regex;
use toml::{Table, Value};

use crate::blocks::check_config;
use crate::markdown::{code_spans, tables};
use crate::{check, root, scratch};

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
const OPTIONAL_TABLES: &[&str] = &["listen.tls", "destinations.tls"];

/// Keys the probes set (what a section requires to validate): resolved, but not defaults.
const PROBED: &[&str] = &[
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
pub struct Resolved {
    leaves: BTreeMap<String, Value>,
    paths: BTreeSet<String>,
}

impl Resolved {
    fn known(&self, key: &str) -> bool {
        self.paths.contains(key) || OMITTED.contains(&key) || OPTIONAL_TABLES.contains(&key)
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Flattens a configuration: every leaf with its dotted key (all entries of an array of
/// tables when `every_entry`, else the first), and every path.
fn flatten(
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
pub fn resolved() -> &'static Resolved {
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
fn same(a: &Value, b: &Value) -> bool {
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
fn set(config: &mut Table, key: &str, value: Value) {
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

/// relay.toml.example with its settings uncommented: `# key = value` lines (and `# [table]`
/// headers) lose their `# `; `##` lines are explanations and stay.
fn uncomment(text: &str) -> String {
    text.lines()
        .map(|l| l.strip_prefix("# ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where a line's trailing comment starts (a `#` outside strings).
fn comment_start(line: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (Some('"'), '\\') if !escaped => {
                escaped = true;
                continue;
            }
            (Some(q), c) if c == q && !escaped => quote = None,
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') => return Some(i),
            _ => {}
        }
        escaped = false;
    }
    None
}

/// The example's settings: dotted key → whether its line says `# example`.
fn example_marks(text: &str) -> BTreeMap<String, bool> {
    let key = Regex::new(r"^([A-Za-z0-9_.]+)\s*=").expect("regex");
    let mut marks = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || t.is_empty() {
            continue;
        }
        if t.starts_with('[') {
            section = t.trim_matches(['[', ']']).to_owned();
            continue;
        }
        if let Some(c) = key.captures(t) {
            let example = comment_start(t)
                .is_some_and(|i| t[i..].trim_start_matches('#').trim().starts_with("example"));
            marks
                .entry(join(&section, &c[1]))
                .and_modify(|m| *m |= example)
                .or_insert(example);
        }
    }
    marks
}

#[test]
fn the_example_shows_every_key_and_its_default() {
    let r = resolved();
    let text =
        std::fs::read_to_string(root().join("relay.toml.example")).expect("relay.toml.example");

    // As it is, the example runs (the quick start uses it).
    let dir = scratch();
    let file = dir.path().join("relay.toml.example");
    std::fs::write(&file, &text).expect("write the example");
    check(&file).unwrap_or_else(|e| panic!("relay.toml.example as it is:\n{e}"));

    // Uncommented, it is valid too. Its [[rules]] apply with method "rules", which the example
    // keeps at its default: that one key is changed for the check.
    let full = uncomment(&text);
    let parsed: Table = toml::from_str(&full)
        .unwrap_or_else(|e| panic!("relay.toml.example uncommented is not TOML: {e}"));
    let mut checked = parsed.clone();
    if checked.contains_key("rules") {
        set(&mut checked, "router.method", Value::String("rules".into()));
    }
    check_config(checked, "relay.toml.example, every setting uncommented")
        .unwrap_or_else(|e| panic!("{e}"));

    let marks = example_marks(&full);
    let mut leaves = Vec::new();
    let mut paths = BTreeSet::new();
    flatten("", &Value::Table(parsed), true, &mut leaves, &mut paths);
    let mut problems = Vec::new();
    let mut compared = 0;
    for (key, value) in &leaves {
        if !r.known(key) {
            problems.push(format!("{key}: not a key of the schema"));
            continue;
        }
        let example = marks
            .iter()
            .filter(|(k, _)| key == *k || key.starts_with(&format!("{k}.")))
            .max_by_key(|(k, _)| k.len())
            .is_some_and(|(_, m)| *m);
        if example || PROBED.contains(&key.as_str()) {
            continue;
        }
        if let Some(default) = r.leaves.get(key) {
            if same(value, default) {
                compared += 1;
            } else {
                problems.push(format!(
                    "{key} = {value}: not the default ({default}); end the line with `# example` if it is one"
                ));
            }
        }
    }
    let shown: BTreeSet<&str> = leaves.iter().map(|(k, _)| k.as_str()).collect();
    for key in r.leaves.keys() {
        // The per-server table is shown in words: its keys override the sections' ones.
        if key.starts_with("destinations.servers.") {
            continue;
        }
        if !shown.contains(key.as_str()) {
            problems.push(format!("{key}: missing from relay.toml.example"));
        }
    }
    for table in OPTIONAL_TABLES {
        if !paths.contains(*table) {
            problems.push(format!("[{table}]: missing from relay.toml.example"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(compared >= 80, "only {compared} defaults compared");
}

/// The schema's structs and the section each one is.
const SCHEMA: &[(&str, &str)] = &[
    ("RawListen", "listen"),
    ("RawServerTls", "listen.tls"),
    ("RawRouter", "router"),
    ("RawRule", "rules"),
    ("RawDestinations", "destinations"),
    ("RawServerDetail", "destinations.servers"),
    ("RawKafkaSink", "destinations.servers.kafka"),
    ("RawClientTls", "destinations.tls"),
    ("RawQueue", "destinations.queue"),
    ("RawSpill", "destinations.spill"),
    ("RawIngest", "ingest"),
    ("RawTelemetry", "telemetry"),
    ("RawShutdown", "shutdown"),
    ("RawAdmin", "admin"),
    ("RawLog", "log"),
    ("RawAggregation", "aggregation"),
    ("RawRewrite", "rewrite"),
    ("RawKinesis", "kinesis"),
    ("RawKafka", "kafka"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A field of a schema struct: its key and its doc comment.
struct Field {
    key: String,
    doc: String,
}

/// The fields of `pub struct name { … }` in `text`, if it is there.
fn fields(text: &str, name: &str) -> Option<Vec<Field>> {
    let start = text.find(&format!("pub struct {name} {{"))?;
    let body = &text[start..];
    let body = &body[body.find('{')? + 1..body.find("\n}")?];
    let field = Regex::new(r"^pub ([a-z_0-9]+):").expect("regex");
    let rename = Regex::new(r#"rename = "([^"]+)""#).expect("regex");
    let mut out = Vec::new();
    let mut doc = String::new();
    let mut renamed = None;
    for line in body.lines().map(str::trim) {
        if let Some(d) = line.strip_prefix("///") {
            doc.push(' ');
            doc.push_str(d.trim());
        } else if line.starts_with("#[") {
            if let Some(c) = rename.captures(line) {
                renamed = Some(c[1].to_owned());
            }
        } else if let Some(c) = field.captures(line) {
            out.push(Field {
                key: renamed.take().unwrap_or_else(|| c[1].to_owned()),
                doc: std::mem::take(&mut doc),
            });
        }
    }
    Some(out)
}

/// The default a doc comment states: `Default 600`, `Default 64 MiB`, ``Default `a` ``,
/// `` `pickle` (default) ``, `0 (default)`. Templates (`<hostname>`) and words are not values.
fn stated_default(doc: &str) -> Option<Value> {
    let value = r"`[^`]*`|-?[0-9][0-9_]*(?:\.[0-9]+)?(?: (?:KiB|MiB|GiB|TiB|ms|s)\b)?|true|false";
    let a = Regex::new(&format!(r"Default:? ({value})")).expect("regex");
    let b = Regex::new(r"(`[^`]*`|-?[0-9][0-9_]*(?:\.[0-9]+)?) \(default\)").expect("regex");
    let first = [a.captures(doc), b.captures(doc)]
        .into_iter()
        .flatten()
        .min_by_key(|c| c.get(0).map_or(usize::MAX, |m| m.start()))?;
    let text = first.get(1)?.as_str();
    if let Some(code) = text.strip_prefix('`').and_then(|t| t.strip_suffix('`')) {
        if code.contains('<') {
            return None;
        }
        return Some(Value::String(if code == "\"\"" {
            String::new()
        } else {
            code.to_owned()
        }));
    }
    match text {
        "true" => return Some(Value::Boolean(true)),
        "false" => return Some(Value::Boolean(false)),
        _ => {}
    }
    let (n, unit) = text.split_once(' ').unwrap_or((text, ""));
    let scale = match unit {
        "KiB" => 1i64 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => 1,
    };
    let n = n.replace('_', "");
    match n.parse::<i64>() {
        Ok(i) => Some(Value::Integer(i * scale)),
        Err(_) => n.parse::<f64>().ok().map(Value::Float),
    }
}

#[test]
fn the_schema_doc_comments_state_the_resolved_defaults() {
    let r = resolved();
    let mut files = Vec::new();
    rust_files(&root().join("crates"), &mut files);
    let sources: Vec<(PathBuf, String)> = files
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(&p).ok().map(|t| (p, t)))
        .collect();
    let mut problems = Vec::new();
    let mut compared = 0;
    for (name, section) in SCHEMA {
        let Some((file, fields)) = sources
            .iter()
            .find_map(|(p, t)| fields(t, name).map(|f| (p, f)))
        else {
            problems.push(format!(
                "pub struct {name} (`[{section}]`) is not under crates/: update SCHEMA in tests/docs/defaults.rs"
            ));
            continue;
        };
        let file = file.strip_prefix(root()).unwrap_or(file).display();
        for f in fields {
            let key = join(section, &f.key);
            if !r.known(&key) {
                problems.push(format!(
                    "{file}: {name}.{}: {key} is neither resolved by `anthracite check` nor in OMITTED",
                    f.key
                ));
                continue;
            }
            let (Some(stated), Some(value)) = (stated_default(&f.doc), r.leaves.get(&key)) else {
                continue;
            };
            if PROBED.contains(&key.as_str()) {
                continue;
            }
            if same(&stated, value) {
                compared += 1;
            } else {
                problems.push(format!(
                    "{file}: {name}.{}: the doc comment says the default is {stated}, the code resolves {value}",
                    f.key
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(compared >= 60, "only {compared} doc comments compared");
}

#[test]
fn the_doc_comment_reader_reads_the_schema_forms() {
    let v = |d: &str| stated_default(d);
    assert_eq!(
        v("Plaintext. Default `0.0.0.0:2003`; `\"\"` disables."),
        Some(Value::String("0.0.0.0:2003".into()))
    );
    assert_eq!(
        v("(1–1000000). Default 10000. At the limit"),
        Some(Value::Integer(10000))
    );
    assert_eq!(
        v("0 = never (carbon's default). Default 600."),
        Some(Value::Integer(600))
    );
    assert_eq!(
        v("counted. Default 64 MiB; 0 disables"),
        Some(Value::Integer(64 << 20))
    );
    assert_eq!(v("Wait this long. Default 5 ms."), Some(Value::Integer(5)));
    assert_eq!(
        v("`consistent-hashing` (default), `fast-hashing`"),
        Some(Value::String("consistent-hashing".into()))
    );
    assert_eq!(
        v("dir; `\"\"` (default) disables"),
        Some(Value::String(String::new()))
    );
    assert_eq!(
        v("replay; 0 (default) = no limit."),
        Some(Value::Integer(0))
    );
    assert_eq!(v("fraction. Default 0.5."), Some(Value::Float(0.5)));
    assert_eq!(
        v("per host. Default true (carbon's default)."),
        Some(Value::Boolean(true))
    );
    assert_eq!(v("Host part. Default: the machine's hostname."), None);
    assert_eq!(v("Client id. Default `anthracite-<hostname>`."), None);
    let f = fields(
        "pub struct RawX {\n    /// A. Default 1.\n    #[serde(default, rename = \"continue\")]\n    pub continue_matching: bool,\n    /// B.\n    pub b: u8,\n}\n",
        "RawX",
    )
    .expect("the struct");
    assert_eq!(f.len(), 2);
    assert_eq!(f[0].key, "continue");
    assert_eq!(stated_default(&f[0].doc), Some(Value::Integer(1)));
    assert_eq!(comment_start(r#"a = "x#y"   # example"#), Some(12));
    assert_eq!(comment_start(r##"a = "x\"#"  # z"##), Some(12));
    assert_eq!(uncomment("## why\n# a = 1\nb = 2"), "## why\na = 1\nb = 2");
}
