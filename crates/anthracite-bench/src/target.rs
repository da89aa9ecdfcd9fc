//! The relay under test: started (in-process or as a command) or found (by address), pointed
//! at the sinks, and stopped afterwards.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::BenchError;
use super::args::TargetSpec;
use super::inprocess::InProcessRelay;
use super::measure::{CpuTracker, RELAY_THREAD_NAME};
use super::process::RelayProcess;
use super::routing::Routing;
use super::scenario::{Aggregation, Names, Protocol, Scenario};

/// Pause between a started relay accepting connections and the run starting.
pub const STARTUP_SETTLE: Duration = Duration::from_secs(1);

/// Values substituted into `--relay-cmd` and `--relay-config-template`.
#[derive(Clone, Debug, PartialEq)]
pub struct Placeholders {
    /// Port the relay should accept plaintext on.
    pub line_port: u16,
    /// Port the relay should accept pickle on.
    pub pickle_port: u16,
    /// Sink addresses.
    pub sinks: Vec<SocketAddr>,
    /// Protocol the relay should speak to the sinks.
    pub sink_protocol: Protocol,
    /// Rendered config file, if any.
    pub config: Option<PathBuf>,
    /// A fresh directory for this run's rendered files, logs and pid files.
    pub config_dir: PathBuf,
    /// How the relay routes (`{router_toml}`, `{c_relay_routes}`, `{replication}`).
    pub routing: Routing,
    /// The generated names the rules and aggregates are written for.
    pub names: Names,
    /// The scenario's aggregation (`{aggregation_toml}`, `{aggregation_rules}`).
    pub aggregation: Option<Aggregation>,
}

impl Placeholders {
    /// Replaces every `{placeholder}` in `text`.
    pub fn render(&self, text: &str) -> String {
        let ports: Vec<String> = self.sinks.iter().map(|a| a.port().to_string()).collect();
        let addrs: Vec<String> = self.sinks.iter().map(|a| a.to_string()).collect();
        let dests: Vec<String> = self
            .sinks
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{a}:{}", instance(i)))
            .collect();
        let c_relay: Vec<String> = self
            .sinks
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{a}={}", instance(i)))
            .collect();
        let toml: Vec<String> = dests.iter().map(|d| format!("\"{d}\"")).collect();
        let aggregation = self.aggregation.as_ref();
        text.replace(
            "{router_toml}",
            &self.routing.anthracite_toml(&toml, &self.names),
        )
        .replace(
            "{c_relay_routes}",
            &self
                .routing
                .c_relay_conf(&c_relay, &self.names, aggregation),
        )
        .replace("{replication}", &self.routing.replication.to_string())
        .replace(
            "{aggregation_toml}",
            &aggregation.map_or_else(String::new, |a| a.anthracite_toml(&self.names)),
        )
        .replace(
            "{aggregation_rules}",
            &aggregation.map_or_else(String::new, |a| a.carbon_rules_file(&self.names)),
        )
        .replace(
            "{carbon_aggregator_settings}",
            &aggregation.map_or_else(String::new, Aggregation::carbon_settings),
        )
        .replace("{line_port}", &self.line_port.to_string())
        .replace("{pickle_port}", &self.pickle_port.to_string())
        .replace("{sink_ports}", &ports.join(","))
        .replace("{sink_addrs}", &addrs.join(" "))
        .replace("{dest_list}", &dests.join(", "))
        .replace("{c_relay_servers}", &c_relay.join(" "))
        .replace("{toml_servers}", &toml.join(", "))
        .replace("{sink_protocol}", self.sink_protocol.as_str())
        .replace("{config_dir}", &self.config_dir.display().to_string())
        .replace(
            "{config}",
            &self
                .config
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        )
    }
}

/// carbon instance name of sink `i`: a, b, … z, a1 …
pub fn instance(i: usize) -> String {
    let letter = (b'a' + (i % 26) as u8) as char;
    if i < 26 {
        letter.to_string()
    } else {
        format!("{letter}{}", i / 26)
    }
}

/// A relay ready to receive.
pub struct RunningTarget {
    /// Label for reports.
    pub label: String,
    /// Where the generator connects.
    pub addr: SocketAddr,
    /// CPU/RSS tracker, when the relay's threads or pid are known.
    pub cpu: Option<CpuTracker>,
    /// What `peak_rss_bytes` covers.
    pub rss_scope: String,
    /// Caveats for the report.
    pub notes: Vec<String>,
    kind: Kind,
}

enum Kind {
    InProcess(Box<InProcessRelay>),
    External,
    Process(RelayProcess),
}

/// Two distinct free loopback ports: both bound at once, then released (a small race with
/// other processes is accepted; the two cannot be the same port, which picking them one after
/// the other allowed: the relay then refused its configuration).
fn free_ports() -> Result<(u16, u16), BenchError> {
    let bind = || std::net::TcpListener::bind("127.0.0.1:0");
    let port = |l: std::net::TcpListener| l.local_addr().map(|a| a.port());
    let (a, b) = bind()
        .and_then(|a| Ok((a, bind()?)))
        .and_then(|(a, b)| Ok((port(a)?, port(b)?)))
        .map_err(|source| BenchError::Io {
            context: "finding a free port".into(),
            source,
        })?;
    Ok((a, b))
}

/// Waits until `addr` accepts a TCP connection (bounded by `timeout`).
async fn wait_ready(
    addr: SocketAddr,
    timeout: Duration,
    process: &mut RelayProcess,
) -> Result<(), BenchError> {
    let until = Instant::now() + timeout;
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if !process.is_running() {
            return Err(BenchError::Relay(format!(
                "relay exited before accepting on {addr}; see {}",
                process.log.display()
            )));
        }
        if Instant::now() >= until {
            return Err(BenchError::Relay(format!(
                "relay did not accept on {addr} within {timeout:?}; see {}",
                process.log.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl RunningTarget {
    /// Starts or locates the target and points it at `sinks`.
    pub async fn start(
        spec: &TargetSpec,
        scenario: &Scenario,
        sinks: &[SocketAddr],
        relay_threads: Option<usize>,
        run_id: usize,
    ) -> Result<RunningTarget, BenchError> {
        match spec {
            TargetSpec::InProcess => {
                let relay = InProcessRelay::start(scenario, sinks, relay_threads, run_id).await?;
                Ok(RunningTarget {
                    label: spec.label(),
                    addr: relay.addr(scenario.load.protocol),
                    cpu: Some(CpuTracker::threads_named(RELAY_THREAD_NAME)),
                    rss_scope: "whole harness process: relay + generator + sinks".into(),
                    notes: vec![],
                    kind: Kind::InProcess(Box::new(relay)),
                })
            }
            TargetSpec::Address { addr, pid } => {
                let mut notes = vec![];
                if pid.is_none() {
                    notes.push("no --relay-pid: relay CPU and RSS not measured".into());
                }
                Ok(RunningTarget {
                    label: spec.label(),
                    addr: *addr,
                    cpu: pid.map(CpuTracker::process_tree),
                    rss_scope: "relay process tree (sum of VmHWM)".into(),
                    notes,
                    kind: Kind::External,
                })
            }
            TargetSpec::Command {
                name,
                cmd,
                template,
            } => {
                let dir = std::env::temp_dir();
                // `name` defaults to the command, which may hold `/`: keep the stem one path
                // component.
                let safe: String = name
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '-' {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                let stem = format!("anthracite-bench-{}-{run_id}-{safe}", std::process::id());
                // Its own directory: carbon looks for storage-schemas.conf beside carbon.conf.
                let conf_dir = dir.join(&stem);
                std::fs::create_dir_all(&conf_dir).map_err(|source| BenchError::Io {
                    context: format!("creating {}", conf_dir.display()),
                    source,
                })?;
                let (line_port, pickle_port) = free_ports()?;
                let mut ph = Placeholders {
                    line_port,
                    pickle_port,
                    sinks: sinks.to_vec(),
                    sink_protocol: scenario.sinks.protocol,
                    config: None,
                    config_dir: conf_dir.clone(),
                    routing: scenario.routing.clone(),
                    names: scenario.names.clone(),
                    aggregation: scenario.aggregation.clone(),
                };
                if let Some(t) = template {
                    let name = t
                        .file_name()
                        .map_or("relay.conf".into(), |n| n.to_os_string());
                    let path = conf_dir.join(name);
                    ph.config = Some(path.clone());
                    render_template(t, &path, &ph)?;
                }
                let cmd = render_inline_templates(cmd, &conf_dir, &ph)?;
                let rendered = ph.render(&cmd);
                let log = conf_dir.join("relay.log");
                let mut process = RelayProcess::spawn(&rendered, log)?;
                let port = match scenario.load.protocol {
                    Protocol::Line => ph.line_port,
                    Protocol::Pickle => ph.pickle_port,
                };
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                let timeout = Duration::from_secs_f64(scenario.limits.startup_timeout_secs);
                wait_ready(addr, timeout, &mut process).await?;
                // Some relays listen before their workers run (carbon-c-relay reset the first
                // connections in one run out of nine); give them a moment to settle.
                tokio::time::sleep(STARTUP_SETTLE).await;
                if !process.is_running() {
                    return Err(BenchError::Relay(format!(
                        "relay exited right after starting; see {}",
                        process.log.display()
                    )));
                }
                Ok(RunningTarget {
                    label: name.clone(),
                    addr,
                    cpu: Some(CpuTracker::process_tree(process.pid)),
                    rss_scope: "relay process tree (sum of VmHWM)".into(),
                    notes: vec![format!("relay command: {rendered}")],
                    kind: Kind::Process(process),
                })
            }
        }
    }

    /// The relay's own counters as JSON (in-process only).
    pub fn relay_stats(&self) -> Option<RelayCounters> {
        match &self.kind {
            Kind::InProcess(r) => r.stats(),
            _ => None,
        }
    }

    /// Stops what the harness started (nothing for an external relay).
    pub async fn stop(self) {
        match self.kind {
            Kind::InProcess(r) => r.stop().await,
            Kind::External => {}
            Kind::Process(mut p) => {
                let _ = tokio::task::spawn_blocking(move || p.stop()).await;
            }
        }
    }
}

/// Per-destination and total counters read from an in-process relay.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct RelayCounters {
    /// Datapoints accepted.
    pub received: u64,
    /// Datapoints rejected as invalid.
    pub invalid: u64,
    /// Per destination, in sink order: (sent, dropped, queued).
    pub destinations: Vec<(u64, u64, u64)>,
}

/// Replaces every `{config:PATH}` in `cmd` with the path of `PATH` rendered into `dir`, so
/// each `--compare` contender can carry its own config template.
pub fn render_inline_templates(
    cmd: &str,
    dir: &Path,
    ph: &Placeholders,
) -> Result<String, BenchError> {
    let mut out = String::with_capacity(cmd.len());
    let mut rest = cmd;
    while let Some(at) = rest.find("{config:") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "{config:".len()..];
        let end = after
            .find('}')
            .ok_or_else(|| BenchError::Invalid(format!("unterminated {{config:…}} in {cmd:?}")))?;
        let template = Path::new(&after[..end]);
        std::fs::create_dir_all(dir).map_err(|source| BenchError::Io {
            context: format!("creating {}", dir.display()),
            source,
        })?;
        let name = template
            .file_name()
            .map_or("relay.conf".into(), |n| n.to_os_string());
        let path = dir.join(name);
        let mut own = ph.clone();
        own.config = Some(path.clone());
        render_template(template, &path, &own)?;
        out.push_str(&path.display().to_string());
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn render_template(template: &Path, out: &Path, ph: &Placeholders) -> Result<(), BenchError> {
    let text = std::fs::read_to_string(template).map_err(|source| BenchError::Io {
        context: format!("reading {}", template.display()),
        source,
    })?;
    std::fs::write(out, ph.render(&text)).map_err(|source| BenchError::Io {
        context: format!("writing {}", out.display()),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The relay's two listener ports are never the same port.
    #[test]
    fn the_two_free_ports_differ() {
        for _ in 0..200 {
            let (line, pickle) = free_ports().expect("free ports");
            assert!(
                line != 0 && pickle != 0 && line != pickle,
                "{line} {pickle}"
            );
        }
    }

    #[test]
    fn placeholders_render_for_carbon_and_c_relay() {
        let ph = Placeholders {
            line_port: 2003,
            pickle_port: 2004,
            sinks: vec![
                "127.0.0.1:2104".parse().unwrap(),
                "127.0.0.1:2204".parse().unwrap(),
            ],
            sink_protocol: Protocol::Pickle,
            config: Some(PathBuf::from("/tmp/x.conf")),
            config_dir: PathBuf::from("/tmp"),
            routing: Routing::default(),
            names: Names::default(),
            aggregation: None,
        };
        assert_eq!(
            ph.render("DESTINATIONS = {dest_list}"),
            "DESTINATIONS = 127.0.0.1:2104:a, 127.0.0.1:2204:b"
        );
        assert_eq!(
            ph.render("-f {config} -p {line_port} {sink_addrs} {sink_ports}"),
            "-f /tmp/x.conf -p 2003 127.0.0.1:2104 127.0.0.1:2204 2104,2204"
        );
        assert_eq!(
            ph.render("{c_relay_servers} | {toml_servers}"),
            "127.0.0.1:2104=a 127.0.0.1:2204=b | \"127.0.0.1:2104:a\", \"127.0.0.1:2204:b\""
        );
        assert_eq!(instance(27), "b1");
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t.conf");
        std::fs::write(&t, "port {line_port} self {config}").unwrap();
        let out = dir.path().join("out");
        let cmd = render_inline_templates(
            &format!("relay -f {{config:{}}} -x", t.display()),
            &out,
            &ph,
        )
        .unwrap();
        let rendered = out.join("t.conf");
        assert_eq!(cmd, format!("relay -f {} -x", rendered.display()));
        assert_eq!(
            std::fs::read_to_string(&rendered).unwrap(),
            format!("port 2003 self {}", rendered.display())
        );
        assert!(render_inline_templates("x {config:oops", &out, &ph).is_err());
    }
}
