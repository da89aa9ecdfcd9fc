//! carbon's pickle protocol. (Stub: implemented by the protocol work.)

use bytes::BytesMut;

use super::{DropCounts, DropReason};
use crate::batch::Datapoint;

/// Default maximum frame length (carbon's `PICKLE_RECEIVER_MAX_LENGTH`, 1 MiB).
pub const DEFAULT_MAX_FRAME: usize = 1 << 20;

/// A reusable, safe pickle decoder (scratch buffers kept between frames).
#[derive(Debug, Default)]
pub struct PickleDecoder {}

impl PickleDecoder {
    /// A new decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one frame payload (length prefix already removed). A frame that does not decode
    /// is rejected whole (`Err(BadPickle)`); otherwise each well-formed entry is passed to
    /// `emit(name, timestamp, value)` and each malformed entry is counted in `drops`.
    /// Returns the number of entries emitted.
    pub fn decode(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        emit: impl FnMut(&[u8], f64, f64),
    ) -> Result<usize, DropReason> {
        let _ = (payload, drops, emit);
        todo!("protocol work")
    }
}

/// Appends one framed message (4-byte big-endian length + protocol-2 pickle of
/// `[(name, (timestamp, value)), …]`) holding every datapoint of `points`.
pub fn encode_message<'a>(points: impl Iterator<Item = Datapoint<'a>>, out: &mut BytesMut) {
    let _ = (points, out);
    todo!("protocol work")
}
