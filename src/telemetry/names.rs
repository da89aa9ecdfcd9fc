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
    /// Gauge, label `destination`: datapoints waiting in the destination's queue.
    pub const QUEUE_DATAPOINTS: &str = "anthracite_queue_datapoints";
    /// Gauge, label `destination`: bytes waiting in the destination's queue.
    pub const QUEUE_BYTES: &str = "anthracite_queue_bytes";
    /// Gauge, label `destination`: 1 when connected.
    pub const DESTINATION_CONNECTED: &str = "anthracite_destination_connected";
    /// Counter, label `destination`: connection attempts that failed or connections lost.
    pub const DESTINATION_CONNECT_FAILURES: &str = "anthracite_destination_connect_failures_total";
    /// Gauge, label `source`: open client connections.
    pub const CONNECTIONS_ACTIVE: &str = "anthracite_connections_active";
    /// Counter, label `source`: connections refused because the limit was reached.
    pub const CONNECTIONS_REJECTED: &str = "anthracite_connections_rejected_total";
    /// Counter, label `source`: connections closed by the idle timeout.
    pub const CONNECTIONS_IDLE_CLOSED: &str = "anthracite_connections_idle_closed_total";
}

/// Leaf names of the datapoints the relay emits about itself into the stream, under
/// `<prefix>.relays.<host>-<instance>.` (carbon's names, same meaning: per-interval counts).
pub mod carbon {
    /// Datapoints received in the interval.
    pub const METRICS_RECEIVED: &str = "metricsReceived";
    /// Open client connections.
    pub const ACTIVE_CONNECTIONS: &str = "activeConnections";
    /// Per destination, under `destinations.<dest>.`: datapoints routed to it.
    pub const ATTEMPTED_RELAYS: &str = "attemptedRelays";
    /// Per destination: datapoints written.
    pub const SENT: &str = "sent";
    /// Per destination: messages written.
    pub const BATCHES_SENT: &str = "batchesSent";
    /// Per destination: datapoints dropped because its queue was full.
    pub const FULL_QUEUE_DROPS: &str = "fullQueueDrops";
    /// Per destination: datapoints waiting (memory queue), sampled at report time.
    pub const RELAY_MAX_QUEUE_LENGTH: &str = "relayMaxQueueLength";
    /// anthracite extra: datapoints rejected by the parsers in the interval.
    pub const INVALID_DATAPOINTS: &str = "invalidDatapoints";
}
