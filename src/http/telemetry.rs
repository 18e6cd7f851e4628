//! Metrics (through the `metrics` facade) and `tracing` events, with their documented names.
//!
//! The metric keys are built once per layer and handed to whichever recorder is installed
//! when a request is decided, so a recorder installed after the layer was built still sees
//! every event, and a decision builds no label strings.

use core::time::Duration;
use std::sync::Arc;

use metrics::{Key, Label, Level, Metadata, NoopRecorder, Recorder};

use crate::http::headers::Meta;
use crate::http::key::KeyError;

/// Counter: requests every policy admitted (labels `layer`).
pub const ALLOWED: &str = "slidegate_http_allowed_total";
/// Counter: requests denied (labels `layer`, `policy`: the policy that bound the request).
pub const DENIED: &str = "slidegate_http_denied_total";
/// Counter: requests a shadow layer would have denied and let through (labels `layer`,
/// `policy`).
pub const SHADOW_DENIED: &str = "slidegate_http_shadow_denied_total";
/// Counter: requests decided by a fallback (labels `layer`, `reason`: `key` when a policy
/// could not extract its key, `limiter` when the limiter could not decide or answered from
/// its own fallback).
pub const DEGRADED: &str = "slidegate_http_degraded_total";
/// Histogram: seconds from the start of key extraction to the decision (labels `layer`).
pub const DECISION_SECONDS: &str = "slidegate_http_decision_seconds";

/// The `tracing` target of every span and event the layer emits.
pub const TARGET: &str = "slidegate::http";

static METADATA: Metadata<'static> = Metadata::new(TARGET, Level::INFO, Some(module_path!()));

/// One layer's metric keys.
#[derive(Debug)]
pub(crate) struct Metrics {
    pub(crate) layer: Arc<str>,
    allowed: Key,
    denied: Vec<Key>,
    shadow_denied: Vec<Key>,
    degraded_key: Key,
    degraded_limiter: Key,
    latency: Key,
}

impl Metrics {
    pub(crate) fn new(layer: &str, policies: &[Meta]) -> Self {
        let layer_label = || Label::new("layer", layer.to_owned());
        let per_policy = |name: &'static str| {
            policies
                .iter()
                .map(|m| {
                    Key::from_parts(
                        name,
                        vec![layer_label(), Label::new("policy", m.name.to_string())],
                    )
                })
                .collect()
        };
        let degraded = |reason: &'static str| {
            Key::from_parts(
                DEGRADED,
                vec![layer_label(), Label::from_static_parts("reason", reason)],
            )
        };
        Metrics {
            layer: layer.into(),
            allowed: Key::from_parts(ALLOWED, vec![layer_label()]),
            denied: per_policy(DENIED),
            shadow_denied: per_policy(SHADOW_DENIED),
            degraded_key: degraded("key"),
            degraded_limiter: degraded("limiter"),
            latency: Key::from_parts(DECISION_SECONDS, vec![layer_label()]),
        }
    }

    fn count(key: &Key) {
        metrics::with_recorder(|r| r.register_counter(key, &METADATA).increment(1));
    }

    /// An admitted request, decided in `nanos`: both metrics in one visit to the recorder.
    pub(crate) fn allowed(&self, nanos: u64) {
        metrics::with_recorder(|r| {
            r.register_counter(&self.allowed, &METADATA).increment(1);
            r.register_histogram(&self.latency, &METADATA)
                .record(Duration::from_nanos(nanos).as_secs_f64());
        });
    }

    pub(crate) fn denied(&self, policy: usize, shadow: bool) {
        let keys = if shadow {
            &self.shadow_denied
        } else {
            &self.denied
        };
        if let Some(key) = keys.get(policy) {
            Self::count(key);
        }
    }

    pub(crate) fn degraded_key(&self) {
        Self::count(&self.degraded_key);
    }

    pub(crate) fn degraded_limiter(&self) {
        Self::count(&self.degraded_limiter);
    }

    /// Records a decision that took `nanos`.
    pub(crate) fn latency(&self, nanos: u64) {
        metrics::with_recorder(|r| {
            r.register_histogram(&self.latency, &METADATA)
                .record(Duration::from_nanos(nanos).as_secs_f64());
        });
    }
}

/// Whether a metric recorded now would reach a recorder: `false` when `metrics` would hand
/// it to its no-op recorder (none installed, globally or on this thread). The layer then
/// neither reads the clock to time its decision nor visits the recorder for an admission.
///
/// `metrics` does not say which recorder is current, so the one it hands out is compared
/// with the no-op recorder by vtable. Equal vtables mean the same methods (the same drop,
/// size and function pointers), so a recorder whose vtable is the no-op one's does nothing
/// with what it is given: skipping it changes nothing. Vtables are not unique (each codegen
/// unit may hold a copy), so the comparison can miss and say `true` for the no-op recorder:
/// the request is then timed and recorded as before, at no loss but the time.
#[inline]
pub(crate) fn recording() -> bool {
    metrics::with_recorder(|recorder| {
        let noop: &dyn Recorder = &NoopRecorder;
        // Both pointers given one address, so only their vtables are compared.
        let at = core::ptr::NonNull::<u8>::dangling().as_ptr().addr();
        !core::ptr::eq(
            (recorder as *const dyn Recorder).with_addr(at),
            (noop as *const dyn Recorder).with_addr(at),
        )
    })
}

/// A policy could not extract its key: a `WARN` event.
pub(crate) fn key_missing(policy: &str, error: &KeyError) {
    tracing::warn!(target: TARGET, policy, %error, "rate-limit key not extracted");
}

/// The limiter could not decide: a `WARN` event.
pub(crate) fn limiter_failed(layer: &str, error: &dyn std::error::Error) {
    tracing::warn!(target: TARGET, layer, %error, "rate limiter could not decide");
}

/// A request was denied (or, in shadow mode, would have been): a `DEBUG` event.
pub(crate) fn denied(layer: &str, policy: &str, retry_after: Duration, shadow: bool) {
    tracing::debug!(
        target: TARGET,
        layer,
        policy,
        retry_after_ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX),
        shadow,
        "request over its rate limit"
    );
}

#[cfg(test)]
mod tests {
    use metrics_util::debugging::DebuggingRecorder;

    use super::recording;

    #[test]
    fn a_recorder_on_this_thread_is_recording() {
        let recorder = DebuggingRecorder::new();
        assert!(metrics::with_local_recorder(&recorder, recording));
    }
}
