//! Regular expressions written for Python's `re`: relay-rule patterns, whitelist/blacklist
//! entries and aggregation-rule input patterns all compile here, in one place.
//!
//! carbon compiles every one of them with Python's backtracking `re`. anthracite first tries the
//! linear-time [`regex`] crate, which accepts the common subset with the same meaning; a
//! pattern it refuses (look-ahead, look-behind, back-references, atomic groups) is compiled
//! with [`fancy_regex`], a backtracking engine that delegates the plain parts to `regex`. Each
//! backtracking match is bounded by [`BACKTRACK_LIMIT`] steps, so a catastrophic pattern cannot
//! stall a connection: a match that hits the limit counts as *no match* and is logged once per
//! pattern (Python would keep going, for as long as it takes). A pattern neither engine
//! accepts is an error carrying both engines' messages; callers turn it into a startup error
//! naming the file and line (or log and skip it, for list files, as carbon does).
//!
//! A table of patterns (relay rules, a white- or blacklist, aggregation rules) is matched in
//! one pass by [`PatternSet`]: its linear patterns are compiled into one multi-pattern
//! automaton that reports every pattern matching a name at once, so the cost of a name grows
//! with its length rather than with the number of patterns; only the backtracking patterns are
//! tried one by one, and only where the caller still needs an answer.

mod segments;
pub(crate) use segments::SegmentSpans;

use std::cell::RefCell;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use regex_automata::hybrid::dfa::{Cache as DfaCache, DFA, OverlappingState};
use regex_automata::nfa::thompson;
use regex_automata::util::pool::Pool;
use regex_automata::{Input, MatchKind, meta, nfa::thompson::WhichCaptures, util::syntax};

/// Most backtracking steps one match of a look-around or back-reference pattern may take.
pub(crate) const BACKTRACK_LIMIT: usize = 1_000_000;

/// A pattern neither engine accepts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{linear}")]
pub struct PatternError {
    /// The `regex` crate's message (the more detailed one, shown first).
    pub linear: String,
    /// The backtracking engine's message.
    pub backtracking: String,
}

/// How a pattern is matched.
#[derive(Clone, Debug)]
enum Engine {
    /// Linear time (the `regex` crate), for every pattern it accepts.
    Linear(regex::bytes::Regex),
    /// Backtracking, bounded by [`BACKTRACK_LIMIT`], for look-around and back-references.
    Backtracking {
        regex: Box<fancy_regex::Regex>,
        /// Set once the limit was hit, so that is logged once per pattern.
        warned: Arc<AtomicBool>,
    },
}

/// One compiled pattern, searched (unanchored, like Python's `re.search`) in metric names.
#[derive(Clone, Debug)]
pub struct Pattern {
    source: String,
    /// Compiled with `re.I`.
    ignore_case: bool,
    engine: Engine,
    /// Named groups and their indices (for aggregation templates).
    names: Vec<(String, usize)>,
}

impl Pattern {
    /// Compiles `source` as Python's `re.compile(source)` would be used.
    pub fn new(source: &str) -> Result<Self, PatternError> {
        Self::build(source, false)
    }

    /// Compiles `source` ignoring case, like `re.compile(source, re.I)` (relay rules).
    pub fn case_insensitive(source: &str) -> Result<Self, PatternError> {
        Self::build(source, true)
    }

    fn build(source: &str, ignore_case: bool) -> Result<Self, PatternError> {
        let linear = match regex::bytes::RegexBuilder::new(source)
            .case_insensitive(ignore_case)
            .build()
        {
            Ok(re) => {
                let names = re
                    .capture_names()
                    .enumerate()
                    .filter_map(|(i, n)| n.map(|n| (n.to_owned(), i)))
                    .collect();
                return Ok(Self {
                    source: source.to_owned(),
                    ignore_case,
                    engine: Engine::Linear(re),
                    names,
                });
            }
            Err(e) => e.to_string(),
        };
        let fancy = fancy_regex::RegexBuilder::new(source)
            .case_insensitive(ignore_case)
            .backtrack_limit(BACKTRACK_LIMIT)
            .build()
            .map_err(|e| PatternError {
                linear,
                backtracking: e.to_string(),
            })?;
        let names = fancy
            .capture_names()
            .enumerate()
            .filter_map(|(i, n)| n.map(|n| (n.to_owned(), i)))
            .collect();
        Ok(Self {
            source: source.to_owned(),
            ignore_case,
            engine: Engine::Backtracking {
                regex: Box::new(fancy),
                warned: Arc::new(AtomicBool::new(false)),
            },
            names,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// True when matched by the linear-time engine (no look-around or back-references).
    pub fn is_linear(&self) -> bool {
        matches!(self.engine, Engine::Linear(_))
    }

    /// True when the pattern matches anywhere in `name`. A name that is not UTF-8 never
    /// matches a backtracking pattern (every receiver hands over UTF-8 names only).
    pub fn is_match(&self, name: &[u8]) -> bool {
        match &self.engine {
            Engine::Linear(re) => re.is_match(name),
            Engine::Backtracking { regex, warned } => {
                let Ok(text) = std::str::from_utf8(name) else {
                    return false;
                };
                self.settle(regex.is_match(text), warned).unwrap_or(false)
            }
        }
    }

    /// The names of the pattern's named groups, in group order.
    pub fn group_names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|(n, _)| n.as_str())
    }

    /// The groups of the first match in `text`, or `None` when it does not match.
    pub fn captures<'t>(&self, text: &'t str) -> Option<Captures<'_, 't>> {
        let groups: Vec<Option<&'t str>> = match &self.engine {
            Engine::Linear(re) => {
                let caps = re.captures(text.as_bytes())?;
                caps.iter()
                    .map(|m| m.and_then(|m| text.get(m.start()..m.end())))
                    .collect()
            }
            Engine::Backtracking { regex, warned } => {
                let caps = self.settle(regex.captures(text), warned).flatten()?;
                (0..caps.len())
                    .map(|i| caps.get(i).and_then(|m| text.get(m.start()..m.end())))
                    .collect()
            }
        };
        Some(Captures {
            groups,
            names: &self.names,
        })
    }

    /// The group index of the `i`-th named group (in [`group_names`](Self::group_names)
    /// order), for [`Spans::get`].
    pub fn named_group_index(&self, i: usize) -> Option<usize> {
        self.names.get(i).map(|(_, index)| *index)
    }

    /// The index of the named group `name`.
    pub fn group_index(&self, name: &str) -> Option<usize> {
        self.names.iter().find(|(n, _)| n == name).map(|(_, i)| *i)
    }

    /// Groups in the pattern, not counting the whole match (Python's `pattern.groups`).
    pub fn group_count(&self) -> usize {
        match &self.engine {
            Engine::Linear(re) => re.captures_len().saturating_sub(1),
            Engine::Backtracking { regex, .. } => regex.captures_len().saturating_sub(1),
        }
    }

    /// Reusable match positions for [`find_at`](Self::find_at).
    pub fn spans(&self) -> Spans {
        Spans {
            linear: match &self.engine {
                Engine::Linear(re) => Some(re.capture_locations()),
                Engine::Backtracking { .. } => None,
            },
            groups: vec![None; self.group_count() + 1],
        }
    }

    /// Searches `text` from byte offset `pos` (with `^` and look-behind seeing the text
    /// before it, as Python's `pattern.search(text, pos)`), filling `spans` with the match
    /// and its groups. The linear engine allocates nothing.
    pub fn find_at(&self, text: &str, pos: usize, spans: &mut Spans) -> bool {
        match (&self.engine, spans.linear.as_mut()) {
            (Engine::Linear(re), Some(locs)) => {
                if re.captures_read_at(locs, text.as_bytes(), pos).is_none() {
                    return false;
                }
                for (i, g) in spans.groups.iter_mut().enumerate() {
                    *g = locs.get(i);
                }
                true
            }
            (Engine::Backtracking { regex, warned }, _) => {
                let Some(caps) = self
                    .settle(regex.captures_from_pos(text, pos), warned)
                    .flatten()
                else {
                    return false;
                };
                for (i, g) in spans.groups.iter_mut().enumerate() {
                    *g = caps.get(i).map(|m| (m.start(), m.end()));
                }
                true
            }
            (Engine::Linear(_), None) => false,
        }
    }

    /// The result of a backtracking match; the limit being hit is logged once per pattern.
    fn settle<T>(&self, result: Result<T, fancy_regex::Error>, warned: &AtomicBool) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                if !warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(pattern = %self.source, error = %e,
                        "pattern exceeded its backtracking limit; such names count as not matching");
                }
                None
            }
        }
    }
}

/// The positions of one match and its groups (index 0 is the whole match), reused from
/// search to search.
#[derive(Clone, Debug)]
pub struct Spans {
    linear: Option<regex::bytes::CaptureLocations>,
    groups: Vec<Option<(usize, usize)>>,
}

impl Spans {
    /// The byte range of group `i` (0: the whole match), `None` when it did not take part.
    pub fn get(&self, i: usize) -> Option<(usize, usize)> {
        self.groups.get(i).copied().flatten()
    }
}

/// The groups of one match.
#[derive(Debug)]
pub struct Captures<'p, 't> {
    groups: Vec<Option<&'t str>>,
    names: &'p [(String, usize)],
}

impl<'t> Captures<'_, 't> {
    /// The text of the named group, `None` when it did not take part in the match.
    pub fn name(&self, name: &str) -> Option<&'t str> {
        let (_, index) = self.names.iter().find(|(n, _)| n == name)?;
        self.groups.get(*index).copied().flatten()
    }

    /// The text of the `i`-th named group (in [`Pattern::group_names`] order), `None` when it
    /// did not take part in the match.
    pub fn named(&self, i: usize) -> Option<&'t str> {
        let (_, index) = self.names.get(i)?;
        self.groups.get(*index).copied().flatten()
    }
}

/// Most bytes the set's Thompson NFA may take; a table past it is matched one pattern at a
/// time (see [`PatternSet::new`]).
const SET_NFA_LIMIT: usize = 64 << 20;

/// Memory of the lazy DFA's state cache, per thread matching a set. The default (2 MiB) makes
/// a table of 1,000 rules fall back to the slow PikeVM on long names.
const SET_DFA_CACHE: usize = 8 << 20;

/// Scratch for one search of a [`PatternSet`]: which of its linear patterns matched.
type Scratch = regex_automata::PatternSet;
type ScratchPool = Pool<Scratch, Box<dyn Fn() -> Scratch + Send + Sync>>;

/// Many [`Pattern`]s matched against one name in a single pass, reporting the positions of the
/// patterns that match in order.
///
/// Linear patterns are compiled together into one `regex-automata` automaton searched for
/// overlapping matches (as `regex::bytes::RegexSet` is), each with its own case flag, so a name
/// costs one scan however many patterns there are. Backtracking patterns (look-around,
/// back-references) cannot join it; [`for_each_match`](Self::for_each_match) tries them one
/// by one, in their place, only while the caller still wants more matches — a rule table
/// whose first linear match ends the search never runs the backtracking rules after it.
#[derive(Debug)]
pub(crate) struct PatternSet {
    /// Every pattern, in the caller's order (the one-by-one path, and the backtracking ones).
    patterns: Vec<Pattern>,
    /// The linear patterns' automaton, `None` when there are none or it could not be built
    /// (then every pattern is tried one by one).
    automaton: Option<Automaton>,
    /// Positions of the backtracking patterns, ascending (all positions without automaton).
    one_by_one: Vec<usize>,
}

/// The linear patterns of a [`PatternSet`] in one automaton.
///
/// The lazy DFA's overlapping search reports each matching pattern as it finds it, so a name
/// costs one scan plus its (few) matches; the meta regex's `which_overlapping_matches` fills a
/// set with one slot per pattern, which must be cleared and walked for every name, a cost that
/// grows with the table. The meta regex stays as the fallback
/// for patterns the lazy DFA cannot run (Unicode word boundaries) or gives up on (a state
/// cache thrashing on hostile names).
struct Automaton {
    regex: meta::Regex,
    /// `None` when the lazy DFA could not be built for these patterns.
    dfa: Option<DFA>,
    /// Names this automaton's DFA cache in each thread's [`DFA_CACHES`].
    id: u64,
    /// The caller's position of each automaton pattern, ascending.
    positions: Vec<usize>,
    scratch: ScratchPool,
}

/// Source of [`Automaton::id`].
static NEXT_AUTOMATON: AtomicU64 = AtomicU64::new(0);

/// Most automata whose DFA cache a thread keeps (a relay matches with a rule table, two lists
/// and the aggregation rules; a reload replaces them and the old caches age out).
const CACHES_PER_THREAD: usize = 8;

thread_local! {
    /// Each thread's lazy-DFA caches, most recently used last: no lock or pool on the hot path.
    static DFA_CACHES: RefCell<Vec<(u64, DfaCache)>> = const { RefCell::new(Vec::new()) };
}

/// The distinct automaton patterns one name matched, without allocating for the usual few.
struct Found {
    inline: [u32; 16],
    len: usize,
    spilled: Vec<u32>,
}

impl Found {
    fn new() -> Self {
        Self {
            inline: [0; 16],
            len: 0,
            spilled: Vec::new(),
        }
    }

    fn insert(&mut self, id: u32) {
        if self.inline[..self.len].contains(&id) || self.spilled.contains(&id) {
            return;
        }
        if self.len < self.inline.len() {
            self.inline[self.len] = id;
            self.len += 1;
        } else {
            self.spilled.push(id);
        }
    }

    /// The ids, ascending.
    fn sorted(&mut self) -> &[u32] {
        if self.spilled.is_empty() {
            self.inline[..self.len].sort_unstable();
            &self.inline[..self.len]
        } else {
            self.spilled.extend_from_slice(&self.inline[..self.len]);
            self.len = 0;
            self.spilled.sort_unstable();
            &self.spilled
        }
    }
}

impl std::fmt::Debug for Automaton {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Automaton")
            .field("patterns", &self.positions.len())
            .finish_non_exhaustive()
    }
}

impl Clone for PatternSet {
    fn clone(&self) -> Self {
        Self::new(self.patterns.clone())
    }
}

impl PatternSet {
    /// Compiles the linear ones of `patterns` into one automaton. Never fails: the patterns
    /// compiled on their own already, and a table too large for one automaton (past 64 MiB of
    /// NFA) is matched one pattern at a time, with the same results.
    pub(crate) fn new(patterns: Vec<Pattern>) -> Self {
        let positions: Vec<usize> = patterns
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_linear())
            .map(|(i, _)| i)
            .collect();
        let automaton = (!positions.is_empty())
            .then(|| Automaton::build(&patterns, positions))
            .flatten();
        let one_by_one = patterns
            .iter()
            .enumerate()
            .filter(|(_, p)| automaton.is_none() || !p.is_linear())
            .map(|(i, _)| i)
            .collect();
        Self {
            patterns,
            automaton,
            one_by_one,
        }
    }

    #[cfg(test)]
    /// The patterns, in order.
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// True when the set has no pattern.
    pub(crate) fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    #[cfg(test)]
    /// True when the linear patterns share one automaton (false: one by one).
    pub fn is_combined(&self) -> bool {
        self.automaton.is_some()
    }

    /// True when any pattern matches anywhere in `name` (the automaton stops at its first
    /// match; backtracking patterns are tried only when no linear one matches).
    pub(crate) fn is_match(&self, name: &[u8]) -> bool {
        match &self.automaton {
            Some(a) if a.regex.is_match(name) => true,
            _ => self
                .one_by_one
                .iter()
                .any(|&i| self.patterns[i].is_match(name)),
        }
    }

    #[cfg(test)]
    /// The position of the first pattern (in order) that matches `name`.
    pub fn first_match(&self, name: &[u8]) -> Option<usize> {
        let mut first = None;
        self.for_each_match(name, |i| {
            first = Some(i);
            ControlFlow::Break(())
        });
        first
    }

    /// Calls `f` with the position of every pattern matching `name`, in ascending order, until
    /// it returns [`ControlFlow::Break`]. Backtracking patterns are tried only when their turn
    /// comes. One search of the automaton; no allocation once each thread has its scratch.
    pub(crate) fn for_each_match(&self, name: &[u8], mut f: impl FnMut(usize) -> ControlFlow<()>) {
        let Some(automaton) = &self.automaton else {
            for &i in &self.one_by_one {
                if self.patterns[i].is_match(name) && f(i).is_break() {
                    return;
                }
            }
            return;
        };
        let mut found = Found::new();
        if !automaton.search_dfa(name, &mut found) {
            found = Found::new();
            let mut scratch = automaton.scratch.get();
            scratch.clear();
            automaton
                .regex
                .which_overlapping_matches(&Input::new(name), &mut scratch);
            for id in scratch.iter() {
                found.insert(id.as_u32());
            }
        }
        let mut linear = found
            .sorted()
            .iter()
            .map(|&id| automaton.positions[id as usize])
            .peekable();
        let mut backtracking = self.one_by_one.iter().copied().peekable();
        loop {
            let next = match (linear.peek(), backtracking.peek()) {
                (Some(&l), Some(&b)) if b < l => {
                    backtracking.next();
                    if !self.patterns[b].is_match(name) {
                        continue;
                    }
                    b
                }
                (Some(&l), _) => {
                    linear.next();
                    l
                }
                (None, Some(&b)) => {
                    backtracking.next();
                    if !self.patterns[b].is_match(name) {
                        continue;
                    }
                    b
                }
                (None, None) => return,
            };
            if f(next).is_break() {
                return;
            }
        }
    }
}

impl Automaton {
    /// `None` when the patterns do not fit the limits of one automaton.
    fn build(patterns: &[Pattern], positions: Vec<usize>) -> Option<Self> {
        // The flags of each pattern apply to it alone: `(?i)` at the front is what
        // `case_insensitive(true)` does for a single pattern.
        let sources: Vec<String> = positions
            .iter()
            .map(|&i| {
                let p = &patterns[i];
                if p.ignore_case {
                    format!("(?i){}", p.source)
                } else {
                    p.source.clone()
                }
            })
            .collect();
        let config = meta::Config::new()
            .match_kind(MatchKind::All)
            .utf8_empty(false)
            .which_captures(WhichCaptures::None)
            .nfa_size_limit(Some(SET_NFA_LIMIT))
            .hybrid_cache_capacity(SET_DFA_CACHE);
        let regex = meta::Builder::new()
            .configure(config)
            .syntax(syntax::Config::new().utf8(false))
            .build_many(&sources)
            .map_err(|e| {
                tracing::warn!(patterns = sources.len(), error = %e,
                    "patterns do not fit one automaton; matching them one by one");
            })
            .ok()?;
        let dfa = DFA::builder()
            .configure(
                DFA::config()
                    .match_kind(MatchKind::All)
                    .cache_capacity(SET_DFA_CACHE),
            )
            .syntax(syntax::Config::new().utf8(false))
            .thompson(
                thompson::Config::new()
                    .utf8(false)
                    .which_captures(WhichCaptures::None)
                    .nfa_size_limit(Some(SET_NFA_LIMIT)),
            )
            .build_many(&sources)
            .ok();
        let len = regex.pattern_len();
        let scratch: ScratchPool = Pool::new(Box::new(move || Scratch::new(len)));
        Some(Self {
            regex,
            dfa,
            id: NEXT_AUTOMATON.fetch_add(1, Ordering::Relaxed),
            positions,
            scratch,
        })
    }

    /// Every pattern matching `name`, by the lazy DFA with this thread's cache; false when
    /// there is no DFA or it gave up (the caller then asks the meta regex).
    fn search_dfa(&self, name: &[u8], found: &mut Found) -> bool {
        let Some(dfa) = &self.dfa else {
            return false;
        };
        DFA_CACHES.with(|caches| {
            let Ok(mut caches) = caches.try_borrow_mut() else {
                return false;
            };
            let at = match caches.iter().position(|(id, _)| *id == self.id) {
                Some(i) => i,
                None => {
                    if caches.len() >= CACHES_PER_THREAD {
                        caches.remove(0);
                    }
                    caches.push((self.id, dfa.create_cache()));
                    caches.len() - 1
                }
            };
            let cache = &mut caches[at].1;
            let input = Input::new(name);
            let mut state = OverlappingState::start();
            loop {
                if dfa
                    .try_search_overlapping_fwd(cache, &input, &mut state)
                    .is_err()
                {
                    return false;
                }
                match state.get_match() {
                    Some(m) => found.insert(m.pattern().as_u32()),
                    None => return true,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_patterns_stay_linear_and_search_unanchored() {
        let p = Pattern::new(r"^prod\.").expect("compiles");
        assert!(p.is_linear());
        assert!(p.is_match(b"prod.cpu"));
        assert!(!p.is_match(b"dev.prod.cpu"));
        let p = Pattern::case_insensitive("load").expect("compiles");
        assert!(p.is_match(b"host.LOAD.avg"));
    }

    #[test]
    fn look_around_and_back_references_fall_back_to_backtracking() {
        let ahead = Pattern::case_insensitive(r"^servers\.(?!db)").expect("look-ahead");
        assert!(!ahead.is_linear());
        assert!(ahead.is_match(b"servers.web1.cpu"));
        assert!(ahead.is_match(b"SERVERS.web1.cpu"));
        assert!(!ahead.is_match(b"servers.db1.cpu"));
        assert!(
            !ahead.is_match(b"Servers.DB1.cpu"),
            "re.I applies inside the look-ahead"
        );
        let behind = Pattern::new(r"(?<=\.)count$").expect("look-behind");
        assert!(behind.is_match(b"a.count"));
        assert!(!behind.is_match(b"acount"));
        let backref = Pattern::new(r"^(\w+)\.\1\.").expect("back-reference");
        assert!(backref.is_match(b"web.web.cpu"));
        assert!(!backref.is_match(b"web.db.cpu"));
        assert!(!backref.is_match(b"web.web\xff.cpu"), "not UTF-8: no match");
    }

    #[test]
    fn a_pattern_neither_engine_accepts_reports_both() {
        let err = Pattern::new("(unclosed").expect_err("invalid");
        assert!(err.to_string().contains("unclosed"), "{err}");
        assert!(!err.backtracking.is_empty());
    }

    #[test]
    fn catastrophic_backtracking_is_bounded_and_counts_as_no_match() {
        // (a+)+ with a back-reference forces the backtracking engine; on a long run of `a`
        // without the final `b` Python would take exponential time.
        let p = Pattern::new(r"^(a+)+\1b").expect("compiles");
        let name = "a".repeat(64);
        assert!(!p.is_match(name.as_bytes()));
        assert!(p.is_match(b"aab"));
    }

    fn set(sources: &[(&str, bool)]) -> PatternSet {
        PatternSet::new(
            sources
                .iter()
                .map(|&(s, i)| {
                    if i {
                        Pattern::case_insensitive(s)
                    } else {
                        Pattern::new(s)
                    }
                    .expect("compiles")
                })
                .collect(),
        )
    }

    fn all_matches(set: &PatternSet, name: &str) -> Vec<usize> {
        let mut out = Vec::new();
        set.for_each_match(name.as_bytes(), |i| {
            out.push(i);
            ControlFlow::Continue(())
        });
        out
    }

    #[test]
    fn a_set_reports_what_each_pattern_alone_reports_in_order() {
        let sources = [
            (r"^servers\.(?!db\d)", true),
            ("load", true),
            ("LOAD", false),
            (r"^(\w+)\.\1\.", false),
            (r"\.cpu$", false),
            ("(?-i:Cpu)", true),
            ("^x", false),
        ];
        let s = set(&sources);
        assert!(s.is_combined());
        for name in [
            "servers.web1.load.cpu",
            "SERVERS.DB1.LOAD.cpu",
            "web.web.LOAD.Cpu",
            "x.y",
            "nothing",
            "servers.dbx.cpu",
        ] {
            let alone: Vec<usize> = s
                .patterns()
                .iter()
                .enumerate()
                .filter(|(_, p)| p.is_match(name.as_bytes()))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(all_matches(&s, name), alone, "{name}");
            assert_eq!(
                s.first_match(name.as_bytes()),
                alone.first().copied(),
                "{name}"
            );
        }
    }

    #[test]
    fn a_set_stops_where_the_caller_stops_and_skips_later_backtracking() {
        // The back-reference at 1 would hit its limit on this name (logged, no match); the
        // caller stops at 0, so it is never tried.
        let s = set(&[("^a", false), (r"^(a+)+\1b", false)]);
        let name = "a".repeat(64);
        assert_eq!(s.first_match(name.as_bytes()), Some(0));
        assert!(!s.patterns()[1].is_match(name.as_bytes()));
        let empty = set(&[]);
        assert!(empty.is_empty() && !empty.is_match(b"x"));
    }

    #[test]
    fn named_captures_from_either_engine() {
        for source in [r"^(?P<env>[^.]+)\.x$", r"^(?P<env>[^.]+)(?=\.x$)\.x$"] {
            let p = Pattern::new(source).expect("compiles");
            assert_eq!(p.group_names().collect::<Vec<_>>(), vec!["env"]);
            let caps = p.captures("prod.x").expect("matches");
            assert_eq!(caps.name("env"), Some("prod"));
            assert_eq!(caps.name("other"), None);
            assert!(p.captures("prod.y").is_none());
        }
    }
}
