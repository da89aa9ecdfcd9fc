//! The pages speak to users: no commit hashes, issue numbers, working notes or paths outside
//! the repository.

use regex::Regex;

use crate::pages;

/// What a page may not contain, with why.
fn forbidden() -> Vec<(Regex, &'static str)> {
    let re = |s: &str| Regex::new(s).expect("a valid pattern");
    vec![
        (
            re(r"(?i)\bissues?\s*#?\s*[0-9]+"),
            "an issue number (say what the change does)",
        ),
        (
            re(r"(?i)\bissue'?s'? (targets?|measurement)"),
            "a tracker's target (state the figure)",
        ),
        (re(r"(?i)\bthis round\b"), "a working note (\"this round\")"),
        (
            re(&format!(r"\.\./{}|/{}/", "shared", "work")),
            "a path outside the repository",
        ),
    ]
}

/// A word of 7 to 40 hexadecimal digits with both a digit and a letter: a commit hash.
fn commit_hashes(text: &str) -> Vec<String> {
    let hex = Regex::new(r"\b[0-9a-f]{7,40}\b").expect("a valid pattern");
    hex.find_iter(text)
        // The digits after a decimal point (`9.882973263293738e-06`) are a number.
        .filter(|m| !text[..m.start()].ends_with('.'))
        .map(|m| m.as_str())
        .filter(|w| {
            w.bytes().any(|b| b.is_ascii_digit()) && w.bytes().any(|b| b.is_ascii_alphabetic())
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn pages_hold_no_commit_hashes_issue_numbers_or_working_notes() {
    let rules = forbidden();
    let mut found = Vec::new();
    for (path, text) in pages() {
        for (n, line) in text.lines().enumerate() {
            for (re, why) in &rules {
                if let Some(m) = re.find(line) {
                    found.push(format!(
                        "{}:{}: {:?}: {why}",
                        path.display(),
                        n + 1,
                        m.as_str()
                    ));
                }
            }
            for hash in commit_hashes(line) {
                found.push(format!(
                    "{}:{}: {hash:?}: a commit hash (give the date instead)",
                    path.display(),
                    n + 1
                ));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_word_checks_catch_what_they_are_for() {
    assert_eq!(
        commit_hashes("the release build of b39b2c7 and e2e066a"),
        ["b39b2c7", "e2e066a"]
    );
    assert!(
        commit_hashes("1700000000 deadbeef 0x7fffffff 12.5 ab12 9.882973263293738e-06").is_empty()
    );
    let rules = forbidden();
    for bad in [
        "Before issue 24 the wait",
        "Issue #2's measurement",
        "this round's queue",
        &format!("../{}/compat", "shared"),
        "against issue 11's targets",
        "Against the issue's targets",
    ] {
        assert!(rules.iter().any(|(re, _)| re.is_match(bad)), "{bad}");
    }
    for good in [
        "an issue with the disk",
        "a round of measurements",
        "tests/compat/",
    ] {
        assert!(!rules.iter().any(|(re, _)| re.is_match(good)), "{good}");
    }
}
