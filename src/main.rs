//! The `anthracite` command line: parse arguments, set up logging, run.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anthracite::unstable::config::router_spec;
use anthracite::unstable::router::Router;
use anthracite::{CarbonOptions, Config, Relay, RelayError};
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// mimalloc: on issue 14's hostile run (200 clients sending 1 MB names in 1 MB pickle frames
/// for 60 s, 2,000 idle) the relay peaked at 238 MiB with it and held 32 MiB once the clients
/// left, against 230 / 134 MiB with glibc's malloc and 230 / 96 MiB with jemalloc, and it
/// processed the most frames. Set here, in the binary only: embedders keep their allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code for configuration errors (a runtime failure exits with 1).
const EXIT_CONFIG: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "anthracite",
    version,
    about = "A high-performance carbon relay for Graphite"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: ConfigArgs,
}

#[derive(Args, Debug, Clone)]
struct ConfigArgs {
    /// relay.toml to use.
    #[arg(long, short = 'c', global = true, default_value = "relay.toml")]
    config: PathBuf,
    /// Run on carbon-relay's carbon.conf instead ([relay], then [relay:<instance>]).
    #[arg(long, global = true, value_name = "PATH")]
    carbon_config: Option<PathBuf>,
    /// carbon instance (with --carbon-config): section [relay:<instance>], self-metrics
    /// <host>-<instance>.
    #[arg(long, global = true, default_value = "a")]
    instance: String,
    /// relay-rules.conf (with --carbon-config), instead of <conf dir>/RELAY_RULES.
    #[arg(long, global = true, value_name = "PATH")]
    rules: Option<PathBuf>,
    /// aggregation-rules.conf (with --carbon-config), instead of <conf dir>/AGGREGATION_RULES.
    #[arg(long, global = true, value_name = "PATH")]
    aggregation_rules: Option<PathBuf>,
}

impl ConfigArgs {
    /// The file the configuration came from.
    fn source(&self) -> &Path {
        self.carbon_config.as_deref().unwrap_or(&self.config)
    }

    /// Loads relay.toml, or carbon.conf with the warnings it produced.
    fn load(&self) -> Result<(Config, Vec<String>), anthracite::ConfigError> {
        match &self.carbon_config {
            None => Config::load(&self.config).map(|c| (c, Vec::new())),
            Some(path) => {
                let mut options = CarbonOptions::new(path.clone());
                options.instance = self.instance.clone();
                options.rules = self.rules.clone();
                options.aggregation_rules = self.aggregation_rules.clone();
                Config::load_carbon(&options).map(|i| (i.config, i.warnings))
            }
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the relay (the default).
    Run,
    /// Validate the configuration and print it with every default resolved.
    Check,
    /// Print the destinations of each NAME (or each line of stdin), in preference order.
    Route {
        /// Metric names; read from stdin when none are given.
        names: Vec<String>,
    },
    #[cfg(feature = "bench")]
    /// Capacity-planning benchmark: load generator + counting sinks + report, against
    /// anthracite in-process or any relay by address or command (see bench/scenarios/).
    Bench(Box<anthracite::unstable::bench::BenchArgs>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let command = cli.command.unwrap_or(Command::Run);
    #[cfg(feature = "bench")]
    if let Command::Bench(args) = command {
        // The harness builds its own relay configuration; no relay.toml is read.
        return match bench(*args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("anthracite bench: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let (config, warnings) = match cli.run.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("anthracite: configuration error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    for w in &warnings {
        tracing::warn!("{w}");
    }
    let result = match command {
        Command::Run => run(config),
        #[cfg(feature = "bench")]
        Command::Bench(_) => run(config),
        Command::Check => check(&config, cli.run.source(), &warnings),
        Command::Route { names } => route(config, names),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("anthracite: {e:#}");
            if is_config_error(&e) {
                ExitCode::from(EXIT_CONFIG)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Errors found in the configuration after it validated (the router cannot be built from
/// it, a spill log cannot be opened) exit like a configuration error.
fn is_config_error(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<anthracite::RouterError>().is_some()
            || matches!(
                c.downcast_ref::<RelayError>(),
                Some(RelayError::Router(_) | RelayError::Spill { .. })
            )
    })
}

fn run(config: Config) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("anthracite")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let relay = Relay::builder(config).build()?;
        let report = relay.run(shutdown_signal()).await?;
        let lost: u64 = report.undelivered.iter().map(|(_, n)| n).sum();
        if lost > 0 {
            tracing::warn!(datapoints = lost, "exited with undelivered datapoints");
        }
        Ok(())
    })
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the relay can only be stopped by being killed.
        tracing::error!("cannot install signal handlers");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}

fn check(config: &Config, path: &Path, warnings: &[String]) -> anyhow::Result<()> {
    Router::new(router_spec(config).clone())
        .with_context(|| format!("{}: router", path.display()))?;
    println!("# {}: OK", path.display());
    for w in warnings {
        println!("# warning: {w}");
    }
    println!("# {}", config.summary());
    print!("{}", config.to_resolved_toml());
    Ok(())
}

fn route(config: Config, names: Vec<String>) -> anyhow::Result<()> {
    let router = Router::new(router_spec(&config).clone()).context("cannot build router")?;
    let mut out = Vec::new();
    let mut print = |name: &str| {
        out.clear();
        router.route_into(name.as_bytes(), &mut out);
        let dests: Vec<String> = out
            .iter()
            .filter_map(|&i| router.destinations().get(usize::from(i)))
            .map(ToString::to_string)
            .collect();
        println!("{name}\t{}", dests.join(" "));
    };
    if names.is_empty() {
        for line in std::io::stdin().lock().lines() {
            let line = line.context("reading names from stdin")?;
            let name = line.trim_end_matches('\r');
            if !name.is_empty() {
                print(name);
            }
        }
    } else {
        for n in &names {
            print(n);
        }
    }
    Ok(())
}

#[cfg(feature = "bench")]
fn bench(args: anthracite::unstable::bench::BenchArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("anth-bench")
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(anthracite::unstable::bench::run(args))?;
    if !report.is_consistent() {
        anyhow::bail!(
            "the report is internally inconsistent (percentiles or per-sink sums); see above"
        );
    }
    Ok(())
}
