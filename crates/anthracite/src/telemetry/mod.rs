//! Self-metrics, aggregated from above: the relay-wide [`StatsSnapshot`], the components the
//! relay and its destinations report ([`components`]), the [`reporter`] that feeds
//! `carbon.relays.<host>.*` back into the stream and the Prometheus text of `/metrics`.
//!
//! The books themselves live with what they count: the ingest side's in
//! [`IngestStats`](crate::ingest::IngestStats), each destination's in
//! [`DestinationStats`](crate::queue::DestinationStats). They are updated once per batch (per
//! connection read, per destination write), never per datapoint, and mirrored to the `metrics`
//! facade for whatever recorder the embedding program installed. Each relay owns its own books,
//! so two relays in one process keep separate counts.
//!
//! The names ([`crate::metric_names`]), the figure vocabulary ([`crate::figure`]) and the rate
//! limit of episode log lines ([`crate::episode`]) are bottom modules every layer may import;
//! this module may import every layer below the relay.

pub(crate) mod components;
pub(crate) mod drop_episodes;
pub(crate) mod process;
pub(crate) mod prometheus;
pub(crate) mod reporter;
pub(crate) mod snapshot;

pub(crate) use crate::config::TelemetryConfig;
pub use snapshot::{ReloadCounts, StatsSnapshot};
