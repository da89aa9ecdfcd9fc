//! Self-metrics: names (one module, [`names`]), per-relay counters ([`stats`]), and the
//! [`reporter`] that feeds `carbon.relays.<host>.*` datapoints back into the stream.
//!
//! Counters are updated once per batch (per connection read, per destination write), never per
//! datapoint. Each relay owns its own [`stats::RelayStats`], so two relays in one process keep
//! separate books; the same increments are mirrored to the `metrics` facade for whatever
//! recorder the embedding program installed (Prometheus, statsd, …).

pub mod names;
pub mod reporter;
pub mod stats;

pub use stats::{DestinationSnapshot, DestinationStats, RelayStats, StatsSnapshot};
