//! Drops are logged once per episode, with counts, never per datapoint.
//!
//! A background task reads the books every [`CHECK`] and compares them with the previous
//! read: the first increase of a destination's drop counters (or of the parsers' rejections)
//! opens an episode and logs one warning with the counts per reason; the episode ends after
//! [`QUIET`] without a new drop, with one line giving its totals and duration. So a
//! destination dropping for an hour logs two lines, and the data path never logs at all.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::reporter::Books;
use super::snapshot::StatsSnapshot;
use crate::protocol::DropReason;
use crate::queue::DestinationDropReason;

/// How often the books are read.
pub(crate) const CHECK: Duration = Duration::from_secs(1);

/// How long without a new drop ends an episode.
pub(crate) const QUIET: Duration = Duration::from_secs(10);

/// What to log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// An episode began: who, and the drops per reason seen so far.
    Began(String, Vec<(&'static str, u64)>),
    /// An episode ended: who, the drops per reason over the episode, its length.
    Ended(String, Vec<(&'static str, u64)>, Duration),
}

#[derive(Debug)]
struct Episode {
    since: Instant,
    last_drop: Instant,
    counts: Vec<u64>,
}

#[derive(Debug, Default)]
struct Track {
    last: Vec<u64>,
    episode: Option<Episode>,
}

/// Open episodes, per destination and for the parsers.
#[derive(Debug, Default)]
pub(crate) struct Episodes {
    tracks: HashMap<String, Track>,
}

/// The parsers' reasons that open an episode: all but [`DropReason::Blackholed`], which a
/// carbon-c-relay configuration asks for (`send to blackhole`) and which is only counted.
fn episode_reasons() -> impl Iterator<Item = DropReason> {
    DropReason::ALL
        .into_iter()
        .filter(|&r| r != DropReason::Blackholed)
}

/// The counters watched: `(who, reason labels, counts)`.
fn watched(s: &StatsSnapshot) -> Vec<(String, Vec<&'static str>, Vec<u64>)> {
    let mut out = vec![(
        "invalid datapoints".to_string(),
        episode_reasons().map(DropReason::as_str).collect(),
        episode_reasons().map(|r| s.ingest.invalid.get(r)).collect(),
    )];
    for d in s.destinations.iter().chain(&s.removed) {
        out.push((
            format!("destination {}", d.name),
            DestinationDropReason::ALL
                .iter()
                .map(|r| r.as_str())
                .collect(),
            DestinationDropReason::ALL
                .iter()
                .map(|&r| d.dropped(r))
                .collect(),
        ));
    }
    out
}

fn nonzero(labels: &[&'static str], counts: &[u64]) -> Vec<(&'static str, u64)> {
    labels
        .iter()
        .zip(counts)
        .filter(|(_, n)| **n > 0)
        .map(|(l, n)| (*l, *n))
        .collect()
}

impl Episodes {
    /// Starts from the counters in `s` (drops before now are not an episode).
    pub(crate) fn new(s: &StatsSnapshot) -> Self {
        let mut e = Self::default();
        for (who, _, counts) in watched(s) {
            e.tracks.insert(
                who,
                Track {
                    last: counts,
                    episode: None,
                },
            );
        }
        e
    }

    /// Compares `s` with the previous read.
    pub(crate) fn observe(&mut self, s: &StatsSnapshot, now: Instant) -> Vec<Event> {
        let mut events = Vec::new();
        for (who, labels, counts) in watched(s) {
            let track = self.tracks.entry(who.clone()).or_default();
            let delta: Vec<u64> = counts
                .iter()
                .enumerate()
                .map(|(i, n)| n.saturating_sub(track.last.get(i).copied().unwrap_or(0)))
                .collect();
            track.last = counts;
            if delta.iter().any(|&n| n > 0) {
                match &mut track.episode {
                    Some(e) => {
                        for (total, n) in e.counts.iter_mut().zip(&delta) {
                            *total += n;
                        }
                        e.last_drop = now;
                    }
                    None => {
                        events.push(Event::Began(who, nonzero(&labels, &delta)));
                        track.episode = Some(Episode {
                            since: now,
                            last_drop: now,
                            counts: delta,
                        });
                    }
                }
            } else if let Some(e) = &track.episode
                && now.duration_since(e.last_drop) >= QUIET
            {
                events.push(Event::Ended(
                    who,
                    nonzero(&labels, &e.counts),
                    e.last_drop.duration_since(e.since),
                ));
                track.episode = None;
            }
        }
        events
    }
}

fn counts_text(counts: &[(&'static str, u64)]) -> String {
    counts
        .iter()
        .map(|(r, n)| format!("{r}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Logs drop episodes until `stop` is cancelled.
pub(crate) async fn run(books: Arc<dyn Books>, stop: CancellationToken) {
    let mut episodes = Episodes::new(&books.snapshot());
    let mut ticker = tokio::time::interval(CHECK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        for event in episodes.observe(&books.snapshot(), Instant::now()) {
            match event {
                Event::Began(who, counts) => warn!(
                    drops = %counts_text(&counts),
                    "{who}: dropping datapoints (counted per reason; logged again when the episode ends)"
                ),
                Event::Ended(who, counts, lasted) => info!(
                    drops = %counts_text(&counts),
                    seconds = lasted.as_secs(),
                    "{who}: drop episode over"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{IngestStats, Source};
    use crate::queue::DestinationStats;

    #[test]
    fn one_line_per_episode_start_and_end_with_counts() {
        let ingest = IngestStats::new();
        let dest = DestinationStats::new("h:1:a");
        let snap = || StatsSnapshot::collect(ingest.snapshot(), [&dest]);
        let t0 = Instant::now();
        let mut e = Episodes::new(&snap());
        assert!(e.observe(&snap(), t0).is_empty());
        dest.add_dropped(DestinationDropReason::QueueFull, 5);
        assert_eq!(
            e.observe(&snap(), t0 + CHECK),
            vec![Event::Began(
                "destination h:1:a".into(),
                vec![("queue_full", 5)]
            )]
        );
        // Still dropping: nothing new to say.
        for i in 2..8 {
            dest.add_dropped(DestinationDropReason::QueueFull, 10);
            dest.add_dropped(DestinationDropReason::SpillFull, 1);
            assert!(e.observe(&snap(), t0 + CHECK * i).is_empty());
        }
        let mut drops = crate::protocol::DropCounts::default();
        drops.add(DropReason::BadValue);
        ingest.record_parsed(Source::LineTcp, 0, &drops);
        let events = e.observe(&snap(), t0 + CHECK * 8);
        assert_eq!(
            events,
            vec![Event::Began(
                "invalid datapoints".into(),
                vec![("bad_value", 1)]
            )]
        );
        // Blackholed lines are counted, never an episode.
        drops = crate::protocol::DropCounts::default();
        drops.add(DropReason::Blackholed);
        ingest.record_parsed(Source::LineTcp, 0, &drops);
        assert!(e.observe(&snap(), t0 + CHECK * 7 + QUIET / 4).is_empty());
        // Quiet for less than QUIET: still open.
        assert!(e.observe(&snap(), t0 + CHECK * 7 + QUIET / 2).is_empty());
        let events = e.observe(&snap(), t0 + CHECK * 7 + QUIET);
        assert_eq!(
            events,
            vec![Event::Ended(
                "destination h:1:a".into(),
                vec![("queue_full", 65), ("spill_full", 6)],
                CHECK * 6
            )]
        );
    }
}
