//! The one place that names atomics.
//!
//! Everything else imports its atomic types from here, so the same code runs on `std` and,
//! when built with `RUSTFLAGS="--cfg slidegate_loom"`, on [loom]'s model-checked atomics
//! (the wiring tokio's `src/loom` and crossbeam's `crossbeam_loom` use). The cfg is
//! crate-specific so that a user's own `--cfg loom` never changes slidegate.
//!
//! [loom]: https://docs.rs/loom

#[cfg(not(slidegate_loom))]
pub(crate) use std::sync::Arc;
#[cfg(not(slidegate_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(slidegate_loom)]
pub(crate) use loom::sync::Arc;
#[cfg(slidegate_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

/// Backs off after a lost compare-and-swap.
///
/// On `std` this is crossbeam's exponential spin; under loom it yields, so the model checker
/// schedules the thread that won instead of exploring a spinning one.
pub(crate) struct Backoff {
    #[cfg(not(slidegate_loom))]
    inner: crossbeam_utils::Backoff,
}

impl Backoff {
    #[inline]
    pub(crate) fn new() -> Self {
        Backoff {
            #[cfg(not(slidegate_loom))]
            inner: crossbeam_utils::Backoff::new(),
        }
    }

    #[inline]
    pub(crate) fn spin(&self) {
        #[cfg(not(slidegate_loom))]
        self.inner.spin();
        #[cfg(slidegate_loom)]
        loom::thread::yield_now();
    }
}
