//! Reading back what carbon-cache stored: whisper files fetched by `whisper.fetch`, one Python
//! process per batch of names, with paths computed by carbon's own code (tag normalization,
//! `_tagged/<h[0:3]>/<h[3:6]>/<h>.wsp` with `h` = SHA-256 of the normalized name).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;

use super::carbon::CarbonCaches;
use super::venv::run_python_json;

/// `(timestamp, value)` pairs as stored, ascending by timestamp.
pub type Points = Vec<(i64, f64)>;

const SCRIPT: &str = r#"
import json, os, sys
import whisper
from carbon.util import TaggedSeries

req = json.loads(sys.stdin.buffer.read().decode('utf-8'))

def rel_path(name):
    # Exactly carbon-cache 1.1.10: CacheFeedingProcessor normalizes every name with
    # TaggedSeries.parse(name).path; WhisperDatabase encodes it with TAG_HASH_FILENAMES=True.
    return TaggedSeries.encode(TaggedSeries.parse(name).path, os.sep, hash_only=True) + '.wsp'

out = []
for name in req['names']:
    rel = rel_path(name)
    entry = {'path': rel, 'exists': False, 'points': [], 'error': None}
    if req['dir'] is not None:
        path = os.path.join(req['dir'], rel)
        if os.path.exists(path):
            entry['exists'] = True
            try:
                (start, end, step), values = whisper.fetch(path, req['from'], req['until'])
                # values as repr strings: nan/inf are not JSON
                entry['points'] = [[start + i * step, repr(v)]
                                   for i, v in enumerate(values) if v is not None]
            except Exception as e:
                # a file being created right now may have a partial header
                entry['error'] = '%s: %s' % (type(e).__name__, e)
    out.append(entry)
sys.stdout.write(json.dumps(out))
"#;

#[derive(Deserialize)]
struct Entry {
    path: String,
    exists: bool,
    points: Vec<(i64, String)>,
    error: Option<String>,
}

/// What one whisper file holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    /// No file for this name.
    Missing,
    /// The file exists; these are its non-empty points within the window.
    Points(Points),
    /// The file exists but could not be read (for example: being created right now).
    Unreadable(String),
}

impl Stored {
    /// The points, empty if missing or unreadable.
    pub fn points(&self) -> &[(i64, f64)] {
        match self {
            Stored::Points(p) => p,
            _ => &[],
        }
    }
}

fn run(dir: Option<&Path>, names: &[String], from: i64, until: Option<i64>) -> Vec<Entry> {
    let input = json!({
        "dir": dir.map(|d| d.to_string_lossy().into_owned()),
        "names": names,
        "from": from,
        "until": until,
    });
    let out: Vec<Entry> = run_python_json(
        "whisper read-back",
        SCRIPT,
        &input,
        Duration::from_secs(300),
    );
    assert_eq!(
        out.len(),
        names.len(),
        "whisper script answered for a different number of names"
    );
    out
}

/// Where carbon-cache 1.1.10 stores each name, relative to LOCAL_DATA_DIR (computed by carbon's
/// own `TaggedSeries`, so tagged names map to `_tagged/<h[0:3]>/<h[3:6]>/<h>.wsp`).
pub fn whisper_rel_paths(names: &[String]) -> Vec<PathBuf> {
    run(None, names, 0, None)
        .into_iter()
        .map(|e| PathBuf::from(e.path))
        .collect()
}

/// Reads every name's whisper file under `data_dir` in one Python process: the points with
/// `from < timestamp <= until` (`until` None = now; whisper's own window semantics).
pub fn read_whisper(
    data_dir: &Path,
    names: &[String],
    from: i64,
    until: Option<i64>,
) -> Vec<Stored> {
    run(Some(data_dir), names, from, until)
        .into_iter()
        .map(|e| {
            if !e.exists {
                Stored::Missing
            } else if let Some(err) = e.error {
                Stored::Unreadable(err)
            } else {
                Stored::Points(
                    e.points
                        .into_iter()
                        .map(|(t, v)| {
                            let v: f64 =
                                v.parse().unwrap_or_else(|_| panic!("whisper value {v:?}"));
                            (t, v)
                        })
                        .collect(),
                )
            }
        })
        .collect()
}

/// What [`wait_for_whisper`] found: for each cache instance (in `caches.instances` order),
/// every expected name whose file exists there, with what it holds.
pub type Found = Vec<BTreeMap<String, Stored>>;

/// Polls every cache in `caches` until, for every name in `expected`, the union of what the
/// caches stored covers every expected timestamp (values are left to the caller to compare).
/// Then reads all names on all caches once more and returns that. Fetch window: `from` to now.
///
/// Panics after `timeout` with the names still incomplete, where they were found, and the
/// caches' log tails; panics at once if a cache dies.
pub fn wait_for_whisper(
    caches: &mut CarbonCaches,
    expected: &BTreeMap<String, Points>,
    from: i64,
    timeout: Duration,
) -> Found {
    let deadline = Instant::now() + timeout;
    let mut pending: Vec<String> = expected.keys().cloned().collect();
    loop {
        let mut have: BTreeMap<&str, BTreeSet<i64>> = BTreeMap::new();
        for inst in &mut caches.instances {
            inst.assert_running("whisper files to appear");
        }
        let mut reads = Vec::new();
        for inst in &caches.instances {
            let stored = read_whisper(&inst.data_dir, &pending, from, None);
            for (name, s) in pending.iter().zip(&stored) {
                have.entry(name)
                    .or_default()
                    .extend(s.points().iter().map(|p| p.0));
            }
            reads.push(stored);
        }
        let still: Vec<String> = pending
            .iter()
            .filter(|name| {
                let got = &have[name.as_str()];
                !expected[name.as_str()].iter().all(|(t, _)| got.contains(t))
            })
            .cloned()
            .collect();
        if still.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            let mut msg = format!(
                "timed out after {timeout:?} waiting for whisper data: {} of {} names incomplete; first ones:\n",
                still.len(),
                expected.len()
            );
            for name in still.iter().take(10) {
                let idx = pending.iter().position(|n| n == name).unwrap();
                write!(msg, "  {name:?}: expected {:?};", expected[name.as_str()]).unwrap();
                for (inst, stored) in caches.instances.iter().zip(&reads) {
                    write!(msg, " cache {}: {:?};", inst.name, stored[idx]).unwrap();
                }
                msg.push('\n');
            }
            msg.push_str(&caches.log_tails(30));
            panic!("{msg}");
        }
        pending = still;
        thread::sleep(Duration::from_millis(500));
    }
    let all: Vec<String> = expected.keys().cloned().collect();
    caches
        .instances
        .iter()
        .map(|inst| {
            all.iter()
                .cloned()
                .zip(read_whisper(&inst.data_dir, &all, from, None))
                .filter(|(_, s)| *s != Stored::Missing)
                .collect()
        })
        .collect()
}
