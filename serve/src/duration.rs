//! Durations as the options of `slidegate` and the rules files write them (`60s`, `1.5s`,
//! `250ms`), and the exact decimal numbers of seconds beneath them, which the simulator's
//! trace reader reads its timestamps with too.

use std::fmt;
use std::time::Duration;

/// `digits[.digits]unit`, exactly, with unit one of ns, us (µs), ms, s, m, h.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
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

/// Why a decimal number of seconds did not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumberError {
    /// No digits at all.
    Empty,
    /// Something other than `digits[.digits]`.
    NotDecimal,
    /// More decimals than the unit has (9 for seconds).
    TooPrecise,
    /// Above [`MAX_NANOS`].
    TooLarge,
}

impl fmt::Display for NumberError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NumberError::Empty => f.write_str("is empty"),
            NumberError::NotDecimal => f.write_str(
                "is not a number of seconds (digits, optionally a point and more digits)",
            ),
            NumberError::TooPrecise => {
                f.write_str("has more than 9 digits after the point (nanoseconds)")
            }
            NumberError::TooLarge => write!(f, "is too large (at most {} s)", Seconds(MAX_NANOS)),
        }
    }
}

/// Nanoseconds shown as seconds with as many decimals as needed, exactly.
pub struct Seconds(
    /// The nanoseconds.
    pub u64,
);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, ns) = (self.0 / 1_000_000_000, self.0 % 1_000_000_000);
        if ns == 0 {
            write!(f, "{s}")
        } else {
            let frac = format!("{ns:09}");
            write!(f, "{s}.{}", frac.trim_end_matches('0'))
        }
    }
}

/// The largest timestamp accepted: 2⁶² − 1 ns (about 146 years), the range every algorithm
/// stores exactly.
pub const MAX_NANOS: u64 = (1 << 62) - 1;

/// Parses `digits[.digits]` times `unit` nanoseconds exactly; the fraction may have at most
/// as many digits as `unit` has zeros (9 for seconds).
pub fn parse_decimal(text: &str, unit: u64) -> Result<u64, NumberError> {
    if text.is_empty() {
        return Err(NumberError::Empty);
    }
    let (whole, frac) = match text.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (text, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let ok = match frac {
        None => digits(whole),
        // "5.", ".5" and "5.5" are numbers; "." is not.
        Some(f) => (digits(whole) || whole.is_empty()) && (digits(f) || f.is_empty()),
    } && text != ".";
    if !ok {
        return Err(NumberError::NotDecimal);
    }
    let mut places = 0u32;
    let mut u = unit;
    while u.is_multiple_of(10) && u > 1 {
        u /= 10;
        places += 1;
    }
    let frac = frac.unwrap_or("");
    if frac.len() as u32 > places {
        return Err(NumberError::TooPrecise);
    }
    let whole_value = if whole.is_empty() {
        0
    } else {
        whole.parse::<u64>().map_err(|_| NumberError::TooLarge)?
    };
    let frac_value = if frac.is_empty() {
        0
    } else {
        // At most `places` ≤ 19 digits after the check above; unit/10^len fits.
        frac.parse::<u64>().map_err(|_| NumberError::TooLarge)?
            * (unit / 10u64.pow(frac.len() as u32))
    };
    whole_value
        .checked_mul(unit)
        .and_then(|w| w.checked_add(frac_value))
        .filter(|&n| n <= MAX_NANOS)
        .ok_or(NumberError::TooLarge)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn timestamps_parse_exactly_to_the_nanosecond() {
        assert_eq!(parse_decimal("12.000000001", S), Ok(12 * S + 1));
        assert_eq!(parse_decimal("0.1", S), Ok(100_000_000));
        assert_eq!(parse_decimal("3", S), Ok(3 * S));
        assert_eq!(parse_decimal("3.", S), Ok(3 * S));
        assert_eq!(parse_decimal(".5", S), Ok(S / 2));
        assert_eq!(parse_decimal("0.999999999", S), Ok(S - 1));
        // 0.1 + 0.2 style rounding cannot happen: digits are integers.
        assert_eq!(
            parse_decimal("1700000000.300000007", S),
            Ok(1_700_000_000 * S + 300_000_007)
        );
        assert_eq!(parse_decimal("4611686018.427387903", S), Ok(MAX_NANOS));
        assert_eq!(
            parse_decimal("4611686018.427387904", S),
            Err(NumberError::TooLarge)
        );
        assert_eq!(
            parse_decimal("99999999999999999999999", S),
            Err(NumberError::TooLarge)
        );
        assert_eq!(
            parse_decimal("1.0000000001", S),
            Err(NumberError::TooPrecise)
        );
        for bad in [
            ".", "-1", "+1", "1e3", "1.2.3", "abc", " 1", "1,5", "0x10", "1.-5",
        ] {
            assert_eq!(parse_decimal(bad, S), Err(NumberError::NotDecimal), "{bad}");
        }
        assert_eq!(parse_decimal("", S), Err(NumberError::Empty));
        // Other units: milliseconds take at most 6 decimals.
        assert_eq!(parse_decimal("1.5", 1_000_000), Ok(1_500_000));
        assert_eq!(
            parse_decimal("1.0000001", 1_000_000),
            Err(NumberError::TooPrecise)
        );
        assert_eq!(parse_decimal("7", 1), Ok(7));
        assert_eq!(parse_decimal("7.5", 1), Err(NumberError::TooPrecise));
    }

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
