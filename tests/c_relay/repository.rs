//! The configurations of carbon-c-relay's own repository (tag v3.7.3, in
//! `tests/compat/carbon-c-relay-3.7.3/`): `anthracite check` accepts exactly those
//! `carbon-c-relay -t -t` accepts, and `anthracite route` prints what `carbon-c-relay -t`
//! prints for each of its test cases.

use std::path::{Path, PathBuf};

use anthracite_testkit::c_relay;

use super::{anthracite, compat};

/// Uses a transport Debian's build lacks (`feature gzip not compiled in`); a build with gzip,
/// and anthracite, accept it.
const NEEDS_GZIP: &[&str] = &["listen.conf"];

/// Includes a path relative to the repository's root rather than to `test/`.
const FROM_ROOT: &[&str] = &["issue240.conf"];

fn configurations() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["issues", "test"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(compat().join(dir))
            .expect("compat directory")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "conf"))
            .collect();
        files.sort();
        out.extend(files);
    }
    out
}

/// Where carbon-c-relay's suite runs a configuration from (its includes are relative to it).
fn cwd_for(conf: &Path) -> PathBuf {
    let name = conf.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if FROM_ROOT.contains(&name) {
        compat()
    } else {
        compat().join("test")
    }
}

#[test]
fn check_accepts_what_carbon_c_relay_accepts_on_every_configuration_of_its_repository() {
    c_relay::require();
    let confs = configurations();
    assert!(confs.len() >= 50, "the copied configurations: {confs:?}");
    let mut disagreements = Vec::new();
    let mut refused = 0;
    for conf in &confs {
        let cwd = cwd_for(conf);
        let name = conf.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let theirs = c_relay::accepts(conf, &cwd);
        let out = anthracite("check", conf, &cwd, &[], b"");
        let ours = out.status.success();
        if !ours {
            refused += 1;
            let err = String::from_utf8_lossy(&out.stderr);
            // The file at fault (the configuration or one it includes) and the line.
            assert!(
                err.contains(".conf: line ") || err.contains(".conf: unable to stat"),
                "{name}: the error names no file and line: {err}"
            );
        }
        let want = theirs || NEEDS_GZIP.contains(&name);
        if ours != want {
            disagreements.push(format!(
                "{name}: carbon-c-relay {}, anthracite {}: {}",
                if theirs { "accepts" } else { "refuses" },
                if ours { "accepts" } else { "refuses" },
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if NEEDS_GZIP.contains(&name) {
            assert!(
                !theirs,
                "{name}: Debian's carbon-c-relay now has gzip: drop the exception"
            );
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
    // The repository holds regression cases of refused configurations too.
    assert!(refused >= 8, "only {refused} refused");
}

#[test]
fn route_prints_what_carbon_c_relay_t_prints_for_every_test_case_of_its_repository() {
    c_relay::require();
    let test_dir = compat().join("test");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&test_dir)
        .expect("test directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tst" || e == "dbg"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 30, "the test cases: {cases:?}");
    let mut compared = 0;
    for case in &cases {
        let stem = case.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let mut conf = test_dir.join(format!("{stem}.conf"));
        if !conf.exists() {
            conf = compat().join("issues").join(format!("{stem}.conf"));
        }
        if NEEDS_GZIP.contains(&format!("{stem}.conf").as_str()) {
            continue;
        }
        let mut args = vec!["-Htest.hostname"];
        if case.extension().is_some_and(|e| e == "dbg") {
            args.push("-d");
        }
        let input = std::fs::read(case).expect("test case");
        let theirs = c_relay::test_mode(&conf, &test_dir, &args, &input);
        let ours = anthracite("route", &conf, &test_dir, &args, &input);
        assert_eq!(
            theirs.status.success(),
            ours.status.success(),
            "{stem}: exit status differs: {}",
            String::from_utf8_lossy(&ours.stderr)
        );
        assert_eq!(
            c_relay::without_settings(&ours.stdout),
            c_relay::without_settings(&theirs.stdout),
            "{stem}: `anthracite route` (left) and `carbon-c-relay -t` (right) differ"
        );
        compared += 1;
    }
    assert!(compared >= 30, "{compared} cases compared");
}
