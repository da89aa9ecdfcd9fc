//! The capacity-planning harness behind `anthracite bench`.
//!
//! It answers "how many relays and cores for N datapoints/s to M carbon-caches, and what
//! happens when one is slow?" and is the instrument behind every performance claim in this
//! project. One run goes:
//!
//! 1. **scenario** — [`scenario`]: a TOML file (`bench/scenarios/*.toml`) plus command-line
//!    overrides ([`args::BenchArgs`]), validated so every run is bounded in time and count.
//! 2. **generate** — [`generator`]: realistic names (`host-0001.cpu.3.user`), payloads rendered
//!    per connection before the clock starts, line or pickle, K connections, maximum or paced
//!    rate; each datapoint's value carries its send instant for latency. Its own ceiling is
//!    measured first against a discarding sink.
//! 3. **relay** — [`target`]: anthracite in-process on its own runtime ([`inprocess`]), a relay
//!    already running at an address, or a command started per run ([`process`]: no shell when
//!    possible, own process group, stopped by PID with SIGTERM then SIGKILL).
//! 4. **sink** — [`anthracite_sink`]: M loopback listeners that count datapoints exactly (line
//!    and pickle protocols 0–5), measure latency, and can play a slow or a down carbon-cache;
//!    [`placement`] says where each datapoint should have landed.
//! 5. **measure** — [`measure`]: relay CPU seconds and peak RSS from `/proc`;
//!    [`Histogram`](anthracite_sink::Histogram): latency percentiles; the [`runner`] samples
//!    everything every 100 ms.
//! 6. **report** — [`report`]: table, JSON and the capacity estimate; [`chart`]: SVG of
//!    throughput and latency over time; [`compare`]: A B A B … runs with per-pair ratios.
//!
//! Targets are loopback-only unless `--allow-non-loopback` is given. Every run is bounded:
//! at most [`scenario::MAX_DATAPOINTS`] datapoints, `limits.max_send_secs` of sending and
//! `limits.drain_timeout_secs` of draining; relay processes are stopped by PID afterwards.
//!
//! ## Usage
//!
//! ```text
//! # anthracite in-process (its own runtime; CPU from its threads only)
//! anthracite bench bench/scenarios/burst-3m.toml --json burst.json --svg burst.svg
//!
//! # a relay that is already running, and its pid for CPU/RSS; point it at fixed sink ports
//! anthracite bench bench/scenarios/steady-250k.toml --target 127.0.0.1:2003 \
//!     --relay-pid 1234 --sink-ports 2104,2204
//!
//! # A B A B …: anthracite against carbon-c-relay and carbon-relay.py 1.1.10, 3 rounds
//! anthracite bench bench/scenarios/burst-3m.toml --rounds 3 --drain-timeout 180 --compare \
//!   anthracite=in-process \
//!   "carbon-c-relay=carbon-c-relay -f {config:bench/relays/carbon-c-relay.conf} -p {line_port} -w 2 -q 5000000" \
//!   "carbon-relay=sh -c 'touch {config_dir}/storage-schemas.conf && exec carbon-relay.py \
//!      --config={config:bench/relays/carbon.conf} --nodaemon --pidfile={config_dir}/relay.pid \
//!      --logdir={config_dir} start'"
//! ```
//!
//! Placeholders in relay commands and templates: `{line_port}`, `{pickle_port}` (free ports
//! chosen per run), `{sink_ports}`, `{sink_addrs}`, `{dest_list}` (carbon's
//! `host:port:instance, …`), `{c_relay_servers}` (`host:port=instance …`), `{toml_servers}`,
//! `{sink_protocol}`, `{aggregation_toml}`, `{aggregation_rules}` and
//! `{carbon_aggregator_settings}` (the scenario's [`aggregation`] for anthracite and
//! carbon-aggregator.py), `{config}` (from `--relay-config-template`), `{config:PATH}` (renders
//! PATH and expands to the rendered file) and `{config_dir}` (a fresh directory per run, also
//! holding the relay's `relay.log`).
//!
//! ## Reading the figures
//!
//! Throughput is delivered datapoints over first byte sent → last datapoint received. On a
//! shared machine it moves with whatever else runs; **CPU-seconds per million datapoints** is
//! the stable figure (time the relay actually ran, not time it waited for a core), and the
//! capacity estimate is derived from it. `--compare` runs contenders alternately so drift hits
//! all of them alike; quote its ratios rather than absolute rates.

#![warn(missing_docs)]

pub mod aggregation;
pub mod args;
pub mod chart;
pub mod compare;
pub mod costs;
pub mod generator;
pub mod inprocess;
pub mod measure;
pub mod placement;
pub mod process;
pub mod progress;
pub mod report;
pub mod routing;
pub mod runner;
pub mod scenario;
pub mod sweep;
pub mod target;

use std::net::SocketAddr;

pub use args::{BenchArgs, TargetSpec};
pub use costs::CostReport;
pub use report::Report;
pub use runner::{RunOptions, run_once};
pub use scenario::Scenario;
pub use sweep::SweepReport;

/// Errors of the harness.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A scenario file is not valid TOML or has unknown keys.
    #[error("scenario {file}: {message}")]
    ScenarioParse {
        /// The file (empty when parsed from a string).
        file: String,
        /// What the parser said.
        message: String,
    },
    /// A value is out of bounds or inconsistent.
    #[error("{0}")]
    Invalid(String),
    /// A target is not on loopback and `--allow-non-loopback` was not given.
    #[error("{0} is not a loopback address (pass --allow-non-loopback to bench it anyway)")]
    NonLoopback(SocketAddr),
    /// An I/O operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// The relay under test could not be started or misbehaved.
    #[error("relay: {0}")]
    Relay(String),
    /// The chart could not be drawn.
    #[error("chart: {0}")]
    Chart(String),
    /// The JSON report could not be written.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

fn run_options(args: &BenchArgs) -> RunOptions {
    RunOptions {
        progress: !args.no_progress,
        sink_ports: args.sink_ports.clone(),
        relay_threads: args.relay_threads,
        run_id: 0,
        label: String::new(),
    }
}

fn write_json(path: &std::path::Path, value: &impl serde::Serialize) -> Result<(), BenchError> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text).map_err(|source| BenchError::Io {
        context: format!("writing {}", path.display()),
        source,
    })
}

/// What `anthracite bench --sweep` produced.
#[derive(Clone, Debug)]
pub enum Swept {
    /// `[sweep] rates`: the capacity sweep.
    Rates(SweepReport),
    /// `[sweep] rules | destinations | replication`: the cost of the configuration.
    Costs(CostReport),
}

impl Swept {
    /// Counts add up and every derived figure follows from the runs.
    pub fn is_consistent(&self) -> bool {
        match self {
            Swept::Rates(r) => r.is_consistent(),
            Swept::Costs(r) => r.is_consistent(),
        }
    }
}

/// Runs `anthracite bench --sweep`. Over rates: the scenario at every offered rate against the
/// target or every `--compare` relay; prints the table ending in the `knee:` line, writes
/// `--json` (rows and knees) and `--svg` (latency and loss against offered rate). Over the
/// configuration (`[sweep] rules`, `destinations`, `replication`): every point `--rounds`
/// times (default 1) per relay; prints CPU per million datapoints at each point, writes
/// `--json` and `--svg` (cost against the swept value).
pub async fn run_sweep(args: BenchArgs) -> Result<Swept, BenchError> {
    let overrides = args.overrides();
    let scenario = Scenario::load(&args.scenario)?.validate(&overrides)?;
    let targets = args.named_targets()?;
    let opts = run_options(&args);
    if costs::points(&scenario).is_some() {
        let report = costs::run(&scenario, &targets, args.rounds.unwrap_or(1), &opts).await?;
        print!("{}", report.table());
        if let Some(path) = &args.json {
            write_json(path, &report)?;
        }
        if let Some(path) = &args.svg {
            chart::write_costs_svg(&report, path)?;
        }
        return Ok(Swept::Costs(report));
    }
    let report = sweep::run(&scenario, &targets, &overrides, &opts).await?;
    print!("{}", report.table());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
    }
    if let Some(path) = &args.svg {
        chart::write_sweep_svg(&report, path)?;
    }
    Ok(Swept::Rates(report))
}

/// Runs `anthracite bench`: loads the scenario, runs it (or the `--compare`), prints the
/// table, writes `--json` and `--svg`, and returns the report. `--sweep` is [`run_sweep`].
pub async fn run(args: BenchArgs) -> Result<Report, BenchError> {
    if args.sweep {
        return Err(BenchError::Invalid(
            "--sweep produces a sweep report: run it with bench::run_sweep".into(),
        ));
    }
    let scenario = Scenario::load(&args.scenario)?.validate(&args.overrides())?;
    let opts = run_options(&args);
    let report = if args.compare.is_empty() {
        let report = run_once(&scenario, &args.target_spec()?, &opts).await?;
        println!("{}", report.table());
        report
    } else {
        let named = args.named_targets()?;
        let report = compare::run(&scenario, &named, args.rounds.unwrap_or(3), &opts).await?;
        if let Some(c) = &report.comparison {
            println!("{}", c.table());
        }
        report
    };
    if let Some(path) = &args.json {
        write_json(path, &report)?;
    }
    if let Some(path) = &args.svg {
        chart::write_svg(&report, path)?;
    }
    Ok(report)
}
