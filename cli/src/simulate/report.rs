//! The table: one row per algorithm.

use std::fmt::Write as _;
use std::time::Duration;

/// One algorithm's results.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub algorithm: String,
    /// Empty where the algorithm has no buckets.
    pub granularity: String,
    pub requests: u64,
    pub admitted: u64,
    pub wrongly_allowed: u64,
    pub wrongly_denied: u64,
    pub worst_window: u64,
    pub bytes_per_key: usize,
    pub elapsed: Duration,
}

impl Row {
    fn decisions_per_second(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// A share of `total` as a percentage with enough digits to show Cloudflare-sized errors
/// (0.003%).
pub fn percent(part: u64, total: u64) -> String {
    if total == 0 || part == 0 {
        return "0%".to_owned();
    }
    let p = part as f64 * 100.0 / total as f64;
    if p >= 10.0 {
        format!("{p:.1}%")
    } else if p >= 0.01 {
        format!("{p:.2}%")
    } else {
        format!("{p:.4}%")
    }
}

/// Millions, thousands or units with an SI suffix.
fn rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.1}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.0}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// A duration as the shortest exact text: `60s`, `1.5s`, `250ms`, `7ns`.
pub fn duration(d: Duration) -> String {
    let ns = d.as_nanos();
    for (unit, name) in [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs")] {
        if ns >= unit {
            let whole = ns / unit;
            let frac = ns % unit;
            if frac == 0 {
                return format!("{whole}{name}");
            }
            let digits = unit.ilog10() as usize;
            let frac = format!("{frac:0digits$}");
            return format!("{whole}.{}{name}", frac.trim_end_matches('0'));
        }
    }
    format!("{ns}ns")
}

/// The table as aligned Markdown, with the reference's worst window and the limit in the
/// header of that column.
pub fn table(rows: &[Row], limit: u64, window: Duration) -> String {
    let header = [
        "algorithm".to_owned(),
        "granularity".to_owned(),
        "requests".to_owned(),
        "admitted".to_owned(),
        "wrongly allowed".to_owned(),
        "wrongly denied".to_owned(),
        format!("worst {} (L = {limit})", duration(window)),
        "bytes/key".to_owned(),
        "decisions/s".to_owned(),
    ];
    let body: Vec<[String; 9]> = rows
        .iter()
        .map(|r| {
            [
                r.algorithm.clone(),
                r.granularity.clone(),
                r.requests.to_string(),
                r.admitted.to_string(),
                percent(r.wrongly_allowed, r.requests),
                percent(r.wrongly_denied, r.requests),
                r.worst_window.to_string(),
                r.bytes_per_key.to_string(),
                rate(r.decisions_per_second()),
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &body {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String; 9]| {
        out.push('|');
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            let pad = w - cell.chars().count();
            // Text left, numbers right.
            if i < 2 {
                let _ = write!(out, " {cell}{} |", " ".repeat(pad));
            } else {
                let _ = write!(out, " {}{cell} |", " ".repeat(pad));
            }
        }
        out.push('\n');
    };
    line(&mut out, &header);
    out.push('|');
    for (i, w) in widths.iter().enumerate() {
        let dashes = "-".repeat(*w);
        if i < 2 {
            let _ = write!(out, "-{dashes}-|");
        } else {
            let _ = write!(out, "-{dashes}:|");
        }
    }
    out.push('\n');
    for row in &body {
        line(&mut out, row);
    }
    out
}

/// What the columns mean.
pub const FOOTNOTE: &str = "\
wrongly allowed / denied: requests this algorithm admitted and the exact log denied / the
  reverse, as a share of all requests. Each algorithm runs on its own limiter, so after a
  first disagreement its state differs from the exact log's and later requests are judged on
  what it admitted itself (as in production, and as in Cloudflare's comparison).
worst: the most cost one key had admitted in any interval (t - W, t].
bytes/key: the algorithm's state per key (Quota::bytes_per_key); the keyed store adds the key
  and its table slot.
decisions/s: one thread, wall time of that algorithm's replay on the simulated clock.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_show_small_errors() {
        assert_eq!(percent(0, 10), "0%");
        assert_eq!(percent(3, 100_000), "0.0030%");
        assert_eq!(percent(1, 3), "33.3%");
        assert_eq!(percent(5, 100), "5.00%");
        assert_eq!(percent(1, 0), "0%");
    }

    #[test]
    fn durations_are_exact_and_short() {
        assert_eq!(duration(Duration::from_secs(60)), "60s");
        assert_eq!(duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(duration(Duration::from_millis(250)), "250ms");
        assert_eq!(duration(Duration::from_nanos(7)), "7ns");
        assert_eq!(
            duration(Duration::from_nanos(1_000_000_001)),
            "1.000000001s"
        );
    }

    #[test]
    fn table_aligns_columns() {
        let row = Row {
            algorithm: "Strict".into(),
            granularity: "6s".into(),
            requests: 1000,
            admitted: 900,
            wrongly_allowed: 0,
            wrongly_denied: 12,
            worst_window: 100,
            bytes_per_key: 210,
            elapsed: Duration::from_millis(1),
        };
        let t = table(
            &[
                row.clone(),
                Row {
                    algorithm: "ExactLog".into(),
                    ..row
                },
            ],
            100,
            Duration::from_secs(60),
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(
            lines
                .iter()
                .all(|l| l.chars().count() == lines[0].chars().count())
        );
        assert!(lines[0].contains("worst 60s (L = 100)"));
        assert!(lines[2].contains("| Strict "));
        assert!(lines[2].contains(" 1.20% "));
        assert!(lines[2].contains(" 1.0M |"));
    }
}
