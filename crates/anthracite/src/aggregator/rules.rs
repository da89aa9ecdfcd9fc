//! An `aggregation-rules.conf` as the aggregator uses it: the router's translation of each
//! rule ([`AggregationRule`]) with its method and frequency checked, and what carbon's
//! formatting of each output template does (never a reason to refuse the file: carbon starts
//! on any template).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use super::method::AggregationMethod;
use crate::pattern::{PatternSet, SegmentSpans, Spans};
use crate::router::aggregation::{AggregationRule, AggregationRuleError};

/// Why a rules file was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RulesError {
    /// The line does not parse (as carbon would also refuse, or carbon would fail on every
    /// matching datapoint).
    #[error("line {line}: {error}")]
    Rule {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        error: AggregationRuleError,
    },
    /// A frequency of zero or less (carbon divides by it at the first datapoint).
    #[error("line {line}: frequency {frequency} must be a positive number of seconds")]
    Frequency {
        /// 1-based line number.
        line: usize,
        /// The frequency read.
        frequency: i64,
    },
}

/// One rule: where a name goes, how often, and how it is combined.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The translated input pattern and output template.
    pub rule: AggregationRule,
    /// The method.
    pub method: AggregationMethod,
    /// Seconds per interval (> 0).
    pub frequency: i64,
    /// 1-based line in the file (entry number for inline rules).
    pub line: usize,
}

/// A rule whose output template carbon's formatting fails on (for every name or some), or
/// whose names hold white space: what carbon does with it, for a warning at load.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleWarning {
    /// 1-based line (entry number for inline rules).
    pub line: usize,
    /// The rule as written.
    pub rule: String,
    /// What carbon does with it, and what anthracite does.
    pub effect: String,
}

/// How a name fared with rules whose output template fails: the first rule that yielded
/// nothing for it (a `TypeError`), the rule it stopped at (a `KeyError` or `ValueError`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Failures {
    /// Position of the first rule whose template raised a `TypeError` for the name.
    pub skipped: Option<usize>,
    /// Position of the rule whose template raised a `KeyError` or `ValueError`: the rules
    /// after it were not tried.
    pub stopped: Option<usize>,
}

/// Buffers [`AggregationRules::for_each_output`] reuses from name to name: per rule position,
/// the match positions of its input pattern (made on first use), and the output name being
/// written.
#[derive(Debug, Default)]
pub(crate) struct ResolveScratch {
    spans: Vec<Option<Spans>>,
    output: String,
}

/// The rules of one aggregation-rules file, in file order.
#[derive(Debug, Clone)]
pub struct AggregationRules {
    /// The rules in file order (the order carbon tries them in).
    pub rules: Vec<Rule>,
    /// The rules' input patterns in one automaton: a new name costs one scan to find the
    /// rules it matches, and only those run their captures.
    set: Arc<PatternSet>,
    /// Per rule, the first rule with the same input pattern: rules written for several
    /// methods or outputs of the same input (`sum` and `p95` of one pattern) capture once.
    same_input: Vec<usize>,
    /// Per rule, how its input pattern's groups are read off a matching name's dots, when
    /// they can be (the usual shapes): the automaton has decided the match, so the capture
    /// regex would only find the spans the dots already give.
    readings: Vec<Option<SegmentSpans>>,
}

impl Default for AggregationRules {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl AggregationRules {
    /// Parses the text of an aggregation-rules file: one rule per line, `#` comments and blank
    /// lines skipped.
    pub fn parse(text: &str) -> Result<Self, RulesError> {
        let mut rules = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let rule = AggregationRule::parse(line)
                .map_err(|error| RulesError::Rule { line: i + 1, error })?;
            if rule.frequency <= 0 {
                return Err(RulesError::Frequency {
                    line: i + 1,
                    frequency: rule.frequency,
                });
            }
            // `AggregationRule::parse` accepts only carbon's method names.
            let method = AggregationMethod::parse(rule.method).unwrap_or(AggregationMethod::Sum);
            let frequency = rule.frequency;
            rules.push(Rule {
                rule,
                method,
                frequency,
                line: i + 1,
            });
        }
        Ok(Self::new(rules))
    }

    fn new(rules: Vec<Rule>) -> Self {
        let set = PatternSet::new(rules.iter().map(|r| r.rule.pattern().clone()).collect());
        let mut first = HashMap::new();
        let same_input = rules
            .iter()
            .enumerate()
            .map(|(i, r)| *first.entry(r.rule.pattern().as_str()).or_insert(i))
            .collect();
        let readings = rules
            .iter()
            .map(|r| SegmentSpans::new(r.rule.pattern()))
            .collect();
        Self {
            rules,
            set: Arc::new(set),
            same_input,
            readings,
        }
    }

    /// Calls `f` with the position and output name of every rule `name` matches, in file
    /// order (one scan of the automaton; captures only for the rules that match), as
    /// carbon's `AggregationProcessor.process` walks them: a rule whose template raises a
    /// `TypeError` yields nothing, one that raises anything else ends the walk. The captures
    /// and the output name are written into `scratch`, so a new name allocates nothing once
    /// it has grown.
    pub(crate) fn for_each_output(
        &self,
        name: &str,
        scratch: &mut ResolveScratch,
        mut f: impl FnMut(usize, &str),
    ) -> Failures {
        let mut failures = Failures::default();
        let ResolveScratch { spans, output } = scratch;
        if spans.len() < self.rules.len() {
            spans.resize_with(self.rules.len(), || None);
        }
        // The input pattern whose captures `spans` holds (by its first rule), and whether it
        // matched.
        let mut held: Option<(usize, bool)> = None;
        self.set.for_each_match(name.as_bytes(), |i| {
            let Some(rule) = self.rules.get(i) else {
                return ControlFlow::Continue(());
            };
            let input = self.same_input.get(i).copied().unwrap_or(i);
            let Some(first) = self.rules.get(input) else {
                return ControlFlow::Continue(());
            };
            let Some(at) = spans.get_mut(input) else {
                return ControlFlow::Continue(());
            };
            let pattern = first.rule.pattern();
            let at = at.get_or_insert_with(|| pattern.spans());
            let matched = match held {
                Some((h, matched)) if h == input => matched,
                _ => {
                    let read = self
                        .readings
                        .get(input)
                        .and_then(Option::as_ref)
                        .is_some_and(|r| r.read(name, at));
                    let matched = read || pattern.find_at(name, 0, at);
                    held = Some((input, matched));
                    matched
                }
            };
            if !matched {
                return ControlFlow::Continue(());
            }
            output.clear();
            let group = |g: usize| {
                let (start, end) = at.get(pattern.named_group_index(g)?)?;
                name.get(start..end)
            };
            match rule.rule.template().render(group, output) {
                Ok(()) => f(i, output),
                Err(failure) if failure.stops() => {
                    failures.stopped = Some(i);
                    return ControlFlow::Break(());
                }
                Err(_) => {
                    failures.skipped.get_or_insert(i);
                }
            }
            ControlFlow::Continue(())
        });
        failures
    }

    /// The rules whose output template is worth a warning at load, in file order.
    pub fn warnings(&self) -> Vec<RuleWarning> {
        self.rules
            .iter()
            .filter_map(|r| {
                let note = r.rule.template_note()?;
                Some(RuleWarning {
                    line: r.line,
                    rule: r.rule.source.clone(),
                    effect: note.aggregator_effect(),
                })
            })
            .collect()
    }

    /// Rules given inline (relay.toml), one per entry, numbered from 1.
    pub fn from_lines<S: AsRef<str>>(lines: &[S]) -> Result<Self, RulesError> {
        let text: Vec<&str> = lines.iter().map(AsRef::as_ref).collect();
        Self::parse(&text.join("\n"))
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True without rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_of_one_input_pattern_share_its_captures_and_keep_carbons_walk() {
        let walk = |text: &str, name: &str| {
            let rules = AggregationRules::parse(text).expect("parses");
            let mut out = Vec::new();
            let mut scratch = ResolveScratch::default();
            let failures =
                rules.for_each_output(name, &mut scratch, |i, o| out.push((i, o.to_owned())));
            (out, failures)
        };
        let same = "a.<x>.sum (60) = sum in.<x>.*\n\
                    a.<x>.%d (60) = avg in.<x>.*\n\
                    b.<y>.z (60) = p95 in.<y>.*\n\
                    c.<x>.max (60) = max in.<x>.*\n\
                    d.<x>.<y> (60) = max in.<x>.*\n\
                    e.<x>.min (60) = min in.<x>.*\n";
        let (out, failures) = walk(same, "in.q.1");
        assert_eq!(
            out,
            vec![
                (0, "a.q.sum".to_owned()),
                (2, "b.q.z".to_owned()),
                (3, "c.q.max".to_owned())
            ]
        );
        // `%d` skips rule 1 (TypeError); `<y>` is no field of rule 4's input: it stops there.
        assert_eq!(failures.skipped, Some(1));
        assert_eq!(failures.stopped, Some(4));
        let (out, _) = walk(same, "other.q.1");
        assert!(out.is_empty());
    }

    /// carbon's usual input patterns: their groups come from the name's dots (the regex's
    /// groups, byte for byte), and shapes the dots do not decide keep the regex.
    #[test]
    fn usual_input_patterns_read_their_groups_from_the_dots() {
        for (input, name) in [
            ("in.<x>.*", "in.q.1"),
            ("host-<h>.(cpu.user|mem.free|cpu.u)", "host-0001.cpu.user"),
            ("<<p>>.<x>.count", "a.b.c.count"),
            (
                "<env>.applications.<app>.*.requests",
                "prod.applications.web.a1.requests",
            ),
            ("a.b*.<x>", "a.bc.d"),
            ("a..<x>", "a..d"),
            ("a.x<f>y", "a.xbcy"),
        ] {
            let rules = AggregationRules::parse(&format!("o (60) = sum {input}")).expect("parses");
            let pattern = rules.rules[0].rule.pattern();
            let reading = rules.readings[0].as_ref().expect("a reading");
            let (mut read, mut found) = (pattern.spans(), pattern.spans());
            assert!(pattern.find_at(name, 0, &mut found), "{input} on {name}");
            assert!(reading.read(name, &mut read), "{input} on {name}");
            for g in 0..=pattern.group_count() {
                assert_eq!(read.get(g), found.get(g), "{input} on {name}, group {g}");
            }
        }
        for input in ["<<p>>.x<f>y", "<<p>>.<<q>>", "a|b.<x>", "(<x>).a"] {
            let rules = AggregationRules::parse(&format!("o (60) = sum {input}")).expect("parses");
            assert!(rules.readings[0].is_none(), "{input}");
        }
    }

    #[test]
    fn errors_name_the_line() {
        let err = AggregationRules::parse("# c\n\na.b (60) = sum a.*\na.c (0) = sum a.*\n")
            .expect_err("frequency 0");
        assert_eq!(
            err,
            RulesError::Frequency {
                line: 4,
                frequency: 0
            }
        );
        let err = AggregationRules::parse("a.b (60) = median a.*").expect_err("method");
        assert!(
            err.to_string()
                .starts_with("line 1: invalid aggregation method"),
            "{err}"
        );
        let err = AggregationRules::parse("\na.b (60) = sum a.(").expect_err("regex");
        assert!(matches!(err, RulesError::Rule { line: 2, .. }), "{err}");
        let ok = AggregationRules::parse("a.b (60) = p999 a.*\n").expect("parses");
        assert_eq!(ok.rules[0].method, AggregationMethod::Percentile(999));
        assert_eq!(ok.rules[0].frequency, 60);
        assert!(ok.warnings().is_empty());
    }

    /// carbon starts on these; each is warned about with its line and what carbon does.
    #[test]
    fn templates_carbon_fails_on_are_warnings_not_errors() {
        let rules = AggregationRules::parse(
            "# c\n\
             a.<x>.sum (60) = sum a.<x>.*\n\
             apps.<team>.<<path>>.rollup (60) = avg apps.<team>.<<path>>.*.count\n\
             b.<y> (60) = sum b.<x>\n\
             c.%d (60) = sum c.<x>\n\
             d.100% (60) = sum d.<x>\n\
             e.%s (60) = sum e.<x>\n\
             f.%(x)c (60) = sum f.<x>\n",
        )
        .expect("carbon starts on every one of them");
        let warnings = rules.warnings();
        let lines: Vec<usize> = warnings.iter().map(|w| w.line).collect();
        assert_eq!(lines, vec![3, 4, 5, 6, 7, 8]);
        assert!(
            warnings[0].effect.contains("KeyError"),
            "{}",
            warnings[0].effect
        );
        assert!(warnings[0].effect.contains("stops at this rule"));
        assert!(
            warnings[2].effect.contains("TypeError") && warnings[2].effect.contains("never yields")
        );
        assert!(warnings[3].effect.contains("ValueError"));
        assert!(warnings[4].effect.contains("white space"));
        assert!(warnings[5].effect.contains("one character"));
        let mut outputs = Vec::new();
        let mut scratch = ResolveScratch::default();
        let mut walk = |name: &str, outputs: &mut Vec<(usize, String)>| {
            rules.for_each_output(name, &mut scratch, |i, o| outputs.push((i, o.to_owned())))
        };
        let failures = walk("apps.t.a.b.h.count", &mut outputs);
        assert_eq!((outputs.len(), failures.stopped), (0, Some(1)));
        let failures = walk("a.q.r", &mut outputs);
        assert_eq!(failures, Failures::default());
        assert_eq!(outputs, vec![(0, "a.q.sum".to_owned())]);
        let failures = walk("c.q", &mut Vec::new());
        assert_eq!(failures.skipped, Some(3));
    }
}
