//! The `anthracite` binary: `check`, `route`, `config --example`, `run` stopped by SIGTERM,
//! and the bare binary on carbon-relay's defaults.

use anthracite_testkit as testkit;

use std::io::Write;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use anthracite_sink::{Sink, SinkProtocol};
use testkit::process::output_with_timeout;
use testkit::relay_process::RelayCommand;

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
    assert!(
        path.exists(),
        "example `{name}` not built at {}: `cargo test` builds the examples; a run of one test \
         binary (`cargo test --test relay`) needs `cargo build --examples` first",
        path.display()
    );
    path
}

#[test]
fn embed_example_runs_while_carbon_ports_are_taken() {
    let _turn = testkit::fixed_ports_turn();
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

/// `anthracite` with no arguments, in a directory with no relay.toml, is carbon-relay 1.1.10
/// as its carbon.conf.example sets it up: a line sent to 127.0.0.1:2013 reaches the
/// carbon-cache on 127.0.0.1:2004 in pickle, and the admin answers on 127.0.0.1:8080.
#[test]
fn bare_binary_in_an_empty_directory_relays_2013_to_a_carbon_cache_on_2004() {
    let _turn = testkit::fixed_ports_turn();
    testkit::assert_ports_free(&[2013, 2014, 2004, 8080]);
    let cache = Sink::start_on("carbon-cache", SinkProtocol::Pickle, 2004);
    let empty = tempfile::tempdir().expect("tempdir");
    let logs = tempfile::tempdir().expect("tempdir");
    let mut relay = RelayCommand::new(env!("CARGO_BIN_EXE_anthracite"))
        .current_dir(empty.path())
        .log(logs.path().join("relay.log"))
        .start();

    let admin = ([127, 0, 0, 1], 8080).into();
    relay.wait_ready(admin);
    let (status, body) = testkit::http::get(admin, "/healthz").expect("GET /healthz");
    assert_eq!(status, 200, "{body}");
    let now = testkit::unix_now();
    testkit::send_lines(
        ([127, 0, 0, 1], 2013).into(),
        &[("bare.binary.relayed".into(), now, 42.0)],
    );
    relay.wait_until(
        "the datapoint to reach the carbon-cache on 127.0.0.1:2004",
        Duration::from_secs(30),
        || {
            cache.received().iter().any(|r| {
                r.path == "bare.binary.relayed" && r.value == 42.0 && r.timestamp == now as f64
            })
        },
    );
    assert!(cache.errors().is_empty(), "{:?}", cache.errors());

    let log = relay.log();
    let told: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("carbon-relay 1.1.10's defaults"))
        .collect();
    assert_eq!(told.len(), 1, "one line says so:\n{log}");
    for part in [
        "INFO",
        "0.0.0.0:2013",
        "0.0.0.0:2014",
        "127.0.0.1:2004 (pickle)",
        "127.0.0.1:8080",
        "anthracite config --example > relay.toml",
    ] {
        assert!(
            told[0].contains(part),
            "{part:?} missing from {:?}",
            told[0]
        );
    }

    relay.signal("TERM");
    let exit = relay.wait_exit(Duration::from_secs(30), "the relay to stop on SIGTERM");
    assert!(exit.success(), "{exit}\n{}", relay.log_tail(30));
    assert_eq!(
        std::fs::read_dir(empty.path()).expect("read dir").count(),
        0,
        "the relay wrote nothing into its working directory"
    );
}

/// `anthracite config --example` prints relay.toml.example, and what it prints is a
/// configuration `anthracite check` accepts, found as ./relay.toml with no `--config`.
#[test]
fn config_example_is_the_repository_example_and_passes_check() {
    let out = bin()
        .args(["config", "--example"])
        .output()
        .expect("run anthracite config --example");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let example = std::fs::read(repo_file("relay.toml.example")).expect("relay.toml.example");
    assert!(out.stdout == example, "the output is relay.toml.example");

    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("relay.toml"), &out.stdout).expect("write relay.toml");
    let mut check = bin();
    check.arg("check").current_dir(dir.path());
    let out = output_with_timeout(
        "anthracite check",
        check,
        Vec::new(),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("# relay.toml: OK\n"), "{stdout}");
}

/// An explicit `--config` that does not exist is a configuration error (exit 2), never a
/// reason to fall back to carbon-relay's defaults, for `run` as for `check` and `route`.
#[test]
fn explicit_missing_config_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.toml");
    for command in ["run", "check", "route"] {
        let mut cmd = bin();
        cmd.arg(command)
            .arg("--config")
            .arg(&missing)
            .current_dir(dir.path());
        if command == "route" {
            cmd.arg("a.b");
        }
        let out = output_with_timeout("anthracite", cmd, Vec::new(), Duration::from_secs(60));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {err}");
        assert!(
            err.contains("missing.toml") && !err.contains("defaults"),
            "{command}: {err}"
        );
    }
}
