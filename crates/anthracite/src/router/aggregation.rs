//! carbon's aggregation rules as the aggregated routers use them
//! (`aggregated-consistent-hashing`, `fast-aggregated-hashing`, `aggregation-rules.conf`).
//!
//! Mirrors `carbon.aggregator.rules` 1.1.10: a line is
//! `output_template (frequency) = method input_pattern`; the input pattern is split on `.` and
//! each part translated — `<<name>>` → `(?P<name>.+?)`, `<name>` → `(?P<name>[^.]+?)` (text
//! around the brackets kept as regex, Python-only syntax through [`Pattern`]'s backtracking
//! fallback), a lone `*` → `[^.]+`, any other `*` → `[^.]*` — joined with
//! `\.`, anchored at the start (`re.match`) and ending in `$`. A name that matches is resolved
//! with the output template, Python's `%` formatting of the match's named groups
//! ([`template`] holds it exactly, failures included).
//!
//! The router ([`super::Strategy::Aggregated`]) routes every resolved name through the hashing
//! router, or the metric's own name when no rule resolves it, and yields the union of the
//! destinations; the datapoint itself keeps its original name. A rule whose formatting raises
//! a `KeyError` or `ValueError` for a name makes carbon-relay drop that datapoint (the
//! exception leaves `getDestinations`); it gets no destination here either.

use crate::pattern::{Captures, Pattern};

mod template;
pub use template::{Template, TemplateFailure};

/// carbon 1.1.10's `AGGREGATION_METHODS`.
pub(crate) const METHODS: [&str; 12] = [
    "sum", "avg", "min", "max", "p50", "p75", "p80", "p90", "p95", "p99", "p999", "count",
];

/// Why a rule line was rejected (carbon refuses to start on these too). An output template is
/// never a reason: carbon starts on any, and fails (or not) per name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AggregationRuleError {
    /// Not `output (frequency) = method input`.
    #[error("{0:?} is not `output_template (frequency) = method input_pattern`")]
    Syntax(String),
    /// Frequency is not an integer.
    #[error("frequency {0:?} is not an integer")]
    Frequency(String),
    /// Unknown aggregation method.
    #[error("invalid aggregation method {0:?} (one of {methods})", methods = METHODS.join(", "))]
    Method(String),
    /// The translated pattern is not a valid regex.
    #[error("input pattern {pattern:?} translates to an invalid regex: {message}")]
    Regex {
        /// The input pattern as written.
        pattern: String,
        /// The regex engine's message.
        message: String,
    },
}

/// What a rule does with a metric name.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// The input pattern does not match.
    NoMatch,
    /// The aggregate name.
    Output(String),
    /// The pattern matches but carbon's formatting of the output raises.
    Failed(TemplateFailure),
}

/// One compiled rule.
#[derive(Debug, Clone)]
pub struct AggregationRule {
    regex: Pattern,
    template: Template,
    /// The line as written.
    pub source: String,
    /// The method as written (one of carbon's twelve: `sum`, `avg`, …, `p999`).
    pub method: &'static str,
    /// The frequency as Python's `int()` reads it.
    pub frequency: i64,
}

/// carbon's `build_regex`: the input pattern as a Python regex (without the `re.match` start
/// anchor, which [`AggregationRule`] adds).
pub(crate) fn input_pattern_regex(input: &str) -> String {
    let parts: Vec<String> = input
        .split('.')
        .map(|part| {
            if let (Some(i), Some(j)) = (part.find("<<"), part.find(">>")) {
                let field = part.get(i + 2..j).unwrap_or_default();
                let post = part.get(j + 2..).unwrap_or_default();
                return format!("{}(?P<{field}>.+?){post}", &part[..i]);
            }
            match (part.find('<'), part.find('>')) {
                (Some(i), Some(j)) if j > i => {
                    format!(
                        "{}(?P<{}>[^.]+?){}",
                        &part[..i],
                        &part[i + 1..j],
                        &part[j + 1..]
                    )
                }
                _ if part == "*" => "[^.]+".to_owned(),
                _ => part.replace('*', "[^.]*"),
            }
        })
        .collect();
    format!("{}$", parts.join("\\."))
}

impl AggregationRule {
    /// Parses one line of `aggregation-rules.conf` (comments and blank lines are the caller's).
    pub fn parse(line: &str) -> Result<Self, AggregationRuleError> {
        let syntax = || AggregationRuleError::Syntax(line.to_owned());
        let (left, right) = line.split_once('=').ok_or_else(syntax)?;
        let left: Vec<&str> = left.split_whitespace().collect();
        let right: Vec<&str> = right.split_whitespace().collect();
        let (&[output, frequency], &[method, input]) = (left.as_slice(), right.as_slice()) else {
            return Err(syntax());
        };
        let freq = frequency.trim_start_matches('(').trim_end_matches(')');
        let Some(freq) = crate::protocol::number::parse_py_int(freq) else {
            return Err(AggregationRuleError::Frequency(frequency.to_owned()));
        };
        let Some(&method) = METHODS.iter().find(|m| **m == method) else {
            return Err(AggregationRuleError::Method(method.to_owned()));
        };
        let pattern = input_pattern_regex(input);
        let regex = Pattern::new(&format!("\\A(?:{pattern})")).map_err(|e| {
            AggregationRuleError::Regex {
                pattern: input.to_owned(),
                message: e.to_string(),
            }
        })?;
        let names: Vec<String> = regex.group_names().map(str::to_owned).collect();
        let template = Template::compile(output, &names);
        Ok(Self {
            regex,
            template,
            source: line.to_owned(),
            method,
            frequency: freq,
        })
    }

    /// The rule's input pattern, as compiled (anchored at the start, ending in `$`).
    pub fn pattern(&self) -> &Pattern {
        &self.regex
    }

    /// The compiled output template.
    pub fn template(&self) -> &Template {
        &self.template
    }

    /// What the rule makes of `metric`: no match, the aggregate name, or carbon's formatting
    /// failure.
    pub fn resolve(&self, metric: &str) -> Resolution {
        self.resolve_captured(metric, self.regex.captures(metric).as_ref())
    }

    /// [`resolve`](Self::resolve) with the captures of this rule's input pattern on `metric`
    /// already found (`None`: no match): rules with the same input pattern share them.
    pub fn resolve_captured(&self, metric: &str, caps: Option<&Captures<'_, '_>>) -> Resolution {
        let Some(caps) = caps else {
            return Resolution::NoMatch;
        };
        let mut out = String::with_capacity(metric.len());
        match self.template.render(|i| caps.named(i), &mut out) {
            Ok(()) => Resolution::Output(out),
            Err(failure) => Resolution::Failed(failure),
        }
    }

    /// The aggregate name `metric` resolves to, or `None` when the rule does not match or its
    /// template fails for it.
    pub fn aggregate_name(&self, metric: &str) -> Option<String> {
        match self.resolve(metric) {
            Resolution::Output(name) => Some(name),
            Resolution::NoMatch | Resolution::Failed(_) => None,
        }
    }

    /// What carbon does with this rule's output template, when that is worth a warning at
    /// load: a formatting failure (with the consequences the caller describes), names that
    /// fail or not by their value, names holding white space. `None` for a template that
    /// formats every name.
    pub fn template_note(&self) -> Option<TemplateNote> {
        if let Some((failure, message)) = self.template.failure() {
            return Some(TemplateNote::Fails {
                failure,
                message: message.to_owned(),
            });
        }
        if self.template.depends_on_the_name() {
            return Some(TemplateNote::FailsForSomeNames);
        }
        self.template
            .may_hold_whitespace()
            .then_some(TemplateNote::WhiteSpace)
    }
}

/// A fact about an output template worth a warning at load (see
/// [`AggregationRule::template_note`]).
#[derive(Debug, Clone, PartialEq)]
pub enum TemplateNote {
    /// Formatting raises for every name the rule matches.
    Fails {
        /// The exception's class.
        failure: TemplateFailure,
        /// Python's message.
        message: String,
    },
    /// `%c`: formatting raises a `TypeError` unless the field is one character.
    FailsForSomeNames,
    /// The names hold white space (`str(groupdict)`, or a padding width).
    WhiteSpace,
}

impl TemplateNote {
    /// What carbon-aggregator does with the rule, in one sentence.
    pub fn aggregator_effect(&self) -> String {
        match self {
            Self::Fails { failure, message } if failure.stops() => format!(
                "carbon's formatting raises {} ({message}) for every name the rule matches: \
                 the datapoint stops at this rule (the rules before it take it, the rules after \
                 it and FORWARD_ALL do not); anthracite does the same and counts it \
                 (anthracite_aggregator_template_failures_total{{effect=\"datapoint_stopped\"}})",
                failure.class()
            ),
            Self::Fails { failure, message } => format!(
                "carbon's formatting raises {} ({message}) for every name the rule matches: the \
                 rule never yields an output; anthracite skips it the same way and counts the \
                 datapoints (anthracite_aggregator_template_failures_total{{effect=\"rule_skipped\"}})",
                failure.class()
            ),
            Self::FailsForSomeNames => "%c formats only fields of one character: for other names \
                 the rule yields nothing (a TypeError in carbon), counted as rule_skipped"
                .to_owned(),
            Self::WhiteSpace => "the output names hold white space (str(groupdict) or a padding \
                 width), as carbon writes them: a plaintext destination splits them"
                .to_owned(),
        }
    }

    /// What carbon-relay's aggregated routers do with the rule, in one sentence.
    pub fn router_effect(&self) -> String {
        match self {
            Self::Fails { failure, message } if failure.stops() => format!(
                "carbon's formatting raises {} ({message}) for every name the rule matches: \
                 carbon-relay drops those datapoints; so does anthracite, counted as \
                 no_destination",
                failure.class()
            ),
            Self::Fails { failure, message } => format!(
                "carbon's formatting raises {} ({message}) for every name the rule matches: the \
                 rule never takes part in routing",
                failure.class()
            ),
            Self::FailsForSomeNames => "%c formats only fields of one character: for other names \
                 the rule takes no part in routing"
                .to_owned(),
            Self::WhiteSpace => "the output names hold white space (str(groupdict) or a padding \
                 width); they are only hashed"
                .to_owned(),
        }
    }
}

/// Parses the text of an `aggregation-rules.conf`: one rule per line, `#` comments and blank
/// lines skipped. Errors carry the 1-based line number.
pub fn parse_rules(text: &str) -> Result<Vec<AggregationRule>, (usize, AggregationRuleError)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(n, l)| AggregationRule::parse(l).map_err(|e| (n, e)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(rule: &str, metric: &str) -> Option<String> {
        AggregationRule::parse(rule)
            .expect("rule parses")
            .aggregate_name(metric)
    }

    /// Expected values produced by carbon 1.1.10's own `AggregationRule` (Python 3.11).
    #[test]
    fn translation_matches_carbon() {
        assert_eq!(
            input_pattern_regex("<env>.applications.<app>.*.requests"),
            "(?P<env>[^.]+?)\\.applications\\.(?P<app>[^.]+?)\\.[^.]+\\.requests$"
        );
        assert_eq!(
            input_pattern_regex("a.<<rest>>x.b*c"),
            "a\\.(?P<rest>.+?)x\\.b[^.]*c$"
        );
        let rule =
            "<env>.applications.<app>.all.requests (60) = sum <env>.applications.<app>.*.requests";
        assert_eq!(
            resolve(rule, "prod.applications.web.host1.requests").as_deref(),
            Some("prod.applications.web.all.requests")
        );
        assert_eq!(resolve(rule, "prod.applications.web.requests"), None);
        // Prefix match only at the start; `$` anchors the end.
        assert_eq!(resolve(rule, "x.prod.applications.web.h.requests.y"), None);
        let deep = "agg.<path>.total (10) = sum stats.<<path>>.count";
        assert_eq!(
            resolve(deep, "stats.a.b.c.count").as_deref(),
            Some("agg.a.b.c.total")
        );
        let pre = "x.<h>.sum (10) = sum host-<h>_cpu.*";
        assert_eq!(
            resolve(pre, "host-web1_cpu.user").as_deref(),
            Some("x.web1.sum")
        );
        assert_eq!(
            resolve("a.b (1) = count a.b*", "a.b").as_deref(),
            Some("a.b")
        );
        // Text around a placeholder is regex: a look-behind there needs the fallback engine.
        let ahead = "agg.<h>.cpu (60) = sum <h>(?<!-canary).cpu.*";
        assert_eq!(
            resolve(ahead, "web1.cpu.user").as_deref(),
            Some("agg.web1.cpu")
        );
        assert_eq!(resolve(ahead, "web1-canary.cpu.user"), None);
    }

    #[test]
    fn bad_rules_are_rejected() {
        assert!(matches!(
            AggregationRule::parse("a.b = sum a.*"),
            Err(AggregationRuleError::Syntax(_))
        ));
        assert!(matches!(
            AggregationRule::parse("a.b (x) = sum a.*"),
            Err(AggregationRuleError::Frequency(_))
        ));
        assert!(matches!(
            AggregationRule::parse("a.b (60) = median a.*"),
            Err(AggregationRuleError::Method(_))
        ));
        let (line, _) = parse_rules("# c\n\na.b (60) = sum a.*\nbroken\n").expect_err("line 4");
        assert_eq!(line, 4);
    }

    /// carbon starts on any output template; what it does per name is the template's.
    #[test]
    fn every_output_template_parses_and_fails_per_name_as_carbon() {
        let rule = AggregationRule::parse("a.<y> (60) = sum a.<x>").expect("carbon starts on it");
        assert_eq!(
            rule.resolve("a.b"),
            Resolution::Failed(TemplateFailure::Key)
        );
        assert_eq!(rule.resolve("b.b"), Resolution::NoMatch);
        let deep = AggregationRule::parse(
            "apps.<team>.<<path>>.rollup (60) = avg apps.<team>.<<path>>.*.count",
        )
        .expect("parses");
        assert_eq!(
            deep.resolve("apps.t.a.b.h.count"),
            Resolution::Failed(TemplateFailure::Key)
        );
        assert!(matches!(
            deep.template_note(),
            Some(TemplateNote::Fails {
                failure: TemplateFailure::Key,
                ..
            })
        ));
        let typed = AggregationRule::parse("a.%d.<x> (60) = sum a.<x>").expect("parses");
        assert_eq!(
            typed.resolve("a.b"),
            Resolution::Failed(TemplateFailure::Type)
        );
        let dict = AggregationRule::parse("all.%s (60) = sum a.<x>").expect("parses");
        assert_eq!(
            dict.aggregate_name("a.b").as_deref(),
            Some("all.{'x': 'b'}")
        );
        assert_eq!(dict.template_note(), Some(TemplateNote::WhiteSpace));
    }
}
