//! relay.toml.example shows every key of the schema with its default: it passes
//! `anthracite check` as it is and with every setting uncommented, and a value that is not the
//! default says so on its line (`# example`).

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use toml::{Table, Value};

use crate::blocks::check_config;
use crate::defaults::{OPTIONAL_TABLES, PROBED, flatten, join, resolved, same, set};
use crate::{check, root, scratch};

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

#[test]
fn the_example_reader_reads_comments_and_settings() {
    assert_eq!(comment_start(r#"a = "x#y"   # example"#), Some(12));
    assert_eq!(comment_start(r##"a = "x\"#"  # z"##), Some(12));
    assert_eq!(uncomment("## why\n# a = 1\nb = 2"), "## why\na = 1\nb = 2");
    let marks = example_marks("[a]\nx = 1   # example: why\ny = \"#\"\n[[b]]\nz = 2\n");
    assert_eq!(marks.get("a.x"), Some(&true));
    assert_eq!(marks.get("a.y"), Some(&false));
    assert_eq!(marks.get("b.z"), Some(&false));
}
