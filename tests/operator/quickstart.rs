//! The README's quick start, run exactly as written: the ```` ```sh quickstart ```` block is
//! taken from README.md and run by bash in a scratch directory holding `relay.toml.example`,
//! with the `anthracite` this test run built first on PATH. The datapoint it sends must come
//! out of a sink, and the status page it links must answer.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anthracite_testkit as testkit;
use testkit::http::get;
use testkit::process::ManagedChild;

const WAIT: Duration = Duration::from_secs(60);

/// The fenced block opened by ```` ```sh quickstart ````.
fn quickstart_block(readme: &str) -> String {
    let start = readme
        .find("```sh quickstart\n")
        .expect("README.md has a ```sh quickstart block")
        + "```sh quickstart\n".len();
    let len = readme[start..].find("\n```").expect("the block is closed");
    readme[start..start + len].to_string()
}

#[test]
fn readme_quick_start_runs_as_written_and_a_sink_prints_the_datapoint() {
    // The example's fixed ports (2003, 2004, admin 8080), one test at a time.
    let _turn = anthracite_testkit::fixed_ports_turn();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let block = quickstart_block(&readme);
    assert!(block.contains("anthracite send"), "{block}");
    let build = &readme[..readme.find("```sh quickstart").unwrap_or(0)];
    assert!(
        build.contains("--no-default-features"),
        "the quick start says how to build without the AWS SDK"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(
        root.join("relay.toml.example"),
        dir.path().join("relay.toml.example"),
    )
    .expect("copy relay.toml.example");
    let bin = Path::new(env!("CARGO_BIN_EXE_anthracite"))
        .parent()
        .expect("binary dir")
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The block, then `wait` so the shell (and its background jobs, one process group) lives
    // until the test stops the group.
    let script = format!("{block}\nwait\n");
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", path);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let log = dir.path().join("quickstart.log");
    let mut shell = ManagedChild::spawn("quick start", cmd, log.clone());
    let group = shell.pid();

    let deadline = Instant::now() + WAIT;
    let printed = loop {
        let out = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(line) = out.lines().find(|l| l.starts_with("quickstart.hello 42 ")) {
            break line.to_string();
        }
        shell.assert_running("a sink to print quickstart.hello");
        assert!(
            Instant::now() < deadline,
            "no sink printed the datapoint:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let ts: i64 = printed
        .split_whitespace()
        .nth(2)
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{printed:?}"));
    assert!((ts - testkit::unix_now()).abs() < 3600, "{printed}");
    let (status, page) = get(([127, 0, 0, 1], 8080).into(), "/").expect("status page");
    assert_eq!(status, 200);
    assert!(page.contains("<title>anthracite</title>"));
    assert!(
        dir.path().join("spill").is_dir(),
        "the relative spill dir is next to the configuration file"
    );

    // The whole group: bash, both sinks and the relay.
    let _ = Command::new("kill")
        .args(["-TERM", "--", &format!("-{group}")])
        .status();
    shell.wait_exit(
        Duration::from_secs(30),
        "the quick start's processes to stop",
    );
}
