//! The `anthracite` binary: `check`, `route`, and `run` stopped by SIGTERM.

use anthracite_testkit as testkit;

use std::io::Write;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use anthracite_sink::{Sink, SinkProtocol};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_anthracite"))
}

fn repo_file(name: &str) -> String {
    format!("{}/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn check_prints_the_resolved_example_config() {
    let out = bin()
        .args(["check", "--config", &repo_file("relay.toml.example")])
        .output()
        .expect("run anthracite check");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("OK"), "{text}");
    assert!(text.contains("hash_type = \"carbon_ch\""), "{text}");
    assert!(text.contains("127.0.0.1:2204:b"), "{text}");
}

#[test]
fn check_reports_the_bad_key_with_exit_code_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[router]\nreplication_factor = 0\n[destinations]\nservers = [\"127.0.0.1:1:a\"]\n",
    )
    .expect("write config");
    let out = bin()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("run anthracite check");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("router.replication_factor"), "{err}");
    assert!(err.contains("bad.toml"), "{err}");
}

#[test]
fn route_matches_carbon_for_the_example_config() {
    let vectors: serde_json::Value = serde_json::from_slice(
        &std::fs::read(testkit::compat_path("carbon-hash-vectors.json")).expect("read vectors"),
    )
    .expect("parse vectors");
    let case = vectors["cases"]
        .as_array()
        .and_then(|cases| {
            cases.iter().find(|c| {
                c["destinations_conf"] == "127.0.0.1:2104:a, 127.0.0.1:2204:b"
                    && c["hash_type"] == "carbon_ch"
            })
        })
        .expect("vector case for the example destinations");
    let names: Vec<&str> = vectors["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .filter_map(|m| m.as_str())
        .filter(|m| !m.is_empty() && !m.contains(['\n', '\r']) && m.trim() == *m)
        .take(200)
        .collect();
    let mut child = bin()
        .args(["route", "--config", &repo_file("relay.toml.example")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn anthracite route");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for n in &names {
            writeln!(stdin, "{n}").expect("write name");
        }
    }
    let out = child.wait_with_output().expect("route output");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8 output");
    let dests = ["127.0.0.1:2104:a", "127.0.0.1:2204:b"];
    let metrics = vectors["metrics"].as_array().expect("metrics");
    let mut checked = 0;
    for line in text.lines() {
        let (name, dest) = line.rsplit_once('\t').expect("name<TAB>destinations");
        let idx = metrics
            .iter()
            .position(|m| m.as_str() == Some(name))
            .expect("printed name is one we sent");
        let want = case["rf1"][idx].as_u64().expect("rf1 index") as usize;
        assert_eq!(dest, dests[want], "placement of {name:?}");
        checked += 1;
    }
    assert_eq!(checked, names.len());
}

#[test]
fn sigterm_flushes_queued_data_and_exits_cleanly() {
    let sink = Sink::start("a", SinkProtocol::Pickle);
    let ports = testkit::free_ports(2);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("relay.toml");
    std::fs::write(
        &config,
        format!(
            "[listen]\nline_tcp = \"127.0.0.1:{}\"\npickle_tcp = \"127.0.0.1:{}\"\n\
             [destinations]\nservers = [\"{}:a\"]\n[telemetry]\ninterval_secs = 0\n",
            ports[0],
            ports[1],
            sink.addr()
        ),
    )
    .expect("write config");
    let mut relay = crate::anthracite("relay").config(&config).start();
    relay.wait_listening(&ports[..1]);
    let mut conn = TcpStream::connect(("127.0.0.1", ports[0])).expect("connect the relay");
    let n = 30_000;
    let mut payload = Vec::new();
    for i in 0..n {
        payload.extend_from_slice(format!("sigterm.{i} {i} 1700000000\n").as_bytes());
    }
    conn.write_all(&payload).expect("write");
    drop(conn);
    relay.signal("TERM");
    let status = relay.wait_exit(Duration::from_secs(60), "relay exits");
    assert!(
        status.success(),
        "exit status {status:?}; stderr:\n{}",
        relay.log()
    );
    assert_eq!(sink.wait_for_count(n, Duration::from_secs(20)), n);
}

/// An example binary: Cargo builds examples for `cargo test`, beside the test binary's
/// directory.
fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|d| d.join("examples").join(name))
        .expect("target dir");
    assert!(path.exists(), "example not built at {}", path.display());
    path
}

#[test]
fn embed_example_runs_while_carbon_ports_are_taken() {
    // Hold 2003 and 2004 as a carbon on this host would (if something else already holds
    // them, they are taken all the same).
    let _held: Vec<std::net::TcpListener> = ["0.0.0.0:2003", "0.0.0.0:2004"]
        .iter()
        .filter_map(|a| std::net::TcpListener::bind(a).ok())
        .collect();
    for port in [2003, 2004] {
        assert!(
            std::net::TcpListener::bind(("0.0.0.0", port)).is_err(),
            "port {port} should be taken for this test"
        );
    }
    let out = Command::new(example("embed"))
        .output()
        .expect("run embed example");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("received 3 datapoints, sent 3"), "{text}");
    assert!(text.contains("Invalid(NanValue)"), "{text}");
    assert!(text.contains("flushed: 1 queued, 0 dropped"), "{text}");
}

#[test]
fn file_source_example_delivers_every_valid_line() {
    let out = Command::new(example("file_source"))
        .output()
        .expect("run file_source example");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1000 accepted, 1 rejected"), "{text}");
    assert!(text.contains("Settled"), "{text}");
    let sent: u64 = text
        .lines()
        .filter_map(|l| l.split("sent ").nth(1))
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .sum();
    assert_eq!(sent, 1000, "{text}");
}

/// Values that panicked (`1e20` seconds: exit 101), that passed `check` and failed
/// at `run` without naming the key (a spill dir that is a file, `line_tcp` equal to
/// `pickle_tcp`, `max_connections = u64::MAX`), or that were accepted silently (NaN, negative,
/// port 0, an empty instance, `linger_ms = u64::MAX`). `check` and `run` both exit 2 on every
/// one, naming the key and the file, before binding anything.
#[test]
fn check_and_run_exit_2_on_values_that_crashed_or_slipped_through() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").expect("write file");
    let servers = "[destinations]\nservers = [\"127.0.0.1:2104:a\"]\n";
    let cases: Vec<(&str, String)> = vec![
        (
            "listen.idle_timeout_secs",
            format!("[listen]\nidle_timeout_secs = 1e20\n{servers}"),
        ),
        (
            "listen.idle_timeout_secs",
            format!("[listen]\nidle_timeout_secs = nan\n{servers}"),
        ),
        (
            "listen.idle_timeout_secs",
            format!("[listen]\nidle_timeout_secs = -5\n{servers}"),
        ),
        (
            "shutdown.grace_secs",
            format!("{servers}[shutdown]\ngrace_secs = 1e20\n"),
        ),
        (
            "destinations.spill.max_age_secs",
            format!(
                "{servers}[destinations.spill]\ndir = {:?}\nmax_age_secs = 1e20\n",
                dir.path().join("spill").display().to_string()
            ),
        ),
        (
            "listen.max_connections",
            format!("[listen]\nmax_connections = 18446744073709551615\n{servers}"),
        ),
        (
            "destinations.spill.dir",
            format!(
                "{servers}[destinations.spill]\ndir = {:?}\n",
                file.display().to_string()
            ),
        ),
        (
            "listen.pickle_tcp",
            format!(
                "[listen]\nline_tcp = \"127.0.0.1:2003\"\npickle_tcp = \"127.0.0.1:2003\"\n{servers}"
            ),
        ),
        (
            "destinations.linger_ms",
            "[destinations]\nservers = [\"127.0.0.1:2104:a\"]\nlinger_ms = 18446744073709551615\n"
                .into(),
        ),
        (
            "destinations.servers[0]",
            "[destinations]\nservers = [\"127.0.0.1:0:a\"]\n".into(),
        ),
        (
            "destinations.servers[0]",
            "[destinations]\nservers = [\"127.0.0.1:2104:\"]\n".into(),
        ),
    ];
    let path = dir.path().join("bad.toml");
    for (key, text) in &cases {
        // Ports that are free: nothing may be bound anyway, but a bind error must not mask
        // the configuration error.
        let text = text.replace("0.0.0.0:2003", "127.0.0.1:1");
        std::fs::write(&path, &text).expect("write config");
        for command in ["check", "run"] {
            let out = bin()
                .args([command, "--config"])
                .arg(&path)
                .output()
                .expect("run anthracite");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command} on {key}: {err}");
            assert!(
                err.contains(key) && err.contains("bad.toml"),
                "{command} on {key}: {err}"
            );
        }
    }
}
