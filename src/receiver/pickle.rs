//! The pickle connection handler: `u32` big-endian length, then a pickle.
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
use crate::protocol::{DropCounts, DropReason};

/// Serves one pickle connection. A frame that does not decode is dropped and counted and the
/// connection continues; a length prefix over the limit closes it (framing is lost).
pub async fn serve_pickle(conn: Connection) {
    let Connection {
        mut stream,
        ctx,
        admitted,
    } = conn;
    let source = Source::PickleTcp;
    let stats = ctx.pipeline.stats().clone();
    let mut ingestor = ctx.pipeline.ingestor(source);
    let mut decoder = PickleDecoder::new();
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
            if len > ctx.max_pickle_frame {
                ingestor.reject(DropReason::FrameTooLong);
                warn!(
                    length = len,
                    limit = ctx.max_pickle_frame,
                    "pickle frame over the limit; closing the connection"
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
            let result = decoder.decode(frame, &mut entry_drops, |name, ts, value| {
                let _ = ingestor.push(name, ts, value);
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
