//! Plaintext over UDP: each datagram holds one or more lines; the last may lack `\n`.
//!
//! Like carbon's `MetricDatagramReceiver`, a datagram is split on `\n` and `\r`; empty lines
//! between separators are skipped.
//!
//! UDP has no back-pressure: when datagrams arrive faster than the relay reads them, the
//! kernel drops them from the socket's receive buffer. The buffer's size is
//! `listen.udp_recv_buffer` (`SO_RCVBUF`, capped by `net.core.rmem_max`), and the drops are
//! counted: with `SO_RXQ_OVFL` each datagram carries the socket's cumulative drop counter,
//! read here from `recvmsg`'s control message and reported as `udp_kernel_drops`.

use std::io::{self, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd};
use std::time::Instant;

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg, setsockopt, sockopt};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tracing::{info, warn};

use super::ReceiverContext;
use crate::ingest::{IngestStats, Ingestor, Source};
use crate::protocol::DropReason;
use crate::telemetry::episode::{Episode, Line};

/// Largest UDP payload.
const DATAGRAM: usize = 65_536;
/// Datagrams parsed before a flush when they keep arriving back to back.
const DATAGRAMS_PER_FLUSH: usize = 256;

/// Sets the socket's receive buffer (`None`: leave the system default) and turns on the
/// kernel's drop counter (`SO_RXQ_OVFL`). Returns the receive buffer the kernel granted.
pub fn prepare_socket(socket: &impl AsFd, recv_buffer: Option<usize>) -> io::Result<usize> {
    let sock = socket2::SockRef::from(socket);
    if let Some(bytes) = recv_buffer {
        sock.set_recv_buffer_size(bytes)?;
    }
    setsockopt(socket, sockopt::RxqOvfl, &1).map_err(io::Error::from)?;
    let granted = sock.recv_buffer_size()?;
    if let Some(asked) = recv_buffer {
        // Linux reports twice what it grants for bookkeeping; half of it is for data.
        if granted / 2 < asked {
            info!(
                asked,
                granted,
                "UDP receive buffer capped by the kernel; raise net.core.rmem_max for more"
            );
        }
    }
    Ok(granted)
}

/// The socket's cumulative drop counter, as the last datagram reported it.
#[derive(Debug, Default)]
struct KernelDrops {
    seen: u32,
}

impl KernelDrops {
    /// Reports the drops since the previous datagram that carried the counter.
    fn update(&mut self, counter: u32, stats: &IngestStats) {
        let new = counter.wrapping_sub(self.seen);
        self.seen = counter;
        stats.udp_kernel_dropped(u64::from(new));
    }
}

/// One `recvmsg`: the datagram's length, and the drop counter if the kernel sent it.
fn receive(
    socket: &UdpSocket,
    buf: &mut [u8],
    cmsg: &mut [u8],
) -> io::Result<(usize, Option<u32>)> {
    socket.try_io(Interest::READABLE, || {
        let mut iov = [IoSliceMut::new(buf)];
        let msg = recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut *cmsg),
            MsgFlags::empty(),
        )
        .map_err(io::Error::from)?;
        let counter = msg.cmsgs().ok().and_then(|mut c| {
            c.find_map(|m| match m {
                ControlMessageOwned::RxqOvfl(n) => Some(n),
                _ => None,
            })
        });
        Ok((msg.bytes, counter))
    })
}

/// Receives datagrams until `ctx.accepting` is cancelled, then flushes and returns the socket.
/// Lines over the length limit are dropped and counted; so are the datagrams the kernel dropped.
pub async fn serve_udp(socket: UdpSocket, ctx: ReceiverContext) -> UdpSocket {
    let stats = ctx.pipeline.stats().clone();
    let mut ingestor = ctx.pipeline.ingestor(Source::LineUdp);
    let mut buf = vec![0u8; DATAGRAM];
    let mut cmsg = nix::cmsg_space!(u32);
    let max_line = ctx.max_line_length;
    let mut drops = KernelDrops::default();
    let mut errors = Episode::default();
    loop {
        tokio::select! {
            _ = ctx.accepting.cancelled() => break,
            r = socket.readable() => {
                if let Err(e) = r {
                    warn!(error = %e, "udp socket failed");
                    break;
                }
            }
        }
        for _ in 0..DATAGRAMS_PER_FLUSH {
            match receive(&socket, &mut buf, &mut cmsg) {
                Ok((n, counter)) => {
                    if let Some(c) = counter {
                        drops.update(c, &stats);
                    }
                    parse_datagram(buf.get(..n).unwrap_or(&[]), max_line, &mut ingestor);
                    if let Some(Line::Ended(c)) = errors.cleared(Instant::now()) {
                        info!(errors = c.occurrences, over = ?c.over, "udp receive recovered");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    match errors.occurred(1, Instant::now()) {
                        Some(Line::Started(_)) => warn!(error = %e, "udp receive failed"),
                        Some(Line::Ongoing(c)) => warn!(error = %e, errors = c.occurrences,
                            over = ?c.over, "udp receive still failing"),
                        _ => {}
                    }
                    break;
                }
            }
        }
        ingestor.flush().await;
    }
    ingestor.flush().await;
    socket
}

fn parse_datagram(data: &[u8], max_line: usize, ingestor: &mut Ingestor) {
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
