//! Every self-metric name, in one place. Code never spells a metric name inline.

/// `metrics` facade names (Prometheus style). Labels are listed per name.
pub(crate) mod facade {
    /// Counter, label `source`: datapoints accepted by a receiver (after parsing).
    pub(crate) const RECEIVED: &str = "anthracite_received_datapoints_total";
    /// Counter, labels `source`, `reason`: lines, entries or frames rejected while parsing.
    pub(crate) const INVALID: &str = "anthracite_invalid_datapoints_total";
    /// Counter, label `destination`: datapoints routed to a destination (carbon's
    /// `attemptedRelays`).
    pub(crate) const ROUTED: &str = "anthracite_routed_datapoints_total";
    /// Counter, label `destination`: datapoints written to a destination's socket.
    pub(crate) const SENT: &str = "anthracite_sent_datapoints_total";
    /// Counter, label `destination`: pickle or line messages written.
    pub(crate) const BATCHES_SENT: &str = "anthracite_sent_messages_total";
    /// Counter, labels `destination`, `reason`: datapoints dropped after routing.
    pub(crate) const DROPPED: &str = "anthracite_dropped_datapoints_total";
    /// Gauge, label `destination`: datapoints waiting in the destination's queue.
    pub(crate) const QUEUE_DATAPOINTS: &str = "anthracite_queue_datapoints";
    /// Gauge, label `destination`: bytes waiting in the destination's queue.
    pub(crate) const QUEUE_BYTES: &str = "anthracite_queue_bytes";
    /// Counter, label `destination`: batches (records) written to the spill log.
    pub(crate) const SPILLED_RECORDS: &str = "anthracite_spilled_records_total";
    /// Counter, label `destination`: datapoints written to the spill log.
    pub(crate) const SPILLED_DATAPOINTS: &str = "anthracite_spilled_datapoints_total";
    /// Counter, label `destination`: bytes written to the spill log (names plus fixed
    /// per-datapoint overhead, like the memory bound).
    pub(crate) const SPILLED_BYTES: &str = "anthracite_spilled_bytes_total";
    /// Counter, label `destination`: records replayed from the spill log.
    pub(crate) const REPLAYED_RECORDS: &str = "anthracite_replayed_records_total";
    /// Counter, label `destination`: datapoints replayed from the spill log.
    pub(crate) const REPLAYED_DATAPOINTS: &str = "anthracite_replayed_datapoints_total";
    /// Counter, label `destination`: bytes replayed (measured like `SPILLED_BYTES`).
    pub(crate) const REPLAYED_BYTES: &str = "anthracite_replayed_bytes_total";
    /// Gauge, label `destination`: datapoints in the disk tier.
    pub(crate) const SPILL_QUEUE_DATAPOINTS: &str = "anthracite_spill_queue_datapoints";
    /// Gauge, label `destination`: bytes of spill segment files on disk.
    pub(crate) const SPILL_DISK_BYTES: &str = "anthracite_spill_disk_bytes";
    /// Gauge, label `destination`: age in seconds of the oldest record on disk.
    pub(crate) const SPILL_OLDEST_AGE: &str = "anthracite_spill_oldest_record_age_seconds";
    /// Counter, label `destination`: torn or corrupt spill segments found.
    pub(crate) const SPILL_DAMAGED_SEGMENTS: &str = "anthracite_spill_damaged_segments_total";
    /// Counter, label `destination`: I/O errors of the spill log.
    pub(crate) const SPILL_IO_ERRORS: &str = "anthracite_spill_io_errors_total";
    /// Gauge, label `destination`: 1 when connected.
    pub(crate) const DESTINATION_CONNECTED: &str = "anthracite_destination_connected";
    /// Counter, label `destination`: connection attempts that failed or connections lost.
    pub(crate) const DESTINATION_CONNECT_FAILURES: &str =
        "anthracite_destination_connect_failures_total";
    /// Gauge, label `source`: open client connections.
    pub(crate) const CONNECTIONS_ACTIVE: &str = "anthracite_connections_active";
    /// Counter, label `source`: connections refused because the limit was reached.
    pub(crate) const CONNECTIONS_REJECTED: &str = "anthracite_connections_rejected_total";
    /// Counter: datapoints dropped because their name matched the blacklist (carbon's
    /// `blacklistMatches`).
    pub(crate) const BLACKLIST_MATCHES: &str = "anthracite_blacklist_matches_total";
    /// Counter: datapoints dropped because their name was not on the whitelist (carbon's
    /// `whitelistRejects`).
    pub(crate) const WHITELIST_REJECTS: &str = "anthracite_whitelist_rejects_total";
    /// Counter, label `destination`: datapoints routed while it was not connected (carbon's
    /// `queuedUntilConnected`).
    pub(crate) const QUEUED_UNTIL_CONNECTED: &str = "anthracite_queued_until_connected_total";
    /// Counter, label `source`: connections closed by the idle timeout.
    pub(crate) const CONNECTIONS_IDLE_CLOSED: &str = "anthracite_connections_idle_closed_total";
    /// Counter, label `destination`: connections declared dead because a write made no
    /// progress for `destinations.write_timeout_ms` (a hung peer).
    pub(crate) const DESTINATION_WRITE_TIMEOUTS: &str =
        "anthracite_destination_write_timeouts_total";
    /// Counter, label `destination`: batches whose producers waited for room in a full memory
    /// tier under `destinations.queue.full_wait_ms` (back-pressure on the clients).
    pub(crate) const DESTINATION_FULL_WAITS: &str = "anthracite_destination_full_waits_total";
    /// Counter, labels `destination`, `cause` (`down`, `behind`, `no_wait`): batches a full
    /// memory tier's policy (spill or drop) applied to, by why their producer was not held
    /// back.
    pub(crate) const DESTINATION_OVERFLOWS: &str = "anthracite_destination_overflows_total";
    /// Counter, label `result` (`applied`, `rejected`): configuration reloads (SIGHUP).
    pub(crate) const CONFIG_RELOADS: &str = "anthracite_config_reloads_total";
    /// Gauge: 1 while the relay is ready (what `/ready` answers 200 for), 0 while it starts or
    /// shuts down.
    pub(crate) const READY: &str = "anthracite_ready";
    /// Gauge, labels `version`, `features`: always 1; the build's version and Cargo features.
    pub(crate) const BUILD_INFO: &str = "anthracite_build_info";
    /// Counter, label `source`: idle connections closed to admit a new one at the limit.
    pub(crate) const CONNECTIONS_EVICTED: &str = "anthracite_connections_evicted_total";
    /// Counter, label `source`: failed `accept` calls (out of file descriptors, …).
    pub(crate) const ACCEPT_ERRORS: &str = "anthracite_accept_errors_total";
    /// Counter, label `source`: TLS handshakes on the receivers that failed, timed out or were
    /// closed to admit another connection.
    pub(crate) const TLS_HANDSHAKE_FAILURES: &str = "anthracite_tls_handshake_failures_total";
    /// Counter: admin connections closed to admit a new one at the admin connection limit
    /// (the one silent the longest).
    pub(crate) const ADMIN_EVICTED: &str = "anthracite_admin_connections_evicted_total";
    /// Counter: admin connections refused (the limit reached and none silent long enough).
    pub(crate) const ADMIN_REFUSED: &str = "anthracite_admin_connections_refused_total";
    /// Gauge: bytes held by client connections' read buffers and pickle decoders.
    pub(crate) const RECEIVE_BUFFER_BYTES: &str = "anthracite_receive_buffer_bytes";
    /// Counter: datagrams the kernel dropped on the UDP socket because its receive buffer was
    /// full (`SO_RXQ_OVFL`).
    pub(crate) const UDP_KERNEL_DROPS: &str = "anthracite_udp_kernel_drops_total";
    /// Counter: aggregates computed and sent (carbon's `aggregateDatapointsSent`).
    pub(crate) const AGGREGATOR_SENT: &str = "anthracite_aggregator_sent_datapoints_total";
    /// Gauge: output series held (carbon's `allocatedBuffers`).
    pub(crate) const AGGREGATOR_SERIES: &str = "anthracite_aggregator_series";
    /// Gauge: values in open intervals (carbon's `bufferedDatapoints`).
    pub(crate) const AGGREGATOR_BUFFERED: &str = "anthracite_aggregator_buffered_datapoints";
    /// Counter, label `reason` (`series_limit`, `values_limit`): datapoints not aggregated
    /// at the aggregator's memory bound.
    pub(crate) const AGGREGATOR_DROPPED: &str = "anthracite_aggregator_dropped_total";
    /// Counter: datapoints no aggregation rule matched.
    pub(crate) const AGGREGATOR_MISSES: &str = "anthracite_aggregator_misses_total";
    /// Counter, label `result` (`applied`, `rejected`): reloads of the aggregation and
    /// rewrite rule files.
    pub(crate) const AGGREGATOR_RULE_RELOADS: &str = "anthracite_aggregator_rule_reloads_total";
}

/// Process series in `/metrics`, with the names Prometheus client libraries use.
pub(crate) mod process {
    /// Gauge: resident set size in bytes (`VmRSS`).
    pub(crate) const RESIDENT_MEMORY: &str = "process_resident_memory_bytes";
    /// Gauge (fractional seconds, so not a `metrics` counter): user + system CPU time.
    pub(crate) const CPU_SECONDS: &str = "process_cpu_seconds_total";
    /// Gauge: open file descriptors.
    pub(crate) const OPEN_FDS: &str = "process_open_fds";
    /// Gauge: the soft limit on open file descriptors.
    pub(crate) const MAX_FDS: &str = "process_max_fds";
    /// Gauge: when the process started, in seconds since the Unix epoch.
    pub(crate) const START_TIME: &str = "process_start_time_seconds";
}

/// Leaf names of the datapoints the relay emits about itself into the stream, under
/// `<prefix>.relays.<host>-<instance>.` (carbon's names, same meaning: per-interval counts).
pub(crate) mod carbon {
    /// Datapoints received in the interval.
    pub(crate) const METRICS_RECEIVED: &str = "metricsReceived";
    /// Aggregator: aggregates sent in the interval (carbon's name).
    pub(crate) const AGGREGATE_DATAPOINTS_SENT: &str = "aggregateDatapointsSent";
    /// Aggregator: output series held (carbon's name).
    pub(crate) const ALLOCATED_BUFFERS: &str = "allocatedBuffers";
    /// Aggregator: values in open intervals (carbon's name).
    pub(crate) const BUFFERED_DATAPOINTS: &str = "bufferedDatapoints";
    /// Aggregator: datapoints not aggregated because `max_series` was reached (anthracite).
    pub(crate) const AGGREGATE_DROPPED_SERIES_LIMIT: &str =
        "aggregateDatapointsDropped.series_limit";
    /// Aggregator: datapoints not aggregated because `max_values` was reached (anthracite).
    pub(crate) const AGGREGATE_DROPPED_VALUES_LIMIT: &str =
        "aggregateDatapointsDropped.values_limit";
    /// Aggregator: datapoints no rule matched in the interval (anthracite).
    pub(crate) const AGGREGATOR_MISSES: &str = "aggregatorMisses";
    /// Open client connections.
    pub(crate) const ACTIVE_CONNECTIONS: &str = "activeConnections";
    /// Datapoints dropped by the blacklist in the interval.
    pub(crate) const BLACKLIST_MATCHES: &str = "blacklistMatches";
    /// Datapoints dropped for not being on the whitelist in the interval.
    pub(crate) const WHITELIST_REJECTS: &str = "whitelistRejects";
    /// Process CPU time over wall time in the interval, in percent (user + system, carbon's
    /// `getrusage(RUSAGE_SELF)` formula).
    pub(crate) const CPU_USAGE: &str = "cpuUsage";
    /// Resident set size in bytes (carbon: `/proc/self/statm` pages × page size).
    pub(crate) const MEM_USAGE: &str = "memUsage";
    /// Per destination, under `destinations.<dest>.`: datapoints routed to it.
    pub(crate) const ATTEMPTED_RELAYS: &str = "attemptedRelays";
    /// Per destination: datapoints written.
    pub(crate) const SENT: &str = "sent";
    /// Per destination: messages written.
    pub(crate) const BATCHES_SENT: &str = "batchesSent";
    /// Per destination: datapoints routed to it while it was not connected.
    pub(crate) const QUEUED_UNTIL_CONNECTED: &str = "queuedUntilConnected";
    /// Per destination: datapoints dropped because its queue was full.
    pub(crate) const FULL_QUEUE_DROPS: &str = "fullQueueDrops";
    /// Per destination: datapoints waiting (memory queue), sampled at report time.
    pub(crate) const RELAY_MAX_QUEUE_LENGTH: &str = "relayMaxQueueLength";
    /// anthracite extra, relay-wide, under `invalidDatapoints.<reason>`: datapoints rejected
    /// by the parsers in the interval, per reason (every reason, zeros included).
    pub(crate) const INVALID_DATAPOINTS: &str = "invalidDatapoints";
    /// Per destination: datapoints written to its spill log in the interval.
    pub(crate) const SPILLED_DATAPOINTS: &str = "spilledDatapoints";
    /// Per destination: datapoints replayed from its spill log in the interval.
    pub(crate) const REPLAYED_DATAPOINTS: &str = "replayedDatapoints";
    /// Per destination: datapoints in the disk tier, sampled at report time.
    pub(crate) const SPILL_QUEUE_DATAPOINTS: &str = "spillQueueDatapoints";
    /// Per destination: bytes of spill segment files, sampled at report time.
    pub(crate) const SPILL_DISK_BYTES: &str = "spillDiskBytes";
    /// Per destination: age of the oldest spilled record in seconds, sampled at report time.
    pub(crate) const SPILL_OLDEST_AGE_SECONDS: &str = "spillOldestAgeSeconds";
    /// Per destination, under `droppedDatapoints.<reason>`: datapoints dropped after routing
    /// in the interval, per reason (every reason, zeros included).
    pub(crate) const DROPPED_DATAPOINTS: &str = "droppedDatapoints";
    /// Per destination: 1 while connected, sampled at report time.
    pub(crate) const CONNECTED: &str = "connected";
    /// Per destination: connections declared dead by the write timeout in the interval.
    pub(crate) const WRITE_TIMEOUTS: &str = "writeTimeouts";
    /// Per destination: batches held back by the full wait in the interval.
    pub(crate) const FULL_WAITS: &str = "fullWaits";
    /// Per destination, under `overflows.<cause>`: batches the full policy applied to in the
    /// interval.
    pub(crate) const OVERFLOWS: &str = "overflows";
    /// Relay-wide, under `configReloads.<result>`: reloads applied / rejected in the interval.
    pub(crate) const CONFIG_RELOADS: &str = "configReloads";
    /// Per Kinesis stream, under `kinesis.<stream>.`: the largest `MillisBehindLatest` over
    /// its shards, sampled at report time.
    pub(crate) const MILLIS_BEHIND_LATEST: &str = "millisBehindLatest";
    /// Per Kinesis stream: records received in the interval.
    pub(crate) const RECORDS_READ: &str = "recordsRead";
    /// Per Kinesis stream: seconds since its last committed checkpoint, sampled at report
    /// time.
    pub(crate) const CHECKPOINT_LAG_SECONDS: &str = "checkpointLagSeconds";
    /// Per Kinesis stream: throttled GetRecords calls in the interval.
    pub(crate) const THROTTLES: &str = "throttles";
    /// anthracite extra: UDP datagrams the kernel dropped in the interval (socket buffer full).
    pub(crate) const UDP_KERNEL_DROPS: &str = "udpKernelDrops";
    /// Kinesis lease table mode, per stream and worker: leases held, sampled at report time.
    pub(crate) const LEASES_HELD: &str = "leasesHeld";
    /// Kinesis lease table mode: unowned or expired leases taken in the interval.
    pub(crate) const LEASES_TAKEN: &str = "leasesTaken";
    /// Kinesis lease table mode: leases stolen from a live worker (balancing) in the interval.
    pub(crate) const LEASES_STOLEN: &str = "leasesStolen";
    /// Kinesis lease table mode: leases lost (taken by a peer, or expired) in the interval.
    pub(crate) const LEASES_LOST: &str = "leasesLost";
    /// Per Kafka consumer group, under `kafka.<group>.`: the largest consumer lag (messages
    /// between the committed offset and the end) over its partitions, sampled at report time.
    pub(crate) const CONSUMER_LAG: &str = "consumerLag";
    /// Per Kafka consumer group: messages read in the interval.
    pub(crate) const MESSAGES_READ: &str = "messagesRead";
    /// Per Kafka consumer group: non-empty lines (or pickle entries) read in the interval.
    pub(crate) const LINES_READ: &str = "linesRead";
    /// Per Kafka consumer group: the largest time since a partition's last committed offset,
    /// in seconds, sampled at report time.
    pub(crate) const COMMIT_AGE_SECONDS: &str = "commitAgeSeconds";
    /// Per Kafka consumer group: partition assignments and revocations in the interval.
    pub(crate) const REBALANCES: &str = "rebalances";
    /// Per Kafka consumer group, under `badMessages.<reason>`: messages that held no
    /// datapoint in the interval, per reason.
    pub(crate) const BAD_MESSAGES: &str = "badMessages";
}

/// Kinesis source metrics (`metrics` facade). Labels: `stream`, and `shard` where noted.
pub(crate) mod kinesis {
    /// Gauge, labels `stream`, `shard`: how far the shard's reader is behind the tip, in ms
    /// (GetRecords' `MillisBehindLatest`).
    pub(crate) const MILLIS_BEHIND_LATEST: &str = "anthracite_kinesis_millis_behind_latest";
    /// Counter, labels `stream`, `shard`: Kinesis records received.
    pub(crate) const RECORDS: &str = "anthracite_kinesis_records_total";
    /// Counter, labels `stream`, `shard`: non-empty lines handed to the parser.
    pub(crate) const LINES: &str = "anthracite_kinesis_lines_total";
    /// Counter, labels `stream`, `shard`: record payload bytes received.
    pub(crate) const BYTES: &str = "anthracite_kinesis_bytes_total";
    /// Counter, labels `stream`, `shard`: ProvisionedThroughputExceeded answers.
    pub(crate) const THROTTLES: &str = "anthracite_kinesis_throttles_total";
    /// Counter, labels `stream`, `shard`: ExpiredIterator answers.
    pub(crate) const EXPIRED_ITERATORS: &str = "anthracite_kinesis_expired_iterators_total";
    /// Counter, labels `stream`, `shard`: records that were KPL aggregates.
    pub(crate) const KPL_AGGREGATED: &str = "anthracite_kinesis_kpl_aggregated_total";
    /// Counter, labels `stream`, `shard`: records with the KPL magic that were not valid
    /// aggregates (passed through as plain records).
    pub(crate) const KPL_CORRUPT: &str = "anthracite_kinesis_kpl_corrupt_total";
    /// Gauge, label `stream`: seconds since the last committed checkpoint.
    pub(crate) const CHECKPOINT_AGE: &str = "anthracite_kinesis_checkpoint_age_seconds";
    /// Gauge, label `stream`: shards being read.
    pub(crate) const ACTIVE_SHARDS: &str = "anthracite_kinesis_active_shards";
    /// Gauge, labels `stream`, `worker`: shard leases this worker holds (lease table mode).
    pub(crate) const LEASES_HELD: &str = "anthracite_kinesis_leases_held";
    /// Counter, labels `stream`, `worker`: unowned or expired leases this worker took.
    pub(crate) const LEASES_TAKEN: &str = "anthracite_kinesis_leases_taken_total";
    /// Counter, labels `stream`, `worker`: leases this worker took from a live worker to
    /// balance the fleet.
    pub(crate) const LEASES_STOLEN: &str = "anthracite_kinesis_leases_stolen_total";
    /// Counter, labels `stream`, `worker`: leases this worker lost (a renewal or checkpoint
    /// failed its condition, or no renewal succeeded for one lease duration).
    pub(crate) const LEASES_LOST: &str = "anthracite_kinesis_leases_lost_total";
}

/// Kafka source metrics (`metrics` facade). Labels: `group`, and `topic`, `partition` where
/// noted.
pub(crate) mod kafka {
    /// Gauge, labels `group`, `topic`, `partition`: messages between the group's committed
    /// offset and the partition's end (librdkafka's `consumer_lag`).
    pub(crate) const CONSUMER_LAG: &str = "anthracite_kafka_consumer_lag";
    /// Counter, labels `group`, `topic`, `partition`: messages read.
    pub(crate) const MESSAGES: &str = "anthracite_kafka_messages_total";
    /// Counter, labels `group`, `topic`, `partition`: non-empty lines (or pickle entries)
    /// handed to the parser.
    pub(crate) const LINES: &str = "anthracite_kafka_lines_total";
    /// Counter, labels `group`, `topic`, `partition`: message payload bytes read.
    pub(crate) const BYTES: &str = "anthracite_kafka_bytes_total";
    /// Gauge, labels `group`, `topic`, `partition`: seconds since the partition's last
    /// committed offset (since its assignment while nothing was committed).
    pub(crate) const COMMIT_AGE: &str = "anthracite_kafka_commit_age_seconds";
    /// Counter, labels `group`, `kind` (`assign`, `revoke`): rebalance events.
    pub(crate) const REBALANCES: &str = "anthracite_kafka_rebalances_total";
    /// Counter, label `group`: offset commits that succeeded.
    pub(crate) const COMMITS: &str = "anthracite_kafka_commits_total";
    /// Counter, labels `group`, `reason` (`not_graphite`, `bad_pickle`): messages that held
    /// no datapoint; their lines or entries are also counted as invalid datapoints.
    pub(crate) const BAD_MESSAGES: &str = "anthracite_kafka_bad_messages_total";
    /// Counter, label `group`: client errors (brokers unreachable, a missing topic, a failed
    /// commit).
    pub(crate) const ERRORS: &str = "anthracite_kafka_errors_total";
    /// Gauge, label `group`: partitions assigned to this relay.
    pub(crate) const ASSIGNED_PARTITIONS: &str = "anthracite_kafka_assigned_partitions";
}

/// The `# HELP` text of a `/metrics` series (one line; the doc comments above say more).
pub(crate) fn help(name: &str) -> &'static str {
    use {facade as f, kafka as kf, kinesis as k, process as p};
    match name {
        f::RECEIVED => "Datapoints accepted by a receiver, after parsing.",
        f::INVALID => "Lines, entries or frames rejected while parsing, per reason.",
        f::ROUTED => "Datapoints routed to a destination (carbon's attemptedRelays).",
        f::SENT => "Datapoints written to a destination and seen delivered.",
        f::BATCHES_SENT => "Pickle or line messages written to a destination.",
        f::DROPPED => "Datapoints dropped after routing, per reason.",
        f::QUEUE_DATAPOINTS => "Datapoints in the memory tier (waiting and in flight).",
        f::QUEUE_BYTES => "Bytes in the memory tier (waiting and in flight).",
        f::SPILLED_RECORDS => "Records written to the spill log.",
        f::SPILLED_DATAPOINTS => "Datapoints written to the spill log.",
        f::SPILLED_BYTES => "Bytes written to the spill log (names plus per-datapoint overhead).",
        f::REPLAYED_RECORDS => "Records replayed from the spill log.",
        f::REPLAYED_DATAPOINTS => "Datapoints replayed from the spill log.",
        f::REPLAYED_BYTES => "Bytes replayed from the spill log.",
        f::SPILL_QUEUE_DATAPOINTS => "Datapoints in the disk tier.",
        f::SPILL_DISK_BYTES => "Bytes of spill segment files on disk.",
        f::SPILL_OLDEST_AGE => "Age of the oldest record in the spill log.",
        f::SPILL_DAMAGED_SEGMENTS => "Torn or corrupt spill segments found.",
        f::SPILL_IO_ERRORS => "I/O errors of the spill log.",
        f::DESTINATION_CONNECTED => "1 while the destination is connected.",
        f::DESTINATION_CONNECT_FAILURES => "Failed connection attempts and lost connections.",
        f::DESTINATION_WRITE_TIMEOUTS => "Connections declared dead by the write timeout.",
        f::DESTINATION_FULL_WAITS => {
            "Batches whose producers waited for room in the full memory tier (full_wait_ms)."
        }
        f::DESTINATION_OVERFLOWS => {
            "Batches a full memory tier's policy (spill or drop) applied to, per cause."
        }
        f::CONNECTIONS_ACTIVE => "Open client connections.",
        f::CONNECTIONS_REJECTED => "Client connections refused at the connection limit.",
        f::CONNECTIONS_IDLE_CLOSED => "Client connections closed by the idle timeout.",
        f::TLS_HANDSHAKE_FAILURES => "TLS handshakes on the receivers that failed or timed out.",
        f::ADMIN_EVICTED => "Admin connections closed to admit a new one at the admin limit.",
        f::ADMIN_REFUSED => "Admin connections refused at the admin limit.",
        f::BLACKLIST_MATCHES => "Datapoints dropped by the blacklist.",
        f::WHITELIST_REJECTS => "Datapoints dropped for not being on the whitelist.",
        f::QUEUED_UNTIL_CONNECTED => "Datapoints routed while the destination was not connected.",
        f::CONFIG_RELOADS => "Configuration reloads, applied or rejected.",
        f::READY => "1 while the relay is ready (every listener bound, not shutting down).",
        f::BUILD_INFO => "Version and Cargo features of this build (always 1).",
        f::AGGREGATOR_SENT => "Aggregates computed and sent (aggregateDatapointsSent).",
        f::AGGREGATOR_SERIES => "Aggregation output series held (allocatedBuffers).",
        f::AGGREGATOR_BUFFERED => "Values in open aggregation intervals (bufferedDatapoints).",
        f::AGGREGATOR_DROPPED => "Datapoints not aggregated at the memory bound, per reason.",
        f::AGGREGATOR_MISSES => "Datapoints no aggregation rule matched.",
        f::AGGREGATOR_RULE_RELOADS => "Reloads of the aggregation and rewrite rules.",
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
        k::LEASES_LOST => "Shard leases this worker lost.",
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
        p::RESIDENT_MEMORY => "Resident memory size in bytes.",
        p::CPU_SECONDS => "User and system CPU time spent, in seconds.",
        p::OPEN_FDS => "Open file descriptors.",
        p::MAX_FDS => "Limit on open file descriptors.",
        p::START_TIME => "Start time of the process since the Unix epoch, in seconds.",
        _ => "anthracite self-metric (see src/telemetry/names.rs).",
    }
}
