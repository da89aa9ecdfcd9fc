//! Length-prefixed receivers (pickle, protobuf): a `u32` big-endian length, then one message,
//! as Twisted's `Int32StringReceiver` reads them.
//!
//! A frame larger than the connection's read buffer needs room from the relay-wide frame
//! budget before it is read (see [`buffer`](super::buffer)); the connection waits for it (its
//! client sees TCP back-pressure) and gives it back once the frame is decoded.

use bytes::Buf;
use tokio::sync::OwnedSemaphorePermit;
use tracing::warn;

use super::ReceiverContext;
use super::admission::Admitted;
use super::buffer::ReadBuffer;
use super::tcp::{Connection, Read, evicted, read_more};
use crate::ingest::Source;
use crate::protocol::pickle::PickleDecoder;
use crate::protocol::protobuf::ProtobufDecoder;
use crate::protocol::{DropCounts, DropReason};

/// A run of decoded datapoints `(name, timestamp, value)`.
type Run<'a> = [(&'a [u8], f64, f64)];

/// Decodes one frame's payload: the datapoints to `on_run` in runs, in order, each malformed
/// entry counted in `drops`; `Err` rejects the whole frame.
pub(crate) trait FrameDecoder {
    /// Decodes `payload` (length prefix removed).
    fn decode_frame(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        on_run: impl FnMut(&Run<'_>),
    ) -> Result<usize, DropReason>;

    /// Scratch bytes kept between frames (accounted with the receive buffers).
    fn scratch_bytes(&self) -> usize;
}

impl FrameDecoder for PickleDecoder {
    fn decode_frame(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        on_run: impl FnMut(&Run<'_>),
    ) -> Result<usize, DropReason> {
        self.decode_batched(payload, drops, on_run)
    }

    fn scratch_bytes(&self) -> usize {
        PickleDecoder::scratch_bytes(self)
    }
}

impl FrameDecoder for ProtobufDecoder {
    fn decode_frame(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        mut on_run: impl FnMut(&Run<'_>),
    ) -> Result<usize, DropReason> {
        // The decoder's names borrow the payload one datapoint at a time: runs of one.
        self.decode(payload, drops, |name, ts, value| {
            on_run(&[(name, ts, value)])
        })
    }

    fn scratch_bytes(&self) -> usize {
        ProtobufDecoder::scratch_bytes(self)
    }
}

/// Serves one pickle connection.
pub async fn serve_pickle(conn: Connection) {
    let max = conn.ctx.max_pickle_frame;
    serve_framed(conn, Source::PickleTcp, PickleDecoder::new(), max).await;
}

/// Serves one protobuf connection.
pub async fn serve_protobuf(conn: Connection) {
    let max = conn.ctx.max_protobuf_frame;
    serve_framed(conn, Source::ProtobufTcp, ProtobufDecoder::new(), max).await;
}

/// A frame that does not decode is dropped and counted and the connection continues; a
/// length prefix over `max_frame` closes it (framing is lost).
async fn serve_framed(
    conn: Connection,
    source: Source,
    mut decoder: impl FrameDecoder,
    max_frame: usize,
) {
    let Connection {
        mut stream,
        ctx,
        admitted,
    } = conn;
    let stats = ctx.pipeline.stats().clone();
    let mut ingestor = ctx.pipeline.ingestor(source);
    let mut decoder_bytes = 0;
    let mut rb = ReadBuffer::new(stats.clone());
    let mut entry_drops = DropCounts::default();
    'conn: loop {
        match read_more(&mut stream, &mut rb, &ctx, admitted.as_ref()).await {
            Read::Data => {}
            end => {
                end.note_end(source, &ctx);
                break;
            }
        }
        while rb.len() >= 4 {
            let b = rb.bytes();
            let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
            if len > max_frame {
                ingestor.reject(DropReason::FrameTooLong);
                warn!(
                    source = source.as_str(),
                    length = len,
                    limit = max_frame,
                    "frame over the limit; closing the connection"
                );
                // Framing is lost: what follows is not a partial frame, so it is not counted
                // again as unterminated.
                rb.bytes().clear();
                break 'conn;
            }
            let total = 4 + len;
            if rb.len() < total {
                let budget = match rb.budget_needed(total) {
                    Some(bytes) => match frame_budget(&ctx, bytes, admitted.as_ref()).await {
                        Some(permit) => Some(permit),
                        // Shut down or evicted while waiting: the partial frame is counted
                        // below as unterminated.
                        None => break 'conn,
                    },
                    None => None,
                };
                rb.reserve_frame(total, budget);
                break;
            }
            let frame = &rb.bytes()[4..total];
            let result = decoder.decode_frame(frame, &mut entry_drops, |run| {
                ingestor.push_run(run);
            });
            if let Err(reason) = result {
                ingestor.reject(reason);
            }
            ingestor.add_drops(&entry_drops);
            entry_drops.clear();
            rb.bytes().advance(total);
        }
        rb.shrink();
        let kept = decoder.scratch_bytes();
        stats.buffer_resized(
            kept.saturating_sub(decoder_bytes),
            decoder_bytes.saturating_sub(kept),
        );
        decoder_bytes = kept;
        ingestor.flush().await;
    }
    if !rb.is_empty() {
        ingestor.reject(DropReason::Unterminated);
    }
    stats.buffer_resized(0, decoder_bytes);
    ingestor.flush().await;
}

/// Waits for `bytes` of the frame budget; `None` if the relay shuts down or the connection
/// is evicted first.
async fn frame_budget(
    ctx: &ReceiverContext,
    bytes: usize,
    admitted: Option<&Admitted>,
) -> Option<OwnedSemaphorePermit> {
    // Frames are at most 1 GiB (validated), so the count fits a u32.
    let permits = u32::try_from(bytes).ok()?;
    tokio::select! {
        p = ctx.frame_budget.clone().acquire_many_owned(permits) => p.ok(),
        _ = ctx.shutdown.cancelled() => None,
        _ = evicted(admitted) => None,
    }
}
