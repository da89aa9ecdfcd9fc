//! The documentation checked against the code: README.md, `docs/*.md` and
//! `relay.toml.example` say only what the binary does.
//!
//! - `blocks`: every TOML block passes `anthracite check`, and every shell block marked
//!   runnable runs;
//! - `links`: every relative link, anchor and repository path resolves;
//! - `words`: no commit hashes, issue numbers or working notes;
//! - `defaults`, `example`, `schema`: every default shown (the configuration reference, the
//!   example configuration, the schema's doc comments) is what `anthracite check` resolves,
//!   every key is documented, and the documented ranges hold at their bounds.
//!
//! No servers: the only processes are `anthracite check` and the runnable shell blocks, each
//! bounded in time and stopped by its id.

mod blocks;
mod defaults;
mod example;
mod links;
mod markdown;
mod schema;
mod words;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The repository's root (the root package's manifest directory).
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The `anthracite` binary this test run built.
fn anthracite() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_anthracite"))
}

/// How long one process of these tests may run.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `cmd` to completion, or kills it (by its id) after [`PROCESS_TIMEOUT`] and fails.
fn run_bounded(mut cmd: Command, what: &str) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let deadline = Instant::now() + PROCESS_TIMEOUT;
    // The pipes are read on threads so a chatty process cannot block on a full pipe.
    let out = child.stdout.take().map(drain);
    let err = child.stderr.take().map(drain);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what} (pid {}) ran over {PROCESS_TIMEOUT:?}", child.id());
            }
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    };
    let join = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
        h.map(|h| h.join().unwrap_or_default()).unwrap_or_default()
    };
    Output {
        status,
        stdout: join(out),
        stderr: join(err),
    }
}

fn drain(mut pipe: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        buf
    })
}

/// `anthracite check --config FILE`: the resolved configuration's text, or the error output.
fn check(config: &Path) -> Result<String, String> {
    let mut cmd = Command::new(anthracite());
    cmd.arg("check").arg("--config").arg(config);
    if let Some(dir) = config.parent() {
        cmd.current_dir(dir);
    }
    let out = run_bounded(
        cmd,
        &format!("anthracite check --config {}", config.display()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{}\n{stdout}{stderr}", out.status))
    }
}

/// A scratch directory for one check.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// The documentation pages: README.md and every `docs/*.md`, paths relative to the root.
fn pages() -> Vec<(PathBuf, String)> {
    let mut paths = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .filter_map(|p| p.strip_prefix(root()).ok().map(Path::to_path_buf))
        .collect();
    docs.sort();
    paths.extend(docs);
    assert!(paths.len() > 1, "docs/ holds the documentation pages");
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(root().join(&p))
                .unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
            (p, text)
        })
        .collect()
}
