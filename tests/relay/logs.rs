//! Log output of the `anthracite` binary: `--log-format json` (or `[log] format`) gives one
//! JSON object per line; text logs written to a file carry no terminal escape codes; both
//! start with one line naming the version, the config file, the listeners and the
//! destinations.

use anthracite_testkit as testkit;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Runs the relay on `config` with `args` until it is listening, stops it with SIGTERM and
/// returns its stderr.
fn run_and_stop(dir: &Path, config: &str, args: &[&str]) -> String {
    let ports = testkit::free_ports(1);
    let name = format!("relay-{}", ports[0]);
    let path = dir.join(format!("{name}.toml"));
    let mut relay = crate::anthracite(&name)
        .toml(
            dir,
            &format!(
                "[listen]\nline_tcp = \"127.0.0.1:{}\"\npickle_tcp = \"\"\n{config}",
                ports[0]
            ),
        )
        .args(args)
        .start();
    relay.wait_listening(&ports);
    relay.stop();
    let status = relay.exited().expect("stopped");
    assert!(status.success(), "exit {status}: {}", relay.log_tail(20));
    let text = relay.log();
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

/// One client reconnecting in a loop, each connection sending one over-limit length
/// prefix, wrote 142,680 WARN lines in 10 s (one per connection), and mutated protobuf frames
/// 11,459 in 30 s. Per-connection warnings are now one relay-wide episode each: 10 s of
/// reconnecting bad clients (pickle and protobuf, over-limit prefixes and frames that do not
/// decode) write at most 100 lines, start-up and shutdown included, while every bad frame is
/// still counted.
#[test]
fn reconnecting_bad_clients_write_at_most_100_log_lines_in_10_s() {
    use std::io::Write;
    use std::net::{SocketAddr, TcpStream};
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = testkit::free_ports(3);
    let mut relay = crate::anthracite("relay")
        .toml(
            dir.path(),
            &format!(
            "[listen]\nline_tcp = \"\"\npickle_tcp = \"127.0.0.1:{}\"\nprotobuf_tcp = \"127.0.0.1:{}\"\n\
             [admin]\nlisten = \"127.0.0.1:{}\"\n{DESTINATIONS}",
            ports[0], ports[1], ports[2]
            ),
        )
        .start();
    let admin = SocketAddr::from(([127, 0, 0, 1], ports[2]));
    relay.wait_ready(admin);
    let pickle = SocketAddr::from(([127, 0, 0, 1], ports[0]));
    let protobuf = SocketAddr::from(([127, 0, 0, 1], ports[1]));
    // A frame that is not a protobuf message (a truncated field), then an over-limit prefix.
    let mutated: &[u8] = &[0, 0, 0, 3, 0x0a, 0x7f, 0x01, 0xff, 0xff, 0xff, 0xf0];
    let start = Instant::now();
    // Bounded in count too: the client side's closed sockets wait in TIME_WAIT, and the
    // ephemeral ports must last.
    let (mut pickles, mut protobufs) = (0u64, 0u64);
    while start.elapsed() < Duration::from_secs(10) && pickles + protobufs < 10_000 {
        if let Ok(mut c) = TcpStream::connect(pickle) {
            c.write_all(&[0xff, 0xff, 0xff, 0xff]).expect("send prefix");
            pickles += 1;
        }
        if let Ok(mut c) = TcpStream::connect(protobuf) {
            c.write_all(mutated).expect("send mutated frame");
            protobufs += 1;
        }
    }
    let connections = pickles + protobufs;
    assert!(connections > 100, "only {connections} connections in 10 s");
    let invalid = |reason: &str| {
        let text = testkit::http::get(admin, "/metrics").map_or(String::new(), |(_, b)| b);
        testkit::http::sum(
            &testkit::http::parse_metrics(&text),
            "anthracite_invalid_datapoints_total",
            &[("reason", reason)],
        ) as u64
    };
    // Every bad client is counted (its connection closed on the over-limit prefix).
    let deadline = Instant::now() + Duration::from_secs(60);
    while invalid("frame_too_long") < connections && Instant::now() < deadline {
        relay.assert_running("the bad frames to be counted");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(invalid("frame_too_long"), connections);
    assert_eq!(invalid("bad_protobuf"), protobufs);
    relay.stop();
    let text = relay.log();
    let lines = text.lines().count();
    assert!(
        lines <= 100,
        "{lines} log lines for {connections} bad connections; the first 20:\n{}",
        text.lines().take(20).collect::<Vec<_>>().join("\n")
    );
}
