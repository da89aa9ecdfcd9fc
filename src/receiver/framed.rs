//! Length-prefixed receivers (pickle, protobuf): a `u32` big-endian length, then one message,
//! as Twisted's `Int32StringReceiver` reads them.

use bytes::{Buf, BytesMut};
use tracing::{debug, warn};

use super::stream::ClientStream;
use super::tcp::{Read, read_more};
use super::{READ_BUFFER, ReceiverContext};
use crate::ingest::Source;
use crate::protocol::pickle::PickleDecoder;
use crate::protocol::protobuf::ProtobufDecoder;
use crate::protocol::{DropCounts, DropReason};

/// Decodes one frame's payload: each datapoint to `emit`, each malformed entry counted in
/// `drops`; `Err` rejects the whole frame.
pub(crate) trait FrameDecoder {
    /// Decodes `payload` (length prefix removed).
    fn decode_frame(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        emit: impl FnMut(&[u8], f64, f64),
    ) -> Result<usize, DropReason>;
}

impl FrameDecoder for PickleDecoder {
    fn decode_frame(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        emit: impl FnMut(&[u8], f64, f64),
    ) -> Result<usize, DropReason> {
        self.decode(payload, drops, emit)
    }
}

impl FrameDecoder for ProtobufDecoder {
    fn decode_frame(
        &mut self,
        payload: &[u8],
        drops: &mut DropCounts,
        emit: impl FnMut(&[u8], f64, f64),
    ) -> Result<usize, DropReason> {
        self.decode(payload, drops, emit)
    }
}

/// Serves one pickle connection.
pub async fn serve_pickle(stream: ClientStream, ctx: ReceiverContext) {
    let max = ctx.max_pickle_frame;
    serve_framed(stream, ctx, Source::PickleTcp, PickleDecoder::new(), max).await;
}

/// Serves one protobuf connection.
pub async fn serve_protobuf(stream: ClientStream, ctx: ReceiverContext) {
    let max = ctx.max_protobuf_frame;
    serve_framed(
        stream,
        ctx,
        Source::ProtobufTcp,
        ProtobufDecoder::new(),
        max,
    )
    .await;
}

/// A frame that does not decode is dropped and counted and the connection continues; a
/// length prefix over `max_frame` closes it (framing is lost).
async fn serve_framed(
    mut stream: ClientStream,
    ctx: ReceiverContext,
    source: Source,
    mut decoder: impl FrameDecoder,
    max_frame: usize,
) {
    let mut ingestor = ctx.pipeline.ingestor(source);
    let mut buf = BytesMut::with_capacity(READ_BUFFER);
    let mut entry_drops = DropCounts::default();
    'conn: loop {
        match read_more(&mut stream, &mut buf, &ctx).await {
            Read::Data => {}
            Read::Eof => break,
            Read::Idle => {
                ctx.pipeline.stats().connection_idle_closed(source);
                break;
            }
            Read::Failed(e) => {
                debug!(source = source.as_str(), error = %e, "connection failed");
                break;
            }
        }
        while buf.len() >= 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
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
                buf.clear();
                break 'conn;
            }
            if buf.len() < 4 + len {
                buf.reserve(4 + len - buf.len());
                break;
            }
            let frame = &buf[4..4 + len];
            let result = decoder.decode_frame(frame, &mut entry_drops, |name, ts, value| {
                let _ = ingestor.push(name, ts, value);
            });
            if let Err(reason) = result {
                ingestor.reject(reason);
            }
            ingestor.add_drops(&entry_drops);
            entry_drops.clear();
            buf.advance(4 + len);
        }
        ingestor.flush().await;
    }
    if !buf.is_empty() {
        ingestor.reject(DropReason::Unterminated);
    }
    ingestor.flush().await;
}
