//! The SVG chart: throughput (sent and delivered) and latency (p50, p99) over time, one panel
//! each, from the 100 ms samples of a [`Report`].

use std::path::Path;

use plotters::prelude::*;

use super::BenchError;
use super::report::Report;

fn chart_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Chart(e.to_string())
}

/// Writes the chart of `report.timeline` to `path` as SVG.
pub fn write_svg(report: &Report, path: &Path) -> Result<(), BenchError> {
    let svg = render_svg(report)?;
    std::fs::write(path, svg).map_err(|source| BenchError::Io {
        context: format!("writing {}", path.display()),
        source,
    })
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
    use crate::bench::report::Sample;

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
