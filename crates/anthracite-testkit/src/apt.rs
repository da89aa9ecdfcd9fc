//! Debian packages the operator tests need (`chromium`, `prometheus` with `promtool`,
//! `lintian`), installed with apt when missing. Tests run as root on Debian; anywhere else the
//! install fails and the test says what to install, never skips.

use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use super::process::output_with_timeout;

/// How long one `apt-get` may take (a cold `chromium` install downloads ~100 MB).
const APT_TIMEOUT: Duration = Duration::from_secs(900);

/// One apt run at a time per test binary; across processes apt's own lock waits.
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
            "`apt-get update` failed (needed to install {package} for `{tool}`; run as root on \
             Debian): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        *updated = true;
    }
    let out = apt(&["install", "--no-install-recommends", package]);
    assert!(
        out.status.success() && on_path(tool),
        "cannot install Debian's `{package}` for `{tool}` (run as root on Debian, or install it \
         by hand): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
