//! A loopback carbon-cache stand-in: accepts pickle connections and records every datapoint.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_pickle::{DeOptions, Value};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// Datapoints received, in arrival order: `(name, timestamp, value)`.
#[derive(Clone, Default)]
pub struct Received(pub Arc<Mutex<Vec<(String, f64, f64)>>>);

impl Received {
    /// A copy of everything so far.
    pub fn all(&self) -> Vec<(String, f64, f64)> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// How many so far.
    pub fn len(&self) -> usize {
        self.0.lock().map(|v| v.len()).unwrap_or(0)
    }
}

/// Starts a sink on `addr` (port 0 for any); returns its address and the record.
pub async fn start(addr: &str) -> (SocketAddr, Received) {
    let listener = TcpListener::bind(addr).await.expect("bind sink");
    let local = listener.local_addr().expect("sink addr");
    let received = Received::default();
    let r = received.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let r = r.clone();
            tokio::spawn(async move {
                loop {
                    let mut len = [0u8; 4];
                    if stream.read_exact(&mut len).await.is_err() {
                        return;
                    }
                    let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
                    if stream.read_exact(&mut frame).await.is_err() {
                        return;
                    }
                    let value = serde_pickle::value_from_slice(&frame, DeOptions::new())
                        .expect("relay sent valid pickle");
                    let mut out = r.0.lock().expect("sink lock");
                    decode(value, &mut out);
                }
            });
        }
    });
    (local, received)
}

fn num(v: &Value) -> f64 {
    match v {
        Value::F64(f) => *f,
        Value::I64(i) => *i as f64,
        other => panic!("not a number: {other:?}"),
    }
}

fn decode(value: Value, out: &mut Vec<(String, f64, f64)>) {
    let Value::List(items) = value else {
        panic!("pickle message is not a list");
    };
    for item in items {
        let Value::Tuple(pair) = item else {
            panic!("entry is not a tuple")
        };
        let name = match &pair[0] {
            Value::String(s) => s.clone(),
            Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("name: {other:?}"),
        };
        let Value::Tuple(tv) = &pair[1] else {
            panic!("datapoint is not a tuple")
        };
        out.push((name, num(&tv[0]), num(&tv[1])));
    }
}
