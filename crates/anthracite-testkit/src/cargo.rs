//! Where this build's binaries are, and building a binary of another workspace package.
//!
//! Cargo hands a test binary its own package's binaries (`CARGO_BIN_EXE_<name>`), nothing
//! else. A test that runs another package's program — `anthracite bench` needs the harness
//! `anthracite-bench` beside `anthracite`, the Debian package ships both — asks
//! [`workspace_binary`] for it: Cargo builds it (a no-op when it is fresh) into the same
//! target directory and profile as the running test, so it lands beside the binaries Cargo
//! built for the test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::process::output_with_timeout;

/// A cold build of a package on a loaded 2-core machine.
const BUILD_TIMEOUT: Duration = Duration::from_secs(1_200);

/// The running test binary (`<target>/<profile>/deps/<test>-<hash>`).
fn current_exe() -> PathBuf {
    std::env::current_exe().expect("the test binary's own path")
}

/// The profile's output directory (`<target>/debug`): the directory of the running test
/// binary, above its `deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = current_exe();
    let dir = exe.parent().expect("the test binary's directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("the profile directory").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// The target directory (`<workspace>/target`, or `CARGO_TARGET_DIR`): the nearest directory
/// above the running test binary that holds Cargo's `CACHEDIR.TAG`.
pub fn target_dir() -> PathBuf {
    let exe = current_exe();
    exe.ancestors()
        .skip(1)
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| {
            profile_dir()
                .parent()
                .expect("the target directory")
                .to_path_buf()
        })
}

/// The Cargo profile of the running test binary (`dev` for `debug/`).
fn profile() -> String {
    match profile_dir().file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_owned(),
        Some(other) => other.to_owned(),
    }
}

/// Builds the workspace's binary `bin` with the running test's profile into its target
/// directory, and returns its path there (beside the binaries Cargo built for the test). Once
/// per test binary.
///
/// It builds what the test build compiled, not a second copy of it: with the whole
/// workspace's features, dev-dependencies included (selecting the examples turns them on),
/// which is how `cargo test` resolves them (one package alone resolves fewer features for
/// tokio, rustls, serde … and compiles those again), and without the variables Cargo sets
/// for a running test (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME` …: ring's build script reruns
/// when they change, and everything above ring with it).
///
/// # Panics
///
/// When the build fails or takes over 20 minutes, with Cargo's output.
pub fn workspace_binary(bin: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    let built = BUILT.get_or_init(Mutex::default);
    let mut built = built.lock().unwrap_or_else(|p| p.into_inner());
    let path = profile_dir().join(bin);
    if built.iter().any(|b| b == bin) {
        return path;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(super::workspace_root())
        .args([
            "build",
            "--profile",
            &profile(),
            "--workspace",
            "--examples",
            "--bin",
            bin,
        ])
        .env("CARGO_TARGET_DIR", target_dir());
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_for_a_test) {
            cmd.env_remove(name);
        }
    }
    let out = output_with_timeout(
        &format!("cargo build --workspace --bin {bin}"),
        cmd,
        Vec::new(),
        BUILD_TIMEOUT,
    );
    assert!(
        out.status.success() && path.is_file(),
        "cargo build --workspace --bin {bin} did not produce {}:\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    built.push(bin.to_owned());
    path
}

/// A variable Cargo sets for the test it runs, not one of the caller's (`CARGO_HOME`,
/// `CARGO_INCREMENTAL`, `CARGO_TARGET_DIR` … stay).
fn set_for_a_test(name: &str) -> bool {
    [
        "CARGO_MANIFEST_",
        "CARGO_PKG_",
        "CARGO_BIN_",
        "CARGO_CRATE_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "OUT_DIR",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}
