//! The pages' code blocks do what they say.
//!
//! - ```` ```toml ````: a whole `relay.toml`, which must pass `anthracite check`;
//! - ```` ```toml fragment ````: part of one, checked over a minimal configuration (one
//!   destination, added when the block names none);
//! - ```` ```toml c-relay-overlay ````: an overlay for a carbon-c-relay configuration, which
//!   must pass `anthracite check --carbon-c-relay-overlay` beside a one-cluster configuration;
//! - ```` ```toml cargo ````: a Cargo manifest excerpt: TOML whose `anthracite*` dependencies
//!   are crates of the workspace;
//! - ```` ```sh runnable ````: run by bash in a scratch directory holding a copy of
//!   `relay.toml.example`, the built binaries first on the `PATH`; it must succeed;
//! - ```` ```sh quickstart ````: the README's quick start, run by `tests/operator/quickstart.rs`
//!   (it serves on fixed ports, so it is not run here).
//!
//! A configuration names files on the machine it was written for. Before a check, absolute
//! paths are moved into the scratch directory, and the files the relay reads at validation
//! (certificates, rule and list files) are made there.

use std::path::{Path, PathBuf};
use std::process::Command;

use toml::{Table, Value};

use crate::markdown::fences;
use crate::{anthracite, check, pages, root, run_bounded, scratch};

/// Keys whose value names a file the relay reads when it validates the configuration.
const FILE_KEYS: &[&str] = &[
    "cert_file",
    "key_file",
    "client_ca",
    "ca_file",
    "client_cert",
    "client_key",
    "rules_file",
    "whitelist",
    "blacklist",
];

/// One self-signed certificate and its key, PEM, standing in for every certificate a block
/// names (a CA file holding exactly the peer's certificate is accepted as pinned).
struct Pem {
    cert: String,
    key: String,
}

fn pem() -> Pem {
    let key = rcgen::KeyPair::generate().expect("a key pair");
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("certificate params");
    let cert = params.self_signed(&key).expect("a self-signed certificate");
    Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

/// The path `value` is moved to under `dir`: absolute paths keep their components below it.
fn moved(dir: &Path, value: &str) -> PathBuf {
    dir.join(value.trim_start_matches('/'))
}

/// Moves the absolute paths of a configuration into `dir` and makes the files it names there.
/// `table` is the name of the TOML table being walked (`aggregation`, `rewrite`, …).
fn localize(value: &mut Value, dir: &Path, table: &str, pem: &Pem) {
    match value {
        Value::Table(t) => localize_table(t, dir, table, pem),
        Value::Array(a) => {
            for v in a {
                localize(v, dir, table, pem);
            }
        }
        _ => {}
    }
}

fn localize_table(t: &mut Table, dir: &Path, table: &str, pem: &Pem) {
    for (key, v) in t.iter_mut() {
        match v {
            Value::String(s) if !s.is_empty() && FILE_KEYS.contains(&key.as_str()) => {
                let path = moved(dir, s);
                let content = match key.as_str() {
                    "cert_file" | "client_cert" | "client_ca" | "ca_file" => pem.cert.clone(),
                    "key_file" | "client_key" => pem.key.clone(),
                    "rules_file" if table == "aggregation" => {
                        "agg.<app>.count (60) = sum <app>.*.count\n".to_owned()
                    }
                    "rules_file" => "[pre]\n^a\\.(\\w+) = b.\\1\n".to_owned(),
                    _ => "^carbon\\.\n".to_owned(),
                };
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).expect("a directory for a named file");
                }
                std::fs::write(&path, content).expect("a named file");
                *s = path.display().to_string();
            }
            Value::String(s) if s.starts_with('/') => {
                *s = moved(dir, s).display().to_string();
            }
            Value::Table(_) | Value::Array(_) => localize(v, dir, key, pem),
            _ => {}
        }
    }
}

/// Writes `config` (localized) into a scratch directory and runs `anthracite check` on it.
pub fn check_config(mut config: Table, what: &str) -> Result<String, String> {
    let dir = scratch();
    let mut value = Value::Table(std::mem::take(&mut config));
    localize(&mut value, dir.path(), "", &pem());
    let text = toml::to_string(&value).map_err(|e| format!("{what}: cannot render: {e}"))?;
    let file = dir.path().join("relay.toml");
    std::fs::write(&file, &text).expect("write relay.toml");
    check(&file).map_err(|e| format!("{what}:\n{e}\nas checked:\n{text}"))
}

/// `anthracite check` of a one-cluster carbon-c-relay configuration with `overlay` beside it
/// (its directories moved into a scratch directory).
fn check_overlay(overlay: &str, what: &str) -> Result<(), String> {
    let dir = scratch();
    let mut value: Value = toml::from_str(overlay).map_err(|e| format!("{what}: {e}"))?;
    localize(&mut value, dir.path(), "", &pem());
    let text = toml::to_string(&value).map_err(|e| format!("{what}: cannot render: {e}"))?;
    std::fs::write(dir.path().join("overlay.toml"), &text).expect("write overlay.toml");
    std::fs::write(
        dir.path().join("relay.conf"),
        "cluster a forward 127.0.0.1:2003;\nmatch * send to a;\n",
    )
    .expect("write relay.conf");
    let mut cmd = Command::new(anthracite());
    cmd.args(["check", "--carbon-c-relay-config", "relay.conf"])
        .args(["--carbon-c-relay-overlay", "overlay.toml"])
        .current_dir(dir.path());
    let out = run_bounded(cmd, "anthracite check --carbon-c-relay-overlay");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what}:\n{}\nas checked:\n{text}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A fragment over the minimal configuration: one destination unless it names its own.
fn over_minimal(mut fragment: Table) -> Table {
    let destinations = fragment
        .entry("destinations")
        .or_insert_with(|| Value::Table(Table::new()));
    if let Value::Table(d) = destinations
        && !d.contains_key("servers")
    {
        d.insert(
            "servers".into(),
            Value::Array(vec![Value::String("127.0.0.1:2104:a".into())]),
        );
    }
    fragment
}

/// Names of the workspace's packages, and those pending (`tests/docs/links.rs`).
fn workspace_crates() -> Vec<String> {
    let mut names = Vec::new();
    let mut manifests = vec![root().join("Cargo.toml")];
    if let Ok(dirs) = std::fs::read_dir(root().join("crates")) {
        manifests.extend(
            dirs.filter_map(|e| e.ok())
                .map(|e| e.path().join("Cargo.toml")),
        );
    }
    for m in manifests {
        let Ok(text) = std::fs::read_to_string(&m) else {
            continue;
        };
        let manifest: Table =
            toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", m.display()));
        if let Some(name) = manifest
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
        {
            names.push(name.to_owned());
        }
    }
    names
}

/// `crates/<name>` is one of the directories another part of the change adds.
fn pending_crate(name: &str) -> bool {
    let dir = format!("crates/{name}");
    crate::links::PENDING.contains(&dir.as_str()) && !root().join(&dir).exists()
}

#[test]
fn toml_blocks_pass_anthracite_check() {
    let crates = workspace_crates();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (page, text) in pages() {
        for fence in fences(&text) {
            if fence.info.first().map(String::as_str) != Some("toml") {
                continue;
            }
            let at = format!("{}:{}", page.display(), fence.line);
            let parsed: Table = match toml::from_str(&fence.body) {
                Ok(t) => t,
                Err(e) => {
                    problems.push(format!("{at}: not TOML: {e}"));
                    continue;
                }
            };
            let kind: Vec<&str> = fence.info[1..].iter().map(String::as_str).collect();
            match kind.as_slice() {
                [] => {
                    if let Err(e) = check_config(parsed, &at) {
                        problems.push(e);
                    }
                }
                ["fragment"] => {
                    if let Err(e) = check_config(over_minimal(parsed), &at) {
                        problems.push(e);
                    }
                }
                ["c-relay-overlay"] => {
                    if let Err(e) = check_overlay(&fence.body, &at) {
                        problems.push(e);
                    }
                }
                ["cargo"] => {
                    let Some(deps) = parsed.get("dependencies").and_then(Value::as_table) else {
                        problems.push(format!("{at}: a Cargo excerpt without [dependencies]"));
                        continue;
                    };
                    for name in deps.keys().filter(|n| n.starts_with("anthracite")) {
                        if !crates.contains(name) && !pending_crate(name) {
                            problems.push(format!("{at}: no workspace crate is named {name}"));
                        }
                    }
                }
                other => problems.push(format!("{at}: unknown toml block kind {other:?}")),
            }
            checked += 1;
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    assert!(
        checked >= 10,
        "only {checked} toml blocks: is the reader broken?"
    );
}

#[test]
fn runnable_shell_blocks_run() {
    let bin = anthracite().parent().expect("the binaries' directory");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut problems = Vec::new();
    let mut ran = 0;
    for (page, text) in pages() {
        for fence in fences(&text) {
            let Some(lang) = fence.info.first().map(String::as_str) else {
                continue;
            };
            if !matches!(lang, "sh" | "bash" | "shell" | "console") {
                continue;
            }
            let at = format!("{}:{}", page.display(), fence.line);
            match &fence.info[1..] {
                [] => continue,
                [m] if m == "quickstart" => continue,
                [m] if m == "runnable" => {}
                other => {
                    problems.push(format!("{at}: unknown shell block marker {other:?}"));
                    continue;
                }
            }
            let dir = scratch();
            std::fs::copy(
                root().join("relay.toml.example"),
                dir.path().join("relay.toml.example"),
            )
            .expect("copy relay.toml.example");
            let mut cmd = Command::new("bash");
            cmd.arg("-euo")
                .arg("pipefail")
                .arg("-c")
                .arg(&fence.body)
                .current_dir(dir.path())
                .env("PATH", &path);
            let out = run_bounded(cmd, &format!("the block at {at}"));
            if !out.status.success() {
                problems.push(format!(
                    "{at}: {}\n{}\n{}{}",
                    out.status,
                    fence.body,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            ran += 1;
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    assert!(
        ran >= 2,
        "only {ran} runnable blocks: were the markers lost?"
    );
}

#[test]
fn a_broken_block_fails_the_check() {
    let bad: Table = toml::from_str("[listen]\nmax_connections = 0\n").expect("TOML");
    let err = check_config(over_minimal(bad), "a block with max_connections = 0")
        .expect_err("out of range");
    assert!(err.contains("listen.max_connections"), "{err}");
    let tls: Table = toml::from_str(
        "[listen.tls]\ncert_file = \"/etc/x/relay.pem\"\nkey_file = \"/etc/x/relay.key\"\n",
    )
    .expect("TOML");
    check_config(over_minimal(tls), "a block naming certificates").expect("files are made");
}
