//! A program embedding anthracite, as an outsider writes it from the embedding guide (docs/embedding.md):
//! only the crate root, no internals. [`LineSink`] stands in for a carbon-cache that takes
//! plaintext (`protocol = line`), so the test can see where every datapoint went.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;

/// A carbon-cache stand-in: counts every metric name it receives over plaintext, on every
/// connection.
#[derive(Debug)]
pub struct LineSink {
    addr: SocketAddr,
    names: Arc<Mutex<BTreeMap<String, u32>>>,
}

impl LineSink {
    /// Binds a loopback port and starts accepting.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let names: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
        let seen = names.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut lines = BufReader::new(conn).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        if let Some(name) = line.split(' ').next() {
                            let mut map = seen.lock().unwrap_or_else(|p| p.into_inner());
                            *map.entry(name.to_string()).or_default() += 1;
                        }
                    }
                });
            }
        });
        Ok(Self { addr, names })
    }

    /// The destination for anthracite's configuration: `127.0.0.1:port:instance`.
    pub fn destination(&self, instance: &str) -> String {
        format!("{}:{instance}", self.addr)
    }

    /// Every name received so far, with how often.
    pub fn names(&self) -> BTreeMap<String, u32> {
        self.names.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
