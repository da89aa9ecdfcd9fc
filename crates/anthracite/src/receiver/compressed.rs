//! The plaintext handler of a compressed connection (`listen.line_tcp_compression`, or a
//! carbon-c-relay `listen` with `transport gzip|lz4|snappy`): what a read brings goes through
//! the connection's [`Decompressor`], the lines it decodes into through the same framer and
//! ingest as plaintext, flushed after every piece (at most 64 KiB of lines, as a plaintext
//! read).
//!
//! A frame or stream that decodes past its bounds (see
//! [`crate::protocol::compression`]), or bytes that are not of the format, close the connection: counted once (`decompressed_too_large`, `bad_compression`)
//! and logged once per episode for the relay. The lines decoded before it are kept.

use bytes::BytesMut;

use super::buffer::ReadBuffer;
use super::tcp::{Connection, Read, flush_lean, line_ingestor, read_more};
use crate::ingest::Source;
use crate::protocol::DropReason;
use crate::protocol::compression::{DecompressError, Decompressor};
use crate::protocol::line::LineFramer;

/// Serves one compressed plaintext connection with its `decompressor`.
pub(crate) async fn serve(conn: Connection, mut decompressor: Decompressor) {
    let Connection {
        mut stream,
        ctx,
        admitted,
    } = conn;
    let source = Source::LineTcp;
    let mut ingestor = line_ingestor(&ctx, &stream);
    let mut framer = LineFramer::new(ctx.max_line_length);
    let mut rb = ReadBuffer::new(ctx.pipeline.stats().clone());
    let mut lines = BytesMut::new();
    'connection: loop {
        match read_more(&mut stream, &mut rb, &ctx, admitted.as_ref()).await {
            Read::Data => {
                decompressor.push(rb.bytes());
                rb.bytes().clear();
                rb.shrink();
                loop {
                    match decompressor.pull(&mut lines) {
                        Ok(0) => break,
                        Ok(_) => {
                            framer.feed_batched(&mut lines, |l| ingestor.lines(l));
                            flush_lean(&mut ingestor, &mut rb).await;
                        }
                        Err(e) => {
                            let reason = match e {
                                DecompressError::TooLarge => DropReason::DecompressedTooLarge,
                                DecompressError::Corrupt => DropReason::BadCompression,
                            };
                            ingestor.reject(reason);
                            ctx.warnings.decompression_refused(
                                source,
                                reason,
                                ctx.max_decompressed_bytes,
                            );
                            break 'connection;
                        }
                    }
                }
            }
            end => {
                end.note_end(source, &ctx);
                break;
            }
        }
    }
    if let Some(reason) = framer.finish(&mut lines) {
        ingestor.reject(reason);
    }
    ingestor.flush().await;
}
