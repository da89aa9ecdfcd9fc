//! Message payload → datapoints: Graphite lines or one carbon pickle payload per message.

use crate::config::MessageFormat;
use anthracite::Ingestor;

use super::stats::BadMessage;

/// What one message held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Fed {
    /// Non-empty lines, or pickle entries.
    pub lines: u64,
    /// Why it held no datapoint (`None`: it held at least one, or was empty).
    pub bad: Option<BadMessage>,
}

/// Decodes payloads into an ingestor (which keeps the pickle decoder's scratch space between
/// messages).
#[derive(Debug)]
pub(crate) struct Payloads {
    format: MessageFormat,
    max_line: usize,
}

impl Payloads {
    pub(crate) fn new(format: MessageFormat, max_line: usize) -> Self {
        Self { format, max_line }
    }

    /// Feeds one message to `ingestor`. Rejected lines and entries are counted there, with
    /// their reasons.
    pub(crate) fn feed(&mut self, payload: &[u8], ingestor: &mut Ingestor) -> Fed {
        match self.format {
            MessageFormat::Lines => {
                let seen = ingestor.message(payload, self.max_line);
                Fed {
                    lines: seen.lines,
                    bad: (seen.lines > 0 && seen.invalid == seen.lines)
                        .then_some(BadMessage::NotGraphite),
                }
            }
            MessageFormat::Pickle => match ingestor.pickle_payload(payload) {
                Ok(entries) => Fed {
                    lines: entries,
                    bad: None,
                },
                Err(_) => Fed {
                    lines: 0,
                    bad: Some(BadMessage::BadPickle),
                },
            },
        }
    }
}
