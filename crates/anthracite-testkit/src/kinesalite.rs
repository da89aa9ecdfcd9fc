//! kinesalite 3.3.3 from npm (lock file committed), installed once with `npm ci` under a file
//! lock (test binaries run in parallel), started on 127.0.0.1 with a free port, killed on Drop.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::config::{BehaviorVersion, Credentials, Region};

/// A running kinesalite.
pub struct Kinesalite {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("servers/kinesalite")
}

fn require(tool: &str) {
    super::require_tool(
        tool,
        "--version",
        "the Kinesis tests need Node.js 18+ and npm to run kinesalite; \
         install Node.js (e.g. `apt-get install nodejs npm`)",
    );
}

/// `npm ci` into servers/kinesalite once; later callers see the stamp and return.
fn install() {
    require("node");
    require("npm");
    let dir = dir();
    let lock =
        File::create(dir.join(".install.lock")).expect("create servers/kinesalite/.install.lock");
    lock.lock().expect("lock servers/kinesalite/.install.lock");
    let stamp = dir.join("node_modules/.anthracite-installed");
    let wanted = std::fs::read(dir.join("package-lock.json")).expect("read package-lock.json");
    if std::fs::read(&stamp).ok().as_deref() == Some(&wanted[..]) {
        return;
    }
    let out = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .output()
        .expect("run npm ci");
    assert!(
        out.status.success(),
        "npm ci in servers/kinesalite failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&stamp, &wanted).expect("write install stamp");
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

/// Dummy static credentials and the endpoint: what every test client uses.
pub fn sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(aws_sdk_kinesis::config::SharedCredentialsProvider::new(
            Credentials::new("AKIDTEST", "secret", None, None, "test"),
        ))
        .endpoint_url(endpoint)
        .build()
}

/// The environment of a relay process that may talk to the local stand-ins only: dummy static
/// credentials, a region, no instance metadata, and neither the machine's AWS config nor its
/// credentials file (paths under `dir` that do not exist).
pub fn relay_env(dir: &Path) -> Vec<(String, String)> {
    let missing = |name: &str| dir.join(name).to_string_lossy().into_owned();
    vec![
        ("AWS_ACCESS_KEY_ID".into(), "AKIDTEST".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "secret".into()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
        ("AWS_CONFIG_FILE".into(), missing("no-aws-config")),
        (
            "AWS_SHARED_CREDENTIALS_FILE".into(),
            missing("no-aws-credentials"),
        ),
    ]
}

impl Kinesalite {
    /// Installs (once) and starts a fresh, empty server; ready when ListStreams answers.
    pub async fn start() -> Kinesalite {
        tokio::task::spawn_blocking(install)
            .await
            .expect("install task");
        let port = free_port();
        let child = Command::new("node")
            .arg(dir().join("start.js"))
            .arg(port.to_string())
            .current_dir(dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start kinesalite with node");
        let k = Kinesalite {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let client = k.client();
        for _ in 0..300 {
            if client.list_streams().send().await.is_ok() {
                return k;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("kinesalite did not answer ListStreams on {}", k.endpoint);
    }

    /// A client straight to kinesalite.
    pub fn client(&self) -> Client {
        Client::new(&sdk_config(&self.endpoint))
    }

    /// The SDK config for the relay's source (dummy credentials).
    pub fn sdk_config(&self) -> aws_config::SdkConfig {
        sdk_config(&self.endpoint)
    }

    /// Creates a stream and waits until it is ACTIVE.
    pub async fn create_stream(&self, name: &str, shards: i32) {
        self.client()
            .create_stream()
            .stream_name(name)
            .shard_count(shards)
            .send()
            .await
            .expect("CreateStream");
        self.wait_active(name).await;
    }

    /// Waits until the stream is ACTIVE (after create, split or merge).
    pub async fn wait_active(&self, name: &str) {
        let client = self.client();
        for _ in 0..300 {
            let d = client
                .describe_stream_summary()
                .stream_name(name)
                .send()
                .await
                .expect("DescribeStreamSummary");
            let active = d
                .stream_description_summary()
                .map(|s| s.stream_status().as_str() == "ACTIVE")
                .unwrap_or(false);
            if active {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("stream {name} never became ACTIVE");
    }

    /// Puts one record; returns its sequence number and shard.
    pub async fn put(&self, stream: &str, key: &str, data: &[u8]) -> (String, String) {
        let out = self
            .client()
            .put_record()
            .stream_name(stream)
            .partition_key(key)
            .data(aws_sdk_kinesis::primitives::Blob::new(data))
            .send()
            .await
            .expect("PutRecord");
        (
            out.sequence_number().to_string(),
            out.shard_id().to_string(),
        )
    }

    /// Open shard ids, sorted.
    pub async fn shard_ids(&self, stream: &str) -> Vec<String> {
        let out = self
            .client()
            .list_shards()
            .stream_name(stream)
            .send()
            .await
            .expect("ListShards");
        let mut ids: Vec<String> = out
            .shards()
            .iter()
            .map(|s| s.shard_id().to_string())
            .collect();
        ids.sort();
        ids
    }
}

impl Drop for Kinesalite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
