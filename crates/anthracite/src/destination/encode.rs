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
        let mut points = batches.iter().flat_map(|b| b.iter());
        let mut e = Encoded::default();
        match self.protocol {
            OutputProtocol::Line | OutputProtocol::Udp => {
                for dp in points {
                    line::encode_line(dp, out);
                }
                e.datapoints = total;
                e.messages = usize::from(total > 0);
            }
            OutputProtocol::Pickle => {
                let mut left = total;
                while left > 0 {
                    let n = left.min(self.per_message);
                    pickle::encode_message(points.by_ref().take(n), out);
                    left -= n;
                    e.messages += 1;
                }
                e.datapoints = total;
            }
            OutputProtocol::Protobuf => {
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
