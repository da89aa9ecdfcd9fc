//! Embedding anthracite in another program: own listener, own shutdown, own datapoints, and
//! delivery feedback instead of polling.
//!
//! Starts a relay that forwards to a local "carbon-cache" (a tiny sink in this example). The
//! relay binds exactly one socket, a plaintext listener on an ephemeral loopback port, so it
//! runs beside a carbon that holds 2003 and 2004. It sends two datapoints over that port and
//! one through an `Ingestor`, waits on the ingestor's delivery receipt, then shuts down and
//! prints the counters.
//!
//! ```text
//! cargo run --example embed
//! ```

use anthracite::{Config, Delivery, Pushed, Relay};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A stand-in for carbon-cache: counts the bytes it receives.
    let sink = TcpListener::bind("127.0.0.1:0").await?;
    let sink_addr = sink.local_addr()?;
    let received = tokio::spawn(async move {
        let mut total = 0usize;
        if let Ok((mut conn, _)) = sink.accept().await {
            let mut buf = vec![0u8; 65536];
            while let Ok(n) = conn.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                total += n;
            }
        }
        total
    });

    // A builder binds nothing unless asked: no 2003, no 2004.
    let config = Config::builder()
        .destinations([format!("{sink_addr}:a")])
        .telemetry_interval(None)
        .shutdown_grace(std::time::Duration::from_secs(5))
        .build()?;
    let line = TcpListener::bind("127.0.0.1:0").await?;
    let line_addr = line.local_addr()?;
    let relay = Relay::builder(config).line_listener(line).build()?;
    let handle = relay.handle();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(relay.run(async {
        let _ = stop_rx.await;
    }));

    let mut client = TcpStream::connect(line_addr).await?;
    client
        .write_all(b"example.embed.a 1.5 1700000000\nexample.embed.b 2 1700000000\n")
        .await?;
    client.shutdown().await?;

    // A non-socket source pushes datapoints directly and learns what became of each.
    let mut ingestor = handle.ingestor();
    match ingestor.push(b"example.embed.direct", 1_700_000_000.0, 42.0) {
        Pushed::Accepted | Pushed::FlushNow => {}
        other => eprintln!("not accepted: {other:?}"),
    }
    let nan = ingestor.push(b"example.embed.nan", 1_700_000_000.0, f64::NAN);
    println!("a NaN value: {nan:?}");
    let flushed = ingestor.flush().await;
    println!(
        "flushed: {} queued, {} dropped by a full queue",
        flushed.queued, flushed.dropped
    );
    // Wait until the ingestor's data has left the queue, without polling.
    let delivery = ingestor.receipt().delivered().await;
    assert_eq!(delivery, Delivery::Settled);

    // Shutdown stops receivers first, and each connection parses what its client already
    // sent: the client's two lines are not lost by stopping now.
    let _ = stop_tx.send(());
    let report = running.await??;
    let bytes = received.await?;
    let d = &report.stats.destinations[0];
    println!(
        "received {} datapoints, sent {} to {} ({} bytes of pickle), undelivered {:?}",
        report.stats.ingest.received, d.sent, d.name, bytes, report.undelivered
    );
    Ok(())
}
