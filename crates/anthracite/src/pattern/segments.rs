//! The groups of an anchored pattern read off a matching name's dots, without the regex engine.
//!
//! carbon's `build_regex` writes an aggregation rule's input pattern as dot-separated parts —
//! literal text, `<field>` as `(?P<field>[^.]+?)`, `*` as `[^.]+` or `[^.]*` — joined with
//! `\.` and ending in `$`; the rule adds the `re.match` anchor at the front. Once a name is
//! known to match (the rules' automaton reports it), such a pattern leaves its groups no
//! choice: a literal has one length, and a run of `[^.]` that a `.` follows (or the end) ends
//! at the first dot, however lazy its quantifier. Read from both ends, those parts give the
//! spans the capture engine would find, byte for byte, and what lies between them, if it is a
//! single item, fills the rest: a group such as the alternation `(cpu\.user|mem\.free)` that a
//! rule writes across dots. [`SegmentSpans::new`] decides at load whether every group of a
//! pattern can be read this way; a pattern with any other shape keeps the regex's captures.

use regex_syntax::hir::{Hir, HirKind, Look};

use super::{Pattern, Spans};

/// A part of the pattern that the walk from either end reads.
#[derive(Clone, Debug)]
enum Step {
    /// Literal bytes.
    Literal(Box<[u8]>),
    /// A run of anything but `.`, delimited by a `.` (or the end of the name) on the side the
    /// walk reads towards.
    Run {
        /// The group it is, if it is one.
        group: Option<usize>,
        /// The run has at least one character (`+`, not `*`).
        nonempty: bool,
    },
}

/// How to read a pattern's groups from a name the pattern matches (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct SegmentSpans {
    /// The parts read from the start, in order.
    front: Vec<Step>,
    /// The parts read from the end, last first.
    back: Vec<Step>,
    /// The group that is the one item between `front` and `back`, if that item is a group.
    middle: Option<usize>,
    /// Nothing lies between `front` and `back`: they meet.
    meet: bool,
    /// Groups, counting the whole match.
    groups: usize,
}

/// One item of the pattern's top-level concatenation.
enum Item<'h> {
    Start,
    End,
    Literal(&'h [u8]),
    Run {
        group: Option<usize>,
        nonempty: bool,
    },
    Other(&'h Hir),
}

impl SegmentSpans {
    /// The reading of `pattern`, or `None` when one of its groups does not follow from the
    /// name's dots (or the pattern is not an anchored, case-sensitive linear one).
    pub(crate) fn new(pattern: &Pattern) -> Option<Self> {
        if !pattern.is_linear() || pattern.ignore_case {
            return None;
        }
        let parse = |source: &str| {
            regex_syntax::ParserBuilder::new()
                .utf8(false)
                .build()
                .parse(source)
                .ok()
        };
        let hir = parse(&pattern.source)?;
        let not_dot = parse("[^.]")?;
        let mut items = Vec::new();
        flatten(&hir, &not_dot, &mut items);
        let (Some(Item::Start), Some(Item::End)) = (items.first(), items.last()) else {
            return None;
        };
        let inner = items.get(1..items.len() - 1)?;
        let dot_after = |i: usize| match inner.get(i + 1) {
            None => true,
            Some(Item::Literal(l)) => l.first() == Some(&b'.'),
            Some(_) => false,
        };
        let dot_before = |i: usize| match i.checked_sub(1).and_then(|j| inner.get(j)) {
            None => true,
            Some(Item::Literal(l)) => l.last() == Some(&b'.'),
            Some(_) => false,
        };
        let step = |i: usize, delimited: bool| match inner.get(i)? {
            Item::Literal(l) => Some(Step::Literal((*l).into())),
            &Item::Run { group, nonempty } if delimited => Some(Step::Run { group, nonempty }),
            _ => None,
        };
        let mut front = Vec::new();
        while let Some(s) = step(front.len(), dot_after(front.len())) {
            front.push(s);
        }
        let mut back = Vec::new();
        while back.len() + front.len() < inner.len() {
            let i = inner.len() - 1 - back.len();
            let Some(s) = step(i, dot_before(i)) else {
                break;
            };
            back.push(s);
        }
        let rest = &inner[front.len()..inner.len() - back.len()];
        let groups = pattern.group_count() + 1;
        let mut located = vec![false; groups];
        located[0] = true;
        for s in front.iter().chain(&back) {
            if let Step::Run { group: Some(g), .. } = s {
                *located.get_mut(*g)? = true;
            }
        }
        let mut middle = None;
        for item in rest {
            let (group, sub) = match item {
                Item::Other(h) => match h.kind() {
                    HirKind::Capture(c) if rest.len() == 1 => (Some(c.index as usize), &*c.sub),
                    _ => (None, *h),
                },
                Item::Run { group, .. } if rest.len() == 1 => (*group, &not_dot),
                Item::Run { group: None, .. } | Item::Literal(_) => continue,
                _ => return None,
            };
            if sub.properties().explicit_captures_len() > 0 {
                return None;
            }
            if let Some(g) = group {
                *located.get_mut(g)? = true;
                middle = Some(g);
            }
        }
        located.iter().all(|&l| l).then_some(Self {
            front,
            back,
            middle,
            meet: rest.is_empty(),
            groups,
        })
    }

    /// Fills `spans` with the groups of `text`, which the pattern matches. False (and `spans`
    /// to be filled by [`Pattern::find_at`]) when the name does not read as the pattern says,
    /// which a name the pattern matches never does.
    pub(crate) fn read(&self, text: &str, spans: &mut Spans) -> bool {
        let text = text.as_bytes();
        if spans.groups.len() != self.groups {
            return false;
        }
        let mut start = 0;
        for s in &self.front {
            match s {
                Step::Literal(l) => {
                    if !text.get(start..).is_some_and(|t| t.starts_with(l)) {
                        return false;
                    }
                    start += l.len();
                }
                &Step::Run { group, nonempty } => {
                    let rest = text.get(start..).unwrap_or_default();
                    let end = start + memchr::memchr(b'.', rest).unwrap_or(rest.len());
                    if nonempty && end == start {
                        return false;
                    }
                    if let Some(g) = group {
                        spans.groups[g] = Some((start, end));
                    }
                    start = end;
                }
            }
        }
        let mut end = text.len();
        for s in &self.back {
            match s {
                Step::Literal(l) => {
                    if end < start + l.len() || !text[..end].ends_with(l) {
                        return false;
                    }
                    end -= l.len();
                }
                &Step::Run { group, nonempty } => {
                    let head = text.get(start..end).unwrap_or_default();
                    let from = memchr::memrchr(b'.', head).map_or(start, |d| start + d + 1);
                    if nonempty && from == end {
                        return false;
                    }
                    if let Some(g) = group {
                        spans.groups[g] = Some((from, end));
                    }
                    end = from;
                }
            }
        }
        if start > end || (self.meet && start != end) {
            return false;
        }
        if let Some(g) = self.middle {
            spans.groups[g] = Some((start, end));
        }
        spans.groups[0] = Some((0, text.len()));
        true
    }
}

/// The items of `hir`'s top-level concatenation, nested concatenations included.
fn flatten<'h>(hir: &'h Hir, not_dot: &Hir, items: &mut Vec<Item<'h>>) {
    let run = |h: &Hir| match h.kind() {
        HirKind::Repetition(r) if r.max.is_none() && r.min <= 1 && *r.sub == *not_dot => {
            Some(r.min == 1)
        }
        _ => None,
    };
    match hir.kind() {
        HirKind::Concat(subs) => subs.iter().for_each(|h| flatten(h, not_dot, items)),
        HirKind::Empty => {}
        HirKind::Look(Look::Start) => items.push(Item::Start),
        HirKind::Look(Look::End) => items.push(Item::End),
        HirKind::Literal(l) => items.push(Item::Literal(&l.0)),
        HirKind::Capture(c) => match run(&c.sub) {
            Some(nonempty) => items.push(Item::Run {
                group: Some(c.index as usize),
                nonempty,
            }),
            None => items.push(Item::Other(hir)),
        },
        _ => match run(hir) {
            Some(nonempty) => items.push(Item::Run {
                group: None,
                nonempty,
            }),
            None => items.push(Item::Other(hir)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pattern as an aggregation rule compiles one: anchored at the start, `\.` between
    /// parts, `$` at the end.
    fn anchored(parts: &[&str]) -> Option<Pattern> {
        Pattern::new(&format!("\\A(?:{}$)", parts.join("\\."))).ok()
    }

    fn regex_spans(p: &Pattern, name: &str) -> Option<Vec<Option<(usize, usize)>>> {
        let mut spans = p.spans();
        p.find_at(name, 0, &mut spans).then_some(spans.groups)
    }

    fn read_spans(
        r: &SegmentSpans,
        p: &Pattern,
        name: &str,
    ) -> Option<Vec<Option<(usize, usize)>>> {
        let mut spans = p.spans();
        r.read(name, &mut spans).then_some(spans.groups)
    }

    #[test]
    fn shapes_the_dots_do_not_decide_keep_the_regex() {
        for parts in [
            &[r"(?P<p>.+?)", r"x(?P<f>[^.]+?)y"][..],
            &[r"(?P<p>.+?)", r"(?P<q>.+?)"],
            &["a|b", r"(?P<x>[^.]+?)"],
            &[r"((?P<x>[^.]+?))", "a"],
            &["a", r"(?P<x>[^.]+?)?"],
        ] {
            let p = anchored(parts).expect("compiles");
            assert!(SegmentSpans::new(&p).is_none(), "{parts:?}");
        }
        let insensitive = Pattern::case_insensitive(r"\A(?:a\.(?P<x>[^.]+?)$)").expect("compiles");
        assert!(SegmentSpans::new(&insensitive).is_none());
    }

    /// Generated patterns of carbon's parts (`<field>` as `(?P<f>[^.]+?)`, `<<field>>` as
    /// `(?P<f>.+?)`, `*` as `[^.]+` or `[^.]*`, other text as regex) and generated names:
    /// wherever the regex matches, a pattern with a reading reads exactly the regex's groups.
    #[test]
    fn readings_agree_with_the_regex_on_generated_patterns_and_names() {
        const PARTS: [&str; 16] = [
            "a",
            "b",
            "ab",
            "(?P<f>[^.]+?)",
            "(?P<f>[^.]+?)",
            "[^.]+",
            "[^.]+",
            "x[^.]*",
            "(?P<f>.+?)",
            "p(?P<f>[^.]+?)",
            "(?P<f>[^.]+?)q",
            r"(a|b\.c)",
            "a|b",
            "[ab]",
            "a+",
            "b?",
        ];
        const SEGMENTS: [&str; 10] = ["a", "b", "ab", "c", "x", "pa", "aq", "", "é", "a\nb"];
        let mut rng = fastrand::Rng::with_seed(34);
        let (mut readable, mut compared) = (0, 0);
        for _ in 0..600 {
            let parts: Vec<String> = (0..rng.usize(1..=4))
                .map(|i| PARTS[rng.usize(..PARTS.len())].replace("<f>", &format!("<f{i}>")))
                .collect();
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            let Some(p) = anchored(&parts) else {
                continue;
            };
            let Some(r) = SegmentSpans::new(&p) else {
                continue;
            };
            readable += 1;
            for _ in 0..200 {
                let name: Vec<&str> = (0..rng.usize(1..=5))
                    .map(|_| SEGMENTS[rng.usize(..SEGMENTS.len())])
                    .collect();
                let name = name.join(".");
                if let Some(expected) = regex_spans(&p, &name) {
                    compared += 1;
                    assert_eq!(
                        read_spans(&r, &p, &name),
                        Some(expected),
                        "{parts:?} on {name:?}"
                    );
                }
            }
        }
        assert!(
            readable > 200 && compared > 2_000,
            "{readable} patterns, {compared} names"
        );
    }
}
