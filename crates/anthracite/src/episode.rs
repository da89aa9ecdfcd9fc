//! Rate-limited logging of a recurring condition (an *episode*): a spill log refusing data, a
//! failing accept, a connection limit reached.
//!
//! Such conditions flap: a spill log at its budget accepts one batch after an acknowledgement
//! frees a record, then refuses the next. Logging every transition floods the log (one line
//! per flap, hundreds per second); logging only the first occurrence hides how long it lasted
//! and how much it cost. An [`Episode`] allows **at most one line per interval**, and every line
//! carries the counts since the previous one, so nothing is hidden and nothing floods:
//!
//! - the first occurrence after a quiet interval gives [`Line::Started`];
//! - further occurrences are counted; the first one an interval after the last line gives
//!   [`Line::Ongoing`] with the counts since that line;
//! - when the condition clears, [`Line::Ended`] is given only once an interval has passed since
//!   the last line (at the clear, or at a later [`Episode::tick`]); if the condition comes
//!   back first, the episode simply continues.
//!
//! A leaf: it imports nothing from the crate, so every layer may use it.

use std::time::{Duration, Instant};

/// Default spacing of an episode's log lines.
pub const EPISODE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// What to log now, with the counts since the previous line of this episode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// The condition started (or came back after a logged end).
    Started(Counts),
    /// Still going on: counts since the previous line.
    Ongoing(Counts),
    /// The condition cleared: counts since the previous line.
    Ended(Counts),
}

/// Occurrences of the condition, and the amount they concerned (datapoints, bytes, …).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Times the condition occurred.
    pub occurrences: u64,
    /// The amount they concerned (the caller's unit).
    pub amount: u64,
    /// Time since the previous line of this episode (zero for a start).
    pub over: Duration,
}

/// One recurring condition's log state. See the [module documentation](self).
#[derive(Clone, Debug)]
pub struct Episode {
    interval: Duration,
    active: bool,
    /// The episode was logged and has not been logged as ended.
    open: bool,
    last_line: Option<Instant>,
    pending: Counts,
}

impl Default for Episode {
    fn default() -> Self {
        Self::new(EPISODE_LOG_INTERVAL)
    }
}

impl Episode {
    /// An episode logged at most once per `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            active: false,
            open: false,
            last_line: None,
            pending: Counts::default(),
        }
    }

    fn due(&self, now: Instant) -> bool {
        self.last_line
            .is_none_or(|t| now.saturating_duration_since(t) >= self.interval)
    }

    fn take(&mut self, now: Instant) -> Counts {
        let mut c = std::mem::take(&mut self.pending);
        c.over = self
            .last_line
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        self.last_line = Some(now);
        c
    }

    /// The condition occurred, concerning `amount`. Returns the line to log, if one is due.
    pub fn occurred(&mut self, amount: u64, now: Instant) -> Option<Line> {
        self.active = true;
        self.pending.occurrences += 1;
        self.pending.amount += amount;
        if !self.due(now) {
            return None;
        }
        if self.open {
            Some(Line::Ongoing(self.take(now)))
        } else {
            self.open = true;
            let mut c = self.take(now);
            c.over = Duration::ZERO;
            Some(Line::Started(c))
        }
    }

    /// The condition cleared. Returns the end line if one is due now; otherwise the end is
    /// logged by a later [`tick`](Self::tick), unless the condition comes back first.
    pub fn cleared(&mut self, now: Instant) -> Option<Line> {
        self.active = false;
        self.tick(now)
    }

    /// Logs a pending end once its interval has passed.
    pub fn tick(&mut self, now: Instant) -> Option<Line> {
        if self.active || !self.open || !self.due(now) {
            return None;
        }
        self.open = false;
        Some(Line::Ended(self.take(now)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flapping_condition_logs_at_most_once_per_interval_with_counts() {
        let mut e = Episode::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut lines = Vec::new();
        // 117 flaps per second for 30 s: full, then accepting again, alternating.
        for i in 0..3510u64 {
            let now = at(i * 1000 / 117);
            lines.extend(e.occurred(5, now));
            lines.extend(e.cleared(now));
        }
        lines.extend(e.tick(at(60_000)));
        // Started at 0, ongoing (or ended, then started) about every 10 s, one final end.
        assert!(lines.len() <= 5, "{lines:?}");
        assert!(matches!(lines.first(), Some(Line::Started(_))));
        assert!(matches!(lines.last(), Some(Line::Ended(_))));
        let total: u64 = lines
            .iter()
            .map(|l| match l {
                Line::Started(c) | Line::Ongoing(c) | Line::Ended(c) => c.occurrences,
            })
            .sum();
        assert_eq!(total, 3510, "every occurrence is reported in some line");
    }

    #[test]
    fn an_isolated_episode_logs_start_and_end() {
        let mut e = Episode::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert!(matches!(e.occurred(3, t0), Some(Line::Started(c)) if c.amount == 3));
        assert_eq!(e.occurred(4, t0 + Duration::from_secs(1)), None);
        assert_eq!(e.cleared(t0 + Duration::from_secs(2)), None);
        assert!(e.tick(t0 + Duration::from_secs(5)).is_none());
        match e.tick(t0 + Duration::from_secs(11)) {
            Some(Line::Ended(c)) => assert_eq!((c.occurrences, c.amount), (1, 4)),
            other => panic!("{other:?}"),
        }
        assert_eq!(e.tick(t0 + Duration::from_secs(30)), None);
        assert!(matches!(
            e.occurred(1, t0 + Duration::from_secs(31)),
            Some(Line::Started(_))
        ));
    }
}
