//! Apache Kafka 4.1.1 from Maven Central (`tests/kafka-broker/pom.xml`): resolved once per
//! checkout with `mvn dependency:copy-dependencies` into `target/tmp/kafka-broker/` under a
//! file lock with a completion marker, plus a small launcher compiled with `javac`
//! (`LoopbackKafka.java`) that formats the KRaft log directory and runs one combined
//! broker+controller in one JVM. One broker per test binary, on free loopback ports; it exits
//! with the test binary (the launcher watches its parent) and is stopped by PID when a test
//! stops it on purpose ([`Broker::stop`], then [`Broker::start`] on the same ports and data).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;

use crate::support::process::{ManagedChild, output_with_timeout};

const MARKER: &str = ".anthracite-ready";
/// Resolving ~60 MB of jars from Maven Central on a slow link.
const MAVEN_TIMEOUT: Duration = Duration::from_secs(900);
/// What the broker logs once it serves clients.
const READY_LINE: &str = "Kafka Server started";
/// A JVM start, a format and a broker start on a loaded 2-core machine.
const START_LIMIT: Duration = Duration::from_secs(180);

/// The broker this test binary shares.
pub struct Broker {
    child: Mutex<Option<ManagedChild>>,
    dir: PathBuf,
    port: u16,
    controller_port: u16,
    /// `127.0.0.1:PORT`, for `bootstrap.servers`.
    pub bootstrap: String,
}

fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka-broker")
}

fn base() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kafka-broker")
}

fn require(tool: &str, arg: &str) {
    crate::support_kafka::require_tool(
        tool,
        arg,
        "the Kafka tests need a Java 17+ JDK and Maven to fetch and run Apache Kafka 4.1.1 \
         (e.g. `apt-get install openjdk-17-jdk-headless maven`)",
    );
}

/// What the marker records: the inputs, so a change to them re-resolves.
fn wanted() -> Vec<u8> {
    let mut v = fs::read(sources().join("pom.xml")).expect("read tests/kafka-broker/pom.xml");
    v.extend(
        fs::read(sources().join("LoopbackKafka.java"))
            .expect("read tests/kafka-broker/LoopbackKafka.java"),
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
        "resolving Apache Kafka 4.1.1 from Maven Central failed \
         (mvn -f tests/kafka-broker/pom.xml dependency:copy-dependencies):\n{}\n{}",
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
        jars.iter().any(|j| j == "kafka_2.13-4.1.1.jar")
            && jars.iter().any(|j| j.starts_with("kafka-server-4")),
        "Maven did not deliver kafka_2.13-4.1.1.jar and kafka-server into {}: {jars:?}",
        lib.display()
    );
    let mut javac = Command::new("javac");
    javac
        .arg("-cp")
        .arg(format!("{}/*", lib.display()))
        .arg("-d")
        .arg(&classes)
        .arg(sources().join("LoopbackKafka.java"));
    let out = output_with_timeout("javac", javac, Vec::new(), Duration::from_secs(300));
    assert!(
        out.status.success(),
        "compiling tests/kafka-broker/LoopbackKafka.java failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::write(base.join(MARKER), &wanted).expect("write the Kafka marker");
    base
}

impl Broker {
    /// Installs (once per checkout), formats a fresh log directory and starts a broker on
    /// free ports; returns once it serves clients.
    pub fn launch() -> Broker {
        install();
        let ports = crate::support::free_ports(2);
        let dir = base().join(format!("run-{}-{}", std::process::id(), ports[0]));
        if dir.exists() {
            fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("remove {}: {e}", dir.display()));
        }
        fs::create_dir_all(dir.join("data"))
            .unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let broker = Broker {
            child: Mutex::new(None),
            dir,
            port: ports[0],
            controller_port: ports[1],
            bootstrap: format!("127.0.0.1:{}", ports[0]),
        };
        broker.write_properties();
        broker.start();
        broker
    }

    fn write_properties(&self) {
        let (port, cport) = (self.port, self.controller_port);
        let data = self.dir.join("data");
        let props = format!(
            "process.roles=broker,controller\n\
             node.id=1\n\
             controller.quorum.voters=1@127.0.0.1:{cport}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
             controller.listener.names=CONTROLLER\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             inter.broker.listener.name=PLAINTEXT\n\
             log.dirs={}\n\
             num.partitions=1\n\
             auto.create.topics.enable=false\n\
             offsets.topic.replication.factor=1\n\
             offsets.topic.num.partitions=3\n\
             transaction.state.log.replication.factor=1\n\
             transaction.state.log.min.isr=1\n\
             share.coordinator.state.topic.replication.factor=1\n\
             group.initial.rebalance.delay.ms=0\n\
             log.flush.interval.messages=9223372036854775807\n",
            data.display()
        );
        fs::write(self.dir.join("server.properties"), props).expect("write server.properties");
    }

    /// Starts the broker (again, after [`stop`](Self::stop): same ports, same data); returns
    /// once it serves clients.
    pub fn start(&self) {
        let mut slot = self.child.lock().unwrap_or_else(|p| p.into_inner());
        assert!(slot.is_none(), "the Kafka broker is already running");
        let base = base();
        let mut cmd = Command::new("java");
        cmd.args([
            "-Xms256m",
            "-Xmx768m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
        ])
        .arg("-cp")
        .arg(format!(
            "{}:{}/*",
            base.join("classes").display(),
            base.join("lib").display()
        ))
        .arg("LoopbackKafka")
        .arg(self.dir.join("server.properties"));
        let n = fs::read_dir(&self.dir).map(|d| d.count()).unwrap_or(0);
        let log = self.dir.join(format!("broker-{n}.log"));
        let mut child = ManagedChild::spawn("kafka broker", cmd, log.clone());
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if fs::read_to_string(&log).is_ok_and(|t| t.contains(READY_LINE)) {
                break;
            }
            child.assert_running("the Kafka broker to start");
            assert!(
                Instant::now() < deadline,
                "the Kafka broker did not start within {START_LIMIT:?}:\n{}",
                child.log_tail(40)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        *slot = Some(child);
    }

    /// Stops the broker by PID (SIGTERM, then SIGKILL after 5 s); its data stays.
    pub fn stop(&self) {
        let mut slot = self.child.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut c) = slot.take() {
            c.stop();
        }
    }

    /// The broker this test binary shares (started on first use).
    pub fn shared() -> &'static Broker {
        static BROKER: OnceLock<Result<Broker, String>> = OnceLock::new();
        let broker = BROKER.get_or_init(|| {
            std::panic::catch_unwind(Broker::launch).map_err(|panic| {
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "starting the Kafka broker panicked".into())
            })
        });
        match broker {
            Ok(b) => b,
            Err(msg) => panic!("no Kafka broker: {msg}"),
        }
    }

    /// An admin client for it.
    fn admin(&self) -> AdminClient<DefaultClientContext> {
        ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .expect("a Kafka admin client")
    }

    /// Creates `topic` with `partitions` partitions (replication 1).
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        let admin = self.admin();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = admin
            .create_topics(
                &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
                &opts,
            )
            .await
            .unwrap_or_else(|e| panic!("create topic {topic}: {e}"));
        for r in results {
            if let Err((t, e)) = r {
                panic!("create topic {t}: {e}");
            }
        }
    }

    /// The broker's PID (0 while stopped).
    pub fn pid(&self) -> u32 {
        self.child
            .lock()
            .map(|c| c.as_ref().map_or(0, |c| c.pid()))
            .unwrap_or(0)
    }

    /// Its current log (for failure messages).
    pub fn log_tail(&self, n: usize) -> String {
        self.child
            .lock()
            .map(|c| c.as_ref().map_or_else(String::new, |c| c.log_tail(n)))
            .unwrap_or_default()
    }
}

/// Serialises the tests of a binary: they share one broker (one test stops it) and run
/// fleets of relay processes on two cores.
/// (An async lock: each test holds it across its awaits, on its own runtime.)
pub async fn exclusive() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}
