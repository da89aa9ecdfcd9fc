//! The `anthracite` command line: parse arguments, set up logging, run.

use std::io::{BufRead, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anthracite::extension::Extensions;
use anthracite::{
    CRelayFlags, CRelayImport, CRelayOptions, CarbonOptions, Config, LogFormat, Placement, Relay,
    RelayError, RelayHandle,
};
use anyhow::Context;
mod bench;
mod try_it;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// How often the binary gives the heap's free memory back to the system (glibc only).
#[cfg(target_env = "gnu")]
const TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// The binary keeps the system allocator (glibc's malloc), cheaper per datapoint than
/// mimalloc here (docs/benchmarks.md, "Benchmark notes": allocator). glibc keeps freed memory in its
/// heaps, though, so every [`TRIM_INTERVAL`] the free memory is handed back (`malloc_trim`; it takes the arena locks
/// for the time it walks the free lists, well under a millisecond on the relay's heaps).
#[cfg(target_env = "gnu")]
async fn trim_heap() {
    let mut ticks = tokio::time::interval(TRIM_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // SAFETY: malloc_trim only returns free heap memory to the system; it is thread-safe.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// Exit code for configuration errors (a runtime failure exits with 1).
const EXIT_CONFIG: u8 = 2;

/// The configuration read when `--config` is not given, if it exists in the working directory.
const DEFAULT_CONFIG: &str = "relay.toml";

/// What `anthracite config --example` prints: the annotated example of every setting.
const EXAMPLE_CONFIG: &str = include_str!("../relay.toml.example");

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
    /// Log lines as `text` or `json` (overrides `[log] format`); levels from RUST_LOG.
    #[arg(long, global = true, value_parser = ["text", "json"])]
    log_format: Option<String>,
    /// Write the process id to this file while running (for `anthracite reload`).
    #[arg(long, global = true, value_name = "PATH")]
    pid_file: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
struct ConfigArgs {
    /// relay.toml to use [default: ./relay.toml if it exists, else carbon-relay's defaults:
    /// plaintext on 2013, pickle on 2014, to 127.0.0.1:2004, admin on 127.0.0.1:8080].
    #[arg(long, short = 'c', global = true)]
    config: Option<PathBuf>,
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
    /// Run as carbon-aggregator (with --carbon-config): the aggregator sections of carbon.conf
    /// (plain, then the instance's), aggregation and rewrite rules, consistent hashing.
    #[arg(long, global = true)]
    aggregator: bool,
    /// rewrite-rules.conf (with --carbon-config --aggregator), instead of
    /// CONF_DIR/REWRITE_RULES.
    #[arg(long, global = true, value_name = "PATH")]
    rewrite_rules: Option<PathBuf>,
    /// Run on carbon-c-relay's configuration file instead (its `-f`); `include` paths are
    /// read from the working directory, as carbon-c-relay reads them.
    #[arg(long, global = true, value_name = "PATH")]
    carbon_c_relay_config: Option<PathBuf>,
    /// carbon-c-relay's other command-line flags, as one argument (with
    /// --carbon-c-relay-config): `--carbon-c-relay-args "-p 2003 -H relay1 -q 50000"`.
    #[arg(
        long,
        global = true,
        value_name = "FLAGS",
        allow_hyphen_values = true,
        default_value = ""
    )]
    carbon_c_relay_args: String,
    /// With --carbon-c-relay-config: the parent directory of the members' spill logs (one
    /// per member); a member's queue then overflows to disk instead of dropping.
    #[arg(long, global = true, value_name = "DIR")]
    spill_dir: Option<PathBuf>,
    /// With --carbon-c-relay-config: a TOML file with `[spill]`, `[admin]` and `[limits]`
    /// (docs/migrating-c-relay.md).
    #[arg(long, global = true, value_name = "PATH")]
    carbon_c_relay_overlay: Option<PathBuf>,
}

/// Where the configuration comes from, decided once at startup: a reload reads the same.
#[derive(Clone, Debug)]
enum ConfigSource {
    /// A relay.toml: `--config`, else `./relay.toml`.
    Toml(PathBuf),
    /// carbon-relay's carbon.conf (`--carbon-config`) and the files it names.
    Carbon(CarbonOptions),
    /// No configuration given and no `./relay.toml`: [`Config::carbon_relay_defaults`].
    CarbonRelayDefaults,
    /// carbon-c-relay's configuration (`--carbon-c-relay-config`) and flags.
    CRelay(CRelayOptions),
}

impl ConfigSource {
    fn of(args: &ConfigArgs) -> Result<Self, String> {
        if let Some(path) = &args.carbon_c_relay_config {
            let words: Vec<&str> = args.carbon_c_relay_args.split_whitespace().collect();
            let flags =
                CRelayFlags::parse(&words).map_err(|e| format!("--carbon-c-relay-args: {e}"))?;
            let mut options = CRelayOptions::new(path.clone());
            options.flags = flags;
            options.spill_dir = args.spill_dir.clone();
            options.overlay = args.carbon_c_relay_overlay.clone();
            return Ok(Self::CRelay(options));
        }
        if !args.carbon_c_relay_args.is_empty() {
            return Err("--carbon-c-relay-args needs --carbon-c-relay-config".into());
        }
        if args.spill_dir.is_some() || args.carbon_c_relay_overlay.is_some() {
            return Err(
                "--spill-dir and --carbon-c-relay-overlay need --carbon-c-relay-config \
                 (a relay.toml sets [destinations.spill] dir)"
                    .into(),
            );
        }
        Ok(Self::of_carbon_or_toml(args))
    }

    fn of_carbon_or_toml(args: &ConfigArgs) -> Self {
        if let Some(path) = &args.carbon_config {
            let mut options = CarbonOptions::new(path.clone());
            options.instance = args.instance.clone();
            options.rules = args.rules.clone();
            options.aggregation_rules = args.aggregation_rules.clone();
            options.aggregator = args.aggregator;
            options.rewrite_rules = args.rewrite_rules.clone();
            return Self::Carbon(options);
        }
        if let Some(path) = &args.config {
            return Self::Toml(path.clone());
        }
        // Anything by that name (even a dangling link or an unreadable file) is meant as the
        // configuration: reading it then fails loudly instead of running on the defaults.
        let default = Path::new(DEFAULT_CONFIG);
        if default.symlink_metadata().is_ok() {
            Self::Toml(default.to_path_buf())
        } else {
            Self::CarbonRelayDefaults
        }
    }

    /// What it is called in `check`'s output and the reload log line.
    fn name(&self) -> String {
        match self {
            Self::Toml(path) => path.display().to_string(),
            Self::Carbon(options) => options.path.display().to_string(),
            Self::CarbonRelayDefaults => "carbon-relay 1.1.10's defaults".into(),
            Self::CRelay(options) => options.path.display().to_string(),
        }
    }

    /// Loads the configuration, with its warnings (the carbon.conf import's included).
    fn load(&self) -> Result<(Config, Vec<String>), anthracite::ConfigError> {
        match self {
            Self::Toml(path) => Config::load_with(path, &extensions()).map(|c| {
                let warnings = c.warnings().to_vec();
                (c, warnings)
            }),
            Self::Carbon(options) => Config::load_carbon(options).map(|i| (i.config, i.warnings)),
            Self::CarbonRelayDefaults => Ok((Config::carbon_relay_defaults(), Vec::new())),
            Self::CRelay(options) => Config::load_c_relay(options).map(|i| (i.config, i.warnings)),
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the relay (the default).
    Run,
    /// Validate the configuration and print it with every default resolved (a carbon-c-relay
    /// configuration: as carbon-c-relay prints it back).
    Check,
    /// Print the destinations of each NAME (or each line of stdin), in preference order; with
    /// --carbon-c-relay-config, what `carbon-c-relay -t` prints.
    Route {
        /// Metric names; read from stdin when none are given.
        names: Vec<String>,
    },
    /// Ask a running relay to reload its configuration (sends SIGHUP to the process in
    /// --pid-file).
    Reload,
    /// Print every datapoint received (pickle or plaintext) as a line: a stand-in
    /// carbon-cache for trying the relay.
    Sink {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:2104")]
        listen: std::net::SocketAddr,
    },
    /// Send plaintext lines (`name value timestamp`) to a relay.
    Send {
        /// The relay's plaintext listener.
        #[arg(long, default_value = "127.0.0.1:2003")]
        to: std::net::SocketAddr,
        /// Lines to send, one per argument.
        #[arg(required = true)]
        lines: Vec<String>,
    },
    /// Print a configuration to start from.
    Config {
        /// The annotated relay.toml.example, every setting with its default
        /// (`anthracite config --example > relay.toml`).
        #[arg(long, required = true)]
        example: bool,
    },
    /// Capacity-planning benchmark: load generator + counting sinks + report, against
    /// anthracite in-process or any relay by address or command (see bench/scenarios/).
    ///
    /// Runs the harness, `anthracite-bench` (beside this program, else on PATH), with ARGS;
    /// `anthracite bench --help` lists them.
    #[command(disable_help_flag = true)]
    Bench {
        /// The harness's arguments.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<std::ffi::OsString>,
    },
}

/// What this build composes with the relay core, by Cargo feature: the stream extensions
/// (`kinesis`, `kafka`) and the other features. The one list of the build's features: what
/// `--version` names and what `/status` and `anthracite_build_info` report.
fn extensions() -> Extensions {
    let e = Extensions::new();
    #[cfg(feature = "kinesis")]
    let e = e.with(anthracite_kinesis::Kinesis::new());
    #[cfg(feature = "kafka")]
    let e = e.with(anthracite_kafka::Kafka);
    #[cfg(feature = "kafka-tls")]
    let e = e.with_feature("kafka-tls");
    e
}

/// `anthracite --version`: the version and the Cargo features built in.
fn version_line() -> &'static str {
    let features = extensions().features().to_vec();
    let line = format!(
        "{} (features: {})",
        env!("CARGO_PKG_VERSION"),
        if features.is_empty() {
            "none".to_string()
        } else {
            features.join(", ")
        }
    );
    // Built once per process, for clap, which wants a static string.
    Box::leak(line.into_boxed_str())
}

/// Logs to stderr as text (colours only on a terminal) or one JSON object per line.
fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        _ => builder.with_ansi(std::io::stderr().is_terminal()).init(),
    }
}

fn main() -> ExitCode {
    let matches = Cli::command().version(version_line()).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let cli_format = cli.log_format.as_deref().map(|f| match f {
        "json" => LogFormat::Json,
        _ => LogFormat::Text,
    });
    let command = cli.command.unwrap_or(Command::Run);
    if let Command::Reload = command {
        return match send_reload(cli.pid_file.as_deref()) {
            Ok(pid) => {
                println!("anthracite: sent SIGHUP to {pid}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("anthracite reload: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let tried = match &command {
        Command::Sink { listen } => Some(try_it::sink(*listen)),
        Command::Send { to, lines } => Some(try_it::send(*to, lines)),
        Command::Config { .. } => Some(print_example()),
        _ => None,
    };
    if let Some(result) = tried {
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("anthracite: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if let Command::Bench { args } = command {
        // The harness builds its own relay configuration; no relay.toml is read.
        return bench::exec(args, cli.log_format.as_deref());
    }
    let source = match ConfigSource::of(&cli.run) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("anthracite: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if let ConfigSource::CRelay(options) = &source
        && matches!(command, Command::Check | Command::Route { .. })
    {
        return c_relay_tool(options, command);
    }
    let (config, warnings) = match source.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("anthracite: configuration error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    init_logging(cli_format.unwrap_or(config.log_format()));
    for w in &warnings {
        tracing::warn!("{w}");
    }
    if let ConfigSource::CarbonRelayDefaults = source {
        tracing::info!(
            "no --config and no ./{DEFAULT_CONFIG}: running on carbon-relay 1.1.10's defaults: \
             {}. Write a configuration with `anthracite config --example > {DEFAULT_CONFIG}`",
            config.endpoints()
        );
    }
    let result = match command {
        Command::Run => run(config, source.clone(), cli.pid_file.as_deref()),
        Command::Reload | Command::Config { .. } => Ok(()),
        Command::Bench { .. } | Command::Sink { .. } | Command::Send { .. } => Ok(()),
        Command::Check => check(&config, &source.name(), &warnings),
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

/// Sends SIGHUP to the process whose id is in `pid_file`; returns the id.
fn send_reload(pid_file: Option<&Path>) -> anyhow::Result<i32> {
    let path =
        pid_file.context("--pid-file is required (the file `anthracite run --pid-file` writes)")?;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let pid: i32 = text
        .trim()
        .parse()
        .with_context(|| format!("{} does not hold a process id", path.display()))?;
    anyhow::ensure!(pid > 0, "{} holds {pid}, not a process id", path.display());
    // SAFETY: kill(2) with a positive pid and a valid signal number has no memory effects.
    let sent = unsafe { libc::kill(pid, libc::SIGHUP) };
    if sent != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot signal process {pid} (from {})", path.display()));
    }
    Ok(pid)
}

/// The pid file of a running relay, removed when the relay exits.
struct PidFile(PathBuf);

impl PidFile {
    fn create(path: &Path) -> anyhow::Result<Self> {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .with_context(|| format!("cannot write pid file {}", path.display()))?;
        Ok(Self(path.to_path_buf()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Errors found in the configuration after it validated (the router cannot be built from
/// it, a spill log cannot be opened) exit like a configuration error.
fn is_config_error(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<anthracite::RouterError>().is_some()
            || matches!(
                c.downcast_ref::<RelayError>(),
                Some(
                    RelayError::Router(_)
                        | RelayError::Spill { .. }
                        | RelayError::SpillLocked { .. }
                        | RelayError::SpillLock { .. }
                )
            )
    })
}

/// `anthracite config --example`: the example configuration on stdout.
fn print_example() -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout()
        .lock()
        .write_all(EXAMPLE_CONFIG.as_bytes())
    {
        // `anthracite config --example | head` is not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => result.context("cannot write to stdout"),
    }
}

fn run(config: Config, source: ConfigSource, pid_file: Option<&Path>) -> anyhow::Result<()> {
    let _pid = pid_file.map(PidFile::create).transpose()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("anthracite")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        // Handlers first: a signal that arrives while the relay starts must not kill it.
        let signals = Signals::install().context("cannot install signal handlers")?;
        let relay = Relay::builder(config)
            .features(extensions().features())
            .build()?;
        let Signals { term, int, hup } = signals;
        #[cfg(target_env = "gnu")]
        tokio::spawn(trim_heap());
        tokio::spawn(on_hangup(hup, relay.handle(), source));
        let report = relay.run(shutdown_signal(term, int)).await?;
        let lost: u64 = report.undelivered.iter().map(|(_, n)| n).sum();
        if lost > 0 {
            tracing::warn!(datapoints = lost, "exited with undelivered datapoints");
        }
        Ok(())
    })
}

/// The signals the relay handles: SIGTERM and SIGINT stop it, SIGHUP reloads.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal(
    mut term: tokio::signal::unix::Signal,
    mut int: tokio::signal::unix::Signal,
) {
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}

/// SIGHUP: reload the configuration from the same files (relay.toml, or carbon.conf with its
/// rules, aggregation and list files; a relay on carbon-relay's defaults stays on them). The
/// relay logs and counts the outcome; a rejected configuration leaves it running on the one
/// it has.
async fn on_hangup(mut hup: tokio::signal::unix::Signal, relay: RelayHandle, source: ConfigSource) {
    while hup.recv().await.is_some() {
        tracing::info!(config = %source.name(), "SIGHUP received: reloading the configuration");
        let _ = relay
            .reload_with(|| {
                source.load().map(|(config, warnings)| {
                    for w in &warnings {
                        tracing::warn!("{w}");
                    }
                    config
                })
            })
            .await;
    }
}

/// `check` and `route` on a carbon-c-relay configuration: what `carbon-c-relay -t -t` accepts
/// and what `carbon-c-relay -t` prints.
fn c_relay_tool(options: &CRelayOptions, command: Command) -> ExitCode {
    let import = match Config::load_c_relay(options) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("anthracite: configuration error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    for w in &import.warnings {
        eprintln!("warning: {w}");
    }
    let result = match command {
        Command::Route { names } => c_relay_route(&import, names),
        _ => {
            println!("# {}: OK", options.path.display());
            print!("{}", import.test_header());
            print!("{}", import.limits_text());
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("anthracite: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `carbon-c-relay -t`: the configuration, then each line of input routed.
fn c_relay_route(import: &CRelayImport, names: Vec<String>) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(import.test_header().as_bytes())?;
    let mut test = |line: &str| -> anyhow::Result<()> {
        if let Some(text) = import.test_line(line) {
            out.write_all(text.as_bytes())?;
        }
        Ok(())
    };
    if names.is_empty() {
        let mut stdin = std::io::stdin().lock();
        let mut line = Vec::new();
        loop {
            line.clear();
            if stdin
                .read_until(b'\n', &mut line)
                .context("reading stdin")?
                == 0
            {
                break;
            }
            // fgets: the newline goes, anything else (a `\r`) stays.
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            test(&String::from_utf8_lossy(&line))?;
        }
    } else {
        for n in &names {
            test(n)?;
        }
    }
    out.flush()?;
    Ok(())
}

fn check(config: &Config, source: &str, warnings: &[String]) -> anyhow::Result<()> {
    Placement::new(config).with_context(|| format!("{source}: router"))?;
    println!("# {source}: OK");
    for w in warnings {
        println!("# warning: {w}");
    }
    println!("# {}", config.summary());
    print!("{}", config.to_resolved_toml());
    Ok(())
}

fn route(config: Config, names: Vec<String>) -> anyhow::Result<()> {
    let placement = Placement::new(&config).context("cannot build router")?;
    let print = |name: &str| {
        println!("{name}\t{}", placement.destinations(name).join(" "));
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
