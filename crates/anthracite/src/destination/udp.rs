//! UDP destinations: plaintext lines packed into datagrams.
//!
//! carbon 1.1.10's `carbon.conf.example` lists `udp` among the `DESTINATION_PROTOCOL` values,
//! but its client has no UDP plugin (carbon-relay exits at startup on it). anthracite sends what
//! carbon's plaintext client would send (`path value timestamp\n`) to a carbon UDP receiver
//! (`ENABLE_UDP_LISTENER`): whole lines, as many as fit in `max_datagram_bytes` (default 1432,
//! so a datagram fits a 1500-byte MTU without fragmenting). A single longer line goes alone in
//! its own datagram, up to the 65,507 bytes UDP can carry; beyond that it is dropped as
//! `unencodable`. carbon's receiver (Twisted) reads at most 8192 bytes of a datagram, so keep
//! `max_datagram_bytes` at or below that.
//!
//! The same queue (and spill tier) sits in front as for TCP. UDP has no acknowledgement and no
//! connection to lose: a datagram handed to the kernel counts as sent; one the kernel refuses
//! (e.g. `ECONNREFUSED` after the destination port answered with ICMP unreachable) is counted
//! as dropped with reason `send_failed`, logged once per episode.

use std::time::Duration;

use bytes::BytesMut;
use tokio::net::UdpSocket;
use tracing::{info, warn};

use super::outbox::next_write;
use super::{
    BoxFuture, DestinationConfig, DestinationSignals, MAX_UDP_PAYLOAD, Outbox, Served, Transport,
};
use crate::batch::Batch;
use crate::protocol::line;
use crate::queue::{DestinationDropReason, DestinationQueue};

/// A UDP socket connected to the destination's first resolved address.
pub(crate) async fn connect(target: (&str, u16)) -> std::io::Result<UdpSocket> {
    let addr = tokio::net::lookup_host(target)
        .await?
        .next()
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} resolves to no address", target.0),
            )
        })?;
    let local: std::net::SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(addr).await?;
    Ok(socket)
}

/// The core's UDP transport: a connected socket, lines packed into datagrams.
pub(crate) struct UdpTransport {
    host: String,
    port: u16,
    /// Bounds the name lookup.
    connect_timeout: Duration,
    sender: Sender,
    socket: Option<UdpSocket>,
}

impl UdpTransport {
    pub(crate) fn new(config: &DestinationConfig) -> Self {
        Self {
            host: config.spec.host.clone(),
            port: config.spec.port,
            connect_timeout: config.connect_timeout,
            sender: Sender::new(config),
            socket: None,
        }
    }
}

impl Transport for UdpTransport {
    fn connect(&mut self) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(async move {
            let socket =
                tokio::time::timeout(self.connect_timeout, connect((&self.host, self.port)))
                    .await
                    .map_err(|_| {
                        std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
                    })??;
            self.socket = Some(socket);
            Ok(())
        })
    }

    fn serve<'a>(&'a mut self, outbox: Outbox<'a>) -> BoxFuture<'a, Served> {
        Box::pin(async move {
            let Some(socket) = self.socket.take() else {
                return Served::Lost(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "not connected",
                ));
            };
            self.sender
                .serve(&socket, outbox.queue, outbox.signals, outbox.name)
                .await
        })
    }
}

/// What one round of sends did.
#[derive(Debug, Default, PartialEq, Eq)]
struct Round {
    sent: usize,
    datagrams: usize,
    failed: usize,
    unencodable: usize,
}

/// Datagram packing state reused across sends.
pub(crate) struct Sender {
    flush_bytes: usize,
    linger: Duration,
    max_datagram: usize,
    datagram: BytesMut,
    line: BytesMut,
    in_flight: Vec<Batch>,
    /// Sends are failing (a warning was logged; logged again once they succeed).
    failing: bool,
}

impl Sender {
    pub(crate) fn new(config: &DestinationConfig) -> Self {
        let max_datagram = config.max_datagram_bytes.clamp(1, MAX_UDP_PAYLOAD);
        Self {
            flush_bytes: config.flush_bytes,
            linger: config.linger,
            max_datagram,
            datagram: BytesMut::with_capacity(max_datagram),
            line: BytesMut::new(),
            in_flight: Vec::new(),
            failing: false,
        }
    }

    pub(crate) async fn serve(
        &mut self,
        socket: &UdpSocket,
        queue: &DestinationQueue,
        signals: &DestinationSignals,
        name: &str,
    ) -> Served {
        loop {
            if let Some(end) = next_write(
                queue,
                signals,
                self.flush_bytes,
                self.linger,
                &mut self.in_flight,
            )
            .await
            {
                return end;
            }
            let round = self.send_all(socket, name).await;
            queue.recycle(self.in_flight.drain(..));
            queue.settle(
                round.sent,
                round.datagrams,
                &[
                    (DestinationDropReason::SendFailed, round.failed),
                    (DestinationDropReason::Unencodable, round.unencodable),
                ],
            );
        }
    }

    /// Packs every in-flight datapoint into datagrams and sends them.
    async fn send_all(&mut self, socket: &UdpSocket, name: &str) -> Round {
        let mut round = Round::default();
        let mut in_datagram = 0;
        let batches = std::mem::take(&mut self.in_flight);
        for dp in batches.iter().flat_map(|b| b.iter()) {
            self.line.clear();
            line::encode_line(dp, &mut self.line);
            if self.line.len() > MAX_UDP_PAYLOAD {
                round.unencodable += 1;
                continue;
            }
            if !self.datagram.is_empty()
                && self.datagram.len() + self.line.len() > self.max_datagram
            {
                self.send_one(socket, in_datagram, &mut round, name).await;
                in_datagram = 0;
            }
            self.datagram.extend_from_slice(&self.line);
            in_datagram += 1;
        }
        if in_datagram > 0 {
            self.send_one(socket, in_datagram, &mut round, name).await;
        }
        self.in_flight = batches;
        round
    }

    async fn send_one(&mut self, socket: &UdpSocket, points: usize, round: &mut Round, name: &str) {
        match socket.send(&self.datagram).await {
            Ok(_) => {
                round.sent += points;
                round.datagrams += 1;
                if self.failing {
                    self.failing = false;
                    info!(destination = %name, "udp sends succeed again");
                }
            }
            Err(e) => {
                round.failed += points;
                if !self.failing {
                    self.failing = true;
                    warn!(destination = %name, error = %e,
                        "udp send failed; such datagrams are dropped and counted (send_failed)");
                }
            }
        }
        self.datagram.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max_datagram_bytes: usize) -> DestinationConfig {
        DestinationConfig {
            max_datagram_bytes,
            ..DestinationConfig::for_test("127.0.0.1:1", super::super::OutputProtocol::Udp)
        }
    }

    #[tokio::test]
    async fn lines_are_packed_whole_and_a_long_line_travels_alone() {
        let sink = UdpSocket::bind("127.0.0.1:0").await.expect("bind sink");
        let addr = sink.local_addr().expect("addr");
        let socket = connect(("127.0.0.1", addr.port())).await.expect("connect");
        let mut sender = Sender::new(&config(64));
        let mut b = Batch::new();
        for i in 0..5 {
            b.push(format!("short.{i}").as_bytes(), 1_700_000_000.0, 1.0)
                .expect("batch has room");
        }
        b.push(&[b'x'; 100], 1_700_000_000.0, 2.0)
            .expect("batch has room");
        b.push(b"after", 1_700_000_000.0, 3.0)
            .expect("batch has room");
        b.push(&vec![b'y'; MAX_UDP_PAYLOAD], 1.0, 1.0)
            .expect("batch has room");
        sender.in_flight.push(b);
        let round = sender.send_all(&socket, "test").await;
        assert_eq!(
            round,
            Round {
                sent: 7,
                datagrams: 4,
                failed: 0,
                unencodable: 1
            }
        );
        let mut buf = vec![0u8; 70_000];
        let mut datagrams = Vec::new();
        // Three 21-byte short lines fit in 64 bytes, then two; the long line alone; "after".
        for _ in 0..4 {
            let n = sink.recv(&mut buf).await.expect("recv");
            datagrams.push(String::from_utf8(buf[..n].to_vec()).expect("utf8"));
        }
        for d in &datagrams {
            assert!(d.ends_with('\n'), "whole lines only: {d:?}");
            assert!(d.len() <= 64 || d.lines().count() == 1, "{d:?}");
        }
        let lines: Vec<&str> = datagrams.iter().flat_map(|d| d.lines()).collect();
        assert_eq!(lines.len(), 7);
        assert_eq!(lines[0], "short.0 1 1700000000");
        assert!(lines[5].starts_with("xxxx"));
        assert_eq!(lines[6], "after 3 1700000000");
    }
}
