//! In-flight batches → the bytes of one stream write (pickle, plaintext or protobuf).

use bytes::BytesMut;

use super::OutputProtocol;
use crate::batch::Batch;
use crate::protocol::protobuf::ProtobufEncoder;
use crate::protocol::{line, pickle};

/// What one [`Encoder::encode`] produced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Encoded {
    /// Datapoints written into the buffer.
    pub datapoints: usize,
    /// Messages (pickle or protobuf frames; one per write for plaintext).
    pub messages: usize,
    /// Datapoints the wire format cannot carry, left out (protobuf: a timestamp outside
    /// `uint32`, a name that is not UTF-8); counted as dropped once the write is confirmed.
    pub unencodable: usize,
}

/// Encoding state reused across writes and connections.
#[derive(Debug)]
pub(crate) struct Encoder {
    protocol: OutputProtocol,
    per_message: usize,
    protobuf: ProtobufEncoder,
}

impl Encoder {
    pub(crate) fn new(protocol: OutputProtocol, per_message: usize) -> Self {
        Self {
            protocol,
            per_message: per_message.max(1),
            protobuf: ProtobufEncoder::new(),
        }
    }

    /// Appends every datapoint of `batches` to `out`: messages of at most `per_message`
    /// datapoints for pickle and protobuf (carbon's `MAX_DATAPOINTS_PER_MESSAGE`), lines
    /// otherwise.
    pub(crate) fn encode(&mut self, batches: &[Batch], out: &mut BytesMut) -> Encoded {
        let total: usize = batches.iter().map(Batch::len).sum();
        let mut e = Encoded::default();
        match self.protocol {
            OutputProtocol::Line | OutputProtocol::Udp => {
                for dp in batches.iter().flat_map(Batch::iter) {
                    line::encode_line(dp, out);
                }
                e.datapoints = total;
                e.messages = usize::from(total > 0);
            }
            OutputProtocol::Pickle => {
                // A message may span batches: each batch goes in as runs, a run ending where
                // the batch or the message does.
                let mut message: Option<pickle::MessageWriter> = None;
                for b in batches {
                    let mut at = 0;
                    while at < b.len() {
                        let m = message.get_or_insert_with(|| pickle::MessageWriter::begin(out));
                        let n = (self.per_message - m.entries()).min(b.len() - at);
                        m.put_run(b, at..at + n, out);
                        at += n;
                        if m.entries() >= self.per_message {
                            if let Some(full) = message.take() {
                                full.finish(out);
                            }
                            e.messages += 1;
                        }
                    }
                }
                if let Some(last) = message {
                    last.finish(out);
                    e.messages += 1;
                }
                e.datapoints = total;
            }
            OutputProtocol::Protobuf => {
                let mut points = batches.iter().flat_map(Batch::iter);
                let mut left = total;
                while left > 0 {
                    let n = left.min(self.per_message);
                    let mut skipped = 0;
                    let written =
                        self.protobuf
                            .encode_message(points.by_ref().take(n), out, |_| skipped += 1);
                    left -= n;
                    e.datapoints += written;
                    e.unencodable += skipped;
                    e.messages += 1;
                }
            }
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pickle_runs_across_batches_write_the_bytes_of_one_entry_at_a_time() {
        // Batches of 0 to 9 datapoints, names of lengths spread over 0 to 300 bytes, split into
        // messages at every size from 1 to 12: the runs written into room made at once must
        // be byte for byte what entries written part by part give.
        let mut batches = Vec::new();
        let mut all = Vec::new();
        let mut i = 0usize;
        for size in [3, 0, 9, 1, 7, 0, 5, 8, 2, 6, 4, 9] {
            let mut b = Batch::new();
            for _ in 0..size {
                let name: Vec<u8> = (0..i * 37 % 301).map(|k| b'!' + (k % 90) as u8).collect();
                let (t, v) = (1.7e9 + i as f64, -(i as f64) / 3.0);
                b.push(&name, t, v).expect("batch has room");
                all.push((name, t, v));
                i += 1;
            }
            batches.push(b);
        }
        for per_message in 1..=12 {
            let mut out = BytesMut::new();
            let e = Encoder::new(OutputProtocol::Pickle, per_message).encode(&batches, &mut out);
            let mut want = BytesMut::new();
            for chunk in all.chunks(per_message) {
                pickle::encode_message(
                    chunk
                        .iter()
                        .map(|(name, timestamp, value)| crate::batch::Datapoint {
                            name,
                            timestamp: *timestamp,
                            value: *value,
                        }),
                    &mut want,
                );
            }
            assert_eq!(out, want, "{per_message} per message");
            assert_eq!(
                (e.datapoints, e.messages),
                (all.len(), all.len().div_ceil(per_message))
            );
        }
    }

    #[test]
    fn messages_hold_at_most_per_message_datapoints() {
        let mut b = Batch::new();
        for i in 0..5 {
            b.push(b"a.b", 1_700_000_000.0 + f64::from(i), 1.0)
                .expect("batch has room");
        }
        b.push(b"neg", -5.0, 1.0).expect("batch has room");
        for protocol in [OutputProtocol::Pickle, OutputProtocol::Protobuf] {
            let mut out = BytesMut::new();
            let e = Encoder::new(protocol, 2).encode(std::slice::from_ref(&b), &mut out);
            let (datapoints, unencodable) = match protocol {
                OutputProtocol::Protobuf => (5, 1),
                _ => (6, 0),
            };
            assert_eq!(
                e,
                Encoded {
                    datapoints,
                    messages: 3,
                    unencodable
                },
                "{protocol:?}"
            );
        }
        let mut out = BytesMut::new();
        let e = Encoder::new(OutputProtocol::Line, 2).encode(&[b], &mut out);
        assert_eq!((e.datapoints, e.messages), (6, 1));
        assert_eq!(out.iter().filter(|&&c| c == b'\n').count(), 6);
    }
}
