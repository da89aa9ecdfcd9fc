//! `anthracite sink` and `anthracite send`: watch datapoints arrive and send one, without a
//! carbon-cache or `nc` (the README's quick start).

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anthracite_sink::{Keep, Sink, SinkConfig, SinkProtocol};
use anyhow::{Context, Result, bail};

/// Prints every datapoint received on `listen` as a line (`name value timestamp`), pickle or
/// plaintext (told apart by a connection's first byte), until interrupted.
pub fn sink(listen: SocketAddr) -> Result<()> {
    let stdout: anthracite_sink::Echo = Arc::new(Mutex::new(std::io::stdout()));
    let config = SinkConfig {
        label: "anthracite sink".into(),
        protocol: SinkProtocol::Auto,
        keep: Keep::Count,
        echo: Some(stdout),
        ..SinkConfig::default()
    };
    let sink = Sink::bind(listen, config).with_context(|| format!("bind {listen}"))?;
    eprintln!(
        "anthracite sink: listening on {} (pickle or plaintext); Ctrl-C stops",
        sink.addr()
    );
    sink.join();
    Ok(())
}

/// How long `send` keeps trying a relay that refuses the connection (one still starting).
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);

/// Sends each of `lines` (plaintext `name value timestamp`) to `to` over one connection.
pub fn send(to: SocketAddr, lines: &[String]) -> Result<()> {
    if let Some(l) = lines.iter().find(|l| l.split_whitespace().count() != 3) {
        bail!("{l:?} is not `name value timestamp`");
    }
    let deadline = std::time::Instant::now() + CONNECT_PATIENCE;
    let mut conn = loop {
        match TcpStream::connect_timeout(&to, Duration::from_secs(5)) {
            Ok(c) => break c,
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => {
                return Err(e).with_context(|| format!("connect to {to} (is the relay running?)"));
            }
        }
    };
    let mut text = String::new();
    for l in lines {
        text.push_str(l.trim());
        text.push('\n');
    }
    conn.write_all(text.as_bytes())?;
    conn.shutdown(std::net::Shutdown::Write)?;
    eprintln!("anthracite send: {} line(s) to {to}", lines.len());
    Ok(())
}
