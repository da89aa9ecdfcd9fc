//! The Python 3.11 venv with the real carbon 1.1.10, built once per checkout.
//!
//! It lives under `target/tmp/`, so it survives between test binaries
//! and runs. Test binaries run in parallel, so creation is serialized by an exclusive lock on a
//! lock file, and a completion marker (holding the package list) is written only after the
//! install and an import check succeeded; a half-built venv (no marker) is deleted and rebuilt,
//! and a complete one whose marker lists other packages gets the missing ones installed.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use super::process::output_with_timeout;

/// Packages installed into the venv: carbon as its setup notes prescribe, plus what carbon's
/// optional plugins import — `protobuf` for `carbon.protobuf` (the protobuf receiver and
/// `DESTINATION_PROTOCOL = protobuf`; 3.20 runs the `carbon_pb2` carbon ships, newer releases
/// refuse its hand-built descriptors), `pyOpenSSL` and `service_identity` for
/// `DESTINATION_TRANSPORT = ssl`.
const PACKAGES: [&str; 6] = [
    "carbon==1.1.10",
    "whisper==1.1.10",
    "mmh3",
    "protobuf==3.20.3",
    "pyOpenSSL",
    "service_identity",
];
/// What the finished venv must import.
const IMPORT_CHECK: &str = "import carbon, carbon.routers, carbon.util, whisper, mmh3, \
     carbon.protobuf, carbon.carbon_pb2, OpenSSL.SSL, service_identity, twisted.internet.ssl";
const MARKER: &str = ".anthracite-carbon-ready";
/// Downloads and builds (Twisted, carbon from sdist) on a slow, shared machine.
const PIP_TIMEOUT: Duration = Duration::from_secs(900);

/// Returns the venv directory, creating it (once per checkout) if needed. Panics with a clear
/// message (and pip's output) when it cannot be built: tests that need carbon never skip.
pub fn carbon_venv() -> PathBuf {
    // A failed build is remembered, so the other tests of this binary fail at once with the
    // same message instead of running pip again.
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let venv = VENV.get_or_init(|| {
        std::panic::catch_unwind(build_once).map_err(|panic| {
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "building the carbon venv panicked".into())
        })
    });
    match venv {
        Ok(path) => path.clone(),
        Err(msg) => panic!("no carbon 1.1.10 venv: {msg}"),
    }
}

fn build_once() -> PathBuf {
    let base = super::target_tmp();
    fs::create_dir_all(&base).unwrap_or_else(|e| panic!("create {}: {e}", base.display()));
    let venv = base.join("carbon-1.1.10-venv");
    let lock_path = base.join("carbon-1.1.10-venv.lock");
    let lock = File::create(&lock_path)
        .unwrap_or_else(|e| panic!("create lock file {}: {e}", lock_path.display()));
    // Blocks while another test binary builds the venv; released when `lock` drops.
    // File::lock is Rust 1.89; Cargo.toml still says rust-version 1.85 (not this file's call).
    #[allow(clippy::incompatible_msrv)]
    lock.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", lock_path.display()));
    let marker = venv.join(MARKER);
    match fs::read_to_string(&marker) {
        Ok(text) if text == marker_text() => {}
        Ok(_) => upgrade(&venv),
        Err(_) => build(&venv),
    }
    venv
}

/// The venv's Python interpreter.
pub fn venv_python() -> PathBuf {
    carbon_venv().join("bin").join("python")
}

fn marker_text() -> String {
    format!("{}\n", PACKAGES.join("\n"))
}

/// A complete venv built for an older package list: install the current list into it.
fn upgrade(venv: &Path) {
    install(venv);
    import_check(venv);
    fs::write(venv.join(MARKER), marker_text())
        .unwrap_or_else(|e| panic!("write completion marker in {}: {e}", venv.display()));
}

fn install(venv: &Path) {
    // `python -m pip`, not `bin/pip`: a venv copied with its `target/` (a worktree) keeps
    // scripts whose `#!` still names the original venv's interpreter.
    let mut cmd = Command::new(venv.join("bin").join("python"));
    cmd.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
    ])
    .args(["--no-binary", "carbon"])
    .args(PACKAGES)
    // Stops carbon's setup.py from forcing the /opt/graphite prefix.
    .env("GRAPHITE_NO_PREFIX", "True");
    let out = output_with_timeout("pip install", cmd, Vec::new(), PIP_TIMEOUT);
    check(
        &out,
        &format!(
            "GRAPHITE_NO_PREFIX=True pip install --no-binary carbon {}",
            PACKAGES.join(" ")
        ),
    );
}

fn import_check(venv: &Path) {
    let python = venv.join("bin").join("python");
    let mut cmd = Command::new(&python);
    cmd.args(["-c", IMPORT_CHECK]);
    let out = output_with_timeout("import check", cmd, Vec::new(), Duration::from_secs(60));
    check(&out, &format!("import check `{IMPORT_CHECK}` in the venv"));
}

fn build(venv: &Path) {
    let started = std::time::Instant::now();
    if venv.exists() {
        // A previous attempt died half-way: start clean.
        fs::remove_dir_all(venv)
            .unwrap_or_else(|e| panic!("remove half-built venv {}: {e}", venv.display()));
    }
    let mut cmd = Command::new("python3.11");
    cmd.arg("-m").arg("venv").arg(venv);
    if let Err(e) = Command::new("python3.11").arg("--version").output() {
        panic!(
            "cannot run python3.11 ({e}): carbon 1.1.10 needs Python 3.11 exactly \
             (it does not run on 3.12+); install python3.11 and put it on PATH"
        );
    }
    let out = output_with_timeout(
        "python3.11 -m venv",
        cmd,
        Vec::new(),
        Duration::from_secs(120),
    );
    check(&out, "python3.11 -m venv");

    install(venv);
    import_check(venv);
    for script in ["carbon-cache.py", "carbon-relay.py"] {
        let path = venv.join("bin").join(script);
        assert!(
            path.exists(),
            "carbon installed but {} is missing",
            path.display()
        );
    }

    fs::write(venv.join(MARKER), marker_text())
        .unwrap_or_else(|e| panic!("write completion marker in {}: {e}", venv.display()));
    eprintln!(
        "support: built carbon 1.1.10 venv at {} in {:.1}s",
        venv.display(),
        started.elapsed().as_secs_f64()
    );
}

fn check(out: &Output, what: &str) {
    if !out.status.success() {
        panic!(
            "{what} failed ({}).\n--- stdout (tail) ---\n{}\n--- stderr ---\n{}",
            out.status,
            tail(&String::from_utf8_lossy(&out.stdout), 30),
            tail(&String::from_utf8_lossy(&out.stderr), 60),
        );
    }
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs `script` (Python source) in the venv with `input` as JSON on stdin and parses its stdout
/// as JSON. Bounded by `timeout`; panics with the script's stderr on failure.
pub fn run_python_json<T: serde::de::DeserializeOwned>(
    what: &str,
    script: &str,
    input: &serde_json::Value,
    timeout: Duration,
) -> T {
    let mut cmd = Command::new(venv_python());
    cmd.args(["-c", script]).env("PYTHONIOENCODING", "utf-8");
    let body = serde_json::to_vec(input).expect("serialize python input");
    let out = output_with_timeout(what, cmd, body, timeout);
    check(&out, what);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: python printed invalid JSON ({e}): {}",
            tail(&String::from_utf8_lossy(&out.stdout), 5)
        )
    })
}
