//! `anthracite bench ARGS…` runs the harness, a program of its own (`anthracite-bench`): the
//! one beside the running `anthracite` first, then the first on PATH, with the arguments
//! unchanged and its exit code passed through; without one, a clear error naming where it
//! looked. Stand-in harnesses (shell scripts) record what they were given.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use anthracite_testkit::process::output_with_timeout;

const WAIT: Duration = Duration::from_secs(120);

/// A fresh directory holding a link to (or a copy of) the `anthracite` this run built.
fn anthracite_alone(test: &str) -> (PathBuf, PathBuf) {
    let dir = anthracite_testkit::scratch("bench-cli", test);
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).expect("create bin dir");
    let exe = bin.join("anthracite");
    let built = Path::new(env!("CARGO_BIN_EXE_anthracite"));
    if std::fs::hard_link(built, &exe).is_err() {
        std::fs::copy(built, &exe).expect("copy anthracite");
    }
    (dir, exe)
}

/// A stand-in harness in `dir` that writes its arguments, one per line, to `<dir>/args` and
/// exits with `code`.
fn stand_in_harness(dir: &Path, code: i32) {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("anthracite-bench");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\nexit {code}\n",
            dir.join("args").display()
        ),
    )
    .expect("write the stand-in harness");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .expect("make it executable");
}

fn run(exe: &Path, args: &[&str], path: &str) -> Output {
    let mut cmd = Command::new(exe);
    cmd.args(args).env("PATH", path);
    output_with_timeout("anthracite bench", cmd, Vec::new(), WAIT)
}

#[test]
fn bench_without_the_harness_names_both_places() {
    let (dir, exe) = anthracite_alone("missing");
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).expect("create an empty PATH dir");
    let out = run(&exe, &["bench", "s.toml"], &empty.display().to_string());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let beside = dir.join("bin").join("anthracite-bench");
    assert!(
        stderr.contains(&beside.display().to_string()) && stderr.contains("PATH"),
        "{stderr}"
    );
}

#[test]
fn bench_runs_the_harness_beside_it_with_the_same_arguments_and_exit_code() {
    let (dir, exe) = anthracite_alone("beside");
    let bin = dir.join("bin");
    stand_in_harness(&bin, 7);
    // Another on PATH: the one beside comes first.
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("create a PATH dir");
    stand_in_harness(&elsewhere, 9);
    let args = [
        "--sweep",
        "two words",
        "--help",
        "-c",
        "x.toml",
        "--json",
        "r.json",
    ];
    let mut all = vec!["--log-format", "json", "bench"];
    all.extend(args);
    let out = run(&exe, &all, &elsewhere.display().to_string());
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = std::fs::read_to_string(bin.join("args")).expect("the harness ran");
    let mut want: Vec<&str> = vec!["--log-format", "json"];
    want.extend(args);
    assert_eq!(got.lines().collect::<Vec<_>>(), want);
    assert!(
        !elsewhere.join("args").exists(),
        "the harness on PATH did not run"
    );
}

#[test]
fn bench_finds_the_harness_on_path() {
    let (dir, exe) = anthracite_alone("on-path");
    let (first, second) = (dir.join("first"), dir.join("second"));
    for d in [&first, &second] {
        std::fs::create_dir(d).expect("create a PATH dir");
    }
    stand_in_harness(&second, 3);
    let path = format!("{}:{}", first.display(), second.display());
    let out = run(&exe, &["bench", "s.toml", "--rate", "5"], &path);
    assert_eq!(out.status.code(), Some(3));
    let got = std::fs::read_to_string(second.join("args")).expect("the harness ran");
    assert_eq!(got.lines().collect::<Vec<_>>(), ["s.toml", "--rate", "5"]);
}

/// The real harness, built beside the `anthracite` this run built: its help, under the name
/// the user typed.
#[test]
fn bench_help_is_the_harness_help() {
    anthracite_testkit::cargo::workspace_binary("anthracite-bench");
    let out = run(
        Path::new(env!("CARGO_BIN_EXE_anthracite")),
        &["bench", "--help"],
        "/nonexistent",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("Usage: anthracite bench"), "{stdout}");
    for flag in ["--sweep", "--compare", "--relay-cmd", "--log-format"] {
        assert!(stdout.contains(flag), "{flag} missing:\n{stdout}");
    }
}
