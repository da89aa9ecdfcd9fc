//! The relay's own and its destinations' [`Component`]s, built from a [`StatsSnapshot`] for
//! both outputs: the carbon datapoints of the [reporter](super::reporter)
//! (`<prefix>.relays.<host>-<instance>.*`) and the Prometheus text of `GET /metrics`
//! ([`prometheus`](super::prometheus)). The vocabulary ([`Figure`], [`Component`]) is
//! [`crate::figure`].

use super::snapshot::StatsSnapshot;
use crate::figure::{Component, Figure, destination_component, path_component};
use crate::ingest::Source;
use crate::metric_names::{carbon as leaf, facade};
use crate::protocol::DropReason;
use crate::queue::{DestinationDropReason, DestinationSnapshot, OverflowCause};
use crate::router::DestinationSpec;

/// The relay-wide figures: what the receivers took and rejected, per source, and the lists.
pub(crate) fn relay_component(s: &StatsSnapshot) -> Component {
    let mut figures = Vec::new();
    for src in &s.ingest.sources {
        let label = || vec![("source", src.source.as_str().to_string())];
        let mut received = Figure::counter(src.received).series(facade::RECEIVED, label());
        // carbon's metricsReceived counts what clients sent, not the relay's own metrics.
        if src.source != Source::Internal {
            received = received.carbon(leaf::METRICS_RECEIVED);
        }
        figures.push(received);
        figures.push(
            Figure::gauge(src.active as f64)
                .series(facade::CONNECTIONS_ACTIVE, label())
                .carbon(leaf::ACTIVE_CONNECTIONS),
        );
        figures.push(Figure::counter(src.rejected).series(facade::CONNECTIONS_REJECTED, label()));
        figures.push(
            Figure::counter(src.idle_closed).series(facade::CONNECTIONS_IDLE_CLOSED, label()),
        );
        figures.push(Figure::counter(src.evicted).series(facade::CONNECTIONS_EVICTED, label()));
        figures.push(Figure::counter(src.accept_errors).series(facade::ACCEPT_ERRORS, label()));
        figures.push(
            Figure::counter(src.tls_handshake_failures)
                .series(facade::TLS_HANDSHAKE_FAILURES, label()),
        );
        for reason in DropReason::ALL {
            figures.push(
                Figure::counter(src.invalid.get(reason))
                    .series(
                        facade::INVALID,
                        vec![
                            ("source", src.source.as_str().to_string()),
                            ("reason", reason.as_str().to_string()),
                        ],
                    )
                    .carbon(format!("{}.{}", leaf::INVALID_DATAPOINTS, reason.as_str())),
            );
        }
    }
    figures.push(
        Figure::counter(s.ingest.blacklist_matches)
            .series(facade::BLACKLIST_MATCHES, Vec::new())
            .carbon(leaf::BLACKLIST_MATCHES),
    );
    figures.push(
        Figure::counter(s.ingest.whitelist_rejects)
            .series(facade::WHITELIST_REJECTS, Vec::new())
            .carbon(leaf::WHITELIST_REJECTS),
    );
    figures.push(
        Figure::counter(s.ingest.udp_kernel_drops)
            .series(facade::UDP_KERNEL_DROPS, Vec::new())
            .carbon(leaf::UDP_KERNEL_DROPS),
    );
    figures.push(
        Figure::gauge(s.ingest.buffered_bytes as f64)
            .series(facade::RECEIVE_BUFFER_BYTES, Vec::new()),
    );
    for (result, n) in [
        ("applied", s.reloads.applied),
        ("rejected", s.reloads.rejected),
    ] {
        figures.push(
            Figure::counter(n)
                .series(facade::CONFIG_RELOADS, vec![("result", result.to_string())])
                .carbon(format!("{}.{result}", leaf::CONFIG_RELOADS)),
        );
    }
    Component {
        path: String::new(),
        figures,
    }
}

/// The carbon path of a destination named `host:port:instance`.
pub(crate) fn destination_path(name: &str) -> String {
    let component = match DestinationSpec::parse(name) {
        Ok(spec) => destination_component(&spec.host, spec.port, spec.instance.as_deref()),
        Err(_) => path_component(name),
    };
    format!("destinations.{component}")
}

/// One destination's figures: carbon's destination counters, the queue tiers, drops per
/// reason, the connection.
pub(crate) fn destination_figures(d: &DestinationSnapshot) -> Component {
    let label = || vec![("destination", d.name.clone())];
    let sp = &d.spill;
    let mut figures = vec![
        Figure::counter(d.routed)
            .series(facade::ROUTED, label())
            .carbon(leaf::ATTEMPTED_RELAYS),
        Figure::counter(d.sent)
            .series(facade::SENT, label())
            .carbon(leaf::SENT),
        Figure::counter(d.messages)
            .series(facade::BATCHES_SENT, label())
            .carbon(leaf::BATCHES_SENT),
        Figure::counter(d.queued_until_connected)
            .series(facade::QUEUED_UNTIL_CONNECTED, label())
            .carbon(leaf::QUEUED_UNTIL_CONNECTED),
        Figure::counter(d.dropped(DestinationDropReason::QueueFull)).carbon(leaf::FULL_QUEUE_DROPS),
        Figure::gauge(d.queued_memory as f64).series(facade::QUEUE_DATAPOINTS, label()),
        Figure::gauge(sp.memory_bytes as f64).series(facade::QUEUE_BYTES, label()),
        Figure::counter(sp.spilled_records).series(facade::SPILLED_RECORDS, label()),
        Figure::counter(sp.spilled_datapoints)
            .series(facade::SPILLED_DATAPOINTS, label())
            .carbon(leaf::SPILLED_DATAPOINTS),
        Figure::counter(sp.spilled_bytes).series(facade::SPILLED_BYTES, label()),
        Figure::counter(sp.replayed_records).series(facade::REPLAYED_RECORDS, label()),
        Figure::counter(sp.replayed_datapoints)
            .series(facade::REPLAYED_DATAPOINTS, label())
            .carbon(leaf::REPLAYED_DATAPOINTS),
        Figure::counter(sp.replayed_bytes).series(facade::REPLAYED_BYTES, label()),
        Figure::gauge(d.queued_disk as f64)
            .series(facade::SPILL_QUEUE_DATAPOINTS, label())
            .carbon(leaf::SPILL_QUEUE_DATAPOINTS),
        Figure::gauge(sp.disk_bytes as f64)
            .series(facade::SPILL_DISK_BYTES, label())
            .carbon(leaf::SPILL_DISK_BYTES),
        Figure::gauge(sp.oldest_age_ms as f64 / 1000.0)
            .series(facade::SPILL_OLDEST_AGE, label())
            .carbon(leaf::SPILL_OLDEST_AGE_SECONDS),
        Figure::counter(sp.damaged_segments).series(facade::SPILL_DAMAGED_SEGMENTS, label()),
        Figure::counter(sp.io_errors).series(facade::SPILL_IO_ERRORS, label()),
        Figure::gauge(if d.connected { 1.0 } else { 0.0 })
            .series(facade::DESTINATION_CONNECTED, label())
            .carbon(leaf::CONNECTED),
        Figure::counter(d.connect_failures).series(facade::DESTINATION_CONNECT_FAILURES, label()),
        Figure::counter(d.write_timeouts)
            .series(facade::DESTINATION_WRITE_TIMEOUTS, label())
            .carbon(leaf::WRITE_TIMEOUTS),
        Figure::counter(d.full_waits)
            .series(facade::DESTINATION_FULL_WAITS, label())
            .carbon(leaf::FULL_WAITS),
    ];
    for (direction, n) in [("out", d.moved_out), ("in", d.moved_in)] {
        figures.push(
            Figure::counter(n)
                .series(
                    facade::MOVED,
                    vec![
                        ("destination", d.name.clone()),
                        ("direction", direction.to_string()),
                    ],
                )
                .carbon(format!("{}.{direction}", leaf::MOVED_DATAPOINTS)),
        );
    }
    for cause in OverflowCause::ALL {
        figures.push(
            Figure::counter(d.overflows[cause as usize])
                .series(
                    facade::DESTINATION_OVERFLOWS,
                    vec![
                        ("destination", d.name.clone()),
                        ("cause", cause.as_str().to_string()),
                    ],
                )
                .carbon(format!("{}.{}", leaf::OVERFLOWS, cause.as_str())),
        );
    }
    for reason in DestinationDropReason::ALL {
        figures.push(
            Figure::counter(d.dropped(reason))
                .series(
                    facade::DROPPED,
                    vec![
                        ("destination", d.name.clone()),
                        ("reason", reason.as_str().to_string()),
                    ],
                )
                .carbon(format!("{}.{}", leaf::DROPPED_DATAPOINTS, reason.as_str())),
        );
    }
    Component {
        path: destination_path(&d.name),
        figures,
    }
}

/// Every component of a snapshot: the relay, then each destination in ring order, then the
/// removed destinations that still hold data.
pub(crate) fn components(s: &StatsSnapshot) -> Vec<Component> {
    let mut out = Vec::with_capacity(1 + s.destinations.len() + s.removed.len());
    out.push(relay_component(s));
    out.extend(
        s.destinations
            .iter()
            .chain(&s.removed)
            .map(destination_figures),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destination_component_matches_carbon() {
        assert_eq!(
            destination_component("127.0.0.1", 2104, Some("a")),
            "127_0_0_1:2104:a"
        );
        assert_eq!(
            destination_component("cache.example.com", 2004, None),
            "cache_example_com:2004:None"
        );
        assert_eq!(
            destination_path("127.0.0.1:2104:a"),
            "destinations.127_0_0_1:2104:a"
        );
        assert_eq!(destination_path("[::1]:2104:a"), "destinations.::1:2104:a");
    }
}
