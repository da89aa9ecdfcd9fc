//! `/metrics` per cluster and member of a carbon-c-relay configuration, and its aggregations'
//! open series and drops: what carbon-c-relay's statistics do not say. Read at scrape time
//! from the current generation (a reload's clusters appear at the next scrape), never on the
//! data path.

use crate::figure::{Component, Figure, Reporting};
use crate::ingest::Pipeline;
use crate::metric_names::facade;
use crate::router::Strategy;

/// The figures of the current carbon-c-relay generation of a pipeline.
#[derive(Debug)]
pub(super) struct CRelayFigures {
    pub(super) pipeline: Pipeline,
}

impl Reporting for CRelayFigures {
    fn component(&self) -> Component {
        let routing = self.pipeline.routing();
        let mut figures = Vec::new();
        let Strategy::CRelay(p) = routing.router.strategy() else {
            return Component::default();
        };
        let snapshots: Vec<_> = routing
            .queues
            .iter()
            .map(|q| q.stats().snapshot())
            .collect();
        for c in &p.program.clusters {
            let labels = vec![("cluster", c.name.clone()), ("type", c.type_word())];
            let (mut up, mut queued, mut spilled, mut dropped, mut moved) =
                (0u64, 0u64, 0u64, 0u64, 0u64);
            let mut seen: Vec<u16> = Vec::new();
            for &m in &c.members {
                let Some(d) = snapshots.get(usize::from(m)) else {
                    continue;
                };
                let failing = routing
                    .queues
                    .get(usize::from(m))
                    .is_some_and(|q| q.stats().is_failing());
                up += u64::from(!failing);
                if seen.contains(&m) {
                    continue;
                }
                seen.push(m);
                queued += d.queued;
                spilled += d.queued_disk;
                dropped += d.dropped.iter().sum::<u64>();
                moved += d.moved_out;
                let mut member = labels.clone();
                member.push(("member", d.name.clone()));
                figures.push(Figure::gauge(1.0).series(facade::C_RELAY_CLUSTER_MEMBER, member));
            }
            let g = |v: u64, name| Figure::gauge(v as f64).series(name, labels.clone());
            figures.push(g(c.members.len() as u64, facade::C_RELAY_CLUSTER_MEMBERS));
            figures.push(g(up, facade::C_RELAY_CLUSTER_MEMBERS_UP));
            figures.push(g(queued, facade::C_RELAY_CLUSTER_QUEUED));
            figures.push(g(spilled, facade::C_RELAY_CLUSTER_SPILLED));
            figures.push(
                Figure::counter(dropped).series(facade::C_RELAY_CLUSTER_DROPPED, labels.clone()),
            );
            figures.push(Figure::counter(moved).series(facade::C_RELAY_CLUSTER_MOVED, labels));
        }
        let (open, counts) = {
            let state = p.aggregates.lock().unwrap_or_else(|e| e.into_inner());
            (state.open_series(), state.counts)
        };
        figures.push(
            Figure::gauge(open as f64).series(facade::C_RELAY_AGGREGATION_SERIES, Vec::new()),
        );
        for (reason, n) in [
            ("out_of_window", counts.dropped),
            ("series_limit", counts.series_limit),
            ("values_limit", counts.values_limit),
        ] {
            figures.push(Figure::counter(n).series(
                facade::C_RELAY_AGGREGATION_DROPPED,
                vec![("reason", reason.into())],
            ));
        }
        Component {
            path: "c_relay".into(),
            figures,
        }
    }
}
