//! The options of `slidegate simulate`, as clap reads them.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use slidegate_serve::duration::parse_duration;

use crate::simulate::generate::Scenario;

/// The options of `slidegate simulate`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct Simulate {
    /// Replay this CSV trace (`timestamp,key[,cost]` per line, seconds with up to 9
    /// decimals, sorted by time) instead of a built-in scenario.
    #[arg(long, value_name = "FILE.csv")]
    pub(crate) trace: Option<PathBuf>,

    /// Skip malformed trace lines, counting and reporting them, instead of failing.
    #[arg(long, requires = "trace")]
    pub(crate) skip_bad_lines: bool,

    /// The built-in traffic to generate (without --trace).
    #[arg(long, value_enum, default_value_t = Scenario::Mixed, conflicts_with = "trace")]
    pub(crate) scenario: Scenario,

    /// The quota's limit L: at most L units of cost in any window.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: u64,

    /// The quota's window W (units: ns, us, ms, s, m, h; e.g. 60s, 1.5s, 250ms).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub(crate) window: Duration,

    /// Bucket lengths for Strict and Weighted, comma-separated; each must divide the window
    /// [default: W, W/10, W/60 where they are whole nanoseconds].
    #[arg(long, value_delimiter = ',', value_parser = parse_duration)]
    pub(crate) granularity: Vec<Duration>,

    /// How long the generated traffic lasts (at most about 73 years).
    #[arg(long, default_value = "10m", value_parser = parse_duration, conflicts_with = "trace")]
    pub(crate) duration: Duration,

    /// How many keys the generated traffic uses (live at once, for churn).
    #[arg(
        long,
        default_value_t = 1000,
        value_parser = clap::value_parser!(u32).range(1..),
        conflicts_with = "trace"
    )]
    pub(crate) keys: u32,

    /// Mean requests per second per key [default: 1.25 × L / W, a quarter over the quota].
    #[arg(long, value_parser = parse_rate, conflicts_with = "trace")]
    pub(crate) rate: Option<f64>,

    /// Burst length for `bursts` [default: 0.3 × W].
    #[arg(long, value_parser = parse_duration, conflicts_with = "trace")]
    pub(crate) on: Option<Duration>,

    /// Silence between bursts for `bursts` [default: 0.9 × W].
    #[arg(long, value_parser = parse_duration, conflicts_with = "trace")]
    pub(crate) off: Option<Duration>,

    /// How long each key stays active for `churn` [default: 2 × W].
    #[arg(long, value_parser = parse_duration, conflicts_with = "trace")]
    pub(crate) lifetime: Option<Duration>,

    /// Seed of the generator: the same seed gives the same traffic.
    #[arg(long, default_value_t = 1, conflicts_with = "trace")]
    pub(crate) seed: u64,

    /// Where to write the SVG chart.
    #[arg(long, value_name = "PATH", default_value = "slidegate-simulate.svg")]
    pub(crate) chart: PathBuf,

    /// The key the chart follows [default: the key with the most requests].
    #[arg(long, value_name = "KEY")]
    pub(crate) chart_key: Option<String>,

    /// Also replay every algorithm through the Redis backend at this URL
    /// (`redis://[:password@]host:port[/db]`), each request judged at its own time: rows
    /// "Redis …" in the table, for accuracy and decisions per second. Its keys take their own
    /// prefix and expire an hour after the run.
    #[arg(long, value_name = "URL")]
    pub(crate) redis: Option<String>,
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

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "\"{text}\" is not a positive number of requests per second"
        )),
    }
}
