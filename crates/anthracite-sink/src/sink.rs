//! [`Sink`]: starting one, reading what it received, making it misbehave, stopping it.

use std::collections::HashMap;
use std::io::{self, ErrorKind};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::decode::{Key, Received};
use crate::server::{
    Control, Listening, REBIND_PATIENCE, Shared, UDP_POLL, accept_loop, datagram_loop, listen, lock,
};
use crate::stats::SinkStats;
use crate::{SinkConfig, SinkProtocol};

/// A running stand-in carbon-cache. Dropping it stops it, like [`Sink::stop`].
pub struct Sink {
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Sink {
    /// Binds `addr` (port 0: any free one) and starts serving as `config` says.
    pub fn bind(addr: SocketAddr, config: SinkConfig) -> io::Result<Sink> {
        let udp = config.protocol == SinkProtocol::Udp;
        let (addr, socket) = if udp {
            let socket = UdpSocket::bind(addr)?;
            socket.set_read_timeout(Some(UDP_POLL))?;
            (socket.local_addr()?, Err(socket))
        } else {
            let listener = listen(addr, config.receive_buffer)?;
            (listener.local_addr()?, Ok(listener))
        };
        let shared = Arc::new(Shared {
            clock: config.clock.unwrap_or_else(Instant::now),
            config,
            addr,
            stats: Arc::default(),
            control: Mutex::new(Control {
                want_down: false,
                listening: Listening::Yes,
                stop: false,
            }),
            changed: Condvar::new(),
            paused: AtomicBool::new(false),
            connections: Mutex::default(),
        });
        let s = shared.clone();
        let name = format!("sink {}", shared.addr.port());
        let acceptor = match socket {
            Ok(listener) => thread::Builder::new()
                .name(name)
                .spawn(move || accept_loop(s, listener))?,
            Err(socket) => thread::Builder::new()
                .name(name)
                .spawn(move || datagram_loop(s, socket))?,
        };
        Ok(Sink {
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// A sink on 127.0.0.1:0 that keeps every datapoint: a test's destination.
    ///
    /// # Panics
    ///
    /// When it cannot bind: a test cannot go on without its destination.
    pub fn start(label: &str, protocol: SinkProtocol) -> Sink {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        Sink::bind(addr, SinkConfig::new(label, protocol))
            .unwrap_or_else(|e| panic!("sink {label}: bind {addr}: {e}"))
    }

    /// Like [`start`](Self::start) on 127.0.0.1:`port` (a destination that comes up late, or
    /// again), waiting up to 10 s while the port is still in use.
    ///
    /// # Panics
    ///
    /// When the port stays taken, or cannot be bound.
    pub fn start_on(label: &str, protocol: SinkProtocol, port: u16) -> Sink {
        Self::start_on_with(label, protocol, port, None)
    }

    /// Like [`start_on`](Self::start_on), terminating TLS with `tls` when given.
    ///
    /// # Panics
    ///
    /// When the port stays taken, or cannot be bound.
    pub fn start_on_with(
        label: &str,
        protocol: SinkProtocol,
        port: u16,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Sink {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let config = SinkConfig {
            tls,
            ..SinkConfig::new(label, protocol)
        };
        let deadline = Instant::now() + REBIND_PATIENCE;
        loop {
            match Sink::bind(addr, config.clone()) {
                Ok(sink) => return sink,
                Err(e) if e.kind() == ErrorKind::AddrInUse && Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("sink {label}: bind {addr}: {e}"),
            }
        }
    }

    /// A TLS sink on 127.0.0.1:0 presenting `tls`'s certificate.
    ///
    /// # Panics
    ///
    /// When it cannot bind.
    pub fn start_tls(label: &str, protocol: SinkProtocol, tls: Arc<rustls::ServerConfig>) -> Sink {
        Self::start_on_with(label, protocol, 0, Some(tls))
    }

    /// What it stands for, in messages.
    pub fn label(&self) -> &str {
        &self.shared.config.label
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.shared.addr.port()
    }

    /// Its counters and records, to read while it runs (and after it stopped).
    pub fn stats(&self) -> &Arc<SinkStats> {
        &self.shared.stats
    }

    /// Datapoints received so far.
    pub fn count(&self) -> usize {
        self.shared.stats.delivered() as usize
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.stats.connections() as usize
    }

    /// A copy of every datapoint received so far, in arrival order per connection (with
    /// [`Keep::All`](crate::Keep::All)).
    pub fn received(&self) -> Vec<Received> {
        self.shared.stats.received()
    }

    /// The reasons of the decode and connection errors seen so far.
    pub fn errors(&self) -> Vec<String> {
        self.shared.stats.errors()
    }

    /// The multiset of datapoints received: key → how many times it arrived.
    pub fn multiset(&self) -> HashMap<Key, usize> {
        self.shared.stats.multiset()
    }

    /// Waits until at least `n` datapoints have arrived; returns the count.
    ///
    /// # Panics
    ///
    /// After `timeout` (a test's deadline, not a timing assertion), saying how many arrived
    /// over how many connections and the first decode errors.
    pub fn wait_for_count(&self, n: usize, timeout: Duration) -> usize {
        let got = self.shared.stats.wait_for_delivered(n as u64, timeout) as usize;
        if got < n {
            panic!(
                "sink {} ({}): waited {timeout:?} for {n} datapoints, got {got} over {} connections; decode errors: {:?}",
                self.label(),
                self.addr(),
                self.connections(),
                self.errors().iter().take(5).collect::<Vec<_>>()
            );
        }
        got
    }

    /// Waits until no datapoint has arrived for `quiet`; returns the count.
    ///
    /// # Panics
    ///
    /// When datapoints still arrive after `timeout`.
    pub fn wait_quiet(&self, quiet: Duration, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        let mut last = self.count();
        let mut since = Instant::now();
        loop {
            thread::sleep(Duration::from_millis(50));
            let now = self.count();
            if now != last {
                last = now;
                since = Instant::now();
            } else if since.elapsed() >= quiet {
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "sink {}: still receiving after {timeout:?} ({now} datapoints)",
                self.label()
            );
        }
    }

    /// Hangs: connections stay open and new ones are accepted, but nothing is read (a
    /// carbon-cache that stopped, as under SIGSTOP), until [`resume`](Self::resume). A read
    /// already waiting when it pauses takes one chunk from the socket and counts it only
    /// after the resume.
    pub fn pause(&self) {
        self.shared.paused.store(true, Ordering::SeqCst);
    }

    /// Reads again after [`pause`](Self::pause).
    pub fn resume(&self) {
        let _guard = lock(&self.shared.control);
        self.shared.paused.store(false, Ordering::SeqCst);
        self.shared.changed.notify_all();
    }

    /// Goes down as a dead carbon-cache: closes the listener (connections are refused) and
    /// every connection. Returns once the port refuses.
    pub fn go_down(&self) -> io::Result<()> {
        self.shared.go_down()
    }

    /// Listens on the same port again after [`go_down`](Self::go_down); returns once it
    /// does (retrying for 10 s while the port lingers).
    pub fn come_back(&self) -> io::Result<()> {
        self.shared.come_back()
    }

    /// An outage on a timer: `after` from now the sink goes down, `length` later it comes
    /// back. A stop cancels what has not happened yet.
    pub fn schedule_outage(&self, after: Duration, length: Duration) {
        let s = self.shared.clone();
        let spawned = thread::Builder::new()
            .name(format!("sink {} outage", s.addr.port()))
            .spawn(move || {
                if s.sleep_unless_stopped(after)
                    && s.go_down().is_ok()
                    && s.sleep_unless_stopped(length)
                {
                    let _ = s.come_back();
                }
            });
        if let Ok(handle) = spawned {
            lock(&self.shared.connections).threads.push(handle);
        }
    }

    /// Serves until [`stop`](Self::stop) is called from elsewhere (`anthracite sink` runs
    /// until it is interrupted).
    pub fn join(mut self) {
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }

    /// Stops accepting, closes every connection and waits for every thread to end.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        {
            let mut control = lock(&self.shared.control);
            control.stop = true;
            self.shared.changed.notify_all();
        }
        if self.shared.config.protocol != SinkProtocol::Udp {
            self.shared.wake_acceptor();
        }
        self.shared.close_connections();
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
        // The acceptor no longer adds threads.
        let threads = std::mem::take(&mut lock(&self.shared.connections).threads);
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop_inner();
    }
}
