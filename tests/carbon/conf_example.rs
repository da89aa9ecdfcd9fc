//! `anthracite check --carbon-config` on the `carbon.conf.example` shipped in the carbon 1.1.10
//! sdist (downloaded at test time with pip, never committed): it starts, and names every key
//! of the `[relay]` section it does not implement; with carbon's drop-in settings switched on
//! (protobuf, TLS, pooled replicas, the protobuf receiver) only keys that change nothing in what
//! is delivered where are still warned about. The bare `anthracite`'s built-in defaults are
//! the same example's `[relay]` section.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Downloads the sdist and extracts `conf/carbon.conf.example` and
/// `conf/relay-rules.conf.example` into `dir`, renamed as a carbon install would use them.
fn carbon_example(dir: &Path) -> PathBuf {
    let python = std::env::var("ANTHRACITE_PYTHON").unwrap_or_else(|_| "python3".into());
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-binary",
            ":all:",
            "--no-deps",
        ])
        .arg("carbon==1.1.10")
        .arg("-d")
        .arg(dir)
        .status()
        .expect("run pip download (set ANTHRACITE_PYTHON to a python with pip)");
    assert!(status.success(), "pip download carbon==1.1.10 failed");
    let tarball = dir.join("carbon-1.1.10.tar.gz");
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(dir)
        .args([
            "carbon-1.1.10/conf/carbon.conf.example",
            "carbon-1.1.10/conf/relay-rules.conf.example",
        ])
        .status()
        .expect("run tar");
    assert!(
        status.success(),
        "extract carbon.conf.example from {}",
        tarball.display()
    );
    let conf = dir.join("carbon-1.1.10/conf");
    std::fs::copy(conf.join("carbon.conf.example"), dir.join("carbon.conf")).expect("copy conf");
    std::fs::copy(
        conf.join("relay-rules.conf.example"),
        dir.join("relay-rules.conf"),
    )
    .expect("copy relay rules");
    dir.join("carbon.conf")
}

/// `anthracite check --carbon-config conf`.
fn check(conf: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_anthracite"))
        .arg("check")
        .arg("--carbon-config")
        .arg(conf)
        .output()
        .expect("run anthracite check")
}

/// The keys of the example's `[relay]` section, read independently of anthracite's parser.
fn relay_keys(conf: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut in_relay = false;
    for line in conf.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_relay = t == "[relay]";
            continue;
        }
        if in_relay
            && !t.starts_with('#')
            && let Some((k, _)) = t.split_once('=')
        {
            keys.push(k.trim().to_uppercase());
        }
    }
    keys
}

#[test]
fn starts_on_carbon_conf_example_and_names_unimplemented_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = carbon_example(dir.path());
    let out = check(&conf);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains(": OK"), "{stdout}");
    // The example's ports and queue size are honoured.
    assert!(stdout.contains("0.0.0.0:2013"), "{stdout}");
    assert!(stdout.contains("0.0.0.0:2014"), "{stdout}");
    assert!(stdout.contains("max_datapoints = 10000"), "{stdout}");

    let text = std::fs::read_to_string(&conf).expect("read example");
    let keys = relay_keys(&text);
    assert!(
        keys.len() >= 10,
        "parsed the example's [relay] keys: {keys:?}"
    );
    let implemented = [
        "LINE_RECEIVER_INTERFACE",
        "LINE_RECEIVER_PORT",
        "PICKLE_RECEIVER_INTERFACE",
        "PICKLE_RECEIVER_PORT",
        "PICKLE_RECEIVER_MAX_LENGTH",
        "RELAY_METHOD",
        "REPLICATION_FACTOR",
        "DESTINATIONS",
        "MAX_QUEUE_SIZE",
        "MAX_DATAPOINTS_PER_MESSAGE",
        "QUEUE_LOW_WATERMARK_PCT",
        "USE_FLOW_CONTROL",
    ];
    let warnings: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("# warning: "))
        .collect();
    for key in keys.iter().filter(|k| !implemented.contains(&k.as_str())) {
        assert!(
            warnings.iter().any(|w| w.contains(&format!("] {key}:"))),
            "{key} not reported: {warnings:#?}"
        );
    }
    // Flow control is on in the example: it becomes the block (back-pressure) policy.
    assert!(
        stdout.contains("when_full = \"block\""),
        "USE_FLOW_CONTROL = True maps to when_full = block:\n{stdout}"
    );
    // The same warnings go to the log at startup.
    assert!(stderr.contains("TIME_TO_DEFER_SENDING"), "{stderr}");
}

/// The example with carbon's drop-in settings switched on (protobuf out, TLS with a CA file,
/// pooled replicas, the protobuf receiver): none of them is warned about, and what is still
/// warned about changes nothing in what is delivered where.
#[test]
fn drop_in_keys_in_the_example_are_honoured_and_only_delivery_neutral_keys_warn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = carbon_example(dir.path());
    let ca = dir.path().join("ca.pem");
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("cert");
    std::fs::write(&ca, cert.cert.pem()).expect("write CA");
    let text = std::fs::read_to_string(&conf).expect("read example");
    let drop_in = format!(
        "[relay]\nDESTINATION_PROTOCOL = protobuf\nDESTINATION_TRANSPORT = ssl\n\
         DESTINATION_SSL_CA = {}\nDESTINATION_POOL_REPLICAS = True\n\
         PROTOBUF_RECEIVER_INTERFACE = 127.0.0.1\nPROTOBUF_RECEIVER_PORT = 2015\n",
        ca.display()
    );
    std::fs::write(&conf, text.replacen("[relay]\n", &drop_in, 1)).expect("write conf");
    let out = check(&conf);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("protocol = \"protobuf\""), "{stdout}");
    assert!(stdout.contains("pool_replicas = true"), "{stdout}");
    assert!(
        stdout.contains("protobuf_tcp = \"127.0.0.1:2015\""),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("ca_file = {:?}", ca.display().to_string())),
        "{stdout}"
    );
    // Timing of sends and slow-connection resets: what arrives where is the same either way.
    let delivery_neutral = [
        "TIME_TO_DEFER_SENDING",
        "USE_RATIO_RESET",
        "MIN_RESET_STAT_FLOW",
        "MIN_RESET_RATIO",
        "MIN_RESET_INTERVAL",
    ];
    // Warnings about carbon.conf keys (the example's relay-rules.conf draws its own).
    let warnings: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("# warning: "))
        .filter(|w| w.contains("carbon.conf:"))
        .collect();
    for w in &warnings {
        assert!(
            delivery_neutral
                .iter()
                .any(|k| w.contains(&format!("] {k}:"))),
            "unexpected warning: {w}\nall: {warnings:#?}"
        );
    }
    for k in delivery_neutral {
        assert!(
            warnings.iter().any(|w| w.contains(&format!("] {k}:"))),
            "{k} not reported: {warnings:#?}"
        );
    }
}

/// The settings of `anthracite check` after its `# …` header lines, as TOML.
fn resolved(out: &std::process::Output) -> toml::Table {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body: String = stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    body.parse()
        .unwrap_or_else(|e| panic!("check prints TOML: {e}\n{stdout}"))
}

/// What the bare `anthracite` runs on is what the drop-in import makes of carbon 1.1.10's own
/// carbon.conf.example, setting for setting, but for the two documented differences: routing
/// by consistent hashing where the example says `rules` (it ships no relay-rules.conf for them;
/// one destination takes every name either way) and the admin listener carbon does not have.
#[test]
fn built_in_defaults_are_the_examples_relay_section() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = carbon_example(dir.path());
    let text = std::fs::read_to_string(&conf).expect("read example");
    assert!(
        text.contains("\nRELAY_METHOD = rules\n"),
        "the example routes by rules"
    );
    std::fs::write(
        &conf,
        text.replacen(
            "\nRELAY_METHOD = rules\n",
            "\nRELAY_METHOD = consistent-hashing\n",
            1,
        ),
    )
    .expect("write conf");
    let mut example = resolved(&check(&conf));

    let empty = tempfile::tempdir().expect("tempdir");
    let mut defaults = resolved(
        &Command::new(env!("CARGO_BIN_EXE_anthracite"))
            .arg("check")
            .current_dir(empty.path())
            .output()
            .expect("run anthracite check"),
    );
    let admin = defaults
        .get_mut("admin")
        .and_then(|a| a.as_table_mut())
        .expect("[admin]");
    assert_eq!(
        admin
            .remove("listen")
            .and_then(|l| l.as_str().map(str::to_owned)),
        Some("127.0.0.1:8080".to_owned())
    );
    if let Some(admin) = example.get_mut("admin").and_then(|a| a.as_table_mut()) {
        assert_eq!(
            admin.remove("listen").as_ref().and_then(|l| l.as_str()),
            Some(""),
            "carbon has no admin listener"
        );
    }
    assert_eq!(defaults, example);
}
