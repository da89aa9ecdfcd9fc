//! Java servers the tests run from Maven Central (Apache Kafka, DynamoDB Local): each has a
//! `pom.xml` and a small launcher (`<Launcher>.java`, which binds it to loopback and exits with
//! the test binary) in its own folder under the testkit's `servers/`. [`JavaServer::install`] resolves the pom
//! with `mvn dependency:copy-dependencies` and compiles the launcher with `javac`, once per
//! checkout, into `target/tmp/<folder>/`, under a file lock with a completion marker that
//! records the inputs (so a change to them re-resolves). [`start_until_ready`] starts one and
//! waits for its ready line; it is stopped by PID ([`ManagedChild`]).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::process::{ManagedChild, output_with_timeout};

const MARKER: &str = ".anthracite-ready";
/// Resolving tens of MB of jars from Maven Central on a slow link.
const MAVEN_TIMEOUT: Duration = Duration::from_secs(900);
const JAVAC_TIMEOUT: Duration = Duration::from_secs(300);

/// One Java server the tests resolve from Maven Central.
pub struct JavaServer {
    /// What it is, for messages (`Apache Kafka 4.1.1`).
    pub name: &'static str,
    /// Its folder under `servers/` (`pom.xml` and the launcher), and under `target/tmp/`.
    pub folder: &'static str,
    /// The launcher's class, compiled from `servers/<folder>/<launcher>.java`.
    pub launcher: &'static str,
    /// Who needs it, for the message when Java or Maven is missing (`the Kafka tests`).
    pub needed_by: &'static str,
    /// Name prefixes of jars Maven must deliver into `lib/`: a check that the pom resolved
    /// what the launcher runs.
    pub jars: &'static [&'static str],
    /// Those jars, for the message when one is missing.
    pub jars_described: &'static str,
}

impl JavaServer {
    fn sources(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("servers")
            .join(self.folder)
    }

    /// `target/tmp/<folder>/`: `lib/` (the jars), `classes/` (the launcher), and whatever the
    /// server's runs keep there.
    pub fn base(&self) -> PathBuf {
        super::target_tmp().join(self.folder)
    }

    /// The directory of the resolved jars.
    pub fn lib(&self) -> PathBuf {
        self.base().join("lib")
    }

    /// The classpath that runs the launcher.
    pub fn classpath(&self) -> String {
        format!(
            "{}:{}/*",
            self.base().join("classes").display(),
            self.lib().display()
        )
    }

    fn require(&self, tool: &str, arg: &str) {
        super::require_tool(
            tool,
            arg,
            &format!(
                "{} need a Java 17+ JDK and Maven to fetch and run {} \
                 (e.g. `apt-get install openjdk-17-jdk-headless maven`)",
                self.needed_by, self.name
            ),
        );
    }

    fn launcher_source(&self) -> PathBuf {
        self.sources().join(format!("{}.java", self.launcher))
    }

    /// What the marker records: the inputs, so a change to them re-resolves.
    fn wanted(&self) -> Vec<u8> {
        let read = |path: PathBuf| {
            fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        };
        let mut v = read(self.sources().join("pom.xml"));
        v.extend(read(self.launcher_source()));
        v
    }

    /// Resolves and compiles once; later callers (other test binaries too) see the marker.
    /// Returns [`base`](Self::base).
    pub fn install(&self) -> PathBuf {
        let base = self.base();
        fs::create_dir_all(&base).unwrap_or_else(|e| panic!("create {}: {e}", base.display()));
        let lock_path = base.with_extension("lock");
        let lock = File::create(&lock_path)
            .unwrap_or_else(|e| panic!("create lock file {}: {e}", lock_path.display()));
        // Blocks while another test binary installs; released when `lock` drops.
        #[allow(clippy::incompatible_msrv)]
        lock.lock()
            .unwrap_or_else(|e| panic!("lock {}: {e}", lock_path.display()));
        let wanted = self.wanted();
        if fs::read(base.join(MARKER)).ok().as_deref() == Some(&wanted[..]) {
            return base;
        }
        self.require("java", "-version");
        self.require("javac", "-version");
        self.require("mvn", "--version");
        let (lib, classes) = (self.lib(), base.join("classes"));
        for d in [&lib, &classes] {
            if d.exists() {
                fs::remove_dir_all(d).unwrap_or_else(|e| panic!("remove {}: {e}", d.display()));
            }
        }
        let mut mvn = Command::new("mvn");
        mvn.arg("-q")
            .arg("-B")
            .arg("-f")
            .arg(self.sources().join("pom.xml"))
            .arg("dependency:copy-dependencies")
            .arg(format!("-DoutputDirectory={}", lib.display()));
        let out = output_with_timeout(
            "mvn dependency:copy-dependencies",
            mvn,
            Vec::new(),
            MAVEN_TIMEOUT,
        );
        assert!(
            out.status.success(),
            "resolving {} from Maven Central failed \
             (mvn -f servers/{}/pom.xml dependency:copy-dependencies):\n{}\n{}",
            self.name,
            self.folder,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let jars: Vec<String> = fs::read_dir(&lib)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            self.jars
                .iter()
                .all(|want| jars.iter().any(|j| j.starts_with(want))),
            "Maven did not deliver {} into {}: {jars:?}",
            self.jars_described,
            lib.display()
        );
        let mut javac = Command::new("javac");
        javac
            .arg("-cp")
            .arg(format!("{}/*", lib.display()))
            .arg("-d")
            .arg(&classes)
            .arg(self.launcher_source());
        let out = output_with_timeout("javac", javac, Vec::new(), JAVAC_TIMEOUT);
        assert!(
            out.status.success(),
            "compiling servers/{}/{}.java failed:\n{}",
            self.folder,
            self.launcher,
            String::from_utf8_lossy(&out.stderr)
        );
        fs::write(base.join(MARKER), &wanted)
            .unwrap_or_else(|e| panic!("write the {} marker: {e}", self.name));
        base
    }
}

/// Spawns `cmd` as `label`, logging to `log`, and returns once the log shows `ready_line`;
/// panics with the log tail (`what`: the server, for messages) if it exits first or takes
/// longer than `limit` (a deadline for a hung start, never a timing assertion).
pub fn start_until_ready(
    what: &str,
    label: &str,
    cmd: Command,
    log: PathBuf,
    ready_line: &str,
    limit: Duration,
) -> ManagedChild {
    let mut child = ManagedChild::spawn(label, cmd, log.clone());
    let deadline = Instant::now() + limit;
    loop {
        if fs::read_to_string(&log).is_ok_and(|t| t.contains(ready_line)) {
            return child;
        }
        child.assert_running(&format!("{what} to start"));
        assert!(
            Instant::now() < deadline,
            "{what} did not start within {limit:?}:\n{}",
            child.log_tail(40)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The one `T` a test binary shares, started by `start` on first use. A failed start is
/// remembered, so every later test fails at once with its message (`what`: the server).
pub fn shared<T>(
    cell: &'static OnceLock<Result<T, String>>,
    what: &str,
    start: fn() -> T,
) -> &'static T {
    let result = cell.get_or_init(|| {
        std::panic::catch_unwind(start).map_err(|panic| {
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| format!("starting {what} panicked"))
        })
    });
    match result {
        Ok(t) => t,
        Err(msg) => panic!("no {what}: {msg}"),
    }
}
