//! carbon's aggregation rules as the aggregated routers use them
//! (`aggregated-consistent-hashing`, `fast-aggregated-hashing`, `aggregation-rules.conf`).
//!
//! Mirrors `carbon.aggregator.rules` 1.1.10: a line is
//! `output_template (frequency) = method input_pattern`; the input pattern is split on `.` and
//! each part translated — `<<name>>` → `(?P<name>.+?)`, `<name>` → `(?P<name>[^.]+?)` (text
//! around the brackets kept as regex, Python-only syntax through [`Pattern`]'s backtracking
//! fallback), a lone `*` → `[^.]+`, any other `*` → `[^.]*` — joined with
//! `\.`, anchored at the start (`re.match`) and ending in `$`. A name that matches is resolved
//! to the template with each `<name>` replaced by the captured text.
//!
//! The router ([`super::Strategy::Aggregated`]) routes every resolved name through the hashing
//! router, or the metric's own name when no rule matches, and yields the union of the
//! destinations; the datapoint itself keeps its original name.

use crate::pattern::Pattern;

/// carbon 1.1.10's `AGGREGATION_METHODS`.
pub(crate) const METHODS: [&str; 12] = [
    "sum", "avg", "min", "max", "p50", "p75", "p80", "p90", "p95", "p99", "p999", "count",
];

/// Why a rule line was rejected (carbon refuses to start on these too).
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
    /// The output template is something carbon's `%` formatting would fail on.
    #[error("output template {0:?} uses `%`, `<<`, or a field the input pattern does not capture")]
    Template(String),
}

/// One piece of an output template.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Field(String),
}

/// One compiled rule.
#[derive(Debug, Clone)]
pub struct AggregationRule {
    regex: Pattern,
    template: Vec<Piece>,
    /// The line as written.
    pub source: String,
    /// The method as written (one of [`METHODS`]).
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
        let template = parse_template(output, &regex)
            .ok_or_else(|| AggregationRuleError::Template(output.to_owned()))?;
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

    /// The aggregate name `metric` resolves to, or `None` when the rule does not match.
    pub fn aggregate_name(&self, metric: &str) -> Option<String> {
        let caps = self.regex.captures(metric)?;
        let mut out = String::with_capacity(metric.len());
        for piece in &self.template {
            match piece {
                Piece::Text(t) => out.push_str(t),
                // Python formats an unmatched optional group as `None`; every field here is
                // mandatory in the regex, so a match always has it.
                Piece::Field(f) => out.push_str(caps.name(f).unwrap_or("None")),
            }
        }
        Some(out)
    }
}

/// Splits `<field>` placeholders out of a template; `None` when carbon's `%`-formatting would
/// raise for every matching metric (a literal `%`, `<<`, or an unknown field).
fn parse_template(output: &str, regex: &Pattern) -> Option<Vec<Piece>> {
    if output.contains('%') || output.contains("<<") {
        return None;
    }
    let names: Vec<&str> = regex.group_names().collect();
    let mut pieces = Vec::new();
    let mut rest = output;
    while let Some(i) = rest.find('<') {
        let close = rest[i..].find('>')? + i;
        if i > 0 {
            pieces.push(Piece::Text(rest[..i].to_owned()));
        }
        let field = &rest[i + 1..close];
        if !names.contains(&field) {
            return None;
        }
        pieces.push(Piece::Field(field.to_owned()));
        rest = &rest[close + 1..];
    }
    if rest.contains('>') {
        return None;
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_owned()));
    }
    Some(pieces)
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
        assert!(matches!(
            AggregationRule::parse("a.<y> (60) = sum a.<x>"),
            Err(AggregationRuleError::Template(_))
        ));
        let (line, _) = parse_rules("# c\n\na.b (60) = sum a.*\nbroken\n").expect_err("line 4");
        assert_eq!(line, 4);
    }
}
