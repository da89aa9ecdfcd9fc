//! The library's dependency boundary: an embedder who takes the relay core
//! (`default-features = false`) must not build the command line's, the harness's or the AWS
//! SDK's dependencies.

use std::process::Command;

/// Crates that belong to the CLI (`cli`), the harness (`bench`) or Kinesis (`kinesis`) only.
const NOT_IN_CORE: [&str; 6] = [
    "clap",
    "plotters",
    "indicatif",
    "tracing-subscriber",
    "anyhow",
    "aws-",
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
    let core = tree(&["--no-default-features"]);
    assert!(
        core.iter().any(|c| c == "tokio"),
        "cargo tree output looks wrong: {core:?}"
    );
    let leaked: Vec<&String> = core
        .iter()
        .filter(|c| NOT_IN_CORE.iter().any(|n| c.starts_with(n)))
        .collect();
    assert!(leaked.is_empty(), "core build pulls in {leaked:?}");
    // The check can fail: the default build does contain them.
    let full = tree(&[]);
    for name in ["clap", "plotters", "aws-sdk-kinesis"] {
        assert!(
            full.iter().any(|c| c == name),
            "{name} missing from the default build"
        );
    }
}
