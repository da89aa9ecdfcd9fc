//! The sink's threads: one accepts (or reads datagrams), one serves each connection; the
//! control state that pauses them, takes the listener down and brings it back, and stops
//! them.
//!
//! A thread blocked in `accept` is woken by a connection to the sink's own address (the
//! acceptor then sees why it was woken); a thread blocked in `read` by shutting its socket
//! down. Connections are registered (a clone of each socket), so going down or stopping
//! closes every one of them, and a connection the sink closed itself does not count the
//! partial line it was reading as bad.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read};
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::decode::Decoder;
use crate::stats::SinkStats;
use crate::{Keep, SinkConfig, SinkProtocol};

/// Bytes read at once (a slow sink reads less).
const READ_BUF: usize = 256 << 10;
/// Connections the kernel queues while the acceptor is busy.
const BACKLOG: i32 = 1024;
/// How long a UDP sink blocks in one receive before it looks at its control state.
pub(crate) const UDP_POLL: Duration = Duration::from_millis(100);
/// How long [`Sink::start_on`] waits for a port still held by an earlier listener, and
/// [`Sink::come_back`] for its own.
pub(crate) const REBIND_PATIENCE: Duration = Duration::from_secs(10);
/// Bound on waiting for the acceptor to act on going down or coming back.
const CONTROL_PATIENCE: Duration = Duration::from_secs(10);

/// Whether the sink listens.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Listening {
    Yes,
    Down,
    /// Coming back failed (the port was taken meanwhile).
    Failed(String),
}

pub(crate) struct Control {
    pub(crate) want_down: bool,
    pub(crate) listening: Listening,
    pub(crate) stop: bool,
}

#[derive(Default)]
pub(crate) struct Connections {
    next_id: u64,
    /// A clone of every live connection's socket, to shut it down.
    live: HashMap<u64, TcpStream>,
    pub(crate) threads: Vec<JoinHandle<()>>,
}

/// What a sink's threads share.
pub(crate) struct Shared {
    pub(crate) config: SinkConfig,
    pub(crate) addr: SocketAddr,
    pub(crate) clock: Instant,
    pub(crate) stats: Arc<SinkStats>,
    pub(crate) control: Mutex<Control>,
    pub(crate) changed: Condvar,
    pub(crate) paused: AtomicBool,
    pub(crate) connections: Mutex<Connections>,
}

/// A poisoned lock only means a thread panicked; the state is still whole.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A listener on `addr` with `receive_buffer` (inherited by accepted sockets).
pub(crate) fn listen(addr: SocketAddr, receive_buffer: Option<usize>) -> io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    // A port the sink held a moment ago (come back, a restarted destination) binds at once.
    socket.set_reuse_address(true)?;
    if let Some(bytes) = receive_buffer {
        socket.set_recv_buffer_size(bytes)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

impl Shared {
    pub(crate) fn stopping(&self) -> bool {
        lock(&self.control).stop
    }

    /// Waits `d` unless the sink stops first; `true` when the whole wait passed.
    pub(crate) fn sleep_unless_stopped(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut control = lock(&self.control);
        loop {
            if control.stop {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            control = self
                .changed
                .wait_timeout(control, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Blocks while the sink is paused; `false` once it stops.
    pub(crate) fn wait_while_paused(&self) -> bool {
        if !self.paused.load(Ordering::SeqCst) {
            return true;
        }
        let mut control = lock(&self.control);
        while self.paused.load(Ordering::SeqCst) && !control.stop {
            control = self
                .changed
                .wait(control)
                .unwrap_or_else(|p| p.into_inner());
        }
        !control.stop
    }

    /// Wakes an acceptor blocked in `accept` with a connection of its own.
    pub(crate) fn wake_acceptor(&self) {
        let mut addr = self.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            });
        }
        let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
    }

    /// Shuts every live connection down (its thread then ends); they no longer count as
    /// closed by their peer.
    pub(crate) fn close_connections(&self) {
        let live = std::mem::take(&mut lock(&self.connections).live);
        for (_, stream) in live {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Waits (bounded) until `done` holds for the listening state; returns it then.
    fn wait_listening(&self, done: impl Fn(&Listening) -> bool) -> io::Result<Listening> {
        let deadline = Instant::now() + CONTROL_PATIENCE;
        let mut control = lock(&self.control);
        loop {
            if done(&control.listening) || control.stop {
                return Ok(control.listening.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(io::Error::new(
                    ErrorKind::TimedOut,
                    format!("sink {}: the acceptor did not answer", self.addr),
                ));
            }
            control = self
                .changed
                .wait_timeout(control, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    pub(crate) fn go_down(&self) -> io::Result<()> {
        if self.config.protocol == SinkProtocol::Udp {
            return Err(io::Error::new(
                ErrorKind::Unsupported,
                "a UDP sink has no connections to refuse",
            ));
        }
        lock(&self.control).want_down = true;
        self.wake_acceptor();
        self.wait_listening(|l| *l != Listening::Yes)?;
        self.close_connections();
        Ok(())
    }

    pub(crate) fn come_back(&self) -> io::Result<()> {
        {
            let mut control = lock(&self.control);
            control.want_down = false;
            self.changed.notify_all();
        }
        match self.wait_listening(|l| *l != Listening::Down)? {
            Listening::Failed(e) => Err(io::Error::new(ErrorKind::AddrInUse, e)),
            _ => Ok(()),
        }
    }

    fn set_listening(&self, listening: Listening) {
        lock(&self.control).listening = listening;
        self.changed.notify_all();
    }

    /// Records a connection-level error: kept with the others, and written out when echoing.
    fn error(&self, reason: String) {
        let mut d = Decoder::new(self.config.protocol, Keep::Bytes, false, false);
        d.error(reason);
        let errors = d.flush(&self.stats, 0, 0);
        self.print_errors(&errors);
    }

    fn print_errors(&self, errors: &[String]) {
        if self.config.echo.is_some() {
            for e in errors {
                eprintln!("{}: {e}", self.config.label);
            }
        }
    }
}

pub(crate) fn accept_loop(shared: Arc<Shared>, mut listener: TcpListener) {
    loop {
        let accepted = listener.accept();
        if shared.stopping() {
            break;
        }
        if lock(&shared.control).want_down {
            drop(accepted);
            drop(listener);
            shared.set_listening(Listening::Down);
            let mut control = lock(&shared.control);
            while control.want_down && !control.stop {
                control = shared
                    .changed
                    .wait(control)
                    .unwrap_or_else(|p| p.into_inner());
            }
            if control.stop {
                break;
            }
            drop(control);
            match rebind(&shared) {
                Ok(l) => {
                    listener = l;
                    shared.set_listening(Listening::Yes);
                    continue;
                }
                Err(e) => {
                    let reason = format!("cannot listen on {} again: {e}", shared.addr);
                    shared.error(reason.clone());
                    shared.set_listening(Listening::Failed(reason));
                    return;
                }
            }
        }
        match accepted {
            Ok((stream, _)) => spawn_connection(&shared, stream),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // Out of descriptors or a connection reset before it was accepted: try again.
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
    shared.set_listening(Listening::Down);
}

/// Binds the sink's address again, retrying while the port lingers.
fn rebind(shared: &Shared) -> io::Result<TcpListener> {
    let deadline = Instant::now() + REBIND_PATIENCE;
    loop {
        match listen(shared.addr, shared.config.receive_buffer) {
            Ok(l) => return Ok(l),
            Err(_) if Instant::now() < deadline && !shared.stopping() => {
                thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e),
        }
    }
}

fn spawn_connection(shared: &Arc<Shared>, stream: TcpStream) {
    shared.stats.connected();
    let Ok(handle) = stream.try_clone() else {
        shared.error("cannot register a connection (out of descriptors?)".into());
        return;
    };
    let mut connections = lock(&shared.connections);
    connections.threads.retain(|t| !t.is_finished());
    let id = connections.next_id;
    connections.next_id += 1;
    connections.live.insert(id, handle);
    let s = shared.clone();
    let spawned = thread::Builder::new()
        .name(format!("sink {} conn", shared.addr.port()))
        .spawn(move || serve(&s, id, stream));
    match spawned {
        Ok(t) => connections.threads.push(t),
        Err(e) => {
            connections.live.remove(&id);
            drop(connections);
            shared.error(format!("cannot start a connection thread: {e}"));
        }
    }
}

/// Serves one connection until its peer closes it or the sink does.
fn serve(shared: &Shared, id: u64, stream: TcpStream) {
    let mut decoder = Decoder::new(
        shared.config.protocol,
        shared.config.keep,
        shared.config.clock.is_some(),
        shared.config.echo.is_some(),
    );
    let leftover = match shared.config.tls.clone() {
        None => read_all(shared, stream, &mut decoder),
        Some(tls) => match rustls::ServerConnection::new(tls) {
            Ok(session) => read_all(
                shared,
                rustls::StreamOwned::new(session, stream),
                &mut decoder,
            ),
            Err(e) => {
                decoder.error(format!("tls session: {e}"));
                0
            }
        },
    };
    // Gone from the registry: the sink closed it (going down, stopping), and a partial
    // line is its own doing, not the peer's.
    let closed_by_peer = lock(&shared.connections).live.remove(&id).is_some();
    if leftover > 0 && closed_by_peer {
        decoder.leftover(leftover);
    }
    let errors = decoder.flush(&shared.stats, 0, 0);
    shared.print_errors(&errors);
}

/// Reads `conn` to its end through `decoder`; returns the bytes left undecoded.
fn read_all(shared: &Shared, mut conn: impl Read, decoder: &mut Decoder) -> usize {
    let slow = shared.config.slow_bytes_per_sec;
    let read_size = slow.map_or(READ_BUF, |bps| ((bps / 20) as usize).clamp(1, READ_BUF));
    let mut buf: Vec<u8> = Vec::with_capacity(read_size * 2);
    let started = Instant::now();
    let mut total: u64 = 0;
    loop {
        if !shared.wait_while_paused() {
            break;
        }
        let len = buf.len();
        buf.resize(len + read_size, 0);
        let n = match conn.read(&mut buf[len..]) {
            Ok(0) => 0,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {
                buf.truncate(len);
                continue;
            }
            Err(e) => {
                if e.kind() == ErrorKind::InvalidData {
                    // A TLS handshake or record the sink refused (or the client aborted).
                    decoder.error(format!("tls: {e}"));
                }
                0
            }
        };
        buf.truncate(len + n);
        if n == 0 {
            break;
        }
        // A read that was waiting when the sink paused counts nothing until it resumes.
        if !shared.wait_while_paused() {
            break;
        }
        total += n as u64;
        let now_us = shared.clock.elapsed().as_micros() as u64;
        let consumed = if shared.config.keep == Keep::Bytes {
            buf.len()
        } else {
            decoder.feed(&buf, now_us)
        };
        buf.drain(..consumed);
        publish(shared, decoder, n as u64, now_us);
        if decoder.fatal {
            buf.clear();
            break;
        }
        if let Some(bps) = slow {
            let due = started + Duration::from_secs_f64(total as f64 / bps as f64);
            if !shared.sleep_unless_stopped(due.saturating_duration_since(Instant::now())) {
                break;
            }
        }
    }
    buf.len()
}

/// Publishes a read of `bytes`: writes what `decoder` has to echo, then adds its tally to the
/// sink's counts, then prints the read's errors. The echo goes first so that whoever sees a
/// datapoint counted finds its line already written.
fn publish(shared: &Shared, decoder: &mut Decoder, bytes: u64, now_us: u64) {
    if let Some(out) = &shared.config.echo
        && !decoder.echo.is_empty()
    {
        let mut out = lock(out);
        let _ = out.write_all(&decoder.echo);
        let _ = out.flush();
        decoder.echo.clear();
    }
    let errors = decoder.flush(&shared.stats, bytes, now_us);
    shared.print_errors(&errors);
}

/// Reads datagrams until the sink stops, each decoded as whole plaintext lines.
pub(crate) fn datagram_loop(shared: Arc<Shared>, socket: UdpSocket) {
    let mut decoder = Decoder::new(
        SinkProtocol::Line,
        shared.config.keep,
        shared.config.clock.is_some(),
        shared.config.echo.is_some(),
    );
    let mut buf = vec![0u8; 1 << 16];
    while !shared.stopping() {
        if !shared.wait_while_paused() {
            break;
        }
        match socket.recv(&mut buf) {
            Ok(n) => {
                if !shared.wait_while_paused() {
                    break;
                }
                let now_us = shared.clock.elapsed().as_micros() as u64;
                let consumed = decoder.feed(&buf[..n], now_us);
                if consumed != n {
                    decoder.error(format!("datagram ends inside a line ({n} bytes)"));
                }
                publish(&shared, &mut decoder, n as u64, now_us);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                shared.error(format!("udp: {e}"));
                break;
            }
        }
    }
}
