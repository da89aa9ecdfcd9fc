//! The status page (`GET /` on the admin listener) in a real browser: headless Chromium loads
//! it from a relay with one destination down and spilling, lets the page's script read the
//! relay, and the rendered DOM must say what `/destinations` and `/metrics` say. The same run
//! leaves a screenshot (`docs/status-page.png` is one such, copied by hand).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anthracite_sink::{Sink, SinkProtocol};
use anthracite_testkit as testkit;
use testkit::http::{get, parse_metrics, value};
use testkit::process::output_with_timeout;
use testkit::relay::{TestRelay, config_for};

const WAIT: Duration = Duration::from_secs(60);

/// Chromium with the flags that work in a container as root, a fresh profile in `profile`.
fn chromium(profile: &Path) -> Command {
    testkit::apt::require("chromium", "chromium");
    let mut cmd = Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    cmd
}

/// The page as the browser renders it after its script ran: virtual time lets the first
/// refreshes (three fetches each) complete before the DOM is dumped.
fn rendered_dom(url: &str, profile: &Path) -> String {
    let mut cmd = chromium(profile);
    cmd.args(["--virtual-time-budget=5000", "--dump-dom", url]);
    let out = output_with_timeout("chromium --dump-dom", cmd, Vec::new(), WAIT);
    assert!(
        out.status.success(),
        "chromium --dump-dom failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text of the `<td data-field="name">` cell within `scope`.
fn field(scope: &str, name: &str) -> Option<String> {
    let start = scope.find(&format!("data-field=\"{name}\""))?;
    let rest = &scope[start..];
    let open = rest.find('>')? + 1;
    let close = rest.find("</td>")?;
    Some(strip_tags(&rest[open..close]))
}

fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for c in html.chars() {
        match c {
            '<' => inside = true,
            '>' => inside = false,
            c if !inside => out.push(c),
            _ => {}
        }
    }
    out.replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
}

/// The `<tr>` carrying `attr="value"`.
fn row<'a>(dom: &'a str, attr: &str, value: &str) -> &'a str {
    let key = format!("{attr}=\"{value}\"");
    let start = dom
        .find(&key)
        .unwrap_or_else(|| panic!("no row {key} on the page:\n{dom}"));
    let end = dom[start..].find("</tr>").map_or(dom.len(), |e| start + e);
    &dom[start..end]
}

/// A count as the page prints it ("30,000") as a number.
fn number(text: &str) -> f64 {
    text.replace(',', "")
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{text:?} is not a count: {e}"))
}

#[test]
fn status_page_in_chromium_shows_what_destinations_and_metrics_say_with_a_destination_down() {
    let up = Sink::start("up", SinkProtocol::Pickle);
    let ports = testkit::free_ports(2);
    let (down_port, admin_port) = (ports[0], ports[1]);
    let spill = tempfile::tempdir().expect("tempdir");
    let dests = vec![
        format!("127.0.0.1:{}:a", up.port()),
        format!("127.0.0.1:{down_port}:b"),
    ];
    let mut toml = config_for(&dests, "");
    toml.push_str(&format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\
         [destinations.queue]\nmax_datapoints = 2000\n\
         [destinations.spill]\ndir = {:?}\nsegment_bytes = 1048576\nmax_bytes = 67108864\n",
        spill.path().display().to_string()
    ));
    let relay = TestRelay::start(&toml);
    let admin: SocketAddr = ([127, 0, 0, 1], admin_port).into();

    let (n, bad) = (20_000u64, 5u64);
    let mut payload = String::new();
    for i in 0..n {
        payload.push_str(&format!("page.m{i} {i} 1700000000\n"));
    }
    for i in 0..bad {
        payload.push_str(&format!("page.bad{i} not-a-number 1700000000\n"));
    }
    {
        use std::io::Write;
        let mut c = std::net::TcpStream::connect(relay.line).expect("connect relay");
        c.write_all(payload.as_bytes()).expect("write lines");
    }
    // Quiet before the browser looks: `a` delivered all, `b` settled everything on disk.
    relay.wait_stats("a delivered, b spilled", WAIT, |s| {
        let [a, b] = &s.destinations[..] else {
            return false;
        };
        s.ingest.received == n
            && a.sent == a.routed
            && a.queued_memory == 0
            && b.queued_memory == 0
            && b.spill.spilled_datapoints == b.routed
            && b.routed > 0
    });

    let (status, page) = get(admin, "/").expect("GET /");
    assert_eq!(status, 200);
    assert!(page.starts_with("<!doctype html>"), "{page}");
    let profile = tempfile::tempdir().expect("profile dir");
    let dom = rendered_dom(&format!("http://{admin}/"), profile.path());

    // What the relay says now (the data path is quiet: the figures asserted do not move).
    let (_, destinations) = get(admin, "/destinations").expect("GET /destinations");
    let destinations: serde_json::Value =
        serde_json::from_str(&destinations).expect("/destinations is JSON");
    let (_, metrics) = get(admin, "/metrics").expect("GET /metrics");
    let metrics = parse_metrics(&metrics);

    let refreshes: u32 = dom
        .split("data-refreshes=\"")
        .nth(1)
        .and_then(|r| r.split('"').next()?.parse().ok())
        .unwrap_or(0);
    assert!(refreshes >= 1, "the page never read the relay:\n{dom}");

    let list = destinations["destinations"]
        .as_array()
        .expect("destinations list");
    assert_eq!(list.len(), 2);
    for d in list {
        let address = d["address"].as_str().expect("address");
        let tr = row(&dom, "data-destination", address);
        let connected = d["connected"].as_bool().expect("connected");
        assert_eq!(
            field(tr, "connection").as_deref(),
            Some(if connected { "up" } else { "down" }),
            "{address}: {tr}"
        );
        for (f, key) in [
            ("memory-queue", "memory_queue"),
            ("disk-queue", "disk_queue"),
        ] {
            let shown = number(&field(tr, f).unwrap_or_default());
            assert_eq!(
                shown,
                d[key]["datapoints"].as_f64().expect("datapoints"),
                "{address} {f}: {tr}"
            );
        }
        let error = field(tr, "last-error").unwrap_or_default();
        match d["last_error"]["message"].as_str() {
            Some(message) => assert!(error.starts_with(message), "{address}: {error:?}"),
            None => assert_eq!(error, "–", "{address}"),
        }
    }
    let down = row(&dom, "data-destination", &dests[1]);
    assert_eq!(field(down, "connection").as_deref(), Some("down"));
    assert!(
        number(&field(down, "disk-queue").unwrap_or_default()) > 0.0,
        "b spilled: {down}"
    );
    assert_ne!(field(down, "oldest-spilled").as_deref(), Some("–"));

    let received = value(
        &metrics,
        "anthracite_received_datapoints_total",
        &[("source", "line_tcp")],
    )
    .expect("received series");
    assert_eq!(received, n as f64);
    let source = row(&dom, "data-source", "line_tcp");
    assert_eq!(
        number(&field(source, "received").unwrap_or_default()),
        received
    );

    let invalid = value(
        &metrics,
        "anthracite_invalid_datapoints_total",
        &[("source", "line_tcp"), ("reason", "bad_value")],
    )
    .expect("invalid series");
    assert_eq!(invalid, bad as f64);
    let drop = row(&dom, "data-drop", "source|line_tcp|bad_value");
    assert_eq!(number(&field(drop, "count").unwrap_or_default()), invalid);
    // Only non-zero drop series get a row: no destination dropped anything here.
    assert!(!dom.contains("data-drop=\"destination|"), "{dom}");

    let version = row(&dom, "data-config", "version");
    assert_eq!(
        field(version, "value").as_deref(),
        Some(env!("CARGO_PKG_VERSION"))
    );
    assert!(dom.contains("no reloads since start"), "{dom}");

    // A screenshot of the same page, for the eye (and the picture in docs/operations.md).
    let shot = profile.path().join("status-page.png");
    let mut cmd = chromium(&profile.path().join("shot"));
    cmd.args(["--virtual-time-budget=7000", "--window-size=1280,1500"])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("http://{admin}/"));
    let out = output_with_timeout("chromium --screenshot", cmd, Vec::new(), WAIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(png.starts_with(b"\x89PNG"), "screenshot is a PNG");
    if let Ok(keep) = std::env::var("ANTHRACITE_STATUS_SCREENSHOT") {
        std::fs::write(&keep, &png).expect("copy the screenshot");
    }
    relay.stop();
}
