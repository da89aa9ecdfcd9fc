//! The repository is self-contained: no file of the project reads (or points a reader at)
//! anything outside its checkout. The golden compatibility data lives in `tests/compat/`.

use std::path::Path;
use std::process::Command;

/// What a path out of the checkout looks like: the compatibility data's old home beside the
/// repository, and the development machine's absolute paths. Spelled in pieces so this file
/// does not match itself.
const OUTSIDE: [&str; 2] = [concat!("..", "/shared"), concat!("/wo", "rk/")];

/// Files that are checked: every tracked or new (not ignored) file, except the Markdown prose
/// and `tests/compat/`, which is copied unchanged from the systems that made it (its README
/// says where it was made).
fn project_files(root: &Path) -> Vec<String> {
    let out = Command::new("git")
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "this test lists the project's files with `git ls-files` in {}: cannot run git: {e}",
                root.display()
            )
        });
    assert!(
        out.status.success(),
        "git ls-files in {} failed: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split('\0')
        .filter(|f| !f.is_empty() && !f.ends_with(".md") && !f.starts_with("tests/compat/"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn no_project_file_refers_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = project_files(root);
    assert!(
        files.iter().any(|f| f == "tests/relay/repository.rs")
            && files.iter().any(|f| f == "crates/anthracite/src/lib.rs"),
        "git ls-files did not list the project's sources: {files:?}"
    );
    let mut found = Vec::new();
    let mut read = 0;
    for file in &files {
        let bytes = match std::fs::read(root.join(file)) {
            Ok(b) => b,
            // Tracked but deleted in the working tree: nothing left to read outside.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("read {file}: {e}"),
        };
        // Binary files (images, the status page's PNG) carry no paths a reader follows.
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        read += 1;
        for (n, line) in text.lines().enumerate() {
            if OUTSIDE.iter().any(|o| line.contains(o)) {
                found.push(format!("{file}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(read > 100, "only {read} text files read: {files:?}");
    assert!(
        found.is_empty(),
        "files that refer outside the repository (the compatibility data is in tests/compat/):\n{}",
        found.join("\n")
    );
}
