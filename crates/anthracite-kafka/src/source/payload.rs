//! Message payload → datapoints: Graphite lines or one carbon pickle payload per message.

use crate::config::kafka::MessageFormat;
use crate::ingest::{Ingestor, Pushed};
use crate::protocol::pickle::PickleDecoder;
use crate::protocol::{DropCounts, DropReason};

use super::kafka_stats::BadMessage;

/// What one message held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Fed {
    /// Non-empty lines, or pickle entries.
    pub lines: u64,
    /// Why it held no datapoint (`None`: it held at least one, or was empty).
    pub bad: Option<BadMessage>,
}

/// Decodes payloads into an ingestor; keeps the pickle decoder's scratch space between
/// messages.
#[derive(Debug)]
pub(crate) struct Payloads {
    format: MessageFormat,
    max_line: usize,
    pickle: PickleDecoder,
    drops: DropCounts,
}

impl Payloads {
    pub(crate) fn new(format: MessageFormat, max_line: usize) -> Self {
        Self {
            format,
            max_line,
            pickle: PickleDecoder::new(),
            drops: DropCounts::default(),
        }
    }

    /// Feeds one message to `ingestor`. Rejected lines and entries are counted there, with
    /// their reasons.
    pub(crate) fn feed(&mut self, payload: &[u8], ingestor: &mut Ingestor) -> Fed {
        match self.format {
            MessageFormat::Lines => feed_lines(payload, self.max_line, ingestor),
            MessageFormat::Pickle => self.feed_pickle(payload, ingestor),
        }
    }

    fn feed_pickle(&mut self, payload: &[u8], ingestor: &mut Ingestor) -> Fed {
        if payload.is_empty() {
            return Fed::default();
        }
        let decoded = self
            .pickle
            .decode_batched(payload, &mut self.drops, |run| ingestor.push_run(run));
        if !self.drops.is_empty() {
            ingestor.add_drops(&self.drops);
            self.drops.clear();
        }
        match decoded {
            Ok(entries) => Fed {
                lines: entries as u64,
                bad: None,
            },
            Err(reason) => {
                ingestor.reject(reason);
                Fed {
                    lines: 0,
                    bad: Some(BadMessage::BadPickle),
                }
            }
        }
    }
}

/// Feeds every line of one message to `ingestor`: a message is complete, so the rules are
/// those of a UDP datagram (split on `\n` and `\r`, skip empty lines, the last line needs no
/// newline); lines over `max_line` bytes are counted as `too_long`.
fn feed_lines(text: &[u8], max_line: usize, ingestor: &mut Ingestor) -> Fed {
    let (mut lines, mut invalid) = (0u64, 0u64);
    for line in text.split(|&b| b == b'\n' || b == b'\r') {
        if line.is_empty() {
            continue;
        }
        lines += 1;
        let pushed = if line.len() > max_line {
            ingestor.reject(DropReason::TooLong)
        } else {
            ingestor.line(line)
        };
        if matches!(pushed, Pushed::Invalid(_)) {
            invalid += 1;
        }
    }
    Fed {
        lines,
        bad: (lines > 0 && invalid == lines).then_some(BadMessage::NotGraphite),
    }
}
