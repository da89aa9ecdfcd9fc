//! `anthracite` as a real process: the one way a test runs the relay's binary.
//!
//! A [`RelayCommand`] says how to start it — the binary (a test has it as
//! `env!("CARGO_BIN_EXE_anthracite")`), a relay.toml to write or a configuration to point at,
//! further arguments and environment, where its log goes — and [`RelayCommand::start`] gives
//! a [`RelayProcess`]: stdout and stderr appended to its log file, waits for readiness (the
//! admin endpoint's `/ready`, its ports, a log line) that fail with the log's tail when the
//! process exits first, signals by PID, and a stop by PID (SIGTERM, then SIGKILL) when it is
//! dropped. A relay dropped while its test panics keeps its log — copied to
//! `<target>/tmp/failed-relays/<test>/`, since a test's temporary directory goes with it —
//! and prints its tail, so a failing test shows what the relay said.

use std::ffi::OsString;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::process::ManagedChild;

/// How long a relay gets to become ready (start-up on a loaded 2-core machine).
const READY_LIMIT: Duration = Duration::from_secs(60);
/// Log lines a failing test shows.
const TAIL_ON_FAILURE: usize = 40;

/// How to start one `anthracite` process.
#[derive(Clone, Debug)]
pub struct RelayCommand {
    program: PathBuf,
    name: String,
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    log: Option<PathBuf>,
    config_dir: Option<PathBuf>,
    current_dir: Option<PathBuf>,
    max_open_files: Option<u32>,
}

impl RelayCommand {
    /// The relay binary at `program`, named `anthracite` in messages, with no arguments yet
    /// and `RUST_LOG=info` (what the relay does without it), so that its log says enough
    /// when a test fails.
    pub fn new(program: impl Into<PathBuf>) -> RelayCommand {
        RelayCommand {
            program: program.into(),
            name: "anthracite".to_owned(),
            args: Vec::new(),
            env: vec![("RUST_LOG".into(), Some("info".into()))],
            log: None,
            config_dir: None,
            current_dir: None,
            max_open_files: None,
        }
    }

    /// Its name in messages, and the stem of the files [`toml`](Self::toml) writes and of
    /// its log.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// `run --config <path>`; the log goes beside the configuration (`<name>.log`) unless
    /// [`log`](Self::log) says otherwise.
    pub fn config(mut self, path: &Path) -> Self {
        self.args.push("run".into());
        self.args.push("--config".into());
        self.args.push(path.into());
        self.config_dir = path.parent().map(Path::to_path_buf);
        self
    }

    /// Writes `toml` to `<dir>/<name>.toml` and runs on it ([`config`](Self::config)).
    ///
    /// # Panics
    ///
    /// When the file cannot be written.
    pub fn toml(self, dir: &Path, toml: &str) -> Self {
        let path = dir.join(format!("{}.toml", self.name));
        std::fs::write(&path, toml).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        self.config(&path)
    }

    /// One more argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// More arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// An environment variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), Some(value.into())));
        self
    }

    /// Environment variables.
    pub fn envs<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<OsString>,
        V: Into<OsString>,
    {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), Some(v.into()))));
        self
    }

    /// Removes a variable the test process has from the relay's environment.
    pub fn env_remove(mut self, key: impl Into<OsString>) -> Self {
        self.env.push((key.into(), None));
        self
    }

    /// Where stdout and stderr go (created afresh).
    pub fn log(mut self, path: impl Into<PathBuf>) -> Self {
        self.log = Some(path.into());
        self
    }

    /// Its working directory (default: the test's).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// Runs it with at most `n` open file descriptors (`ulimit -n`).
    pub fn max_open_files(mut self, n: u32) -> Self {
        self.max_open_files = Some(n);
        self
    }

    /// Starts it; returns at once (see the `wait_*` methods of [`RelayProcess`]).
    ///
    /// # Panics
    ///
    /// When the process cannot be spawned, or no log path was given or can be derived.
    pub fn start(self) -> RelayProcess {
        let log = self.log.clone().unwrap_or_else(|| {
            let dir = self.config_dir.clone().unwrap_or_else(|| {
                panic!(
                    "relay {}: say where its log goes (RelayCommand::log)",
                    self.name
                )
            });
            dir.join(format!("{}.log", self.name))
        });
        let mut cmd = match self.max_open_files {
            None => Command::new(&self.program),
            Some(n) => {
                // The shell execs the relay: the PID stays the relay's.
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(&self.program);
                c
            }
        };
        cmd.args(&self.args);
        if let Some(dir) = &self.current_dir {
            cmd.current_dir(dir);
        }
        for (key, value) in &self.env {
            match value {
                Some(v) => cmd.env(key, v),
                None => cmd.env_remove(key),
            };
        }
        RelayProcess {
            name: self.name.clone(),
            child: ManagedChild::spawn(&self.name, cmd, log),
        }
    }
}

/// A running `anthracite`, stopped by PID on drop.
pub struct RelayProcess {
    /// Its name, for messages.
    pub name: String,
    child: ManagedChild,
}

impl RelayProcess {
    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Sends `signal` (`KILL`, `TERM`, `HUP`, `STOP`, `CONT`) to this process only.
    ///
    /// # Panics
    ///
    /// When `kill` fails (the process is gone).
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{signal} {} ({})", self.pid(), self.name);
    }

    /// `Some(status)` once it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.exited()
    }

    /// Panics, with the log's tail, if it has exited.
    pub fn assert_running(&mut self, waiting_for: &str) {
        self.child.assert_running(waiting_for);
    }

    /// Waits for it to exit (after a signal the test sent); panics with `what` and the log's
    /// tail after `timeout` (a deadline for a hung test, never a timing assertion).
    pub fn wait_exit(&mut self, timeout: Duration, what: &str) -> ExitStatus {
        self.child.wait_exit(timeout, what)
    }

    /// [`wait_exit`](Self::wait_exit) for async tests.
    pub async fn exit_status(&mut self, limit: Duration) -> ExitStatus {
        let end = tokio::time::Instant::now() + limit;
        loop {
            if let Some(s) = self.child.exited() {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < end,
                "{} did not exit:\n{}",
                self.name,
                self.child.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `done` holds, checking that the relay still runs; panics with `what` and
    /// the log's tail after `limit`.
    pub fn wait_until(&mut self, what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !done() {
            self.assert_running(what);
            assert!(
                Instant::now() < deadline,
                "{}: timed out after {limit:?} waiting for {what}\n{}",
                self.name,
                self.log_tail(TAIL_ON_FAILURE)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until its admin endpoint at `admin` answers 200 on `/ready`.
    pub fn wait_ready(&mut self, admin: SocketAddr) {
        self.wait_until("/ready", READY_LIMIT, || {
            matches!(super::http::get(admin, "/ready"), Ok((200, _)))
        });
    }

    /// Waits until every one of `ports` on 127.0.0.1 accepts connections.
    pub fn wait_listening(&mut self, ports: &[u16]) {
        for &port in ports {
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            self.wait_until(&format!("a listener on {addr}"), READY_LIMIT, || {
                TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            });
        }
    }

    /// Waits until its log holds `needle`.
    pub fn wait_log(&mut self, needle: &str, limit: Duration) {
        let log = self.log_path().to_path_buf();
        self.wait_until(&format!("{needle:?} in its log"), limit, || {
            std::fs::read_to_string(&log).is_ok_and(|t| t.contains(needle))
        });
    }

    /// Stops it: SIGTERM, up to 5 s, then SIGKILL. Idempotent.
    pub fn stop(&mut self) {
        self.child.stop();
    }

    /// Kills it with SIGKILL and reaps it: a crash, no chance to clean up.
    pub fn kill(&mut self) {
        self.child.kill();
    }

    /// Its whole log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.child.log).unwrap_or_default()
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        self.child.log_tail(n)
    }

    /// Where its log is.
    pub fn log_path(&self) -> &Path {
        &self.child.log
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        // libtest names each test's thread after the test.
        let test = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .replace("::", "-");
        let kept = super::target_tmp().join("failed-relays").join(test);
        let copy = kept.join(format!(
            "{}-{}.log",
            self.name.replace(' ', "_"),
            self.pid()
        ));
        let saved = std::fs::create_dir_all(&kept)
            .and_then(|()| std::fs::copy(&self.child.log, &copy))
            .map_or_else(
                |e| format!("not kept: {e}"),
                |_| format!("kept as {}", copy.display()),
            );
        eprintln!(
            "--- {} (pid {}), {} ({saved}), tail ---\n{}",
            self.name,
            self.pid(),
            self.child.log.display(),
            self.log_tail(TAIL_ON_FAILURE)
        );
    }
}

/// A scratch directory `<target>/tmp/<suite>/<test>/` for configs and logs, emptied first and
/// kept after the test (its logs stay readable when it fails).
pub fn scratch(suite: &str, test: &str) -> PathBuf {
    let dir = super::target_tmp().join(suite).join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("create scratch dir {}: {e}", dir.display()));
    dir
}
