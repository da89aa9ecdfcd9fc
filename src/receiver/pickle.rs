//! The pickle connection handler: `u32` big-endian length, then a pickle.

use bytes::{Buf, BytesMut};
use tokio::net::TcpStream;
use tracing::{debug, warn};

use super::tcp::{Read, read_more};
use super::{READ_BUFFER, ReceiverContext};
use crate::ingest::Source;
use crate::protocol::pickle::PickleDecoder;
use crate::protocol::{DropCounts, DropReason};

/// Serves one pickle connection. A frame that does not decode is dropped and counted and the
/// connection continues; a length prefix over the limit closes it (framing is lost).
pub async fn serve_pickle(mut stream: TcpStream, ctx: ReceiverContext) {
    let mut ingestor = ctx.pipeline.ingestor(Source::PickleTcp);
    let mut decoder = PickleDecoder::new();
    let mut buf = BytesMut::with_capacity(READ_BUFFER);
    let mut entry_drops = DropCounts::default();
    'conn: loop {
        match read_more(&mut stream, &mut buf, &ctx).await {
            Read::Data => {}
            Read::Eof => break,
            Read::Idle => {
                ctx.pipeline
                    .stats()
                    .connection_idle_closed(Source::PickleTcp);
                break;
            }
            Read::Failed(e) => {
                debug!(error = %e, "pickle connection failed");
                break;
            }
        }
        while buf.len() >= 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if len > ctx.max_pickle_frame {
                ingestor.reject(DropReason::FrameTooLong);
                warn!(
                    length = len,
                    limit = ctx.max_pickle_frame,
                    "pickle frame over the limit; closing the connection"
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
            let result =
                decoder.decode_batched(frame, &mut entry_drops, |run| ingestor.push_run(run));
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
