//! The library's dependency boundary: an embedder who takes the relay core
//! (`anthracite` with `default-features = false`) must not build the command line's, the
//! harness's, the AWS SDK's or Kafka's dependencies.

use std::process::Command;

/// Crates that belong to the binary, the harness, Kinesis (`kinesis`) or Kafka only.
const NOT_IN_CORE: [&str; 8] = [
    "clap",
    "plotters",
    "indicatif",
    "tracing-subscriber",
    "anyhow",
    "serde-pickle",
    "aws-",
    "rdkafka",
];

fn tree(args: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--offline", "-e", "normal", "--prefix", "none"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn core_library_builds_without_cli_bench_or_aws_dependencies() {
    let core = tree(&["-p", "anthracite", "--no-default-features"]);
    assert!(
        core.iter().any(|c| c == "tokio"),
        "cargo tree output looks wrong: {core:?}"
    );
    let leaked: Vec<&String> = core
        .iter()
        .filter(|c| NOT_IN_CORE.iter().any(|n| c.starts_with(n)))
        .collect();
    assert!(leaked.is_empty(), "core build pulls in {leaked:?}");
    // The check can fail: the binary's default build does contain them.
    let full = tree(&["-p", "anthracite-cli"]);
    for name in ["clap", "plotters", "serde-pickle", "aws-sdk-kinesis"] {
        assert!(
            full.iter().any(|c| c == name),
            "{name} missing from the default build"
        );
    }
}
