//! Shared by the Kinesis integration tests: a relay with no listeners, sources on its
//! pipeline, checkpoint reading and ordering helpers.

use std::path::Path;
use std::time::Duration;

use anthracite::extension::Extensions;
use anthracite::{Config, Relay, RelayHandle};
use anthracite_kinesis::{Kinesis, KinesisConfig, KinesisSource};
use tokio_util::sync::CancellationToken;

use anthracite_testkit::kinesalite::{self, Kinesalite};

/// Deadline for a hung test (never a timing assertion).
pub const LONG: Duration = Duration::from_secs(90);

/// A relay with no listeners, delivering pickle to `dest`.
pub struct TestRelay {
    pub handle: RelayHandle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

pub fn relay_toml(dest: &str, extra: &str) -> String {
    format!(
        "[listen]\nline_tcp = \"\"\npickle_tcp = \"\"\n[destinations]\nservers = [\"{dest}:a\"]\nbackoff_min_ms = 20\nbackoff_max_ms = 200\n{extra}\n[telemetry]\ninterval_secs = 0\n"
    )
}

pub async fn start_relay(toml: &str, aws: Option<aws_config::SdkConfig>) -> TestRelay {
    let kinesis = match aws {
        Some(a) => Kinesis::new().with_sdk_config(a),
        None => Kinesis::new(),
    };
    let config =
        Config::from_toml_str_with(toml, &Extensions::new().with(kinesis)).expect("relay config");
    let relay = Relay::builder(config).build().expect("relay builds");
    let handle = relay.handle();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        relay
            .run(async {
                let _ = rx.await;
            })
            .await
            .expect("relay runs");
    });
    TestRelay {
        handle,
        stop: Some(tx),
        task,
    }
}

impl TestRelay {
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = self.task.await;
    }
}

pub fn source_config(stream: &str, dir: &Path) -> KinesisConfig {
    let mut c = KinesisConfig::new(stream, dir).expect("kinesis config");
    c.poll_idle = Duration::from_millis(200);
    c.poll_busy = Duration::from_millis(200);
    c.shard_sync_interval = Duration::from_secs(1);
    c.checkpoint_interval = Duration::from_millis(300);
    c.backoff_min = Duration::from_millis(20);
    c.backoff_max = Duration::from_millis(300);
    c
}

/// A source running on the relay's pipeline until `stop` is cancelled.
pub struct RunningSource {
    pub stop: CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
}

pub async fn run_source(
    k: &Kinesalite,
    config: KinesisConfig,
    relay: &TestRelay,
    endpoint: Option<&str>,
) -> RunningSource {
    let sdk = match endpoint {
        Some(e) => kinesalite::sdk_config(e),
        None => k.sdk_config(),
    };
    let source = KinesisSource::new(config, Some(&sdk))
        .await
        .expect("source starts");
    let stop = CancellationToken::new();
    let cx = relay.handle.source_context(stop.clone());
    let task = tokio::spawn(async move { source.run(cx).await.expect("source runs") });
    RunningSource { stop, task }
}

impl RunningSource {
    pub async fn stop(self) {
        self.stop.cancel();
        self.task.await.expect("source task");
    }
}

/// `n` lines `prefix i 1700000000` for i in from..from+n.
pub fn lines(prefix: &str, from: u32, n: u32) -> String {
    (from..from + n)
        .map(|i| format!("{prefix} {i} 1700000000\n"))
        .collect()
}
