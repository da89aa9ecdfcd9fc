//! carbon's `whitelist.conf` / `blacklist.conf` (`USE_WHITELIST`), reloaded when they change.
//!
//! Mirrors `carbon.regexlist` 1.1.10: one regex per line, lines starting with `#` and blank lines
//! skipped, a regex that does not compile is logged and skipped, a missing file is an empty
//! list; Python-only syntax (look-around, back-references) is honoured through
//! [`Pattern`]'s backtracking fallback. A name is dropped when it *searches* (unanchored, case-sensitive) any blacklist regex
//! (counted as `blacklistMatches`), else when the whitelist is non-empty and it matches none
//! (`whitelistRejects`). An empty list filters nothing.
//!
//! [`ListWatcher::run`] polls the files' modification times every interval (carbon: 10 s) and
//! publishes a new [`Lists`] through [`SharedLists`]; ingestors look at the generation counter
//! once per flush, so the hot path never takes the lists' lock, and cache each name's verdict
//! (for that generation) in a byte-bounded [`NameCache`] the relay's ingestors share.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::name_cache::{Lookup, NameCache};
use crate::pattern::{Pattern, PatternSet};

/// carbon's `USE_WHITELIST` files.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ListsConfig {
    /// Whitelist file (`None`: no whitelist).
    pub whitelist: Option<PathBuf>,
    /// Blacklist file (`None`: no blacklist).
    pub blacklist: Option<PathBuf>,
    /// How often the files' modification times are checked.
    pub reload_interval: Duration,
}

/// What the lists say about one name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Relay it.
    Pass,
    /// Matches the blacklist.
    Blacklisted,
    /// The whitelist is non-empty and the name matches none of it.
    NotWhitelisted,
}

/// One compiled list, matched in one pass ([`PatternSet`]: the linear-time patterns in one
/// automaton, the few that need backtracking — look-around, back-references; see
/// [`Pattern`] — beside it).
#[derive(Debug, Clone)]
pub struct RegexList {
    set: PatternSet,
    /// Lines that were skipped because they do not compile, with the error.
    pub skipped: Vec<(String, String)>,
}

impl Default for RegexList {
    fn default() -> Self {
        Self {
            set: PatternSet::new(Vec::new()),
            skipped: Vec::new(),
        }
    }
}

impl RegexList {
    /// Compiles the text of a list file.
    pub fn parse(text: &str) -> Self {
        let mut patterns = Vec::new();
        let mut skipped = Vec::new();
        for line in text.lines() {
            let pattern = line.trim();
            // carbon tests `line.startswith('#')` on the unstripped line.
            if line.starts_with('#') || pattern.is_empty() {
                continue;
            }
            match Pattern::new(pattern) {
                Ok(p) => patterns.push(p),
                Err(e) => skipped.push((pattern.to_owned(), e.to_string())),
            }
        }
        Self {
            set: PatternSet::new(patterns),
            skipped,
        }
    }

    /// True when the list has at least one regex.
    pub fn is_active(&self) -> bool {
        !self.set.is_empty()
    }

    /// True when some regex matches anywhere in `name`.
    pub fn matches(&self, name: &[u8]) -> bool {
        self.set.is_match(name)
    }
}

/// A whitelist and a blacklist.
#[derive(Debug, Clone, Default)]
pub struct Lists {
    /// Names must match one of these (when non-empty).
    pub whitelist: RegexList,
    /// Names matching one of these are dropped.
    pub blacklist: RegexList,
}

impl Lists {
    /// carbon's `metricReceived` checks, blacklist first.
    pub fn verdict(&self, name: &[u8]) -> Verdict {
        if self.blacklist.matches(name) {
            Verdict::Blacklisted
        } else if self.whitelist.is_active() && !self.whitelist.matches(name) {
            Verdict::NotWhitelisted
        } else {
            Verdict::Pass
        }
    }
}

/// The current [`Lists`], swapped whole on reload, with a generation counter so readers can
/// tell cheaply whether to look again.
#[derive(Debug, Default)]
pub struct SharedLists {
    current: RwLock<Arc<Lists>>,
    generation: AtomicU64,
}

impl SharedLists {
    /// Starts with `lists`.
    pub fn new(lists: Lists) -> Self {
        Self {
            current: RwLock::new(Arc::new(lists)),
            generation: AtomicU64::new(1),
        }
    }

    /// Bumped on every [`store`](Self::store).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The lists now.
    pub fn load(&self) -> Arc<Lists> {
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Publishes new lists.
    pub fn store(&self, lists: Lists) {
        let lists = Arc::new(lists);
        match self.current.write() {
            Ok(mut g) => *g = lists,
            Err(poisoned) => *poisoned.into_inner() = lists,
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// One watched file: its path and the modification time last read.
#[derive(Debug)]
struct Watched {
    path: Option<PathBuf>,
    mtime: Option<SystemTime>,
}

impl Watched {
    fn new(path: Option<PathBuf>) -> Self {
        Self { path, mtime: None }
    }

    /// `Some(new list)` when the file appeared, disappeared or changed since the last look.
    fn poll(&mut self) -> Option<RegexList> {
        let path = self.path.as_ref()?;
        let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        if mtime == self.mtime {
            return None;
        }
        self.mtime = mtime;
        if mtime.is_none() {
            return Some(RegexList::default());
        }
        Some(read_list(path))
    }
}

fn read_list(path: &Path) -> RegexList {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let list = RegexList::parse(&text);
            for (pattern, error) in &list.skipped {
                tracing::error!(file = %path.display(), pattern, error, "ignoring regex that does not compile");
            }
            list
        }
        Err(e) => {
            tracing::error!(file = %path.display(), error = %e, "cannot read list file; treating it as empty");
            RegexList::default()
        }
    }
}

/// Polls the list files and republishes [`SharedLists`] when one changes.
#[derive(Debug)]
pub(crate) struct ListWatcher {
    white: Watched,
    black: Watched,
    interval: Duration,
    shared: Arc<SharedLists>,
}

impl ListWatcher {
    /// Reads both files now and returns the watcher with its shared lists.
    pub(crate) fn new(config: &ListsConfig) -> Self {
        let mut white = Watched::new(config.whitelist.clone());
        let mut black = Watched::new(config.blacklist.clone());
        let lists = Lists {
            whitelist: white.poll().unwrap_or_default(),
            blacklist: black.poll().unwrap_or_default(),
        };
        Self {
            white,
            black,
            interval: config.reload_interval,
            shared: Arc::new(SharedLists::new(lists)),
        }
    }

    /// The lists ingestors read.
    pub(crate) fn shared(&self) -> Arc<SharedLists> {
        self.shared.clone()
    }

    /// Checks both files once; true when the lists were republished.
    pub(crate) fn poll(&mut self) -> bool {
        let white = self.white.poll();
        let black = self.black.poll();
        if white.is_none() && black.is_none() {
            return false;
        }
        let old = self.shared.load();
        let lists = Lists {
            whitelist: white.unwrap_or_else(|| old.whitelist.clone()),
            blacklist: black.unwrap_or_else(|| old.blacklist.clone()),
        };
        tracing::info!("whitelist/blacklist reloaded");
        self.shared.store(lists);
        true
    }

    /// Polls every interval until `stop` is cancelled.
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        let mut ticker =
            tokio::time::interval_at(tokio::time::Instant::now() + self.interval, self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticker.tick() => {}
            }
            self.poll();
        }
    }
}

/// The ingestor's view of the white/blacklists: refreshed once per flush. Verdicts are cached
/// per name in a byte-bounded cache shared by every ingestor of the relay, each tagged with the
/// lists' generation so that a reload makes the old verdicts misses without a sweep.
#[derive(Debug)]
pub(crate) struct NameFilter {
    shared: Arc<SharedLists>,
    generation: u64,
    lists: Arc<Lists>,
    verdicts: Arc<NameCache>,
    /// A cached verdict, read back.
    scratch: Vec<u8>,
    /// Names dropped by the blacklist since the counters were last taken.
    pub(crate) blacklisted: u64,
    /// Names dropped for not being on the whitelist since then.
    pub(crate) not_whitelisted: u64,
}

impl NameFilter {
    /// A filter reading `shared`, caching verdicts in `verdicts` (shared by the relay's
    /// filters).
    pub(crate) fn new(shared: Arc<SharedLists>, verdicts: Arc<NameCache>) -> Self {
        Self {
            generation: shared.generation(),
            lists: shared.load(),
            shared,
            verdicts,
            scratch: Vec::with_capacity(VERDICT_BYTES),
            blacklisted: 0,
            not_whitelisted: 0,
        }
    }

    /// The verdict for `name` (cached per name until the lists change); counts the drops.
    #[inline]
    pub(crate) fn check(&mut self, name: &[u8]) -> Verdict {
        let hash = self.verdicts.hash(name);
        let generation = self.generation;
        let found = match self.verdicts.lookup(hash, name, &mut self.scratch) {
            Lookup::Hit => Ok(decode_verdict(&self.scratch, generation)),
            Lookup::Miss { admit } => Err(admit),
        };
        let verdict = match found {
            Ok(Some(v)) => v,
            // A verdict for other lists is replaced at once: the name is known to repeat.
            Ok(None) | Err(true) => {
                let v = self.lists.verdict(name);
                self.verdicts
                    .insert(hash, name, &encode_verdict(v, generation));
                v
            }
            Err(false) => self.lists.verdict(name),
        };
        match verdict {
            Verdict::Pass => {}
            Verdict::Blacklisted => self.blacklisted += 1,
            Verdict::NotWhitelisted => self.not_whitelisted += 1,
        }
        verdict
    }

    /// Picks up reloaded lists (one atomic load when nothing changed).
    pub(crate) fn refresh(&mut self) {
        let generation = self.shared.generation();
        if generation != self.generation {
            self.generation = generation;
            self.lists = self.shared.load();
        }
    }
}

/// Bytes of a cached verdict.
const VERDICT_BYTES: usize = 9;

/// A cached verdict: the lists' generation (8 bytes) and the verdict (1 byte).
fn encode_verdict(v: Verdict, generation: u64) -> [u8; VERDICT_BYTES] {
    let mut out = [0u8; VERDICT_BYTES];
    out[..8].copy_from_slice(&generation.to_le_bytes());
    out[8] = match v {
        Verdict::Pass => 0,
        Verdict::Blacklisted => 1,
        Verdict::NotWhitelisted => 2,
    };
    out
}

/// The verdict cached for `generation`, `None` when it was made for other lists.
fn decode_verdict(bytes: &[u8], generation: u64) -> Option<Verdict> {
    let (g, v) = bytes.split_first_chunk::<8>()?;
    if u64::from_le_bytes(*g) != generation {
        return None;
    }
    match v {
        [0] => Some(Verdict::Pass),
        [1] => Some(Verdict::Blacklisted),
        [2] => Some(Verdict::NotWhitelisted),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blacklist_first_then_whitelist_like_carbon() {
        let lists = Lists {
            whitelist: RegexList::parse("# only these\n^prod\\.\n\n  web  \n"),
            blacklist: RegexList::parse("secret\n(unclosed\n"),
        };
        assert_eq!(lists.blacklist.skipped.len(), 1);
        assert_eq!(lists.verdict(b"prod.cpu"), Verdict::Pass);
        assert_eq!(lists.verdict(b"dev.web.cpu"), Verdict::Pass);
        assert_eq!(lists.verdict(b"dev.cpu"), Verdict::NotWhitelisted);
        assert_eq!(lists.verdict(b"prod.secret"), Verdict::Blacklisted);
        assert_eq!(Lists::default().verdict(b"anything"), Verdict::Pass);
        // carbon checks '#' on the raw line: an indented '#' line is a regex.
        assert!(RegexList::parse("  #x\n").matches(b"a#x"));
    }

    #[test]
    fn python_look_ahead_entries_are_honoured_not_skipped() {
        let lists = Lists {
            whitelist: RegexList::parse("^prod\\.(?!tmp\\.)\n"),
            blacklist: RegexList::parse("(?<=\\.)secret$\n"),
        };
        assert!(lists.whitelist.skipped.is_empty() && lists.blacklist.skipped.is_empty());
        assert_eq!(lists.verdict(b"prod.cpu"), Verdict::Pass);
        assert_eq!(lists.verdict(b"prod.tmp.cpu"), Verdict::NotWhitelisted);
        assert_eq!(lists.verdict(b"prod.secret"), Verdict::Blacklisted);
        assert_eq!(lists.verdict(b"prodsecret"), Verdict::NotWhitelisted);
    }

    #[test]
    fn whitelist_reload_follows_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let white = dir.path().join("whitelist.conf");
        let config = ListsConfig {
            whitelist: Some(white.clone()),
            blacklist: Some(dir.path().join("blacklist.conf")),
            reload_interval: Duration::from_secs(10),
        };
        let mut watcher = ListWatcher::new(&config);
        let shared = watcher.shared();
        assert_eq!(shared.load().verdict(b"a.b"), Verdict::Pass);
        let g0 = shared.generation();

        std::fs::write(&white, "^keep\\.\n").expect("write whitelist");
        assert!(watcher.poll());
        assert!(shared.generation() > g0);
        assert_eq!(shared.load().verdict(b"a.b"), Verdict::NotWhitelisted);
        assert_eq!(shared.load().verdict(b"keep.b"), Verdict::Pass);
        assert!(!watcher.poll(), "unchanged file: no reload");

        let g1 = shared.generation();
        // A different mtime even on coarse-timestamp file systems.
        std::fs::write(&white, "^a\\.\n").expect("rewrite whitelist");
        let f = std::fs::File::options()
            .write(true)
            .open(&white)
            .expect("open");
        f.set_modified(SystemTime::now() + Duration::from_secs(5))
            .expect("set mtime");
        assert!(watcher.poll());
        assert!(shared.generation() > g1);
        assert_eq!(shared.load().verdict(b"a.b"), Verdict::Pass);

        std::fs::remove_file(&white).expect("remove");
        assert!(watcher.poll());
        assert_eq!(shared.load().verdict(b"zzz"), Verdict::Pass);
    }
}
