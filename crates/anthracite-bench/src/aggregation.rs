//! `[aggregation]`: carbon aggregation rules generated over the name set, rendered for
//! anthracite (`{aggregation_toml}`), carbon-aggregator.py (`{aggregation_rules}`,
//! `{carbon_aggregator_settings}`) and carbon-c-relay (`aggregate` statements in
//! `{c_relay_routes}`) from one description, so every relay of a `--compare` computes the
//! same outputs.
//!
//! The names are `host-HHHH.<metric>` with 100 metrics per host ([`crate::generator::name`]).
//! The `rules` rules come in groups of `rules_per_datapoint`; group `g` of `G = rules /
//! rules_per_datapoint` matches the metrics `m` with `m mod G = g` (all 100 metrics are
//! covered, so every datapoint matches exactly `rules_per_datapoint` rules), and every rule of
//! a group has its own output: `agg.<key>.<label>[.r<j>]`, where `<key>` is the host number
//! (`hosts_per_output = 1`), or its digits but the last one or two (10 or 100 hosts per
//! output), `<label>` the metric path when the group has one metric, else `g<g>`, and `.r<j>`
//! the rule's place in its group when groups have more than one rule. Rule `r` takes method
//! `methods[r mod len]`. With the defaults (100 rules, one per datapoint, 10 hosts per output)
//! rule `m` is `agg.<hg>.<metric> (60) = <method> host-<hg>\d.<metric>`.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::generator;
use super::scenario::Names;

/// carbon 1.1.10's methods, in the order `methods = ["all"]` expands to.
pub const ALL_METHODS: [&str; 12] = [
    "sum", "avg", "min", "max", "count", "p50", "p75", "p80", "p90", "p95", "p99", "p999",
];

/// Metrics per host in the generated names.
const METRICS: usize = 100;

/// carbon's methods that keep a running value (no value stored per datapoint).
pub const RUNNING_METHODS: [&str; 5] = ["sum", "avg", "min", "max", "count"];

/// carbon's percentile methods (every value of an interval kept, sorted per emission).
pub const PERCENTILE_METHODS: [&str; 7] = ["p50", "p75", "p80", "p90", "p95", "p99", "p999"];

/// The methods of a point of an aggregation sweep (`[sweep] methods`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MethodSet {
    /// The scenario's `[aggregation] methods`.
    #[default]
    Scenario,
    /// sum, avg, min, max, count.
    Running,
    /// p50 … p999.
    Percentile,
    /// All twelve.
    All,
}

impl MethodSet {
    /// `"running"`, `"percentile"` or `"all"`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "running" => Some(Self::Running),
            "percentile" => Some(Self::Percentile),
            "all" => Some(Self::All),
            _ => None,
        }
    }

    /// The methods, `None` for the scenario's own.
    pub fn methods(self) -> Option<Vec<String>> {
        let m: &[&str] = match self {
            Self::Scenario => return None,
            Self::Running => &RUNNING_METHODS,
            Self::Percentile => &PERCENTILE_METHODS,
            Self::All => &ALL_METHODS,
        };
        Some(m.iter().map(|&m| m.to_owned()).collect())
    }

    /// Its name in tables and legends.
    pub fn label(self) -> &'static str {
        match self {
            Self::Scenario => "scenario's methods",
            Self::Running => "running-value methods",
            Self::Percentile => "percentiles",
            Self::All => "all twelve methods",
        }
    }
}

/// `[aggregation]` of a scenario. See the module documentation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Aggregation {
    /// Rules in all (a multiple of `rules_per_datapoint`, at most 100 groups). Default 100.
    pub rules: usize,
    /// Rules every datapoint matches (the size of a group). Default 1.
    pub rules_per_datapoint: usize,
    /// Hosts one output series aggregates: 1, 10 or 100. Default 10.
    pub hosts_per_output: usize,
    /// Seconds per interval. Default 60.
    pub frequency: u64,
    /// carbon's `WRITE_BACK_FREQUENCY` in seconds; 0 (default): each rule's frequency.
    pub write_back_secs: u64,
    /// Methods, assigned to the rules in turn; `["all"]` is carbon's twelve. Default
    /// `["sum", "avg", "p95"]`.
    pub methods: Vec<String>,
    /// Pass the originals on as well (`FORWARD_ALL`). Default true.
    pub forward_all: bool,
}

impl Default for Aggregation {
    fn default() -> Self {
        Self {
            rules: 100,
            rules_per_datapoint: 1,
            hosts_per_output: 10,
            frequency: 60,
            write_back_secs: 0,
            methods: vec!["sum".into(), "avg".into(), "p95".into()],
            forward_all: true,
        }
    }
}

/// One generated rule, before it is written for a relay.
struct Rule {
    /// Metric paths (after the host) it matches.
    metrics: Vec<String>,
    /// `<label>[.r<j>]` of its output.
    label: String,
    method: String,
}

impl Aggregation {
    /// Checks the shape; `Err` says which key is wrong.
    pub fn check(&self) -> Result<(), String> {
        let k = self.rules_per_datapoint;
        if k == 0 || self.rules == 0 || !self.rules.is_multiple_of(k) || self.rules / k > METRICS {
            return Err("aggregation.rules must be a positive multiple of aggregation.rules_per_datapoint, in at most 100 groups".into());
        }
        if ![1, 10, 100].contains(&self.hosts_per_output) {
            return Err("aggregation.hosts_per_output must be 1, 10 or 100".into());
        }
        if self.frequency == 0 {
            return Err("aggregation.frequency must be positive".into());
        }
        if self.methods().is_empty() {
            return Err("aggregation.methods must name at least one method".into());
        }
        if let Some(m) = self.methods().iter().find(|m| !ALL_METHODS.contains(m)) {
            return Err(format!("aggregation.methods: unknown method {m:?}"));
        }
        Ok(())
    }

    /// The methods, `"all"` expanded.
    pub fn methods(&self) -> Vec<&str> {
        self.methods
            .iter()
            .flat_map(|m| {
                if m == "all" {
                    ALL_METHODS.to_vec()
                } else {
                    vec![m.as_str()]
                }
            })
            .collect()
    }

    /// True when no method keeps every value (only sum, avg, min, max, count).
    pub fn running_values_only(&self) -> bool {
        self.methods().iter().all(|m| !m.starts_with('p'))
    }

    fn generated(&self, names: &Names) -> Vec<Rule> {
        let k = self.rules_per_datapoint.max(1);
        let groups = (self.rules / k).max(1);
        let methods = self.methods();
        let metric_of = |m: usize| {
            let name = generator::name(names, m);
            let host = format!("{}host-{:04}.", names.prefix, 0);
            name.strip_prefix(&host).unwrap_or(&name).to_owned()
        };
        (0..self.rules)
            .map(|r| {
                let (g, j) = (r / k, r % k);
                let metrics: Vec<String> = (0..METRICS)
                    .filter(|m| m % groups == g)
                    .map(metric_of)
                    .collect();
                let mut label = if metrics.len() == 1 {
                    metrics[0].clone()
                } else {
                    format!("g{g}")
                };
                if k > 1 {
                    let _ = write!(label, ".r{j}");
                }
                Rule {
                    metrics,
                    label,
                    method: methods
                        .get(r % methods.len().max(1))
                        .copied()
                        .unwrap_or("sum")
                        .to_owned(),
                }
            })
            .collect()
    }

    /// The carbon rules (`aggregation-rules.conf` lines) for names shaped by `names`.
    pub fn rules(&self, names: &Names) -> Vec<String> {
        let (field, rest) = match self.hosts_per_output {
            1 => ("<h>", ""),
            100 => ("<hg>", "\\d\\d"),
            _ => ("<hg>", "\\d"),
        };
        self.generated(names)
            .iter()
            .map(|r| {
                format!(
                    "agg.{field}.{} ({}) = {} {}host-{field}{rest}.{}",
                    r.label,
                    self.frequency,
                    r.method,
                    names.prefix,
                    alternation(&r.metrics, "."),
                )
            })
            .collect()
    }

    /// The `[aggregation]` section of anthracite's `relay.toml` with the generated rules.
    pub fn anthracite_toml(&self, names: &Names) -> String {
        let rules: Vec<String> = self.rules(names).iter().map(|r| format!("{r:?}")).collect();
        format!(
            "[aggregation]\nforward_all = {}\nwrite_back_frequency_secs = {}\nrules = [{}]\n",
            self.forward_all,
            self.write_back_secs,
            rules.join(", ")
        )
    }

    /// `aggregation-rules.conf` text: the carbon rules, one per line.
    pub fn carbon_rules_file(&self, names: &Names) -> String {
        let mut t = String::new();
        for r in self.rules(names) {
            t.push_str(&r);
            t.push('\n');
        }
        t
    }

    /// carbon-aggregator.py's settings (`{carbon_aggregator_settings}`): `FORWARD_ALL` and
    /// `WRITE_BACK_FREQUENCY` (left out, carbon's `None`, when 0).
    pub fn carbon_settings(&self) -> String {
        let mut t = format!(
            "FORWARD_ALL = {}\n",
            if self.forward_all { "True" } else { "False" }
        );
        if self.write_back_secs > 0 {
            let _ = writeln!(t, "WRITE_BACK_FREQUENCY = {}", self.write_back_secs);
        }
        t
    }

    /// carbon-c-relay `aggregate` statements computing what the carbon rules compute: the
    /// key field becomes a capture group, written back with `\1`; intervals expire after two
    /// frequencies. carbon-c-relay has no `p999` (its percentiles are whole numbers): `p999`
    /// is written `percentile99`. Without `forward_all` the originals go nowhere: the
    /// returned `match` statements (to put after the aggregates) send the outputs, which
    /// carbon-c-relay routes like any metric, to `cluster` and the rest to the blackhole.
    pub fn c_relay(&self, names: &Names, cluster: &str) -> (String, String) {
        let key = match self.hosts_per_output {
            1 => "([0-9]+)",
            100 => "([0-9]+)[0-9][0-9]",
            _ => "([0-9]+)[0-9]",
        };
        let mut t = String::new();
        for r in self.generated(names) {
            let compute = match r.method.as_str() {
                "avg" => "average".to_owned(),
                "p999" => "percentile99".to_owned(),
                p if p.starts_with('p') => format!("percentile{}", &p[1..]),
                other => other.to_owned(),
            };
            let _ = write!(
                t,
                "aggregate ^{}host-{key}\\.{}$\n    every {f} seconds\n    \
                 expire after {e} seconds\n    compute {compute} write to agg.\\1.{}\n    ;\n",
                regex_escape(&names.prefix),
                alternation(&r.metrics, "\\."),
                r.label,
                f = self.frequency,
                e = self.frequency * 2,
            );
        }
        let routes = if self.forward_all {
            String::new()
        } else {
            format!(
                "match ^agg\\.\n    send to {cluster}\n    stop\n    ;\n\
                 match *\n    send to blackhole\n    stop\n    ;\n"
            )
        };
        (t, routes)
    }

    /// The input names that make about `series` output series with these rules (whole
    /// hosts, at least one).
    pub fn names_for_series(&self, series: usize) -> usize {
        let hosts = (series * self.hosts_per_output.max(1)).div_ceil(self.rules.max(1));
        hosts.max(1) * METRICS
    }

    /// The output series the rules make of the first `count` names (whole hosts: every
    /// rule has one output per key).
    pub fn expected_series(&self, count: usize) -> usize {
        let hosts = count.div_ceil(METRICS);
        hosts.div_ceil(self.hosts_per_output.max(1)) * self.rules
    }
}

/// `m1` or `(m1|m2|…)` with the dots of each written as `dot`.
fn alternation(metrics: &[String], dot: &str) -> String {
    let written: Vec<String> = metrics.iter().map(|m| m.replace('.', dot)).collect();
    if written.len() == 1 {
        written.join("")
    } else {
        format!("({})", written.join("|"))
    }
}

/// `s` with POSIX ERE and Python `re` metacharacters escaped.
pub fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.^$|?*+()[]{}".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn names() -> Names {
        Names::default()
    }

    #[test]
    fn the_defaults_are_one_rule_per_metric_over_ten_hosts() {
        let a = Aggregation::default();
        a.check().expect("valid");
        let rules = a.rules(&names());
        assert_eq!(rules.len(), 100);
        assert_eq!(
            rules[0],
            "agg.<hg>.cpu.0.user (60) = sum host-<hg>\\d.cpu.0.user"
        );
        assert_eq!(a.expected_series(100_000), 10_000);
    }

    #[test]
    fn groups_match_every_metric_k_times_with_an_output_each() {
        let a = Aggregation {
            rules: 100,
            rules_per_datapoint: 4,
            hosts_per_output: 1,
            methods: vec!["all".into()],
            ..Aggregation::default()
        };
        a.check().expect("valid");
        let rules = a.rules(&names());
        let parsed = anthracite::unstable::aggregator::AggregationRules::from_lines(&rules)
            .expect("the relay parses them");
        let mut outputs = HashSet::new();
        for i in 0..20_000 {
            let name = generator::name(&names(), i);
            let hits: Vec<String> = parsed
                .rules
                .iter()
                .filter_map(|r| r.rule.aggregate_name(&name))
                .collect();
            assert_eq!(hits.len(), 4, "{name}: {hits:?}");
            outputs.extend(hits);
        }
        assert_eq!(outputs.len(), a.expected_series(20_000));
        assert_eq!(outputs.len(), 20_000);
        assert!(rules[1].contains("= avg host-<h>.("), "{}", rules[1]);
        let (c, routes) = Aggregation {
            forward_all: false,
            ..a.clone()
        }
        .c_relay(&names(), "bench");
        assert_eq!(c.matches("aggregate ").count(), 100);
        assert!(
            c.contains("compute percentile99 write to agg.\\1.g2.r3\n"),
            "{c}"
        );
        assert!(routes.contains("send to blackhole"));
        assert!(a.carbon_settings().contains("FORWARD_ALL = True"));
        assert!(!a.running_values_only());
    }
}
