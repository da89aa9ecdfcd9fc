//! carbon's relay rules (`RELAY_METHOD = rules`, `relay-rules.conf`), compiled once.
//!
//! Mirrors `carbon.routers.RelayRulesRouter.getDestinations` and `carbon.relayrules`: rules are
//! tried in order, a pattern rule matches when its regex *searches* the name (compiled with
//! `re.I`, so case-insensitively; Python-only syntax such as look-ahead goes through
//! [`Pattern`]'s backtracking fallback), the single default rule always comes last whatever its
//! position in the file, a match yields the rule's destinations and stops unless the rule has
//! `continue = true`. Destinations yielded by several matching rules are yielded each time (carbon
//! then sends the datapoint that many times).

//!
//! The patterns are matched in one pass ([`PatternSet`]): one automaton reports every linear
//! rule matching a name, and the rules are walked in that order; a Python-only pattern is
//! tried only when its turn comes before the walk has stopped.

use std::ops::ControlFlow;

use crate::pattern::PatternSet;

use super::{RouterError, RuleSpec};

/// What one rule yields.
#[derive(Clone, Debug)]
struct Rule {
    destinations: Vec<u16>,
    continue_matching: bool,
}

/// The compiled rule table.
#[derive(Clone, Debug)]
pub struct Rules {
    /// The pattern rules, in order; `patterns` holds their regexes at the same positions.
    rules: Vec<Rule>,
    patterns: PatternSet,
    /// The default rule, always last.
    default: Rule,
}

impl Rules {
    /// Compiles `specs`, checking every destination index against `destination_count`.
    pub fn new(specs: &[RuleSpec], destination_count: usize) -> Result<Self, RouterError> {
        let defaults = specs.iter().filter(|r| r.pattern.is_none()).count();
        if defaults != 1 {
            return Err(RouterError::DefaultRuleCount(defaults));
        }
        let mut rules = Vec::with_capacity(specs.len());
        let mut patterns = Vec::with_capacity(specs.len());
        let mut default = None;
        for (position, spec) in specs.iter().enumerate() {
            if let Some(&bad) = spec
                .destinations
                .iter()
                .find(|&&d| usize::from(d) >= destination_count)
            {
                return Err(RouterError::RuleDestination {
                    rule: position,
                    index: bad,
                });
            }
            let rule = Rule {
                destinations: spec.destinations.clone(),
                continue_matching: spec.continue_matching,
            };
            match &spec.pattern {
                Some(pattern) => {
                    rules.push(rule);
                    patterns.push(pattern.clone());
                }
                None => default = Some(rule),
            }
        }
        let default = default.ok_or(RouterError::DefaultRuleCount(0))?;
        Ok(Self {
            rules,
            patterns: PatternSet::new(patterns),
            default,
        })
    }

    /// Appends the destinations carbon yields for `name` to `out`.
    pub fn route_into(&self, name: &[u8], out: &mut Vec<u16>) {
        let mut stopped = false;
        self.patterns.for_each_match(name, |i| {
            let rule = &self.rules[i];
            out.extend_from_slice(&rule.destinations);
            if rule.continue_matching {
                ControlFlow::Continue(())
            } else {
                stopped = true;
                ControlFlow::Break(())
            }
        });
        if !stopped {
            out.extend_from_slice(&self.default.destinations);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(pattern: Option<&str>, destinations: &[u16], continue_matching: bool) -> RuleSpec {
        RuleSpec {
            pattern: pattern.map(|p| RuleSpec::compile(p).expect("valid pattern")),
            destinations: destinations.to_vec(),
            continue_matching,
        }
    }

    fn route(rules: &Rules, name: &str) -> Vec<u16> {
        let mut out = Vec::new();
        rules.route_into(name.as_bytes(), &mut out);
        out
    }

    #[test]
    fn default_rule_is_last_wherever_written() {
        let rules = Rules::new(
            &[rule(None, &[0], false), rule(Some("^cpu\\."), &[1], false)],
            2,
        )
        .unwrap();
        assert_eq!(route(&rules, "cpu.load"), vec![1]);
        assert_eq!(route(&rules, "mem.free"), vec![0]);
    }

    #[test]
    fn search_is_unanchored_and_case_insensitive() {
        let rules = Rules::new(
            &[rule(Some("load"), &[1], false), rule(None, &[0], false)],
            2,
        )
        .unwrap();
        assert_eq!(route(&rules, "host.cpu.LOAD.avg"), vec![1]);
    }

    #[test]
    fn python_look_ahead_pattern_routes_like_carbon() {
        let rules = Rules::new(
            &[
                rule(Some(r"^servers\.(?!db\d)"), &[1], false),
                rule(None, &[0], false),
            ],
            2,
        )
        .unwrap();
        assert_eq!(route(&rules, "servers.web1.cpu"), vec![1]);
        assert_eq!(route(&rules, "SERVERS.DB1.cpu"), vec![0]);
        assert_eq!(route(&rules, "servers.dbx.cpu"), vec![1]);
    }

    #[test]
    fn continue_matching_yields_duplicates_like_carbon() {
        let rules = Rules::new(
            &[
                rule(Some("a"), &[0, 1], true),
                rule(Some("b"), &[1], true),
                rule(None, &[1], false),
            ],
            2,
        )
        .unwrap();
        assert_eq!(route(&rules, "ab"), vec![0, 1, 1, 1]);
        assert_eq!(route(&rules, "z"), vec![1]);
    }

    #[test]
    fn rules_in_one_pass_route_like_one_at_a_time_with_continue_and_look_ahead() {
        // A table mixing linear and Python-only patterns, `continue` and case: every name
        // routes as the rules tried one by one in order would route it.
        let specs = [
            rule(Some(r"^a\."), &[0], true),
            rule(Some(r"^(?!a\.b)a"), &[1], false),
            rule(Some("B"), &[2], true),
            rule(Some(r"^(\w)\1"), &[3], false),
            rule(Some("c$"), &[4], false),
            rule(None, &[5], false),
        ];
        let rules = Rules::new(&specs, 6).unwrap();
        assert!(rules.patterns.is_combined());
        for name in [
            "a.x", "a.b", "A.B.c", "bbc", "xbc", "zz", "q", "a.bc", "aab",
        ] {
            let mut want = Vec::new();
            let mut stopped = false;
            for spec in &specs[..5] {
                let p = spec.pattern.as_ref().unwrap();
                if p.is_match(name.as_bytes()) {
                    want.extend_from_slice(&spec.destinations);
                    if !spec.continue_matching {
                        stopped = true;
                        break;
                    }
                }
            }
            if !stopped {
                want.push(5);
            }
            assert_eq!(route(&rules, name), want, "{name}");
        }
    }

    #[test]
    fn config_errors_name_the_problem() {
        assert!(matches!(
            Rules::new(&[rule(Some("a"), &[0], false)], 1),
            Err(RouterError::DefaultRuleCount(0))
        ));
        assert!(matches!(
            Rules::new(&[rule(None, &[0], false), rule(None, &[0], false)], 1),
            Err(RouterError::DefaultRuleCount(2))
        ));
        let err = RuleSpec::compile("(unclosed").unwrap_err();
        assert!(err.to_string().contains("(unclosed"), "{err}");
        assert!(matches!(
            Rules::new(&[rule(None, &[3], false)], 1),
            Err(RouterError::RuleDestination { rule: 0, index: 3 })
        ));
    }
}
