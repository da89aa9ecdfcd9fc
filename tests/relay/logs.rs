//! Log output of the `anthracite` binary: `--log-format json` (or `[log] format`) gives one
//! JSON object per line; text logs written to a file carry no terminal escape codes; both
//! start with one line naming the version, the config file, the listeners and the
//! destinations.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::process::ManagedChild;

/// Runs the relay on `config` with `args` until it is listening, stops it with SIGTERM and
/// returns its stderr.
fn run_and_stop(dir: &Path, config: &str, args: &[&str]) -> String {
    let ports = support::free_ports(1);
    let path = dir.join(format!("relay-{}.toml", ports[0]));
    std::fs::write(
        &path,
        format!(
            "[listen]\nline_tcp = \"127.0.0.1:{}\"\npickle_tcp = \"\"\n{config}",
            ports[0]
        ),
    )
    .expect("write config");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_anthracite"));
    cmd.args(["run", "--config"]).arg(&path).args(args);
    cmd.env("RUST_LOG", "info");
    let log = dir.join(format!("relay-{}.log", ports[0]));
    let mut relay = ManagedChild::spawn("anthracite", cmd, log.clone());
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", ports[0])).is_err() {
        relay.assert_running("the relay to listen");
        assert!(Instant::now() < deadline, "relay did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    relay.stop();
    let status = relay.exited().expect("stopped");
    assert!(status.success(), "exit {status}: {}", relay.log_tail(20));
    let text = std::fs::read_to_string(&log).expect("read log");
    assert!(
        text.contains(&path.display().to_string()),
        "config file named:\n{text}"
    );
    text
}

const DESTINATIONS: &str =
    "[destinations]\nservers = [\"127.0.0.1:1:a\"]\n[telemetry]\ninterval_secs = 0\n";

#[test]
fn json_log_lines_parse_and_text_logs_to_a_file_have_no_escape_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (config, args) in [
        (DESTINATIONS.to_string(), &["--log-format", "json"][..]),
        (format!("{DESTINATIONS}[log]\nformat = \"json\"\n"), &[][..]),
    ] {
        let text = run_and_stop(dir.path(), &config, args);
        let mut startup = None;
        for line in text.lines().filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}\n{text}"));
            if v["fields"]["message"] == "anthracite running" {
                startup = Some(v);
            }
        }
        let startup = startup.unwrap_or_else(|| panic!("no startup line:\n{text}"));
        let f = &startup["fields"];
        assert_eq!(f["version"], env!("CARGO_PKG_VERSION"), "{startup}");
        assert!(
            f["line_tcp"]
                .as_str()
                .is_some_and(|a| a.starts_with("127.0.0.1:"))
        );
        assert_eq!(f["destinations"], "127.0.0.1:1:a", "{startup}");
        assert_eq!(f["admin"], "off", "{startup}");
    }
    // Text is the default; stderr is a file here, so no colours.
    let text = run_and_stop(dir.path(), DESTINATIONS, &[]);
    assert!(
        !text.contains('\u{1b}'),
        "escape codes in a log file:\n{text:?}"
    );
    let startup = text
        .lines()
        .find(|l| l.contains("anthracite running"))
        .unwrap_or_else(|| panic!("no startup line:\n{text}"));
    assert!(
        startup.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            || startup.contains(&format!("version={}", env!("CARGO_PKG_VERSION"))),
        "{startup}"
    );
    assert!(startup.contains("destinations=127.0.0.1:1:a"), "{startup}");
}

#[test]
fn version_names_the_enabled_features() {
    let out = Command::new(env!("CARGO_BIN_EXE_anthracite"))
        .arg("--version")
        .output()
        .expect("run anthracite --version");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!(
            "anthracite {} (features: ",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    assert!(text.contains("kinesis"), "{text}");
}
