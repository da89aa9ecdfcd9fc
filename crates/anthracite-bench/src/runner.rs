//! One measured run: prepare → calibrate → sinks → relay → send → drain → measure → report.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::watch;

use super::BenchError;
use super::args::TargetSpec;
use super::generator::{self, NameOrder, Payload, SendCounters, SendPlan};
use super::measure::{self, CpuTracker};
use super::placement;
use super::progress::{Progress, Tick};
use super::report::{Capacity, Latency, Report, Sample, SinkReport};
use super::scenario::Scenario;
use super::target::RunningTarget;
use anthracite_sink::{Histogram, Keep, Sink, SinkConfig, SinkStats};

/// Sampling interval of the timeline and the progress bar.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// How long the generator-ceiling calibration may send.
const CALIBRATION: Duration = Duration::from_millis(500);

/// Run options that are not part of the scenario.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Show progress on stderr: a bar on a terminal, a line every few seconds otherwise.
    pub progress: bool,
    /// Names the run in progress lines (e.g. the relay and rate of a sweep step).
    pub label: String,
    /// Fixed sink ports (empty: ephemeral).
    pub sink_ports: Vec<u16>,
    /// In-process relay worker threads.
    pub relay_threads: Option<usize>,
    /// Distinguishes runs of a `--compare` (temp file names).
    pub run_id: usize,
}

/// At a set rate, write slices are about 1 ms of a connection's data, longer when many
/// connections would otherwise make more than this many writes per second in total (1,000
/// connections at 1 ms would be a million mostly one-datapoint writes a second: the generator,
/// not the relay, would be measured).
pub const MAX_PACED_WRITES_PER_SEC: f64 = 20_000.0;

/// Datapoints per write slice.
fn slice_points(scenario: &Scenario) -> usize {
    let l = &scenario.load;
    if l.rate > 0.0 {
        let k = l.connections as f64;
        let slice_secs = (k / MAX_PACED_WRITES_PER_SEC).max(0.001);
        ((l.rate / k * slice_secs) as usize).clamp(1, l.batch)
    } else {
        l.batch
    }
}

/// Payloads for every connection, rendered before any clock starts.
fn prepare(scenario: &Scenario) -> (Vec<String>, Vec<Payload>) {
    let n = &scenario.names;
    let l = &scenario.load;
    let k = l.connections;
    let per_conn_rate = l.rate / k as f64;
    let chunk = slice_points(scenario);
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let counts: Vec<u64> = match l.duration_secs {
        None => scenario.per_connection_counts(),
        Some(d) => {
            let needed = if l.rate > 0.0 {
                (per_conn_rate * d).ceil() as usize
            } else {
                usize::MAX
            };
            if n.distinct {
                // One pass of exactly what the deadline allows: never a repeated name.
                vec![needed.max(chunk) as u64; k]
            } else {
                // A cycle covering every name of the connection once, repeated until the
                // deadline.
                let own = if n.shared {
                    n.count
                } else {
                    n.count.div_ceil(k)
                };
                let cover = own.div_ceil(chunk) * chunk;
                vec![cover.min(needed.max(chunk)) as u64; k]
            }
        }
    };
    // Connection c sends names c, c + k, c + 2k, …: with this many names none repeats.
    let count = if n.distinct {
        counts.iter().max().map_or(1, |&m| m as usize * k)
    } else {
        n.count
    };
    let names: Vec<String> = (0..count).map(|i| generator::name(n, i)).collect();
    let payloads = counts
        .iter()
        .enumerate()
        .map(|(c, &points)| {
            let order = NameOrder {
                conn: c,
                conns: k,
                shared: n.shared,
            };
            generator::render(&names, order, points, l.protocol, chunk, ts)
        })
        .collect();
    (names, payloads)
}

fn plan(scenario: &Scenario, start: Instant) -> SendPlan {
    let l = &scenario.load;
    let cap = l
        .duration_secs
        .unwrap_or(f64::INFINITY)
        .min(scenario.limits.max_send_secs);
    SendPlan {
        passes: if l.duration_secs.is_some() {
            None
        } else {
            Some(1)
        },
        deadline: start + Duration::from_secs_f64(cap),
        rate: l.rate / l.connections as f64,
    }
}

async fn connect_all(addr: SocketAddr, k: usize) -> Result<Vec<TcpStream>, BenchError> {
    let mut v = Vec::with_capacity(k);
    for _ in 0..k {
        v.push(
            TcpStream::connect(addr)
                .await
                .map_err(|source| BenchError::Io {
                    context: format!("connecting to relay at {addr}"),
                    source,
                })?,
        );
    }
    Ok(v)
}

/// Binds a sink (on its own threads, outside the runtime: the in-process relay's CPU figure
/// counts the relay's threads only).
fn bind_sink(addr: SocketAddr, config: SinkConfig) -> Result<Sink, BenchError> {
    let label = config.label.clone();
    Sink::bind(addr, config).map_err(|source| BenchError::Io {
        context: format!("binding {label} on {addr}"),
        source,
    })
}

/// Stops sinks off the runtime (stopping joins their threads).
async fn stop_sinks(sinks: Vec<Sink>) {
    let _ = tokio::task::spawn_blocking(move || sinks.into_iter().for_each(Sink::stop)).await;
}

/// Sends every payload once at maximum rate into a discarding sink for at most
/// [`CALIBRATION`], timed until the sink has read every byte: the generator's own ceiling on
/// this machine, loopback included.
async fn calibrate(payloads: Vec<Payload>) -> Result<(f64, Vec<Payload>), BenchError> {
    let null = bind_sink(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        SinkConfig {
            label: "null sink".into(),
            keep: Keep::Bytes,
            ..SinkConfig::default()
        },
    )?;
    let streams = connect_all(null.addr(), payloads.len()).await?;
    let epoch = Instant::now();
    let plan = SendPlan {
        passes: Some(1),
        deadline: epoch + CALIBRATION,
        rate: 0.0,
    };
    let counters = Arc::new(SendCounters::new());
    let handles: Vec<_> = streams
        .into_iter()
        .zip(payloads)
        .map(|(s, p)| tokio::spawn(generator::send(s, p, plan, epoch, counters.clone())))
        .collect();
    let mut back = Vec::with_capacity(handles.len());
    let mut sent = 0;
    for h in handles {
        let (p, n) = h
            .await
            .map_err(|e| BenchError::Relay(format!("calibration task: {e}")))??;
        back.push(p);
        sent += n;
    }
    let written = counters.bytes.load(Ordering::Relaxed);
    let until = Instant::now() + Duration::from_secs(5);
    while null.stats().bytes() < written && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = epoch.elapsed().as_secs_f64();
    stop_sinks(vec![null]).await;
    Ok((sent as f64 / secs.max(1e-9), back))
}

struct Sampler {
    senders: Vec<Arc<SendCounters>>,
    sinks: Vec<Arc<SinkStats>>,
    cpu: Option<CpuTracker>,
    progress: Progress,
}

impl Sampler {
    fn totals(&self) -> (u64, u64) {
        let sent = self
            .senders
            .iter()
            .map(|c| c.sent.load(Ordering::Relaxed))
            .sum();
        let delivered = self.sinks.iter().map(|s| s.delivered()).sum();
        (sent, delivered)
    }

    /// Samples until `stop`; returns the timeline, the tracker and its CPU seconds at each
    /// sample (`(seconds since start, CPU seconds)`).
    async fn run(
        mut self,
        start: Instant,
        mut stop: watch::Receiver<bool>,
    ) -> (Vec<Sample>, Option<CpuTracker>, Vec<(f64, f64)>) {
        let mut samples = Vec::new();
        let mut cpu_at = Vec::new();
        let mut interval = tokio::time::interval(SAMPLE_EVERY);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick completes at once; a sample over a few microseconds means nothing.
        interval.tick().await;
        let (mut last_sent, mut last_delivered) = (0, 0);
        let mut last_t = start;
        let mut window = Histogram::new();
        let mut last_tick;
        loop {
            // The last sample covers the partial interval up to the stop.
            let stopping = tokio::select! {
                _ = interval.tick() => false,
                _ = stop.changed() => true,
            };
            let now = Instant::now();
            let dt = now.duration_since(last_t).as_secs_f64().max(1e-6);
            let (sent, delivered) = self.totals();
            window.clear();
            for s in &self.sinks {
                s.drain_window_into(&mut window);
            }
            let ms = |q| window.quantile(q).map(|v| v as f64 / 1e3);
            samples.push(Sample {
                t: now.duration_since(start).as_secs_f64(),
                sent_rate: (sent - last_sent) as f64 / dt,
                delivered_rate: (delivered - last_delivered) as f64 / dt,
                p50_ms: ms(0.5),
                p99_ms: ms(0.99),
            });
            if let Some(c) = self.cpu.as_mut() {
                c.sample();
                cpu_at.push((now.duration_since(start).as_secs_f64(), c.cpu_secs()));
            }
            last_tick = Tick {
                t: now.duration_since(start).as_secs_f64(),
                sent,
                delivered,
                delivered_rate: (delivered - last_delivered) as f64 / dt,
                p99_ms: ms(0.99),
            };
            self.progress.update(last_tick);
            (last_sent, last_delivered, last_t) = (sent, delivered, now);
            if stopping {
                break;
            }
        }
        if let Some(c) = self.cpu.as_mut() {
            c.sample();
        }
        self.progress.finish(last_tick);
        (samples, self.cpu, cpu_at)
    }
}

/// Runs `scenario` once against `spec` and measures it.
pub async fn run_once(
    scenario: &Scenario,
    spec: &TargetSpec,
    opts: &RunOptions,
) -> Result<Report, BenchError> {
    let l = &scenario.load;
    let mut notes = Vec::new();

    // 1. Payload first, before any clock.
    let (names, payloads) = prepare(scenario);
    let cycles: Vec<u64> = payloads.iter().map(Payload::datapoints).collect();
    let (ceiling, payloads) = calibrate(payloads).await?;

    // 2. Sinks, then the relay pointed at them.
    let epoch = Instant::now();
    let mut sinks: Vec<Sink> = Vec::with_capacity(scenario.sinks.count);
    for i in 0..scenario.sinks.count {
        let port = opts.sink_ports.get(i).copied().unwrap_or(0);
        let config = SinkConfig {
            label: format!("sink {i}"),
            protocol: scenario.sinks.detect.into(),
            // An aggregator's output series are counted by name.
            keep: if scenario.sinks.record_names
                || scenario
                    .aggregation
                    .as_ref()
                    .is_some_and(|a| !a.forward_all)
            {
                Keep::Names
            } else {
                Keep::Count
            },
            clock: Some(epoch),
            slow_bytes_per_sec: scenario
                .sinks
                .slow
                .iter()
                .find(|s| s.index == i)
                .map(|s| s.bytes_per_sec),
            ..SinkConfig::default()
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        match bind_sink(addr, config) {
            Ok(sink) => sinks.push(sink),
            Err(e) => {
                stop_sinks(sinks).await;
                return Err(e);
            }
        }
    }
    let sink_addrs: Vec<SocketAddr> = sinks.iter().map(Sink::addr).collect();
    let stats: Vec<Arc<SinkStats>> = sinks.iter().map(|s| s.stats().clone()).collect();
    let mut target =
        match RunningTarget::start(spec, scenario, &sink_addrs, opts.relay_threads, opts.run_id)
            .await
        {
            Ok(t) => t,
            Err(e) => {
                stop_sinks(sinks).await;
                return Err(e);
            }
        };
    notes.append(&mut target.notes);

    // 3. Connect, then start the clock.
    let streams = connect_all(target.addr, l.connections).await?;
    let senders: Vec<Arc<SendCounters>> = (0..l.connections)
        .map(|_| Arc::new(SendCounters::new()))
        .collect();
    let expected = match l.duration_secs {
        None => l.datapoints,
        Some(d) if l.rate > 0.0 => (d * l.rate) as u64,
        Some(_) => 0,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let sampler = Sampler {
        senders: senders.clone(),
        sinks: stats.clone(),
        cpu: target.cpu.take(),
        progress: Progress::new(opts.progress, &opts.label, expected),
    };
    let cpu_at_start = measure::self_cpu_secs();
    let start = Instant::now();
    let sampler = tokio::spawn(sampler.run(start, stop_rx));
    // Outages count from the start of sending.
    for d in &scenario.sinks.down {
        if let Some(sink) = sinks.get(d.index) {
            sink.schedule_outage(
                Duration::from_secs_f64(d.at_secs),
                Duration::from_secs_f64(d.for_secs),
            );
        }
    }
    let plan = plan(scenario, start);
    let handles: Vec<_> = streams
        .into_iter()
        .zip(payloads)
        .zip(&senders)
        .map(|((s, p), c)| tokio::spawn(generator::send(s, p, plan, epoch, c.clone())))
        .collect();
    for h in handles {
        match h.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => notes.push(format!("a generator connection failed: {e}")),
            Err(e) => notes.push(format!("a generator task failed: {e}")),
        }
    }
    let sent: u64 = senders.iter().map(|c| c.sent.load(Ordering::Relaxed)).sum();
    let first_us = senders
        .iter()
        .map(|c| c.first_send_us.load(Ordering::Relaxed))
        .min()
        .unwrap_or(0);
    let last_send_us = senders
        .iter()
        .map(|c| c.last_send_us.load(Ordering::Relaxed))
        .max()
        .unwrap_or(0);

    // 4. Drain: until everything arrived, or nothing arrived for quiet_secs, bounded. An
    // aggregator that passes nothing on delivers only aggregates, an unknown number some time
    // after the input: the quiet time counts from its first delivery.
    let drain_until = Instant::now() + Duration::from_secs_f64(scenario.limits.drain_timeout_secs);
    let quiet = Duration::from_secs_f64(scenario.limits.quiet_secs);
    let delivered_now = || stats.iter().map(|s| s.delivered()).sum::<u64>();
    let aggregates_only = scenario
        .aggregation
        .as_ref()
        .is_some_and(|a| !a.forward_all);
    // Replication delivers several copies of each datapoint.
    let want = sent * scenario.routing.copies();
    let mut last = delivered_now();
    let mut last_change = Instant::now();
    loop {
        let d = delivered_now();
        if d >= want {
            break;
        }
        if d != last {
            (last, last_change) = (d, Instant::now());
        } else if last_change.elapsed() >= quiet && (d > 0 || !aggregates_only) {
            break;
        }
        if Instant::now() >= drain_until {
            notes.push(format!(
                "drain timeout ({} s) reached with deliveries still arriving",
                scenario.limits.drain_timeout_secs
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop_tx.send(true);
    let (timeline, cpu, cpu_at) = sampler
        .await
        .map_err(|e| BenchError::Relay(format!("sampler: {e}")))?;
    let process_cpu = match (cpu_at_start, measure::self_cpu_secs()) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    // The relay counts a write as sent once the peer is seen alive after it (see
    // `destination::Unconfirmed`): give its last write a moment to be confirmed.
    let settle_until = Instant::now() + Duration::from_secs(2);
    let mut relay_stats = target.relay_stats();
    while relay_stats
        .as_ref()
        .is_some_and(|r| r.destinations.iter().any(|&(_, _, queued)| queued > 0))
        && Instant::now() < settle_until
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
        relay_stats = target.relay_stats();
    }
    let label = target.label.clone();
    let rss_scope = target.rss_scope.clone();
    target.stop().await;
    stop_sinks(sinks).await;

    // 5. Figures.
    let delivered: u64 = stats.iter().map(|s| s.delivered()).sum();
    let last_rx_us = stats.iter().map(|s| s.last_rx_us()).max().unwrap_or(0);
    let mut latency = Histogram::new();
    for s in &stats {
        s.merge_latency_into(&mut latency);
    }
    let unstamped: u64 = stats.iter().map(|s| s.unstamped()).sum();
    if unstamped > 0 {
        notes.push(format!(
            "{unstamped} datapoints carried no send time (value rewritten?)"
        ));
    }
    let delivery_secs = last_rx_us.saturating_sub(first_us) as f64 / 1e6;
    let send_secs = last_send_us.saturating_sub(first_us) as f64 / 1e6;
    let mut relay_cpu_secs = cpu.as_ref().map(CpuTracker::cpu_secs);
    let relay_system_cpu_secs = cpu.as_ref().map(CpuTracker::system_cpu_secs);
    if scenario.aggregation.is_some() {
        // An aggregator's work ends when its output settles: its CPU up to the first sample
        // after the last delivery, not the idle ticks of the quiet time after it.
        let settled = last_rx_us as f64 / 1e6 - start.duration_since(epoch).as_secs_f64();
        if let Some(&(_, c)) = cpu_at.iter().find(|(t, _)| *t >= settled) {
            relay_cpu_secs = Some(c);
        }
        notes.push(format!(
            "aggregation: relay CPU counted until the output settled ({settled:.1} s after the first datapoint), per datapoint sent"
        ));
    }
    let harness_cpu_secs = match spec {
        TargetSpec::InProcess => process_cpu
            .zip(relay_cpu_secs)
            .map(|(p, r)| (p - r).max(0.0)),
        _ => process_cpu,
    };
    // An aggregator's work is per datapoint in; a relay's per datapoint delivered.
    let per = if scenario.aggregation.is_some() {
        sent
    } else {
        delivered
    };
    let cpu_secs_per_million = relay_cpu_secs
        .filter(|_| per > 0 && delivered > 0)
        .map(|c| c * 1e6 / per as f64);
    let sent_per_connection: Vec<u64> = senders
        .iter()
        .map(|c| c.sent.load(Ordering::Relaxed))
        .collect();
    // Only the plain ring's placement is predicted; rules and replicas place elsewhere.
    let expected = if scenario.routing.is_plain_ring() {
        placement::expected_per_sink(
            &names,
            &sink_addrs,
            scenario.names.shared,
            &sent_per_connection,
            &cycles,
        )
    } else {
        None
    };
    let names_count = names.len();
    drop(names);
    let sink_reports = stats
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let d = s.delivered();
            let rel = relay_stats.as_ref().and_then(|r| r.destinations.get(i));
            SinkReport {
                index: i,
                addr: sink_addrs[i].to_string(),
                delivered: d,
                bad: s.bad(),
                connections: s.connections(),
                relay_sent: rel.map(|r| r.0),
                relay_dropped: rel.map(|r| r.1),
                lost: rel.map(|r| r.0 as i64 - d as i64),
                expected: expected.as_ref().and_then(|e| e.get(i).copied()),
                placement_lost: expected
                    .as_ref()
                    .and_then(|e| e.get(i))
                    .map(|&e| e as i64 - d as i64),
                distinct_names: scenario
                    .sinks
                    .record_names
                    .then(|| s.distinct_names() as u64),
            }
        })
        .collect();
    if matches!(spec, TargetSpec::InProcess) {
        notes.push(
            "in-process: relay CPU is its own runtime's threads only; RSS is the whole process"
                .into(),
        );
    }
    if ceiling > 0.0 && l.rate == 0.0 && delivered as f64 / delivery_secs.max(1e-9) > 0.8 * ceiling
    {
        notes.push("throughput is within 20 % of the generator's ceiling: the generator may be the bottleneck".into());
    }
    let target_rate =
        scenario
            .capacity_target_rate
            .unwrap_or(if l.rate > 0.0 { l.rate } else { 1e6 });
    Ok(Report {
        scenario: scenario.name.clone(),
        target: label,
        protocol: l.protocol.as_str().into(),
        sink_protocol: scenario.sinks.protocol.as_str().into(),
        connections: l.connections,
        names: names_count,
        offered_rate: l.rate,
        sent,
        delivered,
        lost: if aggregates_only {
            0
        } else {
            want as i64 - delivered as i64
        },
        copies: scenario.routing.copies(),
        aggregates_only,
        series: aggregates_only
            .then(|| stats.iter().map(|s| s.distinct_names() as u64).sum::<u64>()),
        sinks: sink_reports,
        send_secs,
        delivery_secs,
        send_rate: sent as f64 / send_secs.max(1e-9),
        delivered_rate: delivered as f64 / delivery_secs.max(1e-9),
        generator_ceiling_rate: ceiling,
        latency: Latency {
            count: latency.count(),
            p50_us: latency.quantile(0.5),
            p99_us: latency.quantile(0.99),
            p999_us: latency.quantile(0.999),
            max_us: (latency.count() > 0).then(|| latency.max()),
        },
        relay_cpu_secs,
        relay_system_cpu_secs,
        cpu_secs_per_million,
        harness_cpu_secs,
        peak_rss_bytes: cpu.as_ref().and_then(CpuTracker::peak_rss_bytes),
        rss_scope,
        relay_stats: relay_stats.and_then(|r| serde_json::to_value(r).ok()),
        placement_conflicts: scenario
            .sinks
            .record_names
            .then(|| placement::placement_conflicts(&stats)),
        capacity: cpu_secs_per_million.and_then(|m| Capacity::estimate(m, target_rate)),
        timeline,
        notes,
        comparison: None,
    })
}
