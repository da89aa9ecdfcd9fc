//! A fleet of real `anthracite` processes sharing one stream through a lease table: their
//! relay.toml files and environment (local AWS stand-ins only), and a sampler that records the
//! lease table's rows over time. Signals and stops go through [`RelayProcess`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anthracite_kinesis::unstable::leases::{DynamoDbTable, Lease, LeaseTable};
use tokio_util::sync::CancellationToken;

pub use anthracite_testkit::RelayProcess;
use anthracite_testkit::kinesalite;

/// The lease settings every fleet test uses: short, so failover happens within seconds.
pub const LEASE_SECS: f64 = 3.0;

/// Samples (100 ms apart, plus the scan) spanning more than a lease duration and a taker
/// cycle: after a steal, the thief reads only once the victim's lease has lapsed.
pub const SETTLED_SAMPLES: usize = 45;

/// One relay's settings.
pub struct RelaySpec<'a> {
    pub worker: &'a str,
    pub stream: &'a str,
    /// The sink it delivers to (`host:port`).
    pub sink: String,
    pub kinesis: &'a str,
    /// DynamoDB endpoint (DynamoDB Local, or a proxy in front of it).
    pub dynamodb: &'a str,
    /// Empty: file checkpoints only.
    pub table: &'a str,
    /// Empty: none.
    pub checkpoint_dir: Option<&'a Path>,
    /// The lease duration (normally [`LEASE_SECS`]).
    pub lease_secs: f64,
}

impl RelaySpec<'_> {
    pub fn toml(&self) -> String {
        let mut k = format!(
            "[[kinesis]]\nstream = \"{}\"\nendpoint_url = \"{}\"\npoll_idle_ms = 200\npoll_busy_ms = 200\nshard_sync_interval_secs = 1\ncheckpoint_interval_secs = 0.5\nbackoff_min_ms = 20\nbackoff_max_ms = 300\n",
            self.stream, self.kinesis
        );
        if let Some(d) = self.checkpoint_dir {
            k.push_str(&format!("checkpoint_dir = \"{}\"\n", d.display()));
        }
        if !self.table.is_empty() {
            k.push_str(&format!(
                "lease_table = \"{}\"\ndynamodb_endpoint_url = \"{}\"\nworker_id = \"{}\"\nlease_duration_secs = {}\n",
                self.table, self.dynamodb, self.worker, self.lease_secs
            ));
        }
        format!(
            "[listen]\nline_tcp = \"\"\npickle_tcp = \"\"\n[destinations]\nservers = [\"{}:a\"]\nbackoff_min_ms = 20\nbackoff_max_ms = 200\n[telemetry]\ninterval_secs = 0\n[shutdown]\ngrace_secs = 10\n{k}",
            self.sink
        )
    }
}

/// Writes `<dir>/<worker>.toml` and runs `anthracite run` on it, logging to
/// `<dir>/<worker>.log`.
pub fn start(dir: &Path, spec: &RelaySpec<'_>) -> RelayProcess {
    start_toml(dir, spec.worker, &spec.toml())
}

/// Writes `<dir>/<name>.toml` with `toml` and runs `anthracite run` on it (AWS credentials for
/// the local servers in its environment), logging to `<dir>/<name>.log`.
pub fn start_toml(dir: &Path, name: &str, toml: &str) -> RelayProcess {
    crate::anthracite(name)
        .toml(dir, toml)
        .envs(kinesalite::relay_env(dir))
        .start()
}

/// One scan of the lease table.
#[derive(Clone, Debug)]
pub struct Sample {
    /// In the order taken.
    pub index: usize,
    pub rows: Vec<Lease>,
}

impl Sample {
    pub fn row(&self, key: &str) -> Option<&Lease> {
        self.rows.iter().find(|r| r.key == key)
    }

    pub fn owner(&self, key: &str) -> Option<&str> {
        self.row(key).and_then(|r| r.owner.as_deref())
    }

    /// Unfinished leases per owner.
    pub fn counts(&self) -> std::collections::BTreeMap<String, usize> {
        let mut m = std::collections::BTreeMap::new();
        for r in self.rows.iter().filter(|r| !r.ended()) {
            if let Some(o) = &r.owner {
                *m.entry(o.clone()).or_insert(0) += 1;
            }
        }
        m
    }
}

/// Scans the table every 100 ms until stopped.
pub struct Sampler {
    pub samples: Arc<Mutex<Vec<Sample>>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    pub fn start(table: DynamoDbTable) -> Sampler {
        let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
        let stop = CancellationToken::new();
        let (s, st) = (samples.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while !st.is_cancelled() {
                if let Ok(rows) = table.scan().await {
                    let mut v = s.lock().expect("samples");
                    let index = v.len();
                    v.push(Sample { index, rows });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Sampler {
            samples,
            stop,
            task,
        }
    }

    pub fn all(&self) -> Vec<Sample> {
        self.samples.lock().expect("samples").clone()
    }

    pub fn last(&self) -> Option<Sample> {
        self.samples.lock().expect("samples").last().cloned()
    }

    /// Whether the last `n` samples all show the same owner for every row.
    pub fn unchanged_for(&self, n: usize) -> bool {
        let v = self.samples.lock().expect("samples");
        let Some(tail) = v.len().checked_sub(n).map(|from| &v[from..]) else {
            return false;
        };
        let owners = |s: &Sample| -> Vec<(String, Option<String>)> {
            s.rows
                .iter()
                .map(|r| (r.key.clone(), r.owner.clone()))
                .collect()
        };
        tail.windows(2).all(|w| owners(&w[0]) == owners(&w[1]))
    }

    /// Waits until the last sample holds `want` leases per owner and the last `settled`
    /// samples show no owner change; on timeout, fails with the lease table as last sampled
    /// and the owner changes over the last samples (a slow convergence and leases moving back
    /// and forth look the same from the count alone).
    pub async fn wait_settled(&self, what: &str, want: &[(&str, usize)], settled: usize) {
        let done = || {
            let done = crate::leases::balanced(&self.last(), want) && self.unchanged_for(settled);
            async move { done }
        };
        anthracite_testkit::wait_for_or(what, crate::harness::LONG, done, || self.describe(300))
            .await;
    }

    /// The last sample's rows and every owner or handoff change within the last `window`
    /// samples (100 ms apart).
    pub fn describe(&self, window: usize) -> String {
        use std::fmt::Write;
        let v = self.samples.lock().expect("samples");
        let mut out = String::new();
        let Some(last) = v.last() else {
            return "no sample of the lease table was taken".to_string();
        };
        let _ = writeln!(out, "lease table at sample {} (100 ms apart):", last.index);
        for r in &last.rows {
            let _ = writeln!(
                out,
                "  {} owner {:?} handoff {:?} counter {} switches {} checkpoint {:?}",
                r.key, r.owner, r.handoff, r.counter, r.owner_switches, r.checkpoint
            );
        }
        let from = v.len().saturating_sub(window);
        let _ = writeln!(out, "owner and handoff changes since sample {from}:");
        for w in v[from..].windows(2) {
            for r in &w[1].rows {
                let before = w[0].row(&r.key);
                let (owner, handoff) = (before.map(|b| &b.owner), before.map(|b| &b.handoff));
                if owner != Some(&r.owner) || handoff != Some(&r.handoff) {
                    let _ = writeln!(
                        out,
                        "  sample {}: {} owner {:?} -> {:?}, handoff {:?} -> {:?}",
                        w[1].index,
                        r.key,
                        owner.cloned().flatten(),
                        r.owner,
                        handoff.cloned().flatten(),
                        r.handoff
                    );
                }
            }
        }
        out
    }

    pub async fn stop(self) -> Vec<Sample> {
        self.stop.cancel();
        let _ = self.task.await;
        self.samples.lock().expect("samples").clone()
    }
}

/// A lease table client for the test itself.
pub fn table(endpoint: &str, name: &str) -> DynamoDbTable {
    DynamoDbTable::new(
        aws_sdk_dynamodb::Client::new(&kinesalite::sdk_config(endpoint)),
        name,
    )
}

/// A scratch directory for configs and logs, kept when a test fails (its path is printed).
pub fn scratch(test: &str) -> PathBuf {
    anthracite_testkit::scratch("kinesis-leases", test)
}
