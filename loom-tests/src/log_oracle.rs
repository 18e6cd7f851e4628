//! What the exact log's models share: the definition as an oracle, and a clock that lags.

use std::cell::Cell;
use std::time::Duration;

use slidegate::clock::{Clock, ManualClock, Nanos};
use slidegate::{Mode, Quota};

/// An exact-log quota of `limit` units per `window` ns.
pub fn log_quota(limit: u64, window: u64) -> Quota {
    Quota::new(limit, Duration::from_nanos(window))
        .expect("valid quota")
        .with_mode(Mode::ExactLog)
}

/// A unit admitted at `time` ns, freed by a refund at `freed`, if it was.
#[derive(Clone, Copy, Debug)]
pub struct Unit {
    /// When it was admitted.
    pub time: u64,
    /// When a refund freed it.
    pub freed: Option<u64>,
}

impl Unit {
    /// A unit admitted at `time` and never refunded.
    pub fn at(time: u64) -> Unit {
        Unit { time, freed: None }
    }
}

/// The exact log's definition, refunds included: at no time `s` do more than `limit` units
/// admitted in `(s − window, s]` and not freed by `s` count.
pub fn assert_log_safe(limit: u64, window: u64, units: &[Unit]) {
    for s in units.iter().map(|u| u.time) {
        let count = units
            .iter()
            .filter(|u| u.time <= s && u.time + window > s && u.freed.is_none_or(|r| r > s))
            .count() as u64;
        assert!(count <= limit, "{count} > {limit} units at {s}: {units:?}");
    }
}

loom::thread_local! {
    static LAG: Cell<u64> = Cell::new(0);
}

/// A [`ManualClock`] that reads `lag` ns behind in the loom threads that call
/// [`LaggingClock::lag`]: a clock that is not monotone across threads, which limiters must
/// tolerate (a reading older than one seen counts as the newest seen).
#[derive(Clone, Debug)]
pub struct LaggingClock(pub ManualClock);

impl LaggingClock {
    /// Makes this thread's readings `lag` ns behind.
    pub fn lag(lag: u64) {
        LAG.with(|l| l.set(lag));
    }
}

impl Clock for LaggingClock {
    fn now(&self) -> Nanos {
        Nanos(self.0.now().0.saturating_sub(LAG.with(Cell::get)))
    }
}
