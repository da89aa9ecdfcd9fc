//! Embedding anthracite in another program: own listeners, own shutdown, own datapoints.
//!
//! Starts a relay that forwards to a local "carbon-cache" (a tiny sink in this example),
//! sends two datapoints over its plaintext port and one through an `Ingestor`, then shuts it
//! down and prints the counters.
//!
//! ```text
//! cargo run --example embed
//! ```

use std::time::Duration;

use anthracite::{Config, Relay};
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

    let config = Config::from_toml_str(&format!(
        r#"
        [destinations]
        servers = ["{sink_addr}:a"]
        [telemetry]
        interval_secs = 0
        [shutdown]
        grace_secs = 5
        "#
    ))?;
    // Our own listener on an ephemeral port; the pickle receiver is disabled by not binding it.
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

    // A non-socket source pushes datapoints directly.
    let mut ingestor = handle.ingestor();
    ingestor.push(b"example.embed.direct", 1_700_000_000.0, 42.0);
    ingestor.flush().await;

    // Wait until all three are accounted for, then stop.
    for _ in 0..100 {
        if handle.stats().received >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop_tx.send(());
    let report = running.await??;
    let bytes = received.await?;
    let d = &report.stats.destinations[0];
    println!(
        "received {} datapoints, sent {} to {} ({} bytes of pickle), undelivered {:?}",
        report.stats.received, d.sent, d.name, bytes, report.undelivered
    );
    Ok(())
}
