//! `anthracite sink` and `anthracite send`: watch datapoints arrive and send one, without a
//! carbon-cache or `nc` (the README's quick start).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Largest pickle frame the sink reads (carbon's receiver default).
const MAX_PICKLE_FRAME: usize = 1 << 20;

/// Prints every datapoint received on `listen` as a line (`name value timestamp`), pickle or
/// plaintext (told apart by a connection's first byte: a pickle frame starts with its
/// big-endian length, whose first byte is 0 for any frame under 16 MiB).
pub fn sink(listen: SocketAddr) -> Result<()> {
    let listener = TcpListener::bind(listen).with_context(|| format!("bind {listen}"))?;
    eprintln!(
        "anthracite sink: listening on {} (pickle or plaintext); Ctrl-C stops",
        listener.local_addr()?
    );
    let out = Arc::new(Mutex::new(std::io::stdout()));
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let out = out.clone();
        std::thread::spawn(move || {
            let peer = conn.peer_addr().ok();
            if let Err(e) = serve(conn, &out) {
                eprintln!("anthracite sink: connection from {peer:?}: {e:#}");
            }
        });
    }
    Ok(())
}

fn serve(conn: TcpStream, out: &Mutex<std::io::Stdout>) -> Result<()> {
    let mut reader = BufReader::new(conn);
    let first = match reader.fill_buf()?.first() {
        Some(&b) => b,
        None => return Ok(()),
    };
    if first == 0 {
        let mut len = [0u8; 4];
        loop {
            match reader.read_exact(&mut len) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e.into()),
            }
            let n = u32::from_be_bytes(len) as usize;
            if n > MAX_PICKLE_FRAME {
                bail!("pickle frame of {n} bytes is over {MAX_PICKLE_FRAME}");
            }
            let mut frame = vec![0u8; n];
            reader.read_exact(&mut frame)?;
            let points: Vec<(String, (serde_pickle::Value, serde_pickle::Value))> =
                serde_pickle::from_slice(&frame, serde_pickle::DeOptions::new())
                    .context("not a carbon pickle frame")?;
            let mut text = String::new();
            for (name, (ts, value)) in points {
                text.push_str(&format!("{name} {} {}\n", number(&value), number(&ts)));
            }
            let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
            o.write_all(text.as_bytes())?;
            o.flush()?;
        }
    }
    for line in reader.lines() {
        let line = line?;
        let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
        writeln!(o, "{}", line.trim_end())?;
        o.flush()?;
    }
    Ok(())
}

fn number(v: &serde_pickle::Value) -> String {
    use serde_pickle::Value;
    match v {
        Value::I64(i) => i.to_string(),
        Value::F64(f) => f.to_string(),
        Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
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
