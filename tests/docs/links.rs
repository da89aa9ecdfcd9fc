//! Every relative link, every `#anchor` and every repository path the pages mention resolves,
//! and so do the pages' sections that `dist/` files cite.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use regex::Regex;

use crate::markdown::{anchors, code_spans, links, prose};
use crate::{pages, root};

/// Paths that other parts of the same change add to the repository. A path under one of these
/// is accepted while it does not exist; once it exists the entry must go (the test says so),
/// so the list empties itself when the parts meet.
pub(crate) const PENDING: &[&str] = &[];

/// Paths made by running things, never committed.
const GENERATED: &[&str] = &[
    "target",
    "bench-results",
    "spill",
    "fuzz/corpus",
    "fuzz/artifacts",
];

/// `a/b/../c` → `a/c`; `None` when it climbs out of the repository.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            Component::Normal(p) => out.push(p),
            _ => return None,
        }
    }
    Some(out)
}

/// Whether a repository path exists, or is pending (and then must not exist yet).
fn resolves(path: &Path, problems: &mut Vec<String>, at: &str) -> bool {
    let text = path.to_string_lossy();
    let text = text.trim_end_matches('/');
    if let Some(p) = PENDING
        .iter()
        .find(|p| text == **p || text.starts_with(&format!("{p}/")))
    {
        if root().join(p).exists() {
            problems.push(format!(
                "{at}: {p} exists now: remove it from PENDING in tests/docs/links.rs"
            ));
        }
        return true;
    }
    root().join(path).exists()
}

/// Anchors of every page, by path.
fn all_anchors() -> BTreeMap<PathBuf, std::collections::BTreeSet<String>> {
    pages()
        .into_iter()
        .map(|(p, text)| (p, anchors(&text)))
        .collect()
}

/// Checks one `path#anchor` target written in `page`.
fn check_target(
    page: &Path,
    target: &str,
    at: &str,
    anchors: &BTreeMap<PathBuf, std::collections::BTreeSet<String>>,
    problems: &mut Vec<String>,
) {
    let (file, anchor) = match target.split_once('#') {
        Some((f, a)) => (f, Some(a)),
        None => (target, None),
    };
    let resolved = if file.is_empty() {
        Some(page.to_path_buf())
    } else {
        normalize(&page.parent().unwrap_or(Path::new("")).join(file))
    };
    let Some(resolved) = resolved else {
        problems.push(format!("{at}: {target}: leaves the repository"));
        return;
    };
    if !resolves(&resolved, problems, at) {
        problems.push(format!(
            "{at}: {target}: {} does not exist",
            resolved.display()
        ));
        return;
    }
    if let Some(anchor) = anchor {
        match anchors.get(&resolved) {
            Some(set) if set.contains(anchor) => {}
            Some(_) => problems.push(format!(
                "{at}: {target}: no heading of {} has the anchor #{anchor}",
                resolved.display()
            )),
            None => problems.push(format!(
                "{at}: {target}: an anchor into a file that is not a page"
            )),
        }
    }
}

#[test]
fn relative_links_and_anchors_resolve() {
    let anchors = all_anchors();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (page, text) in pages() {
        for (n, line) in prose(&text) {
            for target in links(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let at = format!("{}:{n}", page.display());
                check_target(&page, &target, &at, &anchors, &mut problems);
                checked += 1;
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked > 20, "only {checked} links: is the reader broken?");
}

/// A code span that names a repository path: it starts with a top-level entry of the
/// repository followed by `/`, or is a file at the root. Globs and templates are not paths.
fn repository_path(span: &str, top: &[String]) -> Option<String> {
    let span = span.trim_end_matches([':', ',', '.']);
    if span.is_empty()
        || span.contains(char::is_whitespace)
        || span.contains(['*', '<', '>', '{', '}', '…', '$'])
    {
        return None;
    }
    let first = span.split('/').next().unwrap_or("");
    let is_path = top.iter().any(|t| t == first) && (span.contains('/') || span.contains('.'));
    let generated = GENERATED
        .iter()
        .any(|g| span == *g || span.starts_with(&format!("{g}/")));
    (is_path && !generated).then(|| span.to_owned())
}

#[test]
fn repository_paths_in_code_spans_exist() {
    let mut top: Vec<String> = std::fs::read_dir(root())
        .expect("the repository")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".git" && n != "target")
        .collect();
    // The roots pending paths live under, even before they exist.
    for p in PENDING {
        if let Some(first) = p.split('/').next() {
            top.push(first.to_owned());
        }
    }
    let mut problems = Vec::new();
    let mut checked = 0;
    for (page, text) in pages() {
        for (n, line) in prose(&text) {
            for span in code_spans(line) {
                let Some(path) = repository_path(&span, &top) else {
                    continue;
                };
                let at = format!("{}:{n}", page.display());
                if !resolves(Path::new(&path), &mut problems, &at) {
                    problems.push(format!("{at}: `{path}` does not exist in the repository"));
                }
                checked += 1;
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked > 50, "only {checked} paths: is the reader broken?");
}

#[test]
fn sections_cited_by_dist_files_exist() {
    let anchors = all_anchors();
    let cite = Regex::new(r"docs/[a-z-]+\.md(#[a-z0-9_-]+)?").expect("a valid pattern");
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in ["dist/anthracite-alerts.yml", "dist/anthracite.service"] {
        let text = std::fs::read_to_string(root().join(file)).expect(file);
        for (n, line) in text.lines().enumerate() {
            for m in cite.find_iter(line) {
                let at = format!("{file}:{}", n + 1);
                check_target(
                    Path::new("README.md"),
                    m.as_str(),
                    &at,
                    &anchors,
                    &mut problems,
                );
                checked += 1;
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        checked >= 2,
        "the unit and the alerts cite the operations page"
    );
}

#[test]
fn the_path_reader_knows_a_path_from_a_word() {
    let top = vec!["src".to_owned(), "dist".to_owned(), "README.md".to_owned()];
    assert_eq!(
        repository_path("src/main.rs", &top).as_deref(),
        Some("src/main.rs")
    );
    assert_eq!(repository_path("dist/", &top).as_deref(), Some("dist/"));
    assert_eq!(
        repository_path("README.md", &top).as_deref(),
        Some("README.md")
    );
    assert_eq!(repository_path("src", &top), None);
    assert_eq!(repository_path("bench/*.sh", &top), None);
    assert_eq!(repository_path("dist/<x>", &top), None);
    assert_eq!(repository_path("kill %1", &top), None);
    assert_eq!(
        normalize(Path::new("docs/../relay.toml.example")),
        Some(PathBuf::from("relay.toml.example"))
    );
    assert_eq!(normalize(Path::new("../x")), None);
}
