//! Warnings a client connection can cause, logged per episode for the whole relay.
//!
//! A client that reconnects in a loop and misbehaves once per connection (an over-limit length
//! prefix, a frame that decodes into more than the budget) would otherwise write one line per
//! connection: 142,680 lines in 10 s from one client. Each kind of warning is one relay-wide
//! episode (`crate::episode`): at most one line per 10 s, carrying the counts since the
//! previous one. The drops themselves are counted per datapoint
//! or frame by the ingest books, whatever is logged.

use std::sync::Mutex;
use std::time::Instant;

use tracing::warn;

use crate::episode::{Episode, Line};
use crate::ingest::Source;

/// The relay-wide episodes of per-connection warnings; see the [module documentation](self).
#[derive(Debug, Default)]
pub(crate) struct ConnectionWarnings {
    frame_too_long: Mutex<Episode>,
    decoded_too_large: Mutex<Episode>,
    decompression_refused: Mutex<Episode>,
}

/// Runs `occurred` on one episode (a poisoned lock still holds a usable episode).
fn occurred(episode: &Mutex<Episode>, amount: u64) -> Option<Line> {
    let mut e = episode.lock().unwrap_or_else(|p| p.into_inner());
    e.occurred(amount, Instant::now())
}

impl ConnectionWarnings {
    /// A length prefix over the frame limit closed a connection.
    pub(crate) fn frame_too_long(&self, source: Source, length: usize, limit: usize) {
        match occurred(&self.frame_too_long, 1) {
            Some(Line::Started(_)) => warn!(
                source = source.as_str(),
                length,
                limit,
                "frame over the limit; closing the connection (further ones are counted, \
                 logged at most every 10 s)"
            ),
            Some(Line::Ongoing(c)) => warn!(
                source = source.as_str(),
                length,
                limit,
                connections = c.occurrences,
                over = ?c.over,
                "frames over the limit still closing connections"
            ),
            _ => {}
        }
    }

    /// A frame decoded into more than the whole decoded-size budget and was dropped.
    pub(crate) fn decoded_too_large(&self, source: Source, decoded: usize, budget: usize) {
        match occurred(&self.decoded_too_large, 1) {
            Some(Line::Started(_)) => warn!(
                source = source.as_str(),
                decoded,
                budget,
                "frame decodes into more than the decoded-size budget; dropped \
                 (further ones are counted, logged at most every 10 s)"
            ),
            Some(Line::Ongoing(c)) => warn!(
                source = source.as_str(),
                decoded,
                budget,
                frames = c.occurrences,
                over = ?c.over,
                "frames still decoding into more than the budget"
            ),
            _ => {}
        }
    }

    /// A compressed connection was closed: a unit decoding past the budget, or bytes not of
    /// its format (`reason`).
    pub(crate) fn decompression_refused(
        &self,
        source: Source,
        reason: crate::protocol::DropReason,
        budget: usize,
    ) {
        match occurred(&self.decompression_refused, 1) {
            Some(Line::Started(_)) => warn!(
                source = source.as_str(),
                reason = reason.as_str(),
                budget,
                "compressed connection refused (a unit decoding past the budget, or not of its \
                 format); closing it (further ones are counted, logged at most every 10 s)"
            ),
            Some(Line::Ongoing(c)) => warn!(
                source = source.as_str(),
                reason = reason.as_str(),
                budget,
                connections = c.occurrences,
                over = ?c.over,
                "compressed connections still refused"
            ),
            _ => {}
        }
    }
}
