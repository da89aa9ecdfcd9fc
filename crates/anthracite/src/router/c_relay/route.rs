//! The walk of the routes for one line (`router_route_intern`).

use crate::posix_regex::Spans;

use super::matcher::{NO_SPANS, rewrite_metric};
use super::ring::fnv1a_32;
use super::{ClusterKind, Dest, Program, Route};

/// What the routes made of one line: copies of the line (as it was when each was taken) for
/// servers, datapoints for aggregators, and whether any target took it.
#[derive(Debug, Default)]
pub(crate) struct Routed {
    /// The bytes of every line variant, back to back.
    pub lines: Vec<u8>,
    /// Each variant's range in `lines`, and the length of its name.
    pub variants: Vec<(usize, usize, usize)>,
    /// `(variant, server)`, in the order carbon-c-relay queues them.
    pub sends: Vec<(u32, u16)>,
    /// How each send's server was picked (beside [`sends`](Self::sends)), so that a cached
    /// route picks again when members go down or come back.
    pub picks: Vec<Pick>,
    /// Datapoints for aggregators.
    pub aggregates: Vec<AggregateHit>,
    /// The bytes of the aggregates' names, back to back.
    pub names: Vec<u8>,
    /// No target took the line (carbon-c-relay's `metricsBlackholed`).
    pub blackholed: bool,
    /// Validations that failed with `else log` (carbon-c-relay logs the line).
    pub validation_logs: u32,
    /// A `validate` read the text after the name: the outcome is not the name's alone.
    pub read_rest: bool,
    /// A rewrite did not fit carbon-c-relay's buffer: the outcome depends on the line's length.
    pub overflowed: bool,
    /// A `file ip` cluster took the line with the sender's address before it: the outcome
    /// is not the name's alone.
    pub read_client: bool,
    /// The line being routed and the rewrites' scratch, kept between lines so that routing
    /// one allocates nothing once they have grown.
    line: Vec<u8>,
    scratch: Vec<u8>,
    /// A consistent-hash cluster's members for the line, likewise kept.
    picked: Vec<u16>,
    /// A stub's line (the line without the stub's prefix) and its scratch, likewise kept.
    stub: (Vec<u8>, Vec<u8>),
    /// The variant that is the routed line itself, unchanged ([`crate::router::c_relay::plan`]
    /// replays set it instead of copying the line); its range in `lines` is empty.
    pub input_variant: Option<u32>,
}

/// How a send's server was picked from its cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pick {
    /// This member, up or down (`forward`, `file`, a ring without `dynamic`).
    Fixed { server: u16 },
    /// `any_of` over the cluster's members, by this hash of the name.
    AnyOf { cluster: u16, hash: u32 },
    /// `failover`: the cluster's first member that is up.
    Failover { cluster: u16 },
    /// A `dynamic` ring's member, handed on by this hash of the name when it is down.
    Dynamic {
        cluster: u16,
        hash: u32,
        member: u16,
    },
}

/// One datapoint for one `compute` of an aggregator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct AggregateHit {
    pub aggregator: u32,
    pub compute: u32,
    /// The output name's range in [`Routed::names`].
    pub name: (usize, usize),
    /// `atof` of the value text.
    pub value: f64,
    /// `atoll` of the timestamp text.
    pub epoch: i64,
}

impl Routed {
    /// Empties it for the next line, keeping its buffers.
    pub(crate) fn clear(&mut self) {
        self.lines.clear();
        self.variants.clear();
        self.sends.clear();
        self.picks.clear();
        self.aggregates.clear();
        self.names.clear();
        self.blackholed = false;
        self.validation_logs = 0;
        self.read_rest = false;
        self.overflowed = false;
        self.read_client = false;
        self.input_variant = None;
    }

    /// Queues variant `v` on `server`, picked as `pick` says.
    pub(crate) fn send(&mut self, v: u32, server: u16, pick: Pick) {
        self.sends.push((v, server));
        self.picks.push(pick);
    }

    /// The bytes of variant `v` and the length of its name.
    pub(crate) fn variant(&self, v: u32) -> (&[u8], usize) {
        let (s, e, name) = self.variants[v as usize];
        (&self.lines[s..e], name)
    }

    /// The bytes of variant `v` of the routed line `line`.
    pub(crate) fn variant_of<'a>(&'a self, v: u32, line: &'a [u8]) -> &'a [u8] {
        if self.input_variant == Some(v) {
            line
        } else {
            self.variant(v).0
        }
    }

    /// The name of an aggregate datapoint.
    pub(crate) fn aggregate_name(&self, hit: &AggregateHit) -> &[u8] {
        &self.names[hit.name.0..hit.name.1]
    }
}

/// The line being routed: its current bytes (rewrites change them) and where its name ends.
struct Line<'a> {
    bytes: Vec<u8>,
    firstspace: usize,
    /// The variant holding `bytes` as they are now, once one was taken.
    variant: Option<u32>,
    srcaddr: &'a [u8],
    /// Scratch for rewrites.
    scratch: Vec<u8>,
}

impl Line<'_> {
    fn name(&self) -> &[u8] {
        &self.bytes[..self.firstspace]
    }

    /// The variant of the line as it is now.
    fn variant(&mut self, out: &mut Routed) -> u32 {
        if let Some(v) = self.variant {
            return v;
        }
        let start = out.lines.len();
        out.lines.extend_from_slice(&self.bytes);
        out.variants.push((start, out.lines.len(), self.firstspace));
        let v = (out.variants.len() - 1) as u32;
        self.variant = Some(v);
        v
    }

    /// A one-off variant: `prefix` and a space before the line (a `file ip` cluster).
    fn prefixed(&self, prefix: &[u8], out: &mut Routed) -> u32 {
        let start = out.lines.len();
        out.lines.extend_from_slice(prefix);
        out.lines.push(b' ');
        out.lines.extend_from_slice(&self.bytes);
        out.variants
            .push((start, out.lines.len(), prefix.len() + 1 + self.firstspace));
        (out.variants.len() - 1) as u32
    }
}

/// What the walk needs besides the routes.
pub(crate) struct Env<'a> {
    /// True when a server is failing (a `failover` cluster skips it).
    pub failed: &'a dyn Fn(u16) -> bool,
}

impl Program {
    /// Routes one cleansed line (`line[..firstspace]` the name, the rest after it, no
    /// newline) as carbon-c-relay's `router_route` does; `srcaddr` is the sender's address
    /// (for `file ip` clusters). The result replaces `out`'s contents.
    pub(crate) fn route(
        &self,
        line: &[u8],
        firstspace: usize,
        srcaddr: &[u8],
        env: &Env<'_>,
        out: &mut Routed,
    ) {
        out.clear();
        let mut bytes = std::mem::take(&mut out.line);
        bytes.clear();
        bytes.extend_from_slice(line);
        let mut l = Line {
            bytes,
            firstspace: firstspace.min(line.len()),
            variant: None,
            srcaddr,
            scratch: std::mem::take(&mut out.scratch),
        };
        let mut blackholed = false;
        self.walk(&self.routes, &mut l, env, out, &mut blackholed);
        out.blackholed = blackholed;
        out.line = l.bytes;
        out.scratch = l.scratch;
    }

    /// `router_route_intern` over `routes`: returns whether a route stopped the walk.
    fn walk(
        &self,
        routes: &[Route],
        l: &mut Line<'_>,
        env: &Env<'_>,
        out: &mut Routed,
        blackholed: &mut bool,
    ) -> bool {
        let mut stop = false;
        let mut wassent = false;
        let mut spans: Spans = NO_SPANS;
        for w in routes {
            if let Some(Dest::Group { reversed, routes }) = w.dests.list.first() {
                let block: Vec<u8> = reversed.bytes().rev().collect();
                if memchr::memmem::find(l.name(), &block).is_some() {
                    stop = self.walk(routes, l, env, out, blackholed);
                }
            } else if w.matcher.matches(l.name(), &mut spans) {
                stop = w.stop;
                for d in &w.dests.list {
                    match d {
                        Dest::Blackhole => *blackholed = true,
                        Dest::Cluster(c) => {
                            self.send_to_cluster(*c, w, &spans, l, env, out);
                            wassent = true;
                        }
                        Dest::Aggregation(a) => {
                            self.aggregate(*a, w, &spans, l, out);
                            wassent = true;
                            // The targets after it are the aggregation's, for its output.
                            break;
                        }
                        Dest::Rewrite(replacement) => {
                            let mut scratch = std::mem::take(&mut l.scratch);
                            if let Some(fs) = rewrite_metric(
                                &l.bytes,
                                l.firstspace,
                                replacement.as_bytes(),
                                w.nmatch,
                                &spans,
                                &mut scratch,
                            ) {
                                std::mem::swap(&mut l.bytes, &mut scratch);
                                l.firstspace = fs;
                                l.variant = None;
                            } else {
                                out.overflowed = true;
                            }
                            l.scratch = scratch;
                        }
                        Dest::AggrStub(stub) | Dest::StatStub(stub) => {
                            let prefix = w.pattern.as_deref().map_or(0, str::len);
                            self.route_stub(stub, prefix, l, env, out, blackholed);
                            if !*blackholed {
                                wassent = true;
                            }
                        }
                        Dest::Validation { rule, drop } => {
                            out.read_rest = true;
                            let rest = l.bytes.get(l.firstspace + 1..).unwrap_or_default();
                            let mut vspans = NO_SPANS;
                            if rule.matcher.matches(rest, &mut vspans) {
                                continue;
                            }
                            if !*drop {
                                out.validation_logs += 1;
                                wassent = true;
                            }
                            // A validation without targets stops the walk.
                            stop |= w.dests.list.len() == 1;
                            break;
                        }
                        Dest::Group { .. } => {}
                    }
                }
            }
            if stop {
                break;
            }
        }
        if !wassent {
            *blackholed = true;
        }
        stop
    }

    /// A stub: the line without the stub's prefix, through the stub's routes.
    fn route_stub(
        &self,
        stub: &[Route],
        prefix: usize,
        l: &mut Line<'_>,
        env: &Env<'_>,
        out: &mut Routed,
        blackholed: &mut bool,
    ) {
        let cut = prefix.min(l.firstspace);
        let (mut bytes, scratch) = std::mem::take(&mut out.stub);
        bytes.clear();
        bytes.extend_from_slice(&l.bytes[cut..]);
        let mut inner = Line {
            bytes,
            firstspace: l.firstspace - cut,
            variant: None,
            srcaddr: l.srcaddr,
            scratch,
        };
        self.walk(stub, &mut inner, env, out, blackholed);
        out.stub = (inner.bytes, inner.scratch);
    }

    fn send_to_cluster(
        &self,
        c: usize,
        w: &Route,
        spans: &Spans,
        l: &mut Line<'_>,
        env: &Env<'_>,
        out: &mut Routed,
    ) {
        let Some(cluster) = self.clusters.get(c) else {
            return;
        };
        let cluster_id = c as u16;
        match &cluster.kind {
            ClusterKind::File { ip: true } => {
                out.read_client = true;
                let v = l.prefixed(l.srcaddr, out);
                for &m in &cluster.members {
                    out.send(v, m, Pick::Fixed { server: m });
                }
            }
            ClusterKind::Forward | ClusterKind::File { ip: false } => {
                let v = l.variant(out);
                for &m in &cluster.members {
                    out.send(v, m, Pick::Fixed { server: m });
                }
            }
            ClusterKind::AnyOf => {
                let pick = Pick::AnyOf {
                    cluster: cluster_id,
                    hash: fnv1a_32(l.name()),
                };
                if let Some(m) = self.pick(pick, env) {
                    let v = l.variant(out);
                    out.send(v, m, pick);
                }
            }
            ClusterKind::Failover => {
                let pick = Pick::Failover {
                    cluster: cluster_id,
                };
                if let Some(m) = self.pick(pick, env) {
                    let v = l.variant(out);
                    out.send(v, m, pick);
                }
            }
            ClusterKind::Ch {
                ring,
                replication,
                dynamic,
            } => {
                let mut picked = std::mem::take(&mut out.picked);
                picked.clear();
                match &w.masq {
                    Some(masq) => {
                        let mut key = std::mem::take(&mut l.scratch);
                        let fs = rewrite_metric(
                            &l.bytes,
                            l.firstspace,
                            masq.as_bytes(),
                            w.nmatch,
                            spans,
                            &mut key,
                        );
                        if let Some(fs) = fs {
                            ring.nodes(&key[..fs], usize::from(*replication), &mut picked);
                        }
                        l.scratch = key;
                        if fs.is_none() {
                            // carbon-c-relay logs and sends nothing to this cluster.
                            out.overflowed = true;
                            out.picked = picked;
                            return;
                        }
                    }
                    None => ring.nodes(l.name(), usize::from(*replication), &mut picked),
                }
                let v = l.variant(out);
                let hash = if *dynamic { fnv1a_32(l.name()) } else { 0 };
                for &member in &picked {
                    let pick = if *dynamic {
                        Pick::Dynamic {
                            cluster: cluster_id,
                            hash,
                            member,
                        }
                    } else {
                        Pick::Fixed { server: member }
                    };
                    if let Some(m) = self.pick(pick, env) {
                        out.send(v, m, pick);
                    }
                }
                out.picked = picked;
            }
        }
    }

    /// The server a send picked as `pick` goes to now.
    pub(crate) fn pick(&self, pick: Pick, env: &Env<'_>) -> Option<u16> {
        let members = |c: u16| {
            self.clusters
                .get(usize::from(c))
                .map_or(&[][..], |c| c.members.as_slice())
        };
        match pick {
            Pick::Fixed { server } => Some(server),
            Pick::AnyOf { cluster, hash } => any_of(members(cluster), hash, env),
            Pick::Failover { cluster } => {
                let members = members(cluster);
                members
                    .iter()
                    .copied()
                    .find(|&m| !(env.failed)(m))
                    .or_else(|| members.first().copied())
            }
            // `dynamic`: a member that is down hands its new lines to one that is up, by
            // the name's hash, as for `any_of` (carbon-c-relay queues them at the down
            // member and moves that queue on; what it already held moves as there:
            // `relay::c_relay_hand_over`).
            Pick::Dynamic {
                cluster,
                hash,
                member,
            } if (env.failed)(member) => {
                Some(any_of(members(cluster), hash, env).unwrap_or(member))
            }
            Pick::Dynamic { member, .. } => Some(member),
        }
    }

    /// `aggregator_putmetric`: the datapoint under each compute's name.
    fn aggregate(&self, a: usize, w: &Route, spans: &Spans, l: &mut Line<'_>, out: &mut Routed) {
        let Some(agg) = self.aggregators.get(a) else {
            return;
        };
        let Some((value, epoch)) = value_and_epoch(&l.bytes, l.firstspace) else {
            return;
        };
        let mut scratch = std::mem::take(&mut l.scratch);
        for (i, compute) in agg.computes.iter().enumerate() {
            let start = out.names.len();
            if w.nmatch == 0 {
                out.names.extend_from_slice(compute.metric.as_bytes());
            } else {
                match rewrite_metric(
                    &l.bytes,
                    l.firstspace,
                    compute.metric.as_bytes(),
                    w.nmatch,
                    spans,
                    &mut scratch,
                ) {
                    Some(fs) => out.names.extend_from_slice(&scratch[..fs]),
                    None => {
                        out.overflowed = true;
                        continue;
                    }
                }
            }
            out.aggregates.push(AggregateHit {
                aggregator: a as u32,
                compute: i as u32,
                name: (start, out.names.len()),
                value,
                epoch,
            });
        }
        l.scratch = scratch;
    }
}

/// An aggregated datapoint's value and timestamp, read from the text after the name of
/// `line` as carbon-c-relay reads them (`atof`, `atoll`); `None` without a space after the
/// value (carbon-c-relay then does not aggregate the line).
pub(crate) fn value_and_epoch(line: &[u8], firstspace: usize) -> Option<(f64, i64)> {
    let rest = line.get(firstspace + 1..).unwrap_or_default();
    let space = rest.iter().position(|&b| b == b' ')?;
    Some((atof(rest), atoll(&rest[space + 1..])))
}

/// An `any_of` cluster's member for a name hashing to `hash`: `members[hash % count]`, as
/// carbon-c-relay picks it. When that member is down, anthracite picks among the members
/// that are up (`hash % up`-th of them), where carbon-c-relay queues the line at the down
/// member and later moves its queue to the others in random order: the same lines reach
/// the members that are up, on a member that stays the same for a name. What was queued
/// for the member before it went down moves as in carbon-c-relay
/// (`relay::c_relay_hand_over`).
fn any_of(members: &[u16], hash: u32, env: &Env<'_>) -> Option<u16> {
    let n = u32::try_from(members.len()).ok().filter(|&n| n > 0)?;
    let first = members[(hash % n) as usize];
    if !(env.failed)(first) {
        return Some(first);
    }
    let up = members.iter().filter(|&&m| !(env.failed)(m)).count() as u32;
    if up == 0 {
        return Some(first);
    }
    members
        .iter()
        .copied()
        .filter(|&m| !(env.failed)(m))
        .nth((hash % up) as usize)
}

/// C's `atof` (`strtod`): the longest prefix that is a number, after leading white space;
/// 0 when there is none.
pub(crate) fn atof(text: &[u8]) -> f64 {
    let t = skip_c_space(text);
    let mut end = 0;
    let b = |i: usize| t.get(i).copied().unwrap_or(0);
    if b(end) == b'+' || b(end) == b'-' {
        end += 1;
    }
    // inf, infinity, nan (case-insensitive), as strtod reads them.
    let word = |w: &str| {
        t.len() >= end + w.len() && t[end..end + w.len()].eq_ignore_ascii_case(w.as_bytes())
    };
    if word("infinity") || word("inf") || word("nan") {
        let neg = t.first() == Some(&b'-');
        if word("nan") {
            return f64::NAN;
        }
        return if neg {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        };
    }
    if b(end) == b'0' && (b(end + 1) == b'x' || b(end + 1) == b'X') {
        return hex_float(t);
    }
    let digits_start = end;
    while b(end).is_ascii_digit() {
        end += 1;
    }
    let mut mantissa = end > digits_start;
    if b(end) == b'.' {
        end += 1;
        let frac = end;
        while b(end).is_ascii_digit() {
            end += 1;
        }
        mantissa |= end > frac;
    }
    if !mantissa {
        return 0.0;
    }
    if b(end) == b'e' || b(end) == b'E' {
        let mut e = end + 1;
        if b(e) == b'+' || b(e) == b'-' {
            e += 1;
        }
        if b(e).is_ascii_digit() {
            while b(e).is_ascii_digit() {
                e += 1;
            }
            end = e;
        }
    }
    std::str::from_utf8(&t[..end])
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// `strtod` of a hexadecimal float (`0x1.8p3`), which C accepts.
fn hex_float(t: &[u8]) -> f64 {
    let (neg, mut i) = match t.first() {
        Some(b'-') => (true, 1),
        Some(b'+') => (false, 1),
        _ => (false, 0),
    };
    i += 2;
    let mut mantissa = 0f64;
    let mut any = false;
    let mut scale = 0i32;
    while let Some(d) = t.get(i).and_then(|&c| char::from(c).to_digit(16)) {
        mantissa = mantissa * 16.0 + f64::from(d);
        any = true;
        i += 1;
    }
    if t.get(i) == Some(&b'.') {
        i += 1;
        while let Some(d) = t.get(i).and_then(|&c| char::from(c).to_digit(16)) {
            mantissa = mantissa * 16.0 + f64::from(d);
            scale -= 4;
            any = true;
            i += 1;
        }
    }
    if !any {
        return 0.0;
    }
    if matches!(t.get(i), Some(b'p' | b'P')) {
        let mut j = i + 1;
        let eneg = match t.get(j) {
            Some(b'-') => {
                j += 1;
                true
            }
            Some(b'+') => {
                j += 1;
                false
            }
            _ => false,
        };
        let mut e = 0i32;
        let mut digits = false;
        while let Some(&c) = t.get(j).filter(|c| c.is_ascii_digit()) {
            e = e.saturating_mul(10).saturating_add(i32::from(c - b'0'));
            digits = true;
            j += 1;
        }
        if digits {
            scale = scale.saturating_add(if eneg { -e } else { e });
        }
    }
    let v = mantissa * 2f64.powi(scale);
    if neg { -v } else { v }
}

/// C's `atoll`: optional white space and sign, then digits (saturating, as `strtoll`).
pub(crate) fn atoll(text: &[u8]) -> i64 {
    let t = skip_c_space(text);
    let (neg, digits) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let mut v: i64 = 0;
    for &d in digits.iter().take_while(|b| b.is_ascii_digit()) {
        v = if neg {
            v.saturating_mul(10).saturating_sub(i64::from(d - b'0'))
        } else {
            v.saturating_mul(10).saturating_add(i64::from(d - b'0'))
        };
    }
    v
}

fn skip_c_space(t: &[u8]) -> &[u8] {
    let n = t
        .iter()
        .take_while(|&&b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c))
        .count();
    &t[n..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atof_and_atoll_read_prefixes_like_c() {
        assert_eq!(atof(b"1.5 123"), 1.5);
        assert_eq!(atof(b"  -2e3x"), -2000.0);
        assert_eq!(atof(b"abc"), 0.0);
        assert_eq!(atof(b"1e"), 1.0);
        assert_eq!(atof(b".5"), 0.5);
        assert_eq!(atof(b"0x10"), 16.0);
        assert!(atof(b"nan").is_nan());
        assert_eq!(atoll(b"123abc"), 123);
        assert_eq!(atoll(b"-7"), -7);
        assert_eq!(atoll(b"99999999999999999999"), i64::MAX);
    }
}
