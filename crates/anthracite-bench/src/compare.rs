//! `--compare NAME=CMD …`: one scenario against several relays, alternately (A B A B …) so
//! that drift on a shared machine hits every contender alike, with per-pair ratios.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::BenchError;
use super::args::TargetSpec;
use super::report::{Report, si};
use super::runner::{RunOptions, run_once};
use super::scenario::Scenario;

/// One contender's figures in one round.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Contender name.
    pub name: String,
    /// Round (0-based).
    pub round: usize,
    /// Delivered datapoints/s.
    pub delivered_rate: f64,
    /// CPU-seconds per million datapoints.
    pub cpu_secs_per_million: Option<f64>,
    /// p99 latency (µs).
    pub p99_us: Option<u64>,
    /// Datapoints lost.
    pub lost: i64,
    /// Peak resident memory (bytes), when measurable.
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
    /// Datapoints delivered.
    #[serde(default)]
    pub delivered: u64,
    /// Distinct output series delivered (aggregation without `forward_all`).
    #[serde(default)]
    pub series: Option<u64>,
}

/// A contender against the first one, over the rounds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    /// Contender name.
    pub name: String,
    /// Baseline name (the first contender).
    pub baseline: String,
    /// Throughput ratio per round (contender / baseline; > 1 is faster).
    pub throughput: Vec<f64>,
    /// CPU-per-datapoint ratio per round (contender / baseline; > 1 costs more).
    pub cpu_cost: Vec<f64>,
    /// Median of `throughput`.
    pub throughput_median: Option<f64>,
    /// Median of `cpu_cost`.
    pub cpu_cost_median: Option<f64>,
}

/// The whole comparison.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Contenders, in run order.
    pub contenders: Vec<String>,
    /// Every run.
    pub entries: Vec<Entry>,
    /// Every contender after the first against the first.
    pub ratios: Vec<Ratio>,
}

/// The median, or `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len().is_multiple_of(2) {
        (s[m - 1] + s[m]) / 2.0
    } else {
        s[m]
    })
}

impl Comparison {
    /// Builds the ratios from the entries.
    pub fn from_entries(contenders: Vec<String>, entries: Vec<Entry>) -> Self {
        let mut ratios = Vec::new();
        if let Some(base) = contenders.first() {
            for name in contenders.iter().skip(1) {
                let mut r = Ratio {
                    name: name.clone(),
                    baseline: base.clone(),
                    ..Default::default()
                };
                for a in entries.iter().filter(|e| &e.name == base) {
                    let Some(b) = entries
                        .iter()
                        .find(|e| &e.name == name && e.round == a.round)
                    else {
                        continue;
                    };
                    if a.delivered_rate > 0.0 {
                        r.throughput.push(b.delivered_rate / a.delivered_rate);
                    }
                    if let (Some(x), Some(y)) = (a.cpu_secs_per_million, b.cpu_secs_per_million)
                        && x > 0.0
                    {
                        r.cpu_cost.push(y / x);
                    }
                }
                r.throughput_median = median(&r.throughput);
                r.cpu_cost_median = median(&r.cpu_cost);
                ratios.push(r);
            }
        }
        Comparison {
            contenders,
            entries,
            ratios,
        }
    }

    /// The comparison table.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "compare ({} rounds, alternating)",
            self.entries.iter().map(|e| e.round + 1).max().unwrap_or(0)
        );
        for e in &self.entries {
            let _ = writeln!(
                t,
                "  round {} {:<16} {:>10} dp/s  {:>8} CPU-s/M  p99 {:>10}  RSS {:>9}  lost {}{}",
                e.round + 1,
                e.name,
                si(e.delivered_rate),
                e.cpu_secs_per_million
                    .map_or("-".into(), |v| format!("{v:.3}")),
                e.p99_us
                    .map_or("-".into(), |v| format!("{:.2} ms", v as f64 / 1e3)),
                e.peak_rss_bytes
                    .map_or("-".into(), |b| format!("{:.1} MiB", b as f64 / 1048576.0)),
                e.lost,
                e.series.map_or_else(String::new, |s| format!(
                    "  aggregates {} in {s} series",
                    e.delivered
                )),
            );
        }
        for r in &self.ratios {
            let f = |v: &[f64]| {
                v.iter()
                    .map(|x| format!("{x:.2}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let _ = writeln!(
                t,
                "  {} / {}: throughput ×{} (rounds {}), CPU per datapoint ×{} (rounds {})",
                r.name,
                r.baseline,
                r.throughput_median
                    .map_or("-".into(), |v| format!("{v:.2}")),
                f(&r.throughput),
                r.cpu_cost_median.map_or("-".into(), |v| format!("{v:.2}")),
                f(&r.cpu_cost)
            );
        }
        t
    }
}

/// The order of the contenders (indices) in `round`: as given in even rounds, reversed in odd
/// ones (A B C, C B A, A B C …), so that over an even number of rounds each takes each place
/// equally often: the first relay of a round measures cheaper than the one run after it
/// (docs/benchmarks.md, "Benchmark notes": the order of a round).
fn round_order(round: usize, contenders: usize) -> impl Iterator<Item = usize> {
    (0..contenders).map(move |i| {
        if round.is_multiple_of(2) {
            i
        } else {
            contenders - 1 - i
        }
    })
}

/// Runs every contender `rounds` times, alternately (the order reversed every other round);
/// returns the first contender's last report with the comparison attached.
/// Each run's table is printed as it finishes.
pub async fn run(
    scenario: &Scenario,
    contenders: &[(String, TargetSpec)],
    rounds: usize,
    opts: &RunOptions,
) -> Result<Report, BenchError> {
    if contenders.is_empty() || rounds == 0 || rounds > 100 {
        return Err(BenchError::Invalid(
            "--compare needs at least one NAME=CMD and 1..=100 --rounds".into(),
        ));
    }
    let mut entries = Vec::new();
    let mut first: Option<Report> = None;
    let mut run_id = 0;
    for round in 0..rounds {
        for (name, spec) in round_order(round, contenders.len()).filter_map(|i| contenders.get(i)) {
            run_id += 1;
            let o = RunOptions {
                run_id,
                label: format!("{name}, round {}/{rounds}", round + 1),
                ..opts.clone()
            };
            let mut report = run_once(scenario, spec, &o).await?;
            report.target = name.clone();
            println!("{}", report.table());
            entries.push(Entry {
                name: name.clone(),
                round,
                delivered_rate: report.delivered_rate,
                cpu_secs_per_million: report.cpu_secs_per_million,
                p99_us: report.latency.p99_us,
                lost: report.lost,
                peak_rss_bytes: report.peak_rss_bytes,
                delivered: report.delivered,
                series: report.series,
            });
            if Some(name) == contenders.first().map(|c| &c.0) {
                first = Some(report);
            }
        }
    }
    let names = contenders.iter().map(|c| c.0.clone()).collect();
    let mut report = first.unwrap_or_default();
    report.comparison = Some(Comparison::from_entries(names, entries));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_other_round_runs_the_contenders_in_reverse() {
        let order = |round| round_order(round, 3).collect::<Vec<_>>();
        assert_eq!(order(0), [0, 1, 2]);
        assert_eq!(order(1), [2, 1, 0]);
        assert_eq!(order(2), [0, 1, 2]);
        assert_eq!(round_order(5, 1).collect::<Vec<_>>(), [0]);
        assert_eq!(round_order(1, 0).count(), 0);
    }

    #[test]
    fn ratios_pair_rounds() {
        let e = |name: &str, round, rate, cpu| Entry {
            name: name.into(),
            round,
            delivered_rate: rate,
            cpu_secs_per_million: Some(cpu),
            ..Default::default()
        };
        let c = Comparison::from_entries(
            vec!["a".into(), "b".into()],
            vec![
                e("a", 0, 100.0, 1.0),
                e("b", 0, 50.0, 4.0),
                e("a", 1, 200.0, 1.0),
                e("b", 1, 50.0, 2.0),
            ],
        );
        assert_eq!(c.ratios[0].throughput, vec![0.5, 0.25]);
        assert_eq!(c.ratios[0].throughput_median, Some(0.375));
        assert_eq!(c.ratios[0].cpu_cost_median, Some(3.0));
        assert!(c.table().contains("b / a"));
    }
}
