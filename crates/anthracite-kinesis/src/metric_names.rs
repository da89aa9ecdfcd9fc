//! Every self-metric name of the Kinesis source, in one place: the Prometheus series
//! ([`facade`], through the `metrics` facade and `/metrics`), the carbon leaves under
//! `<prefix>.relays.<host>-<instance>.kinesis.<stream>.` ([`carbon`]), and the help text of
//! each series ([`help`]).

use anthracite::figure::Figure;

/// Kinesis source metrics (`metrics` facade). Labels: `stream`, and `shard` where noted.
pub mod facade {
    /// Gauge, labels `stream`, `shard`: how far the shard's reader is behind the tip, in ms
    /// (GetRecords' `MillisBehindLatest`).
    pub const MILLIS_BEHIND_LATEST: &str = "anthracite_kinesis_millis_behind_latest";
    /// Counter, labels `stream`, `shard`: Kinesis records received.
    pub const RECORDS: &str = "anthracite_kinesis_records_total";
    /// Counter, labels `stream`, `shard`: non-empty lines handed to the parser.
    pub const LINES: &str = "anthracite_kinesis_lines_total";
    /// Counter, labels `stream`, `shard`: record payload bytes received.
    pub const BYTES: &str = "anthracite_kinesis_bytes_total";
    /// Counter, labels `stream`, `shard`: ProvisionedThroughputExceeded answers.
    pub const THROTTLES: &str = "anthracite_kinesis_throttles_total";
    /// Counter, labels `stream`, `shard`: ExpiredIterator answers.
    pub const EXPIRED_ITERATORS: &str = "anthracite_kinesis_expired_iterators_total";
    /// Counter, labels `stream`, `shard`: records that were KPL aggregates.
    pub const KPL_AGGREGATED: &str = "anthracite_kinesis_kpl_aggregated_total";
    /// Counter, labels `stream`, `shard`: records with the KPL magic that were not valid
    /// aggregates (passed through as plain records).
    pub const KPL_CORRUPT: &str = "anthracite_kinesis_kpl_corrupt_total";
    /// Gauge, label `stream`: seconds since the last committed checkpoint.
    pub const CHECKPOINT_AGE: &str = "anthracite_kinesis_checkpoint_age_seconds";
    /// Gauge, label `stream`: shards being read.
    pub const ACTIVE_SHARDS: &str = "anthracite_kinesis_active_shards";
    /// Gauge, labels `stream`, `worker`: shard leases this worker holds (lease table mode).
    pub const LEASES_HELD: &str = "anthracite_kinesis_leases_held";
    /// Counter, labels `stream`, `worker`: unowned or expired leases this worker took.
    pub const LEASES_TAKEN: &str = "anthracite_kinesis_leases_taken_total";
    /// Counter, labels `stream`, `worker`: leases this worker took from a live worker to
    /// balance the fleet.
    pub const LEASES_STOLEN: &str = "anthracite_kinesis_leases_stolen_total";
    /// Counter, labels `stream`, `worker`, `reason`: leases this worker lost, each once:
    /// `taken` (a renewal or checkpoint failed its condition: a peer holds it) or `expired`
    /// (not renewed within one lease duration by this worker's clock: a pause, the table
    /// unreachable; found by the renewer, or first by the shard's reader, which then stops
    /// without delivering what it holds).
    pub const LEASES_LOST: &str = "anthracite_kinesis_leases_lost_total";
}

/// The carbon leaves of a stream's component (`kinesis.<stream>.<leaf>`).
pub mod carbon {
    /// Per Kinesis stream, under `kinesis.<stream>.`: the largest `MillisBehindLatest` over
    /// its shards, sampled at report time.
    pub const MILLIS_BEHIND_LATEST: &str = "millisBehindLatest";
    /// Per Kinesis stream: records received in the interval.
    pub const RECORDS_READ: &str = "recordsRead";
    /// Per Kinesis stream: seconds since its last committed checkpoint, sampled at report
    /// time.
    pub const CHECKPOINT_LAG_SECONDS: &str = "checkpointLagSeconds";
    /// Per Kinesis stream: throttled GetRecords calls in the interval.
    pub const THROTTLES: &str = "throttles";
    /// Kinesis lease table mode, per stream and worker: leases held, sampled at report time.
    pub const LEASES_HELD: &str = "leasesHeld";
    /// Kinesis lease table mode: unowned or expired leases taken in the interval.
    pub const LEASES_TAKEN: &str = "leasesTaken";
    /// Kinesis lease table mode: leases stolen from a live worker (balancing) in the interval.
    pub const LEASES_STOLEN: &str = "leasesStolen";
    /// Kinesis lease table mode: leases lost (taken by a peer, or expired) in the interval.
    pub const LEASES_LOST: &str = "leasesLost";
}

/// The `# HELP` text of a `/metrics` series (one line; the doc comments above say more).
pub fn help(name: &str) -> &'static str {
    use facade as k;
    match name {
        k::MILLIS_BEHIND_LATEST => "How far the shard's reader is behind the tip, in ms.",
        k::RECORDS => "Kinesis records received.",
        k::LINES => "Non-empty lines handed to the parser.",
        k::BYTES => "Kinesis record payload bytes received.",
        k::THROTTLES => "Throttled GetRecords calls.",
        k::EXPIRED_ITERATORS => "Expired shard iterators.",
        k::KPL_AGGREGATED => "Records that were KPL aggregates.",
        k::KPL_CORRUPT => "Records with the KPL magic that were not valid aggregates.",
        k::CHECKPOINT_AGE => "Seconds since the stream's last committed checkpoint.",
        k::ACTIVE_SHARDS => "Shards being read.",
        k::LEASES_HELD => "Shard leases this worker holds (lease table mode).",
        k::LEASES_TAKEN => "Unowned or expired shard leases this worker took.",
        k::LEASES_STOLEN => "Shard leases this worker took from a live worker to balance.",
        k::LEASES_LOST => "Shard leases this worker lost, per reason (taken, expired).",
        _ => "anthracite Kinesis source metric.",
    }
}

/// A figure's Prometheus series under one of this crate's names, with its help text.
pub(crate) trait Named {
    /// Reported in `/metrics` as `name{labels}`, described by [`help`].
    fn named(self, name: &'static str, labels: Vec<(&'static str, String)>) -> Figure;
}

impl Named for Figure {
    fn named(self, name: &'static str, labels: Vec<(&'static str, String)>) -> Figure {
        self.series(name, labels).described(help(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_has_its_own_help() {
        use facade as k;
        for name in [
            k::MILLIS_BEHIND_LATEST,
            k::RECORDS,
            k::LINES,
            k::BYTES,
            k::THROTTLES,
            k::EXPIRED_ITERATORS,
            k::KPL_AGGREGATED,
            k::KPL_CORRUPT,
            k::CHECKPOINT_AGE,
            k::ACTIVE_SHARDS,
            k::LEASES_HELD,
            k::LEASES_TAKEN,
            k::LEASES_STOLEN,
            k::LEASES_LOST,
        ] {
            assert!(name.starts_with("anthracite_kinesis_"), "{name}");
            assert_ne!(help(name), help("unknown"), "{name}");
        }
    }
}
