//! carbon-c-relay 3.7.3 built from Debian's source with gzip, lz4 and snappy (Debian's own
//! package is built with ssl only): its `.orig` tarball fetched from the Debian archive and
//! checked against the `.dsc`'s SHA-256, the build dependencies installed with apt, built once
//! per checkout under `target/tmp/` (a file lock serializes test binaries; a completion marker
//! is written last, so a half-built tree is built again). Any failure panics with the step's
//! output: the compression tests never skip.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::apt;
use super::process::output_with_timeout;

/// The source Debian's `carbon-c-relay 3.7.3-2` is built from.
const TARBALL: &str = "carbon-c-relay_3.7.3.orig.tar.xz";
const POOL: &str = "http://deb.debian.org/debian/pool/main/c/carbon-c-relay";
/// From `carbon-c-relay_3.7.3-2.dsc`'s `Checksums-Sha256`.
const SHA256: &str = "559e7199c5ca5d34779f58a99b90d93635477cfbb3430f179c04b36ce026e209";
/// What `./configure` must find to enable the transports (and a compiler to build with).
const BUILD_DEPS: [&str; 9] = [
    "gcc",
    "make",
    "pkg-config",
    "xz-utils",
    "curl",
    "zlib1g-dev",
    "liblz4-dev",
    "libsnappy-dev",
    "libssl-dev",
];
/// The line `-v` prints when every transport is compiled in.
const FEATURES: &str = "enabled support for: gzip lz4 snappy ssl";
const MARKER: &str = ".anthracite-ready";
/// Downloading 400 KB and compiling ~15 C files on a shared machine.
const STEP_TIMEOUT: Duration = Duration::from_secs(600);

/// The path of the source-built `relay` binary, building it first if needed. Panics with what
/// failed (download, checksum, apt, configure, make, or a build lacking a transport).
pub fn binary() -> PathBuf {
    // A failed build is remembered, so the other tests of this binary fail at once with the
    // same message instead of building again.
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        std::panic::catch_unwind(build_once).map_err(|panic| {
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "building carbon-c-relay panicked".into())
        })
    });
    match built {
        Ok(path) => path.clone(),
        Err(msg) => panic!("no source-built carbon-c-relay 3.7.3: {msg}"),
    }
}

fn build_once() -> PathBuf {
    let base = super::target_tmp();
    fs::create_dir_all(&base).unwrap_or_else(|e| panic!("create {}: {e}", base.display()));
    let dir = base.join("carbon-c-relay-3.7.3-src");
    let lock_path = base.join("carbon-c-relay-3.7.3-src.lock");
    let lock = File::create(&lock_path)
        .unwrap_or_else(|e| panic!("create lock file {}: {e}", lock_path.display()));
    // Blocks while another test binary builds; released when `lock` drops.
    #[allow(clippy::incompatible_msrv)]
    lock.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", lock_path.display()));
    let relay = dir.join("carbon-c-relay-3.7.3").join("relay");
    if fs::read_to_string(dir.join(MARKER)).ok().as_deref() == Some(SHA256) && relay.is_file() {
        return relay;
    }
    if dir.exists() {
        fs::remove_dir_all(&dir)
            .unwrap_or_else(|e| panic!("remove half-built {}: {e}", dir.display()));
    }
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    apt::require_packages(
        &BUILD_DEPS,
        "building carbon-c-relay 3.7.3 with gzip, lz4, snappy",
    );
    let run = |what: &str, mut cmd: Command, cwd: &Path| {
        cmd.current_dir(cwd);
        let out = output_with_timeout(what, cmd, Vec::new(), STEP_TIMEOUT);
        assert!(
            out.status.success(),
            "{what} failed in {}:\n{}\n{}",
            cwd.display(),
            super::venv::tail(&String::from_utf8_lossy(&out.stdout), 30),
            super::venv::tail(&String::from_utf8_lossy(&out.stderr), 30)
        );
        out
    };
    let command = |program: &str, args: &[&str]| {
        let mut cmd = Command::new(program);
        cmd.args(args);
        cmd
    };
    let url = format!("{POOL}/{TARBALL}");
    run(
        "downloading carbon-c-relay's source from the Debian archive",
        command("curl", &["-sSfL", "-o", TARBALL, &url]),
        &dir,
    );
    let sum = run("sha256sum", command("sha256sum", &[TARBALL]), &dir);
    let sum = String::from_utf8_lossy(&sum.stdout);
    assert!(
        sum.starts_with(SHA256),
        "{POOL}/{TARBALL} does not match the .dsc's SHA-256 {SHA256}: {sum}"
    );
    run("tar xJf", command("tar", &["xJf", TARBALL]), &dir);
    let src = dir.join("carbon-c-relay-3.7.3");
    run("./configure", command("./configure", &[]), &src);
    run("make", command("make", &["relay"]), &src);
    let mut v = Command::new(&relay);
    v.arg("-v");
    let version = run("relay -v", v, &src);
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.contains("carbon-c-relay v3.7.3") && version.contains(FEATURES),
        "the source-built carbon-c-relay lacks a transport (configure did not find a library): \
         {version}"
    );
    fs::write(dir.join(MARKER), SHA256)
        .unwrap_or_else(|e| panic!("write completion marker in {}: {e}", dir.display()));
    relay
}
