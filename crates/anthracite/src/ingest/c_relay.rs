//! Lines on a carbon-c-relay configuration: cleansed as carbon-c-relay 3.7.3 cleanses them
//! ([`crate::protocol::c_relay`]), routed as lines (a rewrite changes the line that later
//! routes see), and queued as verbatim lines ([`crate::batch::VERBATIM`]), so each
//! destination receives the text carbon-c-relay would send it, value and timestamp as
//! received.

use std::io::Write as _;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::batch::VERBATIM;
use crate::name_cache::Lookup;
use crate::protocol::DropReason;
use crate::router::Strategy;
use crate::router::c_relay::plan;
use crate::router::c_relay::route::AggregateHit;
use crate::router::c_relay::route::Env;
use crate::router::c_relay::{Aggregators, ClusterKind, Program, Routed};

use super::{Ingestor, Pushed, Routing};

/// The program of a carbon-c-relay generation and the scratch space of its walk.
#[derive(Debug)]
pub(super) struct CRelayLines {
    program: Arc<Program>,
    cleansed: Vec<u8>,
    routed: Routed,
    /// A name's plan, read from or written to the generation's plan cache.
    plan: Vec<u8>,
    /// The aggregations' state, and the datapoints for it since it was last fed (fed once
    /// per read, under one lock).
    aggregates: Arc<Mutex<Aggregators>>,
    hits: Vec<AggregateHit>,
    names: Vec<u8>,
    /// The program has a `file ip` cluster: its lines need the client's address.
    wants_client: bool,
    /// The client's address as carbon-c-relay prints it (`inet_ntop`, `(unknown)` for a Unix
    /// socket), for `file ip` clusters; empty when the program has none.
    srcaddr: Vec<u8>,
}

impl CRelayLines {
    /// The line router of `routing`, when it runs a carbon-c-relay configuration;
    /// `client` is the sender's address where the receiver gave it.
    pub(super) fn for_routing(routing: &Routing, client: Option<IpAddr>) -> Option<Box<Self>> {
        match routing.routes.router().strategy() {
            Strategy::CRelay(p) => {
                let wants_client = p
                    .program
                    .clusters
                    .iter()
                    .any(|c| matches!(c.kind, ClusterKind::File { ip: true }));
                let mut lines = Box::new(Self {
                    program: Arc::clone(&p.program),
                    cleansed: Vec::new(),
                    routed: Routed::default(),
                    plan: Vec::new(),
                    aggregates: Arc::clone(&p.aggregates),
                    hits: Vec::new(),
                    names: Vec::new(),
                    wants_client,
                    srcaddr: Vec::new(),
                });
                lines.set_client(client);
                Some(lines)
            }
            _ => None,
        }
    }

    /// True when the program has a `file ip` cluster (the receiver then says who sends).
    pub(super) fn wants_client(&self) -> bool {
        self.wants_client
    }

    /// The sender's address for `file ip` clusters (`None`: a Unix socket or another
    /// listener, `(unknown)` as carbon-c-relay writes it).
    pub(super) fn set_client(&mut self, client: Option<IpAddr>) {
        self.srcaddr.clear();
        if !self.wants_client {
            return;
        }
        match client {
            // `Display` of both address kinds is `inet_ntop`'s text.
            Some(ip) => {
                let _ = write!(self.srcaddr, "{ip}");
            }
            None => self.srcaddr.extend_from_slice(b"(unknown)"),
        }
    }
}

impl Ingestor {
    /// Routes one received line (without its newline) on the carbon-c-relay program, or
    /// counts why not. The ingestor has entered its generation.
    pub(super) fn c_relay_line(&mut self, c: &mut CRelayLines, text: &[u8]) -> Pushed {
        let (line, firstspace) = match c.program.cleansing.unchanged(text) {
            Some(firstspace) => (text, firstspace),
            None => match c.program.cleansing.cleanse(text, &mut c.cleansed) {
                Some(firstspace) => (&c.cleansed[..], firstspace),
                // carbon-c-relay's `discards`: nothing left, or no space after the name.
                None => return self.reject(DropReason::BadFields),
            },
        };
        if firstspace > self.max_name_length {
            return self.reject(DropReason::NameTooLong);
        }
        // `failover`, `any_of` and `dynamic` clusters pass over members that are down, and
        // over members whose memory queue is full with nothing to spill to: another member
        // takes the line rather than it being dropped (carbon-c-relay drops it). Lines
        // already queued for a member that goes down move later (`relay::c_relay_hand_over`).
        let queues = &self.routing.queues;
        let failed = |s: u16| {
            queues.get(usize::from(s)).is_some_and(|q| {
                let stats = q.stats();
                stats.is_failing()
                    || (!q.has_spill()
                        && stats.depth().datapoints() >= q.limits().max_datapoints as u64)
            })
        };
        let env = Env { failed: &failed };
        // The walk is the name's alone (`router::c_relay::plan`): a name seen before replays
        // its plan instead of matching the expressions again.
        let plans = &self.routing.c_relay_plans;
        let name = &line[..firstspace];
        let hash = plans.hash(name);
        let (walk, keep) = match plans.lookup(hash, name, &mut c.plan) {
            Lookup::Hit => {
                let replayed =
                    plan::replay(&c.plan, &c.program, line, firstspace, &env, &mut c.routed);
                (!replayed, !replayed)
            }
            Lookup::Miss { admit } => (true, admit),
        };
        if walk {
            c.program
                .route(line, firstspace, &c.srcaddr, &env, &mut c.routed);
            if keep && plan::encode(&c.routed, line, firstspace, &mut c.plan) {
                plans.insert(hash, name, &c.plan);
            }
        }
        if c.routed.sends.is_empty() && c.routed.aggregates.is_empty() {
            self.drops.add(DropReason::Blackholed);
            return Pushed::Invalid(DropReason::Blackholed);
        }
        self.accepted += 1;
        for hit in &c.routed.aggregates {
            let name = c.routed.aggregate_name(hit);
            let start = c.names.len();
            c.names.extend_from_slice(name);
            c.hits.push(AggregateHit {
                name: (start, c.names.len()),
                ..*hit
            });
        }
        let queues = &self.routing.queues;
        let mut pending = 0;
        for &(variant, server) in &c.routed.sends {
            let bytes = c.routed.variant_of(variant, line);
            pending = self
                .pending
                .append(&[server], None, queues, bytes, 0.0, VERBATIM);
        }
        Self::hint(pending)
    }

    /// Feeds the aggregations what the lines routed since the last call gave them.
    pub(super) fn c_relay_aggregate(c: &mut CRelayLines) {
        if c.hits.is_empty() {
            return;
        }
        let now = super::unix_now() as i64;
        // A panic elsewhere while holding the lock leaves buckets as they were: still usable.
        let mut state = c.aggregates.lock().unwrap_or_else(|e| e.into_inner());
        for hit in &c.hits {
            state.put(&c.program, hit, &c.names[hit.name.0..hit.name.1], now);
        }
        drop(state);
        c.hits.clear();
        c.names.clear();
    }
}
