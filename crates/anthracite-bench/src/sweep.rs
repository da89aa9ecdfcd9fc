//! `--sweep`: the capacity sweep. The scenario runs once per offered rate (ascending), against
//! every relay of `--compare` in turn at each rate (so drift on a shared machine hits all of
//! them alike), or against the single target. Each run is an ordinary [`run_once`]: a fresh
//! relay for in-process and command targets, the same one for `--target ADDR`.
//!
//! Every run becomes a [`Row`]; a row **meets the target** when nothing was lost (`sent −
//! delivered ≤ 0`: duplicates are not loss), its p99 latency is within
//! `sweep.p99_target_ms`, and the rate was really offered (the generator sent at least
//! [`MIN_OFFERED_FRACTION`] of it; a relay that pushes back hard enough to slow the generator
//! has not carried the rate). The **knee** of a relay is the highest offered rate whose row
//! meets the target: `knee: <rate> datapoints/s`.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::BenchError;
use super::args::TargetSpec;
use super::report::{Report, name_width, si};
use super::runner::{RunOptions, run_once};
use super::scenario::{Overrides, Scenario};

/// Share of the offered rate the generator must have sent for a row to count.
pub const MIN_OFFERED_FRACTION: f64 = 0.95;

/// Why a row does or does not meet the target (the first failing check, in this order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// No loss, p99 within target, rate offered.
    #[default]
    Ok,
    /// Datapoints were lost.
    Loss,
    /// p99 latency above target, or no latency measured.
    Latency,
    /// The generator sent less than [`MIN_OFFERED_FRACTION`] of the offered rate.
    Short,
}

/// One run of the sweep: one relay at one offered rate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The relay (contender name, or the target's label).
    pub target: String,
    /// Offered datapoints/s.
    pub offered_rate: f64,
    /// Datapoints written by the generator.
    pub sent: u64,
    /// `sent / send_secs`: the rate actually offered.
    pub send_rate: f64,
    /// Datapoints counted by the sinks.
    pub delivered: u64,
    /// `delivered / delivery_secs`.
    pub delivered_rate: f64,
    /// `sent × copies − delivered` (negative: duplicates).
    pub lost: i64,
    /// `lost` as a percentage of `sent × copies`.
    pub loss_pct: f64,
    /// Median latency (µs).
    pub p50_us: Option<u64>,
    /// 99th percentile latency (µs).
    pub p99_us: Option<u64>,
    /// Relay CPU seconds per million datapoints delivered.
    pub cpu_secs_per_million: Option<f64>,
    /// Peak resident memory (bytes); see the run's `rss_scope`.
    pub peak_rss_bytes: Option<u64>,
    /// Whether the row meets the target, or why not.
    pub verdict: Verdict,
    /// The run's caveats.
    pub notes: Vec<String>,
}

impl Row {
    /// The row of `report` judged against `p99_target_ms`.
    pub fn from_report(report: &Report, offered_rate: f64, p99_target_ms: f64) -> Row {
        let mut row = Row {
            target: report.target.clone(),
            offered_rate,
            sent: report.sent,
            send_rate: report.send_rate,
            delivered: report.delivered,
            delivered_rate: report.delivered_rate,
            lost: report.lost,
            loss_pct: report.loss_percent(),
            p50_us: report.latency.p50_us,
            p99_us: report.latency.p99_us,
            cpu_secs_per_million: report.cpu_secs_per_million,
            peak_rss_bytes: report.peak_rss_bytes,
            verdict: Verdict::Ok,
            notes: report.notes.clone(),
        };
        row.verdict = row.judge(p99_target_ms);
        row
    }

    /// Applies the rule of the module docs.
    pub fn judge(&self, p99_target_ms: f64) -> Verdict {
        if self.lost > 0 || self.sent == 0 {
            Verdict::Loss
        } else if self.p99_us.is_none_or(|p| p as f64 > p99_target_ms * 1e3) {
            Verdict::Latency
        } else if self.send_rate < MIN_OFFERED_FRACTION * self.offered_rate {
            Verdict::Short
        } else {
            Verdict::Ok
        }
    }
}

/// A relay's knee.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// The relay.
    pub target: String,
    /// Highest offered rate meeting the target; `None` when no rate did.
    pub rate: Option<f64>,
}

/// The whole sweep. Serialised as the `--json` output of `--sweep`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    /// Scenario name.
    pub scenario: String,
    /// The p99 target rows were judged against (ms).
    pub p99_target_ms: f64,
    /// Offered rates, ascending.
    pub rates: Vec<f64>,
    /// Relays, in run order.
    pub targets: Vec<String>,
    /// Every run, in run order (by rate, then relay).
    pub rows: Vec<Row>,
    /// The first relay's knee (the only one without `--compare`).
    pub knee: Option<f64>,
    /// Every relay's knee.
    pub knees: Vec<Knee>,
}

/// Highest offered rate among `rows` of `target` that meet the target.
pub fn knee(rows: &[Row], target: &str) -> Option<f64> {
    rows.iter()
        .filter(|r| r.target == target && r.verdict == Verdict::Ok)
        .map(|r| r.offered_rate)
        .max_by(f64::total_cmp)
}

fn ms(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.1}", v as f64 / 1e3))
}

impl SweepReport {
    /// Builds the report (knees included) from the rows.
    pub fn new(scenario: &Scenario, targets: Vec<String>, rows: Vec<Row>) -> SweepReport {
        let knees: Vec<Knee> = targets
            .iter()
            .map(|t| Knee {
                target: t.clone(),
                rate: knee(&rows, t),
            })
            .collect();
        SweepReport {
            scenario: scenario.name.clone(),
            p99_target_ms: scenario.sweep.p99_target_ms,
            rates: sorted_rates(&scenario.sweep.rates),
            targets,
            knee: knees.first().and_then(|k| k.rate),
            knees,
            rows,
        }
    }

    /// Counts add up in every row and each knee follows from the rows.
    pub fn is_consistent(&self) -> bool {
        let rows_ok = self.rows.iter().all(|r| {
            r.lost == r.sent as i64 - r.delivered as i64
                && r.verdict == r.judge(self.p99_target_ms)
                && match (r.p50_us, r.p99_us) {
                    (Some(a), Some(b)) => a <= b,
                    (None, None) => true,
                    _ => false,
                }
        });
        let knees_ok = self
            .knees
            .iter()
            .all(|k| k.rate == knee(&self.rows, &k.target));
        rows_ok && knees_ok && self.knee == self.knees.first().and_then(|k| k.rate)
    }

    /// The table, one row per run, then unique notes and one `knee:` line per relay (the
    /// last line is the first relay's knee).
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "sweep {}: {} rates × {} relay(s), p99 target {} ms",
            self.scenario,
            self.rates.len(),
            self.targets.len(),
            self.p99_target_ms
        );
        let w = name_width(&self.targets);
        let _ = writeln!(
            t,
            "  {:<w$} {:>9} {:>10} {:>10} {:>9} {:>8} {:>9} {:>9} {:>8} {:>9}  verdict",
            "relay",
            "offered/s",
            "sent",
            "delivered",
            "lost",
            "loss %",
            "p50 ms",
            "p99 ms",
            "CPU-s/M",
            "RSS MiB"
        );
        for r in &self.rows {
            let _ = writeln!(
                t,
                "  {:<w$} {:>9} {:>10} {:>10} {:>9} {:>8.3} {:>9} {:>9} {:>8} {:>9}  {}",
                r.target,
                si(r.offered_rate),
                r.sent,
                r.delivered,
                r.lost,
                r.loss_pct,
                ms(r.p50_us),
                ms(r.p99_us),
                r.cpu_secs_per_million
                    .map_or_else(|| "-".into(), |v| format!("{v:.3}")),
                r.peak_rss_bytes
                    .map_or_else(|| "-".into(), |b| format!("{:.1}", b as f64 / 1048576.0)),
                match r.verdict {
                    Verdict::Ok => "ok",
                    Verdict::Loss => "loss",
                    Verdict::Latency => "p99 over target",
                    Verdict::Short => "rate not reached",
                }
            );
        }
        let notes: BTreeSet<&String> = self.rows.iter().flat_map(|r| &r.notes).collect();
        for n in notes {
            let _ = writeln!(t, "note: {n}");
        }
        // The first relay's knee goes last, so the output ends with it.
        let multi = self.knees.len() > 1;
        for k in self.knees.iter().skip(1).chain(self.knees.first()) {
            let _ = writeln!(t, "{}", knee_line(k, multi));
        }
        t
    }
}

/// `knee: 200000 datapoints/s` (with ` (relay)` after it when several relays were swept).
pub fn knee_line(k: &Knee, name_it: bool) -> String {
    let who = if name_it {
        format!(" ({})", k.target)
    } else {
        String::new()
    };
    match k.rate {
        Some(r) => format!("knee: {r:.0} datapoints/s{who}"),
        None => format!("knee: none (no rate met the target){who}"),
    }
}

fn sorted_rates(rates: &[f64]) -> Vec<f64> {
    let mut v = rates.to_vec();
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// The scenario of one step: `base` at `rate`, for `sweep.step_secs` unless the command line
/// fixed the length of a run (`--datapoints`, `--duration`).
pub fn step_scenario(base: &Scenario, rate: f64, cli: &Overrides) -> Result<Scenario, BenchError> {
    let length_fixed = cli.datapoints.is_some() || cli.duration_secs.is_some();
    let o = Overrides {
        rate: Some(rate),
        duration_secs: base.sweep.step_secs.filter(|_| !length_fixed),
        ..Default::default()
    };
    base.clone().validate(&o)
}

/// Runs the sweep: every rate of `scenario.sweep.rates` (ascending) against every target.
pub async fn run(
    scenario: &Scenario,
    targets: &[(String, TargetSpec)],
    cli: &Overrides,
    opts: &RunOptions,
) -> Result<SweepReport, BenchError> {
    let rates = sorted_rates(&scenario.sweep.rates);
    if rates.is_empty() {
        return Err(BenchError::Invalid(format!(
            "scenario {:?}: --sweep needs rates ([sweep] rates = [...] or --rates)",
            scenario.name
        )));
    }
    if targets.is_empty() {
        return Err(BenchError::Invalid(
            "--sweep needs a relay to measure".into(),
        ));
    }
    // Every step is checked before the first one runs.
    let steps = rates
        .iter()
        .map(|&r| step_scenario(scenario, r, cli).map(|s| (r, s)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rows = Vec::with_capacity(steps.len() * targets.len());
    let mut run_id = 0;
    for (i, (rate, step)) in steps.iter().enumerate() {
        for (name, spec) in targets {
            run_id += 1;
            let label = format!("{name} {}/s, step {}/{}", si(*rate), i + 1, steps.len());
            let o = RunOptions {
                run_id,
                label,
                ..opts.clone()
            };
            let mut report = run_once(step, spec, &o).await?;
            report.target = name.clone();
            rows.push(Row::from_report(
                &report,
                *rate,
                scenario.sweep.p99_target_ms,
            ));
        }
    }
    let names = targets.iter().map(|t| t.0.clone()).collect();
    Ok(SweepReport::new(scenario, names, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(target: &str, rate: f64, lost: i64, p99_ms: f64) -> Row {
        let mut r = Row {
            target: target.into(),
            offered_rate: rate,
            sent: 1000,
            send_rate: rate,
            delivered: (1000 - lost) as u64,
            lost,
            p50_us: Some(100),
            p99_us: Some((p99_ms * 1e3) as u64),
            ..Default::default()
        };
        r.verdict = r.judge(100.0);
        r
    }

    #[test]
    fn knee_is_the_highest_rate_meeting_the_target() {
        let s = Scenario::from_toml_str("name = \"k\"\n[sweep]\nrates = [3, 1, 2, 4]\n").unwrap();
        let rows = vec![
            row("a", 1.0, 0, 5.0),
            row("b", 1.0, 0, 5.0),
            row("a", 2.0, 0, 50.0),
            row("b", 2.0, 3, 5.0),
            row("a", 3.0, -2, 90.0),
            row("b", 3.0, 0, 500.0),
            row("a", 4.0, 1, 5.0),
        ];
        let mut short = row("b", 4.0, 0, 5.0);
        short.send_rate = 3.0;
        short.verdict = short.judge(100.0);
        assert_eq!(short.verdict, Verdict::Short);
        let mut all = rows;
        all.push(short);
        let r = SweepReport::new(&s, vec!["a".into(), "b".into()], all);
        assert_eq!(r.rates, vec![1.0, 2.0, 3.0, 4.0]);
        // Duplicates (negative loss) are not loss; loss or a slow p99 disqualify.
        assert_eq!(r.knee, Some(3.0));
        assert_eq!(r.knees[1].rate, Some(1.0));
        assert!(r.is_consistent());
        let table = r.table();
        assert!(
            table.trim_end().ends_with("knee: 3 datapoints/s (a)"),
            "{table}"
        );
        assert!(table.contains("knee: 1 datapoints/s (b)"));
        assert!(table.contains("p99 over target") && table.contains("rate not reached"));
        let none = SweepReport::new(&s, vec!["c".into()], vec![row("c", 1.0, 5, 1.0)]);
        assert_eq!(none.knee, None);
        assert!(
            none.table()
                .trim_end()
                .ends_with("knee: none (no rate met the target)")
        );
    }

    #[test]
    fn steps_take_the_rate_and_the_step_length() {
        let s = Scenario::from_toml_str(
            "name = \"s\"\n[load]\ndatapoints = 1000\n[sweep]\nrates = [10, 20]\nstep_secs = 2\n",
        )
        .unwrap()
        .validate(&Overrides::default())
        .unwrap();
        let step = step_scenario(&s, 20.0, &Overrides::default()).unwrap();
        assert_eq!((step.load.rate, step.load.duration_secs), (20.0, Some(2.0)));
        let fixed = Overrides {
            datapoints: Some(10),
            ..Default::default()
        };
        let s2 = s.clone().validate(&fixed).unwrap();
        let step = step_scenario(&s2, 20.0, &fixed).unwrap();
        assert_eq!((step.load.datapoints, step.load.duration_secs), (10, None));
        // A step that breaks a bound is refused with the key named.
        let huge = step_scenario(&s, 1e9, &Overrides::default()).unwrap_err();
        assert!(huge.to_string().contains("load.rate"), "{huge}");
    }

    #[test]
    fn shipped_sweeps_validate_every_step() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/scenarios");
        let mut swept = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "toml") {
                continue;
            }
            let s = Scenario::load(&path)
                .and_then(|s| s.validate(&Overrides::default()))
                .unwrap();
            for &r in &s.sweep.rates {
                step_scenario(&s, r, &Overrides::default())
                    .unwrap_or_else(|e| panic!("{} at {r}: {e}", path.display()));
            }
            swept += usize::from(!s.sweep.rates.is_empty());
        }
        assert!(swept >= 8, "{swept} shipped scenarios have a [sweep]");
    }
}
