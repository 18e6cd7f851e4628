//! The SVG chart: for one key, the most admitted in the trailing window over time, one line
//! per algorithm, against the limit.

use std::path::Path;

use plotters::prelude::*;
use slidegate::Mode;

/// One line of the chart: its label, one value per bin, and which algorithm it is, which
/// fixes its colour.
pub struct Series {
    pub label: String,
    pub peaks: Vec<u64>,
    pub mode: Mode,
    /// The place of its granularity in the list it came from (see `run::Algorithm::rank`).
    pub rank: usize,
}

/// What to draw. Times in seconds from the trace's start.
pub struct Chart<'a> {
    pub title: String,
    pub y_label: String,
    pub bin_seconds: f64,
    pub limit: u64,
    pub series: &'a [Series],
}

/// Three shades for each bucketed algorithm, one per granularity (darkest the coarsest).
const BLUES: [RGBColor; 3] = [
    RGBColor(8, 48, 107),
    RGBColor(33, 113, 181),
    RGBColor(107, 174, 214),
];
const ORANGES: [RGBColor; 3] = [
    RGBColor(166, 54, 3),
    RGBColor(230, 85, 13),
    RGBColor(253, 141, 60),
];
const REDS: [RGBColor; 3] = [
    RGBColor(153, 0, 13),
    RGBColor(239, 59, 44),
    RGBColor(252, 146, 114),
];

/// A series' colour: by algorithm and granularity, so that it is the same in every run,
/// whichever other series the run has. The limit is black.
fn colour(s: &Series) -> RGBColor {
    match s.mode {
        Mode::Strict => BLUES[s.rank % BLUES.len()],
        Mode::StrictMarked => ORANGES[s.rank % ORANGES.len()],
        Mode::Weighted => REDS[s.rank % REDS.len()],
        Mode::FixedWindow => RGBColor(127, 127, 127),
        Mode::Gcra => RGBColor(44, 160, 44),
        Mode::ExactLog => RGBColor(148, 103, 189),
    }
}

/// Whether the chart can be written to `path`: its directory exists. Checked before a run,
/// so that a mistyped path fails at once rather than after the whole replay.
pub fn check_path(path: &Path) -> Result<(), String> {
    if path.is_dir() {
        return Err(format!(
            "--chart {}: is a directory; give a file name",
            path.display()
        ));
    }
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => Err(format!(
            "--chart {}: the directory {} does not exist",
            path.display(),
            dir.display()
        )),
        _ => Ok(()),
    }
}

/// Writes the chart to `path` as SVG.
pub fn write(path: &Path, chart: &Chart<'_>) -> Result<(), String> {
    draw(path, chart).map_err(|e| format!("cannot write the chart to {}: {e}", path.display()))
}

fn draw(path: &Path, chart: &Chart<'_>) -> Result<(), Box<dyn std::error::Error>> {
    let bins = chart
        .series
        .iter()
        .map(|s| s.peaks.len())
        .max()
        .unwrap_or(0);
    let x_max = (bins as f64 * chart.bin_seconds).max(f64::MIN_POSITIVE);
    let highest = chart
        .series
        .iter()
        .flat_map(|s| s.peaks.iter().copied())
        .max()
        .unwrap_or(0)
        .max(chart.limit);
    // Whole units on the y axis, with room above the highest line for the legend.
    let y_top = (highest + highest.div_ceil(6)).max(highest + 1);

    // Enough decimals that the time labels differ (about five labels across the axis).
    let decimals = (1.0 - x_max.log10().floor()).clamp(0.0, 9.0) as usize;

    let root = SVGBackend::new(path, (1100, 620)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut plot = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max, 0u64..y_top)?;
    plot.configure_mesh()
        .x_desc("seconds since the first request")
        .y_desc(chart.y_label.as_str())
        .light_line_style(WHITE)
        .x_label_formatter(&|x| format!("{x:.decimals$}"))
        // An integer axis: at most one label per whole unit, never the same label twice.
        .y_labels(usize::try_from(y_top + 1).unwrap_or(usize::MAX).min(12))
        .draw()?;

    for (i, s) in chart.series.iter().enumerate() {
        let colour = colour(s);
        // A step line: each bin's peak held across the bin.
        let points = s.peaks.iter().enumerate().flat_map(|(b, &v)| {
            let x = b as f64 * chart.bin_seconds;
            [(x, v), (x + chart.bin_seconds, v)]
        });
        let style = colour.stroke_width(2);
        // A series equal to one drawn before would hide it: it is dashed, so both show, and
        // the legend says which it equals.
        let twin = chart.series[..i].iter().find(|t| t.peaks == s.peaks);
        let (label, dashed) = match twin {
            Some(t) => (format!("{} (same as {})", s.label, t.label), true),
            None => (s.label.clone(), false),
        };
        let legend = move |(x, y): (i32, i32)| {
            PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2))
        };
        if dashed {
            plot.draw_series(DashedLineSeries::new(points, 6, 6, style))?
                .label(label)
                .legend(legend);
        } else {
            plot.draw_series(LineSeries::new(points, style))?
                .label(label)
                .legend(legend);
        }
    }
    plot.draw_series(LineSeries::new(
        [(0.0, chart.limit), (x_max, chart.limit)],
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

    fn series(label: &str, peaks: Vec<u64>, mode: Mode, rank: usize) -> Series {
        Series {
            label: label.into(),
            peaks,
            mode,
            rank,
        }
    }

    fn draw_to_string(name: &str, chart: &Chart<'_>) -> String {
        let path =
            std::env::temp_dir().join(format!("slidegate-chart-{}-{name}.svg", std::process::id()));
        write(&path, chart).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        svg
    }

    #[test]
    fn writes_an_svg_with_every_series() {
        let series = [
            series("Strict N=10", vec![1, 5, 10, 10], Mode::Strict, 1),
            series("FixedWindow", vec![2, 20, 3, 0], Mode::FixedWindow, 0),
        ];
        let chart = Chart {
            title: "t".into(),
            y_label: "y".into(),
            bin_seconds: 0.5,
            limit: 10,
            series: &series,
        };
        let svg = draw_to_string("every", &chart);
        assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
        for label in ["Strict N=10", "FixedWindow", "limit L = 10"] {
            assert!(svg.contains(label), "{label}");
        }
        // A directory that does not exist is an error, not a panic, in one sentence.
        let bad = Path::new("/nonexistent-dir/x.svg");
        let err = write(bad, &chart).unwrap_err();
        assert!(err.starts_with("cannot write the chart to /nonexistent-dir/x.svg: "));
        assert_eq!(err.matches("/nonexistent-dir").count(), 1, "{err}");
    }

    #[test]
    fn a_series_equal_to_another_is_dashed_and_says_so() {
        let twins = [
            series("Strict N=1", vec![1, 2, 3], Mode::Strict, 0),
            series("Weighted N=1", vec![1, 2, 3], Mode::Weighted, 0),
            series("GCRA", vec![1, 2, 4], Mode::Gcra, 0),
        ];
        let chart = Chart {
            title: "t".into(),
            y_label: "y".into(),
            bin_seconds: 1.0,
            limit: 3,
            series: &twins,
        };
        let svg = draw_to_string("twins", &chart);
        assert!(svg.contains("Weighted N=1 (same as Strict N=1)"), "{svg}");
        assert!(!svg.contains("GCRA (same as"));
        // Dashed: drawn as many short lines, where a solid series is one.
        let apart = [
            series("Strict N=1", vec![1, 2, 3], Mode::Strict, 0),
            series("Weighted N=1", vec![1, 2, 2], Mode::Weighted, 0),
            series("GCRA", vec![1, 2, 4], Mode::Gcra, 0),
        ];
        let solid = draw_to_string(
            "apart",
            &Chart {
                series: &apart,
                ..chart
            },
        );
        assert!(!solid.contains("(same as"));
        let lines = |svg: &str| svg.matches("<polyline").count() + svg.matches("<line").count();
        assert!(
            lines(&svg) > lines(&solid) + 3,
            "{} {}",
            lines(&svg),
            lines(&solid)
        );
    }

    #[test]
    fn y_labels_are_whole_and_distinct_for_a_small_limit() {
        let series = [series("ExactLog", vec![0, 1, 2, 1], Mode::ExactLog, 0)];
        let chart = Chart {
            title: "t".into(),
            y_label: "y".into(),
            bin_seconds: 1.0,
            limit: 2,
            series: &series,
        };
        let svg = draw_to_string("labels", &chart);
        // The y labels are the texts right-aligned against the axis ("end" anchored).
        let labels: Vec<&str> = svg
            .split("<text")
            .filter(|t| t.contains("text-anchor=\"end\""))
            .filter_map(|t| t.split('>').nth(1))
            .filter_map(|t| t.split('<').next())
            .map(str::trim)
            .collect();
        assert!(!labels.is_empty(), "{svg}");
        let mut sorted = labels.clone();
        sorted.dedup();
        assert_eq!(sorted, labels, "a y label repeats");
        assert!(
            labels.iter().all(|l| l.parse::<u64>().is_ok()),
            "{labels:?}"
        );
    }

    #[test]
    fn colours_follow_the_algorithm_not_the_position() {
        let a = series("Strict N=10", vec![], Mode::Strict, 1);
        let b = series("Weighted N=10", vec![], Mode::Weighted, 1);
        assert_eq!(colour(&a), BLUES[1]);
        assert_eq!(colour(&b), REDS[1]);
        assert_ne!(
            colour(&series("Strict N=1", vec![], Mode::Strict, 0)),
            colour(&a)
        );
    }

    #[test]
    fn a_chart_path_in_a_missing_directory_is_refused_before_a_run() {
        let err = check_path(Path::new("/nonexistent-dir/x.svg")).unwrap_err();
        assert!(
            err.contains("the directory /nonexistent-dir does not exist"),
            "{err}"
        );
        assert!(check_path(Path::new("x.svg")).is_ok());
        let dir = std::env::temp_dir();
        assert!(check_path(&dir).unwrap_err().contains("is a directory"));
        assert!(check_path(&dir.join("x.svg")).is_ok());
    }
}
