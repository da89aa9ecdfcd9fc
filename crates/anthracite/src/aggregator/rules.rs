//! An `aggregation-rules.conf` as the aggregator uses it: the router's translation of each
//! rule ([`AggregationRule`]) with its method and frequency checked.

use std::ops::ControlFlow;
use std::sync::Arc;

use super::method::AggregationMethod;
use crate::pattern::PatternSet;
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
}

/// The rules of one aggregation-rules file, in file order.
#[derive(Debug, Clone)]
pub struct AggregationRules {
    /// The rules in file order (the order carbon tries them in).
    pub rules: Vec<Rule>,
    /// The rules' input patterns in one automaton: a new name costs one scan to find the
    /// rules it matches, and only those run their captures.
    set: Arc<PatternSet>,
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
            });
        }
        Ok(Self::new(rules))
    }

    fn new(rules: Vec<Rule>) -> Self {
        let set = PatternSet::new(rules.iter().map(|r| r.rule.pattern().clone()).collect());
        Self {
            rules,
            set: Arc::new(set),
        }
    }

    /// Calls `f` with the position and output name of every rule `name` matches, in file
    /// order (one scan of the automaton; captures only for the rules that match).
    pub fn for_each_output(&self, name: &str, mut f: impl FnMut(usize, String)) {
        self.set.for_each_match(name.as_bytes(), |i| {
            if let Some(output) = self.rules.get(i).and_then(|r| r.rule.aggregate_name(name)) {
                f(i, output);
            }
            ControlFlow::Continue(())
        });
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
    }
}
