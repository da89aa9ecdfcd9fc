//! Relay CPU time and memory from `/proc`.
//!
//! - In-process, the relay runs on its own tokio runtime whose threads are all named
//!   [`RELAY_THREAD_NAME`]; [`CpuTracker::threads_named`] sums `utime + stime` of those threads
//!   from `/proc/self/task/*/stat`, so the generator and sinks (on another runtime) are excluded.
//! - External, [`CpuTracker::process_tree`] sums `/proc/<pid>/stat` of the relay and of every
//!   descendant (a shell wrapper's children included); peak RSS is `VmHWM` from
//!   `/proc/<pid>/status`, summed over the tree.
//!
//! Threads or processes can exit mid-run and take their counters with them, so the tracker is
//! sampled periodically and keeps the largest value seen per id. Times are in `USER_HZ`
//! ticks, which Linux fixes at 100 per second for `/proc`.

use std::collections::HashMap;
use std::fs;

/// Name given to the in-process relay's runtime threads (Linux truncates `comm` to 15 bytes).
pub const RELAY_THREAD_NAME: &str = "anth-bench-rly";
/// `/proc` clock ticks per second (`USER_HZ`).
const TICKS_PER_SEC: f64 = 100.0;

/// Fields of one `/proc/.../stat` line that matter here.
#[derive(Clone, Debug, PartialEq)]
pub struct Stat {
    /// Command name (`comm`).
    pub comm: String,
    /// Parent pid.
    pub ppid: u32,
    /// User + system ticks.
    pub ticks: u64,
    /// System (kernel) ticks, part of `ticks`.
    pub system_ticks: u64,
}

/// Parses a `stat` line; `comm` may hold spaces and parentheses, so split at the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state); ppid is field 4, utime 14, stime 15.
    let ppid = rest.get(1)?.parse().ok()?;
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some(Stat {
        comm,
        ppid,
        ticks: utime + stime,
        system_ticks: stime,
    })
}

/// `VmHWM` (peak resident set) of a process in bytes.
pub fn peak_rss_bytes(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_kb(&status, "VmHWM:").map(|kb| kb * 1024)
}

/// `VmRSS` (current resident set) of a process in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_kb(&status, "VmRSS:").map(|kb| kb * 1024)
}

fn status_kb(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// CPU seconds this whole process has used so far (every thread).
pub fn self_cpu_secs() -> Option<f64> {
    let text = fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat(&text).map(|st| st.ticks as f64 / TICKS_PER_SEC)
}

/// Pids whose ancestry leads to `root` (`root` included).
pub fn process_tree(root: u32) -> Vec<u32> {
    let mut parent: HashMap<u32, u32> = HashMap::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(st) = fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|t| parse_stat(&t))
            {
                parent.insert(pid, st.ppid);
            }
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parent.iter().filter(|(_, pp)| **pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree
}

/// What a [`CpuTracker`] watches.
#[derive(Clone, Debug)]
pub enum CpuSource {
    /// Threads of this process with this exact `comm`.
    ThreadsNamed(String),
    /// A process and its descendants.
    ProcessTree(u32),
}

/// Keeps the largest counters seen for `id` (each only grows while the id lives).
fn keep(latest: &mut HashMap<u32, (u64, u64)>, id: u32, st: &Stat) {
    let v = latest.entry(id).or_insert((0, 0));
    *v = (v.0.max(st.ticks), v.1.max(st.system_ticks));
}

/// Accumulates CPU ticks per thread or process, keeping the maximum seen for each id.
#[derive(Debug)]
pub struct CpuTracker {
    source: CpuSource,
    /// `(ticks, system ticks)` per id at creation and at the latest sample.
    baseline: HashMap<u32, (u64, u64)>,
    latest: HashMap<u32, (u64, u64)>,
    peak_rss: u64,
}

impl CpuTracker {
    /// Tracks this process's threads named `name`.
    pub fn threads_named(name: &str) -> Self {
        Self::new(CpuSource::ThreadsNamed(name.to_string()))
    }

    /// Tracks process `pid` and its descendants.
    pub fn process_tree(pid: u32) -> Self {
        Self::new(CpuSource::ProcessTree(pid))
    }

    fn new(source: CpuSource) -> Self {
        let mut t = Self {
            source,
            baseline: HashMap::new(),
            latest: HashMap::new(),
            peak_rss: 0,
        };
        t.sample();
        t.baseline = t.latest.clone();
        t
    }

    /// Reads `/proc` once.
    pub fn sample(&mut self) {
        match &self.source {
            CpuSource::ThreadsNamed(name) => {
                let Ok(dir) = fs::read_dir("/proc/self/task") else {
                    return;
                };
                for e in dir.flatten() {
                    let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())
                    else {
                        continue;
                    };
                    if let Some(st) = fs::read_to_string(e.path().join("stat"))
                        .ok()
                        .and_then(|t| parse_stat(&t))
                        && st.comm == *name
                    {
                        keep(&mut self.latest, tid, &st);
                    }
                }
            }
            CpuSource::ProcessTree(root) => {
                let mut rss = 0;
                for pid in process_tree(*root) {
                    if let Some(st) = fs::read_to_string(format!("/proc/{pid}/stat"))
                        .ok()
                        .and_then(|t| parse_stat(&t))
                    {
                        keep(&mut self.latest, pid, &st);
                    }
                    rss += peak_rss_bytes(pid).unwrap_or(0);
                }
                self.peak_rss = self.peak_rss.max(rss);
            }
        }
    }

    /// Ticks used since the tracker was created, `(all, system)`.
    fn used_ticks(&self) -> (u64, u64) {
        self.latest
            .iter()
            .fold((0, 0), |(all, system), (id, &(t, s))| {
                let (t0, s0) = self.baseline.get(id).copied().unwrap_or((0, 0));
                (all + t.saturating_sub(t0), system + s.saturating_sub(s0))
            })
    }

    /// CPU seconds used since the tracker was created.
    pub fn cpu_secs(&self) -> f64 {
        self.used_ticks().0 as f64 / TICKS_PER_SEC
    }

    /// The part of [`cpu_secs`](Self::cpu_secs) spent in the kernel (system time: socket
    /// copies, the network stack, page faults) rather than in the process's own code.
    pub fn system_cpu_secs(&self) -> f64 {
        self.used_ticks().1 as f64 / TICKS_PER_SEC
    }

    /// Peak RSS of the tracked process tree (sum of `VmHWM`), or of this whole process for
    /// in-process threads (threads share one address space).
    pub fn peak_rss_bytes(&self) -> Option<u64> {
        match self.source {
            CpuSource::ProcessTree(_) => (self.peak_rss > 0).then_some(self.peak_rss),
            CpuSource::ThreadsNamed(_) => peak_rss_bytes(std::process::id()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_comm_parses() {
        let line = "42 (a (b) c) S 7 1 1 0 -1 4194304 0 0 0 0 150 25 0 0 20 0 1 0 1 1 1";
        let st = parse_stat(line).unwrap();
        assert_eq!(st.comm, "a (b) c");
        assert_eq!(st.ppid, 7);
        assert_eq!((st.ticks, st.system_ticks), (175, 25));
    }

    #[test]
    fn own_process_is_readable() {
        let me = std::process::id();
        assert!(peak_rss_bytes(me).unwrap() > 0);
        assert!(process_tree(me).contains(&me));
        assert!(self_cpu_secs().is_some());
        let mut t = CpuTracker::process_tree(me);
        // Time in the kernel: reads of /proc until some system ticks show (bounded).
        let started = std::time::Instant::now();
        while t.system_cpu_secs() < 0.02 && started.elapsed().as_secs() < 20 {
            for _ in 0..200 {
                let _ = fs::read_to_string("/proc/self/status");
            }
            t.sample();
        }
        assert!(t.system_cpu_secs() >= 0.02, "no system time seen in 20 s");
        assert!(t.cpu_secs() >= t.system_cpu_secs());
    }
}
