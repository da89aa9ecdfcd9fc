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
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Instant;

use nix::sys::socket::{
    CmsgIterator, ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg, setsockopt, sockopt,
};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tracing::{info, warn};

use super::ReceiverContext;
use crate::episode::{Episode, Line};
use crate::ingest::{IngestStats, Ingestor, Source};

/// Largest UDP payload.
const DATAGRAM: usize = 65_536;
/// Datagrams parsed before a flush when they keep arriving back to back.
const DATAGRAMS_PER_FLUSH: usize = 256;
/// Most rounds of [`DATAGRAMS_PER_FLUSH`] read when a receiver stops (64 K datagrams, more than
/// the default 4 MiB receive buffer holds).
const STOP_DRAIN_ROUNDS: usize = 256;

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

/// A bound UDP socket and its cumulative kernel drop counter as the last datagram reported it
/// (the counter lives as long as the socket: a reload that serves the same socket again
/// carries it over, so no drop is counted twice).
#[derive(Debug)]
pub(crate) struct UdpReceiver {
    socket: UdpSocket,
    drops_seen: u32,
}

impl UdpReceiver {
    /// A socket not read yet.
    pub(crate) fn new(socket: UdpSocket) -> Self {
        Self {
            socket,
            drops_seen: 0,
        }
    }

    /// The socket.
    pub(crate) fn socket(&self) -> &UdpSocket {
        &self.socket
    }
}

/// What one receiver task reads with, besides its socket.
struct Reader {
    buf: Vec<u8>,
    cmsg: Vec<u8>,
    max_line: usize,
    errors: Episode,
    stats: std::sync::Arc<IngestStats>,
}

impl Reader {
    /// Parses up to `max` datagrams the socket already holds; true when it ran dry (or
    /// failed, logged per episode).
    fn read_ready(&mut self, rx: &mut UdpReceiver, ingestor: &mut Ingestor, max: usize) -> bool {
        let source = ingestor.wants_client();
        for _ in 0..max {
            match receive(&rx.socket, &mut self.buf, &mut self.cmsg, source) {
                Ok((n, counter, from)) => {
                    if source {
                        ingestor.set_client(from);
                    }
                    if let Some(c) = counter {
                        // The kernel's count since the previous datagram that carried it.
                        let new = c.wrapping_sub(rx.drops_seen);
                        rx.drops_seen = c;
                        self.stats.udp_kernel_dropped(u64::from(new));
                    }
                    ingestor.message(self.buf.get(..n).unwrap_or(&[]), self.max_line);
                    if let Some(Line::Ended(c)) = self.errors.cleared(Instant::now()) {
                        info!(errors = c.occurrences, over = ?c.over, "udp receive recovered");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) => {
                    match self.errors.occurred(1, Instant::now()) {
                        Some(Line::Started(_)) => warn!(error = %e, "udp receive failed"),
                        Some(Line::Ongoing(c)) => warn!(error = %e, errors = c.occurrences,
                            over = ?c.over, "udp receive still failing"),
                        _ => {}
                    }
                    return true;
                }
            }
        }
        false
    }
}

/// One `recvmsg`: the datagram's length, the drop counter if the kernel sent it, and the
/// sender's address when `source` asks for it (a `file ip` cluster writes it; other
/// configurations skip it).
fn receive(
    socket: &UdpSocket,
    buf: &mut [u8],
    cmsg: &mut [u8],
    source: bool,
) -> io::Result<(usize, Option<u32>, Option<IpAddr>)> {
    socket.try_io(Interest::READABLE, || {
        let mut iov = [IoSliceMut::new(buf)];
        let fd = socket.as_raw_fd();
        if source {
            let msg = recvmsg::<SockaddrStorage>(fd, &mut iov, Some(&mut *cmsg), MsgFlags::empty())
                .map_err(io::Error::from)?;
            let from = msg.address.as_ref().and_then(ip_of);
            Ok((msg.bytes, overflow(msg.cmsgs()), from))
        } else {
            let msg = recvmsg::<()>(fd, &mut iov, Some(&mut *cmsg), MsgFlags::empty())
                .map_err(io::Error::from)?;
            Ok((msg.bytes, overflow(msg.cmsgs()), None))
        }
    })
}

/// The kernel's drop counter among a datagram's control messages.
fn overflow(cmsgs: nix::Result<CmsgIterator<'_>>) -> Option<u32> {
    cmsgs.ok().and_then(|mut c| {
        c.find_map(|m| match m {
            ControlMessageOwned::RxqOvfl(n) => Some(n),
            _ => None,
        })
    })
}

/// The IP address of a datagram's sender.
fn ip_of(a: &SockaddrStorage) -> Option<IpAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(IpAddr::V4(v4.ip()));
    }
    a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
}

/// Receives datagrams until `ctx.accepting` is cancelled, then parses what the socket
/// already holds (as a TCP listener takes its backlog), flushes and returns the receiver.
/// Lines over the length limit are dropped and counted; so are the datagrams the kernel
/// dropped.
pub(crate) async fn serve_udp(mut rx: UdpReceiver, ctx: ReceiverContext) -> UdpReceiver {
    let mut ingestor = ctx.pipeline.ingestor(Source::LineUdp);
    let mut reader = Reader {
        buf: vec![0u8; DATAGRAM],
        cmsg: nix::cmsg_space!(u32),
        max_line: ctx.max_line_length,
        errors: Episode::default(),
        stats: ctx.pipeline.stats().clone(),
    };
    loop {
        tokio::select! {
            _ = ctx.accepting.cancelled() => break,
            r = rx.socket.readable() => {
                if let Err(e) = r {
                    warn!(error = %e, "udp socket failed");
                    break;
                }
            }
        }
        reader.read_ready(&mut rx, &mut ingestor, DATAGRAMS_PER_FLUSH);
        ingestor.flush().await;
    }
    // Datagrams the kernel already holds were sent while the relay listened. Bounded: a
    // client that keeps sending must not keep a shutdown or a reload from finishing (what
    // is left stays in the socket, which a reload serves again).
    for _ in 0..STOP_DRAIN_ROUNDS {
        if reader.read_ready(&mut rx, &mut ingestor, DATAGRAMS_PER_FLUSH) {
            break;
        }
        ingestor.flush().await;
    }
    // Drops after the last datagram read are carried by no datagram: read the socket's own
    // counter, so the last interval's drops are reported too.
    if let Some(total) = socket_drops(&rx.socket) {
        let new = total.wrapping_sub(rx.drops_seen);
        rx.drops_seen = total;
        reader.stats.udp_kernel_dropped(u64::from(new));
    }
    ingestor.flush().await;
    rx
}

/// The socket's drop counter now (`SO_MEMINFO`'s `SK_MEMINFO_DROPS`: the counter
/// `SO_RXQ_OVFL` reports with each datagram); `None` where the kernel does not say.
#[cfg(target_os = "linux")]
fn socket_drops(socket: &UdpSocket) -> Option<u32> {
    /// `SO_MEMINFO` and the array it fills (`SK_MEMINFO_VARS` entries, drops at index 8),
    /// from `linux/sock_diag.h`.
    const SO_MEMINFO: nix::libc::c_int = 55;
    const SK_MEMINFO_VARS: usize = 9;
    const SK_MEMINFO_DROPS: usize = 8;
    let mut info = [0u32; SK_MEMINFO_VARS];
    let mut len = std::mem::size_of_val(&info) as nix::libc::socklen_t;
    // SAFETY: the pointer and length describe `info`, a live, writable array of that size;
    // the kernel writes at most `len` bytes and updates `len`.
    let rc = unsafe {
        nix::libc::getsockopt(
            socket.as_raw_fd(),
            nix::libc::SOL_SOCKET,
            SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    let filled = len as usize / std::mem::size_of::<u32>();
    (rc == 0 && filled > SK_MEMINFO_DROPS).then(|| info[SK_MEMINFO_DROPS])
}

#[cfg(not(target_os = "linux"))]
fn socket_drops(_socket: &UdpSocket) -> Option<u32> {
    None
}
