//! The Debian package: `cargo deb` builds it from the binaries of the test profile
//! (`--no-build --profile dev`: no release build in CI; the harness `anthracite-bench` is built
//! beside `anthracite` first), `dpkg-deb` shows what it holds, the packaged binary checks the
//! packaged configuration and finds the packaged harness, and lintian finds nothing but the
//! tags explained in [`EXPLAINED`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anthracite_testkit as testkit;
use testkit::process::output_with_timeout;

const WAIT: Duration = Duration::from_secs(900);

/// lintian tags the package keeps, and why.
const EXPLAINED: &[(&str, &str)] = &[
    (
        "no-manual-page",
        "`anthracite --help`, README.md and docs/ are the documentation; no man page is generated",
    ),
    (
        "initial-upload-closes-no-bugs",
        "the package is built by the project, not uploaded to Debian (no ITP bug to close)",
    ),
];

fn run(what: &str, mut cmd: Command) -> String {
    let out = output_with_timeout(what, cmd_with_path(&mut cmd), Vec::new(), WAIT);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

/// `cmd` with `~/.cargo/bin` on PATH (where `cargo install` puts cargo-deb).
fn cmd_with_path(cmd: &mut Command) -> Command {
    let mut c = Command::new(cmd.get_program());
    c.args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        c.current_dir(dir);
    }
    let home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|_| std::env::var("HOME").map(|h| Path::new(&h).join(".cargo")))
        .unwrap_or_else(|_| PathBuf::from("/root/.cargo"));
    let path = std::env::var("PATH").unwrap_or_default();
    c.env("PATH", format!("{}:{path}", home.join("bin").display()));
    c
}

/// Installs cargo-deb from crates.io when `cargo deb` is missing.
fn require_cargo_deb() {
    let mut probe = Command::new("cargo");
    probe.args(["deb", "--version"]);
    let ok = cmd_with_path(&mut probe)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        let mut install = Command::new("cargo");
        install.args(["install", "--locked", "cargo-deb"]);
        run("cargo install --locked cargo-deb (crates.io)", install);
    }
}

#[test]
fn deb_package_holds_the_relay_its_unit_and_a_config_that_checks() {
    require_cargo_deb();
    testkit::apt::require("lintian", "lintian");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The package ships the harness beside the relay; Cargo builds only this package's
    // binaries for its tests.
    testkit::cargo::workspace_binary("anthracite-bench");
    let out = tempfile::tempdir().expect("tempdir");
    let mut build = Command::new("cargo");
    build
        .current_dir(root)
        .args([
            "deb",
            "--no-build",
            "--profile",
            "dev",
            "-p",
            "anthracite-cli",
            // The same contents, compressed fast: xz over the 75 MB of unoptimized binaries
            // would take most of this test's time.
            "--fast",
        ])
        .arg("--output")
        .arg(out.path());
    // `--profile dev` packages target/debug/anthracite (the binary this test run built) and
    // target/debug/anthracite-bench.
    run("cargo deb", build);
    let deb = std::fs::read_dir(out.path())
        .expect("output dir")
        .filter_map(|e| Some(e.ok()?.path()))
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("a .deb was written");
    assert!(
        deb.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("anthracite_")),
        "{}",
        deb.display()
    );

    let mut contents = Command::new("dpkg-deb");
    contents.arg("--contents").arg(&deb);
    let listing = run("dpkg-deb --contents", contents);
    for path in [
        "./usr/bin/anthracite",
        "./usr/bin/anthracite-bench",
        "./usr/lib/systemd/system/anthracite.service",
        "./etc/anthracite/relay.toml",
        "./usr/share/anthracite/grafana-dashboard.json",
        "./usr/share/anthracite/anthracite-alerts.yml",
        "./usr/share/doc/anthracite/relay.toml.example",
        "./usr/share/doc/anthracite/copyright",
    ] {
        assert!(
            listing.contains(path),
            "{path} not in the package:\n{listing}"
        );
    }
    let mut info = Command::new("dpkg-deb");
    info.arg("--info").arg(&deb);
    let info = run("dpkg-deb --info", info);
    assert!(info.contains("Package: anthracite\n"), "{info}");
    let mut conffiles = Command::new("dpkg-deb");
    conffiles.arg("--info").arg(&deb).arg("conffiles");
    assert_eq!(
        run("dpkg-deb --info conffiles", conffiles).trim(),
        "/etc/anthracite/relay.toml"
    );
    let mut postinst = Command::new("dpkg-deb");
    postinst.arg("--info").arg(&deb).arg("postinst");
    let postinst = run("dpkg-deb --info postinst", postinst);
    assert!(
        postinst.contains("mkdir -p /var/lib/anthracite"),
        "{postinst}"
    );
    assert!(
        postinst.contains("deb-systemd-helper enable anthracite.service"),
        "{postinst}"
    );

    // Extracted, the packaged binary accepts the packaged configuration.
    let tree = out.path().join("tree");
    let mut extract = Command::new("dpkg-deb");
    extract.arg("--extract").arg(&deb).arg(&tree);
    run("dpkg-deb --extract", extract);
    let unit = std::fs::read_to_string(tree.join("usr/lib/systemd/system/anthracite.service"))
        .expect("unit");
    assert!(unit.contains("ExecStart=/usr/bin/anthracite run --config /etc/anthracite/relay.toml"));
    let mut check = Command::new(tree.join("usr/bin/anthracite"));
    check
        .arg("check")
        .arg("--config")
        .arg(tree.join("etc/anthracite/relay.toml"));
    let checked = run("anthracite check (packaged)", check);
    assert!(checked.contains("/var/lib/anthracite/spill"), "{checked}");
    // `anthracite bench` runs the harness installed beside it (nothing on PATH).
    let mut bench = Command::new(tree.join("usr/bin/anthracite"));
    bench.args(["bench", "--help"]).env("PATH", "/nonexistent");
    let out = output_with_timeout(
        "anthracite bench --help (packaged)",
        bench,
        Vec::new(),
        WAIT,
    );
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && help.contains("Usage: anthracite bench")
            && help.contains("--sweep"),
        "{help}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut lint = Command::new("lintian");
    lint.args(["--allow-root", "--tag-display-limit", "0"])
        .arg(&deb);
    let out = output_with_timeout("lintian", lint, Vec::new(), WAIT);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let unexplained: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("E:") || l.starts_with("W:") || l.starts_with("I:"))
        .filter(|l| {
            !EXPLAINED
                .iter()
                .any(|(tag, _)| l.contains(&format!(" {tag}")))
        })
        .collect();
    assert!(
        unexplained.is_empty(),
        "lintian tags not explained:\n{report}"
    );
}
