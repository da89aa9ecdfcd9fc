//! How a carbon-c-relay expression is matched (`determine_if_regex`,
//! `router_metric_matches`) and how a match is rewritten (`router_rewrite_metric`).

use std::fmt;
use std::sync::Arc;

use crate::posix_regex::{MAX_MATCHES, PosixRegex, PosixRegexError, Spans};

/// carbon-c-relay's `METRIC_BUFSIZ`: a rewritten line (with its newline and a NUL) must fit.
pub(crate) const METRIC_BUFSIZ: usize = 32768;

/// How an expression is tested. carbon-c-relay compares an expression made only of letters,
/// digits, `_`, `-` and escaped characters as a string (a leading `^` and a trailing `$`
/// anchoring it), and hands anything else to `regcomp`.
#[derive(Clone)]
pub(crate) enum Matcher {
    /// `*`.
    All,
    Regex(Arc<PosixRegex>),
    /// `strstr`.
    Contains(Vec<u8>),
    /// `strncmp`: `^text`.
    StartsWith(Vec<u8>),
    /// `tailcmp`: `text$`.
    EndsWith(Vec<u8>),
    /// `strcmp`: `^text$`.
    Matches(Vec<u8>),
}

impl fmt::Debug for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Matcher::All => f.write_str("All"),
            Matcher::Regex(r) => write!(f, "Regex({} groups)", r.groups()),
            Matcher::Contains(s) => write!(f, "Contains({})", String::from_utf8_lossy(s)),
            Matcher::StartsWith(s) => write!(f, "StartsWith({})", String::from_utf8_lossy(s)),
            Matcher::EndsWith(s) => write!(f, "EndsWith({})", String::from_utf8_lossy(s)),
            Matcher::Matches(s) => write!(f, "Matches({})", String::from_utf8_lossy(s)),
        }
    }
}

impl Matcher {
    /// `router_validate_expression`: `*`, a string comparison, or a regex; with the
    /// `regmatch_t` slots carbon-c-relay asks for (groups + 1, or 0 without groups).
    pub(crate) fn compile(pattern: &str) -> Result<(Self, usize), PosixRegexError> {
        if pattern == "*" {
            return Ok((Matcher::All, 0));
        }
        let bytes = pattern.as_bytes();
        #[derive(PartialEq)]
        enum Kind {
            Contains,
            StartsWith,
            EndsWith,
            Matches,
            Regex,
        }
        let mut kind = Kind::Contains;
        let mut e = 0;
        if bytes.first() == Some(&b'^') {
            e = 1;
            kind = Kind::StartsWith;
        }
        let mut text = Vec::new();
        let mut escape = false;
        // carbon-c-relay's 8192-byte `patbuf`: a longer literal is left to the regex.
        const PATBUF: usize = 8192;
        while e < bytes.len() {
            let c = bytes[e];
            match c {
                b'\\' => {
                    if escape {
                        text.push(c);
                    }
                    escape = !escape;
                }
                b'.' | b'^' | b'*' | b'+' => {
                    if !escape {
                        kind = Kind::Regex;
                    }
                    text.push(c);
                    escape = false;
                }
                b'$' => {
                    if !escape && e + 1 == bytes.len() {
                        kind = if kind == Kind::StartsWith {
                            Kind::Matches
                        } else {
                            Kind::EndsWith
                        };
                    } else {
                        kind = Kind::Regex;
                    }
                    escape = false;
                }
                _ => {
                    if !escape && (c == b'_' || c == b'-' || c.is_ascii_alphanumeric()) {
                        text.push(c);
                    } else {
                        kind = Kind::Regex;
                    }
                    escape = false;
                }
            }
            if text.len() == PATBUF {
                kind = Kind::Regex;
            }
            if kind == Kind::Regex {
                break;
            }
            e += 1;
        }
        Ok(match kind {
            Kind::Contains => (Matcher::Contains(text), 0),
            Kind::StartsWith => (Matcher::StartsWith(text), 0),
            Kind::EndsWith => (Matcher::EndsWith(text), 0),
            Kind::Matches => (Matcher::Matches(text), 0),
            Kind::Regex => {
                let re = PosixRegex::new(pattern)?;
                let nmatch = if re.groups() > 0 { re.groups() + 1 } else { 0 };
                (Matcher::Regex(Arc::new(re)), nmatch)
            }
        })
    }

    /// The compared text of a string matcher (carbon-c-relay's `strmatch`).
    pub(crate) fn strmatch(&self) -> Option<&[u8]> {
        match self {
            Matcher::Contains(s)
            | Matcher::StartsWith(s)
            | Matcher::EndsWith(s)
            | Matcher::Matches(s) => Some(s),
            Matcher::All | Matcher::Regex(_) => None,
        }
    }

    /// `router_metric_matches` on `subject` (the name, or the text after it for
    /// validation). On a match, `spans[0]` is the matched span (for `*`, the whole subject)
    /// and a regex's groups follow.
    pub(crate) fn matches(&self, subject: &[u8], spans: &mut Spans) -> bool {
        match self {
            Matcher::All => {
                spans[0] = Some((0, subject.len()));
                true
            }
            Matcher::Regex(re) => re.captures(subject, spans),
            Matcher::Contains(s) => match memchr::memmem::find(subject, s) {
                Some(at) => {
                    spans[0] = Some((at, at + s.len()));
                    true
                }
                None => false,
            },
            Matcher::StartsWith(s) => {
                let hit = subject.starts_with(s);
                if hit {
                    spans[0] = Some((0, s.len()));
                }
                hit
            }
            Matcher::EndsWith(s) => {
                let hit = subject.ends_with(s);
                if hit {
                    spans[0] = Some((subject.len() - s.len(), subject.len()));
                }
                hit
            }
            Matcher::Matches(s) => {
                let hit = subject == s.as_slice();
                if hit {
                    spans[0] = Some((0, s.len()));
                }
                hit
            }
        }
    }
}

/// Spans with nothing matched.
pub(crate) const NO_SPANS: Spans = [None; MAX_MATCHES];

/// `router_rewrite_metric`: the line `line` (name up to `firstspace`, then the rest) with the
/// matched span of its name replaced by `replacement`, its references filled from `spans`
/// (only `\1`…`\N` below `nmatch`); the new line goes to `out` and its new first-space
/// position is returned. `None` when it would not fit carbon-c-relay's buffer (it then keeps
/// the line as it was).
pub(crate) fn rewrite_metric(
    line: &[u8],
    firstspace: usize,
    replacement: &[u8],
    nmatch: usize,
    spans: &Spans,
    out: &mut Vec<u8>,
) -> Option<usize> {
    #[derive(Clone, Copy, PartialEq)]
    enum Case {
        Retain,
        Lower,
        Upper,
        RetainDot,
        LowerDot,
        UpperDot,
    }
    out.clear();
    let (so, eo) = spans[0].unwrap_or((0, 0));
    let fits = |out: &Vec<u8>, more: usize| out.len() + more < METRIC_BUFSIZ;
    if !fits(out, so) {
        return None;
    }
    out.extend_from_slice(&line[..so.min(line.len())]);
    let mut escape = 0u8;
    let mut reference = 0usize;
    let mut case = Case::Retain;
    // The replacement walked with its terminating NUL, as the C loop walks it.
    for &c in replacement.iter().chain(std::iter::once(&0u8)) {
        if c == b'\\' && escape == 0 {
            escape = 1;
            case = Case::Retain;
        } else if escape == 1 && case == Case::Retain && c == b'_' {
            case = Case::Lower;
        } else if escape == 1 && case == Case::Retain && c == b'^' {
            case = Case::Upper;
        } else if escape == 1 && c == b'.' {
            case = match case {
                Case::Lower => Case::LowerDot,
                Case::Upper => Case::UpperDot,
                _ => Case::RetainDot,
            };
        } else if escape != 0 && c.is_ascii_digit() {
            escape = 2;
            reference = reference
                .wrapping_mul(10)
                .wrapping_add(usize::from(c - b'0'));
        } else {
            if escape != 0 {
                if reference > 0
                    && reference <= nmatch
                    && let Some(Some((s, e))) = spans.get(reference)
                {
                    let part = &line[*s..*e];
                    if fits(out, part.len()) {
                        for &b in part {
                            out.push(match case {
                                Case::Retain => b,
                                Case::Lower => b.to_ascii_lowercase(),
                                Case::Upper => b.to_ascii_uppercase(),
                                Case::RetainDot if b == b'.' => b'_',
                                Case::LowerDot if b == b'.' => b'_',
                                Case::UpperDot if b == b'.' => b'_',
                                Case::RetainDot => b,
                                Case::LowerDot => b.to_ascii_lowercase(),
                                Case::UpperDot => b.to_ascii_uppercase(),
                            });
                        }
                    }
                }
                reference = 0;
            }
            // `\1\2`: a backslash right after a reference starts the next one.
            if c != b'\\' {
                escape = 0;
                case = Case::Retain;
                if c != 0 && fits(out, 1) {
                    out.push(c);
                }
            }
        }
    }
    let tail = &line[eo.min(firstspace)..firstspace];
    if !fits(out, tail.len()) {
        return None;
    }
    out.extend_from_slice(tail);
    let newfirstspace = out.len();
    // The data part keeps its newline (and a NUL) in carbon-c-relay's buffer.
    let data = &line[firstspace..];
    if !fits(out, data.len() + 1) {
        return None;
    }
    out.extend_from_slice(data);
    Some(newfirstspace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(pattern: &str, replacement: &str, line: &str) -> String {
        let (m, nmatch) = Matcher::compile(pattern).expect("compiles");
        let firstspace = line.find(' ').unwrap_or(line.len());
        let mut spans = NO_SPANS;
        assert!(
            m.matches(&line.as_bytes()[..firstspace], &mut spans),
            "{pattern} on {line}"
        );
        let mut out = Vec::new();
        rewrite_metric(
            line.as_bytes(),
            firstspace,
            replacement.as_bytes(),
            nmatch,
            &spans,
            &mut out,
        )
        .expect("fits");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn plain_expressions_are_string_comparisons() {
        let kind = |p: &str| format!("{:?}", Matcher::compile(p).expect("ok").0);
        assert_eq!(kind("foo"), "Contains(foo)");
        assert_eq!(kind("^foo\\.bar"), "StartsWith(foo.bar)");
        assert_eq!(kind("bar$"), "EndsWith(bar)");
        assert_eq!(kind("^a-b_c$"), "Matches(a-b_c)");
        assert_eq!(kind("^a.b"), "Regex(0 groups)");
        assert_eq!(kind("foo\\"), "Contains(foo)");
        assert_eq!(kind("*"), "All");
    }

    #[test]
    fn modifiers_lower_upper_and_dots() {
        assert_eq!(
            rewrite(
                r"^server\.(.+)\.(.+)\.([a-zA-Z]+)([0-9]+)",
                r"server.\_1.\2.\3.\3\4",
                "server.DC.role.name123 1 2"
            ),
            "server.dc.role.name.name123 1 2"
        );
        assert_eq!(rewrite("^(b.*)", r"\^1^", "bla.foo 1 2"), "BLA.FOO^ 1 2");
        assert_eq!(rewrite("^(a.*)", r"\_1_", "abLaH"), "ablah_");
        assert_eq!(rewrite("^(a.*)", r"x.\.1", "a.b.c 1"), "x.a_b_c 1");
        assert_eq!(rewrite("^(A.*)", r"\_.1", "A.B 1"), "a_b 1");
        assert_eq!(rewrite("^(a.*)", r"\^.1", "a.b 1"), "A_B 1");
    }

    #[test]
    fn only_the_match_is_replaced_and_quirks_of_the_escape_state_hold() {
        // Text around the match stays.
        assert_eq!(rewrite("b(c)", r"[\1]", "abcd 1"), "a[c]d 1");
        // After a reference, `\_` does not lower: the escape state is not fresh.
        assert_eq!(rewrite("^(A)(B)", r"\1\_2", "AB 1"), "A_2 1");
        // References past the groups are dropped; unknown escapes keep the character.
        assert_eq!(rewrite("^(a)", r"\2\n", "a 1"), "n 1");
    }
}
