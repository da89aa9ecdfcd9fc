//! Just enough Markdown for the checks: fenced blocks, prose lines, code spans, links, headings
//! with GitHub's anchors, and tables.

use std::collections::BTreeSet;

/// A fenced code block.
pub struct Fence {
    /// The words after the opening backticks (```` ```toml fragment ```` → `["toml", "fragment"]`).
    pub info: Vec<String>,
    /// The lines between the fences.
    pub body: String,
    /// 1-based line of the opening fence.
    pub line: usize,
}

/// A line of a page: its 1-based number, its text, and whether it is inside a fenced block.
struct Line<'a> {
    number: usize,
    text: &'a str,
    fenced: bool,
}

/// Opening or closing fence: up to three spaces, then three or more backticks.
fn fence_ticks(line: &str) -> Option<(usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let ticks = rest.len() - rest.trim_start_matches('`').len();
    (ticks >= 3).then(|| (ticks, rest[ticks..].trim()))
}

fn lines(text: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut open: Option<usize> = None;
    for (i, text) in text.lines().enumerate() {
        let fence = fence_ticks(text);
        let fenced = match (open, fence) {
            (None, Some((ticks, _))) => {
                open = Some(ticks);
                true
            }
            (Some(n), Some((ticks, info))) if ticks >= n && info.is_empty() => {
                open = None;
                true
            }
            (Some(_), _) => true,
            (None, None) => false,
        };
        out.push(Line {
            number: i + 1,
            text,
            fenced,
        });
    }
    out
}

/// Every fenced block of a page.
pub fn fences(text: &str) -> Vec<Fence> {
    let mut out = Vec::new();
    let mut current: Option<(usize, Fence)> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = fence_ticks(line);
        match (&mut current, fence) {
            (None, Some((ticks, info))) => {
                let fence = Fence {
                    info: info.split_whitespace().map(str::to_owned).collect(),
                    body: String::new(),
                    line: i + 1,
                };
                current = Some((ticks, fence));
            }
            (Some((n, _)), Some((ticks, info))) if ticks >= *n && info.is_empty() => {
                if let Some((_, fence)) = current.take() {
                    out.push(fence);
                }
            }
            (Some((_, fence)), _) => {
                fence.body.push_str(line);
                fence.body.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(current.is_none(), "a fenced block is not closed");
    out
}

/// Lines outside fenced blocks, with their numbers.
pub fn prose(text: &str) -> Vec<(usize, &str)> {
    lines(text)
        .into_iter()
        .filter(|l| !l.fenced)
        .map(|l| (l.number, l.text))
        .collect()
}

/// The inline code spans of a line (`` `x` `` and ``` `` x `` ```), their contents trimmed.
pub fn code_spans(line: &str) -> Vec<String> {
    let bytes = line.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let ticks = bytes[i..].iter().take_while(|&&b| b == b'`').count();
        let start = i + ticks;
        let closing = "`".repeat(ticks);
        let mut j = start;
        let mut end = None;
        while let Some(k) = line[j..].find(&closing) {
            let at = j + k;
            let run = bytes[at..].iter().take_while(|&&b| b == b'`').count();
            if run == ticks {
                end = Some(at);
                break;
            }
            j = at + run;
        }
        match end {
            Some(end) => {
                spans.push(line[start..end].trim().to_owned());
                i = end + ticks;
            }
            None => i = start,
        }
    }
    spans
}

/// The line without its code spans (links inside code are not links).
fn without_code(line: &str) -> String {
    let mut out = line.to_owned();
    for span in code_spans(line) {
        if !span.is_empty() {
            out = out.replacen(&span, "", 1);
        }
    }
    out
}

/// Link and image targets of a line: `[text](target)`.
pub fn links(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                let target = after[..end].split_whitespace().next().unwrap_or("");
                out.push(target.to_owned());
                rest = &after[end..];
            }
            None => break,
        }
    }
    out
}

/// The page's headings, as text.
pub fn headings(text: &str) -> Vec<String> {
    prose(text)
        .into_iter()
        .filter_map(|(_, l)| {
            let hashes = l.len() - l.trim_start_matches('#').len();
            ((1..=6).contains(&hashes) && l[hashes..].starts_with(' '))
                .then(|| l[hashes..].trim().to_owned())
        })
        .collect()
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
pub fn slug(heading: &str) -> String {
    // Link syntax renders as its text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match (after.find("]("), after.find(')')) {
            (Some(close), Some(end)) if close < end => {
                text.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            _ => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor of a page, with GitHub's `-1`, `-2` suffixes for repeated headings.
pub fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for heading in headings(text) {
        let base = slug(&heading);
        let mut anchor = base.clone();
        let mut n = 0;
        while out.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        out.insert(anchor);
    }
    out
}

/// A table, with the heading it sits under.
pub struct Table {
    /// The closest heading above it.
    pub heading: String,
    /// The header row's cells.
    pub header: Vec<String>,
    /// The body rows' cells, with their line numbers.
    pub rows: Vec<(usize, Vec<String>)>,
}

/// Cells of a table row: split on `|` outside code spans and not escaped.
pub fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = Vec::new();
    let mut cell = String::new();
    let mut in_code = false;
    let mut prev = '\0';
    for c in inner.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                cell.push(c);
            }
            '|' if !in_code && prev != '\\' => {
                out.push(std::mem::take(&mut cell).trim().to_owned())
            }
            _ => cell.push(c),
        }
        prev = c;
    }
    out.push(cell.trim().to_owned());
    out
}

/// The tables of a page.
pub fn tables(text: &str) -> Vec<Table> {
    let mut out = Vec::new();
    let mut heading = String::new();
    let prose = prose(text);
    let mut i = 0;
    while i < prose.len() {
        let (_, line) = prose[i];
        let trimmed = line.trim();
        if let Some(h) = trimmed.strip_prefix('#') {
            heading = h.trim_start_matches('#').trim().to_owned();
        }
        let is_row = |l: &str| l.trim().starts_with('|');
        let is_rule = |l: &str| {
            let t = l.trim();
            t.starts_with('|') && t.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '))
        };
        if is_row(line) && i + 1 < prose.len() && is_rule(prose[i + 1].1) {
            let header = cells(line);
            let mut rows = Vec::new();
            let mut j = i + 2;
            while j < prose.len() && is_row(prose[j].1) {
                rows.push((prose[j].0, cells(prose[j].1)));
                j += 1;
            }
            out.push(Table {
                heading: heading.clone(),
                header,
                rows,
            });
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn the_markdown_reader_reads_what_the_pages_use() {
    assert_eq!(
        slug("Writing a topic: `protocol = \"kafka\"`"),
        "writing-a-topic-protocol--kafka"
    );
    assert_eq!(slug("Drop-in: `--aggregator`"), "drop-in---aggregator");
    assert_eq!(slug("`[destinations.queue]`"), "destinationsqueue");
    assert_eq!(
        code_spans("a `b` and ```` ```toml ```` c ``d`e``"),
        vec!["b", "```toml", "d`e"]
    );
    assert_eq!(
        cells("| `a\\|b` | x `|` y | z |"),
        vec!["`a\\|b`", "x `|` y", "z"]
    );
    assert_eq!(
        links("see [x](a.md#b) and `[y](not)` and ![i](p.png)"),
        vec!["a.md#b", "p.png"]
    );
    let page = "# A\n```toml fragment\nx = 1\n```\n## A\n| k | v |\n|---|---|\n| `a` | 1 |\n";
    let f = fences(page);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].info, vec!["toml", "fragment"]);
    assert_eq!(f[0].body, "x = 1\n");
    assert_eq!(
        anchors(page).into_iter().collect::<Vec<_>>(),
        vec!["a", "a-1"]
    );
    let t = tables(page);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].heading, "A");
    assert_eq!(t[0].rows[0].1, vec!["`a`", "1"]);
}
