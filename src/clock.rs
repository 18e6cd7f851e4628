//! Time as the limiter sees it.
//!
//! A limiter reads time through the [`Clock`] trait as [`Nanos`] since the clock's own origin.
//! [`QuantaClock`] (the default) reads the CPU's time-stamp counter through [quanta];
//! [`ManualClock`] only moves when told to, so tests — yours and ours — never sleep.
//!
//! [quanta]: https://docs.rs/quanta

use core::fmt;
use core::time::Duration;

use crate::sync::{Arc, AtomicU64, Ordering, Tsc};

/// A point in time: whole nanoseconds since a clock's origin.
///
/// ```
/// use slidegate::clock::Nanos;
/// use std::time::Duration;
///
/// let t = Nanos::from(Duration::from_millis(3));
/// assert_eq!(t.as_u64(), 3_000_000);
/// assert_eq!(Duration::from(t), Duration::from_millis(3));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(pub u64);

impl Nanos {
    /// The number of nanoseconds.
    #[inline]
    pub const fn as_u64(self) -> u64 {
        self.0
    }
}

impl From<Duration> for Nanos {
    /// Saturates at `u64::MAX` nanoseconds (about 584 years).
    #[inline]
    fn from(d: Duration) -> Nanos {
        Nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl From<Nanos> for Duration {
    #[inline]
    fn from(n: Nanos) -> Duration {
        Duration::from_nanos(n.0)
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", Duration::from_nanos(self.0))
    }
}

/// A source of time for a limiter.
///
/// Readings should not go backwards; if one does, the limiter treats it as the newest time it
/// has already seen (see the crate documentation).
///
/// ```
/// use slidegate::clock::{Clock, Nanos};
///
/// /// A clock frozen at one instant.
/// struct Frozen(u64);
/// impl Clock for Frozen {
///     fn now(&self) -> Nanos {
///         Nanos(self.0)
///     }
/// }
/// assert_eq!(Frozen(7).now(), Nanos(7));
/// ```
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Nanos;

    /// Blocks the calling thread until `duration` has passed on this clock: what a blocking
    /// `wait` does between checks. Sleeps the thread by default; a [`ManualClock`] advances
    /// itself instead, so code that waits on a limiter can be tested without sleeping.
    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now(&self) -> Nanos {
        (**self).now()
    }

    fn sleep(&self, duration: Duration) {
        (**self).sleep(duration);
    }
}

/// The default clock: quanta's calibrated time-stamp counter.
///
/// Each reading is an `rdtsc` and a multiply (about 7 ns here, see the README's benchmark
/// table), monotonic per clock and with no system call. Its origin is the moment it was
/// created; clones share that origin.
///
/// ```
/// use slidegate::clock::{Clock, QuantaClock};
///
/// let clock = QuantaClock::new();
/// let a = clock.now();
/// let b = clock.now();
/// assert!(b >= a);
/// ```
#[derive(Clone)]
pub struct QuantaClock {
    clock: Tsc,
    origin: u64,
}

impl QuantaClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        let clock = Tsc::new();
        let origin = clock.raw();
        QuantaClock { clock, origin }
    }
}

impl Default for QuantaClock {
    fn default() -> Self {
        QuantaClock::new()
    }
}

impl fmt::Debug for QuantaClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuantaClock").finish_non_exhaustive()
    }
}

impl Clock for QuantaClock {
    #[inline]
    fn now(&self) -> Nanos {
        Nanos(self.clock.delta_as_nanos(self.origin, self.clock.raw()))
    }
}

/// A clock that moves only when told to. Clones share one time.
///
/// Use it to make tests of rate-limited code deterministic.
///
/// ```
/// use slidegate::clock::{Clock, ManualClock, Nanos};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let shared = clock.clone();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(shared.now(), Nanos(5_000_000));
/// shared.set(Duration::from_secs(1));
/// assert_eq!(clock.now(), Nanos(1_000_000_000));
/// ```
#[derive(Clone, Debug)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at its origin (time zero).
    pub fn new() -> Self {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves time forward by `by` (saturating at `u64::MAX` nanoseconds).
    pub fn advance(&self, by: Duration) {
        let by = Nanos::from(by).0;
        // Relaxed: the clock orders nothing; limiters synchronise through their own atomics.
        let mut cur = self.nanos.load(Ordering::Relaxed);
        loop {
            match self.nanos.compare_exchange_weak(
                cur,
                cur.saturating_add(by),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
    }

    /// Sets the time since the origin. Setting it backwards is allowed; limiters treat a reading
    /// older than one they have seen as the newest they have seen.
    pub fn set(&self, since_origin: Duration) {
        // Relaxed: see `advance`.
        self.nanos
            .store(Nanos::from(since_origin).0, Ordering::Relaxed);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> Nanos {
        // Relaxed: see `advance`.
        Nanos(self.nanos.load(Ordering::Relaxed))
    }

    /// Advances the clock by `duration` and returns at once: simulated time passes.
    ///
    /// ```
    /// use slidegate::clock::{Clock, ManualClock, Nanos};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// clock.sleep(Duration::from_secs(3600));
    /// assert_eq!(clock.now(), Nanos(3_600_000_000_000));
    /// ```
    fn sleep(&self, duration: Duration) {
        self.advance(duration);
    }
}

/// Tokio's clock (`tokio::time::Instant`), behind the `tokio` feature: a limiter on it sees
/// time as tokio does, so under `tokio::time::pause` (e.g. `#[tokio::test(start_paused =
/// true)]`) [`until_ready`](crate::SlidingWindow::until_ready) runs on virtual time and
/// tests never sleep. Its origin is its creation; clones share it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use slidegate::clock::{Clock, Nanos, TokioClock};
/// use std::time::Duration;
///
/// let clock = TokioClock::new();
/// tokio::time::sleep(Duration::from_secs(5)).await; // instant: time is paused
/// assert_eq!(clock.now(), Nanos(5_000_000_000));
/// # }
/// ```
#[cfg(feature = "tokio")]
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

#[cfg(feature = "tokio")]
impl TokioClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

#[cfg(feature = "tokio")]
impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

#[cfg(feature = "tokio")]
impl Clock for TokioClock {
    #[inline]
    fn now(&self) -> Nanos {
        Nanos::from(tokio::time::Instant::now().saturating_duration_since(self.origin))
    }
}
