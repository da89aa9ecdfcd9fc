//! A minimal HTTP/1.0 GET over loopback for the admin endpoints, and a reader of Prometheus
//! text (independent of the exporter the relay uses).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// `GET path` on `addr`: `(status, body)`, or the I/O error (e.g. nothing listening yet).
pub fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no header end in {text:?}")))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status in {head:?}")))?;
    Ok((status, body.to_string()))
}

/// Prometheus text: `name{labels}` exactly as rendered → value. Comments are skipped.
pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The value of `name` with exactly these labels (in any order); `None` if absent.
pub fn value(metrics: &BTreeMap<String, f64>, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics.iter().find_map(|(series, v)| {
        let (n, rest) = series.split_once('{').unwrap_or((series, "}"));
        if n != name {
            return None;
        }
        let inner = rest.strip_suffix('}')?;
        let mut have: Vec<(String, String)> = if inner.is_empty() {
            Vec::new()
        } else {
            inner
                .split("\",")
                .map(|kv| {
                    let (k, v) = kv.split_once("=\"").unwrap_or((kv, ""));
                    (k.to_string(), v.trim_end_matches('"').to_string())
                })
                .collect()
        };
        let mut want: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        have.sort();
        want.sort();
        (have == want).then_some(*v)
    })
}

/// The sum of every series of `name` whose labels include `labels`.
pub fn sum(metrics: &BTreeMap<String, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    metrics
        .iter()
        .filter(|(series, _)| {
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|(_, v)| *v)
        .sum()
}
