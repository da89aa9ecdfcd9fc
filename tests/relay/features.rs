//! Dependency boundaries: an embedder who takes the relay core (`anthracite` with
//! `default-features = false`) must not build the command line's, the harness's, the AWS
//! SDK's or Kafka's dependencies; the `anthracite` binary does not link the harness (its
//! plotting and progress crates) nor open the library's `unstable` internals.

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

/// `cargo tree` over normal dependencies only (what a `cargo build` of the package links,
/// with its features resolved as that build resolves them: dev-dependencies left out), one
/// line per package.
fn tree_lines(args: &[&str]) -> Vec<String> {
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
        .map(str::to_string)
        .collect()
}

/// The package names in the tree.
fn tree(args: &[&str]) -> Vec<String> {
    tree_lines(args)
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The features the `anthracite` library is built with when `package` is built.
fn library_features(package: &str) -> Vec<String> {
    let lines = tree_lines(&["-p", package, "--format", "{p}|{f}"]);
    let line = lines
        .iter()
        .find(|l| l.starts_with("anthracite v"))
        .unwrap_or_else(|| panic!("no anthracite library in the tree of {package}: {lines:?}"));
    let features = line.split_once('|').map_or("", |(_, f)| f);
    features
        .split([',', ' '])
        .filter(|f| !f.is_empty() && *f != "(*)")
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
    // The check can fail: the binary's default build does contain them, the harness's its
    // plotting crate.
    let full = tree(&["-p", "anthracite-cli"]);
    for name in ["clap", "serde-pickle", "aws-sdk-kinesis"] {
        assert!(
            full.iter().any(|c| c == name),
            "{name} missing from the default build"
        );
    }
    let harness = tree(&["-p", "anthracite-bench"]);
    assert!(harness.iter().any(|c| c == "plotters"), "{harness:?}");
}

/// The `anthracite` binary was built with the harness (plotters, indicatif) linked in and
/// with the library's `unstable` gate open. The harness is now `anthracite-bench`, a program
/// of its own that `anthracite bench` runs: the relay's default build (normal dependencies,
/// default features) holds neither crate and builds the library without `unstable`.
#[test]
fn relay_binary_links_neither_plotting_nor_progress_crates_nor_unstable_internals() {
    let relay = tree(&["-p", "anthracite-cli"]);
    assert!(
        relay.iter().any(|c| c == "anthracite") && relay.iter().any(|c| c == "tokio"),
        "cargo tree output looks wrong: {relay:?}"
    );
    let linked: Vec<&String> = relay
        .iter()
        .filter(|c| ["plotters", "indicatif", "anthracite-bench"].contains(&c.as_str()))
        .collect();
    assert!(linked.is_empty(), "the relay's build links {linked:?}");
    for stream in ["anthracite-kinesis", "anthracite-kafka"] {
        assert!(
            relay.iter().any(|c| c == stream),
            "the default build reads {stream}: {relay:?}"
        );
    }
    let features = library_features("anthracite-cli");
    assert!(
        !features.iter().any(|f| f == "unstable"),
        "the relay's build opens `unstable`: {features:?}"
    );
    // The check can fail: the harness does link them, and opens `unstable`.
    let harness = tree(&["-p", "anthracite-bench"]);
    for name in ["plotters", "indicatif"] {
        assert!(harness.iter().any(|c| c == name), "{name}: {harness:?}");
    }
    assert!(
        library_features("anthracite-bench")
            .iter()
            .any(|f| f == "unstable"),
        "the harness's build opens `unstable`"
    );
}
