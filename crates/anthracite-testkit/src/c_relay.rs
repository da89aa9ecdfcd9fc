//! The real carbon-c-relay 3.7.3: Debian's `carbon-c-relay` package, installed with apt when
//! missing (as the operator tests install their tools), run in its test modes (`-t`, `-t -t`)
//! on a configuration and input, or started as a relay (Debian's build, or the source-built
//! one with every transport from [`super::c_relay_build`]).

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use super::apt;
use super::process::output_with_timeout;

/// How long one run of `carbon-c-relay -t` may take.
const TEST_MODE_TIMEOUT: Duration = Duration::from_secs(60);

/// Makes sure `carbon-c-relay` (Debian's 3.7.3) is on PATH, installing it if needed; panics
/// with what to do otherwise. Returns its `-v` line.
pub fn require() -> String {
    apt::require("carbon-c-relay", "carbon-c-relay");
    let out = Command::new("carbon-c-relay")
        .arg("-v")
        .output()
        .unwrap_or_else(|e| panic!("carbon-c-relay -v: {e}"));
    let version = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        version.contains("carbon-c-relay v3.7.3"),
        "the carbon-c-relay on PATH is not 3.7.3 (the version anthracite is checked against): \
         {version}"
    );
    version
}

/// `carbon-c-relay -t [args] -f conf` in `cwd` with `input` on stdin.
pub fn test_mode(conf: &Path, cwd: &Path, args: &[&str], input: &[u8]) -> Output {
    let mut cmd = Command::new("carbon-c-relay");
    cmd.arg("-t")
        .args(args)
        .arg("-f")
        .arg(conf)
        .current_dir(cwd);
    output_with_timeout("carbon-c-relay -t", cmd, input.to_vec(), TEST_MODE_TIMEOUT)
}

/// `carbon-c-relay -t -t -f conf` in `cwd`: whether it accepts the configuration.
pub fn accepts(conf: &Path, cwd: &Path) -> bool {
    let mut cmd = Command::new("carbon-c-relay");
    cmd.args(["-t", "-t", "-f"]).arg(conf).current_dir(cwd);
    output_with_timeout("carbon-c-relay -t -t", cmd, Vec::new(), TEST_MODE_TIMEOUT)
        .status
        .success()
}

/// What `-t` prints once what names the machine and the moment is removed, as carbon-c-relay's
/// own test suite cleans it (`run-test.sh`): the start line, the settings from
/// `configuration:` through `parsed configuration follows:`, and the address in the stub
/// names of `-d` output.
pub fn without_settings(stdout: &[u8]) -> String {
    let text = String::from_utf8_lossy(stdout);
    let mut out = String::new();
    let mut skipping = false;
    for line in text.split_inclusive('\n') {
        if line.starts_with("configuration:") {
            skipping = true;
        }
        if !skipping && !line.contains("starting carbon-c-relay v") {
            out.push_str(&stub_addresses(line));
        }
        if line.starts_with("parsed configuration follows:") {
            skipping = false;
        }
    }
    out
}

/// `s/_stub_[0-9a-fx][0-9a-fx]*__/_stub_0xc0d3__/` (every occurrence).
fn stub_addresses(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find("_stub_") {
        let after = &rest[i + 6..];
        let n = after
            .bytes()
            .take_while(|b| b.is_ascii_hexdigit() || *b == b'x')
            .count();
        if n > 0 && after[n..].starts_with("__") {
            out.push_str(&rest[..i]);
            out.push_str("_stub_0xc0d3__");
            rest = &after[n + 2..];
        } else {
            out.push_str(&rest[..i + 6]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A running carbon-c-relay (`carbon-c-relay -f conf args…`), stopped by PID on drop.
pub struct CRelay {
    child: super::process::ManagedChild,
}

/// How many times [`CRelay::start`] starts carbon-c-relay again when it dies at once.
const START_TRIES: usize = 5;

impl CRelay {
    /// Starts carbon-c-relay on `conf` in `cwd` (its `include`s are read from there) with
    /// `args`, its log in `cwd/carbon-c-relay.log`, and waits until it accepts connections on
    /// `ready` (a TCP listener of the configuration). 3.7.3 sometimes dies right after it
    /// starts listening (a segfault in libc, before its statistics collector starts): it is
    /// started again, up to five times, as `bench/c-relay.sh` does.
    pub fn start(conf: &Path, cwd: &Path, args: &[&str], ready: std::net::SocketAddr) -> CRelay {
        Self::start_binary(Path::new("carbon-c-relay"), conf, cwd, args, ready)
    }

    /// [`start`](Self::start) with another build of carbon-c-relay 3.7.3 (the source-built
    /// one with every transport: [`super::c_relay_build::binary`]).
    pub fn start_binary(
        binary: &Path,
        conf: &Path,
        cwd: &Path,
        args: &[&str],
        ready: std::net::SocketAddr,
    ) -> CRelay {
        let log = cwd.join("carbon-c-relay.log");
        for _ in 0..START_TRIES {
            let mut cmd = Command::new(binary);
            cmd.arg("-f").arg(conf).args(args).current_dir(cwd);
            let mut child = super::process::ManagedChild::spawn("carbon-c-relay", cmd, log.clone());
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            let mut up = false;
            while std::time::Instant::now() < deadline && child.exited().is_none() {
                if std::net::TcpStream::connect_timeout(&ready, Duration::from_millis(200)).is_ok()
                {
                    up = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            // The early crash comes within moments of listening.
            std::thread::sleep(Duration::from_millis(300));
            match child.exited() {
                None if up => return CRelay { child },
                // A refusal (usage, configuration): starting again changes nothing.
                Some(status) if status.code().is_some() => panic!(
                    "carbon-c-relay exited with {status}:\n{}",
                    child.log_tail(40)
                ),
                _ => {}
            }
            if child.exited().is_none() {
                panic!(
                    "carbon-c-relay does not listen on {ready} after 20 s\n{}",
                    child.log_tail(40)
                );
            }
        }
        panic!(
            "carbon-c-relay died on start {START_TRIES} times in a row; its log ({}):\n{}",
            log.display(),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        self.child.log_tail(n)
    }
}
