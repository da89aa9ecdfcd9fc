//! Live progress of a run on stderr: an indicatif bar on a terminal, plain lines every
//! [`LINE_EVERY`] otherwise (a run under CI, `nohup` or `2> log` would print nothing for
//! minutes with a bar, since indicatif draws nothing when stderr is not a terminal).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::report::si;

/// Interval between progress lines when stderr is not a terminal.
pub const LINE_EVERY: Duration = Duration::from_secs(5);

/// What the sampler reports at each tick.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tick {
    /// Seconds since sending started.
    pub t: f64,
    /// Datapoints written so far.
    pub sent: u64,
    /// Datapoints counted by the sinks so far.
    pub delivered: u64,
    /// Delivered datapoints/s over the last sample interval.
    pub delivered_rate: f64,
    /// p99 latency of the last sample interval (ms).
    pub p99_ms: Option<f64>,
}

/// How progress is shown.
pub enum Progress {
    /// Nothing (`--no-progress`).
    Off,
    /// A bar redrawn in place (stderr is a terminal).
    Bar(ProgressBar),
    /// A line every [`LINE_EVERY`] (stderr is a file or a pipe).
    Lines {
        /// Printed before every line, e.g. the relay and the offered rate of a sweep step.
        label: String,
        /// When the last line was printed.
        last: Option<Instant>,
    },
}

impl Progress {
    /// Progress for a run expected to deliver `expected` datapoints (0 = unknown); a bar on a
    /// terminal, lines otherwise, nothing when `enabled` is false.
    pub fn new(enabled: bool, label: &str, expected: u64) -> Self {
        if !enabled {
            return Progress::Off;
        }
        if !std::io::stderr().is_terminal() {
            eprintln!("{}", start_line(label, expected));
            return Progress::Lines {
                label: label.to_string(),
                last: Some(Instant::now()),
            };
        }
        let bar = ProgressBar::with_draw_target(Some(expected), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{prefix} {bar:40} {pos}/{len} delivered  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        if !label.is_empty() {
            bar.set_prefix(label.to_string());
        }
        Progress::Bar(bar)
    }

    /// Shows one sampler tick.
    pub fn update(&mut self, tick: Tick) {
        match self {
            Progress::Off => {}
            Progress::Bar(b) => {
                b.set_position(tick.delivered);
                b.set_message(format!(
                    "sent {}  {} dp/s delivered",
                    tick.sent,
                    si(tick.delivered_rate)
                ));
            }
            Progress::Lines { label, last } => {
                if last.is_none_or(|l| l.elapsed() >= LINE_EVERY) {
                    eprintln!("{}", tick_line(label, &tick));
                    *last = Some(Instant::now());
                }
            }
        }
    }

    /// Ends the display: clears the bar, or prints a last line with the final counts.
    pub fn finish(self, tick: Tick) {
        match self {
            Progress::Off => {}
            Progress::Bar(b) => b.finish_and_clear(),
            Progress::Lines { label, .. } => eprintln!("{}", done_line(&label, &tick)),
        }
    }
}

fn prefix(label: &str) -> String {
    if label.is_empty() {
        "bench:".into()
    } else {
        format!("bench [{label}]:")
    }
}

/// The line printed when a run starts.
pub fn start_line(label: &str, expected: u64) -> String {
    if expected > 0 {
        format!("{} sending, {expected} datapoints expected", prefix(label))
    } else {
        format!("{} sending", prefix(label))
    }
}

/// One progress line, e.g.
/// `bench [anthracite 100.0k/s]: 5 s  sent 500123  delivered 499870 (99.8k dp/s)  p99 4.2 ms`.
pub fn tick_line(label: &str, t: &Tick) -> String {
    let p99 = t
        .p99_ms
        .map_or_else(|| "-".to_string(), |v| format!("{v:.1} ms"));
    format!(
        "{} {:.0} s  sent {}  delivered {} ({} dp/s)  p99 {p99}",
        prefix(label),
        t.t,
        t.sent,
        t.delivered,
        si(t.delivered_rate)
    )
}

/// The line printed when a run ends, with its totals.
pub fn done_line(label: &str, t: &Tick) -> String {
    format!(
        "{} done after {:.1} s: sent {}, delivered {}",
        prefix(label),
        t.t,
        t.sent,
        t.delivered
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_name_the_run_and_its_counts() {
        let t = Tick {
            t: 5.04,
            sent: 500,
            delivered: 499,
            delivered_rate: 99_800.0,
            p99_ms: Some(4.31),
        };
        assert_eq!(
            tick_line("x 100.0k/s", &t),
            "bench [x 100.0k/s]: 5 s  sent 500  delivered 499 (99.8k dp/s)  p99 4.3 ms"
        );
        assert!(tick_line("", &Tick::default()).starts_with("bench: 0 s"));
        assert!(start_line("", 10).contains("10 datapoints expected"));
        assert_eq!(
            done_line("x", &t),
            "bench [x]: done after 5.0 s: sent 500, delivered 499"
        );
        // Off prints nothing and holds nothing.
        let mut off = Progress::new(false, "x", 1);
        off.update(t);
        assert!(matches!(off, Progress::Off));
    }
}
