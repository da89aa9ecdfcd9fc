//! The clusters and routes printed back as carbon-c-relay prints them
//! (`router_printconfig`), for `anthracite route --carbon-c-relay-config`.

use std::fmt::Write;

use super::{ClusterKind, Dest, Program, Route, Server, ServerProto, TsWhen};

/// What to print (carbon-c-relay's `PMODE_*`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PrintMode {
    /// Aggregations (omitted when there are more than ten and no `-d`).
    pub aggregations: bool,
    /// The hash rings (`-d`).
    pub hash: bool,
    /// The stub routes of aggregations and statistics (`-d`).
    pub stubs: bool,
}

/// `router_quoteident`: the identifier, in double quotes when the scanner would not read it
/// back unquoted.
pub(crate) fn quoteident(ident: &str) -> String {
    const ODD: &[u8] = b"[](){}|\\^?*$%<>:/,._+-";
    let b = ident.as_bytes();
    let needs = b.iter().enumerate().any(|(i, &c)| {
        let escaped_space = i > 1 && c == b' ' && b[i - 1] == b'\\';
        !(c.is_ascii_alphanumeric() || ODD.contains(&c) || escaped_space)
    });
    if needs {
        format!("\"{ident}\"")
    } else {
        ident.to_string()
    }
}

/// ` proto udp`, ` type syslog`, ` transport …` of a member.
fn member_options(s: &Server) -> String {
    let mut o = String::new();
    if s.proto == ServerProto::Udp {
        o.push_str(" proto udp");
    }
    if s.syslog {
        o.push_str(" type syslog");
    }
    let plain = s.transport.compression == super::Compression::Plain;
    if !plain || s.transport.ssl {
        o.push_str(" transport ");
        if !plain {
            o.push_str(s.transport.compression.word());
        }
        if s.transport.ssl {
            o.push_str(" ssl");
        }
    }
    o
}

/// The stub prefix an aggregation's compute names carry (to strip when printing).
fn stub_len(program: &Program, aggregator: usize, mode: PrintMode, has_send_to: bool) -> usize {
    if mode.stubs || !has_send_to {
        return 0;
    }
    program
        .aggregators
        .get(aggregator)
        .and_then(|a| a.stub.as_ref())
        .map_or(0, String::len)
}

impl Program {
    /// The clusters, a blank line, then the routes.
    pub(crate) fn print(&self, mode: PrintMode, out: &mut String) {
        for c in &self.clusters {
            let _ = writeln!(out, "cluster {}", quoteident(&c.name));
            let servers = c.members.iter().map(|&m| &self.servers[usize::from(m)]);
            match &c.kind {
                ClusterKind::Forward | ClusterKind::AnyOf | ClusterKind::Failover => {
                    let word = match c.kind {
                        ClusterKind::Forward => "forward",
                        ClusterKind::AnyOf => "any_of",
                        _ => "failover",
                    };
                    let _ = writeln!(out, "    {word}");
                    for s in servers {
                        let _ = writeln!(
                            out,
                            "        {}:{}{}",
                            s.display_ip(),
                            s.port,
                            member_options(s)
                        );
                    }
                }
                ClusterKind::File { ip } => {
                    let _ = writeln!(out, "    file{}", if *ip { " ip" } else { "" });
                    for s in servers {
                        let _ = writeln!(out, "        {}", quoteident(&s.display_ip()));
                    }
                }
                ClusterKind::Ch {
                    ring,
                    replication,
                    dynamic,
                } => {
                    let _ = writeln!(
                        out,
                        "    {}_ch replication {}{}",
                        ring.hash().word(),
                        replication,
                        if *dynamic { " dynamic" } else { "" }
                    );
                    for s in servers {
                        let _ = writeln!(
                            out,
                            "        {}:{}{}{}{}",
                            s.display_ip(),
                            s.port,
                            if s.instance.is_some() { "=" } else { "" },
                            s.instance.as_deref().unwrap_or(""),
                            member_options(s)
                        );
                    }
                }
            }
            out.push_str("    ;\n");
            if mode.hash
                && let ClusterKind::Ch { ring, .. } = &c.kind
            {
                let _ = writeln!(out, "# hash ring for {} follows", c.name);
                ring.print(&self.servers, out);
            }
        }
        out.push('\n');
        self.print_routes(&self.routes, mode, out);
    }

    fn print_routes(&self, routes: &[Route], mode: PrintMode, out: &mut String) {
        let mut i = 0;
        while i < routes.len() {
            let r = &routes[i];
            match r.dests.list.first() {
                Some(Dest::Aggregation(a)) => {
                    // Consecutive routes of one aggregation print as one statement.
                    let mut j = i + 1;
                    while j < routes.len() && Program::aggregation_of(&routes[j]) == Some(*a) {
                        j += 1;
                    }
                    if mode.aggregations {
                        self.print_aggregate(&routes[i..j], *a, mode, out);
                    }
                    i = j;
                    continue;
                }
                Some(Dest::Rewrite(replacement)) => {
                    let _ = writeln!(
                        out,
                        "rewrite {}\n    into {}\n    ;",
                        quoteident(r.pattern.as_deref().unwrap_or("*")),
                        quoteident(replacement)
                    );
                }
                Some(Dest::Group { reversed, routes }) => {
                    let name: String = reversed.chars().rev().take(63).collect();
                    let _ = writeln!(
                        out,
                        "# common pattern group '{name}' contains {} aggregations/matches",
                        routes.len()
                    );
                    if mode.aggregations {
                        // carbon-c-relay prints a group as a configuration of its own: an
                        // empty cluster list, then its routes.
                        out.push('\n');
                        self.print_routes(routes, mode, out);
                        let _ = writeln!(out, "# end of group '{name}'");
                    }
                }
                Some(Dest::AggrStub(stub)) | Some(Dest::StatStub(stub)) => {
                    if mode.stubs {
                        out.push_str("# stub match for aggregate/statistics rule with send to\n");
                        let _ = write!(
                            out,
                            "match ^{}\n    send to",
                            quoteident(r.pattern.as_deref().unwrap_or(""))
                        );
                        let targets = stub
                            .first()
                            .map(|s| s.dests.list.as_slice())
                            .unwrap_or_default();
                        self.print_targets(targets, out);
                        let _ = write!(out, "{}\n    ;\n", if r.stop { "\n    stop" } else { "" });
                    }
                }
                _ => {
                    let mut j = i + 1;
                    while j < routes.len() && std::sync::Arc::ptr_eq(&routes[j].dests, &r.dests) {
                        j += 1;
                    }
                    let pattern = |r: &Route| match &r.pattern {
                        None => "*".to_string(),
                        Some(p) => quoteident(p),
                    };
                    if j == i + 1 {
                        let _ = writeln!(out, "match {}", pattern(r));
                    } else {
                        out.push_str("match\n");
                        for x in &routes[i..j] {
                            let _ = writeln!(out, "        {}", pattern(x));
                        }
                    }
                    let last = &routes[j - 1];
                    let mut list = r.dests.list.as_slice();
                    if let Some(Dest::Validation { rule, drop }) = list.first() {
                        let _ = writeln!(
                            out,
                            "    validate {} else {}",
                            quoteident(rule.pattern.as_deref().unwrap_or("*")),
                            if *drop { "drop" } else { "log" }
                        );
                        list = &list[1..];
                    }
                    if let Some(masq) = &last.masq {
                        let _ = writeln!(out, "    route using {}", quoteident(masq));
                    }
                    if list.is_empty() {
                        out.push_str("    ;\n");
                    } else {
                        out.push_str("    send to");
                        self.print_targets(list, out);
                        let _ = write!(out, "\n{}    ;\n", if r.stop { "    stop\n" } else { "" });
                    }
                    i = j;
                    continue;
                }
            }
            i += 1;
        }
    }

    /// ` NAME`, or one name per line when there are several.
    fn print_targets(&self, targets: &[Dest], out: &mut String) {
        let name = |d: &Dest| match d {
            Dest::Cluster(c) => self
                .clusters
                .get(*c)
                .map_or(String::new(), |c| quoteident(&c.name)),
            Dest::Blackhole => "blackhole".into(),
            _ => String::new(),
        };
        if targets.len() == 1 {
            let _ = write!(out, " {}", name(&targets[0]));
        } else {
            for d in targets {
                let _ = write!(out, "\n        {}", name(d));
            }
        }
    }

    fn print_aggregate(&self, routes: &[Route], a: usize, mode: PrintMode, out: &mut String) {
        let Some(agg) = self.aggregators.get(a) else {
            return;
        };
        let first = &routes[0];
        let targets = &first.dests.list[1..];
        let stub = stub_len(self, a, mode, !targets.is_empty());
        let pattern = |r: &Route| quoteident(r.pattern.as_deref().unwrap_or("*"));
        if routes.len() == 1 {
            let _ = writeln!(out, "aggregate {}", pattern(first));
        } else {
            out.push_str("aggregate\n");
            for r in routes {
                let _ = writeln!(out, "        {}", pattern(r));
            }
        }
        let _ = write!(
            out,
            "    every {} seconds\n    expire after {} seconds\n    timestamp at {} of bucket\n",
            agg.interval,
            agg.expire,
            match agg.ts {
                TsWhen::Start => "start",
                TsWhen::Middle => "middle",
                TsWhen::End => "end",
            }
        );
        for c in &agg.computes {
            let _ = write!(
                out,
                "    compute {} write to\n        {}\n",
                c.kind.word(),
                quoteident(c.metric.get(stub..).unwrap_or(""))
            );
        }
        if !mode.stubs && !targets.is_empty() {
            out.push_str("    send to");
            self.print_targets(targets, out);
            out.push('\n');
        }
        let last = &routes[routes.len() - 1];
        let _ = writeln!(out, "{}    ;", if last.stop { "    stop\n" } else { "" });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_when_the_scanner_needs_it() {
        assert_eq!(quoteident("foo.bar"), "foo.bar");
        assert_eq!(quoteident("^a\\ b"), "^a\\ b");
        assert_eq!(quoteident("a b"), "\"a b\"");
        assert_eq!(quoteident("\\ b"), "\"\\ b\"");
        assert_eq!(quoteident("x=y"), "\"x=y\"");
    }
}
