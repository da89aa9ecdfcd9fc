//! Debian packages the tests need (`chromium`, `prometheus` with `promtool`, `lintian`, the
//! build dependencies of a source-built carbon-c-relay), installed with apt when missing.
//! Tests run as root on Debian; anywhere else the install fails and the test says what to
//! install, never skips.

use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use super::process::output_with_timeout;

/// How long one `apt-get` may take (a cold `chromium` install downloads ~100 MB).
const APT_TIMEOUT: Duration = Duration::from_secs(900);

/// One apt run at a time per test binary; across processes apt's own lock waits. Holds
/// whether `apt-get update` ran.
static APT: Mutex<bool> = Mutex::new(false);

/// `true` when `tool` is on PATH.
pub fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// `true` when Debian's `package` is installed.
pub fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Status}", package])
        .output()
        .map(|o| o.status.success() && o.stdout == b"installed")
        .unwrap_or(false)
}

/// `apt-get ARGS`, with `apt-get update` first once per test binary (`updated`); `what` names
/// what is installed, for the message when the update fails.
fn apt_get(updated: &mut bool, what: &str, args: &[&str]) -> Output {
    let apt = |args: &[&str]| {
        let mut cmd = Command::new("apt-get");
        cmd.args(["-o", "DPkg::Lock::Timeout=600", "-q", "-y"])
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive");
        output_with_timeout(&format!("apt-get {args:?}"), cmd, Vec::new(), APT_TIMEOUT)
    };
    if !*updated {
        let out = apt(&["update"]);
        assert!(
            out.status.success(),
            "`apt-get update` failed (needed to install {what}; run as root on Debian): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        *updated = true;
    }
    apt(args)
}

/// Makes sure `tool` is on PATH, installing Debian's `package` (with `apt-get update` first,
/// once per test binary) if it is not; panics with what to do if that fails.
pub fn require(tool: &str, package: &str) {
    if on_path(tool) {
        return;
    }
    let mut updated = APT.lock().unwrap_or_else(|p| p.into_inner());
    if on_path(tool) {
        return;
    }
    let out = apt_get(
        &mut updated,
        &format!("{package} for `{tool}`"),
        &["install", "--no-install-recommends", package],
    );
    assert!(
        out.status.success() && on_path(tool),
        "cannot install Debian's `{package}` for `{tool}` (run as root on Debian, or install it \
         by hand): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes sure Debian's `packages` (libraries and headers a build needs) are installed,
/// installing the missing ones; panics with what to do if that fails.
pub fn require_packages(packages: &[&str], needed_for: &str) {
    let missing = || -> Vec<&str> { packages.iter().copied().filter(|p| !installed(p)).collect() };
    if missing().is_empty() {
        return;
    }
    let mut updated = APT.lock().unwrap_or_else(|p| p.into_inner());
    let wanted = missing();
    if wanted.is_empty() {
        return;
    }
    let mut args = vec!["install", "--no-install-recommends"];
    args.extend(&wanted);
    let what = format!("{} for {needed_for}", wanted.join(" "));
    let out = apt_get(&mut updated, &what, &args);
    assert!(
        out.status.success() && missing().is_empty(),
        "cannot install Debian's {what} (run as root on Debian, or install them by hand): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
