//! `anthracite bench` command-line arguments.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use super::BenchError;
use super::scenario::{Overrides, Protocol};

/// Arguments of `anthracite bench`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct BenchArgs {
    /// Scenario file (see bench/scenarios/*.toml).
    pub scenario: PathBuf,

    /// Send this many datapoints (overrides the scenario; switches to count mode).
    #[arg(long)]
    pub datapoints: Option<u64>,
    /// Send for this many seconds instead of a count.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Total datapoints/s; 0 = as fast as possible.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Generator connections.
    #[arg(long)]
    pub connections: Option<usize>,
    /// Distinct metric names.
    #[arg(long)]
    pub names: Option<usize>,
    /// Protocol towards the relay.
    #[arg(long, value_enum)]
    pub protocol: Option<Protocol>,
    /// Number of sinks (relay destinations).
    #[arg(long)]
    pub sinks: Option<usize>,
    /// After sending, wait at most this long for deliveries (slow relays need more).
    #[arg(long)]
    pub drain_timeout: Option<f64>,
    /// Rate to plan for in the capacity estimate (datapoints/s).
    #[arg(long)]
    pub capacity_rate: Option<f64>,

    /// Sweep: the capacity sweep runs the scenario once per offered rate (`[sweep] rates` or
    /// `--rates`), printing a row per rate and the knee (highest rate with no loss and p99
    /// within target); the configuration sweep (`[sweep] rules`, `destinations`,
    /// `replication`) prints the relay's CPU per million datapoints at each point.
    #[arg(long, conflicts_with = "rate")]
    pub sweep: bool,
    /// Offered rates of `--sweep`, datapoints/s, comma-separated (overrides `[sweep] rates`).
    #[arg(long, value_delimiter = ',', requires = "sweep")]
    pub rates: Option<Vec<f64>>,
    /// p99 latency target of `--sweep` in ms (overrides `[sweep] p99_target_ms`, default 100).
    #[arg(long, requires = "sweep")]
    pub p99_target_ms: Option<f64>,

    /// `in-process` (default) or the address of an already-running relay (its port for
    /// `--protocol`); that relay must send to the sinks, see `--sink-ports`.
    #[arg(long, visible_alias = "relay-addr", default_value = "in-process")]
    pub target: String,
    /// PID of the relay at `--target ADDR`, to read its CPU time and peak RSS from /proc.
    #[arg(long)]
    pub relay_pid: Option<u32>,
    /// Start this relay command for the run; placeholders: {line_port} {pickle_port}
    /// {sink_ports} {sink_addrs} {dest_list} (carbon `host:port:inst, …`) {c_relay_servers}
    /// (`host:port=inst …`) {toml_servers} {sink_protocol} {config} {config_dir}
    /// {router_toml} {c_relay_routes} {replication} (the scenario's `[routing]`)
    /// {aggregation_toml} {aggregation_rules} (its `[aggregation]`);
    /// `{config:PATH}` renders template PATH with the same placeholders and expands to its path.
    #[arg(long, conflicts_with = "compare")]
    pub relay_cmd: Option<String>,
    /// A relay config file rendered with the same placeholders into {config}.
    #[arg(long)]
    pub relay_config_template: Option<PathBuf>,
    /// Run the scenario against several relay commands alternately: NAME=CMD (repeatable).
    /// `NAME=in-process` compares the in-process relay.
    #[arg(long, num_args = 1.., value_name = "NAME=CMD")]
    pub compare: Vec<String>,
    /// Rounds of `--compare` (A B A B …); default 3. A configuration `--sweep` runs each
    /// point this many times per relay (default 1); a rate `--sweep` runs each rate once.
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Fixed sink ports (comma-separated) instead of ephemeral ones, for `--target ADDR`.
    #[arg(long, value_delimiter = ',')]
    pub sink_ports: Vec<u16>,
    /// Worker threads of the in-process relay's runtime (default: available cores).
    #[arg(long)]
    pub relay_threads: Option<usize>,
    /// Allow a non-loopback `--target`.
    #[arg(long)]
    pub allow_non_loopback: bool,

    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write a throughput/latency chart as SVG here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// No live progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

/// What a run is measured against.
#[derive(Clone, Debug, PartialEq)]
pub enum TargetSpec {
    /// anthracite on its own runtime inside this process.
    InProcess,
    /// An already-running relay; optionally its pid for CPU/RSS.
    Address {
        /// Where to send.
        addr: SocketAddr,
        /// Its pid, for /proc.
        pid: Option<u32>,
    },
    /// A relay command started (and stopped) per run.
    Command {
        /// Display name.
        name: String,
        /// Command line with placeholders.
        cmd: String,
        /// Config template, rendered into {config}.
        template: Option<PathBuf>,
    },
}

impl TargetSpec {
    /// Short label for reports.
    pub fn label(&self) -> String {
        match self {
            TargetSpec::InProcess => "in-process".into(),
            TargetSpec::Address { addr, .. } => addr.to_string(),
            TargetSpec::Command { name, .. } => name.clone(),
        }
    }
}

/// Refuses non-loopback addresses unless allowed.
pub fn check_loopback(addr: &SocketAddr, allow: bool) -> Result<(), BenchError> {
    let loopback = match addr.ip() {
        IpAddr::V4(ip) => ip.is_loopback(),
        IpAddr::V6(ip) => ip.is_loopback(),
    };
    if loopback || allow {
        Ok(())
    } else {
        Err(BenchError::NonLoopback(*addr))
    }
}

impl BenchArgs {
    /// The scenario overrides given on the command line.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            datapoints: self.datapoints,
            duration_secs: self.duration,
            rate: self.rate,
            connections: self.connections,
            names: self.names,
            protocol: self.protocol,
            sinks: self.sinks,
            capacity_target_rate: self.capacity_rate,
            drain_timeout_secs: self.drain_timeout,
            sweep_rates: self.rates.clone(),
            p99_target_ms: self.p99_target_ms,
        }
    }

    /// The single target of a non-compare run.
    pub fn target_spec(&self) -> Result<TargetSpec, BenchError> {
        if let Some(cmd) = &self.relay_cmd {
            return Ok(TargetSpec::Command {
                // The program's file name: `target/release/anthracite run …` → `anthracite`.
                name: cmd
                    .split_whitespace()
                    .next()
                    .and_then(|p| p.rsplit('/').next())
                    .filter(|n| !n.is_empty())
                    .unwrap_or("relay")
                    .to_string(),
                cmd: cmd.clone(),
                template: self.relay_config_template.clone(),
            });
        }
        if self.target == "in-process" {
            return Ok(TargetSpec::InProcess);
        }
        let addr: SocketAddr = self.target.parse().map_err(|_| {
            BenchError::Invalid(format!("--target {:?}: not an address", self.target))
        })?;
        check_loopback(&addr, self.allow_non_loopback)?;
        Ok(TargetSpec::Address {
            addr,
            pid: self.relay_pid,
        })
    }

    /// Every relay to measure, named: the `--compare` contenders, or the single target.
    pub fn named_targets(&self) -> Result<Vec<(String, TargetSpec)>, BenchError> {
        if self.compare.is_empty() {
            let spec = self.target_spec()?;
            return Ok(vec![(spec.label(), spec)]);
        }
        let names = self
            .compare
            .iter()
            .map(|c| c.split_once('=').map_or(c.as_str(), |(n, _)| n).to_string());
        Ok(names.zip(self.compare_specs()?).collect())
    }

    /// The contenders of `--compare`.
    pub fn compare_specs(&self) -> Result<Vec<TargetSpec>, BenchError> {
        self.compare
            .iter()
            .map(|c| {
                let (name, cmd) = c.split_once('=').ok_or_else(|| {
                    BenchError::Invalid(format!("--compare {c:?}: expected NAME=CMD"))
                })?;
                if cmd.trim() == "in-process" {
                    return Ok(TargetSpec::InProcess);
                }
                Ok(TargetSpec::Command {
                    name: name.to_string(),
                    cmd: cmd.to_string(),
                    template: self.relay_config_template.clone(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_loopback_needs_the_override() {
        let a: SocketAddr = "10.0.0.1:2003".parse().unwrap();
        assert!(check_loopback(&a, false).is_err());
        assert!(check_loopback(&a, true).is_ok());
        assert!(check_loopback(&"[::1]:2003".parse().unwrap(), false).is_ok());
        let args = BenchArgs {
            target: "192.168.1.1:2003".into(),
            ..Default::default()
        };
        assert!(matches!(
            args.target_spec(),
            Err(BenchError::NonLoopback(_))
        ));
    }

    #[test]
    fn a_relay_command_is_named_after_its_program() {
        let args = BenchArgs {
            relay_cmd: Some("target/release/anthracite run --config {config}".into()),
            ..Default::default()
        };
        assert_eq!(args.target_spec().unwrap().label(), "anthracite");
    }

    #[test]
    fn compare_parses_name_equals_command() {
        let args = BenchArgs {
            compare: vec!["a=in-process".into(), "c=carbon-c-relay -f {config}".into()],
            ..Default::default()
        };
        let specs = args.compare_specs().unwrap();
        assert_eq!(specs[0], TargetSpec::InProcess);
        assert_eq!(specs[1].label(), "c");
    }
}
