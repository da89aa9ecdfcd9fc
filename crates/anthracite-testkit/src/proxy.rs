//! A loopback HTTP proxy in front of kinesalite that answers some GetRecords calls with
//! ProvisionedThroughputExceededException or ExpiredIteratorException instead of forwarding;
//! in front of DynamoDB Local it records every call (target, body, status) instead.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Which GetRecords calls fail (1-based call numbers; 0 disables a fault).
#[derive(Debug, Default)]
pub struct Faults {
    /// Every `throttle_every`-th GetRecords call is throttled.
    pub throttle_every: u64,
    /// Every `expire_every`-th GetRecords call gets ExpiredIterator.
    pub expire_every: u64,
    /// GetRecords calls seen.
    pub calls: AtomicU64,
    /// Throttles injected.
    pub throttled: AtomicU64,
    /// Expiries injected.
    pub expired: AtomicU64,
}

/// One forwarded call.
#[derive(Clone, Debug)]
pub struct Exchange {
    /// `X-Amz-Target`, e.g. `DynamoDB_20120810.UpdateItem`.
    pub target: String,
    /// The request body.
    pub body: String,
    /// The upstream answer's HTTP status.
    pub status: u16,
    /// The upstream answer's body.
    pub response: String,
}

/// Every call a recording proxy forwarded, in order.
pub type Recording = Arc<Mutex<Vec<Exchange>>>;

/// Starts the proxy; returns its endpoint URL.
pub async fn start(upstream: &str, faults: Arc<Faults>) -> String {
    spawn(upstream, faults, None).await
}

/// Starts a proxy that forwards everything and records it.
pub async fn start_recording(upstream: &str) -> (String, Recording) {
    let recording = Recording::default();
    let url = spawn(upstream, Arc::default(), Some(recording.clone())).await;
    (url, recording)
}

async fn spawn(upstream: &str, faults: Arc<Faults>, record: Option<Recording>) -> String {
    let upstream = upstream.trim_start_matches("http://").to_string();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let addr = listener.local_addr().expect("proxy addr");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let faults = faults.clone();
            let upstream = upstream.clone();
            let record = record.clone();
            tokio::spawn(async move {
                let _ = serve(client, &upstream, &faults, record.as_ref()).await;
            });
        }
    });
    format!("http://{addr}")
}

/// One request: head (up to the blank line) and body (Content-Length).
async fn read_request(s: &mut TcpStream) -> std::io::Result<Option<(String, Vec<u8>)>> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await? == 0 {
            return Ok(None);
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await?;
    Ok(Some((head, body)))
}

async fn serve(
    mut client: TcpStream,
    upstream: &str,
    faults: &Faults,
    record: Option<&Recording>,
) -> std::io::Result<()> {
    while let Some((head, body)) = read_request(&mut client).await? {
        let target = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("x-amz-target")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_default();
        if target.ends_with(".GetRecords") {
            let n = faults.calls.fetch_add(1, SeqCst) + 1;
            let fault = if faults.throttle_every > 0 && n.is_multiple_of(faults.throttle_every) {
                faults.throttled.fetch_add(1, SeqCst);
                Some("ProvisionedThroughputExceededException")
            } else if faults.expire_every > 0 && n.is_multiple_of(faults.expire_every) {
                faults.expired.fetch_add(1, SeqCst);
                Some("ExpiredIteratorException")
            } else {
                None
            };
            if let Some(kind) = fault {
                let body =
                    format!("{{\"__type\":\"{kind}\",\"message\":\"injected by the test proxy\"}}");
                let resp = format!(
                    "HTTP/1.1 400 Bad Request\r\nContent-Type: application/x-amz-json-1.1\r\nx-amzn-ErrorType: {kind}\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                client.write_all(resp.as_bytes()).await?;
                continue;
            }
        }
        // Forward on a fresh upstream connection that closes after the answer.
        let mut up = TcpStream::connect(upstream).await?;
        let mut new_head = String::new();
        for line in head.split("\r\n") {
            if line.is_empty() {
                continue;
            }
            let lower = line.to_ascii_lowercase();
            if lower.starts_with("connection:") {
                continue;
            }
            new_head.push_str(line);
            new_head.push_str("\r\n");
        }
        new_head.push_str("Connection: close\r\n\r\n");
        up.write_all(new_head.as_bytes()).await?;
        up.write_all(&body).await?;
        let mut resp = Vec::new();
        up.read_to_end(&mut resp).await?;
        if let Some(r) = record {
            let text = String::from_utf8_lossy(&resp);
            let status = text
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let response = text
                .split_once("\r\n\r\n")
                .map(|(_, b)| b.to_string())
                .unwrap_or_default();
            r.lock().expect("recording").push(Exchange {
                target: target.clone(),
                body: String::from_utf8_lossy(&body).into_owned(),
                status,
                response,
            });
        }
        client.write_all(&resp).await?;
        // The upstream answer says `Connection: close`: the client reconnects.
        return Ok(());
    }
    Ok(())
}
