//! Apache Kafka 4.1.1 from Maven Central (`servers/kafka-broker/pom.xml`): resolved once per
//! checkout into `target/tmp/kafka-broker/` by [`java_server`], with a small launcher
//! (`LoopbackKafka.java`) that formats the KRaft log directory and runs one combined
//! broker+controller in one JVM. One broker per test binary, on free loopback ports; it exits
//! with the test binary (the launcher watches its parent) and is stopped by PID when a test
//! stops it on purpose ([`Broker::stop`], then [`Broker::start`] on the same ports and data).

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;

use crate::java_server::{self, JavaServer};
use crate::process::ManagedChild;

const KAFKA: JavaServer = JavaServer {
    name: "Apache Kafka 4.1.1",
    folder: "kafka-broker",
    launcher: "LoopbackKafka",
    needed_by: "the Kafka tests",
    jars: &["kafka_2.13-4.1.1.jar", "kafka-server-4"],
    jars_described: "kafka_2.13-4.1.1.jar and kafka-server",
};
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

impl Broker {
    /// Installs (once per checkout), formats a fresh log directory and starts a broker on
    /// free ports; returns once it serves clients.
    pub fn launch() -> Broker {
        KAFKA.install();
        let ports = crate::free_ports(2);
        let dir = KAFKA
            .base()
            .join(format!("run-{}-{}", std::process::id(), ports[0]));
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
        let mut cmd = Command::new("java");
        cmd.args([
            "-Xms256m",
            "-Xmx768m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
        ])
        .arg("-cp")
        .arg(KAFKA.classpath())
        .arg(KAFKA.launcher)
        .arg(self.dir.join("server.properties"));
        let n = fs::read_dir(&self.dir).map(|d| d.count()).unwrap_or(0);
        let log = self.dir.join(format!("broker-{n}.log"));
        let child = java_server::start_until_ready(
            "the Kafka broker",
            "kafka broker",
            cmd,
            log,
            READY_LINE,
            START_LIMIT,
        );
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
        java_server::shared(&BROKER, "Kafka broker", Broker::launch)
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

/// A turn for a test that stops or freezes the shared broker: it runs alone, once no test
/// holds a [`shared`] turn.
pub async fn exclusive() -> Turn {
    TURNS.take(true).await
}

/// A turn for a test that leaves the shared broker running: it runs beside the other such
/// tests (each on its own topic and group), never beside an [`exclusive`] one. A waiting
/// exclusive test does not hold back a new shared one: the shared tests of a binary run as
/// one block, so they cost the binary its longest one rather than their sum.
pub async fn shared() -> Turn {
    TURNS.take(false).await
}

/// The tests of one binary taking turns on its broker (an async lock, preferring shared
/// turns: each test holds its turn across its awaits, on its own runtime).
struct Turns {
    held: Mutex<Held>,
    released: tokio::sync::Notify,
}

/// The turns held now.
struct Held {
    shared: usize,
    exclusive: bool,
}

static TURNS: Turns = Turns {
    held: Mutex::new(Held {
        shared: 0,
        exclusive: false,
    }),
    released: tokio::sync::Notify::const_new(),
};

impl Turns {
    async fn take(&'static self, exclusive: bool) -> Turn {
        loop {
            // Registered before the check, so a release between the check and the wait wakes it.
            let released = self.released.notified();
            let mut released = std::pin::pin!(released);
            released.as_mut().enable();
            {
                let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
                if !held.exclusive && (!exclusive || held.shared == 0) {
                    if exclusive {
                        held.exclusive = true;
                    } else {
                        held.shared += 1;
                    }
                    return Turn {
                        turns: self,
                        exclusive,
                    };
                }
            }
            released.await;
        }
    }
}

/// A test's turn on the broker, given back when dropped.
#[must_use = "the turn ends when it is dropped: hold it for the whole test"]
pub struct Turn {
    turns: &'static Turns,
    exclusive: bool,
}

impl Drop for Turn {
    fn drop(&mut self) {
        {
            let mut held = self.turns.held.lock().unwrap_or_else(|p| p.into_inner());
            if self.exclusive {
                held.exclusive = false;
            } else {
                held.shared -= 1;
            }
        }
        self.turns.released.notify_waiters();
    }
}
