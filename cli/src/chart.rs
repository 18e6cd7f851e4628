//! The SVG chart: for one key, the most admitted in the trailing window over time, one line
//! per algorithm, against the limit.

use std::path::Path;

use plotters::prelude::*;

/// One line of the chart: its label and one value per bin.
pub struct Series {
    pub label: String,
    pub peaks: Vec<u64>,
}

/// What to draw. Times in seconds from the trace's start.
pub struct Chart<'a> {
    pub title: String,
    pub y_label: String,
    pub bin_seconds: f64,
    pub limit: u64,
    pub series: &'a [Series],
}

/// Distinct, readable colours; the limit is black.
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(174, 199, 232),
    RGBColor(23, 190, 207),
    RGBColor(214, 39, 40),
    RGBColor(255, 152, 150),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
];

/// Writes the chart to `path` as SVG.
pub fn write(path: &Path, chart: &Chart<'_>) -> Result<(), String> {
    draw(path, chart).map_err(|e| format!("cannot draw the chart to {}: {e}", path.display()))
}

fn draw(path: &Path, chart: &Chart<'_>) -> Result<(), Box<dyn std::error::Error>> {
    let bins = chart
        .series
        .iter()
        .map(|s| s.peaks.len())
        .max()
        .unwrap_or(0);
    let x_max = (bins as f64 * chart.bin_seconds).max(f64::MIN_POSITIVE);
    let y_top = chart
        .series
        .iter()
        .flat_map(|s| s.peaks.iter().copied())
        .max()
        .unwrap_or(0)
        .max(chart.limit) as f64
        * 1.15;

    // Enough decimals that the time labels differ (about five labels across the axis).
    let decimals = (1.0 - x_max.log10().floor()).clamp(0.0, 9.0) as usize;

    let root = SVGBackend::new(path, (1100, 620)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut plot = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max, 0f64..y_top)?;
    plot.configure_mesh()
        .x_desc("seconds since the first request")
        .y_desc(chart.y_label.as_str())
        .light_line_style(WHITE)
        .x_label_formatter(&|x| format!("{x:.decimals$}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;

    for (i, s) in chart.series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        // A step line: each bin's peak held across the bin.
        let points = s.peaks.iter().enumerate().flat_map(|(b, &v)| {
            let x = b as f64 * chart.bin_seconds;
            [(x, v as f64), (x + chart.bin_seconds, v as f64)]
        });
        plot.draw_series(LineSeries::new(points, colour.stroke_width(2)))?
            .label(s.label.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
    }
    let limit = chart.limit as f64;
    plot.draw_series(LineSeries::new(
        [(0.0, limit), (x_max, limit)],
        BLACK.stroke_width(3),
    ))?
    .label(format!("limit L = {}", chart.limit))
    .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(3)));

    plot.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_every_series() {
        let path = std::env::temp_dir().join(format!("slidegate-chart-{}.svg", std::process::id()));
        let series = [
            Series {
                label: "Strict N=10".into(),
                peaks: vec![1, 5, 10, 10],
            },
            Series {
                label: "FixedWindow".into(),
                peaks: vec![2, 20, 3, 0],
            },
        ];
        let chart = Chart {
            title: "t".into(),
            y_label: "y".into(),
            bin_seconds: 0.5,
            limit: 10,
            series: &series,
        };
        write(&path, &chart).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
        for label in ["Strict N=10", "FixedWindow", "limit L = 10"] {
            assert!(svg.contains(label), "{label}");
        }
        // A directory that does not exist is an error, not a panic.
        let bad = Path::new("/nonexistent-dir/x.svg");
        assert!(
            write(bad, &chart)
                .unwrap_err()
                .contains("/nonexistent-dir/x.svg")
        );
    }
}
