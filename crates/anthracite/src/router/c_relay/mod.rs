//! carbon-c-relay's routing, as its 3.7.3 source (`router.c`, `consistent-hash.c`) decides.
//!
//! A carbon-c-relay configuration is a list of *routes* tried top to bottom on every
//! (cleansed) line. A route is one expression of a `match`, `rewrite` or `aggregate`
//! statement (a statement with three expressions is three routes sharing one list of
//! targets); when its expression matches the name — the line up to its first space, or up to
//! the `;` that starts its tags — each of its targets acts in order:
//!
//! - a **cluster** receives a copy of the line as it is at that moment, on the member(s) its
//!   type picks ([`ClusterKind`]; the hashing rings are in [`ring`]);
//! - a **rewrite** replaces the matched span of the name with its replacement (`\1`, `\_1`
//!   lower case, `\^1` upper case, `\.1` dots to underscores, and their combinations), in
//!   place: every later route sees the new name, earlier copies keep the old one; the new name
//!   is not cleansed again;
//! - an **aggregation** takes the value and timestamp into its buckets under names built from
//!   its `compute … write to` templates; the targets after it belong to its output (a *stub*
//!   route at the head of the list catches the aggregator's output by a prefix and sends it
//!   there);
//! - **validation** (`validate EXPR else drop|log`) matches the text after the name; when it
//!   fails the route's targets are skipped, and a `match` without targets stops there;
//! - **blackhole** drops the line and stops.
//!
//! A route with `stop` ends the walk when it matches. A line that reaches no target is
//! *blackholed* (counted). With 50 routes or more (`-O`) carbon-c-relay's optimiser groups
//! routes whose expressions end in the same run of letters behind a substring test of that
//! run, and may move a `stop` route to the end of its group ([`optimise`]); anthracite
//! applies the same optimiser, so the same (occasionally surprising) order results.
//!
//! Expressions are POSIX extended regular expressions run by the C library
//! ([`crate::posix_regex`]); like carbon-c-relay, an expression of plain characters is
//! compared as a string instead ([`Matcher`]).
//!
//! [`Program::route`] is the data path; [`test_mode`] prints what `carbon-c-relay -t` prints
//! for a name, and [`print`] the configuration as carbon-c-relay prints it back.

use std::sync::Arc;

pub(crate) mod aggregate;
pub(crate) mod matcher;
pub(crate) mod optimise;
pub(crate) mod plan;
pub(crate) mod print;
pub(crate) mod ring;
pub(crate) mod route;
pub(crate) mod test_mode;

pub(crate) use aggregate::Aggregators;
pub(crate) use matcher::{Matcher, rewrite_metric};
pub(crate) use ring::{ChHash, Ring};
pub(crate) use route::Routed;

/// How a member is spoken to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServerProto {
    Tcp,
    Udp,
    /// A `file` cluster's path.
    File,
}

/// A member's `transport`: compression and TLS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ServerTransport {
    /// 0 plain, 1 gzip, 2 lz4, 3 snappy (carbon-c-relay's order, for printing).
    pub compression: Compression,
    pub ssl: bool,
}

/// Stream compression of a member or listener (zstd is anthracite's own).
pub(crate) use crate::protocol::compression::Compression;

/// One destination of the configuration: carbon-c-relay's `server`, shared by every cluster
/// that names the same address. Its index is the relay's destination index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Server {
    /// The host as written (brackets removed), or the address `useall` expanded to, or the
    /// file path.
    pub ip: String,
    pub port: u16,
    pub instance: Option<String>,
    pub proto: ServerProto,
    /// `type syslog` (RFC 5424 framing) rather than linemode.
    pub syslog: bool,
    pub transport: ServerTransport,
}

impl Server {
    /// carbon-c-relay's `serverip()`: an IPv6 address in brackets.
    pub(crate) fn display_ip(&self) -> String {
        if self.ip.contains(':') {
            format!("[{}]", self.ip)
        } else {
            self.ip.clone()
        }
    }
}

/// What a cluster does with a line.
#[derive(Clone, Debug)]
pub(crate) enum ClusterKind {
    /// Every member gets it.
    Forward,
    /// One member, by `fnv1a_32(name) % members`.
    AnyOf,
    /// The first member that is up (the first when none is).
    Failover,
    /// `replication` members from a consistent-hashing ring.
    Ch {
        ring: Ring,
        replication: u8,
        dynamic: bool,
    },
    /// Every member (a file) gets it; with `ip`, prefixed by the sender's address.
    File { ip: bool },
}

/// A `cluster` statement.
#[derive(Clone, Debug)]
pub(crate) struct Cluster {
    pub name: String,
    pub kind: ClusterKind,
    /// Members in configuration order, as server indices (a server may appear twice).
    pub members: Vec<u16>,
}

impl Cluster {
    /// Its type as the configuration spells it (`any_of`, `carbon_ch`, `file`).
    pub(crate) fn type_word(&self) -> String {
        match &self.kind {
            ClusterKind::Forward => "forward".into(),
            ClusterKind::AnyOf => "any_of".into(),
            ClusterKind::Failover => "failover".into(),
            ClusterKind::Ch { ring, .. } => format!("{}_ch", ring.hash().word()),
            ClusterKind::File { .. } => "file".into(),
        }
    }
}

/// A `compute` of an aggregation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ComputeKind {
    Sum,
    Count,
    Max,
    Min,
    Average,
    Median,
    Percentile(u8),
    Variance,
    Stddev,
}

impl ComputeKind {
    /// carbon-c-relay's word for it.
    pub(crate) fn word(self) -> String {
        match self {
            ComputeKind::Sum => "sum".into(),
            ComputeKind::Count => "count".into(),
            ComputeKind::Max => "max".into(),
            ComputeKind::Min => "min".into(),
            ComputeKind::Average => "average".into(),
            ComputeKind::Median => "median".into(),
            ComputeKind::Percentile(p) => format!("percentile{p}"),
            ComputeKind::Variance => "variance".into(),
            ComputeKind::Stddev => "stddev".into(),
        }
    }

    /// The percentile it computes (median: 50), for the kinds that keep values.
    pub(crate) fn percentile(self) -> Option<u8> {
        match self {
            ComputeKind::Median => Some(50),
            ComputeKind::Percentile(p) => Some(p),
            _ => None,
        }
    }
}

/// When an aggregate is stamped within its bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum TsWhen {
    Start,
    Middle,
    #[default]
    End,
}

/// One `compute … write to TEMPLATE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AggregateCompute {
    pub kind: ComputeKind,
    /// The name template, with the stub prefix in front when the aggregation has `send to`.
    pub metric: String,
}

/// An `aggregate` statement's aggregator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AggregatorSpec {
    /// Seconds per bucket (carbon-c-relay keeps it in 16 bits).
    pub interval: u16,
    /// Seconds a bucket stays open (16 bits).
    pub expire: u16,
    pub ts: TsWhen,
    pub computes: Vec<AggregateCompute>,
    /// The stub prefix its output carries when it has `send to` (`None`: its output is
    /// routed from the top like received lines).
    pub stub: Option<String>,
}

/// What a route's target is.
#[derive(Clone, Debug)]
pub(crate) enum Dest {
    Blackhole,
    /// A cluster, by index.
    Cluster(usize),
    /// `validate EXPR else drop|log`.
    Validation {
        rule: Box<Route>,
        drop: bool,
    },
    /// `rewrite … into REPLACEMENT`.
    Rewrite(String),
    /// An aggregator, by index.
    Aggregation(usize),
    /// The catch-all routes behind an aggregation's stub.
    AggrStub(Vec<Route>),
    /// The catch-all routes behind the statistics' stub.
    StatStub(Vec<Route>),
    /// An optimiser group: routes tried only on names containing the block (stored
    /// reversed, as carbon-c-relay stores it).
    Group {
        reversed: String,
        routes: Vec<Route>,
    },
}

/// The targets of a route, shared by the routes of one statement (printing tells
/// statements apart by it, as carbon-c-relay compares the list's address).
#[derive(Clone, Debug)]
pub(crate) struct Dests {
    pub list: Vec<Dest>,
}

/// One route.
#[derive(Clone, Debug)]
pub(crate) struct Route {
    /// The expression as written (`None`: `*`).
    pub pattern: Option<String>,
    pub matcher: Matcher,
    /// `regmatch_t` slots carbon-c-relay asks for: groups + 1, or 0 without groups.
    pub nmatch: usize,
    pub dests: Arc<Dests>,
    pub stop: bool,
    /// `route using TEMPLATE`.
    pub masq: Option<String>,
}

/// A whole routing configuration.
#[derive(Clone, Debug, Default)]
pub(crate) struct Program {
    pub servers: Vec<Server>,
    pub clusters: Vec<Cluster>,
    pub routes: Vec<Route>,
    pub aggregators: Vec<AggregatorSpec>,
    /// How received lines are cleansed before the routes see them (`-c`).
    pub cleansing: crate::protocol::c_relay::Cleansing,
}

impl Program {
    /// The aggregation a route's targets start with, if any.
    pub(crate) fn aggregation_of(route: &Route) -> Option<usize> {
        match route.dests.list.first() {
            Some(Dest::Aggregation(a)) => Some(*a),
            _ => None,
        }
    }
}
