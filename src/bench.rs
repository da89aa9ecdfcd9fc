//! `anthracite bench ARGS…`: runs the capacity-planning harness, a program of its own
//! (`anthracite-bench`), the way git runs its subcommands. The relay's binary then carries
//! neither the harness nor its plotting and progress crates, and `anthracite bench` keeps
//! its arguments, its help and its exit code.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The harness's program name.
const HARNESS: &str = "anthracite-bench";

/// Replaces this process with the harness, passing `args` (and `--log-format` when given
/// before `bench`). Returns only when the harness cannot be found or started.
pub fn exec(args: Vec<OsString>, log_format: Option<&str>) -> ExitCode {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    let Some(harness) = find(beside.as_deref(), std::env::var_os("PATH")) else {
        eprintln!(
            "anthracite bench: the harness `{HARNESS}` is neither beside anthracite ({}) nor on \
             PATH; install it there (the Debian package has it in /usr/bin) or build it with \
             `cargo build --release -p anthracite-bench`",
            beside.map_or_else(
                || "its directory is unknown".to_owned(),
                |d| d.join(HARNESS).display().to_string()
            )
        );
        return ExitCode::FAILURE;
    };
    let mut cmd = Command::new(&harness);
    // Its usage lines and messages then say `anthracite bench`, as the user typed it.
    cmd.arg0("anthracite bench");
    if let Some(format) = log_format {
        cmd.arg("--log-format").arg(format);
    }
    let err = cmd.args(args).exec();
    eprintln!("anthracite bench: cannot run {}: {err}", harness.display());
    ExitCode::FAILURE
}

/// The harness beside `beside` (the running executable's directory), else the first on
/// `path`.
fn find(beside: Option<&Path>, path: Option<OsString>) -> Option<PathBuf> {
    let on_path = path
        .as_deref()
        .map(|p| std::env::split_paths(p).collect::<Vec<_>>())
        .unwrap_or_default();
    beside
        .into_iter()
        .map(Path::to_path_buf)
        .chain(on_path)
        .map(|dir| dir.join(HARNESS))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn harness_in(dir: &Path, mode: u32) {
        let file = dir.join(HARNESS);
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn beside_the_executable_comes_before_path() {
        let (beside, on_path) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        harness_in(on_path.path(), 0o755);
        let path = std::env::join_paths([on_path.path()]).ok();
        assert_eq!(
            find(Some(beside.path()), path.clone()),
            Some(on_path.path().join(HARNESS))
        );
        harness_in(beside.path(), 0o755);
        assert_eq!(
            find(Some(beside.path()), path),
            Some(beside.path().join(HARNESS))
        );
    }

    #[test]
    fn a_file_that_is_not_executable_is_not_the_harness() {
        let dir = tempfile::tempdir().unwrap();
        harness_in(dir.path(), 0o644);
        assert_eq!(find(Some(dir.path()), None), None);
    }
}
