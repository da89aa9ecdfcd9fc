//! DynamoDB Local 3.1.0 from Maven Central (`tests/dynamodb-local/pom.xml`): resolved once per
//! checkout with `mvn dependency:copy-dependencies` into `target/tmp/dynamodb-local/` (the
//! server, its libraries and sqlite4java's native ones) under a file lock with a completion
//! marker, plus a small launcher compiled with `javac` that binds it to 127.0.0.1. One server
//! per test binary, in memory, on a free port; tables are per test. It exits with the test
//! binary (the launcher watches its parent); a [`DynamoDbLocal`] dropped earlier is stopped by
//! PID.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::support::process::{ManagedChild, output_with_timeout};

const MARKER: &str = ".anthracite-ready";
/// Resolving ~50 MB of jars from Maven Central on a slow link.
const MAVEN_TIMEOUT: Duration = Duration::from_secs(900);
const READY_LINE: &str = "anthracite-dynamodb-local listening";

/// A running DynamoDB Local.
pub struct DynamoDbLocal {
    child: Mutex<ManagedChild>,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dynamodb-local")
}

fn base() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dynamodb-local")
}

fn require(tool: &str, arg: &str) {
    super::require_tool(
        tool,
        arg,
        "the lease tests need a Java 17+ JDK and Maven to fetch and run DynamoDB Local 3.1.0 \
         (e.g. `apt-get install openjdk-17-jdk-headless maven`)",
    );
}

/// What the marker records: the inputs, so a change to them re-resolves.
fn wanted() -> Vec<u8> {
    let mut v = fs::read(sources().join("pom.xml")).expect("read tests/dynamodb-local/pom.xml");
    v.extend(
        fs::read(sources().join("LoopbackDynamoDbLocal.java"))
            .expect("read tests/dynamodb-local/LoopbackDynamoDbLocal.java"),
    );
    v
}

/// Resolves and compiles once; later callers (other test binaries too) see the marker.
fn install() -> PathBuf {
    let base = base();
    fs::create_dir_all(&base).unwrap_or_else(|e| panic!("create {}: {e}", base.display()));
    let lock_path = base.with_extension("lock");
    let lock = File::create(&lock_path)
        .unwrap_or_else(|e| panic!("create lock file {}: {e}", lock_path.display()));
    // Blocks while another test binary installs; released when `lock` drops.
    #[allow(clippy::incompatible_msrv)]
    lock.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", lock_path.display()));
    let wanted = wanted();
    if fs::read(base.join(MARKER)).ok().as_deref() == Some(&wanted[..]) {
        return base;
    }
    require("java", "-version");
    require("javac", "-version");
    require("mvn", "--version");
    let (lib, classes) = (base.join("lib"), base.join("classes"));
    for d in [&lib, &classes] {
        if d.exists() {
            fs::remove_dir_all(d).unwrap_or_else(|e| panic!("remove {}: {e}", d.display()));
        }
    }
    let mut mvn = Command::new("mvn");
    mvn.arg("-q")
        .arg("-B")
        .arg("-f")
        .arg(sources().join("pom.xml"))
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
        "resolving DynamoDB Local 3.1.0 from Maven Central failed \
         (mvn -f tests/dynamodb-local/pom.xml dependency:copy-dependencies):\n{}\n{}",
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
        jars.iter().any(|j| j == "DynamoDBLocal-3.1.0.jar")
            && jars.iter().any(|j| j.starts_with("libsqlite4java-linux")),
        "Maven did not deliver DynamoDBLocal-3.1.0.jar and sqlite4java's native library into {}: {jars:?}",
        lib.display()
    );
    let mut javac = Command::new("javac");
    javac
        .arg("-cp")
        .arg(format!("{}/*", lib.display()))
        .arg("-d")
        .arg(&classes)
        .arg(sources().join("LoopbackDynamoDbLocal.java"));
    let out = output_with_timeout("javac", javac, Vec::new(), Duration::from_secs(300));
    assert!(
        out.status.success(),
        "compiling tests/dynamodb-local/LoopbackDynamoDbLocal.java failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::write(base.join(MARKER), &wanted).expect("write the DynamoDB Local marker");
    base
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl DynamoDbLocal {
    /// Installs (once per checkout) and starts a server; ready when it says it listens.
    pub fn start() -> DynamoDbLocal {
        let base = install();
        let port = free_port();
        let lib = base.join("lib");
        let mut cmd = Command::new("java");
        cmd.arg(format!("-Dsqlite4java.library.path={}", lib.display()))
            .arg("-Xmx256m")
            .arg("-cp")
            .arg(format!(
                "{}:{}/*",
                base.join("classes").display(),
                lib.display()
            ))
            .arg("LoopbackDynamoDbLocal")
            .args(["-port", &port.to_string(), "-inMemory", "-sharedDb"])
            .arg("-disableTelemetry");
        let log = base.join(format!("server-{port}.log"));
        let mut child = ManagedChild::spawn("dynamodb-local", cmd, log.clone());
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if fs::read_to_string(&log).is_ok_and(|t| t.contains(READY_LINE)) {
                break;
            }
            child.assert_running("DynamoDB Local to listen");
            assert!(
                Instant::now() < deadline,
                "DynamoDB Local did not start within 2 minutes:\n{}",
                child.log_tail(40)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        DynamoDbLocal {
            child: Mutex::new(child),
            endpoint: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The server this test binary shares (started on first use).
    pub fn shared() -> &'static DynamoDbLocal {
        static SERVER: OnceLock<Result<DynamoDbLocal, String>> = OnceLock::new();
        let server = SERVER.get_or_init(|| {
            std::panic::catch_unwind(DynamoDbLocal::start).map_err(|panic| {
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "starting DynamoDB Local panicked".into())
            })
        });
        match server {
            Ok(s) => s,
            Err(msg) => panic!("no DynamoDB Local: {msg}"),
        }
    }

    /// A client for it (dummy credentials).
    pub fn client(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&super::kinesalite::sdk_config(&self.endpoint))
    }

    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.lock().map(|c| c.pid()).unwrap_or(0)
    }
}
