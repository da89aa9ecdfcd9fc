//! Relay CPU time and memory from `/proc`.
//!
//! - In-process, the relay runs on its own tokio runtime whose threads are all named
//!   [`RELAY_THREAD_NAME`]; [`CpuTracker::threads_named`] sums the CPU time of those threads
//!   from `/proc/self/task/*`, so the generator and sinks (on another runtime) are excluded.
//! - External, [`CpuTracker::process_tree`] sums the CPU time of every thread of the relay and
//!   of every descendant (a shell wrapper's children included) from `/proc/<pid>/task/*`; peak
//!   RSS is `VmHWM` from `/proc/<pid>/status`, summed over the tree.
//!
//! CPU time is the first field of a thread's `schedstat`: the nanoseconds it has run on a CPU,
//! as the scheduler accounts them. The `utime` and `stime` of `stat` count 10 ms `USER_HZ`
//! ticks, too coarse for a round that costs a relay 0.02–0.2 s; they give only the share of
//! that time spent in the kernel (system time), which `schedstat` does not split. A kernel
//! without `schedstat` falls back to the ticks for the whole figure.
//!
//! Threads and processes can exit mid-run and take their counters with them, so the tracker
//! is sampled periodically and keeps the largest value seen per thread: a thread that exits
//! between two samples loses what it ran since the last one (a process's own `stat` would keep
//! its exited threads' ticks, but not at this resolution; the relays measured here keep their
//! threads for the whole run).

use std::collections::HashMap;
use std::fs;
use std::path::Path;

/// Name given to the in-process relay's runtime threads (Linux truncates `comm` to 15 bytes).
pub const RELAY_THREAD_NAME: &str = "anth-bench-rly";
/// `/proc` clock ticks per second (`USER_HZ`).
const TICKS_PER_SEC: f64 = 100.0;
/// Nanoseconds in one `USER_HZ` tick, for a thread without `schedstat`.
const NANOS_PER_TICK: u64 = 10_000_000;

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

/// Nanoseconds on CPU from a `schedstat` line (its first field).
pub fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// CPU counters of one thread, read from its `/proc/.../task/<tid>` directory.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Counters {
    /// Nanoseconds on CPU (`schedstat`, or the ticks when it is missing).
    nanos: u64,
    /// User + system ticks (`stat`).
    ticks: u64,
    /// System ticks (`stat`), part of `ticks`.
    system_ticks: u64,
}

impl Counters {
    /// Reads the thread at `task` (a `/proc/<pid>/task/<tid>` directory) when its `comm` is
    /// `name` or no name is asked for.
    fn read(task: &Path, name: Option<&str>) -> Option<Self> {
        let st = parse_stat(&fs::read_to_string(task.join("stat")).ok()?)?;
        if name.is_some_and(|n| st.comm != n) {
            return None;
        }
        let nanos = fs::read_to_string(task.join("schedstat"))
            .ok()
            .and_then(|t| parse_schedstat(&t))
            .unwrap_or(st.ticks * NANOS_PER_TICK);
        Some(Self {
            nanos,
            ticks: st.ticks,
            system_ticks: st.system_ticks,
        })
    }

    /// Each counter only grows while its thread lives: keep the largest seen.
    fn max(self, other: Self) -> Self {
        Self {
            nanos: self.nanos.max(other.nanos),
            ticks: self.ticks.max(other.ticks),
            system_ticks: self.system_ticks.max(other.system_ticks),
        }
    }
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
    /// A process and its descendants, every thread.
    ProcessTree(u32),
}

/// Thread ids are unique system-wide while the threads live; the pid keeps a reused tid of
/// another process apart.
type ThreadKey = (u32, u32);

/// Accumulates CPU time per thread, keeping the maximum seen for each.
#[derive(Debug)]
pub struct CpuTracker {
    source: CpuSource,
    /// Counters per thread at creation and at the latest sample.
    baseline: HashMap<ThreadKey, Counters>,
    latest: HashMap<ThreadKey, Counters>,
    peak_rss: u64,
}

impl CpuTracker {
    /// Tracks this process's threads named `name`.
    pub fn threads_named(name: &str) -> Self {
        Self::new(CpuSource::ThreadsNamed(name.to_string()))
    }

    /// Tracks every thread of process `pid` and of its descendants.
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
                let me = std::process::id();
                sample_tasks(
                    &mut self.latest,
                    me,
                    Path::new("/proc/self/task"),
                    Some(name),
                );
            }
            CpuSource::ProcessTree(root) => {
                let mut rss = 0;
                for pid in process_tree(*root) {
                    let tasks = format!("/proc/{pid}/task");
                    sample_tasks(&mut self.latest, pid, Path::new(&tasks), None);
                    rss += peak_rss_bytes(pid).unwrap_or(0);
                }
                self.peak_rss = self.peak_rss.max(rss);
            }
        }
    }

    /// Counters used since the tracker was created, summed over the threads.
    fn used(&self) -> Counters {
        self.latest
            .iter()
            .fold(Counters::default(), |sum, (key, c)| {
                let c0 = self.baseline.get(key).copied().unwrap_or_default();
                Counters {
                    nanos: sum.nanos + c.nanos.saturating_sub(c0.nanos),
                    ticks: sum.ticks + c.ticks.saturating_sub(c0.ticks),
                    system_ticks: sum.system_ticks + c.system_ticks.saturating_sub(c0.system_ticks),
                }
            })
    }

    /// CPU seconds used since the tracker was created.
    pub fn cpu_secs(&self) -> f64 {
        self.used().nanos as f64 / 1e9
    }

    /// The part of [`cpu_secs`](Self::cpu_secs) spent in the kernel (system time: socket
    /// copies, the network stack, page faults) rather than in the process's own code: the
    /// system share of the tick counters applied to the nanosecond total.
    pub fn system_cpu_secs(&self) -> f64 {
        let used = self.used();
        if used.ticks == 0 {
            return 0.0;
        }
        used.nanos as f64 / 1e9 * used.system_ticks as f64 / used.ticks as f64
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

/// Reads every thread under `tasks` (process `pid`'s `task` directory) into `latest`.
fn sample_tasks(
    latest: &mut HashMap<ThreadKey, Counters>,
    pid: u32,
    tasks: &Path,
    name: Option<&str>,
) {
    let Ok(dir) = fs::read_dir(tasks) else {
        return;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(c) = Counters::read(&e.path(), name) {
            let v = latest.entry((pid, tid)).or_default();
            *v = v.max(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    #[test]
    fn stat_with_odd_comm_parses() {
        let line = "42 (a (b) c) S 7 1 1 0 -1 4194304 0 0 0 0 150 25 0 0 20 0 1 0 1 1 1";
        let st = parse_stat(line).unwrap();
        assert_eq!(st.comm, "a (b) c");
        assert_eq!(st.ppid, 7);
        assert_eq!((st.ticks, st.system_ticks), (175, 25));
    }

    #[test]
    fn schedstat_parses() {
        assert_eq!(parse_schedstat("107479 1168080 2\n"), Some(107_479));
        assert_eq!(parse_schedstat(""), None);
    }

    #[test]
    fn own_process_is_readable() {
        let me = std::process::id();
        assert!(peak_rss_bytes(me).unwrap() > 0);
        assert!(process_tree(me).contains(&me));
        assert!(self_cpu_secs().is_some());
        let mut t = CpuTracker::process_tree(me);
        // Time in the kernel: reads of /proc until some system ticks show (bounded).
        let started = Instant::now();
        while t.system_cpu_secs() < 0.02 && started.elapsed().as_secs() < 20 {
            for _ in 0..200 {
                let _ = fs::read_to_string("/proc/self/status");
            }
            t.sample();
        }
        assert!(t.system_cpu_secs() >= 0.02, "no system time seen in 20 s");
        assert!(t.cpu_secs() >= t.system_cpu_secs());
    }

    #[test]
    fn a_burning_thread_is_counted_in_nanoseconds() {
        const NAME: &str = "measure-burn";
        assert!(
            Path::new("/proc/thread-self/schedstat").exists(),
            "this kernel has no /proc/<pid>/task/<tid>/schedstat (CONFIG_SCHED_INFO): \
             the tracker would count 10 ms ticks"
        );
        let mut named = CpuTracker::threads_named(NAME);
        let mut tree = CpuTracker::process_tree(std::process::id());
        let started = Instant::now();
        let (done_tx, done_rx) = mpsc::channel();
        let (exit_tx, exit_rx) = mpsc::channel::<()>();
        let burner = std::thread::Builder::new()
            .name(NAME.into())
            .spawn(move || {
                // Busy for 100 ms of wall time (less CPU on a loaded machine), then stays
                // alive until sampled so that its counters are still readable.
                let mut x = 1u64;
                while started.elapsed() < Duration::from_millis(100) {
                    for _ in 0..10_000 {
                        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005) + 1);
                    }
                }
                let _ = done_tx.send(x);
                let _ = exit_rx.recv();
            })
            .unwrap();
        done_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        named.sample();
        tree.sample();
        let wall = started.elapsed().as_secs_f64();
        exit_tx.send(()).unwrap();
        burner.join().unwrap();

        let burned = named.cpu_secs();
        assert!(burned > 0.0, "the burning thread's CPU time was not seen");
        assert!(
            burned <= wall,
            "{burned} CPU-s in {wall} s of wall time on one thread"
        );
        // Tick counters would give a whole number of 10 ms ticks.
        assert_ne!(
            named.used().nanos % NANOS_PER_TICK,
            0,
            "CPU time in whole ticks"
        );
        // The whole process holds the burning thread, sampled after it.
        assert!(tree.cpu_secs() >= burned);
    }
}
