//! The tokens of a carbon-c-relay configuration, cut as its flex scanner (`conffile.l` of
//! 3.7.3) cuts them.
//!
//! The scanner is a state machine: `cluster`, `match`, `send to`, `listen` … switch it into
//! states where different words are keywords and where identifiers (expressions, hosts,
//! cluster names) may appear. At each position every rule of the current state is tried and
//! the longest match wins, the earlier rule on a tie, exactly as flex decides: so `sslhost`
//! is an identifier where `ssl` is a keyword, a `#` inside a quoted string starts a comment
//! that runs to the end of the line (the comment rule matches more), and a file ending in a
//! comment without a newline ends in a stray `#`. The table below is the scanner's rules in
//! its file order; [`Lexer::next`] applies it.

use std::fmt;

/// A token's place: 1-based line, 0-based first and last byte column (as carbon-c-relay
/// reports them: `file:line:column`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Loc {
    pub line: usize,
    pub col: usize,
    pub end_col: usize,
}

/// Keywords, by their carbon-c-relay token names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kw {
    Cluster,
    Forward,
    AnyOf,
    Failover,
    Useall,
    CarbonCh,
    Fnv1aCh,
    JumpFnv1aCh,
    Replication,
    Dynamic,
    File,
    Ip,
    Proto,
    Udp,
    Tcp,
    Type,
    Linemode,
    Syslog,
    Transport,
    Plain,
    Gzip,
    Lz4,
    Snappy,
    Zstd,
    Ssl,
    Match,
    Validate,
    Else,
    Log,
    Drop,
    Route,
    Using,
    Send,
    To,
    Blackhole,
    Stop,
    Rewrite,
    Into,
    Aggregate,
    Every,
    Seconds,
    Expire,
    After,
    Timestamp,
    At,
    Start,
    Middle,
    End,
    Of,
    Bucket,
    Compute,
    Sum,
    Count,
    Max,
    Min,
    Average,
    Median,
    Variance,
    Stddev,
    Write,
    Statistics,
    Submit,
    Reset,
    Counters,
    Interval,
    Prefix,
    With,
    Listen,
    Unix,
    Include,
}

impl Kw {
    /// How an error message names it: the keyword as written.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Kw::Cluster => "cluster",
            Kw::Forward => "forward",
            Kw::AnyOf => "any_of",
            Kw::Failover => "failover",
            Kw::Useall => "useall",
            Kw::CarbonCh => "carbon_ch",
            Kw::Fnv1aCh => "fnv1a_ch",
            Kw::JumpFnv1aCh => "jump_fnv1a_ch",
            Kw::Replication => "replication",
            Kw::Dynamic => "dynamic",
            Kw::File => "file",
            Kw::Ip => "ip",
            Kw::Proto => "proto",
            Kw::Udp => "udp",
            Kw::Tcp => "tcp",
            Kw::Type => "type",
            Kw::Linemode => "linemode",
            Kw::Syslog => "syslog",
            Kw::Transport => "transport",
            Kw::Plain => "plain",
            Kw::Gzip => "gzip",
            Kw::Lz4 => "lz4",
            Kw::Snappy => "snappy",
            Kw::Zstd => "zstd",
            Kw::Ssl => "ssl",
            Kw::Match => "match",
            Kw::Validate => "validate",
            Kw::Else => "else",
            Kw::Log => "log",
            Kw::Drop => "drop",
            Kw::Route => "route",
            Kw::Using => "using",
            Kw::Send => "send",
            Kw::To => "to",
            Kw::Blackhole => "blackhole",
            Kw::Stop => "stop",
            Kw::Rewrite => "rewrite",
            Kw::Into => "into",
            Kw::Aggregate => "aggregate",
            Kw::Every => "every",
            Kw::Seconds => "seconds",
            Kw::Expire => "expire",
            Kw::After => "after",
            Kw::Timestamp => "timestamp",
            Kw::At => "at",
            Kw::Start => "start",
            Kw::Middle => "middle",
            Kw::End => "end",
            Kw::Of => "of",
            Kw::Bucket => "bucket",
            Kw::Compute => "compute",
            Kw::Sum => "sum",
            Kw::Count => "count",
            Kw::Max => "max",
            Kw::Min => "min",
            Kw::Average => "average",
            Kw::Median => "median",
            Kw::Variance => "variance",
            Kw::Stddev => "stddev",
            Kw::Write => "write",
            Kw::Statistics => "statistics",
            Kw::Submit => "submit",
            Kw::Reset => "reset",
            Kw::Counters => "counters",
            Kw::Interval => "interval",
            Kw::Prefix => "prefix",
            Kw::With => "with",
            Kw::Listen => "listen",
            Kw::Unix => "unix",
            Kw::Include => "include",
        }
    }
}

/// One token.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Kw(Kw),
    /// `percentileN`: N as `atoi` reads it.
    Percentile(i32),
    /// An identifier or a quoted string.
    Str(String),
    /// Digits where the scanner reads numbers, as `atoi` reads them.
    Int(i32),
    /// `=`, `*` or `;`.
    Char(u8),
    /// A byte no rule wants (the scanner hands it to the parser, which reports it).
    Unexpected(u8),
    Eof,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Kw(k) => write!(f, "'{}'", k.word()),
            Tok::Percentile(_) => f.write_str("'percentile'"),
            Tok::Str(s) => write!(f, "string '{s}'"),
            Tok::Int(i) => write!(f, "number {i}"),
            Tok::Char(c) | Tok::Unexpected(c) => {
                write!(f, "'{}'", char::from(*c).escape_default())
            }
            Tok::Eof => f.write_str("end of file"),
        }
    }
}

/// The scanner's start conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Initial,
    Cl,
    Ma,
    Re,
    Ag,
    Se,
    St,
    Li,
    Qu,
    IdCl,
    IdMa,
    IdAg,
    IdIn,
    IdLi,
}

/// What a rule does once it matched.
#[derive(Clone, Copy, Debug)]
enum Action {
    /// Return the keyword; optionally set `identstate` and switch state.
    Kw(Kw, Option<State>, Option<State>),
    Percentile,
    /// `=` or `*`.
    Char(u8),
    /// `"` in an identifier state: start a quoted string.
    QuoteOpen,
    QuoteClose,
    QuoteNewline,
    QuoteEscape,
    QuoteText,
    Comment,
    Blank,
    Newlines,
    Int,
    Ident,
    Semicolon,
    Any,
}

/// How a rule matches (the length of its match at a position, if any).
#[derive(Clone, Copy, Debug)]
enum Pat {
    Lit(&'static str),
    Percentile,
    Quote,
    Newline,
    Escape,
    QuoteText,
    Comment,
    Blank,
    Newlines,
    Digits,
    Ident,
    AnyButNewline,
}

/// One scanner rule: the states it is active in (empty: every state), its pattern, its action.
struct Rule {
    states: &'static [State],
    pat: Pat,
    action: Action,
}

use Action as A;
use State as S;

const ALL: &[State] = &[];
const ID_STATES: &[State] = &[S::IdCl, S::IdMa, S::IdAg, S::IdIn, S::IdLi];

/// A keyword rule: active in `states`, sets `identstate` to `ident` and switches to `begin`.
const fn kw(
    states: &'static [State],
    word: &'static str,
    k: Kw,
    ident: Option<State>,
    begin: Option<State>,
) -> Rule {
    Rule {
        states,
        pat: Pat::Lit(word),
        action: A::Kw(k, ident, begin),
    }
}

/// `conffile.l`'s rules, in its order (which breaks ties).
const RULES: &[Rule] = &[
    kw(
        &[S::Initial],
        "cluster",
        Kw::Cluster,
        Some(S::Cl),
        Some(S::IdCl),
    ),
    kw(
        &[S::Cl],
        "forward",
        Kw::Forward,
        Some(S::IdCl),
        Some(S::IdCl),
    ),
    kw(&[S::Cl], "any_of", Kw::AnyOf, Some(S::IdCl), Some(S::IdCl)),
    kw(
        &[S::Cl],
        "failover",
        Kw::Failover,
        Some(S::IdCl),
        Some(S::IdCl),
    ),
    kw(&[S::IdCl], "useall", Kw::Useall, None, None),
    kw(
        &[S::Cl],
        "carbon_ch",
        Kw::CarbonCh,
        Some(S::IdCl),
        Some(S::IdCl),
    ),
    kw(
        &[S::Cl],
        "fnv1a_ch",
        Kw::Fnv1aCh,
        Some(S::IdCl),
        Some(S::IdCl),
    ),
    kw(
        &[S::Cl],
        "jump_fnv1a_ch",
        Kw::JumpFnv1aCh,
        Some(S::IdCl),
        Some(S::IdCl),
    ),
    kw(&[S::IdCl], "replication", Kw::Replication, None, None),
    kw(&[S::IdCl], "dynamic", Kw::Dynamic, None, None),
    kw(&[S::Cl], "file", Kw::File, Some(S::IdCl), Some(S::IdCl)),
    kw(&[S::IdCl], "ip", Kw::Ip, None, None),
    kw(&[S::IdCl], "proto", Kw::Proto, None, None),
    kw(&[S::IdCl], "udp", Kw::Udp, None, None),
    kw(&[S::IdCl], "tcp", Kw::Tcp, None, None),
    kw(&[S::IdCl], "type", Kw::Type, None, None),
    kw(&[S::IdCl], "linemode", Kw::Linemode, None, None),
    kw(&[S::IdCl], "syslog", Kw::Syslog, None, None),
    kw(&[S::IdCl], "transport", Kw::Transport, None, None),
    kw(&[S::IdCl], "plain", Kw::Plain, None, None),
    kw(&[S::IdCl], "gzip", Kw::Gzip, None, None),
    kw(&[S::IdCl], "lz4", Kw::Lz4, None, None),
    kw(&[S::IdCl], "snappy", Kw::Snappy, None, None),
    kw(&[S::IdCl], "zstd", Kw::Zstd, None, None),
    kw(&[S::IdCl], "ssl", Kw::Ssl, None, None),
    Rule {
        states: &[S::IdCl],
        pat: Pat::Lit("="),
        action: A::Char(b'='),
    },
    kw(
        &[S::Initial],
        "match",
        Kw::Match,
        Some(S::IdMa),
        Some(S::IdMa),
    ),
    Rule {
        states: &[S::IdMa],
        pat: Pat::Lit("*"),
        action: A::Char(b'*'),
    },
    kw(
        &[S::IdMa],
        "validate",
        Kw::Validate,
        Some(S::Ma),
        Some(S::IdMa),
    ),
    kw(&[S::Ma], "else", Kw::Else, None, None),
    kw(&[S::Ma], "log", Kw::Log, None, None),
    kw(&[S::Ma], "drop", Kw::Drop, None, None),
    kw(&[S::Ma, S::IdMa], "route", Kw::Route, None, Some(S::Ma)),
    kw(&[S::Ma], "using", Kw::Using, Some(S::Ma), Some(S::IdMa)),
    kw(&[S::Ma, S::IdMa], "send", Kw::Send, None, Some(S::Ma)),
    kw(&[S::Ma], "to", Kw::To, Some(S::IdCl), Some(S::IdCl)),
    kw(&[S::IdCl], "blackhole", Kw::Blackhole, None, None),
    kw(&[S::Ma, S::IdCl], "stop", Kw::Stop, None, None),
    kw(
        &[S::Initial],
        "rewrite",
        Kw::Rewrite,
        Some(S::Re),
        Some(S::IdMa),
    ),
    kw(&[S::Re], "into", Kw::Into, Some(S::Re), Some(S::IdMa)),
    kw(
        &[S::Initial],
        "aggregate",
        Kw::Aggregate,
        Some(S::IdAg),
        Some(S::IdAg),
    ),
    kw(&[S::IdAg], "every", Kw::Every, None, Some(S::Ag)),
    kw(&[S::Ag], "seconds", Kw::Seconds, None, None),
    kw(&[S::Ag], "expire", Kw::Expire, None, None),
    kw(&[S::Ag], "after", Kw::After, None, None),
    kw(&[S::Ag], "timestamp", Kw::Timestamp, None, None),
    kw(&[S::Ag], "at", Kw::At, None, None),
    kw(&[S::Ag], "start", Kw::Start, None, None),
    kw(&[S::Ag], "middle", Kw::Middle, None, None),
    kw(&[S::Ag], "end", Kw::End, None, None),
    kw(&[S::Ag], "of", Kw::Of, None, None),
    kw(&[S::Ag], "bucket", Kw::Bucket, None, None),
    kw(&[S::Ag], "compute", Kw::Compute, None, None),
    kw(&[S::Ag], "summary", Kw::Sum, None, None),
    kw(&[S::Ag], "sum", Kw::Sum, None, None),
    kw(&[S::Ag], "count", Kw::Count, None, None),
    kw(&[S::Ag], "cnt", Kw::Count, None, None),
    kw(&[S::Ag], "maximum", Kw::Max, None, None),
    kw(&[S::Ag], "max", Kw::Max, None, None),
    kw(&[S::Ag], "minimum", Kw::Min, None, None),
    kw(&[S::Ag], "min", Kw::Min, None, None),
    kw(&[S::Ag], "average", Kw::Average, None, None),
    kw(&[S::Ag], "avg", Kw::Average, None, None),
    kw(&[S::Ag], "median", Kw::Median, None, None),
    Rule {
        states: &[S::Ag],
        pat: Pat::Percentile,
        action: A::Percentile,
    },
    kw(&[S::Ag], "variance", Kw::Variance, None, None),
    kw(&[S::Ag], "stddev", Kw::Stddev, None, None),
    kw(&[S::Ag], "write", Kw::Write, None, None),
    kw(&[S::Ag], "to", Kw::To, Some(S::Ag), Some(S::IdAg)),
    kw(&[S::Ag], "send", Kw::Send, None, Some(S::Ma)),
    kw(&[S::Initial], "send", Kw::Send, None, Some(S::Se)),
    kw(&[S::Se], "statistics", Kw::Statistics, None, Some(S::Ma)),
    kw(
        &[S::Initial],
        "statistics",
        Kw::Statistics,
        None,
        Some(S::St),
    ),
    kw(&[S::St], "submit", Kw::Submit, None, None),
    kw(&[S::St], "every", Kw::Every, None, None),
    kw(&[S::St], "seconds", Kw::Seconds, None, None),
    kw(&[S::St], "reset", Kw::Reset, None, None),
    kw(&[S::St], "counters", Kw::Counters, None, None),
    kw(&[S::St], "after", Kw::After, None, None),
    kw(&[S::St], "interval", Kw::Interval, None, None),
    kw(&[S::St], "prefix", Kw::Prefix, None, None),
    kw(&[S::St], "with", Kw::With, Some(S::St), Some(S::IdAg)),
    kw(&[S::St], "send", Kw::Send, None, Some(S::Ma)),
    kw(&[S::Initial], "listen", Kw::Listen, None, Some(S::Li)),
    kw(&[S::Li], "type", Kw::Type, None, None),
    kw(
        &[S::Li],
        "linemode",
        Kw::Linemode,
        Some(S::Li),
        Some(S::IdLi),
    ),
    kw(&[S::IdLi], "transport", Kw::Transport, None, None),
    kw(&[S::IdLi], "plain", Kw::Plain, None, None),
    kw(&[S::IdLi], "gzip", Kw::Gzip, Some(S::Li), Some(S::IdLi)),
    kw(&[S::IdLi], "lz4", Kw::Lz4, Some(S::Li), Some(S::IdLi)),
    kw(&[S::IdLi], "snappy", Kw::Snappy, Some(S::Li), Some(S::IdLi)),
    kw(&[S::IdLi], "zstd", Kw::Zstd, Some(S::Li), Some(S::IdLi)),
    kw(&[S::IdLi], "ssl", Kw::Ssl, Some(S::IdLi), Some(S::IdLi)),
    kw(&[S::Li, S::IdLi], "proto", Kw::Proto, None, Some(S::Li)),
    kw(&[S::Li], "udp", Kw::Udp, Some(S::Li), Some(S::IdLi)),
    kw(&[S::Li], "tcp", Kw::Tcp, Some(S::Li), Some(S::IdLi)),
    kw(&[S::Li], "unix", Kw::Unix, Some(S::Li), Some(S::IdLi)),
    kw(
        &[S::Initial],
        "include",
        Kw::Include,
        Some(S::Initial),
        Some(S::IdIn),
    ),
    Rule {
        states: ID_STATES,
        pat: Pat::Quote,
        action: A::QuoteOpen,
    },
    Rule {
        states: &[S::Qu],
        pat: Pat::Quote,
        action: A::QuoteClose,
    },
    Rule {
        states: &[S::Qu],
        pat: Pat::Newline,
        action: A::QuoteNewline,
    },
    Rule {
        states: &[S::Qu],
        pat: Pat::Escape,
        action: A::QuoteEscape,
    },
    Rule {
        states: &[S::Qu],
        pat: Pat::QuoteText,
        action: A::QuoteText,
    },
    Rule {
        states: ALL,
        pat: Pat::Comment,
        action: A::Comment,
    },
    Rule {
        states: ALL,
        pat: Pat::Blank,
        action: A::Blank,
    },
    Rule {
        states: ALL,
        pat: Pat::Newlines,
        action: A::Newlines,
    },
    Rule {
        states: &[S::IdCl, S::Ag, S::St],
        pat: Pat::Digits,
        action: A::Int,
    },
    Rule {
        states: ID_STATES,
        pat: Pat::Ident,
        action: A::Ident,
    },
    Rule {
        states: ALL,
        pat: Pat::Lit(";"),
        action: A::Semicolon,
    },
    Rule {
        states: ALL,
        pat: Pat::AnyButNewline,
        action: A::Any,
    },
];

/// `IDCHR [a-zA-Z0-9[\](){}|\\^?*$&%<>:/,._+-]`.
fn idchr(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"[](){}|\\^?*$&%<>:/,._+-".contains(&b)
}

impl Pat {
    /// The length of this pattern's match at the start of `s`.
    fn len(self, s: &[u8]) -> Option<usize> {
        let run = |f: fn(u8) -> bool| s.iter().take_while(|&&b| f(b)).count();
        let n = match self {
            Pat::Lit(w) => {
                return s.starts_with(w.as_bytes()).then_some(w.len());
            }
            Pat::Percentile => {
                if !s.starts_with(b"percentile") {
                    return None;
                }
                let digits = s[10..].iter().take_while(|b| b.is_ascii_digit()).count();
                return Some(10 + digits);
            }
            Pat::Quote => usize::from(s.first() == Some(&b'"')),
            Pat::Newline => usize::from(s.first() == Some(&b'\n')),
            Pat::Escape => match s {
                [b'\\', c, ..] if *c != b'\n' => 2,
                _ => 0,
            },
            Pat::QuoteText => run(|b| b != b'\\' && b != b'\n' && b != b'"'),
            Pat::Comment => {
                if s.first() != Some(&b'#') {
                    return None;
                }
                let nl = s.iter().position(|&b| b == b'\n')?;
                nl + 1
            }
            Pat::Blank => run(|b| b == b' ' || b == b'\t' || b == b'\r'),
            Pat::Newlines => run(|b| b == b'\n'),
            Pat::Digits => run(|b| b.is_ascii_digit()),
            Pat::Ident => {
                // {IDCHR}+(\\[ ]{IDCHR}+)*, longest match: a backslash is itself an IDCHR,
                // so `a\ b` is one identifier only by backtracking into the run.
                if !s.first().is_some_and(|&b| idchr(b)) {
                    return None;
                }
                // States: in a run (accepting), after an escaping backslash, after `\ `.
                let (mut run, mut slash, mut space) = (true, false, false);
                let mut last = 1;
                for (i, &b) in s.iter().enumerate().skip(1) {
                    let next_run = (run || space) && idchr(b);
                    let next_slash = run && b == b'\\';
                    let next_space = slash && b == b' ';
                    (run, slash, space) = (next_run, next_slash, next_space);
                    if run {
                        last = i + 1;
                    }
                    if !(run || slash || space) {
                        break;
                    }
                }
                last
            }
            Pat::AnyButNewline => usize::from(s.first().is_some_and(|&b| b != b'\n')),
        };
        (n > 0).then_some(n)
    }
}

/// What went wrong inside the scanner (reported like a parse error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LexError {
    pub loc: Loc,
    pub message: &'static str,
}

/// The longest quoted string, as carbon-c-relay's 1024-byte `string_buf`.
const MAX_QUOTED: usize = 1023;

/// The scanner over one file's text.
pub(crate) struct Lexer<'a> {
    text: &'a [u8],
    pos: usize,
    state: State,
    identstate: State,
    /// 0-based line of `pos` and the column of `pos` on it.
    line: usize,
    col: usize,
    quoted: Vec<u8>,
    quote_start: Loc,
}

impl<'a> Lexer<'a> {
    /// A scanner over `text`; like carbon-c-relay (`yy_scan_string`), it stops at a NUL byte.
    pub(crate) fn new(text: &'a [u8]) -> Self {
        let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
        Self {
            text: &text[..end],
            pos: 0,
            state: State::Initial,
            identstate: State::Initial,
            line: 0,
            col: 0,
            quoted: Vec::new(),
            quote_start: Loc::default(),
        }
    }

    fn begin(&mut self, s: State) {
        self.state = s;
    }

    /// The next token and where it is.
    pub(crate) fn next(&mut self) -> Result<(Tok, Loc), LexError> {
        loop {
            let rest = &self.text[self.pos..];
            if rest.is_empty() {
                let loc = self.loc(0);
                if self.state == State::Qu {
                    return Err(LexError {
                        loc,
                        message: "unterminated string",
                    });
                }
                return Ok((Tok::Eof, loc));
            }
            let mut best: Option<(usize, &Rule)> = None;
            for rule in RULES {
                if !(rule.states.is_empty() || rule.states.contains(&self.state)) {
                    continue;
                }
                if let Some(n) = rule.pat.len(rest)
                    && best.is_none_or(|(m, _)| n > m)
                {
                    best = Some((n, rule));
                }
            }
            // `.` matches every byte but a newline, and `\n+` a newline: something matched.
            let Some((n, rule)) = best else {
                return Err(LexError {
                    loc: self.loc(1),
                    message: "unreadable input",
                });
            };
            let matched = &rest[..n];
            let loc = self.loc(n);
            self.advance(matched);
            if let Some(tok) = self.act(rule.action, matched, loc)? {
                return Ok((tok, loc));
            }
        }
    }

    /// The place of a token of `n` bytes at the current position.
    fn loc(&self, n: usize) -> Loc {
        Loc {
            line: self.line + 1,
            col: self.col,
            end_col: (self.col + n).saturating_sub(1),
        }
    }

    fn advance(&mut self, matched: &[u8]) {
        self.pos += matched.len();
        match matched.iter().rposition(|&b| b == b'\n') {
            // The scanner's newline rules reset the column; a newline inside another token
            // (none can hold one) would not.
            Some(_) => {
                self.line += matched.iter().filter(|&&b| b == b'\n').count();
                self.col = 0;
            }
            None => self.col += matched.len(),
        }
    }

    fn act(&mut self, action: Action, matched: &[u8], loc: Loc) -> Result<Option<Tok>, LexError> {
        let text = || String::from_utf8_lossy(matched).into_owned();
        Ok(Some(match action {
            A::Kw(k, ident, begin) => {
                if let Some(i) = ident {
                    self.identstate = i;
                }
                if let Some(b) = begin {
                    self.begin(b);
                }
                Tok::Kw(k)
            }
            A::Percentile => Tok::Percentile(atoi(&matched[10..])),
            A::Char(c) => Tok::Char(c),
            A::QuoteOpen => {
                self.quoted.clear();
                self.quote_start = loc;
                self.begin(State::Qu);
                return Ok(None);
            }
            A::QuoteClose => {
                if self.quoted.is_empty() {
                    return Err(LexError {
                        loc,
                        message: "empty string",
                    });
                }
                self.begin(self.identstate);
                Tok::Str(String::from_utf8_lossy(&self.quoted).into_owned())
            }
            A::QuoteNewline => {
                return Err(LexError {
                    loc,
                    message: "unterminated string",
                });
            }
            A::QuoteEscape => {
                self.push_quoted(&matched[1..], loc)?;
                return Ok(None);
            }
            A::QuoteText => {
                self.push_quoted(matched, loc)?;
                return Ok(None);
            }
            A::Comment | A::Blank | A::Newlines => return Ok(None),
            A::Int => Tok::Int(atoi(matched)),
            A::Ident => {
                self.begin(self.identstate);
                Tok::Str(text())
            }
            A::Semicolon => {
                self.begin(State::Initial);
                Tok::Char(b';')
            }
            A::Any => Tok::Unexpected(matched[0]),
        }))
    }

    fn push_quoted(&mut self, bytes: &[u8], loc: Loc) -> Result<(), LexError> {
        if self.quoted.len() + bytes.len() > MAX_QUOTED {
            return Err(LexError {
                loc,
                message: "string too large",
            });
        }
        self.quoted.extend_from_slice(bytes);
        Ok(())
    }
}

/// C's `atoi` on digits (glibc: `(int) strtol`, which saturates at the `long` range first).
pub(crate) fn atoi(digits: &[u8]) -> i32 {
    let mut v: i64 = 0;
    for &d in digits.iter().take_while(|b| b.is_ascii_digit()) {
        v = v.saturating_mul(10).saturating_add(i64::from(d - b'0'));
    }
    v as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Vec<Tok> {
        let mut lx = Lexer::new(text.as_bytes());
        let mut out = Vec::new();
        loop {
            match lx.next() {
                Ok((Tok::Eof, _)) => break,
                Ok((t, _)) => out.push(t),
                Err(e) => {
                    out.push(Tok::Str(format!("ERROR {}", e.message)));
                    break;
                }
            }
        }
        out
    }

    fn s(v: &str) -> Tok {
        Tok::Str(v.into())
    }

    #[test]
    fn keywords_belong_to_states_and_the_longest_match_wins() {
        assert_eq!(
            tokens("cluster sslname forward sslhost:2003 ssl;"),
            vec![
                Tok::Kw(Kw::Cluster),
                s("sslname"),
                Tok::Kw(Kw::Forward),
                s("sslhost:2003"),
                Tok::Kw(Kw::Ssl),
                Tok::Char(b';'),
            ]
        );
        // A cluster named like an aggregate keyword is an identifier in the cluster state.
        assert_eq!(
            tokens("cluster sum any_of a=1;"),
            vec![
                Tok::Kw(Kw::Cluster),
                s("sum"),
                Tok::Kw(Kw::AnyOf),
                s("a"),
                Tok::Char(b'='),
                Tok::Int(1),
                Tok::Char(b';'),
            ]
        );
    }

    #[test]
    fn match_send_to_stop_and_escaped_spaces() {
        assert_eq!(
            tokens("match ^a\\ b * send to x stop;"),
            vec![
                Tok::Kw(Kw::Match),
                s("^a\\ b"),
                Tok::Char(b'*'),
                Tok::Kw(Kw::Send),
                Tok::Kw(Kw::To),
                s("x"),
                Tok::Kw(Kw::Stop),
                Tok::Char(b';'),
            ]
        );
    }

    #[test]
    fn quoted_strings_escapes_and_their_errors() {
        assert_eq!(
            tokens("match \"a b\\\"c\" send to x;"),
            vec![
                Tok::Kw(Kw::Match),
                s("a b\"c"),
                Tok::Kw(Kw::Send),
                Tok::Kw(Kw::To),
                s("x"),
                Tok::Char(b';'),
            ]
        );
        assert_eq!(
            tokens("match \"\""),
            vec![Tok::Kw(Kw::Match), s("ERROR empty string")]
        );
        assert_eq!(
            tokens("match \"abc\nx"),
            vec![Tok::Kw(Kw::Match), s("ERROR unterminated string")]
        );
        // At a `#` the comment rule matches more than the string's text: the rest of the
        // line is a comment (inside the string).
        assert_eq!(
            tokens("match \"a\\x#b\" x\nc\""),
            vec![Tok::Kw(Kw::Match), s("axc")]
        );
        assert_eq!(tokens("match \"a#b\""), vec![Tok::Kw(Kw::Match), s("a#b")]);
    }

    #[test]
    fn aggregate_words_numbers_and_percentiles() {
        assert_eq!(
            tokens("aggregate 123 every 10 seconds compute percentile95 write to 7;"),
            vec![
                Tok::Kw(Kw::Aggregate),
                s("123"),
                Tok::Kw(Kw::Every),
                Tok::Int(10),
                Tok::Kw(Kw::Seconds),
                Tok::Kw(Kw::Compute),
                Tok::Percentile(95),
                Tok::Kw(Kw::Write),
                Tok::Kw(Kw::To),
                s("7"),
                Tok::Char(b';'),
            ]
        );
    }

    #[test]
    fn a_comment_needs_its_newline_and_a_nul_ends_the_text() {
        assert_eq!(tokens("# all\n"), vec![]);
        assert_eq!(
            tokens("# la"),
            vec![
                Tok::Unexpected(b'#'),
                Tok::Unexpected(b'l'),
                Tok::Unexpected(b'a')
            ]
        );
        assert_eq!(tokens("listen\0garbage"), vec![Tok::Kw(Kw::Listen)]);
    }

    #[test]
    fn locations_are_one_based_lines_and_zero_based_columns() {
        let mut lx = Lexer::new(b"listen\n\ttype linemode transport gzip");
        let mut last = Loc::default();
        while let Ok((t, loc)) = lx.next() {
            if t == Tok::Eof {
                break;
            }
            last = loc;
        }
        assert_eq!(
            last,
            Loc {
                line: 2,
                col: 25,
                end_col: 28
            }
        );
    }

    #[test]
    fn atoi_saturates_then_truncates_like_glibc() {
        assert_eq!(atoi(b"42"), 42);
        assert_eq!(atoi(b"4294967297"), 1);
    }
}
