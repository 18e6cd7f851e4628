//! What the server records, through the `metrics` facade, and `GET /metrics` in the
//! Prometheus text format (metrics-exporter-prometheus). Handles are made once (per rule at
//! load, per API at start), so a request pays an atomic add per counter, not a lookup.

use metrics::{Counter, Histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
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

/// Installs the Prometheus recorder as the process's `metrics` recorder.
pub(crate) fn install() -> Result<PrometheusHandle, String> {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(DECISION_SECONDS.into()),
            &[
                5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2,
            ],
        )
        .map_err(|e| e.to_string())?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| e.to_string())?;
    metrics::describe_counter!(REQUESTS, "Requests answered, by API and outcome.");
    metrics::describe_histogram!(
        DECISION_SECONDS,
        Unit::Seconds,
        "Time from a decoded request to its answer."
    );
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

/// One API's counters and timing.
pub(crate) struct ApiMetrics {
    answers: [Counter; 4],
    seconds: Histogram,
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
            seconds: metrics::histogram!(DECISION_SECONDS, "api" => api),
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
        let took = self.clock.now().0.saturating_sub(started.0);
        self.seconds.record(took as f64 * 1e-9);
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
