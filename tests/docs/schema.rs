//! The doc comments of the `relay.toml` schema (the `Raw*` structs, wherever they live under
//! `crates/`): every field is a key the reference knows, and a default a comment states is the
//! one the code resolves.

use std::path::{Path, PathBuf};

use regex::Regex;
use toml::Value;

use crate::defaults::{PROBED, join, resolved, same};
use crate::root;

/// The schema's structs and the section each one is.
const SCHEMA: &[(&str, &str)] = &[
    ("RawListen", "listen"),
    ("RawServerTls", "listen.tls"),
    ("RawRouter", "router"),
    ("RawRule", "rules"),
    ("RawDestinations", "destinations"),
    ("RawServerDetail", "destinations.servers"),
    ("RawKinesisDestination", "destinations.servers"),
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
    // A flattened field holds other structs' keys (an extension's, in a `servers` entry).
    let mut flattened = false;
    for line in body.lines().map(str::trim) {
        if let Some(d) = line.strip_prefix("///") {
            doc.push(' ');
            doc.push_str(d.trim());
        } else if line.starts_with("#[") {
            if let Some(c) = rename.captures(line) {
                renamed = Some(c[1].to_owned());
            }
            flattened |= line.contains("flatten");
        } else if let Some(c) = field.captures(line) {
            let doc = std::mem::take(&mut doc);
            let key = renamed.take().unwrap_or_else(|| c[1].to_owned());
            if !std::mem::take(&mut flattened) {
                out.push(Field { key, doc });
            }
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
                "pub struct {name} (`[{section}]`) is not under crates/: update SCHEMA in tests/docs/schema.rs"
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
}
