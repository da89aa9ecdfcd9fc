//! The result of a run: the final table, JSON, and the capacity estimate.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// Headroom kept free in the capacity estimate: plan cores to run at most 70 % busy.
pub const HEADROOM: f64 = 0.30;

/// Everything one run measured. Serialised as the `--json` output.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// What was measured: `in-process`, an address, or a command's name.
    pub target: String,
    /// Protocol towards the relay.
    pub protocol: String,
    /// Protocol the relay was asked to send to the sinks.
    pub sink_protocol: String,
    /// Generator connections.
    pub connections: usize,
    /// Distinct names.
    pub names: usize,
    /// Offered rate (datapoints/s), 0 = maximum.
    pub offered_rate: f64,
    /// Datapoints written by the generator.
    pub sent: u64,
    /// Datapoints counted by all sinks.
    pub delivered: u64,
    /// `sent × copies − delivered` (negative would mean duplicates); 0 when only aggregates
    /// are delivered (`aggregates_only`).
    pub lost: i64,
    /// Copies of each datapoint the sinks receive (`[routing] replication`); 0 (a report
    /// from before the field) reads as 1.
    #[serde(default)]
    pub copies: u64,
    /// An aggregation scenario without `forward_all`: the sinks receive aggregates only.
    #[serde(default)]
    pub aggregates_only: bool,
    /// With `aggregates_only`: the distinct output series delivered.
    #[serde(default)]
    pub series: Option<u64>,
    /// Per-sink figures.
    pub sinks: Vec<SinkReport>,
    /// Seconds from the first byte sent to the last byte written.
    pub send_secs: f64,
    /// Seconds from the first byte sent to the last datapoint received.
    pub delivery_secs: f64,
    /// `sent / send_secs`.
    pub send_rate: f64,
    /// `delivered / delivery_secs`: the headline throughput.
    pub delivered_rate: f64,
    /// The generator's own ceiling (datapoints/s into a discarding sink, same connections).
    pub generator_ceiling_rate: f64,
    /// End-to-end latency.
    pub latency: Latency,
    /// Relay CPU seconds during the run (send + drain), when measurable.
    pub relay_cpu_secs: Option<f64>,
    /// The part of `relay_cpu_secs` spent in the kernel (system time), when measurable.
    #[serde(default)]
    pub relay_system_cpu_secs: Option<f64>,
    /// Relay CPU seconds per million datapoints delivered (per datapoint sent, for an
    /// aggregation scenario).
    pub cpu_secs_per_million: Option<f64>,
    /// CPU seconds of the harness itself (generator, sinks, sampler) during the run: this
    /// process's total minus the in-process relay's threads.
    pub harness_cpu_secs: Option<f64>,
    /// Peak resident memory in bytes, when measurable.
    pub peak_rss_bytes: Option<u64>,
    /// What [`Report::peak_rss_bytes`] covers.
    pub rss_scope: String,
    /// Relay's own counters, in-process only.
    pub relay_stats: Option<serde_json::Value>,
    /// Names that arrived at more than one sink (when names were recorded).
    pub placement_conflicts: Option<u64>,
    /// The capacity estimate, when CPU was measurable.
    pub capacity: Option<Capacity>,
    /// Samples every 100 ms.
    pub timeline: Vec<Sample>,
    /// Caveats worth reading.
    pub notes: Vec<String>,
    /// Set in `--compare` mode.
    pub comparison: Option<super::compare::Comparison>,
}

/// One sink's figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SinkReport {
    /// Sink index.
    pub index: usize,
    /// Listening address.
    pub addr: String,
    /// Datapoints received.
    pub delivered: u64,
    /// Lines or frames that did not decode.
    pub bad: u64,
    /// Connections accepted.
    pub connections: u64,
    /// Datapoints the relay reported sent to this destination (in-process only).
    pub relay_sent: Option<u64>,
    /// Datapoints the relay reported dropped for this destination (in-process only).
    pub relay_dropped: Option<u64>,
    /// Relay-side sent − received here (in-process only): loss on this destination's link.
    pub lost: Option<i64>,
    /// Datapoints that should land here if the relay routes with carbon_ch over the sinks as
    /// named by the harness (`127.0.0.1:PORT:a`, …) with replication 1.
    pub expected: Option<u64>,
    /// `expected − delivered`: this destination's loss under that routing assumption.
    pub placement_lost: Option<i64>,
    /// Distinct names seen (when recording).
    pub distinct_names: Option<u64>,
}

/// Latency percentiles in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Datapoints with a latency measurement.
    pub count: u64,
    /// Median.
    pub p50_us: Option<u64>,
    /// 99th percentile.
    pub p99_us: Option<u64>,
    /// 99.9th percentile.
    pub p999_us: Option<u64>,
    /// Maximum.
    pub max_us: Option<u64>,
}

/// One 100 ms sample.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the first byte was sent.
    pub t: f64,
    /// Datapoints/s written by the generator in this interval.
    pub sent_rate: f64,
    /// Datapoints/s received by the sinks in this interval.
    pub delivered_rate: f64,
    /// Median latency of datapoints received in this interval (ms).
    pub p50_ms: Option<f64>,
    /// 99th percentile latency in this interval (ms).
    pub p99_ms: Option<f64>,
}

/// "One core sustains X datapoints/s at this CPU cost; Y datapoints/s needs Z cores."
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    /// Datapoints/s one fully busy core sustains at the measured CPU cost.
    pub per_core_rate: f64,
    /// The rate to plan for.
    pub target_rate: f64,
    /// Cores needed for `target_rate` running at most 70 % busy.
    pub cores_needed: f64,
}

impl Capacity {
    /// Derives the estimate from CPU seconds per million datapoints.
    pub fn estimate(cpu_secs_per_million: f64, target_rate: f64) -> Option<Capacity> {
        if !(cpu_secs_per_million > 0.0 && target_rate > 0.0) {
            return None;
        }
        let per_core_rate = 1e6 / cpu_secs_per_million;
        Some(Capacity {
            per_core_rate,
            target_rate,
            cores_needed: target_rate / (per_core_rate * (1.0 - HEADROOM)),
        })
    }

    /// The sentence printed under the table.
    pub fn sentence(&self) -> String {
        format!(
            "one core sustains {} datapoints/s at this CPU cost; {} datapoints/s needs {:.1} cores \
             with {:.0} % headroom",
            si(self.per_core_rate),
            si(self.target_rate),
            self.cores_needed,
            HEADROOM * 100.0
        )
    }
}

/// Width of a table's relay column: its longest name, at least 5 (`relay`).
pub fn name_width(names: &[String]) -> usize {
    names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .max(5)
}

/// `1234567.0` → `1.23M`.
pub fn si(v: f64) -> String {
    match v.abs() {
        x if x >= 1e9 => format!("{:.2}G", v / 1e9),
        x if x >= 1e6 => format!("{:.2}M", v / 1e6),
        x if x >= 1e3 => format!("{:.1}k", v / 1e3),
        _ => format!("{v:.0}"),
    }
}

fn us(v: Option<u64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v >= 1_000_000 => format!("{:.2} s", v as f64 / 1e6),
        Some(v) if v >= 1_000 => format!("{:.2} ms", v as f64 / 1e3),
        Some(v) => format!("{v} µs"),
    }
}

impl Report {
    /// Percentiles are ordered and counts add up (a sanity check used by tests and `run`).
    pub fn is_consistent(&self) -> bool {
        let l = &self.latency;
        let ordered = match (l.p50_us, l.p99_us, l.p999_us, l.max_us) {
            (Some(a), Some(b), Some(c), Some(d)) => a <= b && b <= c && c <= d,
            (None, None, None, None) => l.count == 0,
            _ => false,
        };
        let sum: u64 = self.sinks.iter().map(|s| s.delivered).sum();
        ordered
            && sum == self.delivered
            && (self.lost == self.expected_copies() as i64 - self.delivered as i64
                || (self.aggregates_only && self.lost == 0))
    }

    /// Copies the sinks should have received: every datapoint sent, once per replica.
    pub fn expected_copies(&self) -> u64 {
        self.sent * self.copies.max(1)
    }

    /// [`lost`](Self::lost) as a percentage of [`expected_copies`](Self::expected_copies).
    pub fn loss_percent(&self) -> f64 {
        match self.expected_copies() {
            0 => 0.0,
            n => self.lost as f64 * 100.0 / n as f64,
        }
    }

    /// The final human-readable table.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let rate = if self.offered_rate > 0.0 {
            format!("{}/s", si(self.offered_rate))
        } else {
            "max".into()
        };
        let _ = writeln!(
            t,
            "scenario {}  target {}  {} → relay → {} ×{}  {} conns  {} names  rate {}",
            self.scenario,
            self.target,
            self.protocol,
            self.sink_protocol,
            self.sinks.len(),
            self.connections,
            si(self.names as f64),
            rate
        );
        let row = |t: &mut String, k: &str, v: String| {
            let _ = writeln!(t, "  {k:<28} {v}");
        };
        row(
            &mut t,
            "sent",
            format!(
                "{} in {:.2} s ({}/s)",
                self.sent,
                self.send_secs,
                si(self.send_rate)
            ),
        );
        row(
            &mut t,
            "delivered",
            format!("{} in {:.2} s", self.delivered, self.delivery_secs),
        );
        row(
            &mut t,
            "throughput",
            format!("{} datapoints/s", si(self.delivered_rate)),
        );
        if let Some(series) = self.series {
            row(
                &mut t,
                "output series",
                format!("{series} (aggregates only: nothing passed on)"),
            );
        }
        let lost = if self.copies > 1 {
            "lost (sent × copies − delivered)"
        } else {
            "lost (sent − delivered)"
        };
        row(
            &mut t,
            lost,
            format!("{} ({:.3} %)", self.lost, self.loss_percent()),
        );
        for s in &self.sinks {
            let mut extra = match (s.expected, s.placement_lost) {
                (Some(e), Some(l)) => format!(", expected {e} (carbon_ch), lost {l}"),
                _ => String::new(),
            };
            if let (Some(rs), Some(l)) = (s.relay_sent, s.lost) {
                extra.push_str(&format!(
                    "; relay sent {rs}, dropped {}, link loss {l}",
                    s.relay_dropped.unwrap_or(0)
                ));
            }
            row(
                &mut t,
                &format!("  sink {} {}", s.index, s.addr),
                format!(
                    "{} delivered, {} bad, {} conns{extra}",
                    s.delivered, s.bad, s.connections
                ),
            );
        }
        let l = &self.latency;
        row(
            &mut t,
            "latency p50 / p99 / p999",
            format!(
                "{} / {} / {}  (max {})",
                us(l.p50_us),
                us(l.p99_us),
                us(l.p999_us),
                us(l.max_us)
            ),
        );
        row(
            &mut t,
            "relay CPU",
            match (self.relay_cpu_secs, self.cpu_secs_per_million) {
                (Some(c), Some(m)) => format!("{c:.2} s  ({m:.3} CPU-s per million datapoints)"),
                (Some(c), None) => format!("{c:.2} s"),
                _ => "not measured".into(),
            },
        );
        if let (Some(all), Some(system)) = (self.relay_cpu_secs, self.relay_system_cpu_secs)
            && all > 0.0
        {
            row(
                &mut t,
                "  of which kernel",
                format!("{system:.2} s ({:.0} %)", 100.0 * system / all),
            );
        }
        if let Some(h) = self.harness_cpu_secs {
            row(&mut t, "harness CPU (generator+sinks)", format!("{h:.2} s"));
        }
        row(
            &mut t,
            "peak RSS",
            match self.peak_rss_bytes {
                Some(b) => format!("{:.1} MiB ({})", b as f64 / 1048576.0, self.rss_scope),
                None => "not measured".into(),
            },
        );
        row(
            &mut t,
            "generator ceiling",
            format!("{} datapoints/s", si(self.generator_ceiling_rate)),
        );
        if let Some(c) = self.placement_conflicts {
            row(&mut t, "names on >1 sink", c.to_string());
        }
        if let Some(c) = &self.capacity {
            let _ = writeln!(t, "capacity: {}", c.sentence());
        }
        for n in &self.notes {
            let _ = writeln!(t, "note: {n}");
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_keeps_headroom() {
        let c = Capacity::estimate(2.0, 1_000_000.0).unwrap();
        assert_eq!(c.per_core_rate, 500_000.0);
        assert!((c.cores_needed - 2.0 / 0.7).abs() < 1e-9);
        assert!(c.sentence().contains("500.0k datapoints/s"));
        assert!(Capacity::estimate(0.0, 1.0).is_none());
    }

    #[test]
    fn table_and_json_round_trip() {
        let r = Report {
            sent: 10,
            delivered: 10,
            sinks: vec![SinkReport {
                delivered: 10,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(r.is_consistent());
        assert!(r.table().contains("throughput"));
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn replicated_loss_counts_against_every_copy() {
        // 10 datapoints, two copies each, 15 copies delivered: 5 of 20 lost, 25 %.
        let r = Report {
            sent: 10,
            copies: 2,
            delivered: 15,
            lost: 5,
            sinks: vec![SinkReport {
                delivered: 15,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(r.is_consistent());
        assert_eq!(r.expected_copies(), 20);
        assert!((r.loss_percent() - 25.0).abs() < 1e-9);
        assert!(r.table().contains("lost (sent × copies − delivered)"));
        let single = Report {
            copies: 0,
            ..r.clone()
        };
        assert!(
            !single.is_consistent(),
            "one copy each: 10 sent, 15 delivered is not 5 lost"
        );
        assert!(single.table().contains("lost (sent − delivered)"));
    }
}
