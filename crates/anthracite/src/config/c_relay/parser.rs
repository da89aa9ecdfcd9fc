//! The statements of a carbon-c-relay configuration, read as its bison grammar
//! (`conffile.y` of 3.7.3) reads them. The grammar's actions (what a statement means, and
//! the checks carbon-c-relay makes on it) are in [`super::build`]; this module only says
//! which words form which statement, and where each part is, so that an error can point at
//! it.

use super::lexer::{Kw, LexError, Lexer, Loc, Tok};

/// A value and the place it was written.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Spanned<T> {
    pub v: T,
    pub at: Loc,
}

/// A parse error: where and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub loc: Loc,
    pub message: String,
}

impl From<LexError> for ParseError {
    fn from(e: LexError) -> Self {
        Self {
            loc: e.loc,
            message: e.message.to_string(),
        }
    }
}

/// `cluster`'s type clause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClusterType {
    Forward,
    AnyOf,
    Failover,
    CarbonCh,
    Fnv1aCh,
    JumpFnv1aCh,
    File,
    FileIp,
}

/// `proto` of a member or receptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proto {
    Tcp,
    Udp,
    Unix,
}

pub(crate) use crate::router::c_relay::Compression;

/// One member of a host cluster: `host[:port][=instance] [proto …] [type …] [transport …]`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Host {
    pub addr: Spanned<String>,
    pub instance: Option<String>,
    pub proto: Proto,
    pub syslog: bool,
    pub compression: Compression,
    pub ssl: bool,
    /// Where a transport this build lacks was named.
    pub transport_at: Loc,
    /// The token after the member (where carbon-c-relay reports what is wrong with it).
    pub after: Loc,
}

/// `cluster NAME TYPE MEMBERS`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ClusterStmt {
    pub name: String,
    pub kind: ClusterType,
    /// `useall` (forward, any_of, failover).
    pub useall: bool,
    /// `replication N` (hashing clusters; 1 when absent).
    pub replication: i32,
    pub dynamic: bool,
    /// Members (host clusters).
    pub hosts: Vec<Host>,
    /// Paths (`file` clusters), each with the token after it.
    pub paths: Vec<Spanned<String>>,
    /// The closing `;`.
    pub end: Loc,
}

/// `send to` targets.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Targets {
    Blackhole,
    Clusters(Vec<Spanned<String>>),
}

/// `match`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MatchStmt {
    /// The expressions (`None`: `*`), each with the token after it.
    pub exprs: Option<Vec<Spanned<String>>>,
    /// `validate EXPR else drop|log`: the expression and whether it drops.
    pub validate: Option<(Spanned<String>, bool)>,
    pub route_using: Option<String>,
    pub send_to: Option<Targets>,
    pub stop: bool,
    pub end: Loc,
}

/// `rewrite EXPR into REPLACEMENT`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RewriteStmt {
    pub expr: Spanned<String>,
    pub into: String,
    pub end: Loc,
}

pub(crate) use crate::router::c_relay::{ComputeKind, TsWhen};

/// `compute KIND write to METRIC`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Compute {
    pub kind: ComputeKind,
    pub metric: String,
}

/// `aggregate`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AggregateStmt {
    pub exprs: Vec<Spanned<String>>,
    pub every: i32,
    pub expire: i32,
    pub ts: TsWhen,
    pub computes: Vec<Compute>,
    pub send_to: Option<Targets>,
    pub stop: bool,
    pub end: Loc,
}

/// `statistics` (or the older `send statistics to`, with only `send_to` and `stop`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StatisticsStmt {
    /// `submit every N seconds`.
    pub interval: Option<i32>,
    /// `reset counters after interval`.
    pub reset: bool,
    /// `prefix with TEMPLATE`.
    pub prefix: Option<String>,
    pub send_to: Option<Targets>,
    pub stop: bool,
    /// The deprecated `send statistics to` form.
    pub deprecated: bool,
    pub end: Loc,
}

/// One `listen` receptor.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Receptor {
    pub addr: Spanned<String>,
    pub proto: Proto,
    /// The token after it.
    pub after: Loc,
}

/// `listen type linemode [transport … [ssl PEM]] RECEPTORS`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ListenStmt {
    pub compression: Compression,
    pub transport_at: Loc,
    pub ssl: Option<String>,
    pub receptors: Vec<Receptor>,
    pub end: Loc,
}

/// One statement.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Stmt {
    Cluster(ClusterStmt),
    Match(MatchStmt),
    Rewrite(RewriteStmt),
    Aggregate(AggregateStmt),
    Statistics(StatisticsStmt),
    Listen(ListenStmt),
    Include(Spanned<String>),
}

/// Reads statements one at a time (an `include` is acted on before the next one is read).
pub(crate) struct Parser<'a> {
    lexer: Lexer<'a>,
    tok: Tok,
    at: Loc,
}

type Result<T> = std::result::Result<T, ParseError>;

impl<'a> Parser<'a> {
    pub(crate) fn new(text: &'a [u8]) -> Result<Self> {
        let mut lexer = Lexer::new(text);
        let (tok, at) = lexer.next()?;
        Ok(Self { lexer, tok, at })
    }

    fn bump(&mut self) -> Result<(Tok, Loc)> {
        let (tok, at) = self.lexer.next()?;
        let prev = std::mem::replace(&mut self.tok, tok);
        let prev_at = std::mem::replace(&mut self.at, at);
        Ok((prev, prev_at))
    }

    fn unexpected(&self, expecting: &str) -> ParseError {
        ParseError {
            loc: self.at,
            message: format!(
                "syntax error, unexpected {}, expecting {expecting}",
                self.tok
            ),
        }
    }

    fn is_kw(&self, k: Kw) -> bool {
        self.tok == Tok::Kw(k)
    }

    fn eat_kw(&mut self, k: Kw) -> Result<bool> {
        if self.is_kw(k) {
            self.bump()?;
            return Ok(true);
        }
        Ok(false)
    }

    fn expect_kw(&mut self, k: Kw) -> Result<Loc> {
        if self.is_kw(k) {
            return Ok(self.bump()?.1);
        }
        Err(self.unexpected(&format!("'{}'", k.word())))
    }

    fn expect_char(&mut self, c: u8) -> Result<Loc> {
        if self.tok == Tok::Char(c) {
            return Ok(self.bump()?.1);
        }
        Err(self.unexpected(&format!("'{}'", char::from(c))))
    }

    fn string(&mut self, what: &str) -> Result<Spanned<String>> {
        if let Tok::Str(_) = self.tok {
            let (tok, at) = self.bump()?;
            if let Tok::Str(v) = tok {
                return Ok(Spanned { v, at });
            }
        }
        Err(self.unexpected(what))
    }

    fn int(&mut self) -> Result<i32> {
        if let Tok::Int(v) = self.tok {
            self.bump()?;
            return Ok(v);
        }
        Err(self.unexpected("number"))
    }

    /// The next statement with its `;`, or `None` at the end of the file.
    pub(crate) fn statement(&mut self) -> Result<Option<Stmt>> {
        let stmt = match &self.tok {
            Tok::Eof => return Ok(None),
            Tok::Kw(Kw::Cluster) => Stmt::Cluster(self.cluster()?),
            Tok::Kw(Kw::Match) => Stmt::Match(self.match_stmt()?),
            Tok::Kw(Kw::Rewrite) => Stmt::Rewrite(self.rewrite()?),
            Tok::Kw(Kw::Aggregate) => Stmt::Aggregate(self.aggregate()?),
            Tok::Kw(Kw::Send) => Stmt::Statistics(self.send_statistics()?),
            Tok::Kw(Kw::Statistics) => Stmt::Statistics(self.statistics()?),
            Tok::Kw(Kw::Listen) => Stmt::Listen(self.listen()?),
            Tok::Kw(Kw::Include) => {
                // carbon-c-relay reads the file as soon as it has its name, before the `;`
                // (`end_include` takes that).
                self.bump()?;
                Stmt::Include(self.string("string")?)
            }
            _ => {
                return Err(self.unexpected(
                    "'cluster', 'match', 'rewrite', 'aggregate', 'send', 'statistics', \
                     'listen', 'include' or end of file",
                ));
            }
        };
        Ok(Some(stmt))
    }

    /// The `;` after an `include`'s file was read.
    pub(crate) fn end_include(&mut self) -> Result<()> {
        self.expect_char(b';').map(|_| ())
    }

    fn cluster(&mut self) -> Result<ClusterStmt> {
        self.expect_kw(Kw::Cluster)?;
        let name = self.string("string")?.v;
        let mut c = ClusterStmt {
            name,
            kind: ClusterType::Forward,
            useall: false,
            replication: 1,
            dynamic: false,
            hosts: Vec::new(),
            paths: Vec::new(),
            end: Loc::default(),
        };
        let (tok, _) = self.bump()?;
        match tok {
            Tok::Kw(k @ (Kw::Forward | Kw::AnyOf | Kw::Failover)) => {
                c.kind = match k {
                    Kw::Forward => ClusterType::Forward,
                    Kw::AnyOf => ClusterType::AnyOf,
                    _ => ClusterType::Failover,
                };
                c.useall = self.eat_kw(Kw::Useall)?;
            }
            Tok::Kw(k @ (Kw::CarbonCh | Kw::Fnv1aCh | Kw::JumpFnv1aCh)) => {
                c.kind = match k {
                    Kw::CarbonCh => ClusterType::CarbonCh,
                    Kw::Fnv1aCh => ClusterType::Fnv1aCh,
                    _ => ClusterType::JumpFnv1aCh,
                };
                if self.eat_kw(Kw::Replication)? {
                    c.replication = self.int()?;
                }
                c.dynamic = self.eat_kw(Kw::Dynamic)?;
            }
            Tok::Kw(Kw::File) => {
                c.kind = if self.eat_kw(Kw::Ip)? {
                    ClusterType::FileIp
                } else {
                    ClusterType::File
                };
                loop {
                    let path = self.string("string")?;
                    c.paths.push(Spanned {
                        v: path.v,
                        at: self.at,
                    });
                    if !matches!(self.tok, Tok::Str(_)) {
                        break;
                    }
                }
                c.end = self.expect_char(b';')?;
                return Ok(c);
            }
            other => {
                return Err(ParseError {
                    loc: self.at,
                    message: format!(
                        "syntax error, unexpected {other}, expecting 'forward', 'any_of', \
                         'failover', 'carbon_ch', 'fnv1a_ch', 'jump_fnv1a_ch' or 'file'"
                    ),
                });
            }
        }
        loop {
            c.hosts.push(self.host()?);
            if !matches!(self.tok, Tok::Str(_)) {
                break;
            }
        }
        c.end = self.expect_char(b';')?;
        Ok(c)
    }

    fn host(&mut self) -> Result<Host> {
        let addr = self.string("string")?;
        let mut h = Host {
            addr,
            instance: None,
            proto: Proto::Tcp,
            syslog: false,
            compression: Compression::Plain,
            ssl: false,
            transport_at: Loc::default(),
            after: Loc::default(),
        };
        if self.tok == Tok::Char(b'=') {
            self.bump()?;
            h.instance = Some(match self.bump()? {
                (Tok::Str(s), _) => s,
                // `'=' crINTVAL`: printed back through `%d`.
                (Tok::Int(i), _) => i.to_string(),
                (other, at) => {
                    return Err(ParseError {
                        loc: at,
                        message: format!(
                            "syntax error, unexpected {other}, expecting string or number"
                        ),
                    });
                }
            });
        }
        if self.eat_kw(Kw::Proto)? {
            h.proto = match self.bump()? {
                (Tok::Kw(Kw::Udp), _) => Proto::Udp,
                (Tok::Kw(Kw::Tcp), _) => Proto::Tcp,
                (other, at) => {
                    return Err(ParseError {
                        loc: at,
                        message: format!(
                            "syntax error, unexpected {other}, expecting 'udp' or 'tcp'"
                        ),
                    });
                }
            };
        }
        if self.eat_kw(Kw::Type)? {
            h.syslog = match self.bump()? {
                (Tok::Kw(Kw::Linemode), _) => false,
                (Tok::Kw(Kw::Syslog), _) => true,
                (other, at) => {
                    return Err(ParseError {
                        loc: at,
                        message: format!(
                            "syntax error, unexpected {other}, expecting 'linemode' or 'syslog'"
                        ),
                    });
                }
            };
        }
        if self.is_kw(Kw::Transport) {
            self.bump()?;
            let (compression, at) = self.compression()?;
            h.compression = compression;
            h.transport_at = at;
            h.ssl = self.eat_kw(Kw::Ssl)?;
        }
        h.after = self.at;
        Ok(h)
    }

    fn compression(&mut self) -> Result<(Compression, Loc)> {
        let (tok, at) = self.bump()?;
        let c = match tok {
            Tok::Kw(Kw::Plain) => Compression::Plain,
            Tok::Kw(Kw::Gzip) => Compression::Gzip,
            Tok::Kw(Kw::Lz4) => Compression::Lz4,
            Tok::Kw(Kw::Snappy) => Compression::Snappy,
            // anthracite's own, between anthracite relays (carbon-c-relay has no zstd).
            Tok::Kw(Kw::Zstd) => Compression::Zstd,
            other => {
                return Err(ParseError {
                    loc: at,
                    message: format!(
                        "syntax error, unexpected {other}, expecting 'plain', 'gzip', 'lz4' \
                         or 'snappy'"
                    ),
                });
            }
        };
        Ok((c, at))
    }

    /// `match_exprs2`: one or more strings, each with the token after it.
    fn exprs(&mut self) -> Result<Vec<Spanned<String>>> {
        let mut out = Vec::new();
        loop {
            let e = self.string("string")?;
            out.push(Spanned {
                v: e.v,
                at: self.at,
            });
            if !matches!(self.tok, Tok::Str(_)) {
                return Ok(out);
            }
        }
    }

    fn targets(&mut self) -> Result<Targets> {
        if self.eat_kw(Kw::Blackhole)? {
            return Ok(Targets::Blackhole);
        }
        let mut out = Vec::new();
        loop {
            let name = self.string("'blackhole' or string")?;
            out.push(Spanned {
                v: name.v,
                at: self.at,
            });
            if !matches!(self.tok, Tok::Str(_)) {
                return Ok(Targets::Clusters(out));
            }
        }
    }

    fn opt_send_to(&mut self) -> Result<Option<Targets>> {
        if self.eat_kw(Kw::Send)? {
            self.expect_kw(Kw::To)?;
            return Ok(Some(self.targets()?));
        }
        Ok(None)
    }

    fn match_stmt(&mut self) -> Result<MatchStmt> {
        self.expect_kw(Kw::Match)?;
        let exprs = if self.tok == Tok::Char(b'*') {
            self.bump()?;
            None
        } else {
            Some(self.exprs()?)
        };
        let validate = if self.eat_kw(Kw::Validate)? {
            let e = self.string("string")?;
            let e = Spanned {
                v: e.v,
                at: self.at,
            };
            self.expect_kw(Kw::Else)?;
            let drop = match self.bump()? {
                (Tok::Kw(Kw::Log), _) => false,
                (Tok::Kw(Kw::Drop), _) => true,
                (other, at) => {
                    return Err(ParseError {
                        loc: at,
                        message: format!(
                            "syntax error, unexpected {other}, expecting 'log' or 'drop'"
                        ),
                    });
                }
            };
            Some((e, drop))
        } else {
            None
        };
        let route_using = if self.eat_kw(Kw::Route)? {
            self.expect_kw(Kw::Using)?;
            Some(self.string("string")?.v)
        } else {
            None
        };
        let send_to = self.opt_send_to()?;
        let stop = self.eat_kw(Kw::Stop)?;
        let end = self.expect_char(b';')?;
        Ok(MatchStmt {
            exprs,
            validate,
            route_using,
            send_to,
            stop,
            end,
        })
    }

    fn rewrite(&mut self) -> Result<RewriteStmt> {
        self.expect_kw(Kw::Rewrite)?;
        let e = self.string("string")?;
        let expr = Spanned {
            v: e.v,
            at: self.at,
        };
        self.expect_kw(Kw::Into)?;
        let into = self.string("string")?.v;
        let end = self.expect_char(b';')?;
        Ok(RewriteStmt { expr, into, end })
    }

    fn aggregate(&mut self) -> Result<AggregateStmt> {
        self.expect_kw(Kw::Aggregate)?;
        let exprs = self.exprs()?;
        self.expect_kw(Kw::Every)?;
        let every = self.int()?;
        self.expect_kw(Kw::Seconds)?;
        self.expect_kw(Kw::Expire)?;
        self.expect_kw(Kw::After)?;
        let expire = self.int()?;
        self.expect_kw(Kw::Seconds)?;
        let mut ts = TsWhen::End;
        if self.eat_kw(Kw::Timestamp)? {
            self.expect_kw(Kw::At)?;
            ts = match self.bump()? {
                (Tok::Kw(Kw::Start), _) => TsWhen::Start,
                (Tok::Kw(Kw::Middle), _) => TsWhen::Middle,
                (Tok::Kw(Kw::End), _) => TsWhen::End,
                (other, at) => {
                    return Err(ParseError {
                        loc: at,
                        message: format!(
                            "syntax error, unexpected {other}, expecting 'start', 'middle' or \
                             'end'"
                        ),
                    });
                }
            };
            self.expect_kw(Kw::Of)?;
            self.expect_kw(Kw::Bucket)?;
        }
        let mut computes = Vec::new();
        loop {
            self.expect_kw(Kw::Compute)?;
            let (tok, at) = self.bump()?;
            let kind = match tok {
                Tok::Kw(Kw::Sum) => ComputeKind::Sum,
                Tok::Kw(Kw::Count) => ComputeKind::Count,
                Tok::Kw(Kw::Max) => ComputeKind::Max,
                Tok::Kw(Kw::Min) => ComputeKind::Min,
                Tok::Kw(Kw::Average) => ComputeKind::Average,
                Tok::Kw(Kw::Median) => ComputeKind::Median,
                Tok::Kw(Kw::Variance) => ComputeKind::Variance,
                Tok::Kw(Kw::Stddev) => ComputeKind::Stddev,
                Tok::Percentile(p) => {
                    if !(1..=99).contains(&p) {
                        return Err(ParseError {
                            loc: self.at,
                            message: "percentile<x>: value x must be between 1 and 99".into(),
                        });
                    }
                    ComputeKind::Percentile(p as u8)
                }
                other => {
                    return Err(ParseError {
                        loc: at,
                        message: format!(
                            "syntax error, unexpected {other}, expecting 'sum', 'count', \
                             'max', 'min', 'average', 'median', 'percentile', 'variance' or \
                             'stddev'"
                        ),
                    });
                }
            };
            self.expect_kw(Kw::Write)?;
            self.expect_kw(Kw::To)?;
            let metric = self.string("string")?.v;
            computes.push(Compute { kind, metric });
            if !self.is_kw(Kw::Compute) {
                break;
            }
        }
        let send_to = self.opt_send_to()?;
        let stop = self.eat_kw(Kw::Stop)?;
        let end = self.expect_char(b';')?;
        Ok(AggregateStmt {
            exprs,
            every,
            expire,
            ts,
            computes,
            send_to,
            stop,
            end,
        })
    }

    fn send_statistics(&mut self) -> Result<StatisticsStmt> {
        self.expect_kw(Kw::Send)?;
        self.expect_kw(Kw::Statistics)?;
        self.expect_kw(Kw::To)?;
        let targets = self.targets()?;
        let stop = self.eat_kw(Kw::Stop)?;
        let end = self.expect_char(b';')?;
        Ok(StatisticsStmt {
            interval: None,
            reset: false,
            prefix: None,
            send_to: Some(targets),
            stop,
            deprecated: true,
            end,
        })
    }

    fn statistics(&mut self) -> Result<StatisticsStmt> {
        self.expect_kw(Kw::Statistics)?;
        let mut interval = None;
        if self.eat_kw(Kw::Submit)? {
            self.expect_kw(Kw::Every)?;
            let v = self.int()?;
            let at = self.expect_kw(Kw::Seconds)?;
            if v <= 0 {
                return Err(ParseError {
                    loc: at,
                    message: "interval must be > 0".into(),
                });
            }
            interval = Some(v);
        }
        let mut reset = false;
        if self.eat_kw(Kw::Reset)? {
            self.expect_kw(Kw::Counters)?;
            self.expect_kw(Kw::After)?;
            self.expect_kw(Kw::Interval)?;
            reset = true;
        }
        let prefix = if self.eat_kw(Kw::Prefix)? {
            self.expect_kw(Kw::With)?;
            Some(self.string("string")?.v)
        } else {
            None
        };
        let send_to = self.opt_send_to()?;
        let stop = self.eat_kw(Kw::Stop)?;
        let end = self.expect_char(b';')?;
        Ok(StatisticsStmt {
            interval,
            reset,
            prefix,
            send_to,
            stop,
            deprecated: false,
            end,
        })
    }

    fn listen(&mut self) -> Result<ListenStmt> {
        self.expect_kw(Kw::Listen)?;
        self.expect_kw(Kw::Type)?;
        self.expect_kw(Kw::Linemode)?;
        let mut l = ListenStmt {
            compression: Compression::Plain,
            transport_at: Loc::default(),
            ssl: None,
            receptors: Vec::new(),
            end: Loc::default(),
        };
        if self.eat_kw(Kw::Transport)? {
            let (c, at) = self.compression()?;
            l.compression = c;
            l.transport_at = at;
            if self.eat_kw(Kw::Ssl)? {
                l.ssl = Some(self.string("string")?.v);
            }
        }
        loop {
            let addr = self.string("string")?;
            self.expect_kw(Kw::Proto)?;
            let proto = match self.bump()? {
                (Tok::Kw(Kw::Tcp), _) => Proto::Tcp,
                (Tok::Kw(Kw::Udp), _) => Proto::Udp,
                (Tok::Kw(Kw::Unix), _) => Proto::Unix,
                (other, at) => {
                    return Err(ParseError {
                        loc: at,
                        message: format!(
                            "syntax error, unexpected {other}, expecting 'tcp', 'udp' or 'unix'"
                        ),
                    });
                }
            };
            l.receptors.push(Receptor {
                addr,
                proto,
                after: self.at,
            });
            if !matches!(self.tok, Tok::Str(_)) {
                break;
            }
        }
        l.end = self.expect_char(b';')?;
        Ok(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> std::result::Result<Vec<Stmt>, ParseError> {
        let mut p = Parser::new(text.as_bytes())?;
        let mut out = Vec::new();
        while let Some(s) = p.statement()? {
            if let Stmt::Include(_) = s {
                p.end_include()?;
            }
            out.push(s);
        }
        Ok(out)
    }

    #[test]
    fn every_statement_of_the_manual_parses() {
        let text = r#"
cluster a forward 10.0.0.1 10.0.0.2:2004 proto udp;
cluster b any_of useall h1:1 h2:2 type linemode transport lz4 ssl;
cluster c carbon_ch replication 2 dynamic h1:1=a h2:2=3;
cluster f file ip /tmp/x /tmp/y;
match ^a\. ^b;
match * validate ^[0-9]+\ [0-9]+$ else drop route using \1 send to a b stop;
match x send to blackhole;
rewrite ^a\.(.*) into b.\_1;
aggregate ^x\.(.*) every 10 seconds expire after 35 seconds timestamp at start of bucket
    compute sum write to s.\1 compute percentile95 write to p send to c stop;
statistics submit every 5 seconds reset counters after interval prefix with x.\.1 send to a stop;
send statistics to a b;
listen type linemode transport gzip ssl "cert.pem" 2003 proto tcp /tmp/s proto unix;
include "/etc/x*.conf";
"#;
        let stmts = parse(text).expect("parses");
        assert_eq!(stmts.len(), 13);
        let Stmt::Cluster(c) = &stmts[2] else {
            panic!("cluster")
        };
        assert_eq!(c.kind, ClusterType::CarbonCh);
        assert_eq!((c.replication, c.dynamic), (2, true));
        assert_eq!(c.hosts[1].instance.as_deref(), Some("3"));
        let Stmt::Match(m) = &stmts[4] else {
            panic!("match")
        };
        assert_eq!(m.exprs.as_ref().map(Vec::len), Some(2));
        // A `*` after expressions is not an expression (the grammar takes `*` alone).
        assert!(parse("match ^a *;").is_err());
        let Stmt::Aggregate(a) = &stmts[8] else {
            panic!("aggregate")
        };
        assert_eq!(a.computes[1].kind, ComputeKind::Percentile(95));
        assert_eq!(a.ts, TsWhen::Start);
        let Stmt::Listen(l) = &stmts[11] else {
            panic!("listen")
        };
        assert_eq!(l.compression, Compression::Gzip);
        assert_eq!(l.ssl.as_deref(), Some("cert.pem"));
        assert_eq!(l.receptors[1].proto, Proto::Unix);
    }

    #[test]
    fn errors_point_at_the_token() {
        let e = parse("listen\n\tlinemode 2003 proto tcp;").expect_err("type missing");
        assert_eq!((e.loc.line, e.loc.col), (2, 1));
        assert!(e.message.contains("unexpected 'linemode'"), "{}", e.message);
        let e = parse("match * send to foo blackhole;").expect_err("blackhole after a cluster");
        assert!(e.message.contains("'blackhole'"), "{}", e.message);
        let e = parse(
            "aggregate x every 1 seconds expire after 2 seconds compute percentile0 write to y;",
        )
        .expect_err("percentile 0");
        assert!(e.message.contains("between 1 and 99"));
        assert!(parse("cluster x forward 2003;").is_err());
    }
}
