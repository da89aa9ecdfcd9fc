//! carbon's relay rules (`RELAY_METHOD = rules`, `relay-rules.conf`), compiled once.
//!
//! Mirrors `carbon.routers.RelayRulesRouter.getDestinations` and `carbon.relayrules`: rules are
//! tried in order, a pattern rule matches when its regex *searches* the name (compiled with
//! `re.I`, so case-insensitively; Python-only syntax such as look-ahead goes through
//! [`Pattern`]'s backtracking fallback), the single default rule always comes last whatever its
//! position in the file, a match yields the rule's destinations and stops unless the rule has
//! `continue = true`. Destinations yielded by several matching rules are yielded each time (carbon
//! then sends the datapoint that many times).

use crate::pattern::Pattern;

use super::{RouterError, RuleSpec};

/// One compiled rule.
#[derive(Clone, Debug)]
struct Rule {
    /// `None` for the default rule.
    regex: Option<Pattern>,
    destinations: Vec<u16>,
    continue_matching: bool,
}

/// The compiled rule table, default rule last.
#[derive(Clone, Debug)]
pub struct Rules {
    rules: Vec<Rule>,
}

impl Rules {
    /// Compiles `specs`, checking every destination index against `destination_count`.
    pub fn new(specs: &[RuleSpec], destination_count: usize) -> Result<Self, RouterError> {
        let defaults = specs.iter().filter(|r| r.pattern.is_none()).count();
        if defaults != 1 {
            return Err(RouterError::DefaultRuleCount(defaults));
        }
        let mut rules = Vec::with_capacity(specs.len());
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
                regex: spec.pattern.clone(),
                destinations: spec.destinations.clone(),
                continue_matching: spec.continue_matching,
            };
            if rule.regex.is_none() {
                default = Some(rule);
            } else {
                rules.push(rule);
            }
        }
        rules.extend(default);
        Ok(Self { rules })
    }

    /// Appends the destinations carbon yields for `name` to `out`.
    pub fn route_into(&self, name: &[u8], out: &mut Vec<u16>) {
        for rule in &self.rules {
            let matches = rule.regex.as_ref().is_none_or(|r| r.is_match(name));
            if matches {
                out.extend_from_slice(&rule.destinations);
                if !rule.continue_matching {
                    return;
                }
            }
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
