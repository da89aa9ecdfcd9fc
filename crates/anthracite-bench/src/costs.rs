//! `--sweep` over the configuration: how the relay's CPU per datapoint grows with the rule
//! count (`[sweep] rules`), the destination count (`[sweep] destinations`) and the replication
//! factor (`[sweep] replication`, crossed with the destinations), or, for a scenario with
//! `[aggregation]`, with the rules each datapoint matches (`rules_per_datapoint`), the output
//! series (`output_series`) or `WRITE_BACK_FREQUENCY` (`write_back_secs`), each crossed with the
//! method sets of `methods` (running values, percentiles, all). Each point is an ordinary
//! [`run_once`] of the scenario with `[routing]` and `[sinks] count` set for the point; at each
//! point every relay of `--compare` runs in turn, `--rounds` times (A B A B …), so drift on a
//! shared machine hits all of them alike. The figure of a point is the median over its rounds.
//!
//! Two costs are reported: per million datapoints **sent** (what a planner sizes input by) and
//! per million **delivered** (per copy: what replication multiplies). Each point's cost is also
//! given against the relay's own first point (`×1.00` at the smallest configuration), which is
//! the growth the configuration costs, and against the first relay at the same point. An
//! aggregation point that passes nothing on (`forward_all = false`) delivers aggregates only:
//! its cost is per datapoint sent, and the output series delivered are reported.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::BenchError;
use super::aggregation::MethodSet;
use super::args::TargetSpec;
use super::compare::median;
use super::report::{name_width, si};
use super::routing::Routing;
use super::runner::{RunOptions, run_once};
use super::scenario::Scenario;

/// What a cost sweep varies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Axis {
    /// `[routing] rules`.
    #[default]
    Rules,
    /// `[sinks] count` (each crossed with every replication factor).
    Destinations,
    /// `[routing] replication` at the scenario's sink count.
    Replication,
    /// `[aggregation] rules_per_datapoint` (each crossed with every method set).
    RulesPerDatapoint,
    /// The output series of the aggregation (each crossed with every method set).
    OutputSeries,
    /// `[aggregation] write_back_secs` (each crossed with every method set).
    WriteBack,
    /// The method sets alone.
    Methods,
}

impl Axis {
    /// True for the aggregation axes.
    pub fn is_aggregation(self) -> bool {
        matches!(
            self,
            Axis::RulesPerDatapoint | Axis::OutputSeries | Axis::WriteBack | Axis::Methods
        )
    }

    /// The swept value's name in tables and charts.
    pub fn describe(self) -> &'static str {
        match self {
            Axis::Rules => "rules",
            Axis::Destinations => "destinations",
            Axis::Replication => "replication factor",
            Axis::RulesPerDatapoint => "aggregation rules matched per datapoint",
            Axis::OutputSeries => "output series",
            Axis::WriteBack => "write-back frequency (s)",
            Axis::Methods => "method set (1 running, 2 percentiles, 3 all)",
        }
    }
}

/// One configuration of the sweep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    /// Generated regex rules (0: consistent hashing).
    pub rules: usize,
    /// Destinations (sinks).
    pub destinations: usize,
    /// Copies per datapoint.
    pub replication: usize,
    /// Aggregation: rules each datapoint matches (0: not an aggregation point).
    #[serde(default)]
    pub rules_per_datapoint: usize,
    /// Aggregation: the output series asked for (0: the scenario's names).
    #[serde(default)]
    pub output_series: usize,
    /// Aggregation: `WRITE_BACK_FREQUENCY` (0: each rule's frequency).
    #[serde(default)]
    pub write_back_secs: u64,
    /// Aggregation: the methods.
    #[serde(default)]
    pub methods: MethodSet,
}

impl Point {
    /// The value on `axis`.
    pub fn on(&self, axis: Axis) -> usize {
        match axis {
            Axis::Rules => self.rules,
            Axis::Destinations => self.destinations,
            Axis::Replication => self.replication,
            Axis::RulesPerDatapoint => self.rules_per_datapoint,
            Axis::OutputSeries => self.output_series,
            Axis::WriteBack => self.write_back_secs as usize,
            Axis::Methods => match self.methods {
                MethodSet::Scenario => 0,
                MethodSet::Running => 1,
                MethodSet::Percentile => 2,
                MethodSet::All => 3,
            },
        }
    }

    fn label(&self) -> String {
        if self.rules_per_datapoint > 0 {
            let mut l = format!("{} rules/datapoint", self.rules_per_datapoint);
            if self.output_series > 0 {
                let _ = write!(l, ", {} series", self.output_series);
            }
            if self.write_back_secs > 0 {
                let _ = write!(l, ", write-back {} s", self.write_back_secs);
            }
            let _ = write!(l, ", {}", self.methods.label());
            l
        } else if self.rules > 0 {
            format!("{} rules, {} dest", self.rules, self.destinations)
        } else {
            format!("{} dest, repl {}", self.destinations, self.replication)
        }
    }
}

/// One run: one relay at one point in one round.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// The relay.
    pub target: String,
    /// The configuration.
    pub point: Point,
    /// Round (0-based).
    pub round: usize,
    /// Datapoints the generator wrote.
    pub sent: u64,
    /// Datapoints the sinks counted (copies included).
    pub delivered: u64,
    /// `sent × copies − delivered`.
    pub lost: i64,
    /// Relay CPU seconds.
    pub cpu_secs: Option<f64>,
    /// Peak resident memory (bytes).
    pub peak_rss_bytes: Option<u64>,
    /// Aggregates only: the distinct output series delivered.
    #[serde(default)]
    pub series: Option<u64>,
    /// Why the run produced no figures (the relay would not start with this configuration:
    /// carbon-c-relay's `carbon_ch` takes at most 64 servers), `None` when it ran.
    #[serde(default)]
    pub error: Option<String>,
}

impl Run {
    /// CPU-seconds per million datapoints sent.
    pub fn per_million_sent(&self) -> Option<f64> {
        self.cpu_secs
            .filter(|_| self.sent > 0)
            .map(|c| c * 1e6 / self.sent as f64)
    }

    /// CPU-seconds per million datapoints delivered (per copy).
    pub fn per_million_delivered(&self) -> Option<f64> {
        self.cpu_secs
            .filter(|_| self.delivered > 0)
            .map(|c| c * 1e6 / self.delivered as f64)
    }
}

/// A relay's figures at one point: medians over the rounds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// The relay.
    pub target: String,
    /// The configuration.
    pub point: Point,
    /// Median CPU-seconds per million sent.
    pub per_million_sent: Option<f64>,
    /// Median CPU-seconds per million delivered (per copy).
    pub per_million_delivered: Option<f64>,
    /// `per_million_delivered` over this relay's first point with the same replication
    /// (rules, destinations) or over its first point (replication).
    pub growth: Option<f64>,
    /// `per_million_sent` over the first relay's at the same point (> 1 costs more).
    pub against_first: Option<f64>,
    /// Most datapoints lost in one round.
    pub lost: i64,
    /// Highest peak RSS of the rounds (bytes).
    pub peak_rss_bytes: Option<u64>,
    /// Aggregates only: most output series delivered in one round.
    #[serde(default)]
    pub series: Option<u64>,
}

/// The whole cost sweep. Serialised as the `--json` output of a configuration `--sweep`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CostReport {
    /// Scenario name.
    pub scenario: String,
    /// What was varied.
    pub axis: Axis,
    /// Relays, in run order.
    pub targets: Vec<String>,
    /// Configurations, in run order.
    pub points: Vec<Point>,
    /// Every run.
    pub runs: Vec<Run>,
    /// One per relay and point.
    pub figures: Vec<Figure>,
}

/// The configurations `scenario`'s `[sweep]` asks for, in run order; `None` when it sweeps
/// rates (or nothing).
pub fn points(scenario: &Scenario) -> Option<(Axis, Vec<Point>)> {
    let sw = &scenario.sweep;
    let base = Point {
        rules: scenario.routing.rules,
        destinations: scenario.sinks.count,
        replication: scenario.routing.replication,
        ..Point::default()
    };
    if let Some(a) = &scenario.aggregation {
        let methods: Vec<MethodSet> = if sw.methods.is_empty() {
            vec![MethodSet::Scenario]
        } else {
            sw.methods
                .iter()
                .filter_map(|m| MethodSet::parse(m))
                .collect()
        };
        let agg = Point {
            rules_per_datapoint: a.rules_per_datapoint.max(1),
            write_back_secs: a.write_back_secs,
            ..base
        };
        let crossed = |axis: Axis, values: Vec<Point>| {
            let v = values
                .into_iter()
                .flat_map(|p| methods.iter().map(move |&methods| Point { methods, ..p }))
                .collect();
            Some((axis, v))
        };
        if !sw.rules_per_datapoint.is_empty() {
            let v = sw.rules_per_datapoint.iter().map(|&k| Point {
                rules_per_datapoint: k,
                ..agg
            });
            return crossed(Axis::RulesPerDatapoint, v.collect());
        }
        if !sw.output_series.is_empty() {
            let v = sw.output_series.iter().map(|&output_series| Point {
                output_series,
                ..agg
            });
            return crossed(Axis::OutputSeries, v.collect());
        }
        if !sw.write_back_secs.is_empty() {
            let v = sw.write_back_secs.iter().map(|&write_back_secs| Point {
                write_back_secs,
                ..agg
            });
            return crossed(Axis::WriteBack, v.collect());
        }
        if !sw.methods.is_empty() {
            return crossed(Axis::Methods, vec![agg]);
        }
    }
    if !sw.rules.is_empty() {
        let v = sw.rules.iter().map(|&rules| Point { rules, ..base });
        return Some((Axis::Rules, v.collect()));
    }
    let replication = if sw.replication.is_empty() {
        vec![base.replication]
    } else {
        sw.replication.clone()
    };
    if !sw.destinations.is_empty() {
        let mut v = Vec::new();
        for &destinations in &sw.destinations {
            for &replication in replication.iter().filter(|&&r| r <= destinations) {
                v.push(Point {
                    rules: 0,
                    destinations,
                    replication,
                    ..Point::default()
                });
            }
        }
        return Some((Axis::Destinations, v));
    }
    if !sw.replication.is_empty() {
        let v = replication.iter().map(|&replication| Point {
            rules: 0,
            replication,
            ..base
        });
        return Some((Axis::Replication, v.collect()));
    }
    None
}

/// The scenario of one point.
pub fn point_scenario(base: &Scenario, p: Point) -> Result<Scenario, BenchError> {
    let mut s = base.clone();
    s.sinks.count = p.destinations;
    s.routing = Routing {
        rules: p.rules,
        replication: p.replication,
    };
    if let Some(a) = s.aggregation.as_mut()
        && p.rules_per_datapoint > 0
    {
        // The groups stay; each gets `rules_per_datapoint` rules.
        let groups = (a.rules / a.rules_per_datapoint.max(1)).max(1);
        a.rules = groups * p.rules_per_datapoint;
        a.rules_per_datapoint = p.rules_per_datapoint;
        a.write_back_secs = p.write_back_secs;
        if let Some(m) = p.methods.methods() {
            a.methods = m;
        }
        if p.output_series > 0 {
            s.names.count = a.names_for_series(p.output_series);
            s.load.datapoints = s.load.datapoints.max(s.names.count as u64);
        }
    }
    s.sweep = Default::default();
    s.validate(&Default::default())
}

/// Runs every point against every relay, `rounds` times each.
pub async fn run(
    scenario: &Scenario,
    targets: &[(String, TargetSpec)],
    rounds: usize,
    opts: &RunOptions,
) -> Result<CostReport, BenchError> {
    let Some((axis, points)) = points(scenario) else {
        return Err(BenchError::Invalid(format!(
            "scenario {:?}: a configuration sweep needs [sweep] rules, destinations, replication, or an aggregation axis",
            scenario.name
        )));
    };
    if targets.is_empty() || rounds == 0 || rounds > 100 {
        return Err(BenchError::Invalid(
            "a configuration sweep needs a relay to measure and 1..=100 --rounds".into(),
        ));
    }
    // Every point is checked before the first one runs.
    let steps = points
        .iter()
        .map(|&p| point_scenario(scenario, p).map(|s| (p, s)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut runs = Vec::new();
    let mut run_id = 0;
    for (i, (point, step)) in steps.iter().enumerate() {
        for round in 0..rounds {
            for (name, spec) in targets {
                run_id += 1;
                let o = RunOptions {
                    run_id,
                    label: format!(
                        "{name} {}, point {}/{}, round {}/{rounds}",
                        point.label(),
                        i + 1,
                        steps.len(),
                        round + 1
                    ),
                    ..opts.clone()
                };
                // One relay refusing one configuration does not end the sweep.
                runs.push(match run_once(step, spec, &o).await {
                    Ok(report) => Run {
                        target: name.clone(),
                        point: *point,
                        round,
                        sent: report.sent,
                        delivered: report.delivered,
                        lost: report.lost,
                        cpu_secs: report.relay_cpu_secs,
                        peak_rss_bytes: report.peak_rss_bytes,
                        series: report.series,
                        error: None,
                    },
                    Err(e) => Run {
                        target: name.clone(),
                        point: *point,
                        round,
                        error: Some(e.to_string()),
                        ..Run::default()
                    },
                });
            }
        }
    }
    let names = targets.iter().map(|t| t.0.clone()).collect();
    Ok(CostReport::new(scenario, axis, names, points, runs))
}

impl CostReport {
    /// Builds the figures (medians, growth, ratios) from the runs.
    pub fn new(
        scenario: &Scenario,
        axis: Axis,
        targets: Vec<String>,
        points: Vec<Point>,
        runs: Vec<Run>,
    ) -> CostReport {
        let mut figures = Vec::new();
        for t in &targets {
            for p in &points {
                let mine: Vec<&Run> = runs
                    .iter()
                    .filter(|r| &r.target == t && r.point == *p)
                    .collect();
                let med = |f: fn(&Run) -> Option<f64>| {
                    median(&mine.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
                };
                figures.push(Figure {
                    target: t.clone(),
                    point: *p,
                    per_million_sent: med(Run::per_million_sent),
                    per_million_delivered: med(Run::per_million_delivered),
                    growth: None,
                    against_first: None,
                    lost: mine
                        .iter()
                        .filter(|r| r.error.is_none())
                        .map(|r| r.lost)
                        .max()
                        .unwrap_or(0),
                    peak_rss_bytes: mine.iter().filter_map(|r| r.peak_rss_bytes).max(),
                    series: mine.iter().filter_map(|r| r.series).max(),
                });
            }
        }
        let snapshot = figures.clone();
        for f in &mut figures {
            let base = snapshot.iter().find(|b| {
                b.target == f.target
                    && (axis == Axis::Replication || b.point.replication == f.point.replication)
                    && b.point.methods == f.point.methods
            });
            // An aggregator's output is not its input: its growth is per datapoint sent.
            let cost = if axis.is_aggregation() {
                |f: &Figure| f.per_million_sent
            } else {
                |f: &Figure| f.per_million_delivered
            };
            f.growth = base.and_then(cost).zip(cost(f)).map(|(b, v)| v / b);
            let first = snapshot
                .iter()
                .find(|b| Some(&b.target) == targets.first() && b.point == f.point);
            f.against_first = first
                .and_then(|b| b.per_million_sent)
                .zip(f.per_million_sent)
                .map(|(b, v)| v / b);
        }
        CostReport {
            scenario: scenario.name.clone(),
            axis,
            targets,
            points,
            runs,
            figures,
        }
    }

    /// Counts add up in every run and the figures follow from the runs.
    pub fn is_consistent(&self) -> bool {
        let runs_ok = self.runs.iter().filter(|r| r.error.is_none()).all(|r| {
            if r.series.is_some() {
                // Aggregates only: nothing passed on, nothing to count as lost.
                return r.lost == 0;
            }
            let copies = if r.point.rules > 0 {
                1
            } else {
                r.point.replication as i64
            };
            r.lost == r.sent as i64 * copies - r.delivered as i64
        });
        runs_ok && self.figures.len() == self.targets.len() * self.points.len()
    }

    /// The table: one line per relay and point, ending with the notes on loss.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "cost sweep {} over {:?}: {} point(s) × {} relay(s)",
            self.scenario,
            self.axis,
            self.points.len(),
            self.targets.len()
        );
        let w = name_width(&self.targets);
        if self.axis.is_aggregation() {
            self.aggregation_table(&mut t, w);
            return t;
        }
        let _ = writeln!(
            t,
            "  {:<w$} {:>6} {:>5} {:>5} {:>10} {:>11} {:>8} {:>9} {:>9} {:>8}",
            "relay",
            "rules",
            "dest",
            "repl",
            "CPU-s/M in",
            "CPU-s/M out",
            "growth",
            "vs first",
            "lost",
            "RSS MiB"
        );
        let num = |v: Option<f64>, prec: usize| {
            v.map_or_else(|| "-".to_owned(), |v| format!("{v:.prec$}"))
        };
        for p in &self.points {
            for f in self.figures.iter().filter(|f| f.point == *p) {
                let _ = writeln!(
                    t,
                    "  {:<w$} {:>6} {:>5} {:>5} {:>10} {:>11} {:>8} {:>9} {:>9} {:>8}",
                    f.target,
                    p.rules,
                    p.destinations,
                    p.replication,
                    num(f.per_million_sent, 3),
                    num(f.per_million_delivered, 3),
                    f.growth.map_or_else(|| "-".into(), |g| format!("×{g:.2}")),
                    f.against_first
                        .map_or_else(|| "-".into(), |g| format!("×{g:.2}")),
                    f.lost,
                    f.peak_rss_bytes
                        .map_or_else(|| "-".into(), |b| format!("{:.1}", b as f64 / 1048576.0)),
                );
            }
        }
        let lossy: Vec<String> = self
            .figures
            .iter()
            .filter(|f| f.lost > 0)
            .map(|f| {
                format!(
                    "{} at {}: {} lost",
                    f.target,
                    f.point.label(),
                    si(f.lost as f64)
                )
            })
            .collect();
        if lossy.is_empty() {
            let _ = writeln!(t, "every run delivered every copy");
        }
        for l in lossy {
            let _ = writeln!(t, "note: {l}");
        }
        for r in self.runs.iter().filter(|r| r.error.is_some()) {
            let _ = writeln!(
                t,
                "note: {} at {}, round {}: {}",
                r.target,
                r.point.label(),
                r.round + 1,
                r.error.as_deref().unwrap_or_default()
            );
        }
        t
    }
}

impl CostReport {
    /// The table of an aggregation sweep: per datapoint sent, with the output series
    /// delivered (aggregates only) and the failed runs.
    fn aggregation_table(&self, t: &mut String, w: usize) {
        let pw = self
            .points
            .iter()
            .map(|p| p.label().len())
            .max()
            .unwrap_or(5);
        let _ = writeln!(
            t,
            "  {:<w$} {:<pw$} {:>10} {:>8} {:>9} {:>9} {:>8}",
            "relay", "point", "CPU-s/M in", "growth", "vs first", "series", "RSS MiB"
        );
        let ratio = |v: Option<f64>| v.map_or_else(|| "-".into(), |g| format!("×{g:.2}"));
        for p in &self.points {
            for f in self.figures.iter().filter(|f| f.point == *p) {
                let _ = writeln!(
                    t,
                    "  {:<w$} {:<pw$} {:>10} {:>8} {:>9} {:>9} {:>8}",
                    f.target,
                    p.label(),
                    f.per_million_sent
                        .map_or_else(|| "-".to_owned(), |v| format!("{v:.3}")),
                    ratio(f.growth),
                    ratio(f.against_first),
                    f.series.map_or_else(|| "-".into(), |s| s.to_string()),
                    f.peak_rss_bytes
                        .map_or_else(|| "-".into(), |b| format!("{:.1}", b as f64 / 1048576.0)),
                );
            }
        }
        for r in self.runs.iter().filter(|r| r.error.is_some()) {
            let _ = writeln!(
                t,
                "note: {} at {}, round {}: {}",
                r.target,
                r.point.label(),
                r.round + 1,
                r.error.as_deref().unwrap_or_default()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(sweep: &str) -> Scenario {
        Scenario::from_toml_str(&format!(
            "name = \"c\"\n[load]\ndatapoints = 1000\n[sinks]\ncount = 4\n[sweep]\n{sweep}\n"
        ))
        .unwrap()
        .validate(&Default::default())
        .unwrap()
    }

    #[test]
    fn destinations_cross_replication_and_skip_impossible_pairs() {
        let s = scenario("destinations = [2, 8]\nreplication = [1, 3]");
        let (axis, p) = points(&s).unwrap();
        assert_eq!(axis, Axis::Destinations);
        let pairs: Vec<(usize, usize)> =
            p.iter().map(|p| (p.destinations, p.replication)).collect();
        assert_eq!(pairs, vec![(2, 1), (8, 1), (8, 3)]);
        let step = point_scenario(&s, p[2]).unwrap();
        assert_eq!((step.sinks.count, step.routing.replication), (8, 3));
        assert_eq!(step.routing.copies(), 3);
    }

    #[test]
    fn rules_sweep_keeps_the_sinks_and_rates_do_not_mix() {
        let s = scenario("rules = [10, 1000]");
        let (axis, p) = points(&s).unwrap();
        assert_eq!(axis, Axis::Rules);
        assert!(p.iter().all(|p| p.destinations == 4 && p.replication == 1));
        assert!(
            Scenario::from_toml_str("name = \"x\"\n[sweep]\nrates = [1.0]\nrules = [10]\n")
                .unwrap()
                .validate(&Default::default())
                .is_err()
        );
        assert!(points(&scenario("rates = [5.0]")).is_none());
    }

    #[test]
    fn aggregation_sweeps_cross_the_method_sets_and_scale_the_names() {
        let agg = "[aggregation]\nrules = 100\nrules_per_datapoint = 4\nhosts_per_output = 1\nforward_all = false\n";
        let s = |sweep: &str| {
            Scenario::from_toml_str(&format!(
                "name = \"a\"\n[load]\ndatapoints = 1000\n{agg}[sweep]\n{sweep}\n"
            ))
            .unwrap()
            .validate(&Default::default())
        };
        let k = s("rules_per_datapoint = [1, 8]\nmethods = [\"running\", \"percentile\"]").unwrap();
        let (axis, p) = points(&k).unwrap();
        assert_eq!(axis, Axis::RulesPerDatapoint);
        assert_eq!(p.len(), 4);
        let step = point_scenario(&k, p[3]).unwrap();
        let a = step.aggregation.as_ref().unwrap();
        // 25 groups of 8 rules: every datapoint matches 8, every method a percentile.
        assert_eq!((a.rules, a.rules_per_datapoint), (200, 8));
        assert!(a.methods().iter().all(|m| m.starts_with('p')));
        assert_eq!(p[3].on(axis), 8);

        let n = s("output_series = [1000, 1000000]").unwrap();
        let (axis, p) = points(&n).unwrap();
        assert_eq!(axis, Axis::OutputSeries);
        let big = point_scenario(&n, p[1]).unwrap();
        let a = big.aggregation.as_ref().unwrap();
        assert_eq!(a.expected_series(big.names.count), 1_000_000);
        assert!(big.load.datapoints >= big.names.count as u64);
        assert_eq!(a.rules_per_datapoint, 4);

        let w = s("write_back_secs = [1, 60]").unwrap();
        let (axis, p) = points(&w).unwrap();
        assert_eq!((axis, p.len()), (Axis::WriteBack, 2));
        let step = point_scenario(&w, p[1]).unwrap();
        assert_eq!(step.aggregation.as_ref().unwrap().write_back_secs, 60);

        assert!(s("write_back_secs = [0]").is_err());
        assert!(s("methods = [\"median\"]").is_err());
        assert!(s("output_series = [10]\nwrite_back_secs = [2]").is_err());
        assert!(s("rules_per_datapoint = [2]\nrules = [10]").is_err());

        // Aggregates only: no loss is counted, the growth is per datapoint sent.
        let runs = p
            .iter()
            .enumerate()
            .map(|(i, &point)| Run {
                target: "a".into(),
                point,
                sent: 1_000_000,
                delivered: 20_000 * (1 + i as u64),
                cpu_secs: Some(1.0 + i as f64),
                series: Some(20_000),
                ..Run::default()
            })
            .collect();
        let r = CostReport::new(&w, axis, vec!["a".into()], p, runs);
        assert!(r.is_consistent());
        assert_eq!(r.figures[1].growth, Some(2.0));
        let table = r.table();
        assert!(
            table.contains("write-back 60 s") && table.contains("20000"),
            "{table}"
        );
    }

    #[test]
    fn figures_are_medians_with_growth_and_ratios() {
        let s = scenario("rules = [10, 100]");
        let (axis, points) = points(&s).unwrap();
        let mut runs = Vec::new();
        for (t, cost) in [("a", 1.0), ("c", 10.0)] {
            for (i, p) in points.iter().enumerate() {
                for (round, jitter) in [0.9, 1.0, 1.3].into_iter().enumerate() {
                    runs.push(Run {
                        target: t.into(),
                        point: *p,
                        round,
                        sent: 1_000_000,
                        delivered: 1_000_000,
                        lost: 0,
                        cpu_secs: Some(cost * jitter * (1 + i) as f64),
                        peak_rss_bytes: Some(1 << 20),
                        series: None,
                        error: None,
                    });
                }
            }
        }
        let r = CostReport::new(&s, axis, vec!["a".into(), "c".into()], points, runs);
        assert!(r.is_consistent());
        let f = |t: &str, rules| {
            r.figures
                .iter()
                .find(|f| f.target == t && f.point.rules == rules)
                .unwrap()
        };
        assert_eq!(f("a", 10).per_million_sent, Some(1.0));
        assert_eq!(f("a", 100).growth, Some(2.0));
        assert_eq!(f("c", 100).against_first, Some(10.0));
        let table = r.table();
        assert!(
            table.contains("×2.00") && table.contains("×10.00"),
            "{table}"
        );
        assert!(
            table.ends_with("every run delivered every copy\n"),
            "{table}"
        );
    }
}
