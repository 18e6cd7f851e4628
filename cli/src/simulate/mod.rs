//! `slidegate simulate`: load or generate a trace, replay it through every algorithm, print
//! the table and draw the chart.

mod args;
mod chart;
mod generate;
mod redis_replay;
mod report;
mod run;
pub mod trace;

pub use args::Simulate;

use std::fs::File;
use std::io::{BufReader, IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use slidegate::Quota;

use self::generate::{Params, Scenario};
use self::report::Row;
use self::run::Algorithm;
use self::trace::{MAX_SPAN, Seconds, Trace};
use crate::Failure;

/// The most requests a generated run may make: about 4 GB of memory at its peak (80 bytes a
/// request: each is generated with its key's name, then kept in the trace, and every
/// algorithm's decisions on it are kept for the table and the chart).
const MAX_REQUESTS: f64 = 50_000_000.0;

/// The most state one key may need. The exact log keeps 8 bytes per unit of the limit, and
/// a run may hold every key at once.
const MAX_BYTES_PER_KEY: usize = 1 << 30;

/// The chart's number of time bins.
const BINS: usize = 600;

/// `slidegate simulate`, printing to `out`.
pub fn simulate(args: &Simulate, out: &mut impl Write) -> Result<(), Failure> {
    let started = Instant::now();
    chart::check_path(&args.chart).map_err(Failure::usage)?;
    let algorithms = plan(args)?;
    let window = nanos(args.window);
    let (trace, source) = load(args, window)?;
    let (first, last) = span(&trace, &source)?;
    write_header(out, args, &trace, &source, (first, last))?;
    let keys = run::by_key(&trace);
    let key = chart_key(args, &trace, &keys, &source)?;
    warn_of_memory(&algorithms, &trace);
    let mut entries = replay_all(&trace, &algorithms)?;
    if let Some(url) = &args.redis {
        replay_on_redis(url, &trace, &algorithms, &mut entries)?;
    }
    write_table(out, args, &trace, &keys, &entries)?;
    draw_chart(
        args,
        &trace,
        key,
        &keys[key],
        &entries,
        (first, last),
        &source,
    )?;
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

/// The algorithms to replay, refused before anything is read or generated if one key's
/// state could not be allocated.
fn plan(args: &Simulate) -> Result<Vec<Algorithm>, Failure> {
    let base = Quota::new(args.limit, args.window).map_err(Failure::usage)?;
    let algorithms = run::algorithms(base, &args.granularity).map_err(Failure::usage)?;
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
    Ok(algorithms)
}

/// The first and last requests' times, or the error of a trace with none.
fn span(trace: &Trace, source: &str) -> Result<(u64, u64), Failure> {
    if let (Some(first), Some(last)) = (trace.requests.first(), trace.requests.last()) {
        return Ok((first.at, last.at));
    }
    let skipped = match trace.bad_lines.first() {
        Some(e) => format!(
            ": --skip-bad-lines skipped all {} data lines, the first at {e}",
            trace.bad_lines.len()
        ),
        None => String::new(),
    };
    Err(Failure::other(format!(
        "{source}: no requests to simulate{skipped}"
    )))
}

/// The line that says what is replayed, and the bad lines skipped, if any.
fn write_header(
    out: &mut impl Write,
    args: &Simulate,
    trace: &Trace,
    source: &str,
    (first, last): (u64, u64),
) -> Result<(), Failure> {
    writeln!(
        out,
        "slidegate simulate: {source}: {}, {} over {:.1} s; quota L = {} per {}",
        count(trace.requests.len(), "request"),
        count(trace.keys.len(), "key"),
        (last - first) as f64 / 1e9,
        args.limit,
        report::duration(args.window),
    )?;
    if !trace.bad_lines.is_empty() {
        writeln!(
            out,
            "skipped {} (--skip-bad-lines):",
            count(trace.bad_lines.len(), "bad line")
        )?;
        for e in trace.bad_lines.iter().take(5) {
            writeln!(out, "  {e}")?;
        }
        if trace.bad_lines.len() > 5 {
            writeln!(out, "  …")?;
        }
    }
    Ok(())
}

/// `n` and `noun`, plural unless `n` is 1: "1 request", "3 keys".
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// The key the chart follows: `--chart-key`, else the key with the most requests (the
/// first such key on a tie).
fn chart_key(
    args: &Simulate,
    trace: &Trace,
    keys: &[Vec<u32>],
    source: &str,
) -> Result<usize, Failure> {
    match &args.chart_key {
        Some(k) => trace.keys.iter().position(|x| x == k).ok_or_else(|| {
            let some: Vec<String> = trace
                .keys
                .iter()
                .take(3)
                .map(|k| format!("\"{k}\""))
                .collect();
            Failure::usage(format!(
                "--chart-key \"{k}\" is not a key of {source} (its keys include {})",
                some.join(", ")
            ))
        }),
        None => Ok((0..keys.len())
            .max_by_key(|&k| (keys[k].len(), std::cmp::Reverse(k)))
            .unwrap_or(0)),
    }
}

/// Warns when the largest state of every key of the trace at once may not fit in memory
/// (one limiter lives at a time; each may hold every key).
fn warn_of_memory(algorithms: &[Algorithm], trace: &Trace) {
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
}

/// One replayed algorithm, ready for the table and the chart.
struct Entry<'a> {
    algorithm: &'a Algorithm,
    /// Replayed through the Redis backend rather than the local limiter.
    redis: bool,
    replay: run::Replay,
}

impl Entry<'_> {
    /// The table's name: "Strict", "Redis Strict".
    fn name(&self) -> String {
        if self.redis {
            format!("Redis {}", self.algorithm.name)
        } else {
            self.algorithm.name.to_owned()
        }
    }

    /// The table's granularity column: empty for the algorithms without buckets.
    fn granularity(&self) -> String {
        let q = self.algorithm.quota;
        if self.algorithm.bucketed {
            format!("{} (N={})", report::duration(q.granularity()), q.buckets())
        } else {
            String::new()
        }
    }
}

/// Replays `trace` through every algorithm, with a progress bar on a terminal for long runs.
fn replay_all<'a>(trace: &Trace, algorithms: &'a [Algorithm]) -> Result<Vec<Entry<'a>>, Failure> {
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
    let mut entries = Vec::with_capacity(algorithms.len());
    for a in algorithms {
        progress.set_message(label(a));
        let replay = run::replay(trace, a.quota, &progress)
            .map_err(|e| Failure::other(format!("{}: {e}", a.name)))?;
        entries.push(Entry {
            algorithm: a,
            redis: false,
            replay,
        });
    }
    progress.finish_and_clear();
    Ok(entries)
}

/// Replays `trace` through every algorithm on the Redis backend at `url`, adding a "Redis …"
/// entry after the local ones for each.
fn replay_on_redis<'a>(
    url: &str,
    trace: &Trace,
    algorithms: &'a [Algorithm],
    entries: &mut Vec<Entry<'a>>,
) -> Result<(), Failure> {
    let backend = redis_replay::Backend::connect(url).map_err(Failure::other)?;
    for (index, a) in algorithms.iter().enumerate() {
        match backend.replay(trace, a.quota, index) {
            Ok(replay) => entries.push(Entry {
                algorithm: a,
                redis: true,
                replay,
            }),
            Err(e) => eprintln!("--redis: {}: {e}", label(a)),
        }
    }
    Ok(())
}

/// The table, every algorithm against the reference (the exact log), and its footnote.
fn write_table(
    out: &mut impl Write,
    args: &Simulate,
    trace: &Trace,
    keys: &[Vec<u32>],
    entries: &[Entry],
) -> Result<(), Failure> {
    let window = nanos(args.window);
    let reference = entries
        .iter()
        .find(|e| !e.redis && e.algorithm.is_reference())
        .map(|e| &e.replay.allowed)
        .ok_or_else(|| Failure::other("no reference algorithm"))?;
    let rows: Vec<Row> = entries
        .iter()
        .map(|e| {
            let allowed = &e.replay.allowed;
            let (wrongly_allowed, wrongly_denied) = run::disagreements(allowed, reference);
            Row {
                algorithm: e.name(),
                granularity: e.granularity(),
                requests: allowed.len() as u64,
                admitted: allowed.iter().filter(|&&x| x).count() as u64,
                wrongly_allowed,
                wrongly_denied,
                worst_window: run::worst_window(trace, keys, allowed, window),
                bytes_per_key: e.algorithm.quota.bytes_per_key(),
                elapsed: e.replay.elapsed,
            }
        })
        .collect();
    writeln!(out)?;
    write!(out, "{}", report::table(&rows, args.limit, args.window))?;
    writeln!(out)?;
    writeln!(out, "{}", report::FOOTNOTE)?;
    writeln!(out)?;
    Ok(())
}

/// The chart of key `key`, whose requests are `requests` (indices into the trace): the most
/// admitted in the trailing window over time, per algorithm, against the limit.
fn draw_chart(
    args: &Simulate,
    trace: &Trace,
    key: usize,
    requests: &[u32],
    entries: &[Entry],
    (first, last): (u64, u64),
    source: &str,
) -> Result<(), Failure> {
    let window = nanos(args.window);
    // To one window after the last request, when every line is back at 0: the chart shows
    // the whole life of each admission. BINS · width > end − first: the end falls inside the
    // last bin.
    let end = last.saturating_add(window);
    let width = (end - first) / BINS as u64 + 1;
    // The chart shows the local limiters; Redis rows decide alike.
    let series: Vec<chart::Series> = entries
        .iter()
        .filter(|e| !e.redis)
        .map(|e| {
            let points: Vec<(u64, u64)> = requests
                .iter()
                .map(|&i| i as usize)
                .filter(|&i| e.replay.allowed[i])
                .map(|i| (trace.requests[i].at, u64::from(trace.requests[i].cost)))
                .collect();
            chart::Series {
                label: label(e.algorithm),
                peaks: run::trailing_peaks(&points, window, first, width, BINS),
                mode: e.algorithm.quota.mode(),
                rank: e.algorithm.rank,
            }
        })
        .collect();
    let key = &trace.keys[key];
    chart::write(
        &args.chart,
        &chart::Chart {
            title: format!("slidegate simulate — {source} — key \"{key}\""),
            y_label: format!(
                "most admitted in the trailing {}",
                report::duration(args.window)
            ),
            bin_seconds: width as f64 / 1e9,
            limit: args.limit,
            series: &series,
        },
    )
    .map_err(Failure::other)
}

/// "Strict N=10", "GCRA".
fn label(a: &Algorithm) -> String {
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
    let params = params(args, window)?;
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

/// The generator's parameters, refused if the run would be too long or too large for memory.
fn params(args: &Simulate, window: u64) -> Result<Params, Failure> {
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
    Ok(params)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
