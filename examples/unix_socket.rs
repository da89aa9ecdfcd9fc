//! Serving plaintext on a Unix socket instead of TCP: any [`anthracite::Listener`] can feed a
//! receiver (a Unix socket here; an `anthracite::Incoming` stream of in-memory or
//! pre-wrapped TLS connections works the same way).
//!
//! ```text
//! cargo run --no-default-features --example unix_socket
//! ```

use std::time::Duration;

use anthracite::{Config, Relay};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, UnixListener, UnixStream};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A stand-in for a carbon-cache that takes plaintext: keeps the lines it gets.
    let sink = TcpListener::bind("127.0.0.1:0").await?;
    let sink_addr = sink.local_addr()?;
    let printed = tokio::spawn(async move {
        let (conn, _) = sink.accept().await?;
        let mut lines = BufReader::new(conn).lines();
        let mut got = Vec::new();
        while let Some(line) = lines.next_line().await? {
            got.push(line);
        }
        Ok::<_, std::io::Error>(got)
    });

    let dir = std::env::temp_dir().join(format!("anthracite-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("line.sock");
    let _ = std::fs::remove_file(&path);
    let socket = UnixListener::bind(&path)?;

    let config = Config::builder()
        .destinations([format!("{sink_addr}:a")])
        .protocol(anthracite::OutputProtocol::Line)
        .telemetry_interval(None)
        .shutdown_grace(Duration::from_secs(5))
        .build()?;
    let relay = Relay::builder(config).line_connections(socket).build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(relay.run(async {
        let _ = stopped.await;
    }));

    let mut client = UnixStream::connect(&path).await?;
    client
        .write_all(b"example.unix.socket 1 1700000000\n")
        .await?;
    client.shutdown().await?;

    // Shutdown takes the connection waiting on the socket, drains it and the queue, then
    // closes the destination.
    let _ = stop.send(());
    let report = running.await??;
    println!("the sink got: {:?}", printed.await??);
    println!("sent: {}", report.stats.destinations[0].sent);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
