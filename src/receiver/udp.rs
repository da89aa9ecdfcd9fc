//! Plaintext over UDP: each datagram holds one or more lines; the last may lack `\n`.
//!
//! Like carbon's `MetricDatagramReceiver`, a datagram is split on `\n` and `\r`; empty lines
//! between separators are skipped.

use tokio::net::UdpSocket;
use tracing::warn;

use super::ReceiverContext;
use crate::ingest::Source;
use crate::protocol::DropReason;

/// Largest UDP payload.
const DATAGRAM: usize = 65_536;
/// Datagrams parsed before a flush when they keep arriving back to back.
const DATAGRAMS_PER_FLUSH: usize = 256;

/// Receives datagrams until shutdown. Lines over the length limit are dropped and counted.
pub async fn serve_udp(socket: UdpSocket, ctx: ReceiverContext) {
    let mut ingestor = ctx.pipeline.ingestor(Source::LineUdp);
    let mut buf = vec![0u8; DATAGRAM];
    let max_line = ctx.max_line_length;
    let mut errors = 0u64;
    loop {
        let first = tokio::select! {
            _ = ctx.shutdown.cancelled() => break,
            r = socket.recv(&mut buf) => r,
        };
        let mut received = first;
        let mut handled = 0;
        loop {
            match received {
                Ok(n) => {
                    errors = 0;
                    parse_datagram(&buf[..n], max_line, &mut ingestor);
                }
                Err(e) => {
                    errors += 1;
                    if errors == 1 {
                        warn!(error = %e, "udp receive failed");
                    }
                    break;
                }
            }
            handled += 1;
            if handled >= DATAGRAMS_PER_FLUSH {
                break;
            }
            received = match socket.try_recv(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                other => other,
            };
        }
        ingestor.flush().await;
    }
    ingestor.flush().await;
}

fn parse_datagram(data: &[u8], max_line: usize, ingestor: &mut crate::ingest::Ingestor) {
    for line in data.split(|&b| b == b'\n' || b == b'\r') {
        if line.is_empty() {
            continue;
        }
        if line.len() > max_line {
            ingestor.reject(DropReason::TooLong);
            continue;
        }
        ingestor.line(line);
    }
}
