//! `anthracite-bench`: the capacity-planning harness as a program of its own. Users run it
//! as `anthracite bench ARGS…`, which finds it beside the `anthracite` executable (or on
//! PATH) and runs it with the same arguments, so the relay's binary does not carry the
//! harness, its plotting or its progress bars.

use std::io::IsTerminal;
use std::process::ExitCode;

use anthracite_bench::BenchArgs;
use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;

/// Capacity-planning benchmark: load generator + counting sinks + report, against
/// anthracite in-process or any relay by address or command (see bench/scenarios/).
#[derive(Parser, Debug)]
#[command(name = "anthracite-bench", version)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
    /// Log lines as `text` or `json`; levels from RUST_LOG. The last one given counts
    /// (`anthracite --log-format json bench … --log-format text` passes both).
    #[arg(long, value_parser = ["text", "json"], overrides_with = "log_format")]
    log_format: Option<String>,
}

/// Logs to stderr as text (colours only on a terminal) or one JSON object per line, like the
/// relay.
fn init_logging(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.with_ansi(std::io::stderr().is_terminal()).init();
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format.as_deref() == Some("json"));
    // Messages name the program as it was invoked: `anthracite bench` runs it under that name.
    let program = std::env::args()
        .next()
        .and_then(|a| a.rsplit('/').next().map(str::to_owned))
        .unwrap_or_else(|| "anthracite-bench".into());
    match bench(cli.bench) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{program}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("anth-bench")
        .build()
        .context("cannot start the async runtime")?;
    let consistent = if args.sweep {
        runtime
            .block_on(anthracite_bench::run_sweep(args))?
            .is_consistent()
    } else {
        runtime
            .block_on(anthracite_bench::run(args))?
            .is_consistent()
    };
    if !consistent {
        anyhow::bail!(
            "the report is internally inconsistent (percentiles or per-sink sums); see above"
        );
    }
    Ok(())
}
