//! What the relay says about itself, written once for both of its outputs: the carbon
//! datapoints of the [reporter](super::reporter) (`<prefix>.relays.<host>-<instance>.*`) and
//! the Prometheus text of `GET /metrics` ([`prometheus`](super::prometheus)).
//!
//! A [`Figure`] is one value with its spellings: a Prometheus series (a name from
//! [`names`](super::names) and its labels), a carbon leaf, or both. Figures are grouped in
//! [`Component`]s, one per part of the relay with its own carbon path: the relay itself,
//! each destination, each Kinesis stream. Several figures can share a carbon leaf (per-source
//! or per-shard series folded into one carbon value, by sum or maximum); the carbon value of a
//! leaf is therefore always the sum or maximum of the Prometheus series that carry it — the
//! two outputs cannot disagree.
//!
//! A source of datapoints with figures of its own (a Kinesis stream; more to come) implements
//! [`Reporting`]; adding a figure is one line in its `component`.
//!
//! Figures are built from snapshots of the books, at report or scrape time, never on the
//! data path.

use std::borrow::Cow;

use super::names::{carbon as leaf, facade};
use super::stats::StatsSnapshot;
use crate::ingest::Source;
use crate::protocol::DropReason;
use crate::queue::{DestinationDropReason, DestinationSnapshot};
use crate::router::DestinationSpec;

/// How a figure behaves over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only grows; carbon gets the increase per interval (carbon's own counters are
    /// per-interval counts), Prometheus the running total.
    Counter,
    /// A level, sampled when read.
    Gauge,
}

/// How figures sharing a carbon leaf in one component become one carbon value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fold {
    /// Added up (per-source counts into a relay-wide count).
    Sum,
    /// The largest (the shard furthest behind).
    Max,
}

/// A Prometheus series: a name from [`names`](super::names) and its labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The metric name.
    pub name: &'static str,
    /// Label pairs.
    pub labels: Vec<(&'static str, String)>,
}

/// A carbon leaf under the component's path, and how several figures carrying it fold.
#[derive(Clone, Debug, PartialEq)]
pub struct Leaf {
    /// Dotted leaf name (`sent`, `droppedDatapoints.queue_full`).
    pub name: Cow<'static, str>,
    /// How figures sharing the leaf combine.
    pub fold: Fold,
}

/// One value the relay reports about itself.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// Counter or gauge.
    pub kind: Kind,
    /// The value (counters are whole numbers).
    pub value: f64,
    /// Its Prometheus series (`None`: carbon only).
    pub series: Option<Series>,
    /// Its carbon leaf (`None`: `/metrics` only).
    pub carbon: Option<Leaf>,
}

impl Figure {
    /// A counter's running total.
    pub fn counter(value: u64) -> Self {
        Self {
            kind: Kind::Counter,
            value: value as f64,
            series: None,
            carbon: None,
        }
    }

    /// A gauge's current level.
    pub fn gauge(value: f64) -> Self {
        Self {
            kind: Kind::Gauge,
            value,
            series: None,
            carbon: None,
        }
    }

    /// Reported in `/metrics` as `name{labels}`.
    pub fn series(mut self, name: &'static str, labels: Vec<(&'static str, String)>) -> Self {
        self.series = Some(Series { name, labels });
        self
    }

    /// Reported to carbon under `leaf`; figures sharing it are added up.
    pub fn carbon(self, leaf: impl Into<Cow<'static, str>>) -> Self {
        self.carbon_folded(leaf, Fold::Sum)
    }

    /// Reported to carbon under `leaf`; figures sharing it fold with `fold`.
    pub fn carbon_folded(mut self, leaf: impl Into<Cow<'static, str>>, fold: Fold) -> Self {
        self.carbon = Some(Leaf {
            name: leaf.into(),
            fold,
        });
        self
    }
}

/// The figures of one part of the relay, under one carbon path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Component {
    /// The carbon path below `<prefix>.relays.<host>-<instance>` (`""` for the relay itself,
    /// `destinations.<dest>`, `kinesis.<stream>`).
    pub path: String,
    /// Its figures.
    pub figures: Vec<Figure>,
}

/// Something that reports figures of its own (a Kinesis stream), read at report and scrape
/// time.
pub trait Reporting: Send + Sync + std::fmt::Debug {
    /// Its figures now.
    fn component(&self) -> Component;
}

/// A name as one carbon path component: dots become underscores (carbon's rule for host
/// names), so the name cannot add levels.
pub fn path_component(name: &str) -> String {
    name.replace('.', "_")
}

/// carbon's destination component: `host:port:instance` with dots replaced by underscores
/// (`None` when there is no instance, as carbon's `%s` formatting gives).
pub fn destination_component(host: &str, port: u16, instance: Option<&str>) -> String {
    path_component(&format!("{}:{}:{}", host, port, instance.unwrap_or("None")))
}

/// The relay-wide figures: what the receivers took and rejected, per source, and the lists.
pub fn relay_component(s: &StatsSnapshot) -> Component {
    let mut figures = Vec::new();
    for src in &s.sources {
        let label = || vec![("source", src.source.as_str().to_string())];
        let mut received = Figure::counter(src.received).series(facade::RECEIVED, label());
        // carbon's metricsReceived counts what clients sent, not the relay's own metrics.
        if src.source != Source::Internal {
            received = received.carbon(leaf::METRICS_RECEIVED);
        }
        figures.push(received);
        figures.push(
            Figure::gauge(src.active as f64)
                .series(facade::CONNECTIONS_ACTIVE, label())
                .carbon(leaf::ACTIVE_CONNECTIONS),
        );
        figures.push(Figure::counter(src.rejected).series(facade::CONNECTIONS_REJECTED, label()));
        figures.push(
            Figure::counter(src.idle_closed).series(facade::CONNECTIONS_IDLE_CLOSED, label()),
        );
        figures.push(Figure::counter(src.evicted).series(facade::CONNECTIONS_EVICTED, label()));
        figures.push(Figure::counter(src.accept_errors).series(facade::ACCEPT_ERRORS, label()));
        for reason in DropReason::ALL {
            figures.push(
                Figure::counter(src.invalid.get(reason))
                    .series(
                        facade::INVALID,
                        vec![
                            ("source", src.source.as_str().to_string()),
                            ("reason", reason.as_str().to_string()),
                        ],
                    )
                    .carbon(format!("{}.{}", leaf::INVALID_DATAPOINTS, reason.as_str())),
            );
        }
    }
    figures.push(
        Figure::counter(s.blacklist_matches)
            .series(facade::BLACKLIST_MATCHES, Vec::new())
            .carbon(leaf::BLACKLIST_MATCHES),
    );
    figures.push(
        Figure::counter(s.whitelist_rejects)
            .series(facade::WHITELIST_REJECTS, Vec::new())
            .carbon(leaf::WHITELIST_REJECTS),
    );
    figures.push(
        Figure::counter(s.udp_kernel_drops)
            .series(facade::UDP_KERNEL_DROPS, Vec::new())
            .carbon(leaf::UDP_KERNEL_DROPS),
    );
    figures.push(
        Figure::gauge(s.buffered_bytes as f64).series(facade::RECEIVE_BUFFER_BYTES, Vec::new()),
    );
    for (result, n) in [
        ("applied", s.reloads.applied),
        ("rejected", s.reloads.rejected),
    ] {
        figures.push(
            Figure::counter(n)
                .series(facade::CONFIG_RELOADS, vec![("result", result.to_string())])
                .carbon(format!("{}.{result}", leaf::CONFIG_RELOADS)),
        );
    }
    Component {
        path: String::new(),
        figures,
    }
}

/// The carbon path of a destination named `host:port:instance`.
pub fn destination_path(name: &str) -> String {
    let component = match DestinationSpec::parse(name) {
        Ok(spec) => destination_component(&spec.host, spec.port, spec.instance.as_deref()),
        Err(_) => path_component(name),
    };
    format!("destinations.{component}")
}

/// One destination's figures: carbon's destination counters, the queue tiers, drops per
/// reason, the connection.
pub fn destination_figures(d: &DestinationSnapshot) -> Component {
    let label = || vec![("destination", d.name.clone())];
    let sp = &d.spill;
    let mut figures = vec![
        Figure::counter(d.routed)
            .series(facade::ROUTED, label())
            .carbon(leaf::ATTEMPTED_RELAYS),
        Figure::counter(d.sent)
            .series(facade::SENT, label())
            .carbon(leaf::SENT),
        Figure::counter(d.messages)
            .series(facade::BATCHES_SENT, label())
            .carbon(leaf::BATCHES_SENT),
        Figure::counter(d.queued_until_connected)
            .series(facade::QUEUED_UNTIL_CONNECTED, label())
            .carbon(leaf::QUEUED_UNTIL_CONNECTED),
        Figure::counter(d.dropped(DestinationDropReason::QueueFull)).carbon(leaf::FULL_QUEUE_DROPS),
        Figure::gauge(d.queued_memory as f64).series(facade::QUEUE_DATAPOINTS, label()),
        Figure::gauge(sp.memory_bytes as f64).series(facade::QUEUE_BYTES, label()),
        Figure::counter(sp.spilled_records).series(facade::SPILLED_RECORDS, label()),
        Figure::counter(sp.spilled_datapoints)
            .series(facade::SPILLED_DATAPOINTS, label())
            .carbon(leaf::SPILLED_DATAPOINTS),
        Figure::counter(sp.spilled_bytes).series(facade::SPILLED_BYTES, label()),
        Figure::counter(sp.replayed_records).series(facade::REPLAYED_RECORDS, label()),
        Figure::counter(sp.replayed_datapoints)
            .series(facade::REPLAYED_DATAPOINTS, label())
            .carbon(leaf::REPLAYED_DATAPOINTS),
        Figure::counter(sp.replayed_bytes).series(facade::REPLAYED_BYTES, label()),
        Figure::gauge(d.queued_disk as f64)
            .series(facade::SPILL_QUEUE_DATAPOINTS, label())
            .carbon(leaf::SPILL_QUEUE_DATAPOINTS),
        Figure::gauge(sp.disk_bytes as f64)
            .series(facade::SPILL_DISK_BYTES, label())
            .carbon(leaf::SPILL_DISK_BYTES),
        Figure::gauge(sp.oldest_age_ms as f64 / 1000.0)
            .series(facade::SPILL_OLDEST_AGE, label())
            .carbon(leaf::SPILL_OLDEST_AGE_SECONDS),
        Figure::counter(sp.damaged_segments).series(facade::SPILL_DAMAGED_SEGMENTS, label()),
        Figure::counter(sp.io_errors).series(facade::SPILL_IO_ERRORS, label()),
        Figure::gauge(if d.connected { 1.0 } else { 0.0 })
            .series(facade::DESTINATION_CONNECTED, label())
            .carbon(leaf::CONNECTED),
        Figure::counter(d.connect_failures).series(facade::DESTINATION_CONNECT_FAILURES, label()),
        Figure::counter(d.write_timeouts)
            .series(facade::DESTINATION_WRITE_TIMEOUTS, label())
            .carbon(leaf::WRITE_TIMEOUTS),
        Figure::counter(d.full_waits)
            .series(facade::DESTINATION_FULL_WAITS, label())
            .carbon(leaf::FULL_WAITS),
    ];
    for reason in DestinationDropReason::ALL {
        figures.push(
            Figure::counter(d.dropped(reason))
                .series(
                    facade::DROPPED,
                    vec![
                        ("destination", d.name.clone()),
                        ("reason", reason.as_str().to_string()),
                    ],
                )
                .carbon(format!("{}.{}", leaf::DROPPED_DATAPOINTS, reason.as_str())),
        );
    }
    Component {
        path: destination_path(&d.name),
        figures,
    }
}

/// Every component of a snapshot: the relay, then each destination in ring order, then the
/// removed destinations that still hold data.
pub fn components(s: &StatsSnapshot) -> Vec<Component> {
    let mut out = Vec::with_capacity(1 + s.destinations.len() + s.removed.len());
    out.push(relay_component(s));
    out.extend(
        s.destinations
            .iter()
            .chain(&s.removed)
            .map(destination_figures),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destination_component_matches_carbon() {
        assert_eq!(
            destination_component("127.0.0.1", 2104, Some("a")),
            "127_0_0_1:2104:a"
        );
        assert_eq!(
            destination_component("cache.example.com", 2004, None),
            "cache_example_com:2004:None"
        );
        assert_eq!(
            destination_path("127.0.0.1:2104:a"),
            "destinations.127_0_0_1:2104:a"
        );
        assert_eq!(destination_path("[::1]:2104:a"), "destinations.::1:2104:a");
    }
}
