//! `GET /metrics`: the relay's [figures](super::components) as Prometheus text, through
//! `metrics-exporter-prometheus`.
//!
//! Each scrape builds a recorder of its own ([`PrometheusBuilder::build_recorder`]), never
//! installed as the process's global recorder: the figures are registered against it, set to
//! the values of one snapshot of the books, and rendered. So:
//!
//! - the data path pays nothing for `/metrics`: its counters are the same atomics it already
//!   updates once per batch (and the `metrics` facade handles, for whatever recorder an
//!   embedding program installed, which keeps receiving every series as before);
//! - two relays in one process each render their own books;
//! - a destination removed by a reload disappears from the next scrape once it holds nothing.

use metrics::{Key, Label, Metadata, Recorder};
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::figure::{Figure, Kind};
use crate::metric_names as names;

/// Renders `figures` as Prometheus text exposition (format 0.0.4).
pub(crate) fn render<'a>(figures: impl IntoIterator<Item = &'a Figure>) -> String {
    let recorder = PrometheusBuilder::new().build_recorder();
    let meta = Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));
    let mut described = std::collections::HashSet::new();
    for f in figures {
        let Some(series) = &f.series else {
            continue;
        };
        if described.insert(series.name) {
            let help = series
                .help
                .unwrap_or_else(|| names::help(series.name))
                .into();
            match f.kind {
                Kind::Counter => recorder.describe_counter(series.name.into(), None, help),
                Kind::Gauge => recorder.describe_gauge(series.name.into(), None, help),
            }
        }
        let labels: Vec<Label> = series
            .labels
            .iter()
            .map(|(k, v)| Label::new(*k, v.clone()))
            .collect();
        let key = Key::from_parts(series.name, labels);
        match f.kind {
            Kind::Counter => recorder
                .register_counter(&key, &meta)
                .absolute(f.value as u64),
            Kind::Gauge => recorder.register_gauge(&key, &meta).set(f.value),
        }
    }
    let handle = recorder.handle();
    // Descriptions are published to the renderer by the upkeep.
    handle.run_upkeep();
    handle.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metric_names::facade;

    #[test]
    fn renders_counters_and_gauges_with_labels_and_help() {
        let figures = [
            Figure::counter(42).series(facade::SENT, vec![("destination", "h:1:a".into())]),
            Figure::counter(7).series(facade::SENT, vec![("destination", "h:2:b".into())]),
            Figure::gauge(1.5).series(
                facade::SPILL_OLDEST_AGE,
                vec![("destination", "h:1:a".into())],
            ),
            Figure::counter(3).carbon("carbon_only"),
        ];
        let text = render(&figures);
        assert!(
            text.contains("anthracite_sent_datapoints_total{destination=\"h:1:a\"} 42"),
            "{text}"
        );
        assert!(
            text.contains("anthracite_sent_datapoints_total{destination=\"h:2:b\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE anthracite_sent_datapoints_total counter"),
            "{text}"
        );
        assert!(
            text.contains("# HELP anthracite_sent_datapoints_total "),
            "{text}"
        );
        assert!(
            text.contains("anthracite_spill_oldest_record_age_seconds{destination=\"h:1:a\"} 1.5"),
            "{text}"
        );
        assert!(!text.contains("carbon_only"), "{text}");
    }
}
