//! What the server records, through the `metrics` facade, and `GET /metrics` in the
//! Prometheus text format (metrics-exporter-prometheus). Handles are made once (per rule at
//! load, per API at start), so a request pays an atomic add per counter, not a lookup. The
//! decision's time is the exception: fixed buckets of atomic counters ([`Timing`]), written
//! after the exporter's text in the exporter's format, where the facade's histogram queued
//! every sample for the exporter to sort at the next render, a cost on every request that
//! `serve/benches/serve_instructions.sh` counts.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use metrics::Counter;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use slidegate::clock::{Clock, Nanos, QuantaClock};
use slidegate::redis::Degraded;

/// Requests answered, by `api` (`http`, `grpc`) and `outcome` (`ok`, `over_limit`,
/// `invalid`, `error`).
pub(crate) const REQUESTS: &str = "slidegate_serve_requests_total";
/// Time from a decoded request to its answer, by `api`.
pub(crate) const DECISION_SECONDS: &str = "slidegate_serve_decision_seconds";
/// Checks per rule, by `rule` and `outcome` (`ok`, `over_limit`, `shadow_over_limit`).
pub(crate) const RULE_CHECKS: &str = "slidegate_serve_rule_checks_total";
/// Rules file loads after the first, by `result` (`ok`, `error`).
pub(crate) const RELOADS: &str = "slidegate_serve_rules_reloads_total";
/// The generation of the rules in force (1 at start, +1 per reload put in force).
pub(crate) const GENERATION: &str = "slidegate_serve_rules_generation";
/// 1 if the last attempt to load the rules file succeeded, 0 if the rules in force are older
/// than the file.
pub(crate) const LAST_RELOAD_OK: &str = "slidegate_serve_rules_last_reload_ok";
/// Redis decisions made by the fallback, by `reason` (`deadline`, `failed`, `breaker_open`).
pub(crate) const REDIS_DEGRADED: &str = "slidegate_serve_redis_degraded_total";
/// Keys held per in-memory rule, by `rule`.
pub(crate) const KEYS: &str = "slidegate_serve_keys";

/// The upper bounds of `DECISION_SECONDS`'s buckets, in seconds.
const BUCKETS: [f64; 12] = [
    5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2,
];

/// The description of `DECISION_SECONDS` in its `# HELP` line.
const DECISION_HELP: &str = "Time from a decoded request to its answer.";

/// Installs the Prometheus recorder as the process's `metrics` recorder.
pub(crate) fn install() -> Result<PrometheusHandle, String> {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| e.to_string())?;
    metrics::describe_counter!(REQUESTS, "Requests answered, by API and outcome.");
    metrics::describe_counter!(RULE_CHECKS, "Checks per rule, by outcome.");
    metrics::describe_counter!(RELOADS, "Rules file reloads, by result.");
    metrics::describe_gauge!(GENERATION, "Generation of the rules in force.");
    metrics::describe_gauge!(
        LAST_RELOAD_OK,
        "1 if the last load of the rules file succeeded."
    );
    metrics::describe_counter!(REDIS_DEGRADED, "Decisions Redis did not make, by reason.");
    metrics::describe_gauge!(KEYS, "Keys held per in-memory rule.");
    Ok(handle)
}

/// One rule's counters.
pub(crate) struct RuleMetrics {
    ok: Counter,
    over: Counter,
    shadow_over: Counter,
}

impl RuleMetrics {
    pub(crate) fn new(rule: &str) -> RuleMetrics {
        let c = |outcome: &'static str| metrics::counter!(RULE_CHECKS, "rule" => rule.to_owned(), "outcome" => outcome);
        RuleMetrics {
            ok: c("ok"),
            over: c("over_limit"),
            shadow_over: c("shadow_over_limit"),
        }
    }

    pub(crate) fn record(&self, over: bool, shadow_over: bool) {
        match (over, shadow_over) {
            (true, _) => self.over.increment(1),
            (false, true) => self.shadow_over.increment(1),
            (false, false) => self.ok.increment(1),
        }
    }
}

/// How a request was answered.
#[derive(Clone, Copy)]
pub(crate) enum Answer {
    Ok,
    OverLimit,
    Invalid,
    Error,
}

/// `GET /metrics`: the exporter's text, then the decisions' times.
pub(crate) fn render(handle: &PrometheusHandle) -> String {
    let mut text = handle.render();
    write_timings(&mut text, &TIMINGS);
    text
}

/// The decisions' times of each API, the histogram `DECISION_SECONDS`, as the exporter writes
/// a histogram of the facade's (a test holds them to its text): its help and type lines, per
/// API the cumulative buckets, `+Inf`, the sum and the count, and a blank line.
fn write_timings(text: &mut String, timings: &[(&str, Timing)]) {
    let _ = writeln!(text, "# HELP {DECISION_SECONDS} {DECISION_HELP}");
    let _ = writeln!(text, "# TYPE {DECISION_SECONDS} histogram");
    for (api, t) in timings {
        let mut count = 0;
        for (bound, bucket) in BUCKETS.iter().zip(&t.buckets) {
            count += bucket.load(Ordering::Relaxed);
            let _ = writeln!(
                text,
                "{DECISION_SECONDS}_bucket{{api=\"{api}\",le=\"{bound}\"}} {count}"
            );
        }
        count += t.buckets[BUCKETS.len()].load(Ordering::Relaxed);
        let _ = writeln!(
            text,
            "{DECISION_SECONDS}_bucket{{api=\"{api}\",le=\"+Inf\"}} {count}"
        );
        let sum = t.nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(text, "{DECISION_SECONDS}_sum{{api=\"{api}\"}} {sum}");
        let _ = writeln!(text, "{DECISION_SECONDS}_count{{api=\"{api}\"}} {count}");
    }
    text.push('\n');
}

/// One API's decision times: a count per bucket of `BUCKETS` (not cumulative; the last for
/// times above every bound) and their sum in nanoseconds. A time is two relaxed adds.
pub(crate) struct Timing {
    buckets: [AtomicU64; BUCKETS.len() + 1],
    nanos: AtomicU64,
}

impl Timing {
    const fn new() -> Timing {
        Timing {
            buckets: [const { AtomicU64::new(0) }; BUCKETS.len() + 1],
            nanos: AtomicU64::new(0),
        }
    }

    fn record(&self, nanos: u64) {
        // The bounds in nanoseconds, as `le` compares seconds: at most the bound.
        const BOUNDS: [u64; BUCKETS.len()] = {
            let mut ns = [0; BUCKETS.len()];
            let mut i = 0;
            while i < ns.len() {
                ns[i] = (BUCKETS[i] * 1e9 + 0.5) as u64;
                i += 1;
            }
            ns
        };
        let i = BOUNDS
            .iter()
            .position(|&b| nanos <= b)
            .unwrap_or(BOUNDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

/// The decision times of each API by its `api` label: one per process, as the process has one
/// `metrics` recorder.
static TIMINGS: [(&str, Timing); 2] = [("http", Timing::new()), ("grpc", Timing::new())];

/// One API's counters and timing.
pub(crate) struct ApiMetrics {
    answers: [Counter; 4],
    seconds: &'static Timing,
    /// The time-stamp counter, for the decision's time: a read and a multiply, where
    /// `Instant::now` and `elapsed` are two system clock reads and a subtraction of
    /// `timespec`s (about 90 instructions more per request).
    clock: QuantaClock,
}

impl ApiMetrics {
    pub(crate) fn new(api: &'static str) -> ApiMetrics {
        let c =
            |outcome: &'static str| metrics::counter!(REQUESTS, "api" => api, "outcome" => outcome);
        ApiMetrics {
            answers: [c("ok"), c("over_limit"), c("invalid"), c("error")],
            seconds: TIMINGS
                .iter()
                .find_map(|(name, t)| (*name == api).then_some(t))
                .expect("every API has its timing"),
            clock: QuantaClock::new(),
        }
    }

    /// When a request's decision starts, for [`ApiMetrics::record`].
    pub(crate) fn start(&self) -> Nanos {
        self.clock.now()
    }

    /// A request answered, its decision started at `started`.
    pub(crate) fn record(&self, answer: Answer, started: Nanos) {
        self.answers[answer as usize].increment(1);
        self.seconds
            .record(self.clock.now().0.saturating_sub(started.0));
    }
}

/// Counts a Redis decision the fallback made.
pub(crate) fn redis_path(degraded: Option<Degraded>) {
    if let Some(d) = degraded {
        let reason = match d {
            Degraded::Deadline => "deadline",
            Degraded::Failed => "failed",
            Degraded::BreakerOpen => "breaker_open",
        };
        metrics::counter!(REDIS_DEGRADED, "reason" => reason).increment(1);
    }
}

/// A reload's result.
pub(crate) fn reload(ok: bool, generation: u64) {
    metrics::counter!(RELOADS, "result" => if ok { "ok" } else { "error" }).increment(1);
    metrics::gauge!(LAST_RELOAD_OK).set(if ok { 1.0 } else { 0.0 });
    metrics::gauge!(GENERATION).set(generation as f64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics::Unit;
    use metrics_exporter_prometheus::Matcher;

    /// The decisions' times are written as the exporter writes the same samples recorded in a
    /// histogram of the facade with the same buckets: the same lines (the order of its label
    /// sets is its hash map's), the sum to a float addition's rounding.
    #[test]
    fn timings_are_written_as_the_exporter_writes_a_histogram() {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(DECISION_SECONDS.into()), &BUCKETS)
            .unwrap()
            .build_recorder();
        let nanos = [
            0,
            1,
            4_999,
            5_001,
            9_999,
            10_001,
            99_999,
            100_001,
            2_499_999,
            49_999_999,
            50_000_001,
            3_000_000_000,
        ];
        let ours = [("http", Timing::new()), ("grpc", Timing::new())];
        metrics::with_local_recorder(&recorder, || {
            metrics::describe_histogram!(DECISION_SECONDS, Unit::Seconds, DECISION_HELP);
            let http = metrics::histogram!(DECISION_SECONDS, "api" => "http");
            // Registered with no sample, as an API no request reached.
            let _grpc = metrics::histogram!(DECISION_SECONDS, "api" => "grpc");
            for (i, ns) in nanos.into_iter().enumerate() {
                for _ in 0..=i {
                    http.record(ns as f64 * 1e-9);
                    ours[0].1.record(ns);
                }
            }
        });
        let theirs = recorder.handle().render();
        let mut text = String::new();
        write_timings(&mut text, &ours);

        let split = |text: &str| {
            let mut sums = Vec::new();
            let mut lines: Vec<String> = Vec::new();
            for line in text.lines() {
                match line.split_once("_sum{") {
                    Some((_, rest)) => {
                        let (labels, value) = rest.split_once(' ').unwrap();
                        sums.push((labels.to_owned(), value.parse::<f64>().unwrap()));
                    }
                    None => lines.push(line.to_owned()),
                }
            }
            sums.sort_by(|a, b| a.0.cmp(&b.0));
            (lines, sums)
        };
        let (mut theirs_lines, theirs_sums) = split(&theirs);
        let (mut our_lines, our_sums) = split(&text);
        assert_eq!(our_lines[..2], theirs_lines[..2], "help and type");
        assert!(text.ends_with("\n\n") && theirs.ends_with("\n\n"));
        our_lines.sort();
        theirs_lines.sort();
        assert_eq!(our_lines, theirs_lines, "ours:\n{text}\ntheirs:\n{theirs}");
        assert_eq!(our_sums.len(), 2);
        for ((a, x), (b, y)) in our_sums.iter().zip(&theirs_sums) {
            assert_eq!(a, b);
            assert!((x - y).abs() <= 1e-12 * y.max(1.0), "{a}: {x} against {y}");
        }
        // Counts at most the bound, cumulative, and +Inf's beyond the last bound.
        assert!(text.contains("le=\"0.000005\"} 6\n"), "{text}");
        assert!(text.contains("le=\"0.05\"} 55\n"), "{text}");
        assert!(text.contains("le=\"+Inf\"} 78\n"), "{text}");
    }
}
