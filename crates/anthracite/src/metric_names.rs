//! Every self-metric name, in one place. Code never spells a metric name inline.

/// `metrics` facade names (Prometheus style). Labels are listed per name.
pub mod facade {
    /// Counter, label `source`: datapoints accepted by a receiver (after parsing).
    pub const RECEIVED: &str = "anthracite_received_datapoints_total";
    /// Counter, labels `source`, `reason`: lines, entries or frames rejected while parsing.
    pub const INVALID: &str = "anthracite_invalid_datapoints_total";
    /// Counter, label `destination`: datapoints routed to a destination (carbon's
    /// `attemptedRelays`).
    pub const ROUTED: &str = "anthracite_routed_datapoints_total";
    /// Counter, label `destination`: datapoints written to a destination's socket.
    pub const SENT: &str = "anthracite_sent_datapoints_total";
    /// Counter, label `destination`: pickle or line messages written.
    pub const BATCHES_SENT: &str = "anthracite_sent_messages_total";
    /// Counter, labels `destination`, `reason`: datapoints dropped after routing.
    pub const DROPPED: &str = "anthracite_dropped_datapoints_total";
    /// Counter, labels `destination`, `direction` (`out`, `in`): datapoints handed from one
    /// destination's queue to another's (a member of a carbon-c-relay `any_of` or `failover`
    /// cluster that is down gives its queued lines to the others).
    pub const MOVED: &str = "anthracite_moved_datapoints_total";
    /// Gauge, label `destination`: datapoints waiting in the destination's queue.
    pub const QUEUE_DATAPOINTS: &str = "anthracite_queue_datapoints";
    /// Gauge, label `destination`: bytes waiting in the destination's queue.
    pub const QUEUE_BYTES: &str = "anthracite_queue_bytes";
    /// Counter, label `destination`: batches (records) written to the spill log.
    pub const SPILLED_RECORDS: &str = "anthracite_spilled_records_total";
    /// Counter, label `destination`: datapoints written to the spill log.
    pub const SPILLED_DATAPOINTS: &str = "anthracite_spilled_datapoints_total";
    /// Counter, label `destination`: bytes written to the spill log (names plus fixed
    /// per-datapoint overhead, like the memory bound).
    pub const SPILLED_BYTES: &str = "anthracite_spilled_bytes_total";
    /// Counter, label `destination`: records replayed from the spill log.
    pub const REPLAYED_RECORDS: &str = "anthracite_replayed_records_total";
    /// Counter, label `destination`: datapoints replayed from the spill log.
    pub const REPLAYED_DATAPOINTS: &str = "anthracite_replayed_datapoints_total";
    /// Counter, label `destination`: bytes replayed (measured like `SPILLED_BYTES`).
    pub const REPLAYED_BYTES: &str = "anthracite_replayed_bytes_total";
    /// Gauge, label `destination`: datapoints in the disk tier.
    pub const SPILL_QUEUE_DATAPOINTS: &str = "anthracite_spill_queue_datapoints";
    /// Gauge, label `destination`: bytes of spill segment files on disk.
    pub const SPILL_DISK_BYTES: &str = "anthracite_spill_disk_bytes";
    /// Gauge, label `destination`: age in seconds of the oldest record on disk.
    pub const SPILL_OLDEST_AGE: &str = "anthracite_spill_oldest_record_age_seconds";
    /// Counter, label `destination`: torn or corrupt spill segments found.
    pub const SPILL_DAMAGED_SEGMENTS: &str = "anthracite_spill_damaged_segments_total";
    /// Counter, label `destination`: I/O errors of the spill log.
    pub const SPILL_IO_ERRORS: &str = "anthracite_spill_io_errors_total";
    /// Gauge, label `destination`: 1 when connected.
    pub const DESTINATION_CONNECTED: &str = "anthracite_destination_connected";
    /// Counter, label `destination`: connection attempts that failed or connections lost.
    pub const DESTINATION_CONNECT_FAILURES: &str = "anthracite_destination_connect_failures_total";
    /// Gauge, label `source`: open client connections.
    pub const CONNECTIONS_ACTIVE: &str = "anthracite_connections_active";
    /// Counter, label `source`: connections refused because the limit was reached.
    pub const CONNECTIONS_REJECTED: &str = "anthracite_connections_rejected_total";
    /// Counter: datapoints dropped because their name matched the blacklist (carbon's
    /// `blacklistMatches`).
    pub const BLACKLIST_MATCHES: &str = "anthracite_blacklist_matches_total";
    /// Counter: datapoints dropped because their name was not on the whitelist (carbon's
    /// `whitelistRejects`).
    pub const WHITELIST_REJECTS: &str = "anthracite_whitelist_rejects_total";
    /// Counter, label `destination`: datapoints routed while it was not connected (carbon's
    /// `queuedUntilConnected`).
    pub const QUEUED_UNTIL_CONNECTED: &str = "anthracite_queued_until_connected_total";
    /// Counter, label `source`: connections closed by the idle timeout.
    pub const CONNECTIONS_IDLE_CLOSED: &str = "anthracite_connections_idle_closed_total";
    /// Counter, label `destination`: connections declared dead because a write made no
    /// progress for `destinations.write_timeout_ms` (a hung peer).
    pub const DESTINATION_WRITE_TIMEOUTS: &str = "anthracite_destination_write_timeouts_total";
    /// Counter, label `destination`: batches whose producers waited for room in a full memory
    /// tier under `destinations.queue.full_wait_ms` (back-pressure on the clients).
    pub const DESTINATION_FULL_WAITS: &str = "anthracite_destination_full_waits_total";
    /// Counter, labels `destination`, `cause` (`down`, `behind`, `no_wait`): batches a full
    /// memory tier's policy (spill or drop) applied to, by why their producer was not held
    /// back.
    pub const DESTINATION_OVERFLOWS: &str = "anthracite_destination_overflows_total";
    /// Counter, label `result` (`applied`, `rejected`): configuration reloads (SIGHUP).
    pub const CONFIG_RELOADS: &str = "anthracite_config_reloads_total";
    /// Gauge: 1 while the relay is ready (what `/ready` answers 200 for), 0 while it starts or
    /// shuts down.
    pub const READY: &str = "anthracite_ready";
    /// Gauge, labels `version`, `features`: always 1; the build's version and Cargo features.
    pub const BUILD_INFO: &str = "anthracite_build_info";
    /// Counter, label `source`: idle connections closed to admit a new one at the limit.
    pub const CONNECTIONS_EVICTED: &str = "anthracite_connections_evicted_total";
    /// Counter, label `source`: failed `accept` calls (out of file descriptors, …).
    pub const ACCEPT_ERRORS: &str = "anthracite_accept_errors_total";
    /// Counter, label `source`: TLS handshakes on the receivers that failed, timed out or were
    /// closed to admit another connection.
    pub const TLS_HANDSHAKE_FAILURES: &str = "anthracite_tls_handshake_failures_total";
    /// Counter: admin connections closed to admit a new one at the admin connection limit
    /// (the one silent the longest).
    pub const ADMIN_EVICTED: &str = "anthracite_admin_connections_evicted_total";
    /// Counter: admin connections refused (the limit reached and none silent long enough).
    pub const ADMIN_REFUSED: &str = "anthracite_admin_connections_refused_total";
    /// Gauge: bytes held by client connections' read buffers and pickle decoders.
    pub const RECEIVE_BUFFER_BYTES: &str = "anthracite_receive_buffer_bytes";
    /// Counter: datagrams the kernel dropped on the UDP socket because its receive buffer was
    /// full (`SO_RXQ_OVFL`).
    pub const UDP_KERNEL_DROPS: &str = "anthracite_udp_kernel_drops_total";
    /// Counter: aggregates computed and sent (carbon's `aggregateDatapointsSent`).
    pub const AGGREGATOR_SENT: &str = "anthracite_aggregator_sent_datapoints_total";
    /// Gauge: output series held (carbon's `allocatedBuffers`).
    pub const AGGREGATOR_SERIES: &str = "anthracite_aggregator_series";
    /// Gauge: values in open intervals (carbon's `bufferedDatapoints`).
    pub const AGGREGATOR_BUFFERED: &str = "anthracite_aggregator_buffered_datapoints";
    /// Counter, label `reason` (`series_limit`, `values_limit`, `intervals_limit`): datapoints
    /// not aggregated
    /// at the aggregator's memory bound.
    pub const AGGREGATOR_DROPPED: &str = "anthracite_aggregator_dropped_total";
    /// Counter: datapoints no aggregation rule matched.
    pub const AGGREGATOR_MISSES: &str = "anthracite_aggregator_misses_total";
    /// Counter, label `effect` (`rule_skipped`, `datapoint_stopped`): datapoints that met an
    /// aggregation rule whose output template carbon's formatting raises on.
    pub const AGGREGATOR_TEMPLATE_FAILURES: &str = "anthracite_aggregator_template_failures_total";
    /// Counter, label `result` (`applied`, `rejected`): reloads of the aggregation and
    /// rewrite rule files.
    pub const AGGREGATOR_RULE_RELOADS: &str = "anthracite_aggregator_rule_reloads_total";
    /// Counter: starts that found a checkpoint instead of a final state (the previous run
    /// ended without writing its state, e.g. SIGKILL, while it held open intervals).
    pub const AGGREGATOR_UNCLEAN_RESTARTS: &str = "anthracite_aggregator_unclean_restarts_total";
    /// Counter: open intervals restored from a checkpoint (each lacks what the previous run
    /// aggregated after the checkpoint).
    pub const AGGREGATOR_CHECKPOINT_RESTORED_INTERVALS: &str =
        "anthracite_aggregator_checkpoint_restored_intervals_total";
    /// Counter, label `result` (`written`, `failed`): periodic checkpoints of the open
    /// intervals.
    pub const AGGREGATOR_CHECKPOINTS: &str = "anthracite_aggregator_checkpoints_total";
    /// Gauge, labels `cluster`, `type`: members of a carbon-c-relay cluster (its
    /// destinations; a member named twice counts twice).
    pub const C_RELAY_CLUSTER_MEMBERS: &str = "anthracite_c_relay_cluster_members";
    /// Gauge, labels `cluster`, `type`: members of a carbon-c-relay cluster that are up (not
    /// failing).
    pub const C_RELAY_CLUSTER_MEMBERS_UP: &str = "anthracite_c_relay_cluster_members_up";
    /// Gauge, labels `cluster`, `type`, `member` (the destination): 1 per member, to join a
    /// cluster with its members' destination series.
    pub const C_RELAY_CLUSTER_MEMBER: &str = "anthracite_c_relay_cluster_member";
    /// Gauge, labels `cluster`, `type`: datapoints queued for the cluster's members, memory
    /// and disk.
    pub const C_RELAY_CLUSTER_QUEUED: &str = "anthracite_c_relay_cluster_queued_datapoints";
    /// Gauge, labels `cluster`, `type`: datapoints in the cluster's members' spill logs.
    pub const C_RELAY_CLUSTER_SPILLED: &str = "anthracite_c_relay_cluster_spill_datapoints";
    /// Counter, labels `cluster`, `type`: datapoints its members dropped (every reason).
    pub const C_RELAY_CLUSTER_DROPPED: &str = "anthracite_c_relay_cluster_dropped_datapoints_total";
    /// Counter, labels `cluster`, `type`: datapoints its members' queues handed to other
    /// members' queues (a member down, or an `any_of` member's queue nearly full).
    pub const C_RELAY_CLUSTER_MOVED: &str = "anthracite_c_relay_cluster_moved_datapoints_total";
    /// Gauge: open series of a carbon-c-relay configuration's aggregations.
    pub const C_RELAY_AGGREGATION_SERIES: &str = "anthracite_c_relay_aggregation_series";
    /// Counter, label `reason` (`out_of_window`, `series_limit`, `values_limit`): datapoints a
    /// carbon-c-relay aggregation dropped: outside its buckets or in one written
    /// (carbon-c-relay's `metricsDropped`), or past the open series or kept values bound.
    pub const C_RELAY_AGGREGATION_DROPPED: &str = "anthracite_c_relay_aggregation_dropped_total";
}

/// Process series in `/metrics`, with the names Prometheus client libraries use.
pub mod process {
    /// Gauge: resident set size in bytes (`VmRSS`).
    pub const RESIDENT_MEMORY: &str = "process_resident_memory_bytes";
    /// Gauge (fractional seconds, so not a `metrics` counter): user + system CPU time.
    pub const CPU_SECONDS: &str = "process_cpu_seconds_total";
    /// Gauge: open file descriptors.
    pub const OPEN_FDS: &str = "process_open_fds";
    /// Gauge: the soft limit on open file descriptors.
    pub const MAX_FDS: &str = "process_max_fds";
    /// Gauge: when the process started, in seconds since the Unix epoch.
    pub const START_TIME: &str = "process_start_time_seconds";
}

/// Leaf names of the datapoints the relay emits about itself into the stream, under
/// `<prefix>.relays.<host>-<instance>.` (carbon's names, same meaning: per-interval counts).
pub mod carbon {
    /// Datapoints received in the interval.
    pub const METRICS_RECEIVED: &str = "metricsReceived";
    /// Aggregator: aggregates sent in the interval (carbon's name).
    pub const AGGREGATE_DATAPOINTS_SENT: &str = "aggregateDatapointsSent";
    /// Aggregator: output series held (carbon's name).
    pub const ALLOCATED_BUFFERS: &str = "allocatedBuffers";
    /// Aggregator: values in open intervals (carbon's name).
    pub const BUFFERED_DATAPOINTS: &str = "bufferedDatapoints";
    /// Aggregator: datapoints not aggregated because `max_series` was reached (anthracite).
    pub const AGGREGATE_DROPPED_SERIES_LIMIT: &str = "aggregateDatapointsDropped.series_limit";
    /// Aggregator: datapoints not aggregated because `max_values` was reached (anthracite).
    pub const AGGREGATE_DROPPED_VALUES_LIMIT: &str = "aggregateDatapointsDropped.values_limit";
    /// Aggregator: datapoints not aggregated because `max_intervals_held` was reached
    /// (anthracite).
    pub const AGGREGATE_DROPPED_INTERVALS_LIMIT: &str =
        "aggregateDatapointsDropped.intervals_limit";
    /// Aggregator: datapoints no rule matched in the interval (anthracite).
    pub const AGGREGATOR_MISSES: &str = "aggregatorMisses";
    /// Aggregator: datapoints an aggregation rule yielded nothing for, its output template
    /// raising a `TypeError` (anthracite).
    pub const AGGREGATOR_TEMPLATE_RULE_SKIPPED: &str = "aggregateTemplateFailures.rule_skipped";
    /// Aggregator: datapoints stopped at an aggregation rule, its output template raising a
    /// `KeyError` or `ValueError` (anthracite).
    pub const AGGREGATOR_TEMPLATE_DATAPOINT_STOPPED: &str =
        "aggregateTemplateFailures.datapoint_stopped";
    /// Aggregator: starts that restored a checkpoint, not a final state (anthracite).
    pub const AGGREGATOR_UNCLEAN_RESTARTS: &str = "aggregatorUncleanRestarts";
    /// Aggregator: open intervals restored from a checkpoint (anthracite).
    pub const AGGREGATOR_CHECKPOINT_RESTORED_INTERVALS: &str = "checkpointRestoredIntervals";
    /// Aggregator: checkpoints written in the interval (anthracite).
    pub const AGGREGATOR_CHECKPOINTS_WRITTEN: &str = "checkpoints.written";
    /// Aggregator: checkpoints that failed in the interval (anthracite).
    pub const AGGREGATOR_CHECKPOINTS_FAILED: &str = "checkpoints.failed";
    /// Open client connections.
    pub const ACTIVE_CONNECTIONS: &str = "activeConnections";
    /// Datapoints dropped by the blacklist in the interval.
    pub const BLACKLIST_MATCHES: &str = "blacklistMatches";
    /// Datapoints dropped for not being on the whitelist in the interval.
    pub const WHITELIST_REJECTS: &str = "whitelistRejects";
    /// Process CPU time over wall time in the interval, in percent (user + system, carbon's
    /// `getrusage(RUSAGE_SELF)` formula).
    pub const CPU_USAGE: &str = "cpuUsage";
    /// Resident set size in bytes (carbon: `/proc/self/statm` pages × page size).
    pub const MEM_USAGE: &str = "memUsage";
    /// Per destination, under `destinations.<dest>.`: datapoints routed to it.
    pub const ATTEMPTED_RELAYS: &str = "attemptedRelays";
    /// Per destination: datapoints written.
    pub const SENT: &str = "sent";
    /// Per destination: messages written.
    pub const BATCHES_SENT: &str = "batchesSent";
    /// Per destination: datapoints routed to it while it was not connected.
    pub const QUEUED_UNTIL_CONNECTED: &str = "queuedUntilConnected";
    /// Per destination: datapoints dropped because its queue was full.
    pub const FULL_QUEUE_DROPS: &str = "fullQueueDrops";
    /// Per destination: datapoints waiting (memory queue), sampled at report time.
    pub const RELAY_MAX_QUEUE_LENGTH: &str = "relayMaxQueueLength";
    /// anthracite extra, relay-wide, under `invalidDatapoints.<reason>`: datapoints rejected
    /// by the parsers in the interval, per reason (every reason, zeros included).
    pub const INVALID_DATAPOINTS: &str = "invalidDatapoints";
    /// Per destination: datapoints written to its spill log in the interval.
    pub const SPILLED_DATAPOINTS: &str = "spilledDatapoints";
    /// Per destination: datapoints replayed from its spill log in the interval.
    pub const REPLAYED_DATAPOINTS: &str = "replayedDatapoints";
    /// Per destination: datapoints in the disk tier, sampled at report time.
    pub const SPILL_QUEUE_DATAPOINTS: &str = "spillQueueDatapoints";
    /// Per destination: bytes of spill segment files, sampled at report time.
    pub const SPILL_DISK_BYTES: &str = "spillDiskBytes";
    /// Per destination: age of the oldest spilled record in seconds, sampled at report time.
    pub const SPILL_OLDEST_AGE_SECONDS: &str = "spillOldestAgeSeconds";
    /// Per destination, under `droppedDatapoints.<reason>`: datapoints dropped after routing
    /// in the interval, per reason (every reason, zeros included).
    pub const DROPPED_DATAPOINTS: &str = "droppedDatapoints";
    /// Per destination: 1 while connected, sampled at report time.
    pub const CONNECTED: &str = "connected";
    /// Per destination: connections declared dead by the write timeout in the interval.
    pub const WRITE_TIMEOUTS: &str = "writeTimeouts";
    /// Per destination: batches held back by the full wait in the interval.
    pub const FULL_WAITS: &str = "fullWaits";
    /// Per destination, under `movedDatapoints.<out|in>`: datapoints handed to or from another
    /// member's queue of a carbon-c-relay cluster in the interval.
    pub const MOVED_DATAPOINTS: &str = "movedDatapoints";
    /// Per destination, under `overflows.<cause>`: batches the full policy applied to in the
    /// interval.
    pub const OVERFLOWS: &str = "overflows";
    /// Relay-wide, under `configReloads.<result>`: reloads applied / rejected in the interval.
    pub const CONFIG_RELOADS: &str = "configReloads";
    /// anthracite extra: UDP datagrams the kernel dropped in the interval (socket buffer full).
    pub const UDP_KERNEL_DROPS: &str = "udpKernelDrops";
}

/// The `# HELP` text of a `/metrics` series (one line; the doc comments above say more).
pub fn help(name: &str) -> &'static str {
    use {facade as f, process as p};
    match name {
        f::RECEIVED => "Datapoints accepted by a receiver, after parsing.",
        f::INVALID => "Lines, entries or frames rejected while parsing, per reason.",
        f::ROUTED => "Datapoints routed to a destination (carbon's attemptedRelays).",
        f::SENT => "Datapoints written to a destination and seen delivered.",
        f::BATCHES_SENT => "Pickle or line messages written to a destination.",
        f::DROPPED => "Datapoints dropped after routing, per reason.",
        f::MOVED => "Datapoints handed from one destination's queue to another's (out, in).",
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
        f::C_RELAY_CLUSTER_MEMBERS => "Members of a carbon-c-relay cluster.",
        f::C_RELAY_CLUSTER_MEMBERS_UP => "Members of a carbon-c-relay cluster that are up.",
        f::C_RELAY_CLUSTER_MEMBER => "1 per member of a carbon-c-relay cluster (join key).",
        f::C_RELAY_CLUSTER_QUEUED => "Datapoints queued for a cluster's members (memory and disk).",
        f::C_RELAY_CLUSTER_SPILLED => "Datapoints in a cluster's members' spill logs.",
        f::C_RELAY_CLUSTER_DROPPED => "Datapoints a cluster's members dropped, every reason.",
        f::C_RELAY_CLUSTER_MOVED => "Datapoints a cluster's members handed to other members.",
        f::C_RELAY_AGGREGATION_SERIES => "Open series of the carbon-c-relay aggregations.",
        f::C_RELAY_AGGREGATION_DROPPED => {
            "Datapoints a carbon-c-relay aggregation dropped, per reason."
        }
        f::AGGREGATOR_SENT => "Aggregates computed and sent (aggregateDatapointsSent).",
        f::AGGREGATOR_SERIES => "Aggregation output series held (allocatedBuffers).",
        f::AGGREGATOR_BUFFERED => "Values in open aggregation intervals (bufferedDatapoints).",
        f::AGGREGATOR_DROPPED => "Datapoints not aggregated at the memory bound, per reason.",
        f::AGGREGATOR_MISSES => "Datapoints no aggregation rule matched.",
        f::AGGREGATOR_TEMPLATE_FAILURES => {
            "Datapoints that met an aggregation rule whose output template carbon's formatting raises on, per effect."
        }
        f::AGGREGATOR_RULE_RELOADS => "Reloads of the aggregation and rewrite rules.",
        f::AGGREGATOR_UNCLEAN_RESTARTS => {
            "Starts that restored a checkpoint: the previous run did not write its final state."
        }
        f::AGGREGATOR_CHECKPOINT_RESTORED_INTERVALS => {
            "Open intervals restored from a checkpoint (missing what came after it)."
        }
        f::AGGREGATOR_CHECKPOINTS => "Checkpoints of the open aggregation intervals, per result.",
        p::RESIDENT_MEMORY => "Resident memory size in bytes.",
        p::CPU_SECONDS => "User and system CPU time spent, in seconds.",
        p::OPEN_FDS => "Open file descriptors.",
        p::MAX_FDS => "Limit on open file descriptors.",
        p::START_TIME => "Start time of the process since the Unix epoch, in seconds.",
        _ => "anthracite self-metric.",
    }
}
