//! The relay's own metrics: how often and under which carbon path it reports them.

use std::time::Duration;

/// The relay's own metrics.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TelemetryConfig {
    /// How often self-metrics are emitted into the stream (`None`: never).
    pub interval: Option<Duration>,
    /// First component of self-metric names (carbon's `CARBON_METRIC_PREFIX`).
    pub prefix: String,
    /// Host component (dots become underscores), defaults to the machine's hostname.
    pub host: String,
    /// Instance name appended as `<host>-<instance>`.
    pub instance: String,
    /// `relays`, or `aggregator` for a drop-in carbon-aggregator.
    pub role: String,
}

impl TelemetryConfig {
    /// `<prefix>.<role>.<host>-<instance>`, as carbon names its relay (`relays`) and
    /// aggregator (`aggregator`) metrics.
    pub(crate) fn metric_root(&self) -> String {
        format!(
            "{}.{}.{}-{}",
            self.prefix,
            self.role,
            self.host.replace('.', "_"),
            self.instance
        )
    }
}
