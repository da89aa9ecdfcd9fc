//! The process's own figures, read from `/proc` (Linux; `None` elsewhere): CPU time, resident
//! memory, file descriptors, start time. carbon's `cpuUsage` and `memUsage` come from here, and
//! so do the `process_*` series of `/metrics`.

use std::time::Instant;

use crate::figure::Figure;
use crate::metric_names::{facade, process as names};

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// carbon's `cpuUsage`: CPU time over wall time between two calls, in percent.
///
/// carbon: `(Δ(ru_utime + ru_stime) / Δ wall time) × 100` from `getrusage(RUSAGE_SELF)`. Here
/// the CPU time is `utime + stime` of `/proc/self/stat`, the same process-wide counters.
#[derive(Debug)]
pub(crate) struct ProcessUsage {
    last_cpu: Option<f64>,
    last_wall: Instant,
}

impl Default for ProcessUsage {
    fn default() -> Self {
        Self {
            last_cpu: cpu_seconds(),
            last_wall: Instant::now(),
        }
    }
}

impl ProcessUsage {
    /// CPU percent since the previous call (or construction).
    pub(crate) fn cpu_percent(&mut self) -> Option<f64> {
        let cpu = cpu_seconds()?;
        let wall = Instant::now();
        let dt = wall.duration_since(self.last_wall).as_secs_f64().max(1e-6);
        let used = cpu - self.last_cpu.unwrap_or(cpu);
        self.last_cpu = Some(cpu);
        self.last_wall = wall;
        Some(used / dt * 100.0)
    }

    /// Resident set size in bytes (`VmRSS` of `/proc/self/status`, the counter carbon reads
    /// from `/proc/self/statm`).
    pub(crate) fn rss_bytes() -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
}

/// The fields of `/proc/self/stat` after the parenthesised command name (which may contain
/// spaces): index 0 is field 3 (`state`).
fn stat_fields() -> Option<Vec<String>> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// `utime + stime` of this process, in seconds.
pub(crate) fn cpu_seconds() -> Option<f64> {
    let fields = stat_fields()?;
    // utime and stime are fields 14 and 15: 0-based 11 and 12 after `comm`.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_SECOND)
}

/// Open file descriptors (entries of `/proc/self/fd`).
pub(crate) fn open_fds() -> Option<u64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64)
}

/// The soft limit on open files (`Max open files` of `/proc/self/limits`).
pub(crate) fn max_fds() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// When this process started, in seconds since the Unix epoch (boot time of `/proc/stat`
/// plus the process's `starttime`).
pub(crate) fn start_time_seconds() -> Option<f64> {
    let fields = stat_fields()?;
    // starttime is field 22: 0-based 19 after `comm`.
    let start_ticks: f64 = fields.get(19)?.parse().ok()?;
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let btime: f64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(btime + start_ticks / TICKS_PER_SECOND)
}

/// The `/metrics` process series (no carbon leaves: carbon's `cpuUsage` and `memUsage` are
/// per-interval figures the reporter computes with [`ProcessUsage`]) and the build info of a
/// build with `features`.
pub(crate) fn figures(features: &[&str]) -> Vec<Figure> {
    let gauges = [
        (
            names::RESIDENT_MEMORY,
            ProcessUsage::rss_bytes().map(|v| v as f64),
        ),
        (names::CPU_SECONDS, cpu_seconds()),
        (names::OPEN_FDS, open_fds().map(|v| v as f64)),
        (names::MAX_FDS, max_fds().map(|v| v as f64)),
        (names::START_TIME, start_time_seconds()),
    ];
    let mut out: Vec<Figure> = gauges
        .into_iter()
        .filter_map(|(name, value)| Some(Figure::gauge(value?).series(name, Vec::new())))
        .collect();
    out.push(Figure::gauge(1.0).series(
        facade::BUILD_INFO,
        vec![
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            ("features", features.join(",")),
        ],
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_usage_reads_proc() {
        let mut usage = ProcessUsage::default();
        let spin = Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_add(1);
        }
        std::hint::black_box(x);
        let cpu = usage.cpu_percent().expect("cpu on Linux");
        // The spin above used CPU: zero would be a reader that reads nothing.
        assert!(cpu > 0.0 && cpu <= 800.0, "{cpu}");
        assert!(ProcessUsage::rss_bytes().expect("rss on Linux") > 1 << 20);
        let fds = open_fds().expect("fds on Linux");
        assert!(
            fds >= 3 && fds <= max_fds().expect("limit on Linux"),
            "{fds}"
        );
        let started = start_time_seconds().expect("start time on Linux");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs_f64();
        assert!(
            started <= now + 1.0 && started > now - 86_400.0,
            "{started} vs {now}"
        );
    }
}
