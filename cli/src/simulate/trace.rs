//! Traces: the requests a simulation replays, read from CSV or made by a generator.
//!
//! # The CSV format
//! One request per line, `timestamp,key[,cost]`:
//! - `timestamp`: seconds from any origin, digits with an optional fraction of up to nine
//!   digits, read exactly to the nanosecond (`12.000000001` is 12 s + 1 ns; no float rounding).
//!   Timestamps must not decrease from one line to the next: a trace out of order is an error
//!   naming the line (sort it first, e.g. `sort -t, -k1,1g trace.csv`). Replaying unsorted
//!   requests in file order would move the simulated clock backwards, which no limiter sees.
//!   A trace may last at most [`MAX_SPAN`] (about 73 years) from its first request: the exact
//!   log, the reference, is replayed on a clock counting from there and tells times apart only
//!   that far.
//! - `key`: any non-empty text without a comma (surrounding spaces are trimmed; no quoting).
//! - `cost`: a whole number from 1 to the quota's limit; 1 when absent.
//!
//! A UTF-8 byte order mark at the start of the file is ignored. A first line whose first field
//! is `timestamp` (any case) is a header and is skipped. Blank lines and lines starting with
//! `#` are skipped too. Any other line that does not parse is an error naming its line number
//! and what is wrong, unless bad lines are skipped (`--skip-bad-lines`), in which case they are
//! counted and reported.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufRead};

use slidegate::CostError;
// The largest timestamp is the largest duration, and both read as exact decimals.
pub use slidegate_serve::duration::{MAX_NANOS, Seconds};
use slidegate_serve::duration::{NumberError, parse_decimal};

/// One request: when, whose, how much.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Nanoseconds from the trace's origin.
    pub at: u64,
    /// Index into [`Trace::keys`].
    pub key: u32,
    /// At least 1 and at most the quota's limit (which is below 2³¹).
    pub cost: u32,
}

/// Requests in time order, with their keys interned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// Every distinct key, indexed by [`Request::key`].
    pub keys: Vec<String>,
    /// Non-decreasing in `at`.
    pub requests: Vec<Request>,
    /// Lines skipped as bad (only with `--skip-bad-lines`), in file order.
    pub bad_lines: Vec<LineError>,
}

/// Builds a [`Trace`], interning keys.
#[derive(Default)]
pub struct TraceBuilder {
    trace: Trace,
    index: HashMap<String, u32>,
}

impl TraceBuilder {
    /// The index of `key`, adding it if new.
    pub fn key(&mut self, key: &str) -> u32 {
        if let Some(&i) = self.index.get(key) {
            return i;
        }
        // A trace with 2³² distinct keys would not fit in memory long before this wraps.
        let i = self.trace.keys.len() as u32;
        self.trace.keys.push(key.to_owned());
        self.index.insert(key.to_owned(), i);
        i
    }

    /// Appends a request; the caller keeps time non-decreasing.
    pub fn push(&mut self, at: u64, key: u32, cost: u32) {
        debug_assert!(self.trace.requests.last().is_none_or(|r| r.at <= at));
        self.trace.requests.push(Request { at, key, cost });
    }

    /// The last timestamp pushed.
    fn last_at(&self) -> Option<u64> {
        self.trace.requests.last().map(|r| r.at)
    }

    /// The first timestamp pushed.
    fn first_at(&self) -> Option<u64> {
        self.trace.requests.first().map(|r| r.at)
    }

    pub fn finish(self) -> Trace {
        self.trace
    }
}

/// What is wrong with one line of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    /// 1-based.
    pub line: usize,
    pub problem: Problem,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.problem)
    }
}

/// The ways a line can be wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    NotUtf8,
    MissingKey,
    EmptyKey,
    TooManyFields(usize),
    Timestamp {
        text: String,
        why: NumberError,
    },
    Cost {
        text: String,
    },
    CostRejected(CostError),
    /// A cost above the limit, as written (it may not fit in any integer type).
    CostAboveLimit {
        text: String,
        limit: u64,
    },
    /// A field in double quotes: the format has no quoting.
    Quoted,
    OutOfOrder {
        previous: u64,
        this: u64,
    },
    TooLate {
        first: u64,
        this: u64,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NotUtf8 => write!(f, "not valid UTF-8"),
            Problem::MissingKey => write!(f, "no key: expected `timestamp,key[,cost]`"),
            Problem::EmptyKey => write!(f, "the key is empty"),
            Problem::TooManyFields(n) => {
                write!(f, "{n} fields, expected 2 or 3: `timestamp,key[,cost]`")
            }
            Problem::Timestamp { text, why } => write!(f, "timestamp \"{text}\" {why}"),
            Problem::Cost { text } => write!(f, "cost \"{text}\" is not a whole number ≥ 1"),
            Problem::CostRejected(e) => write!(f, "{e}"),
            Problem::CostAboveLimit { text, limit } => write!(
                f,
                "cost {text} is above the limit {limit} and can never be admitted"
            ),
            Problem::Quoted => write!(
                f,
                "a field is in quotes; write `timestamp,key[,cost]` without them (a key is \
                 any text without a comma)"
            ),
            Problem::OutOfOrder { previous, this } => write!(
                f,
                "timestamp {} is earlier than the previous request's {}; \
                 a trace must be sorted by time",
                Seconds(*this),
                Seconds(*previous)
            ),
            Problem::TooLate { first, this } => write!(
                f,
                "timestamp {} is more than {} s (about 73 years) after the first request's {}; \
                 a trace may span at most that",
                Seconds(*this),
                Seconds(MAX_SPAN),
                Seconds(*first)
            ),
        }
    }
}

/// The longest a trace may last from its first request to its last: 2⁶¹ − 2 ns (about 73
/// years), the range the exact log distinguishes (later readings of its clock count as that
/// one, so its answers past it would be wrong).
pub const MAX_SPAN: u64 = (1 << 61) - 2;

/// Reads a trace of requests checked against a quota of `limit`. With `skip_bad_lines`, bad
/// lines are collected in [`Trace::bad_lines`] instead of failing the read.
pub fn read(input: impl BufRead, limit: u64, skip_bad_lines: bool) -> Result<Trace, ReadError> {
    let mut builder = TraceBuilder::default();
    let mut bad = Vec::new();
    let mut seen_data = false;
    let mut input = input;
    let mut line = Vec::new();
    let mut number = 0;
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line).map_err(ReadError::Io)? == 0 {
            break;
        }
        number += 1;
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let outcome = match std::str::from_utf8(text) {
            Err(_) => Err(Problem::NotUtf8),
            Ok(text) => {
                // Editors on Windows start UTF-8 files with a byte order mark; it is not part
                // of the header or of the first timestamp.
                let text = if number == 1 {
                    text.strip_prefix('\u{feff}').unwrap_or(text)
                } else {
                    text
                };
                let text = text.strip_suffix('\r').unwrap_or(text).trim();
                let header = !seen_data
                    && text
                        .split(',')
                        .next()
                        .is_some_and(|f| f.trim().eq_ignore_ascii_case("timestamp"));
                if text.is_empty() || text.starts_with('#') || header {
                    seen_data |= header;
                    continue;
                }
                seen_data = true;
                parse_line(text, limit, builder.first_at(), builder.last_at())
            }
        };
        match outcome {
            Ok((at, key, cost)) => {
                let key = builder.key(key);
                builder.push(at, key, cost);
            }
            Err(problem) => {
                let error = LineError {
                    line: number,
                    problem,
                };
                if !skip_bad_lines {
                    return Err(ReadError::Line(error));
                }
                bad.push(error);
            }
        }
    }
    let mut trace = builder.finish();
    trace.bad_lines = bad;
    Ok(trace)
}

/// One data line, already trimmed: `(at, key, cost)`. `first` and `last` are the first and
/// last requests' timestamps so far.
fn parse_line(
    text: &str,
    limit: u64,
    first: Option<u64>,
    last: Option<u64>,
) -> Result<(u64, &str, u32), Problem> {
    let fields: Vec<&str> = text.split(',').map(str::trim).collect();
    if fields.iter().any(|f| f.starts_with('"')) {
        return Err(Problem::Quoted);
    }
    if fields.len() > 3 {
        return Err(Problem::TooManyFields(fields.len()));
    }
    let at = parse_decimal(fields[0], 1_000_000_000).map_err(|why| Problem::Timestamp {
        text: fields[0].to_owned(),
        why,
    })?;
    let key = *fields.get(1).ok_or(Problem::MissingKey)?;
    if key.is_empty() {
        return Err(Problem::EmptyKey);
    }
    let cost = match fields.get(2) {
        None => 1,
        Some(text) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
            // Digits that overflow u64 are still a whole number: above any limit.
            match text.parse::<u64>() {
                Ok(cost) if cost <= limit => cost,
                _ => {
                    return Err(Problem::CostAboveLimit {
                        text: (*text).to_owned(),
                        limit,
                    });
                }
            }
        }
        Some(text) => {
            return Err(Problem::Cost {
                text: (*text).to_owned(),
            });
        }
    };
    if cost == 0 {
        return Err(Problem::CostRejected(CostError::Zero));
    }
    if let Some(previous) = last.filter(|&p| p > at) {
        return Err(Problem::OutOfOrder { previous, this: at });
    }
    if let Some(first) = first.filter(|&f| at.saturating_sub(f) > MAX_SPAN) {
        return Err(Problem::TooLate { first, this: at });
    }
    // cost ≤ limit ≤ MAX_LIMIT < 2³¹.
    Ok((at, key, cost as u32))
}

/// Why a trace could not be read.
#[derive(Debug)]
pub enum ReadError {
    Io(io::Error),
    Line(LineError),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Line(e) => write!(f, "{e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn read_str(text: &str, limit: u64) -> Result<Trace, String> {
        read(text.as_bytes(), limit, false).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_requests_keys_and_costs() {
        let trace = read_str(
            "timestamp,key,cost\n0.5,alice\n0.5,bob,3\r\n\n# a comment\n 1.25 , alice , 2 \n",
            10,
        )
        .unwrap();
        assert_eq!(trace.keys, ["alice", "bob"]);
        assert_eq!(
            trace.requests,
            [
                Request {
                    at: S / 2,
                    key: 0,
                    cost: 1
                },
                Request {
                    at: S / 2,
                    key: 1,
                    cost: 3
                },
                Request {
                    at: S + S / 4,
                    key: 0,
                    cost: 2
                },
            ]
        );
        assert!(trace.bad_lines.is_empty());
        // No header, no trailing newline.
        assert_eq!(read_str("1,a", 1).unwrap().requests.len(), 1);
        assert_eq!(read_str("", 1).unwrap(), Trace::default());
    }

    #[test]
    fn every_problem_names_its_line() {
        let cases: [(&str, &str); 13] = [
            (
                "1,a\n2,b\nabc,c\n",
                "line 3: timestamp \"abc\" is not a number of seconds",
            ),
            (
                "1,a\n-1,b\n",
                "line 2: timestamp \"-1\" is not a number of seconds",
            ),
            (
                "1.0000000001,a\n",
                "line 1: timestamp \"1.0000000001\" has more than 9 digits",
            ),
            (
                "99999999999,a\n",
                "line 1: timestamp \"99999999999\" is too large",
            ),
            (",a\n", "line 1: timestamp \"\" is empty"),
            ("1\n", "line 1: no key"),
            ("1, ,2\n", "line 1: the key is empty"),
            ("1,a,2,3\n", "line 1: 4 fields, expected 2 or 3"),
            (
                "1,a\n1,a\n# c\n1,a,abc\n",
                "line 4: cost \"abc\" is not a whole number ≥ 1",
            ),
            ("1,a,0\n", "line 1: cost must be at least 1, got 0"),
            ("1,a,-2\n", "line 1: cost \"-2\" is not a whole number ≥ 1"),
            (
                "1,a,11\n",
                "line 1: cost 11 is above the limit 10 and can never be admitted",
            ),
            (
                "2,a\n1.5,b\n",
                "line 2: timestamp 1.5 is earlier than the previous request's 2",
            ),
        ];
        for (text, want) in cases {
            let got = read_str(text, 10).unwrap_err();
            assert!(
                got.starts_with(want),
                "{text:?}: got {got:?}, want {want:?}"
            );
        }
        // A cost too large for any integer is reported as written, not as a saturated value.
        let huge = read_str("1,a,99999999999999999999999\n", 10).unwrap_err();
        assert_eq!(
            huge,
            "line 1: cost 99999999999999999999999 is above the limit 10 and can never be admitted"
        );
        // Quoted fields (a spreadsheet's export) say what to write instead.
        for quoted in [
            "\"1.5\",\"a\"\n",
            "1.5,\"a\"\n",
            "\"timestamp\",\"key\"\n1,a\n",
        ] {
            let got = read_str(quoted, 10).unwrap_err();
            assert!(
                got.starts_with("line 1: a field is in quotes; write `timestamp,key[,cost]`"),
                "{quoted:?}: {got}"
            );
        }
        let not_utf8 = read(&b"1,a\n1,\xff\n"[..], 10, false)
            .unwrap_err()
            .to_string();
        assert_eq!(not_utf8, "line 2: not valid UTF-8");
        // A header is only a header before the first request.
        let late = read_str("1,a\ntimestamp,key\n", 10).unwrap_err();
        assert!(
            late.starts_with("line 2: timestamp \"timestamp\""),
            "{late}"
        );
    }

    #[test]
    fn skipping_bad_lines_counts_them_and_keeps_the_rest() {
        let trace = read("1,a\nx,a\n2,a,0\n3,b\n2.5,b\n4,a,2\n".as_bytes(), 5, true).unwrap();
        assert_eq!(
            trace.requests.iter().map(|r| r.at / S).collect::<Vec<_>>(),
            [1, 3, 4]
        );
        let lines: Vec<usize> = trace.bad_lines.iter().map(|e| e.line).collect();
        assert_eq!(lines, [2, 3, 5]);
        // Order is judged against the last good request.
        assert_eq!(
            trace.bad_lines[2].problem,
            Problem::OutOfOrder {
                previous: 3 * S,
                this: 2 * S + S / 2
            }
        );
    }

    #[test]
    fn a_trace_spans_at_most_max_span_from_its_first_request() {
        // Unix-like timestamps (2e9 s) are fine; only the span is bounded.
        let base = 2_000_000_000 * S;
        let last = base + MAX_SPAN;
        let ok = format!("{},a\n{},a\n", Seconds(base), Seconds(last));
        assert_eq!(read_str(&ok, 1).unwrap().requests[1].at, last);
        let late = format!("{},a\n{},b\n", Seconds(base), Seconds(last + 1));
        let got = read_str(&late, 1).unwrap_err();
        assert_eq!(
            got,
            "line 2: timestamp 4305843009.213693951 is more than 2305843009.21369395 s \
             (about 73 years) after the first request's 2000000000; a trace may span at most that"
        );
        // Skipped like any other bad line; the span counts from the first good request.
        let text = format!(
            "x,a\n{},a\n{},b\n{},a\n",
            Seconds(base),
            Seconds(last + 1),
            Seconds(last)
        );
        let trace = read(text.as_bytes(), 1, true).unwrap();
        assert_eq!(trace.requests.len(), 2);
        assert_eq!(trace.bad_lines.len(), 2);
        assert_eq!(
            trace.bad_lines[1],
            LineError {
                line: 3,
                problem: Problem::TooLate {
                    first: base,
                    this: last + 1
                }
            }
        );
    }

    #[test]
    fn a_byte_order_mark_before_the_first_line_is_ignored() {
        let trace = read_str("\u{feff}timestamp,key\n1,a\n", 1).unwrap();
        assert_eq!(trace.requests.len(), 1);
        let trace = read_str("\u{feff}1,a\r\n2,a\n", 1).unwrap();
        assert_eq!(trace.requests.len(), 2);
        // Only at the start of the file.
        let later = read_str("1,a\n\u{feff}2,a\n", 1).unwrap_err();
        assert!(later.starts_with("line 2: timestamp"), "{later}");
    }

    #[test]
    fn too_large_names_the_real_bound() {
        assert_eq!(
            NumberError::TooLarge.to_string(),
            "is too large (at most 4611686018.427387903 s)"
        );
    }

    #[test]
    fn seconds_display_exactly() {
        assert_eq!(Seconds(12 * S + 1).to_string(), "12.000000001");
        assert_eq!(Seconds(S / 2).to_string(), "0.5");
        assert_eq!(Seconds(0).to_string(), "0");
    }
}
