//! Length-prefixed receivers (pickle, protobuf): a `u32` big-endian length, then one message,
//! as Twisted's `Int32StringReceiver` reads them.
//!
//! A frame larger than the connection's read buffer needs room from the relay-wide frame
//! budget before it is read (see [`buffer`](super::buffer)); the connection waits for it (its
//! client sees TCP back-pressure) and gives it back once the frame is decoded.
//!
//! What a frame decodes into is sized before any of it enters the pipeline: a protobuf metric
//! carries one name for any number of points, a pickle memo repeats one name for any number
//! of entries, so a 1 MB frame can turn into hundreds of megabytes of datapoints. Past
//! [`DECODED_FREE`] the frame takes its decoded size from the relay-wide decoded-size budget
//! (as large as the frame budget), waits for it like a large frame waits for its bytes, and
//! gives it back once its datapoints are flushed to the queues; a frame decoding into more
//! than the whole budget is dropped and counted (`decoded_too_large`). The waits end with the
//! idle timeout, like a silent client.

use std::sync::Arc;

use bytes::Buf;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::admission::Admitted;
use super::buffer::ReadBuffer;
use super::tcp::{Connection, Read, evicted, flush_lean, read_more};
use super::{DECODED_FREE, ReceiverContext};
use crate::ingest::Source;
use crate::protocol::Point;
use crate::protocol::pickle::PickleDecoder;
use crate::protocol::protobuf::ProtobufDecoder;
use crate::protocol::{DropCounts, DropReason};

/// A run of decoded datapoints `(name, timestamp, value)`.
type Run<'a> = [Point<'a>];

/// Decodes one frame's payload in two steps, so the receiver can size what the frame turns
/// into before letting it into the pipeline: [`parse_frame`](Self::parse_frame), then
/// [`emit_frame`](Self::emit_frame) hands the datapoints over in runs, in order.
pub(crate) trait FrameDecoder {
    /// Parses `payload` (length prefix removed); `Err` rejects the whole frame.
    fn parse_frame(&mut self, payload: &[u8], drops: &mut DropCounts) -> Result<(), DropReason>;

    /// Bytes the parsed frame's datapoints take once decoded (names + 24 bytes each).
    fn decoded_bytes(&self, payload: &[u8]) -> usize;

    /// Hands the parsed frame's datapoints to `on_run`, each malformed entry counted in
    /// `drops`.
    fn emit_frame(&mut self, payload: &[u8], drops: &mut DropCounts, on_run: impl FnMut(&Run<'_>));

    /// Gives back scratch space over the keep limit once the frame is done with.
    fn finish_frame(&mut self);

    /// Scratch bytes kept between frames (accounted with the receive buffers).
    fn scratch_bytes(&self) -> usize;
}

impl FrameDecoder for PickleDecoder {
    fn parse_frame(&mut self, payload: &[u8], _drops: &mut DropCounts) -> Result<(), DropReason> {
        self.parse(payload, true)
    }

    fn decoded_bytes(&self, payload: &[u8]) -> usize {
        PickleDecoder::decoded_bytes(self, payload)
    }

    fn emit_frame(&mut self, payload: &[u8], drops: &mut DropCounts, on_run: impl FnMut(&Run<'_>)) {
        let _ = self.emit_runs(payload, drops, on_run);
    }

    fn finish_frame(&mut self) {
        PickleDecoder::finish_frame(self);
    }

    fn scratch_bytes(&self) -> usize {
        PickleDecoder::scratch_bytes(self)
    }
}

impl FrameDecoder for ProtobufDecoder {
    fn parse_frame(&mut self, payload: &[u8], drops: &mut DropCounts) -> Result<(), DropReason> {
        ProtobufDecoder::parse_frame(self, payload, drops)
    }

    fn decoded_bytes(&self, _payload: &[u8]) -> usize {
        ProtobufDecoder::decoded_bytes(self)
    }

    fn emit_frame(
        &mut self,
        payload: &[u8],
        _drops: &mut DropCounts,
        on_run: impl FnMut(&Run<'_>),
    ) {
        let _ = self.emit(payload, on_run);
    }

    fn finish_frame(&mut self) {
        ProtobufDecoder::finish_frame(self);
    }

    fn scratch_bytes(&self) -> usize {
        ProtobufDecoder::scratch_bytes(self)
    }
}

/// Serves one pickle connection.
pub(crate) async fn serve_pickle(conn: Connection) {
    let max = conn.ctx.max_pickle_frame;
    serve_framed(conn, Source::PickleTcp, PickleDecoder::new(), max).await;
}

/// Serves one protobuf connection.
pub(crate) async fn serve_protobuf(conn: Connection) {
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
                ctx.warnings.frame_too_long(source, len, max_frame);
                // Framing is lost: what follows is not a partial frame, so it is not counted
                // again as unterminated.
                rb.bytes().clear();
                break 'conn;
            }
            let total = 4 + len;
            if rb.len() < total {
                let budget = match rb.budget_needed(total) {
                    Some(bytes) => {
                        match budget_wait(&ctx, &ctx.frame_budget, bytes, admitted.as_ref()).await {
                            Some(permit) => Some(permit),
                            // Shut down or evicted while waiting: the partial frame is counted
                            // below as unterminated.
                            None => break 'conn,
                        }
                    }
                    None => None,
                };
                rb.reserve_frame(total, budget);
                break;
            }
            let frame = &rb.bytes()[4..total];
            let parsed = decoder.parse_frame(frame, &mut entry_drops);
            // What the frame turns into (a memo or a protobuf metric can repeat one long name
            // for every point) is paid for from the decoded-size budget before any of it
            // reaches the pipeline, and held until it has been flushed to the queues.
            let decoded = if parsed.is_ok() {
                decoder.decoded_bytes(frame)
            } else {
                0
            };
            let mut decoded_permit = None;
            let result = match parsed {
                Err(reason) => Err(reason),
                Ok(()) if decoded <= DECODED_FREE => Ok(()),
                Ok(()) if decoded > ctx.decoded_budget_bytes => Err(DropReason::DecodedTooLarge),
                Ok(()) => {
                    match budget_wait(&ctx, &ctx.decoded_budget, decoded, admitted.as_ref()).await {
                        Some(permit) => {
                            decoded_permit = Some(permit);
                            Ok(())
                        }
                        // Shut down, evicted or idle while waiting: the frame is dropped, counted.
                        None => Err(DropReason::DecodedTooLarge),
                    }
                }
            };
            let frame = &rb.bytes()[4..total];
            match result {
                Ok(()) => decoder.emit_frame(frame, &mut entry_drops, |run| {
                    ingestor.push_run(run);
                }),
                Err(reason) => {
                    ingestor.reject(reason);
                    if reason == DropReason::DecodedTooLarge {
                        ctx.warnings
                            .decoded_too_large(source, decoded, ctx.decoded_budget_bytes);
                    }
                }
            }
            decoder.finish_frame();
            ingestor.add_drops(&entry_drops);
            entry_drops.clear();
            if decoded_permit.is_some() {
                // The budget is given back once the frame's datapoints are in the queues.
                ingestor.flush().await;
                drop(decoded_permit);
            }
            rb.bytes().advance(total);
        }
        rb.shrink();
        let kept = decoder.scratch_bytes();
        stats.buffer_resized(
            kept.saturating_sub(decoder_bytes),
            decoder_bytes.saturating_sub(kept),
        );
        decoder_bytes = kept;
        flush_lean(&mut ingestor, &mut rb).await;
    }
    if !rb.is_empty() {
        ingestor.reject(DropReason::Unterminated);
    }
    stats.buffer_resized(0, decoder_bytes);
    ingestor.flush().await;
}

/// Waits for `bytes` of `budget`; `None` if the relay shuts down, the connection is evicted,
/// or the wait outlasts the idle timeout first (a client whose frame cannot be let in for that
/// long is treated like a silent one).
async fn budget_wait(
    ctx: &ReceiverContext,
    budget: &Arc<Semaphore>,
    bytes: usize,
    admitted: Option<&Admitted>,
) -> Option<OwnedSemaphorePermit> {
    // Budgets are at most 1 GiB (validated), so a count that fits one fits a u32.
    let permits = u32::try_from(bytes).ok()?;
    let idle = async {
        match ctx.idle_timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        p = budget.clone().acquire_many_owned(permits) => p.ok(),
        _ = ctx.shutdown.cancelled() => None,
        _ = evicted(admitted) => None,
        _ = idle => None,
    }
}
