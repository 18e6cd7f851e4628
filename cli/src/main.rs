//! `slidegate`: the command-line tool.
//!
//! `slidegate simulate` (also what a bare `slidegate` runs) replays a trace — a CSV file or a
//! built-in generator — through every algorithm slidegate has, each on its own keyed limiter
//! on a simulated clock, and compares each with the exact sliding log: a table of admitted,
//! wrongly allowed and wrongly denied requests, the worst window, memory per key and
//! decisions per second, and an SVG chart of the admitted rate over time against the limit.
//!
//! ```sh
//! cargo run --release -- simulate
//! cargo run --release -- simulate --scenario boundary --limit 10 --window 1s
//! cargo run --release -- simulate --trace requests.csv --limit 100 --window 60s
//! ```

mod chart;
mod generate;
mod redis;
mod report;
mod run;
mod trace;

use std::fs::File;
use std::io::{self, BufReader, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use slidegate::Quota;

use crate::generate::{Params, Scenario};
use crate::report::Row;
use crate::trace::{MAX_NANOS, MAX_SPAN, Seconds, Trace};

/// slidegate's command-line tool: see what each rate-limiting algorithm admits on your traffic.
///
/// Without a command, runs `slidegate simulate` (its options may be given too).
#[derive(Debug, Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    /// `simulate`'s options, for a bare `slidegate`.
    #[command(flatten)]
    simulate: Simulate,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay traffic through every algorithm and compare each with the exact sliding log
    /// (the default command).
    Simulate(Simulate),
}

/// The options of `slidegate simulate`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
struct Simulate {
    /// Replay this CSV trace (`timestamp,key[,cost]` per line, seconds with up to 9
    /// decimals, sorted by time) instead of a built-in scenario.
    #[arg(long, value_name = "FILE.csv")]
    trace: Option<PathBuf>,

    /// Skip malformed trace lines, counting and reporting them, instead of failing.
    #[arg(long, requires = "trace")]
    skip_bad_lines: bool,

    /// The built-in traffic to generate (without --trace).
    #[arg(long, value_enum, default_value_t = Scenario::Mixed, conflicts_with = "trace")]
    scenario: Scenario,

    /// The quota's limit L: at most L units of cost in any window.
    #[arg(long, default_value_t = 100)]
    limit: u64,

    /// The quota's window W (units: ns, us, ms, s, m, h; e.g. 60s, 1.5s, 250ms).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    window: Duration,

    /// Bucket lengths for Strict and Weighted, comma-separated; each must divide the window
    /// [default: W, W/10, W/60 where they are whole nanoseconds].
    #[arg(long, value_delimiter = ',', value_parser = parse_duration)]
    granularity: Vec<Duration>,

    /// How long the generated traffic lasts (at most about 73 years).
    #[arg(long, default_value = "10m", value_parser = parse_duration, conflicts_with = "trace")]
    duration: Duration,

    /// How many keys the generated traffic uses (live at once, for churn).
    #[arg(
        long,
        default_value_t = 1000,
        value_parser = clap::value_parser!(u32).range(1..),
        conflicts_with = "trace"
    )]
    keys: u32,

    /// Mean requests per second per key [default: 1.25 × L / W, a quarter over the quota].
    #[arg(long, value_parser = parse_rate, conflicts_with = "trace")]
    rate: Option<f64>,

    /// Burst length for `bursts` [default: 0.3 × W].
    #[arg(long, value_parser = parse_duration, conflicts_with = "trace")]
    on: Option<Duration>,

    /// Silence between bursts for `bursts` [default: 0.9 × W].
    #[arg(long, value_parser = parse_duration, conflicts_with = "trace")]
    off: Option<Duration>,

    /// How long each key stays active for `churn` [default: 2 × W].
    #[arg(long, value_parser = parse_duration, conflicts_with = "trace")]
    lifetime: Option<Duration>,

    /// Seed of the generator: the same seed gives the same traffic.
    #[arg(long, default_value_t = 1, conflicts_with = "trace")]
    seed: u64,

    /// Where to write the SVG chart.
    #[arg(long, value_name = "PATH", default_value = "slidegate-simulate.svg")]
    chart: PathBuf,

    /// The key the chart follows [default: the key with the most requests].
    #[arg(long, value_name = "KEY")]
    chart_key: Option<String>,

    /// Also replay every algorithm through the Redis backend at this URL
    /// (`redis://[:password@]host:port[/db]`), each request judged at its own time: rows
    /// "Redis …" in the table, for accuracy and decisions per second. Its keys take their own
    /// prefix and expire an hour after the run.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
}

const AFTER_HELP: &str = "\
Every algorithm runs on its own keyed limiter over the same trace, on a simulated clock that
follows the requests' timestamps. The exact sliding log is the reference: a request is wrongly
allowed when an algorithm admitted it and the exact log denied it, wrongly denied for the
reverse, as a share of all requests. After a first disagreement an algorithm's state differs
from the exact log's (each admits different traffic), and later requests are judged on its own
state — the standard way, as in Cloudflare's comparison.

Trace format: `timestamp,key[,cost]` per line; timestamp in seconds with up to 9 decimals, read
exactly to the nanosecond; non-decreasing (an earlier timestamp is an error naming the line:
sort the file first) and at most about 73 years after the first; cost 1..=limit, 1 when absent.
An optional header line starting with `timestamp`, blank lines and lines starting with `#` are
skipped, as is a byte order mark at the start of the file.";

/// The most requests a generated run may make: about 4 GB of memory at its peak (80 bytes a
/// request: each is generated with its key's name, then kept in the trace, and every
/// algorithm's decisions on it are kept for the table and the chart).
const MAX_REQUESTS: f64 = 50_000_000.0;

/// The most state one key may need. The exact log keeps 8 bytes per unit of the limit, and
/// a run may hold every key at once.
const MAX_BYTES_PER_KEY: usize = 1 << 30;

/// A failure, with the exit code it maps to.
struct Failure {
    /// What went wrong; `None` ends the run without a word.
    message: Option<String>,
    /// 2: bad arguments (as clap's own usage errors); 1: anything else; 0: the reader of the
    /// output went away.
    code: u8,
}

impl Failure {
    fn usage(message: impl ToString) -> Failure {
        Failure {
            message: Some(message.to_string()),
            code: 2,
        }
    }

    fn other(message: impl ToString) -> Failure {
        Failure {
            message: Some(message.to_string()),
            code: 1,
        }
    }
}

/// A failure to write the output. A closed pipe (`slidegate simulate | head -1`) means the
/// reader has read all it wants: the run stops there, quietly and successfully, as `cat` does.
impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Failure {
                message: None,
                code: 0,
            }
        } else {
            Failure::other(format!("cannot write the output: {e}"))
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = io::stdout().lock();
    // A bare `slidegate` is `slidegate simulate`.
    let result = match cli.command {
        Some(Command::Simulate(args)) => simulate(&args, &mut out),
        None => simulate(&cli.simulate, &mut out),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if let Some(message) = f.message {
                eprintln!("error: {message}");
            }
            ExitCode::from(f.code)
        }
    }
}

/// `digits[.digits]unit`, exactly, with unit one of ns, us (µs), ms, s, m, h.
fn parse_duration(text: &str) -> Result<Duration, String> {
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
    let ns = trace::parse_decimal(number, base).map_err(|e| format!("\"{number}\" {e}"))?;
    // The number was bounded in seconds; in minutes or hours it can be in range while the
    // duration is not.
    let ns = ns
        .checked_mul(factor)
        .filter(|&ns| ns <= MAX_NANOS)
        .ok_or_else(|| format!("\"{text}\" is too long (at most {} s)", Seconds(MAX_NANOS)))?;
    Ok(Duration::from_nanos(ns))
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "\"{text}\" is not a positive number of requests per second"
        )),
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `slidegate simulate`, printing to `out`.
fn simulate(args: &Simulate, out: &mut impl Write) -> Result<(), Failure> {
    let started = Instant::now();
    let base = Quota::new(args.limit, args.window).map_err(Failure::usage)?;
    let algorithms = run::algorithms(base, &args.granularity).map_err(Failure::usage)?;
    let window = nanos(args.window);
    // Refused before reading or generating anything: one key's state could not be allocated.
    if let Some(a) = algorithms
        .iter()
        .find(|a| a.quota.bytes_per_key() > MAX_BYTES_PER_KEY)
    {
        let bytes = a.quota.bytes_per_key();
        return Err(Failure::usage(format!(
            "--limit {}: {} needs {bytes} bytes ({:.2} GiB) of state per key, more than the \
             {MAX_BYTES_PER_KEY} (1 GiB) a run allows; lower --limit",
            args.limit,
            label(a),
            bytes as f64 / f64::from(1 << 30),
        )));
    }

    let (trace, source) = load(args, window)?;
    let (Some(first), Some(last)) = (trace.requests.first(), trace.requests.last()) else {
        let skipped = match trace.bad_lines.first() {
            Some(e) => format!(
                ": --skip-bad-lines skipped all {} data lines, the first at {e}",
                trace.bad_lines.len()
            ),
            None => String::new(),
        };
        return Err(Failure::other(format!(
            "{source}: no requests to simulate{skipped}"
        )));
    };
    let (first, last) = (first.at, last.at);
    writeln!(
        out,
        "slidegate simulate: {source}: {} requests, {} keys over {:.1} s; quota L = {} per {}",
        trace.requests.len(),
        trace.keys.len(),
        (last - first) as f64 / 1e9,
        args.limit,
        report::duration(args.window),
    )?;
    if !trace.bad_lines.is_empty() {
        writeln!(
            out,
            "skipped {} bad lines (--skip-bad-lines):",
            trace.bad_lines.len()
        )?;
        for e in trace.bad_lines.iter().take(5) {
            writeln!(out, "  {e}")?;
        }
        if trace.bad_lines.len() > 5 {
            writeln!(out, "  …")?;
        }
    }

    let keys = run::by_key(&trace);
    let key =
        match &args.chart_key {
            Some(k) => trace.keys.iter().position(|x| x == k).ok_or_else(|| {
                Failure::usage(format!("--chart-key \"{k}\" is not in the trace"))
            })?,
            // The most requests; the first such key on a tie.
            None => (0..keys.len())
                .max_by_key(|&k| (keys[k].len(), std::cmp::Reverse(k)))
                .unwrap_or(0),
        };

    // One limiter lives at a time; each may hold every key of the trace at once.
    if let Some(a) = algorithms.iter().max_by_key(|a| a.quota.bytes_per_key()) {
        let bytes = a.quota.bytes_per_key() as f64 * trace.keys.len() as f64;
        if bytes > 4.0 * f64::from(1 << 30) {
            eprintln!(
                "warning: {} may need up to {:.1} GiB of state ({} keys × {} bytes); \
                 lower --limit or the number of keys if memory runs out",
                label(a),
                bytes / f64::from(1 << 30),
                trace.keys.len(),
                a.quota.bytes_per_key()
            );
        }
    }

    let total = trace.requests.len() as u64 * algorithms.len() as u64;
    // Short runs finish before a bar would be read; a pipe or file gets no bar at all.
    let progress = if total >= 5_000_000 && std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(total);
        if let Ok(style) = ProgressStyle::with_template(
            "{msg:>16} [{bar:40}] {percent:>3}% {human_pos}/{human_len} decisions, eta {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    } else {
        ProgressBar::hidden()
    };

    let mut entries = Vec::with_capacity(algorithms.len() + 1);
    for a in &algorithms {
        progress.set_message(label(a));
        let replay = run::replay(&trace, a.quota, &progress)
            .map_err(|e| Failure::other(format!("{}: {e}", a.name)))?;
        entries.push(Entry {
            name: a.name.to_owned(),
            label: label(a),
            granularity: if a.bucketed {
                format!(
                    "{} (N={})",
                    report::duration(a.quota.granularity()),
                    a.quota.buckets()
                )
            } else {
                String::new()
            },
            bytes_per_key: a.quota.bytes_per_key(),
            reference: a.is_reference(),
            replay,
        });
    }
    progress.finish_and_clear();

    if let Some(url) = &args.redis {
        let backend = redis::Backend::connect(url).map_err(Failure::other)?;
        for (index, a) in algorithms.iter().enumerate() {
            match backend.replay(&trace, a.quota, index) {
                Ok(replay) => entries.push(Entry {
                    name: format!("Redis {}", a.name),
                    label: format!("Redis {}", label(a)),
                    granularity: entries[index].granularity.clone(),
                    bytes_per_key: entries[index].bytes_per_key,
                    reference: false,
                    replay,
                }),
                Err(e) => eprintln!("--redis: {}: {e}", label(a)),
            }
        }
    }

    let reference = entries
        .iter()
        .find(|e| e.reference)
        .map(|e| &e.replay.allowed)
        .ok_or_else(|| Failure::other("no reference algorithm"))?;
    let rows: Vec<Row> = entries
        .iter()
        .map(|e| {
            let allowed = &e.replay.allowed;
            let (wrongly_allowed, wrongly_denied) = run::disagreements(allowed, reference);
            Row {
                algorithm: e.name.clone(),
                granularity: e.granularity.clone(),
                requests: allowed.len() as u64,
                admitted: allowed.iter().filter(|&&x| x).count() as u64,
                wrongly_allowed,
                wrongly_denied,
                worst_window: run::worst_window(&trace, &keys, allowed, window),
                bytes_per_key: e.bytes_per_key,
                elapsed: e.replay.elapsed,
            }
        })
        .collect();
    writeln!(out)?;
    write!(out, "{}", report::table(&rows, args.limit, args.window))?;
    writeln!(out)?;
    writeln!(out, "{}", report::FOOTNOTE)?;
    writeln!(out)?;

    const BINS: usize = 600;
    // BINS · width > last − first: the last request falls inside the last bin.
    let width = (last - first) / BINS as u64 + 1;
    // The chart shows the local limiters; Redis rows decide alike.
    let series: Vec<chart::Series> = entries
        .iter()
        .filter(|e| !e.name.starts_with("Redis "))
        .map(|e| {
            let points: Vec<(u64, u64)> = keys[key]
                .iter()
                .map(|&i| i as usize)
                .filter(|&i| e.replay.allowed[i])
                .map(|i| (trace.requests[i].at, u64::from(trace.requests[i].cost)))
                .collect();
            chart::Series {
                label: e.label.clone(),
                peaks: run::trailing_peaks(&points, window, first, width, BINS),
            }
        })
        .collect();
    chart::write(
        &args.chart,
        &chart::Chart {
            title: format!(
                "slidegate simulate — {source} — key \"{}\"",
                trace.keys[key]
            ),
            y_label: format!(
                "most admitted in the trailing {}",
                report::duration(args.window)
            ),
            bin_seconds: width as f64 / 1e9,
            limit: args.limit,
            series: &series,
        },
    )
    .map_err(Failure::other)?;
    writeln!(
        out,
        "chart: {} (key \"{}\": admitted in the trailing {} per algorithm, against L)",
        args.chart.display(),
        trace.keys[key],
        report::duration(args.window)
    )?;
    writeln!(out, "ran in {:.2} s", started.elapsed().as_secs_f64())?;
    out.flush()?;
    Ok(())
}

/// One replayed algorithm, ready for the table and the chart.
struct Entry {
    name: String,
    label: String,
    granularity: String,
    bytes_per_key: usize,
    reference: bool,
    replay: run::Replay,
}

/// "Strict N=10", "GCRA".
fn label(a: &run::Algorithm) -> String {
    if a.bucketed {
        format!("{} N={}", a.name, a.quota.buckets())
    } else {
        a.name.to_owned()
    }
}

/// The trace to replay and a description of where it came from.
fn load(args: &Simulate, window: u64) -> Result<(Trace, String), Failure> {
    if let Some(path) = &args.trace {
        let file = File::open(path)
            .map_err(|e| Failure::other(format!("cannot open {}: {e}", path.display())))?;
        let trace = trace::read(BufReader::new(file), args.limit, args.skip_bad_lines)
            .map_err(|e| Failure::other(format!("{}: {e}", path.display())))?;
        return Ok((trace, format!("trace {}", path.display())));
    }
    // The generated times run from 0 to the duration: its bound is the span's.
    if nanos(args.duration) > MAX_SPAN {
        return Err(Failure::usage(format!(
            "--duration {} is too long: at most {} s (about 73 years)",
            report::duration(args.duration),
            Seconds(MAX_SPAN)
        )));
    }
    for (flag, value) in [("--on", args.on), ("--lifetime", args.lifetime)] {
        if value == Some(Duration::ZERO) {
            return Err(Failure::usage(format!(
                "{flag} 0s: must be longer than zero"
            )));
        }
    }
    let limit_rate = args.limit as f64 / args.window.as_secs_f64();
    let params = Params {
        limit: args.limit,
        window,
        duration: nanos(args.duration),
        keys: args.keys,
        rate: args.rate.unwrap_or(1.25 * limit_rate),
        // At least 1 ns: a window under 10 ns would otherwise give empty bursts.
        on: args.on.map_or((window / 10 * 3).max(1), nanos),
        off: args.off.map_or(window / 10 * 9, nanos),
        lifetime: args.lifetime.map_or(window.saturating_mul(2), nanos),
        seed: args.seed,
    };
    let expected = generate::expected_requests(args.scenario, &params);
    if expected > MAX_REQUESTS {
        let flags = match args.scenario {
            Scenario::Boundary => "--limit, --keys or --duration",
            Scenario::Mixed => "--rate, --limit, --keys or --duration",
            Scenario::Steady | Scenario::Bursts | Scenario::Churn => "--rate, --keys or --duration",
        };
        let rate = if args.rate.is_none() && args.scenario != Scenario::Boundary {
            format!(
                " (--rate defaults to 1.25 × L / W, here {:.3e} per second per key)",
                params.rate
            )
        } else {
            String::new()
        };
        return Err(Failure::usage(format!(
            "scenario {} would generate about {expected:.2e} requests, more than the \
             {MAX_REQUESTS:.0} a run holds in memory; lower {flags}{rate}",
            args.scenario
        )));
    }
    let trace = generate::generate(args.scenario, &params);
    let source = format!(
        "scenario {} (seed {}, {} keys, {})",
        args.scenario,
        args.seed,
        args.keys,
        report::duration(args.duration)
    );
    Ok((trace, source))
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

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
