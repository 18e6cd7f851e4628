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
mod simulate;
mod trace;

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::generate::Scenario;
use crate::simulate::simulate;
use slidegate_serve::duration::parse_duration;

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
    /// Serve rate-limit decisions over HTTP/JSON and Envoy's rate limit gRPC API, from a
    /// rules file reloaded when it changes (docs/serve.md).
    Serve(slidegate_serve::Args),
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
        Some(Command::Serve(args)) => slidegate_serve::run(&args).map_err(Failure::other),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
