//! carbon's rewrite rules (`rewrite-rules.conf`, `carbon.rewrite`): Python `re.sub` on metric
//! names, `[pre]` before aggregation and `[post]` on what is passed on. The semantics are in
//! the `aggregator` module documentation.

use crate::pattern::{Pattern, Spans};

/// Why a rewrite-rules file was refused (the line is 1-based).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RewriteError {
    /// Neither a `[section]` header nor `pattern = replacement`.
    #[error("line {line}: {text:?} is neither a [section] header nor `pattern = replacement`")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// The line as written.
        text: String,
    },
    /// The pattern does not compile.
    #[error("line {line}: invalid regular expression {pattern:?}: {message}")]
    Regex {
        /// 1-based line number.
        line: usize,
        /// The pattern as written.
        pattern: String,
        /// The regex engine's message.
        message: String,
    },
    /// The replacement is a template Python's `re.sub` raises on.
    #[error("line {line}: replacement {replacement:?}: {message}")]
    Template {
        /// 1-based line number.
        line: usize,
        /// The replacement as written.
        replacement: String,
        /// What is wrong with it.
        message: String,
    },
}

/// One piece of a replacement template.
#[derive(Clone, Debug, PartialEq)]
enum Piece {
    Text(String),
    Group(usize),
}

/// One `pattern = replacement` rule.
#[derive(Clone, Debug)]
pub struct RewriteRule {
    regex: Pattern,
    template: Vec<Piece>,
}

/// The `[pre]` and `[post]` rule sets of one rewrite-rules file.
#[derive(Clone, Debug, Default)]
pub struct RewriteRules {
    /// Applied to received names, before aggregation.
    pub pre: Vec<RewriteRule>,
    /// Applied to the names `FORWARD_ALL` passes on.
    pub post: Vec<RewriteRule>,
}

impl RewriteRules {
    /// Parses the text of a rewrite-rules file (see the module documentation).
    pub fn parse(text: &str) -> Result<Self, RewriteError> {
        let mut rules = Self::default();
        let mut section: Option<String> = None;
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line.starts_with('[') && line.ends_with(']') && line.len() >= 2 {
                let name = line[1..line.len() - 1].to_lowercase();
                // A header clears its section, as carbon's `self.clear(section)`.
                if let Some(set) = rules.section(&name) {
                    set.clear();
                }
                section = Some(name);
                continue;
            }
            let Some((pattern, replacement)) = line.split_once('=') else {
                return Err(RewriteError::Syntax {
                    line: i + 1,
                    text: line.to_owned(),
                });
            };
            let rule = RewriteRule::new(pattern.trim(), replacement.trim(), i + 1)?;
            if let Some(set) = section.as_deref().and_then(|s| rules.section(s)) {
                set.push(rule);
            }
        }
        Ok(rules)
    }

    fn section(&mut self, name: &str) -> Option<&mut Vec<RewriteRule>> {
        match name {
            "pre" => Some(&mut self.pre),
            "post" => Some(&mut self.post),
            _ => None,
        }
    }

    /// True when there is no rule at all.
    pub fn is_empty(&self) -> bool {
        self.pre.is_empty() && self.post.is_empty()
    }
}

/// Applies `rules` in order to `name`; the result is in `out` (cleared first) when some rule
/// changed it, and the function returns false (and leaves `out` alone) when none did.
pub(crate) fn apply(
    rules: &[RewriteRule],
    name: &str,
    out: &mut String,
    scratch: &mut Scratch,
) -> bool {
    let mut changed = false;
    for rule in rules {
        let current: &str = if changed { &scratch.text } else { name };
        scratch.next.clear();
        if rule.sub(current, &mut scratch.next, &mut scratch.spans) {
            std::mem::swap(&mut scratch.text, &mut scratch.next);
            changed = true;
        }
    }
    if changed {
        out.clear();
        out.push_str(&scratch.text);
    }
    changed
}

/// Reusable buffers for [`apply`]: no allocation once grown (with linear patterns).
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    text: String,
    next: String,
    spans: Vec<(usize, Spans)>,
}

impl RewriteRule {
    fn new(pattern: &str, replacement: &str, line: usize) -> Result<Self, RewriteError> {
        let regex = Pattern::new(pattern).map_err(|e| RewriteError::Regex {
            line,
            pattern: pattern.to_owned(),
            message: e.to_string(),
        })?;
        let template =
            parse_template(replacement, &regex).map_err(|message| RewriteError::Template {
                line,
                replacement: replacement.to_owned(),
                message,
            })?;
        Ok(Self { regex, template })
    }

    /// `re.sub(pattern, replacement, text)` into `out`; false (and `out` untouched beyond
    /// what it held) when nothing matched.
    fn sub(&self, text: &str, out: &mut String, cache: &mut Vec<(usize, Spans)>) -> bool {
        // One reusable `Spans` per pattern, keyed by the pattern's address while the rules
        // live; a new rule set finds none and adds its own.
        let key = self as *const Self as usize;
        let idx = match cache.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                cache.push((key, self.regex.spans()));
                cache.len() - 1
            }
        };
        let Some((_, spans)) = cache.get_mut(idx) else {
            return false;
        };
        let mut pos = 0;
        let mut copied = 0;
        let mut matched = false;
        let mut last_empty_at: Option<usize> = None;
        while pos <= text.len() {
            if !self.regex.find_at(text, pos, spans) {
                break;
            }
            let Some((start, end)) = spans.get(0) else {
                break;
            };
            if start == end && last_empty_at == Some(start) {
                // sre's `must_advance`: no empty match where the previous empty one was.
                match next_char(text, start) {
                    Some(next) => {
                        pos = next;
                        continue;
                    }
                    None => break,
                }
            }
            out.push_str(text.get(copied..start).unwrap_or_default());
            for piece in &self.template {
                match piece {
                    Piece::Text(t) => out.push_str(t),
                    Piece::Group(g) => {
                        if let Some((s, e)) = spans.get(*g) {
                            out.push_str(text.get(s..e).unwrap_or_default());
                        }
                    }
                }
            }
            matched = true;
            copied = end;
            if start == end {
                last_empty_at = Some(end);
                pos = end;
            } else {
                last_empty_at = None;
                pos = end;
            }
        }
        if matched {
            out.push_str(text.get(copied..).unwrap_or_default());
        }
        matched
    }
}

fn next_char(text: &str, at: usize) -> Option<usize> {
    let c = text.get(at..)?.chars().next()?;
    Some(at + c.len_utf8())
}

/// Python 3.11's `re._parser.parse_template`, for a pattern with `regex`'s groups.
fn parse_template(replacement: &str, regex: &Pattern) -> Result<Vec<Piece>, String> {
    let groups = regex.group_count();
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = replacement.chars().peekable();
    let group = |pieces: &mut Vec<Piece>, text: &mut String, g: usize| {
        if g > groups {
            return Err(format!("invalid group reference {g}"));
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(text)));
        }
        pieces.push(Piece::Group(g));
        Ok(())
    };
    let octal = |c: char| ('0'..='7').contains(&c);
    while let Some(c) = chars.next() {
        if c != '\\' {
            text.push(c);
            continue;
        }
        let Some(c) = chars.next() else {
            return Err("bad escape (end of pattern)".to_owned());
        };
        match c {
            'g' => {
                if chars.next() != Some('<') {
                    return Err("missing <".to_owned());
                }
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('>') => break,
                        Some(ch) => name.push(ch),
                        None => return Err("missing >, unterminated name".to_owned()),
                    }
                }
                if name.is_empty() {
                    return Err("missing group name".to_owned());
                }
                let index = if name.chars().all(|ch| ch.is_ascii_digit()) {
                    name.parse::<usize>()
                        .map_err(|_| format!("invalid group reference {name}"))?
                } else {
                    regex
                        .group_index(&name)
                        .ok_or_else(|| format!("unknown group name {name:?}"))?
                };
                group(&mut pieces, &mut text, index)?;
            }
            '0' => {
                let mut value = 0u32;
                for _ in 0..2 {
                    match chars.peek() {
                        Some(&d) if octal(d) => {
                            value = value * 8 + d.to_digit(8).unwrap_or(0);
                            chars.next();
                        }
                        _ => break,
                    }
                }
                text.push(char::from_u32(value & 0xff).unwrap_or('\0'));
            }
            '1'..='9' => {
                let first = c.to_digit(10).unwrap_or(0);
                match chars.peek().copied() {
                    Some(d) if d.is_ascii_digit() => {
                        chars.next();
                        let second = d.to_digit(10).unwrap_or(0);
                        match chars.peek().copied() {
                            Some(t) if octal(c) && octal(d) && octal(t) => {
                                chars.next();
                                let v = first * 64 + second * 8 + t.to_digit(8).unwrap_or(0);
                                if v > 0o377 {
                                    return Err(format!(
                                        "octal escape value \\{c}{d}{t} outside of range 0-0o377"
                                    ));
                                }
                                text.push(char::from_u32(v).unwrap_or('\0'));
                            }
                            _ => group(&mut pieces, &mut text, (first * 10 + second) as usize)?,
                        }
                    }
                    _ => group(&mut pieces, &mut text, first as usize)?,
                }
            }
            'a' => text.push('\x07'),
            'b' => text.push('\x08'),
            'f' => text.push('\x0c'),
            'n' => text.push('\n'),
            'r' => text.push('\r'),
            't' => text.push('\t'),
            'v' => text.push('\x0b'),
            '\\' => text.push('\\'),
            c if c.is_ascii_alphabetic() => return Err(format!("bad escape \\{c}")),
            c => {
                text.push('\\');
                text.push(c);
            }
        }
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(pattern: &str, replacement: &str, name: &str) -> String {
        let rule = RewriteRule::new(pattern, replacement, 1).expect("rule");
        let mut out = String::new();
        let mut scratch = Scratch::default();
        if apply(std::slice::from_ref(&rule), name, &mut out, &mut scratch) {
            out
        } else {
            name.to_owned()
        }
    }

    /// Expected values from Python 3.11's `re.sub`.
    #[test]
    fn substitution_matches_python() {
        assert_eq!(sub(r"^collectd\.", "", "collectd.web1.cpu"), "web1.cpu");
        assert_eq!(sub(r"_", ".", "a_b_c"), "a.b.c");
        assert_eq!(
            sub(r"^(\w+)\.(\w+)\.cpu", r"\2.\1.cpu", "web1.prod.cpu.user"),
            "prod.web1.cpu.user"
        );
        assert_eq!(
            sub(
                r"^(?P<host>\w+)\.load",
                r"hosts.\g<host>.load.\g<0>",
                "web1.load"
            ),
            "hosts.web1.load.web1.load"
        );
        assert_eq!(sub("x*", "-", "abxd"), "-a-b--d-");
        assert_eq!(sub("", "-", "ab"), "-a-b-");
        assert_eq!(sub(r"(a)|b", r"[\1]", "ab"), "[a][]");
        assert_eq!(sub(r"a", r"\.\n", "a"), "\\.\n");
        assert_eq!(sub(r"(a)", r"\101", "a"), "A", "three octal digits");
        assert_eq!(sub(r"(a)", r"\1\0", "a"), "a\0");
    }

    #[test]
    fn sections_and_errors() {
        let rules =
            RewriteRules::parse("# c\n[pre]\na = b\n[post]\nc = d\n[other]\ne = f\n[PRE]\ng = h\n")
                .expect("parses");
        assert_eq!(rules.pre.len(), 1, "a repeated header clears the section");
        assert_eq!(rules.post.len(), 1);
        assert!(matches!(
            RewriteRules::parse("[pre]\nnot a rule\n"),
            Err(RewriteError::Syntax { line: 2, .. })
        ));
        assert!(matches!(
            RewriteRules::parse("[pre]\n(unclosed = x\n"),
            Err(RewriteError::Regex { line: 2, .. })
        ));
        assert!(matches!(
            RewriteRules::parse("[pre]\n\n(a) = \\2\n"),
            Err(RewriteError::Template { line: 3, .. })
        ));
        assert!(matches!(
            RewriteRules::parse("[pre]\na = \\q\n"),
            Err(RewriteError::Template { line: 2, .. })
        ));
        assert!(matches!(
            RewriteRules::parse("[pre]\n(a) = \\10\n"),
            Err(RewriteError::Template { line: 2, .. })
        ));
    }
}
