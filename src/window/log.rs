//! The exact sliding log: see /tmp/specs/log.md (to be replaced by the protocol's docs).

use crate::decision::Decision;
use crate::window::Op;

/// An exact sliding log of the last `limit` admitted units.
pub(crate) struct Log {}

impl Log {
    /// A log for quotas of up to `limit` units (the capacity is `limit` rounded up to a power
    /// of two).
    pub(crate) fn new(limit: u64) -> Log {
        let _ = limit;
        Log {}
    }

    /// The number of unit slots.
    pub(crate) fn capacity(&self) -> u64 {
        unimplemented!()
    }

    /// Judges cost `n` (`1 ≤ n ≤ limit ≤ capacity`, validated by the caller) at time `now()`
    /// (ns) against "at most `limit` units in any window `(t − window, t]`", applying `op` if
    /// allowed. `None` if the log is retired (the caller looks the key up again).
    pub(crate) fn check(
        &self,
        limit: u64,
        window: u64,
        now: impl Fn() -> u64,
        n: u64,
        op: Op,
    ) -> Option<Decision> {
        let _ = (limit, window, now, n, op);
        unimplemented!()
    }

    /// Turns a reservation of `n` into `n` admitted units stamped `now()`. `false` if the log
    /// was retired (forcibly), writing nothing.
    pub(crate) fn commit(&self, n: u64, now: impl Fn() -> u64) -> bool {
        let _ = (n, now);
        unimplemented!()
    }

    /// Gives back a reservation of `n`, leaving no trace. Nothing on a retired log.
    pub(crate) fn release(&self, n: u64) {
        let _ = n;
        unimplemented!()
    }

    /// Frees up to `n` units of room now by expiring the oldest units still in the window
    /// `(now − window, now]`; returns how many were freed.
    pub(crate) fn refund(&self, window: u64, now: u64, n: u64) -> u64 {
        let _ = (window, now, n);
        unimplemented!()
    }

    /// Retires the log if nothing it holds is in the window of `now` or any later time and
    /// nothing is pending; `true` if this call retired it.
    pub(crate) fn retire_idle(&self, window: u64, now: u64) -> bool {
        let _ = (window, now);
        unimplemented!()
    }

    /// Retires the log whatever it holds; `true` if this call retired it.
    pub(crate) fn retire_now(&self) -> bool {
        unimplemented!()
    }

    /// Whether the log is retired.
    pub(crate) fn is_retired(&self) -> bool {
        unimplemented!()
    }

    /// The time (ns) of the newest admission, 0 if none: a recency for LRU choices.
    pub(crate) fn last_active(&self) -> u64 {
        unimplemented!()
    }

    /// The total cost ever admitted (wrapping at 2³²).
    pub(crate) fn admitted(&self) -> u64 {
        unimplemented!()
    }
}
