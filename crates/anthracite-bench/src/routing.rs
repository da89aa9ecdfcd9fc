//! `[routing]`: how the relay under test routes, rendered for anthracite (`{router_toml}`) and
//! carbon-c-relay (`{c_relay_routes}`) from one description, so both relays of a `--compare`
//! do the same work at every point of a cost sweep.
//!
//! `rules = N` generates N regex rules over the generated names (see [`rule_pattern`]): rule
//! `r` matches the hosts whose number starts with `r` (zero-padded to the digits of `N − 1`),
//! the literal-prefix shape most routing rules have (`^servers\.web`), which carbon-c-relay
//! also recognises and matches without its regex engine. Host numbers have four digits or more,
//! so with N = 10, 100 or 1,000 every name matches exactly one rule; with other N the names of
//! the remaining hosts fall through every rule to the default. Hosts 10000–29999 (two thirds
//! of a 3M-name set) start with 1 or 2, so a first-match router tries about 0.3 N rules per
//! new name rather than N / 2. Rule `r` sends to sink `r mod sinks`, the default rule to sink
//! 0. `rules = 0` is consistent hashing (`carbon_ch`) with `replication` copies of each
//! datapoint.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::aggregation::regex_escape;
use super::scenario::{Aggregation, Names};

/// `[routing]` of a scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Routing {
    /// Regex rules (`method = "rules"`); 0 routes by consistent hashing. Default 0.
    pub rules: usize,
    /// Copies of each datapoint under consistent hashing (`replication_factor`). Default 1.
    pub replication: usize,
}

impl Default for Routing {
    fn default() -> Self {
        Self {
            rules: 0,
            replication: 1,
        }
    }
}

impl Routing {
    /// Datapoints the sinks receive per datapoint sent (aggregates aside).
    pub fn copies(&self) -> u64 {
        if self.rules > 0 {
            1
        } else {
            self.replication as u64
        }
    }

    /// Whether this is the harness's default routing (carbon_ch, one copy), the only one whose
    /// per-sink placement the harness predicts.
    pub fn is_plain_ring(&self) -> bool {
        self.rules == 0 && self.replication == 1
    }

    /// The `[router]` section (and `[[rules]]` tables) of anthracite's `relay.toml`, for sinks
    /// named by `servers` (`"127.0.0.1:PORT:a"` TOML strings).
    pub fn anthracite_toml(&self, servers: &[String], names: &Names) -> String {
        let mut t = String::new();
        if self.rules == 0 {
            // Not diverse: every sink is on 127.0.0.1, and carbon's diverse replicas put one
            // copy per host; carbon-c-relay's `carbon_ch replication N` has no such rule.
            let _ = write!(
                t,
                "[router]\nmethod = \"consistent-hashing\"\nhash_type = \"carbon_ch\"\n\
                 replication_factor = {}\ndiverse_replicas = false\n",
                self.replication
            );
            return t;
        }
        t.push_str("[router]\nmethod = \"rules\"\n");
        for r in 0..self.rules {
            let _ = write!(
                t,
                "[[rules]]\npattern = '{}'\ndestinations = [{}]\n",
                rule_pattern(names, self.rules, r),
                sink_of(servers, r)
            );
        }
        let _ = write!(
            t,
            "[[rules]]\ndefault = true\ndestinations = [{}]\n",
            sink_of(servers, 0)
        );
        t
    }

    /// carbon-c-relay's clusters and `match` statements (with `aggregate` statements first
    /// when the scenario aggregates), for sinks `c_relay_servers` (`"127.0.0.1:PORT=a"`).
    pub fn c_relay_conf(
        &self,
        c_relay_servers: &[String],
        names: &Names,
        aggregation: Option<&Aggregation>,
    ) -> String {
        let mut t = String::new();
        if self.rules == 0 {
            let _ = write!(
                t,
                "cluster bench\n    carbon_ch replication {}\n        {}\n    ;\n",
                self.replication,
                c_relay_servers.join(" ")
            );
        } else {
            for (i, s) in c_relay_servers.iter().enumerate() {
                // A forward cluster takes a bare host:port.
                let addr = s.split('=').next().unwrap_or(s);
                let _ = write!(t, "cluster sink{i}\n    forward {addr}\n    ;\n");
            }
        }
        if let Some(a) = aggregation {
            let cluster = if self.rules == 0 { "bench" } else { "sink0" };
            let (aggregates, routes) = a.c_relay(names, cluster);
            t.push_str(&aggregates);
            t.push_str(&routes);
        }
        if self.rules == 0 {
            t.push_str("match *\n    send to bench\n    stop\n    ;\n");
        } else {
            let sinks = c_relay_servers.len().max(1);
            for r in 0..self.rules {
                let _ = write!(
                    t,
                    "match {}\n    send to sink{}\n    stop\n    ;\n",
                    rule_pattern(names, self.rules, r),
                    r % sinks
                );
            }
            t.push_str("match *\n    send to sink0\n    stop\n    ;\n");
        }
        t
    }
}

/// The TOML string of the sink rule `r` sends to.
fn sink_of(servers: &[String], r: usize) -> String {
    if servers.is_empty() {
        return String::new();
    }
    servers[r % servers.len()].clone()
}

/// Pattern of rule `r` of `rules`: `^<prefix>host-<r>`, `r` zero-padded to the digits of
/// `rules − 1` (POSIX ERE and Python `re` alike, so both relays take it as is).
pub fn rule_pattern(names: &Names, rules: usize, r: usize) -> String {
    let digits = (rules.saturating_sub(1)).max(1).ilog10() as usize + 1;
    format!("^{}host-{r:0digits$}", regex_escape(&names.prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Names {
        Names::default()
    }

    #[test]
    fn every_name_matches_exactly_one_rule_at_powers_of_ten() {
        for rules in [10, 100, 1000] {
            let patterns: Vec<regex::Regex> = (0..rules)
                .map(|r| regex::Regex::new(&rule_pattern(&names(), rules, r)).unwrap())
                .collect();
            for i in (0..3_000_000).step_by(997) {
                let n = super::super::generator::name(&names(), i);
                let hits: Vec<usize> = patterns
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.is_match(&n))
                    .map(|(r, _)| r)
                    .collect();
                let digits = rules.ilog10() as usize;
                let want: usize = format!("{:04}", i / 100)[..digits].parse().unwrap();
                assert_eq!(hits, vec![want], "{n} under {rules} rules");
            }
        }
    }

    #[test]
    fn three_hundred_rules_leave_the_other_hosts_to_the_default() {
        let p = |r| regex::Regex::new(&rule_pattern(&names(), 300, r)).unwrap();
        assert!(p(7).is_match("host-0071.cpu.0.user"));
        assert!(p(123).is_match("host-12345.cpu.0.user"));
        assert!(!(0..300).any(|r| p(r).is_match("host-3001.cpu.0.user")));
    }

    #[test]
    fn rules_render_for_both_relays_alike() {
        let servers = [
            "\"127.0.0.1:1:a\"".to_owned(),
            "\"127.0.0.1:2:b\"".to_owned(),
        ];
        let c = ["127.0.0.1:1=a".to_owned(), "127.0.0.1:2=b".to_owned()];
        let r = Routing {
            rules: 3,
            replication: 1,
        };
        let toml = r.anthracite_toml(&servers, &names());
        assert_eq!(toml.matches("[[rules]]").count(), 4);
        assert!(toml.contains("pattern = '^host-2'\ndestinations = [\"127.0.0.1:1:a\"]"));
        let parsed: toml::Value = toml::from_str(&toml).unwrap();
        assert_eq!(parsed["rules"].as_array().unwrap().len(), 4);
        let conf = r.c_relay_conf(&c, &names(), None);
        assert!(conf.contains("cluster sink1\n    forward 127.0.0.1:2\n"));
        assert!(conf.contains("match ^host-1\n    send to sink1\n"));
        assert!(conf.ends_with("match *\n    send to sink0\n    stop\n    ;\n"));

        let ring = Routing {
            rules: 0,
            replication: 2,
        };
        assert!(
            ring.anthracite_toml(&servers, &names())
                .contains("replication_factor = 2")
        );
        assert!(
            ring.c_relay_conf(&c, &names(), None)
                .contains("carbon_ch replication 2\n")
        );
        assert_eq!(ring.copies(), 2);
    }
}
