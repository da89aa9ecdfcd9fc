//! What `carbon-c-relay -t` prints for a name (`router_test`): each route that matches, what
//! its targets do with the name, and `stop`; or `nothing matched`.
//!
//! Test mode is not the data path: the name is taken as typed (no cleansing), an optimiser
//! group is always entered (routing tests its block first), `any_of` and `failover` print the
//! member for a cluster with every member up, and once an aggregation was printed the
//! clusters after it print only their names. anthracite prints the same.

use std::fmt::Write;

use crate::posix_regex::Spans;

use super::matcher::{Matcher, NO_SPANS, rewrite_metric};
use super::ring::fnv1a_32;
use super::{ClusterKind, Dest, Program, Route};

/// The line under test: its bytes (rewrites change them) and where its name ends.
struct Subject {
    bytes: Vec<u8>,
    firstspace: usize,
}

impl Subject {
    fn name(&self) -> String {
        String::from_utf8_lossy(&self.bytes[..self.firstspace]).into_owned()
    }
}

impl Program {
    /// Appends what `carbon-c-relay -t` (with `-d`: `debug`) prints for `line` to `out`.
    pub(crate) fn test_line(&self, line: &[u8], debug: bool, out: &mut String) {
        let firstspace = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
        let mut s = Subject {
            bytes: line.to_vec(),
            firstspace,
        };
        if self.test_routes(&self.routes, &mut s, debug, out) == 0 {
            let _ = writeln!(
                out,
                "nothing matched {}",
                String::from_utf8_lossy(&line[..firstspace])
            );
        }
    }

    /// `router_test_intern`: returns carbon-c-relay's `gotmatch` bits (1 matched, 2 stopped,
    /// 4 aggregated).
    fn test_routes(&self, routes: &[Route], s: &mut Subject, debug: bool, out: &mut String) -> u8 {
        let mut gotmatch = 0u8;
        let mut spans: Spans = NO_SPANS;
        for w in routes {
            if let Some(Dest::Group { routes: group, .. }) = w.dests.list.first() {
                gotmatch |= self.test_routes(group, s, debug, out);
                if gotmatch & 2 != 0 {
                    break;
                }
                continue;
            }
            if !w.matcher.matches(&s.bytes[..s.firstspace], &mut spans) {
                continue;
            }
            gotmatch = 1;
            match w.dests.list.first() {
                Some(Dest::Aggregation(_)) => out.push_str("aggregation\n"),
                Some(Dest::Rewrite(_)) => out.push_str("rewrite\n"),
                Some(Dest::AggrStub(stub)) | Some(Dest::StatStub(stub)) => {
                    let cut = w.pattern.as_deref().map_or(0, str::len).min(s.firstspace);
                    let mut inner = Subject {
                        bytes: s.bytes[cut..].to_vec(),
                        firstspace: s.firstspace - cut,
                    };
                    gotmatch |= self.test_routes(stub, &mut inner, debug, out);
                    return gotmatch;
                }
                _ => out.push_str("match\n"),
            }
            let pattern = w.pattern.as_deref().unwrap_or("");
            match &w.matcher {
                Matcher::All => {
                    let _ = writeln!(out, "    * -> {}", s.name());
                }
                Matcher::Regex(_) => {
                    let _ = writeln!(out, "    {pattern} (regex) -> {}", s.name());
                }
                m => {
                    let how = match m {
                        Matcher::Contains(_) => "strstr",
                        Matcher::StartsWith(_) => "strncmp",
                        Matcher::EndsWith(_) => "tailcmp",
                        _ => "strcmp",
                    };
                    let _ = writeln!(
                        out,
                        "    {pattern} [{how}: {}]\n    -> {}",
                        String::from_utf8_lossy(m.strmatch().unwrap_or_default()),
                        s.name()
                    );
                }
            }
            // carbon-c-relay puts a space back where the name ended, also when the line had
            // none: from here on its data part is at least that space.
            if s.firstspace == s.bytes.len() {
                s.bytes.push(b' ');
            }
            let mut stop = w.stop;
            let list = &w.dests.list;
            let mut k = 0;
            while k < list.len() {
                let d = &list[k];
                let has_next = k + 1 < list.len();
                match d {
                    Dest::Aggregation(a) => {
                        let Some(agg) = self.aggregators.get(*a) else {
                            break;
                        };
                        let stublen = if debug || !has_next {
                            0
                        } else {
                            agg.stub.as_ref().map_or(0, String::len)
                        };
                        for c in &agg.computes {
                            let mut newmetric = Vec::new();
                            let newfirstspace = if w.nmatch == 0 {
                                newmetric.extend_from_slice(c.metric.as_bytes());
                                newmetric.len()
                            } else {
                                match rewrite_metric(
                                    &s.bytes,
                                    s.firstspace,
                                    c.metric.as_bytes(),
                                    w.nmatch,
                                    &spans,
                                    &mut newmetric,
                                ) {
                                    Some(fs) => fs,
                                    None => break,
                                }
                            };
                            // Printed whole: a rewritten name with its data part.
                            let shown = String::from_utf8_lossy(
                                newmetric.get(stublen..).unwrap_or_default(),
                            )
                            .into_owned();
                            if w.nmatch > 0 {
                                let _ = writeln!(
                                    out,
                                    "    {}({}) -> {shown}",
                                    c.kind.word(),
                                    c.metric.get(stublen..).unwrap_or("")
                                );
                            } else {
                                let _ = writeln!(out, "    {} -> {shown}", c.kind.word());
                            }
                            if debug && has_next {
                                let mut inner = Subject {
                                    bytes: newmetric,
                                    firstspace: newfirstspace,
                                };
                                gotmatch |= self.test_routes(routes, &mut inner, debug, out);
                            }
                        }
                        if debug {
                            return gotmatch;
                        }
                        gotmatch |= 4;
                    }
                    Dest::Blackhole => out.push_str("    blackholed\n"),
                    Dest::Rewrite(replacement) => {
                        let mut newmetric = Vec::new();
                        if let Some(fs) = rewrite_metric(
                            &s.bytes,
                            s.firstspace,
                            replacement.as_bytes(),
                            w.nmatch,
                            &spans,
                            &mut newmetric,
                        ) {
                            s.bytes = newmetric;
                            s.firstspace = fs;
                            let _ = writeln!(out, "    into({replacement}) -> {}", s.name());
                        }
                    }
                    Dest::Cluster(c) => {
                        if let Some(cluster) = self.clusters.get(*c) {
                            self.test_cluster(cluster, w, &spans, s, debug, gotmatch, out);
                        }
                    }
                    Dest::Validation { rule, drop } => {
                        let rest = s.bytes.get(s.firstspace + 1..).unwrap_or_default();
                        let _ = writeln!(
                            out,
                            "    validate\n        {} -> {}",
                            rule.pattern.as_deref().unwrap_or("(null)"),
                            String::from_utf8_lossy(rest)
                        );
                        let mut vspans = NO_SPANS;
                        if rule.matcher.matches(rest, &mut vspans) {
                            out.push_str("        match\n");
                        } else {
                            let _ = writeln!(
                                out,
                                "        fail -> {}",
                                if *drop { "drop" } else { "log" }
                            );
                            stop |= !has_next;
                            break;
                        }
                    }
                    Dest::AggrStub(_) | Dest::StatStub(_) | Dest::Group { .. } => {
                        out.push_str("    cluster((null))\n");
                    }
                }
                k += 1;
            }
            if stop {
                out.push_str("    stop\n");
                return 3;
            }
        }
        gotmatch
    }

    #[allow(clippy::too_many_arguments)]
    fn test_cluster(
        &self,
        cluster: &super::Cluster,
        w: &Route,
        spans: &Spans,
        s: &Subject,
        debug: bool,
        gotmatch: u8,
        out: &mut String,
    ) {
        let server = |m: u16| &self.servers[usize::from(m)];
        match &cluster.kind {
            ClusterKind::Forward => {
                let _ = writeln!(out, "    forward({})", cluster.name);
                for &m in &cluster.members {
                    let _ = writeln!(out, "        {}:{}", server(m).display_ip(), server(m).port);
                }
            }
            ClusterKind::File { ip } => {
                let _ = writeln!(
                    out,
                    "    file{}({})",
                    if *ip { " ip" } else { "" },
                    cluster.name
                );
                for &m in &cluster.members {
                    let _ = writeln!(out, "        {}", server(m).display_ip());
                }
            }
            ClusterKind::Ch {
                ring, replication, ..
            } => {
                let _ = writeln!(out, "    {}_ch({})", ring.hash().word(), cluster.name);
                if gotmatch & 4 != 0 {
                    return;
                }
                let mut key = s.bytes[..s.firstspace].to_vec();
                if let Some(masq) = &w.masq {
                    let mut newmetric = Vec::new();
                    let Some(fs) = rewrite_metric(
                        &s.bytes,
                        s.firstspace,
                        masq.as_bytes(),
                        w.nmatch,
                        spans,
                        &mut newmetric,
                    ) else {
                        return;
                    };
                    let _ = writeln!(
                        out,
                        "        using({masq}) -> {}",
                        String::from_utf8_lossy(&newmetric)
                    );
                    key = newmetric[..fs].to_vec();
                }
                if debug {
                    let _ = writeln!(out, "        hash_pos({})", ring.hash_pos(&key));
                }
                let mut picked = Vec::new();
                ring.nodes(&key, usize::from(*replication), &mut picked);
                for m in picked {
                    let _ = writeln!(out, "        {}:{}", server(m).display_ip(), server(m).port);
                }
            }
            ClusterKind::AnyOf | ClusterKind::Failover => {
                let any = matches!(cluster.kind, ClusterKind::AnyOf);
                let _ = writeln!(
                    out,
                    "    {}({})",
                    if any { "any_of" } else { "failover" },
                    cluster.name
                );
                if gotmatch & 4 != 0 {
                    return;
                }
                let n = cluster.members.len().max(1) as u32;
                let pick = if any {
                    fnv1a_32(&s.bytes[..s.firstspace]) % n
                } else {
                    0
                };
                if let Some(&m) = cluster.members.get(pick as usize) {
                    let _ = writeln!(out, "        {}:{}", server(m).display_ip(), server(m).port);
                }
            }
        }
    }
}
