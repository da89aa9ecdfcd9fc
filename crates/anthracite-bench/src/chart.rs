//! The SVG charts: a run's throughput (sent and delivered) and latency (p50, p99) over time,
//! one panel each, from the 100 ms samples of a [`Report`]; and a sweep's latency (p50, p99)
//! and loss against offered rate, one series per relay, from a [`SweepReport`].

use std::path::Path;

use plotters::prelude::*;

use super::BenchError;
use super::aggregation::MethodSet;
use super::costs::{Axis, CostReport, Figure};
use super::report::Report;
use super::sweep::SweepReport;

fn chart_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Chart(e.to_string())
}

/// Writes the chart of `report.timeline` to `path` as SVG.
pub fn write_svg(report: &Report, path: &Path) -> Result<(), BenchError> {
    write(path, render_svg(report)?)
}

/// Writes the chart of a configuration sweep to `path` as SVG.
pub fn write_costs_svg(report: &CostReport, path: &Path) -> Result<(), BenchError> {
    write(path, render_costs_svg(report)?)
}

/// Writes the chart of a sweep to `path` as SVG.
pub fn write_sweep_svg(report: &SweepReport, path: &Path) -> Result<(), BenchError> {
    write(path, render_sweep_svg(report)?)
}

fn write(path: &Path, svg: String) -> Result<(), BenchError> {
    std::fs::write(path, svg).map_err(|source| BenchError::Io {
        context: format!("writing {}", path.display()),
        source,
    })
}

/// Renders a sweep: latency (p50 thin, p99 thick, the p99 target dashed) and loss (% of sent)
/// against offered rate, one colour per relay.
pub fn render_sweep_svg(report: &SweepReport) -> Result<String, BenchError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1000, 720)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let (top, bottom) = root.split_vertically(400);
        let rows = &report.rows;
        let x_max = rows.iter().map(|r| r.offered_rate).fold(1.0, f64::max) / 1e3 * 1.05;
        // Latency spans milliseconds to seconds between a light and an overloaded step: log.
        let lat_max = rows
            .iter()
            .filter_map(|r| r.p99_us)
            .map(|v| v as f64 / 1e3)
            .fold(report.p99_target_ms, f64::max)
            * 1.5;
        let lat_min = rows
            .iter()
            .filter_map(|r| r.p50_us)
            .map(|v| v as f64 / 1e3)
            .fold(report.p99_target_ms, f64::min)
            .max(0.01)
            / 1.5;
        let loss_max = rows.iter().map(|r| r.loss_pct).fold(1.0, f64::max) * 1.1;
        let multi = report.targets.len() > 1;
        let name = |t: &str, what: &str| {
            if multi {
                format!("{t} {what}")
            } else {
                what.to_string()
            }
        };
        // (offered k/s, value) of one relay's rows that have the value.
        let series = |target: &str, f: &dyn Fn(&super::sweep::Row) -> Option<f64>| {
            rows.iter()
                .filter(|r| r.target == target)
                .filter_map(|r| f(r).map(|v| (r.offered_rate / 1e3, v)))
                .collect::<Vec<_>>()
        };

        let mut c = ChartBuilder::on(&top)
            .caption(
                format!("{}: latency against offered rate", report.scenario),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, (lat_min..lat_max).log_scale())
            .map_err(chart_err)?;
        c.configure_mesh()
            .x_desc("offered, thousand datapoints/s")
            .y_desc("latency, ms (log)")
            .draw()
            .map_err(chart_err)?;
        let target = report.p99_target_ms;
        c.draw_series(DashedLineSeries::new(
            [(0.0, target), (x_max, target)],
            8,
            6,
            BLACK.into(),
        ))
        .map_err(chart_err)?
        .label(format!("p99 target {target} ms"))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
        for (i, t) in report.targets.iter().enumerate() {
            let colour = Palette99::pick(i).to_rgba();
            let at_least = |v: u64| (v as f64 / 1e3).max(lat_min);
            let p50 = series(t, &|r| r.p50_us.map(at_least));
            let p99 = series(t, &|r| r.p99_us.map(at_least));
            c.draw_series(LineSeries::new(p50, colour.stroke_width(1)).point_size(2))
                .map_err(chart_err)?
                .label(name(t, "p50"))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour));
            c.draw_series(LineSeries::new(p99, colour.stroke_width(3)).point_size(4))
                .map_err(chart_err)?
                .label(name(t, "p99"))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(3))
                });
        }
        c.configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()
            .map_err(chart_err)?;

        let mut c = ChartBuilder::on(&bottom)
            .caption("loss (copies sent − delivered)", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..loss_max)
            .map_err(chart_err)?;
        c.configure_mesh()
            .x_desc("offered, thousand datapoints/s")
            .y_desc("% of sent")
            .draw()
            .map_err(chart_err)?;
        for (i, t) in report.targets.iter().enumerate() {
            let colour = Palette99::pick(i).to_rgba();
            // Duplicates (negative loss) are not loss.
            let loss = series(t, &|r| Some(r.loss_pct.max(0.0)));
            c.draw_series(LineSeries::new(loss, colour.stroke_width(2)).point_size(3))
                .map_err(chart_err)?
                .label(name(t, "loss %"))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour));
        }
        c.configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()
            .map_err(chart_err)?;
        root.present().map_err(chart_err)?;
    }
    Ok(out)
}

/// Renders a configuration sweep: CPU-seconds per million datapoints delivered (per copy)
/// against the swept value, both axes logarithmic (rules cost spans decades between relays),
/// one colour per relay and one line per replication factor.
pub fn render_costs_svg(report: &CostReport) -> Result<String, BenchError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1000, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let xs = || report.points.iter().map(|p| p.on(report.axis) as f64);
        let x_min = xs().fold(f64::INFINITY, f64::min).max(1.0) / 1.3;
        let x_max = xs().fold(1.0, f64::max) * 1.3;
        // An aggregator's output is not its input: its cost is per datapoint sent.
        let cost = if report.axis.is_aggregation() {
            |f: &Figure| f.per_million_sent
        } else {
            |f: &Figure| f.per_million_delivered
        };
        let ys = || report.figures.iter().filter_map(cost);
        let y_min = ys().fold(f64::INFINITY, f64::min).clamp(1e-4, 1.0) / 2.0;
        let y_max = ys().fold(y_min * 4.0, f64::max) * 2.0;
        let what = report.axis.describe();
        let mut c = ChartBuilder::on(&root)
            .caption(
                format!("{}: relay CPU against {what}", report.scenario),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d((x_min..x_max).log_scale(), (y_min..y_max).log_scale())
            .map_err(chart_err)?;
        c.configure_mesh()
            .x_desc(format!("{what} (log)"))
            .y_desc(if report.axis.is_aggregation() {
                "CPU-s per 1M sent (log)"
            } else {
                "CPU-s per 1M delivered (log)"
            })
            .draw()
            .map_err(chart_err)?;
        let mut replications: Vec<usize> = report.points.iter().map(|p| p.replication).collect();
        replications.sort_unstable();
        replications.dedup();
        let by_replication = report.axis == Axis::Destinations && replications.len() > 1;
        let mut method_sets: Vec<MethodSet> = Vec::new();
        for p in &report.points {
            if !method_sets.contains(&p.methods) {
                method_sets.push(p.methods);
            }
        }
        let by_methods = report.axis != Axis::Methods && method_sets.len() > 1;
        for (i, t) in report.targets.iter().enumerate() {
            let colour = Palette99::pick(i).to_rgba();
            // One line per replication factor, or per method set.
            let groups: Vec<(Option<usize>, Option<MethodSet>)> = if by_replication {
                replications.iter().map(|&r| (Some(r), None)).collect()
            } else if by_methods {
                method_sets.iter().map(|&m| (None, Some(m))).collect()
            } else {
                vec![(None, None)]
            };
            for (g, (repl, methods)) in groups.into_iter().enumerate() {
                let line: Vec<(f64, f64)> = report
                    .figures
                    .iter()
                    .filter(|f| {
                        &f.target == t
                            && repl.is_none_or(|r| f.point.replication == r)
                            && methods.is_none_or(|m| f.point.methods == m)
                    })
                    .filter_map(|f| cost(f).map(|v| (f.point.on(report.axis) as f64, v)))
                    .collect();
                let label = match (repl, methods) {
                    (Some(r), _) => format!("{t}, replication {r}"),
                    (_, Some(m)) => format!("{t}, {}", m.label()),
                    _ => t.clone(),
                };
                let width = 1 + g as u32 * 2;
                c.draw_series(LineSeries::new(line, colour.stroke_width(width)).point_size(3))
                    .map_err(chart_err)?
                    .label(label)
                    .legend(move |(x, y)| {
                        PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(width))
                    });
            }
        }
        c.configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(chart_err)?;
        root.present().map_err(chart_err)?;
    }
    Ok(out)
}

/// Renders the chart as an SVG document.
pub fn render_svg(report: &Report) -> Result<String, BenchError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1000, 720)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let (top, bottom) = root.split_vertically(360);
        let tl = &report.timeline;
        let t_max = tl.last().map_or(1.0, |s| s.t).max(0.1);

        let rate_max = tl
            .iter()
            .map(|s| s.sent_rate.max(s.delivered_rate))
            .fold(1.0, f64::max)
            / 1e3
            * 1.1;
        let mut c = ChartBuilder::on(&top)
            .caption(
                format!("{} → {}: throughput", report.scenario, report.target),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..t_max, 0.0..rate_max)
            .map_err(chart_err)?;
        c.configure_mesh()
            .x_desc("seconds")
            .y_desc("thousand datapoints/s")
            .draw()
            .map_err(chart_err)?;
        c.draw_series(LineSeries::new(
            tl.iter().map(|s| (s.t, s.sent_rate / 1e3)),
            &BLUE,
        ))
        .map_err(chart_err)?
        .label("sent")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE));
        c.draw_series(LineSeries::new(
            tl.iter().map(|s| (s.t, s.delivered_rate / 1e3)),
            &RED,
        ))
        .map_err(chart_err)?
        .label("delivered")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED));
        c.configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()
            .map_err(chart_err)?;

        let lat_max = tl.iter().filter_map(|s| s.p99_ms).fold(1.0, f64::max) * 1.1;
        let mut c = ChartBuilder::on(&bottom)
            .caption("latency (per 100 ms interval)", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..t_max, 0.0..lat_max)
            .map_err(chart_err)?;
        c.configure_mesh()
            .x_desc("seconds")
            .y_desc("ms")
            .draw()
            .map_err(chart_err)?;
        c.draw_series(LineSeries::new(
            tl.iter().filter_map(|s| s.p50_ms.map(|v| (s.t, v))),
            &GREEN,
        ))
        .map_err(chart_err)?
        .label("p50")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], GREEN));
        c.draw_series(LineSeries::new(
            tl.iter().filter_map(|s| s.p99_ms.map(|v| (s.t, v))),
            &MAGENTA,
        ))
        .map_err(chart_err)?
        .label("p99")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], MAGENTA));
        c.configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()
            .map_err(chart_err)?;
        root.present().map_err(chart_err)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Sample;

    #[test]
    fn svg_is_written_even_for_sparse_timelines() {
        let mut r = Report::default();
        assert!(render_svg(&r).unwrap().starts_with("<svg"));
        r.timeline = (0..20)
            .map(|i| Sample {
                t: i as f64 / 10.0,
                sent_rate: 1e5,
                delivered_rate: 9e4,
                p50_ms: Some(1.0),
                p99_ms: (i % 2 == 0).then_some(5.0),
            })
            .collect();
        let svg = render_svg(&r).unwrap();
        assert!(svg.contains("<polyline") || svg.contains("<path"));
    }
}
