//! What each statement means: carbon-c-relay's grammar actions and `router.c`'s checks, in
//! the order it makes them (`router_add_server`, `router_add_cluster`, `router_add_route`,
//! `router_add_stubroute`, `router_set_collectorvals`, `router_add_listener`,
//! `router_readconfig` for `include`).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use super::address::{self, GRAPHITE_PORT, SockKind};
use super::lexer::Loc;
use super::parser::{
    AggregateStmt, ClusterStmt, ClusterType, ListenStmt, MatchStmt, Parser, Proto, RewriteStmt,
    StatisticsStmt, Stmt, Targets,
};
use super::{CRelayError, Collector, Listener, ListenerProto};
use crate::posix_regex::PosixRegex;
use crate::router::c_relay::{
    AggregateCompute, AggregatorSpec, ChHash, Cluster, ClusterKind, Compression, Dest, Dests,
    Matcher, Program, Ring, Route, Server, ServerProto, ServerTransport, rewrite_metric,
};

/// Includes nested deeper than this are refused (carbon-c-relay recurses until it crashes).
const MAX_INCLUDE_DEPTH: usize = 64;

/// carbon-c-relay keeps at most this many members in a hashing cluster (`CONN_DESTS_SIZE`).
const CONN_DESTS_SIZE: usize = 64;

/// A server and what identifies it (`server_cmp`).
struct Entry {
    server: Server,
    refcnt: usize,
    /// The first address it resolved to (`None`: compared by its text).
    addr: Option<SocketAddr>,
    kind: SockKind,
}

/// The configuration as it is read, statement by statement.
pub(crate) struct Builder {
    hostname: String,
    entries: Vec<Entry>,
    clusters: Vec<Cluster>,
    routes: Vec<Route>,
    aggregators: Vec<AggregatorSpec>,
    pub(crate) collector: Collector,
    pub(crate) listeners: Vec<Listener>,
    pub(crate) warnings: Vec<String>,
    depth: usize,
    /// Touch nothing outside: no name service, no files (the fuzz target's mode).
    offline: bool,
}

type Result<T> = std::result::Result<T, CRelayError>;

fn err(file: &str, at: Loc, message: impl Into<String>) -> CRelayError {
    CRelayError {
        file: file.to_string(),
        line: at.line,
        col: at.col,
        message: message.into(),
    }
}

impl Builder {
    pub(crate) fn new(hostname: &str) -> Self {
        let mut b = Self {
            hostname: hostname.to_string(),
            entries: Vec::new(),
            clusters: Vec::new(),
            routes: Vec::new(),
            aggregators: Vec::new(),
            collector: Collector::default(),
            listeners: Vec::new(),
            warnings: Vec::new(),
            depth: 0,
            offline: false,
        };
        // router_readconfig: `carbon.relays.\.1`, every 60 seconds, cumulative.
        b.collector.prefix = b.prefix("carbon.relays.\\.1");
        b
    }

    /// A builder that reads no file and resolves no name: `include` is refused, paths are
    /// taken unchecked, only numeric addresses resolve.
    pub(crate) fn offline(hostname: &str) -> Self {
        Self {
            offline: true,
            ..Self::new(hostname)
        }
    }

    /// `router_readconfig` on `path` (a glob reads every file it matches, in order).
    pub(crate) fn read(&mut self, path: &str) -> Result<()> {
        if self.offline {
            return Err(CRelayError {
                file: path.to_string(),
                line: 0,
                col: 0,
                message: "include is not read offline".into(),
            });
        }
        let is_glob =
            path.contains('*') || path.contains('?') || (path.contains('[') && path.contains(']'));
        if is_glob {
            let Some(paths) = address::glob(path) else {
                return Err(CRelayError {
                    file: path.to_string(),
                    line: 0,
                    col: 0,
                    message: format!("pattern '{path}' did not match any files"),
                });
            };
            for p in paths {
                self.read(&p)?;
            }
            return Ok(());
        }
        let unreadable = |message: String| CRelayError {
            file: path.to_string(),
            line: 0,
            col: 0,
            message,
        };
        let meta = std::fs::metadata(path)
            .map_err(|e| unreadable(format!("unable to stat file '{path}': {e}")))?;
        if !meta.is_file() {
            return Err(unreadable(format!("cannot open non-regular file '{path}'")));
        }
        let text = std::fs::read(path)
            .map_err(|e| unreadable(format!("failed to open config file '{path}': {e}")))?;
        self.depth += 1;
        if self.depth > MAX_INCLUDE_DEPTH {
            return Err(unreadable(format!(
                "includes nested more than {MAX_INCLUDE_DEPTH} deep (an include loop?)"
            )));
        }
        let result = self.read_text(path, &text);
        self.depth -= 1;
        result
    }

    /// Reads the statements of `text`, which came from `file`.
    pub(crate) fn read_text(&mut self, file: &str, text: &[u8]) -> Result<()> {
        let syntax = |e: super::parser::ParseError| err(file, e.loc, e.message);
        let mut parser = Parser::new(text).map_err(syntax)?;
        while let Some(stmt) = parser.statement().map_err(syntax)? {
            match stmt {
                Stmt::Cluster(c) => self.cluster(file, c)?,
                Stmt::Match(m) => self.match_stmt(file, m)?,
                Stmt::Rewrite(r) => self.rewrite(file, r)?,
                Stmt::Aggregate(a) => self.aggregate(file, a)?,
                Stmt::Statistics(s) => self.statistics(file, s)?,
                Stmt::Listen(l) => self.listen(file, l)?,
                Stmt::Include(p) => {
                    self.read(&p.v)?;
                    parser.end_include().map_err(syntax)?;
                }
            }
        }
        Ok(())
    }

    /// The default listeners (when none was configured) for the top-level file.
    pub(crate) fn default_listeners(&mut self, port: u16) {
        if !self.listeners.is_empty() {
            return;
        }
        for (proto, kind) in [
            (ListenerProto::Tcp, SockKind::Stream),
            (ListenerProto::Udp, SockKind::Datagram),
        ] {
            if let Ok(a) = address::parse(&format!(":{port}"), kind, self.offline) {
                self.listeners.push(Listener {
                    proto,
                    ip: a.ip,
                    port: a.port,
                    addrs: a.addrs,
                    compression: Compression::Plain,
                    ssl: None,
                    origin: String::new(),
                });
            }
        }
        self.listeners.push(Listener {
            proto: ListenerProto::Unix,
            ip: Some(format!("/tmp/.s.carbon-c-relay.{port}")),
            port: 0,
            addrs: Vec::new(),
            compression: Compression::Plain,
            ssl: None,
            origin: String::new(),
        });
    }

    /// The routing program, with carbon-c-relay's optimiser applied at `threshold`.
    pub(crate) fn finish(mut self, threshold: Option<usize>) -> (Program, Self) {
        let routes = std::mem::take(&mut self.routes);
        let routes = crate::router::c_relay::optimise::optimise(routes, threshold);
        let program = Program {
            servers: self.entries.iter().map(|e| e.server.clone()).collect(),
            clusters: std::mem::take(&mut self.clusters),
            routes,
            aggregators: std::mem::take(&mut self.aggregators),
            cleansing: Default::default(),
        };
        (program, self)
    }

    fn dests(&self, list: Vec<Dest>) -> Arc<Dests> {
        Arc::new(Dests { list })
    }

    /// `router_set_collectorvals`'s prefix: the template applied to the hostname's match of
    /// `^(([^.]+)(\..*)?)$`.
    fn prefix(&self, template: &str) -> String {
        let host = self.hostname.as_bytes();
        let mut spans = crate::router::c_relay::matcher::NO_SPANS;
        let matched = PosixRegex::new("^(([^.]+)(\\..*)?)$")
            .map(|re| re.captures(host, &mut spans))
            .unwrap_or(false);
        if !matched {
            return template.to_string();
        }
        let mut out = Vec::new();
        match rewrite_metric(host, host.len(), template.as_bytes(), 4, &spans, &mut out) {
            Some(_) => String::from_utf8_lossy(&out).into_owned(),
            None => template.to_string(),
        }
    }

    /// `router_validate_cluster`: a target by name.
    fn target(&self, file: &str, name: &str, at: Loc) -> Result<Dest> {
        if name == "blackhole" {
            return Ok(Dest::Blackhole);
        }
        self.clusters
            .iter()
            .position(|c| c.name == name)
            .map(Dest::Cluster)
            .ok_or_else(|| err(file, at, "unknown cluster"))
    }

    fn targets(&self, file: &str, t: &Targets) -> Result<Vec<Dest>> {
        match t {
            Targets::Blackhole => Ok(vec![Dest::Blackhole]),
            Targets::Clusters(names) => names
                .iter()
                .map(|n| self.target(file, &n.v, n.at))
                .collect(),
        }
    }

    /// `router_validate_expression`.
    fn expression(file: &str, pattern: &str, at: Loc) -> Result<(Option<String>, Matcher, usize)> {
        let (matcher, nmatch) = Matcher::compile(pattern)
            .map_err(|e| err(file, at, format!("invalid expression '{pattern}': {e}")))?;
        let pattern = (pattern != "*").then(|| pattern.to_string());
        Ok((pattern, matcher, nmatch))
    }

    fn cluster(&mut self, file: &str, c: ClusterStmt) -> Result<()> {
        // Members' addresses are checked as they are read (`cluster_host`).
        let mut members = Vec::new();
        for h in &c.hosts {
            let kind = match h.proto {
                Proto::Udp => SockKind::Datagram,
                _ => SockKind::Stream,
            };
            let a =
                address::parse(&h.addr.v, kind, self.offline).map_err(|m| err(file, h.after, m))?;
            members.push((h, a));
        }
        for p in &c.paths {
            self.validate_path(&p.v).map_err(|m| err(file, p.at, m))?;
        }
        let hashing = matches!(
            c.kind,
            ClusterType::CarbonCh | ClusterType::Fnv1aCh | ClusterType::JumpFnv1aCh
        );
        if hashing && !(1..=255).contains(&c.replication) {
            return Err(err(
                file,
                c.end,
                "replication count must be between 1 and 255",
            ));
        }
        if hashing && members.len() > CONN_DESTS_SIZE {
            return Err(err(
                file,
                c.end,
                format!(
                    "failed to add server {}:{} to ring for cluster {}: out of memory \
                     (carbon-c-relay keeps at most {CONN_DESTS_SIZE} members in a hashing cluster)",
                    members[0].1.ip.as_deref().unwrap_or("(null)"),
                    members[0].1.port,
                    c.name
                ),
            ));
        }
        let useall = c.useall && !hashing;
        let mut indices = Vec::new();
        for (h, a) in &members {
            let ip = a.ip.clone().unwrap_or_else(|| "(null)".into());
            let proto = match h.proto {
                Proto::Udp => ServerProto::Udp,
                _ => ServerProto::Tcp,
            };
            let transport = ServerTransport {
                compression: h.compression,
                ssl: h.ssl,
            };
            let kind = match h.proto {
                Proto::Udp => SockKind::Datagram,
                _ => SockKind::Stream,
            };
            let expanded: Vec<(String, Option<SocketAddr>)> = if useall && !a.addrs.is_empty() {
                a.addrs
                    .iter()
                    .map(|s| (address::ntop(s), Some(*s)))
                    .collect()
            } else {
                vec![(ip, a.addrs.first().copied())]
            };
            for (ip, addr) in expanded {
                let server = Server {
                    ip,
                    port: a.port,
                    instance: None,
                    proto,
                    syslog: h.syslog,
                    transport,
                };
                let i = self.add_server(
                    file,
                    c.end,
                    &c.name,
                    server,
                    addr,
                    kind,
                    h.instance.as_deref(),
                    matches!(c.kind, ClusterType::AnyOf | ClusterType::Failover),
                )?;
                indices.push(i);
            }
        }
        for p in &c.paths {
            let server = Server {
                ip: p.v.clone(),
                port: GRAPHITE_PORT,
                instance: None,
                proto: ServerProto::File,
                syslog: false,
                transport: ServerTransport::default(),
            };
            let i = self.add_server(
                file,
                c.end,
                &c.name,
                server,
                None,
                SockKind::Stream,
                None,
                false,
            )?;
            indices.push(i);
        }
        // router_add_cluster.
        if c.name == "blackhole" || self.clusters.iter().any(|x| x.name == c.name) {
            return Err(err(
                file,
                c.end,
                "cluster with the same name already defined",
            ));
        }
        let servers: Vec<Server> = self.entries.iter().map(|e| e.server.clone()).collect();
        let kind = match c.kind {
            ClusterType::Forward => ClusterKind::Forward,
            ClusterType::AnyOf => ClusterKind::AnyOf,
            ClusterType::Failover => ClusterKind::Failover,
            ClusterType::File => ClusterKind::File { ip: false },
            ClusterType::FileIp => ClusterKind::File { ip: true },
            ClusterType::CarbonCh | ClusterType::Fnv1aCh | ClusterType::JumpFnv1aCh => {
                let hash = match c.kind {
                    ClusterType::CarbonCh => ChHash::Carbon,
                    ClusterType::Fnv1aCh => ChHash::Fnv1a,
                    _ => ChHash::JumpFnv1a,
                };
                if indices.len() < c.replication as usize {
                    return Err(err(
                        file,
                        c.end,
                        format!(
                            "invalid cluster '{}': replication count ({}) is larger than the \
                             number of servers ({})",
                            c.name,
                            c.replication,
                            indices.len()
                        ),
                    ));
                }
                ClusterKind::Ch {
                    ring: Ring::new(hash, &indices, &servers),
                    replication: c.replication as u8,
                    dynamic: c.dynamic,
                }
            }
        };
        self.clusters.push(Cluster {
            name: c.name,
            kind,
            members: indices,
        });
        Ok(())
    }

    /// `router_add_server`: the existing server with the same address, or a new one.
    #[allow(clippy::too_many_arguments)]
    fn add_server(
        &mut self,
        file: &str,
        at: Loc,
        cluster: &str,
        server: Server,
        addr: Option<SocketAddr>,
        kind: SockKind,
        instance: Option<&str>,
        any_of: bool,
    ) -> Result<u16> {
        let new_syslog = server.syslog;
        let existing = self.entries.iter().position(|e| match (e.addr, addr) {
            (Some(l), Some(r)) => e.kind == kind && l == r,
            _ => e.server.ip == server.ip,
        });
        let i = match existing {
            Some(i) => {
                self.entries[i].refcnt += 1;
                i
            }
            None => {
                if self.entries.len() >= usize::from(u16::MAX) {
                    return Err(err(file, at, "too many servers"));
                }
                self.entries.push(Entry {
                    server,
                    refcnt: 1,
                    addr,
                    kind,
                });
                self.entries.len() - 1
            }
        };
        let e = &self.entries[i];
        let s = &e.server;
        let type_word = |syslog: bool| if syslog { "syslog" } else { "linemode" };
        if e.refcnt > 1 && new_syslog != s.syslog {
            return Err(err(
                file,
                at,
                format!(
                    "cannot set type '{}' for server {}:{}: server was previously defined \
                     with type '{}'",
                    type_word(new_syslog),
                    s.display_ip(),
                    s.port,
                    type_word(s.syslog)
                ),
            ));
        }
        if e.refcnt > 1 {
            match (&s.instance, instance) {
                (None, Some(inst)) => {
                    return Err(err(
                        file,
                        at,
                        format!(
                            "cannot set instance '{inst}' for server {}:{}: server was \
                             previously defined without instance",
                            s.display_ip(),
                            s.port
                        ),
                    ));
                }
                (Some(sinst), None) => {
                    return Err(err(
                        file,
                        at,
                        format!(
                            "cannot define server {}:{} without instance: server was \
                             previously defined with instance '{sinst}'",
                            s.display_ip(),
                            s.port
                        ),
                    ));
                }
                (Some(sinst), Some(inst)) if sinst != inst => {
                    return Err(err(
                        file,
                        at,
                        format!(
                            "cannot set instance '{inst}' for server {}:{}: server was \
                             previously defined with instance '{sinst}'",
                            s.display_ip(),
                            s.port
                        ),
                    ));
                }
                _ => {}
            }
        }
        if let Some(inst) = instance {
            self.entries[i].server.instance = Some(inst.to_string());
        }
        if any_of && self.entries[i].refcnt > 1 {
            let s = &self.entries[i].server;
            return Err(err(
                file,
                at,
                format!(
                    "cannot share server {}:{} with any_of/failover cluster '{cluster}'",
                    s.display_ip(),
                    s.port
                ),
            ));
        }
        Ok(i as u16)
    }

    /// Appends `route` (`router_add_route`), warning when an earlier `* … stop` hides it.
    fn add_route(&mut self, route: Route) {
        if let Some(hider) = self
            .routes
            .iter()
            .rev()
            .find(|r| matches!(r.matcher, Matcher::All) && r.stop)
        {
            let kind = |r: &Route| match r.dests.list.first() {
                Some(Dest::Aggregation(_)) => "aggregate",
                Some(Dest::Rewrite(_)) => "rewrite",
                _ => "match",
            };
            self.warnings.push(format!(
                "{} {} will never match due to preceding {} * ... stop",
                kind(&route),
                route.pattern.as_deref().unwrap_or("*"),
                kind(hider)
            ));
        }
        self.routes.push(route);
    }

    /// `router_add_stubroute`: a catch-all for `prefix` at the head of the routes.
    fn add_stub(&mut self, prefix: String, targets: Vec<Dest>, statistics: bool) {
        let inner = Route {
            pattern: None,
            matcher: Matcher::All,
            nmatch: 0,
            dests: self.dests(targets),
            stop: true,
            masq: None,
        };
        let dest = if statistics {
            Dest::StatStub(vec![inner])
        } else {
            Dest::AggrStub(vec![inner])
        };
        let dests = self.dests(vec![dest]);
        self.routes.insert(
            0,
            Route {
                matcher: Matcher::StartsWith(prefix.clone().into_bytes()),
                pattern: Some(prefix),
                nmatch: 0,
                dests,
                stop: true,
                masq: None,
            },
        );
    }

    fn match_stmt(&mut self, file: &str, m: MatchStmt) -> Result<()> {
        let exprs = match &m.exprs {
            None => vec![(None, Matcher::All, 0)],
            Some(list) => list
                .iter()
                .map(|e| Self::expression(file, &e.v, e.at))
                .collect::<Result<_>>()?,
        };
        let validation = match &m.validate {
            Some((e, drop)) => {
                let (pattern, matcher, nmatch) = Self::expression(file, &e.v, e.at)?;
                let dummy = self.dests(Vec::new());
                Some(Dest::Validation {
                    rule: Box::new(Route {
                        pattern,
                        matcher,
                        nmatch,
                        dests: dummy,
                        stop: false,
                        masq: None,
                    }),
                    drop: *drop,
                })
            }
            None => None,
        };
        let targets = match &m.send_to {
            Some(t) => Some(self.targets(file, t)?),
            None => None,
        };
        let stop = match &targets {
            None => false,
            Some(t) if matches!(t.first(), Some(Dest::Blackhole)) => true,
            Some(_) => m.stop,
        };
        let mut list: Vec<Dest> = validation.into_iter().collect();
        list.extend(targets.unwrap_or_default());
        let dests = self.dests(list);
        for (pattern, matcher, nmatch) in exprs {
            self.add_route(Route {
                pattern,
                matcher,
                nmatch,
                dests: dests.clone(),
                stop,
                masq: m.route_using.clone(),
            });
        }
        Ok(())
    }

    fn rewrite(&mut self, file: &str, r: RewriteStmt) -> Result<()> {
        let (pattern, matcher, nmatch) = Self::expression(file, &r.expr.v, r.expr.at)?;
        let dests = self.dests(vec![Dest::Rewrite(r.into)]);
        self.add_route(Route {
            pattern,
            matcher,
            nmatch,
            dests,
            stop: false,
            masq: None,
        });
        Ok(())
    }

    fn aggregate(&mut self, file: &str, a: AggregateStmt) -> Result<()> {
        let exprs = a
            .exprs
            .iter()
            .map(|e| Self::expression(file, &e.v, e.at))
            .collect::<Result<Vec<_>>>()?;
        let targets = match &a.send_to {
            Some(t) => Some(self.targets(file, t)?),
            None => None,
        };
        if a.every <= 0 {
            return Err(err(file, a.end, "interval must be > 0"));
        }
        if a.expire <= 0 {
            return Err(err(file, a.end, "expire must be > 0"));
        }
        if a.expire <= a.every {
            return Err(err(file, a.end, "expire must be greater than interval"));
        }
        let index = self.aggregators.len();
        let stub = targets
            .as_ref()
            .map(|_| format!("_aggregator_stub_0x{:x}0__", index + 1));
        let computes = a
            .computes
            .iter()
            .map(|c| AggregateCompute {
                kind: c.kind,
                metric: match &stub {
                    Some(s) => format!("{s}{}", c.metric),
                    None => c.metric.clone(),
                },
            })
            .collect();
        self.aggregators.push(AggregatorSpec {
            // carbon-c-relay keeps both in an `unsigned short`.
            interval: a.every as u16,
            expire: a.expire as u16,
            ts: a.ts,
            computes,
            stub: stub.clone(),
        });
        let mut list = vec![Dest::Aggregation(index)];
        list.extend(targets.clone().unwrap_or_default());
        let dests = self.dests(list);
        for (pattern, matcher, nmatch) in exprs {
            self.add_route(Route {
                pattern,
                matcher,
                nmatch,
                dests: dests.clone(),
                stop: a.stop,
                masq: None,
            });
        }
        if let (Some(stub), Some(targets)) = (stub, targets) {
            self.add_stub(stub, targets, false);
        }
        Ok(())
    }

    fn statistics(&mut self, file: &str, s: StatisticsStmt) -> Result<()> {
        let targets = match &s.send_to {
            Some(t) => Some(self.targets(file, t)?),
            None => None,
        };
        if s.deprecated {
            self.warnings.push(
                "'send statistics to ...' is deprecated and will be removed in a future \
                 version, use 'statistics send to ...' instead"
                    .into(),
            );
        } else {
            if let Some(i) = s.interval {
                self.collector.interval = i;
            }
            if let Some(p) = &s.prefix {
                self.collector.prefix = self.prefix(p);
            }
            self.collector.reset = s.reset;
        }
        if let Some(targets) = targets {
            if self.collector.stub.is_some() {
                return Err(err(
                    file,
                    s.end,
                    "duplicate 'statistics send to' not allowed, use multiple destinations \
                     instead",
                ));
            }
            let stub = "_collector_stub_0x10__".to_string();
            self.collector.stub = Some(stub.clone());
            self.collector.targets = targets.clone();
            self.add_stub(stub, targets, true);
        }
        Ok(())
    }

    fn listen(&mut self, file: &str, l: ListenStmt) -> Result<()> {
        let mut parsed = Vec::new();
        for r in &l.receptors {
            match r.proto {
                Proto::Unix => {
                    self.validate_path(&r.addr.v)
                        .map_err(|m| err(file, r.after, m))?;
                    parsed.push((ListenerProto::Unix, Some(r.addr.v.clone()), 0, Vec::new()));
                }
                Proto::Tcp | Proto::Udp => {
                    let text = if r.addr.v.bytes().all(|b| b.is_ascii_digit()) {
                        format!(":{}", r.addr.v)
                    } else {
                        r.addr.v.clone()
                    };
                    let (proto, kind) = if r.proto == Proto::Udp {
                        (ListenerProto::Udp, SockKind::Datagram)
                    } else {
                        (ListenerProto::Tcp, SockKind::Stream)
                    };
                    let a = address::parse(&text, kind, self.offline)
                        .map_err(|m| err(file, r.after, m))?;
                    parsed.push((proto, a.ip, a.port, a.addrs));
                }
            }
        }
        let wrapped = l.compression != Compression::Plain || l.ssl.is_some();
        if wrapped && parsed.iter().any(|p| p.0 == ListenerProto::Udp) {
            return Err(err(
                file,
                l.end,
                "cannot use UDP transport for compressed/encrypted stream",
            ));
        }
        for (proto, ip, port, addrs) in parsed {
            if proto != ListenerProto::Unix && addrs.is_empty() {
                return Err(err(
                    file,
                    l.end,
                    format!(
                        "invalid listener {} for port {port}",
                        ip.as_deref().unwrap_or("(null)")
                    ),
                ));
            }
            for existing in &self.listeners {
                if proto == ListenerProto::Unix {
                    if existing.proto == proto && existing.ip == ip {
                        return Err(err(
                            file,
                            l.end,
                            format!("duplicate listener {}", ip.as_deref().unwrap_or("")),
                        ));
                    }
                    continue;
                }
                if existing.proto != proto || existing.port != port {
                    continue;
                }
                for new in &addrs {
                    for old in &existing.addrs {
                        let (l_txt, r_txt) = (address::ntop(new), address::ntop(old));
                        let any = |t: &str| t == "0.0.0.0" || t == "::";
                        if new.is_ipv4() == old.is_ipv4()
                            && (any(&l_txt) || any(&r_txt) || l_txt == r_txt)
                        {
                            return Err(err(
                                file,
                                l.end,
                                format!("duplicate listener {l_txt} with {r_txt} for port {port}"),
                            ));
                        }
                    }
                }
            }
            self.listeners.push(Listener {
                proto,
                ip,
                port,
                addrs,
                compression: l.compression,
                ssl: l.ssl.clone(),
                origin: format!("{file}:{}", l.transport_at.line),
            });
        }
        Ok(())
    }
}

impl Builder {
    /// `router_validate_path` (nothing offline).
    fn validate_path(&self, path: &str) -> std::result::Result<(), String> {
        if self.offline {
            return Ok(());
        }
        validate_path(path)
    }
}

/// `router_validate_path`: the file can be opened for writing (created and removed again
/// when it did not exist; a socket in use passes).
fn validate_path(path: &str) -> std::result::Result<(), String> {
    let p = Path::new(path);
    let existed = std::fs::symlink_metadata(p).ok();
    match std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(p)
    {
        Ok(_) => {
            if existed.is_none() {
                let _ = std::fs::remove_file(p);
            }
            Ok(())
        }
        Err(e) => {
            use std::os::unix::fs::FileTypeExt;
            if existed.is_some_and(|m| m.file_type().is_socket()) {
                return Ok(());
            }
            Err(format!("failed to open file '{path}' for writing: {e}"))
        }
    }
}
