//! Self-metrics: names (one module, [`names`]), the relay-wide [`StatsSnapshot`], and the
//! [`reporter`] that feeds `carbon.relays.<host>.*` back into the stream.
//!
//! The books themselves live with what they count: the ingest side's in
//! [`IngestStats`](crate::ingest::IngestStats), each destination's in
//! [`DestinationStats`](crate::queue::DestinationStats). They are updated once per batch (per
//! connection read, per destination write), never per datapoint, and mirrored to the `metrics`
//! facade for whatever recorder the embedding program installed. Each relay owns its own books,
//! so two relays in one process keep separate counts.
//!
//! [`names`] and [`episode`] are leaves every layer may import: the names, and the rate limit of
//! episode log lines.

pub mod drop_episodes;
pub mod episode;
pub mod figures;
pub mod names;
pub mod process;
pub mod prometheus;
pub mod reporter;
pub mod stats;

use std::time::Duration;

pub use figures::{Component, Figure, Reporting};
pub use stats::{ReloadCounts, StatsSnapshot};

/// The relay's own metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct TelemetryConfig {
    /// How often self-metrics are emitted into the stream (`None`: never).
    pub interval: Option<Duration>,
    /// First component of self-metric names (carbon's `CARBON_METRIC_PREFIX`).
    pub prefix: String,
    /// Host component (dots become underscores), defaults to the machine's hostname.
    pub host: String,
    /// Instance name appended as `<host>-<instance>`.
    pub instance: String,
}

impl TelemetryConfig {
    /// `<prefix>.relays.<host>-<instance>`, as carbon names its relay metrics.
    pub fn metric_root(&self) -> String {
        format!(
            "{}.relays.{}-{}",
            self.prefix,
            self.host.replace('.', "_"),
            self.instance
        )
    }
}
