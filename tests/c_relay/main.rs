//! anthracite on carbon-c-relay's configuration language, against the real carbon-c-relay
//! 3.7.3 (Debian's package, installed by the test support): its own repository's
//! configurations accepted and refused alike, what `-t` prints identical, and the routes
//! exercised on the configurations of this suite; the compressed transports against
//! carbon-c-relay 3.7.3 built from source with gzip, lz4 and snappy (`compression`); and,
//! anthracite alone, what it keeps where carbon-c-relay loses it (`keeps`: members down with
//! spill, reload, the aggregation series bound); `file` and `file ip` clusters against
//! carbon-c-relay (`files`); `ssl` listeners and members both ways (`ssl`); the lines queued
//! for an `any_of` or `failover` member that is down, moved to the other members, by
//! anthracite and by carbon-c-relay (`moves`). One test binary for the group.

mod compression;
mod differential;
mod files;
mod keeps;
mod moves;
mod repository;
mod ssl;
mod test_mode;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use anthracite_testkit::RelayCommand;
use anthracite_testkit::process::output_with_timeout;

/// carbon-c-relay 3.7.3's own configurations, copied into the repository.
fn compat() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/compat/carbon-c-relay-3.7.3")
}

/// `anthracite run --carbon-c-relay-config conf --carbon-c-relay-args args` in `dir`, logging
/// to `dir/anthracite.log`; the caller adds its own flags and starts it.
fn relay_on(dir: &Path, conf: impl Into<std::ffi::OsString>, args: &str) -> RelayCommand {
    RelayCommand::new(env!("CARGO_BIN_EXE_anthracite"))
        .name("anthracite")
        .args(["run", "--carbon-c-relay-config"])
        .arg(conf)
        .args(["--carbon-c-relay-args", args])
        .current_dir(dir)
        .log(dir.join("anthracite.log"))
}

/// `anthracite <command> --carbon-c-relay-config conf --carbon-c-relay-args args` in `cwd`.
fn anthracite(command: &str, conf: &Path, cwd: &Path, args: &[&str], input: &[u8]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_anthracite"));
    cmd.arg(command)
        .arg("--carbon-c-relay-config")
        .arg(conf)
        .arg("--carbon-c-relay-args")
        .arg(args.join(" "))
        .current_dir(cwd);
    output_with_timeout(
        &format!("anthracite {command}"),
        cmd,
        input.to_vec(),
        Duration::from_secs(60),
    )
}
