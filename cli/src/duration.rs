//! Durations as the command's options and the rules files write them: `60s`, `1.5s`, `250ms`.
//! Apart from `main.rs` so that the rules readers, and the fuzz targets that include them,
//! reach it without the command-line definitions.

use std::time::Duration;

use crate::trace::{MAX_NANOS, Seconds, parse_decimal};

/// `digits[.digits]unit`, exactly, with unit one of ns, us (µs), ms, s, m, h.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("\"{text}\" has no unit: write e.g. 60s, 1.5s, 250ms, 10m"))?;
    let (number, unit) = text.split_at(split);
    let nanos_per_unit = match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => {
            return Err(format!(
                "unknown unit \"{unit}\": use ns, us, ms, s, m or h"
            ));
        }
    };
    // Minutes and hours: convert via seconds so a fraction of up to 9 digits stays exact.
    let (base, factor) = match nanos_per_unit {
        60_000_000_000 => (1_000_000_000, 60),
        3_600_000_000_000 => (1_000_000_000, 3600),
        n => (n, 1),
    };
    let ns = parse_decimal(number, base).map_err(|e| format!("\"{number}\" {e}"))?;
    // The number was bounded in seconds; in minutes or hours it can be in range while the
    // duration is not.
    let ns = ns
        .checked_mul(factor)
        .filter(|&ns| ns <= MAX_NANOS)
        .ok_or_else(|| format!("\"{text}\" is too long (at most {} s)", Seconds(MAX_NANOS)))?;
    Ok(Duration::from_nanos(ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_exactly_with_units() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration("3us"), Ok(Duration::from_micros(3)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0.000000001m"), Ok(Duration::from_nanos(60)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("60").unwrap_err().contains("no unit"));
        assert!(
            parse_duration("5parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_duration("1.5ns").unwrap_err().contains("more than"));
        assert!(parse_duration("s").unwrap_err().contains("is empty"));
        assert!(
            parse_duration("99999999999999h")
                .unwrap_err()
                .contains("too")
        );
    }
}
