//! The vocabulary of what the relay says about itself, shared by every layer: a [`Figure`] is
//! one value with its spellings, a Prometheus series (a name from
//! `metric_names` and its labels), a carbon leaf, or both. Figures are
//! grouped in [`Component`]s, one per part of the relay with its own carbon path: the relay
//! itself, each destination, each Kinesis stream. Several figures can share a carbon leaf
//! (per-source or per-shard series folded into one carbon value, by sum or maximum); the carbon
//! value of a leaf is therefore always the sum or maximum of the Prometheus series that carry
//! it, so the two outputs (the reporter's datapoints and `GET /metrics`) cannot disagree.
//!
//! A source of datapoints with figures of its own (a Kinesis stream, a Kafka consumer group,
//! an embedder's reader) implements [`Reporting`]; adding a figure is one line in its
//! `component`, and a figure of a name the core does not know carries its own help text
//! ([`Figure::described`]). `telemetry` builds the relay's and the destinations' components
//! from snapshots of their books, at report or scrape time, never on the data path.

use std::borrow::Cow;

/// How a figure behaves over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
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

/// A Prometheus series: a name from [`metric_names`](crate::metric_names) and its labels.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Series {
    /// The metric name.
    pub name: &'static str,
    /// Label pairs.
    pub labels: Vec<(&'static str, String)>,
    /// The `# HELP` text (`None`: the core's, from [`metric_names::help`](crate::metric_names::help)).
    pub help: Option<&'static str>,
}

/// A carbon leaf under the component's path, and how several figures carrying it fold.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Leaf {
    /// Dotted leaf name (`sent`, `droppedDatapoints.queue_full`).
    pub name: Cow<'static, str>,
    /// How figures sharing the leaf combine.
    pub fold: Fold,
}

/// One value the relay reports about itself.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// Counter or gauge.
    pub(crate) kind: Kind,
    /// The value (counters are whole numbers).
    pub(crate) value: f64,
    /// Its Prometheus series (`None`: carbon only).
    pub(crate) series: Option<Series>,
    /// Its carbon leaf (`None`: `/metrics` only).
    pub(crate) carbon: Option<Leaf>,
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
        self.series = Some(Series {
            name,
            labels,
            help: None,
        });
        self
    }

    /// The `# HELP` text of its series (for a name the core does not define; set it after
    /// [`series`](Self::series)).
    pub fn described(mut self, help: &'static str) -> Self {
        if let Some(s) = &mut self.series {
            s.help = Some(help);
        }
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
pub(crate) fn destination_component(host: &str, port: u16, instance: Option<&str>) -> String {
    path_component(&format!("{}:{}:{}", host, port, instance.unwrap_or("None")))
}
