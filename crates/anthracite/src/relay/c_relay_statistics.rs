//! carbon-c-relay's statistics (`collector.c`): every `submit every` seconds the relay's
//! counters, under the names carbon-c-relay gives them (`<prefix>.metricsReceived`,
//! `dispatcherN.…` per worker, `destinations.<host:port>.…` per server,
//! `aggregators.…`), routed like received lines. The values are anthracite's counters
//! closest to each; the time figures (`wallTime_us`, `sleepTime_us`) are 0 (anthracite's
//! CPU time is on `/metrics`).

use std::collections::HashMap;
use std::fmt::Write as _;

use tokio_util::sync::CancellationToken;

use crate::ingest::{Pipeline, Source, unix_now};
use crate::protocol::DropReason;
use crate::router::c_relay::ServerProto;
use crate::router::{CRelayProgram, Strategy};

/// Runs until `stop`, on the pipeline's current configuration at each submission.
pub(super) async fn run(pipeline: Pipeline, stop: CancellationToken) {
    let mut ingestor = pipeline.ingestor(Source::Internal);
    let mut previous: HashMap<String, u64> = HashMap::new();
    let mut text = String::new();
    loop {
        let router = pipeline.router();
        let Strategy::CRelay(program) = router.strategy() else {
            return;
        };
        let Some(stats) = program.statistics.clone() else {
            return;
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(std::time::Duration::from_secs(u64::from(stats.interval))) => {}
        }
        text.clear();
        let now = unix_now() as i64;
        for (name, value) in figures(&pipeline, program) {
            let value = if stats.reset {
                let before = previous.insert(name.clone(), value).unwrap_or(0);
                value.saturating_sub(before)
            } else {
                value
            };
            let _ = writeln!(text, "{}{name} {value} {now}", stats.prefix);
        }
        for line in text.lines() {
            let _ = ingestor.line(line.as_bytes());
        }
        ingestor.flush().await;
    }
}

/// Every name (after the prefix) and its value, in carbon-c-relay's order.
fn figures(pipeline: &Pipeline, program: &CRelayProgram) -> Vec<(String, u64)> {
    let Some(stats) = &program.statistics else {
        return Vec::new();
    };
    let ingest = pipeline.stats().snapshot();
    let received = ingest.received;
    let blackholed = ingest.invalid.get(DropReason::Blackholed);
    let discarded = ingest.invalid.total().saturating_sub(blackholed);
    let mut out = Vec::new();
    for n in 1..=stats.dispatchers {
        // anthracite's connections are not tied to a worker: the first carries the totals.
        let (r, b, d) = if n == 1 {
            (received, blackholed, discarded)
        } else {
            (0, 0, 0)
        };
        out.push((format!("dispatcher{n}.metricsReceived"), r));
        out.push((format!("dispatcher{n}.metricsBlackholed"), b));
        out.push((format!("dispatcher{n}.metricsDiscarded"), d));
        out.push((format!("dispatcher{n}.wallTime_us"), 0));
        out.push((format!("dispatcher{n}.sleepTime_us"), 0));
    }
    out.push(("metricsReceived".into(), received));
    out.push(("metricsBlackholed".into(), blackholed));
    out.push(("metricsDiscarded".into(), discarded));
    out.push(("dispatch_wallTime_us".into(), 0));
    out.push(("dispatch_sleepTime_us".into(), 0));
    let server = |out: &mut Vec<(String, u64)>, name: &str, figures: [u64; 4]| {
        let [sent, queued, stalls, dropped] = figures;
        out.push((format!("destinations.{name}.sent"), sent));
        out.push((format!("destinations.{name}.queued"), queued));
        out.push((format!("destinations.{name}.stalls"), stalls));
        out.push((format!("destinations.{name}.dropped"), dropped));
        out.push((format!("destinations.{name}.wallTime_us"), 0));
    };
    server(&mut out, "internal", [0; 4]);
    let queues = pipeline.queues();
    let mut totals = [0u64; 4];
    for (s, q) in program.program.servers.iter().zip(queues.iter()) {
        let name = match s.proto {
            ServerProto::File => s.ip.clone(),
            ServerProto::Tcp => format!("{}:{}", s.ip, s.port),
            ServerProto::Udp => format!("{}:{}-udp", s.ip, s.port),
        }
        .replace('.', "_");
        let snap = q.stats().snapshot();
        let figures = [
            snap.sent,
            snap.queued,
            snap.full_waits,
            snap.dropped_total(),
        ];
        for (t, f) in totals.iter_mut().zip(figures) {
            *t += f;
        }
        server(&mut out, &name, figures);
    }
    let [sent, queued, stalls, dropped] = totals;
    out.push(("metricsSent".into(), sent));
    out.push(("metricsQueued".into(), queued));
    out.push(("metricStalls".into(), stalls));
    out.push(("metricsDropped".into(), dropped));
    out.push(("server_wallTime_us".into(), 0));
    out.push((
        "connections".into(),
        ingest.active_connections + ingest.idle_closed_connections,
    ));
    out.push(("disconnects".into(), ingest.idle_closed_connections));
    if !program.program.aggregators.is_empty() {
        let counts = program
            .aggregates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .counts;
        out.push(("aggregators.metricsReceived".into(), counts.received));
        out.push(("aggregators.metricsSent".into(), counts.sent));
        out.push(("aggregators.metricsDropped".into(), counts.dropped));
    }
    out
}
