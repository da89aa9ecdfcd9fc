//! anthracite itself as the target, in this process but on its own tokio runtime.
//!
//! The relay runtime's threads are all named [`RELAY_THREAD_NAME`], so its CPU time can be read
//! per thread from `/proc/self/task` without counting the generator and sinks, which run on the
//! caller's runtime. Memory cannot be split that way: peak RSS is the whole process's.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use super::BenchError;
use super::measure::RELAY_THREAD_NAME;
use super::scenario::{Protocol, Scenario};
use super::target::{RelayCounters, instance};
use anthracite::{Config, Relay, RelayHandle};

/// Default queue bound per destination, the same 5M the carbon-relay and carbon-c-relay
/// templates in `bench/relays/` use, so a burst is compared on equal terms.
pub const QUEUE_DATAPOINTS: usize = 5_000_000;

/// The relay config the harness runs in-process: the product's defaults, pointed at the sinks,
/// listeners injected, self-telemetry off, queues of `in_process.queue_datapoints`
/// (default [`QUEUE_DATAPOINTS`]), spilling into `spill_dir` when given.
pub fn config_toml(scenario: &Scenario, sinks: &[SocketAddr], spill_dir: Option<&Path>) -> String {
    let servers: Vec<String> = sinks
        .iter()
        .enumerate()
        .map(|(i, a)| format!("\"{a}:{}\"", instance(i)))
        .collect();
    let spill = match spill_dir {
        // TOML literal string: no escapes, so any path without a `'` is taken verbatim.
        Some(dir) => format!(
            "when_full = \"spill\"\n[destinations.spill]\ndir = '{}'\n",
            dir.display()
        ),
        None => String::new(),
    };
    let aggregation = scenario
        .aggregation
        .as_ref()
        .map_or_else(String::new, |a| a.anthracite_toml(&scenario.names));
    let router = scenario.routing.anthracite_toml(&servers, &scenario.names);
    format!(
        "{aggregation}[listen]\nline_tcp = \"\"\npickle_tcp = \"\"\n\
         {router}[telemetry]\ninterval_secs = 0\n\
         [destinations]\nservers = [{}]\nprotocol = \"{}\"\n\
         [destinations.queue]\nmax_datapoints = {}\nmax_bytes = 1073741824\n{spill}",
        servers.join(", "),
        scenario.sinks.protocol.as_str(),
        scenario.in_process.queue_datapoints,
    )
}

/// A running in-process relay.
pub struct InProcessRelay {
    line: SocketAddr,
    pickle: SocketAddr,
    handle: RelayHandle,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    spill_dir: Option<PathBuf>,
}

type Ready = Result<(SocketAddr, SocketAddr, RelayHandle), BenchError>;

impl InProcessRelay {
    /// Starts the relay on its own runtime with `threads` workers (default: available cores);
    /// `run_id` names its spill directory when the scenario spills.
    pub async fn start(
        scenario: &Scenario,
        sinks: &[SocketAddr],
        threads: Option<usize>,
        run_id: usize,
    ) -> Result<InProcessRelay, BenchError> {
        let spill_dir = scenario.in_process.spill.then(|| {
            std::env::temp_dir().join(format!(
                "anthracite-bench-{}-{run_id}-spill",
                std::process::id()
            ))
        });
        let config = Config::from_toml_str(&config_toml(scenario, sinks, spill_dir.as_deref()))
            .map_err(|e| BenchError::Relay(format!("in-process relay config: {e}")))?;
        let threads = threads
            .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
            .unwrap_or(2)
            .max(1);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(RELAY_THREAD_NAME)
            .enable_all()
            .build()
            .map_err(|source| BenchError::Io {
                context: "building the relay runtime".into(),
                source,
            })?;
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Ready>(1);
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(RELAY_THREAD_NAME.into())
            .spawn(move || {
                runtime.block_on(async move {
                    let bound = async {
                        let io = |source| BenchError::Io {
                            context: "binding relay listeners".into(),
                            source,
                        };
                        let line = tokio::net::TcpListener::bind("127.0.0.1:0")
                            .await
                            .map_err(io)?;
                        let pickle = tokio::net::TcpListener::bind("127.0.0.1:0")
                            .await
                            .map_err(io)?;
                        let (la, pa) = (
                            line.local_addr().map_err(io)?,
                            pickle.local_addr().map_err(io)?,
                        );
                        let relay = Relay::builder(config)
                            .line_listener(line)
                            .pickle_listener(pickle)
                            .build()
                            .map_err(|e| BenchError::Relay(e.to_string()))?;
                        Ok::<_, BenchError>((la, pa, relay))
                    }
                    .await;
                    match bound {
                        Ok((la, pa, relay)) => {
                            let _ = ready_tx.send(Ok((la, pa, relay.handle())));
                            let _ = relay
                                .run(async {
                                    let _ = shutdown_rx.await;
                                })
                                .await;
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                });
            })
            .map_err(|source| BenchError::Io {
                context: "starting the relay thread".into(),
                source,
            })?;
        let ready = tokio::task::spawn_blocking(move || ready_rx.recv())
            .await
            .map_err(|e| BenchError::Relay(e.to_string()))?
            .map_err(|_| BenchError::Relay("relay thread ended before it was ready".into()))?;
        let (line, pickle, handle) = ready?;
        Ok(InProcessRelay {
            line,
            pickle,
            handle,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
            spill_dir,
        })
    }

    /// Where to send `protocol`.
    pub fn addr(&self, protocol: Protocol) -> SocketAddr {
        match protocol {
            Protocol::Line => self.line,
            Protocol::Pickle => self.pickle,
        }
    }

    /// The relay's counters.
    pub fn stats(&self) -> Option<RelayCounters> {
        let s = self.handle.stats();
        Some(RelayCounters {
            received: s.ingest.received,
            invalid: s.ingest.invalid.total(),
            destinations: s
                .destinations
                .iter()
                .map(|d| (d.sent, d.dropped_total(), d.queued))
                .collect(),
        })
    }

    /// Shuts the relay down and waits for its thread.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        if let Some(dir) = self.spill_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for InProcessRelay {
    fn drop(&mut self) {
        // Dropped without stop(): tell the relay to shut down; its thread ends on its own.
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}
