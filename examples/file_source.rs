//! A non-socket source: replay a file of Graphite plaintext lines through the relay's pipeline
//! into carbon-caches, with carbon's parsing rules, routing and queues, binding no port at all.
//!
//! ```text
//! cargo run --example file_source -- metrics.txt 127.0.0.1:2104:a 127.0.0.1:2204:b
//! cargo run --example file_source        # self-contained demo: a generated file, two sinks
//! ```
//!
//! The ingestor's feedback drives the loop: `Pushed::FlushNow` says its pending buffer is big
//! enough to hand over, `Flushed` says what the queues did with it (the queue policy here is
//! `block`, so a slow carbon-cache slows the reader instead of losing data), and the final
//! receipt resolves once everything read has left the queues.

use std::io::BufRead;
use std::time::Duration;

use anthracite::{Config, Delivery, Pushed, Relay, WhenFull};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let demo_run = args.len() < 2;
    let (path, destinations, sinks) = if demo_run {
        demo().await?
    } else {
        (args[0].clone().into(), args[1..].to_vec(), Vec::new())
    };

    let config = Config::builder()
        .destinations(destinations)
        .when_full(WhenFull::Block)
        .telemetry_interval(None)
        .shutdown_grace(Duration::from_secs(10))
        .build()?;
    let relay = Relay::builder(config).build()?;
    let handle = relay.handle();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(relay.run(async {
        let _ = stop_rx.await;
    }));

    let mut ingestor = handle.ingestor();
    let (mut accepted, mut rejected) = (0u64, 0u64);
    let file = std::io::BufReader::new(std::fs::File::open(&path)?);
    for line in file.split(b'\n') {
        let line = line?;
        let line = line.strip_suffix(b"\r").unwrap_or(&line);
        if line.is_empty() {
            continue;
        }
        match ingestor.line(line) {
            Pushed::Accepted => accepted += 1,
            Pushed::FlushNow => {
                accepted += 1;
                ingestor.flush().await;
            }
            other => {
                rejected += 1;
                eprintln!("skipped {:?}: {other:?}", String::from_utf8_lossy(line));
            }
        }
    }
    let flushed = ingestor.flush().await;
    let delivery = ingestor.receipt().delivered().await;
    let _ = stop_tx.send(());
    let report = running.await??;
    println!(
        "{}: {accepted} accepted, {rejected} rejected; last flush queued {}; {:?}",
        path.display(),
        flushed.queued,
        delivery
    );
    for d in &report.stats.destinations {
        println!("  {}: sent {}", d.name, d.sent);
    }
    for sink in sinks {
        let bytes = sink.await?;
        println!("  sink received {bytes} bytes");
    }
    if demo_run {
        let _ = std::fs::remove_file(&path);
    }
    if delivery != Delivery::Settled {
        return Err("not everything was delivered".into());
    }
    Ok(())
}

type Sink = tokio::task::JoinHandle<usize>;

/// A generated file and two counting sinks standing in for carbon-caches.
async fn demo() -> std::io::Result<(std::path::PathBuf, Vec<String>, Vec<Sink>)> {
    let path =
        std::env::temp_dir().join(format!("anthracite-file-source-{}.txt", std::process::id()));
    let mut text = String::new();
    for i in 0..1000 {
        text.push_str(&format!("demo.host{:02}.load {} 1700000000\n", i % 50, i));
    }
    text.push_str("a line that is not a datapoint\n");
    std::fs::write(&path, text)?;
    let mut destinations = Vec::new();
    let mut sinks = Vec::new();
    for instance in ["a", "b"] {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        destinations.push(format!("{}:{instance}", listener.local_addr()?));
        sinks.push(tokio::spawn(async move {
            let mut total = 0;
            if let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = vec![0u8; 65536];
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    total += n;
                }
            }
            total
        }));
    }
    Ok((path, destinations, sinks))
}
