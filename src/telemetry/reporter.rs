//! Emits the relay's own metrics into the stream every interval, routed like any datapoint.
//!
//! Names follow carbon: `<prefix>.relays.<host>-<instance>.<leaf>` and, per destination,
//! `….destinations.<host with . → _>:<port>:<instance>.<leaf>`. Counts are per interval.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::TelemetryConfig;
use super::names::carbon as leaf;
use super::stats::StatsSnapshot;
use crate::ingest::{Pipeline, Source, unix_now};
use crate::protocol::DropReason;
use crate::queue::DestinationDropReason;

/// carbon's destination component: `host:port:instance` with dots replaced by underscores
/// (`None` when there is no instance, as carbon's `%s` formatting gives).
pub fn destination_component(host: &str, port: u16, instance: Option<&str>) -> String {
    format!("{}:{}:{}", host, port, instance.unwrap_or("None")).replace('.', "_")
}

/// Builds one interval's datapoints from two snapshots.
pub fn interval_datapoints(
    root: &str,
    components: &[String],
    prev: &StatsSnapshot,
    now: &StatsSnapshot,
    peaks: &[u64],
) -> Vec<(String, f64)> {
    let received = |s: &StatsSnapshot| -> u64 {
        s.received_by_source
            .iter()
            .filter(|(src, _)| *src != Source::Internal)
            .map(|(_, n)| n)
            .sum()
    };
    let mut out = vec![
        (
            format!("{root}.{}", leaf::METRICS_RECEIVED),
            received(now).saturating_sub(received(prev)) as f64,
        ),
        (
            format!("{root}.{}", leaf::ACTIVE_CONNECTIONS),
            now.active_connections as f64,
        ),
        (
            format!("{root}.{}", leaf::BLACKLIST_MATCHES),
            now.blacklist_matches.saturating_sub(prev.blacklist_matches) as f64,
        ),
        (
            format!("{root}.{}", leaf::WHITELIST_REJECTS),
            now.whitelist_rejects.saturating_sub(prev.whitelist_rejects) as f64,
        ),
        (
            format!("{root}.{}", leaf::INVALID_DATAPOINTS),
            now.invalid.total().saturating_sub(prev.invalid.total()) as f64,
        ),
        (
            format!("{root}.{}", leaf::UDP_KERNEL_DROPS),
            now.udp_kernel_drops.saturating_sub(prev.udp_kernel_drops) as f64,
        ),
    ];
    for reason in DropReason::ALL {
        out.push((
            format!("{root}.{}.{}", leaf::DROPPED_DATAPOINTS, reason.as_str()),
            now.invalid
                .get(reason)
                .saturating_sub(prev.invalid.get(reason)) as f64,
        ));
    }
    for (i, d) in now.destinations.iter().enumerate() {
        let (Some(p), Some(component)) = (prev.destinations.get(i), components.get(i)) else {
            continue;
        };
        let base = format!("{root}.destinations.{component}");
        let full = DestinationDropReason::QueueFull;
        out.push((
            format!("{base}.{}", leaf::ATTEMPTED_RELAYS),
            d.routed.saturating_sub(p.routed) as f64,
        ));
        out.push((
            format!("{base}.{}", leaf::SENT),
            d.sent.saturating_sub(p.sent) as f64,
        ));
        out.push((
            format!("{base}.{}", leaf::BATCHES_SENT),
            d.messages.saturating_sub(p.messages) as f64,
        ));
        out.push((
            format!("{base}.{}", leaf::FULL_QUEUE_DROPS),
            d.dropped(full).saturating_sub(p.dropped(full)) as f64,
        ));
        out.push((
            format!("{base}.{}", leaf::QUEUED_UNTIL_CONNECTED),
            d.queued_until_connected
                .saturating_sub(p.queued_until_connected) as f64,
        ));
        out.push((
            format!("{base}.{}", leaf::RELAY_MAX_QUEUE_LENGTH),
            peaks.get(i).copied().unwrap_or(0) as f64,
        ));
        for reason in DestinationDropReason::ALL {
            out.push((
                format!("{base}.{}.{}", leaf::DROPPED_DATAPOINTS, reason.as_str()),
                d.dropped(reason).saturating_sub(p.dropped(reason)) as f64,
            ));
        }
    }
    out
}

/// carbon's `cpuUsage` and `memUsage` (Linux; `None` where `/proc` is unavailable).
///
/// carbon: `(Δ(ru_utime + ru_stime) / Δ wall time) × 100` from `getrusage(RUSAGE_SELF)`, and
/// RSS pages of `/proc/self/statm` × page size. Here the CPU time is `utime + stime` of
/// `/proc/self/stat` (the same process-wide counters, in `USER_HZ` = 100 ticks per second on
/// Linux) and the RSS is `VmRSS` of `/proc/self/status` (the same counter, in KiB).
#[derive(Debug)]
pub struct ProcessUsage {
    last_cpu: Option<f64>,
    last_wall: std::time::Instant,
}

impl Default for ProcessUsage {
    fn default() -> Self {
        Self {
            last_cpu: cpu_seconds(),
            last_wall: std::time::Instant::now(),
        }
    }
}

impl ProcessUsage {
    /// CPU percent since the previous call (or construction).
    pub fn cpu_percent(&mut self) -> Option<f64> {
        let cpu = cpu_seconds()?;
        let wall = std::time::Instant::now();
        let dt = wall.duration_since(self.last_wall).as_secs_f64().max(1e-6);
        let used = cpu - self.last_cpu.unwrap_or(cpu);
        self.last_cpu = Some(cpu);
        self.last_wall = wall;
        Some(used / dt * 100.0)
    }

    /// Resident set size in bytes.
    pub fn rss_bytes() -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
}

/// `utime + stime` of this process, in seconds.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name (which may contain spaces).
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 overall: 12 and 13 after `comm`, 0-based 11, 12.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Runs until `stop` is cancelled, emitting one set of datapoints per interval.
pub async fn run(
    pipeline: Pipeline,
    config: TelemetryConfig,
    interval: Duration,
    stop: CancellationToken,
) {
    let root = config.metric_root();
    let components: Vec<String> = pipeline
        .router()
        .destinations()
        .iter()
        .map(|d| destination_component(&d.host, d.port, d.instance.as_deref()))
        .collect();
    let mut ingestor = pipeline.ingestor(Source::Internal);
    let snapshot = || {
        StatsSnapshot::collect(
            pipeline.stats().snapshot(),
            pipeline.queues().iter().map(|q| &**q.stats()),
        )
    };
    let mut prev = snapshot();
    let mut usage = ProcessUsage::default();
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let now = snapshot();
        let peaks: Vec<u64> = pipeline
            .queues()
            .iter()
            .map(|q| q.stats().depth().take_peak())
            .collect();
        let ts = unix_now();
        let mut points = interval_datapoints(&root, &components, &prev, &now, &peaks);
        if let Some(cpu) = usage.cpu_percent() {
            points.push((format!("{root}.{}", leaf::CPU_USAGE), cpu));
        }
        if let Some(rss) = ProcessUsage::rss_bytes() {
            points.push((format!("{root}.{}", leaf::MEM_USAGE), rss as f64));
        }
        for (name, value) in points {
            // Counted like any datapoint if it is dropped; nothing more to do here.
            let _ = ingestor.push(name.as_bytes(), ts, value);
        }
        ingestor.flush().await;
        prev = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_usage_reads_proc() {
        let mut usage = ProcessUsage::default();
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_add(1);
        }
        assert!(x > 0);
        let cpu = usage.cpu_percent().expect("cpu on Linux");
        assert!((0.0..=800.0).contains(&cpu), "{cpu}");
        assert!(ProcessUsage::rss_bytes().expect("rss on Linux") > 1 << 20);
    }

    #[test]
    fn interval_has_carbon_leaves() {
        let ingest = crate::ingest::IngestStats::new();
        let dest = crate::queue::DestinationStats::new("h:1:a");
        let prev = StatsSnapshot::collect(ingest.snapshot(), [&dest]);
        ingest.record_filtered(2, 3);
        dest.add_queued_until_connected(4);
        let now = StatsSnapshot::collect(ingest.snapshot(), [&dest]);
        let comps = vec![destination_component("h", 1, Some("a"))];
        let points = interval_datapoints("carbon.relays.x-a", &comps, &prev, &now, &[7]);
        let get = |n: &str| points.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        assert_eq!(get("carbon.relays.x-a.blacklistMatches"), Some(2.0));
        assert_eq!(get("carbon.relays.x-a.whitelistRejects"), Some(3.0));
        assert_eq!(get("carbon.relays.x-a.metricsReceived"), Some(0.0));
        assert_eq!(get("carbon.relays.x-a.activeConnections"), Some(0.0));
        let d = "carbon.relays.x-a.destinations.h:1:a";
        assert_eq!(get(&format!("{d}.queuedUntilConnected")), Some(4.0));
        assert_eq!(get(&format!("{d}.relayMaxQueueLength")), Some(7.0));
        for leafname in ["attemptedRelays", "sent", "batchesSent", "fullQueueDrops"] {
            assert_eq!(get(&format!("{d}.{leafname}")), Some(0.0), "{leafname}");
        }
    }

    /// Issue 14: only `queue_full` reached the carbon self-metrics (`fullQueueDrops`); a spill
    /// log that could not take data dropped `spill_full` / `spill_io` datapoints that no series
    /// showed. Every reason of both kinds is a `droppedDatapoints.<reason>` series.
    #[test]
    fn every_drop_reason_is_a_carbon_self_metric() {
        let ingest = crate::ingest::IngestStats::new();
        let dest = crate::queue::DestinationStats::new("h:1:a");
        let prev = StatsSnapshot::collect(ingest.snapshot(), [&dest]);
        for (i, r) in DestinationDropReason::ALL.into_iter().enumerate() {
            dest.add_dropped(r, i as u64 + 1);
        }
        let mut drops = crate::protocol::DropCounts::default();
        for r in DropReason::ALL {
            drops.add(r);
        }
        ingest.record_parsed(Source::LineTcp, 0, &drops);
        ingest.udp_kernel_dropped(3);
        let now = StatsSnapshot::collect(ingest.snapshot(), [&dest]);
        let comps = vec![destination_component("h", 1, Some("a"))];
        let points = interval_datapoints("r", &comps, &prev, &now, &[0]);
        let get = |n: &str| points.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        for (i, r) in DestinationDropReason::ALL.into_iter().enumerate() {
            let name = format!("r.destinations.h:1:a.droppedDatapoints.{}", r.as_str());
            assert_eq!(get(&name), Some(i as f64 + 1.0), "{name}");
        }
        for r in DropReason::ALL {
            let name = format!("r.droppedDatapoints.{}", r.as_str());
            assert_eq!(get(&name), Some(1.0), "{name}");
        }
        assert_eq!(get("r.udpKernelDrops"), Some(3.0));
    }

    #[test]
    fn destination_component_matches_carbon() {
        assert_eq!(
            destination_component("127.0.0.1", 2104, Some("a")),
            "127_0_0_1:2104:a"
        );
        assert_eq!(
            destination_component("cache.example.com", 2004, None),
            "cache_example_com:2004:None"
        );
    }
}
