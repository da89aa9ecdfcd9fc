//! The library's layering rule, checked on its sources: a module may import only modules of
//! its own layer or below (the crate documentation's "Layers" states the same order). A `use crate::…` or a
//! `crate::…` path in code (not in comments) names the module it imports; names re-exported at
//! the crate root are resolved to the module that defines them through `lib.rs`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Bottom to top. A module may import its own layer's modules and every lower layer's.
const LAYERS: &[&[&str]] = &[
    &[
        "metric_names",
        "episode",
        "figure",
        "pattern",
        "posix_regex",
        "tls",
        "batch",
    ],
    &["name_cache"],
    &["protocol"],
    &["router", "filter", "aggregator"],
    &["queue"],
    &["destination"],
    &["ingest"],
    &["config", "extension"],
    &["receiver"],
    &["telemetry"],
    &["admin"],
    &["relay"],
];

/// The curated internals gate re-exports from every layer; it is nobody's dependency.
const EXEMPT: &[&str] = &["unstable", "lib"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`src/queue/spill/mod.rs` → `queue`).
fn module_of(path: &Path) -> String {
    let rel = path.strip_prefix(src()).expect("under src");
    let first = rel.components().next().expect("a component");
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_string()
}

/// Code without comments: line comments (`//`, `///`, `//!`) are cut; string literals are
/// left (no source spells a `crate::` path inside one).
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("")))
}

/// Root re-exports from `lib.rs`: `pub use config::{Config, …}` maps `Config` → `config`.
fn root_names() -> BTreeMap<String, String> {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let mut names = BTreeMap::new();
    let code: String = code_lines(&lib).map(|(_, l)| format!("{l}\n")).collect();
    for stmt in code.split(';') {
        let Some(rest) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module = rest.split("::").next().unwrap_or("").trim().to_string();
        let items = rest.split_once("::").map_or("", |(_, items)| items);
        for item in items.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if item.chars().next().is_some_and(char::is_uppercase) {
                names.insert(item.to_string(), module.clone());
            }
        }
    }
    names
}

/// Every module a line's `crate::` paths name (a `use crate::{a::X, b::Y}` group included).
fn imported(line: &str, roots: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let group = rest.strip_prefix('{');
        let text = group.map_or(rest, |g| g.split('}').next().unwrap_or(""));
        let heads: Vec<&str> = if group.is_some() {
            text.split(',').map(str::trim).collect()
        } else {
            vec![text]
        };
        for head in heads {
            let ident: String = head
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if ident.is_empty() {
                continue;
            }
            if ident.chars().next().is_some_and(char::is_uppercase) {
                if let Some(m) = roots.get(&ident) {
                    out.push(m.clone());
                }
            } else {
                out.push(ident);
            }
        }
    }
    out
}

#[test]
fn no_module_imports_a_layer_above_its_own() {
    let roots = root_names();
    assert!(
        roots.get("Config").is_some_and(|m| m == "config"),
        "lib.rs re-exports not read: {roots:?}"
    );
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut violations = Vec::new();
    let mut unknown = Vec::new();
    for file in &files {
        let module = module_of(file);
        if EXEMPT.contains(&module.as_str()) {
            continue;
        }
        let Some(own) = layer_of(&module) else {
            unknown.push(module);
            continue;
        };
        let text = fs::read_to_string(file).expect("read source");
        for (n, line) in code_lines(&text) {
            for target in imported(line, &roots) {
                if target == module {
                    continue;
                }
                match layer_of(&target) {
                    Some(layer) if layer <= own => {}
                    Some(_) => violations.push(format!(
                        "{}:{n}: {module} imports {target} (a layer above)",
                        file.strip_prefix(src()).unwrap_or(file).display()
                    )),
                    None => unknown.push(target),
                }
            }
        }
    }
    unknown.sort();
    unknown.dedup();
    assert!(
        unknown.is_empty(),
        "modules missing from LAYERS (add them where they belong): {unknown:?}"
    );
    assert!(
        violations.is_empty(),
        "upward imports:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_checker_sees_an_upward_import() {
    let roots = root_names();
    assert_eq!(
        imported("use crate::{queue::X, relay::Y};", &roots),
        ["queue", "relay"]
    );
    assert_eq!(
        imported("let c = crate::Config::default();", &roots),
        ["config"]
    );
    assert_eq!(imported("/// [`crate::relay`]", &roots).len(), 1);
    let code: Vec<_> = code_lines("/// see crate::relay\nuse crate::queue;").collect();
    assert_eq!(imported(code[0].1, &roots), Vec::<String>::new());
    assert_eq!(imported(code[1].1, &roots), ["queue"]);
}

/// The core knows no stream by build flag: Kinesis and Kafka are crates of their own that join
/// through `extension`, so no source of the core is compiled differently for them and none
/// uses their clients.
#[test]
fn the_core_holds_no_stream_cfg_and_no_stream_client() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let manifest = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .expect("Cargo.toml");
    let mut found = Vec::new();
    for path in &files {
        let text = fs::read_to_string(path).expect("read source");
        for (n, line) in code_lines(&text) {
            let cfg = ["\"kinesis\"", "\"kafka\"", "\"kpl\"", "\"kafka-tls\""]
                .iter()
                .any(|f| line.contains("feature") && line.contains(f));
            let client = ["aws_sdk_", "aws_config", "rdkafka"]
                .iter()
                .any(|c| line.contains(c));
            if cfg || client {
                found.push(format!("{}:{n}: {}", path.display(), line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "stream code in the core:\n{}",
        found.join("\n")
    );
    // flate2 is the core's own since the gzip transport (carbon-c-relay's wire format); the
    // Kinesis extension's record decompression is not.
    for dep in ["aws-", "rdkafka", "prost = { workspace = true, optional"] {
        let in_deps = manifest
            .split("[dev-dependencies]")
            .next()
            .is_some_and(|deps| deps.contains(dep));
        assert!(!in_deps, "the core's dependencies name {dep}");
    }
    assert!(
        !manifest.contains("kinesis =") && !manifest.contains("kafka ="),
        "the core declares a stream feature"
    );
}
