//! Every self-metric name of the Kafka source and destination, in one place: the Prometheus series
//! ([`facade`], through the `metrics` facade and `/metrics`), the carbon leaves under
//! `<prefix>.relays.<host>-<instance>.kafka.<group>.` ([`carbon`]), and the help text of each
//! series ([`help`]).

use anthracite::figure::Figure;

/// Kafka source and destination metrics (`metrics` facade). Labels: `group` (or `destination`), and `topic`, `partition` where
/// noted.
pub mod facade {
    /// Gauge, labels `group`, `topic`, `partition`: messages between the group's committed
    /// offset and the partition's end (librdkafka's `consumer_lag`).
    pub const CONSUMER_LAG: &str = "anthracite_kafka_consumer_lag";
    /// Counter, labels `group`, `topic`, `partition`: messages read.
    pub const MESSAGES: &str = "anthracite_kafka_messages_total";
    /// Counter, labels `group`, `topic`, `partition`: non-empty lines (or pickle entries)
    /// handed to the parser.
    pub const LINES: &str = "anthracite_kafka_lines_total";
    /// Counter, labels `group`, `topic`, `partition`: message payload bytes read.
    pub const BYTES: &str = "anthracite_kafka_bytes_total";
    /// Gauge, labels `group`, `topic`, `partition`: seconds since the partition's last
    /// committed offset (since its assignment while nothing was committed).
    pub const COMMIT_AGE: &str = "anthracite_kafka_commit_age_seconds";
    /// Counter, labels `group`, `kind` (`assign`, `revoke`): rebalance events.
    pub const REBALANCES: &str = "anthracite_kafka_rebalances_total";
    /// Counter, label `group`: offset commits that succeeded.
    pub const COMMITS: &str = "anthracite_kafka_commits_total";
    /// Counter, labels `group`, `reason` (`not_graphite`, `bad_pickle`): messages that held
    /// no datapoint; their lines or entries are also counted as invalid datapoints.
    pub const BAD_MESSAGES: &str = "anthracite_kafka_bad_messages_total";
    /// Counter, label `group`: client errors (brokers unreachable, a missing topic, a failed
    /// commit).
    pub const ERRORS: &str = "anthracite_kafka_errors_total";
    /// Gauge, label `group`: partitions assigned to this relay.
    pub const ASSIGNED_PARTITIONS: &str = "anthracite_kafka_assigned_partitions";
    /// Counter, label `destination`: errors a Kafka destination's producer reported
    /// (brokers unreachable, a failed metadata request); logged once per episode.
    pub const PRODUCER_ERRORS: &str = "anthracite_kafka_producer_errors_total";
    /// Counter, label `destination`: producers torn down and built again from the bootstrap
    /// list after failing for a bounded time without an acknowledgement.
    pub const PRODUCER_REBUILDS: &str = "anthracite_kafka_producer_rebuilds_total";
}

/// The carbon leaves of a consumer group's component (`kafka.<group>.<leaf>`).
pub mod carbon {
    /// Per Kafka consumer group, under `kafka.<group>.`: the largest consumer lag (messages
    /// between the committed offset and the end) over its partitions, sampled at report time.
    pub const CONSUMER_LAG: &str = "consumerLag";
    /// Per Kafka consumer group: messages read in the interval.
    pub const MESSAGES_READ: &str = "messagesRead";
    /// Per Kafka consumer group: non-empty lines (or pickle entries) read in the interval.
    pub const LINES_READ: &str = "linesRead";
    /// Per Kafka consumer group: the largest time since a partition's last committed offset,
    /// in seconds, sampled at report time.
    pub const COMMIT_AGE_SECONDS: &str = "commitAgeSeconds";
    /// Per Kafka consumer group: partition assignments and revocations in the interval.
    pub const REBALANCES: &str = "rebalances";
    /// Per Kafka consumer group, under `badMessages.<reason>`: messages that held no
    /// datapoint in the interval, per reason.
    pub const BAD_MESSAGES: &str = "badMessages";
}

/// The `# HELP` text of a `/metrics` series (one line; the doc comments above say more).
pub fn help(name: &str) -> &'static str {
    use facade as kf;
    match name {
        kf::CONSUMER_LAG => "Messages between the group's committed offset and the end.",
        kf::MESSAGES => "Kafka messages read.",
        kf::LINES => "Lines or pickle entries handed to the parser.",
        kf::BYTES => "Kafka message payload bytes read.",
        kf::COMMIT_AGE => "Seconds since the partition's last committed offset.",
        kf::REBALANCES => "Partition assignments and revocations.",
        kf::COMMITS => "Offset commits that succeeded.",
        kf::BAD_MESSAGES => "Kafka messages that held no datapoint, per reason.",
        kf::ERRORS => "Kafka client errors (brokers unreachable, missing topic, failed commit).",
        kf::ASSIGNED_PARTITIONS => "Partitions assigned to this relay.",
        kf::PRODUCER_ERRORS => "Errors a Kafka destination's producer reported.",
        kf::PRODUCER_REBUILDS => {
            "Kafka producers built again after failing for a bounded time without an acknowledgement."
        }
        _ => "anthracite Kafka source metric.",
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
        use facade as kf;
        for name in [
            kf::CONSUMER_LAG,
            kf::MESSAGES,
            kf::LINES,
            kf::BYTES,
            kf::COMMIT_AGE,
            kf::REBALANCES,
            kf::COMMITS,
            kf::BAD_MESSAGES,
            kf::ERRORS,
            kf::ASSIGNED_PARTITIONS,
            kf::PRODUCER_ERRORS,
            kf::PRODUCER_REBUILDS,
        ] {
            assert!(name.starts_with("anthracite_kafka_"), "{name}");
            assert_ne!(help(name), help("unknown"), "{name}");
        }
    }
}
