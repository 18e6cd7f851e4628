//! Time as the limiter sees it.
//!
//! A limiter reads time through the [`Clock`] trait as [`Nanos`] since the clock's own origin.
//! [`QuantaClock`] (the default) reads the CPU's time-stamp counter through [quanta];
//! [`CoarseClock`] reads a time that a background thread refreshes (about twice as fast, up
//! to its refresh interval stale); [`ManualClock`] only moves when told to, so tests — yours
//! and ours — never sleep.
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
/// Readings should not go backwards; if one does, the limiter judges it at a time it has
/// already seen and measures the decision's waits from the reading (`docs/design.md`,
/// "Time").
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

    /// What `until_ready` awaits between checks (behind the `tokio` feature): tokio's timer by
    /// default; a [`ManualClock`] advances itself and is ready at once, as its
    /// [`sleep`](Clock::sleep) does.
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    fn sleep_async(&self, duration: Duration) -> SleepFuture<'_> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// The future [`Clock::sleep_async`] returns.
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub type SleepFuture<'a> = core::pin::Pin<Box<dyn core::future::Future<Output = ()> + Send + 'a>>;

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now(&self) -> Nanos {
        (**self).now()
    }

    fn sleep(&self, duration: Duration) {
        (**self).sleep(duration);
    }

    #[cfg(feature = "tokio")]
    fn sleep_async(&self, duration: Duration) -> SleepFuture<'_> {
        (**self).sleep_async(duration)
    }
}

/// The default clock: quanta's calibrated time-stamp counter.
///
/// Each reading is an `rdtsc` and a multiply (`benches/clock.rs` measures it), monotonic per
/// clock and with no system call: quanta's calibration, applied inline to a counter read
/// inline where quanta counts in TSC ticks (x86_64 with an invariant TSC), else quanta's own
/// reading. Its origin is the moment it was
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
    /// Nanoseconds per tick of quanta's time-stamp counter, times 2⁴⁰, when it reads one
    /// (`rdtsc`, which is then read here, inline); 0 when quanta reads another source (the
    /// OS's monotonic clock, in nanoseconds), which is then asked for each reading.
    per_tick: u64,
}

/// The fixed point of [`QuantaClock`]'s scale: `ns = ticks · per_tick / 2⁴⁰`.
const TICK_SHIFT: u32 = 40;

impl QuantaClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        let clock = Tsc::new();
        let origin = clock.raw();
        QuantaClock {
            per_tick: per_tick(&clock),
            clock,
            origin,
        }
    }

    /// The raw reading and its scale: the counter read inline (quanta's own call and its
    /// scaling, a 128-bit shift by a variable amount, cost about 25 instructions a check more
    /// on the fast path of `check_allowed`), else quanta's.
    #[inline(always)]
    fn ticks(&self) -> u64 {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(slidegate_loom)))]
        if self.per_tick != 0 {
            // SAFETY: `rdtsc` has no preconditions on x86_64; it is what quanta's counter
            // reads (`quanta::Clock::raw` in its counter mode), so a reading compares with
            // the origin quanta gave.
            return unsafe { core::arch::x86_64::_rdtsc() };
        }
        self.clock.raw()
    }

    /// Nanoseconds from the origin to the raw reading `ticks`.
    #[inline(always)]
    fn since_origin(&self, ticks: u64) -> u64 {
        if self.per_tick == 0 {
            return self.clock.delta_as_nanos(self.origin, ticks);
        }
        // As quanta's `delta_as_nanos`: a reading before the origin (another core's counter
        // behind) is the origin.
        let delta = ticks.saturating_sub(self.origin);
        // Below 2⁶⁴ ns (584 years) for any delta a counter of a few GHz reaches in 2⁶⁴ ticks.
        ((u128::from(delta) * u128::from(self.per_tick)) >> TICK_SHIFT) as u64
    }
}

/// quanta's scale as [`QuantaClock`] applies it: its nanoseconds for 2⁴⁰ ticks, if it counts
/// in ticks (on x86_64 with an invariant TSC), else 0 (quanta's readings are nanoseconds, or
/// the counter is not read inline on this target).
fn per_tick(clock: &Tsc) -> u64 {
    let per_tick = clock.delta_as_nanos(0, 1 << TICK_SHIFT);
    let inline = cfg!(all(
        target_arch = "x86_64",
        target_feature = "sse2",
        not(slidegate_loom)
    ));
    if inline && per_tick != 1 << TICK_SHIFT {
        per_tick
    } else {
        0
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
        Nanos(self.since_origin(self.ticks()))
    }
}

/// quanta's *recent* time: a reading is one atomic load of a time that a background thread
/// refreshes every `interval`, instead of a time-stamp-counter read and a scaling multiply.
///
/// It about halves the cost of a direct check and takes a few nanoseconds off a keyed one
/// (`coarse_clock` in `benches/check.rs`, `keyed_coarse_clock` in `benches/keyed.rs`; the
/// figures are in `docs/benchmarks.md`). The price is
/// staleness: a reading lags the true time by up to `interval` plus however late the
/// refreshing thread is scheduled. A limiter's guarantees hold in the time it reads, so with
/// a lag of at most `δ`, Strict admits at most `L` in any real interval of length `W − δ` (a
/// unit admitted late counts as admitted up to `δ` early, so it leaves the window up to `δ`
/// early; `tests/sliding_window.rs` checks this on random lags), and `retry_after` may be up
/// to `δ` short. Choose it when `δ` is small against the window
/// (1 ms against a window of seconds); the default [`QuantaClock`] is exact.
///
/// Only one refreshing ("upkeep") thread can run in a process, so every `CoarseClock`
/// shares one, started by the first clock and stopped when the last clone of the last clock
/// is dropped; its interval is the one the first clock asked for. Another library's upkeep
/// thread (governor's `QuantaUpkeepClock`, say) cannot be shared safely, since it may stop at
/// any time and freeze the readings: [`CoarseClock::new`] is then an error.
///
/// ```
/// use slidegate::clock::{Clock, CoarseClock};
/// use slidegate::{Quota, SlidingWindow};
/// use std::time::Duration;
///
/// let clock = CoarseClock::new(Duration::from_millis(1))?;
/// let limiter = SlidingWindow::with_clock(Quota::new(100, Duration::from_secs(1))?, clock.clone());
/// assert!(limiter.check().is_allowed());
/// let a = clock.now();
/// assert!(clock.now() >= a);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(not(slidegate_loom))]
#[derive(Clone)]
pub struct CoarseClock {
    clock: quanta::Clock,
    origin: quanta::Instant,
    _upkeep: upkeep::Lease,
}

#[cfg(not(slidegate_loom))]
impl CoarseClock {
    /// A clock whose origin is now, refreshed every `interval` by the process's shared upkeep
    /// thread (started now if no other `CoarseClock` is alive).
    ///
    /// # Errors
    /// [`ClockError::ZeroInterval`] for a zero `interval`; [`ClockError::UpkeepRunning`] if an
    /// upkeep thread that slidegate did not start is running; [`ClockError::Spawn`] if the
    /// thread could not be started.
    pub fn new(interval: Duration) -> Result<CoarseClock, ClockError> {
        if interval.is_zero() {
            return Err(ClockError::ZeroInterval);
        }
        let clock = quanta::Clock::new();
        let lease = upkeep::Lease::take(interval, &clock)?;
        // The upkeep set the recent time before it returned, so this is a real reading.
        Ok(CoarseClock {
            origin: clock.recent(),
            clock,
            _upkeep: lease,
        })
    }
}

#[cfg(not(slidegate_loom))]
impl fmt::Debug for CoarseClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoarseClock").finish_non_exhaustive()
    }
}

#[cfg(not(slidegate_loom))]
impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> Nanos {
        let since = self.clock.recent().saturating_duration_since(self.origin);
        // Not `Nanos::from(Duration)`: its `u128` arithmetic stays in the check path, where
        // this folds back into the `u64` difference quanta computed (a `Duration` built from
        // at most `u64::MAX` ns converts back without overflow).
        Nanos(since.as_secs() * 1_000_000_000 + u64::from(since.subsec_nanos()))
    }
}

/// Why a [`CoarseClock`] could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClockError {
    /// The refresh interval was zero.
    #[error("CoarseClock interval must be above zero")]
    ZeroInterval,
    /// An upkeep thread that slidegate did not start is running (only one can run per
    /// process).
    #[error(
        "a quanta upkeep thread that slidegate did not start is running (governor's \
         QuantaUpkeepClock starts one); only one can run per process, and sharing it would \
         freeze this clock when its owner stops it"
    )]
    UpkeepRunning,
    /// The upkeep thread could not be spawned.
    #[error("could not spawn the CoarseClock upkeep thread: {0}")]
    Spawn(#[source] std::io::Error),
}

/// The process's one upkeep thread, shared by every [`CoarseClock`].
#[cfg(not(slidegate_loom))]
mod upkeep {
    use core::time::Duration;
    // std's, not `crate::sync`'s: a process-wide static that loom cannot model, touched only
    // when clocks are made, cloned and dropped (this module is not built under loom).
    use std::sync::{Mutex, MutexGuard, PoisonError};

    use super::ClockError;

    /// The upkeep thread slidegate started and the number of [`Lease`]s on it. Counted under
    /// the lock (rather than by an `Arc`, whose last drop would happen outside it), so the
    /// thread is stopped and joined before the next clock can look, and a running thread
    /// this does not hold is another library's.
    static SHARED: Mutex<Option<(usize, quanta::Handle)>> = Mutex::new(None);

    fn shared() -> MutexGuard<'static, Option<(usize, quanta::Handle)>> {
        SHARED.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One clock's hold on the upkeep thread; the last one dropped stops and joins it.
    pub(super) struct Lease(());

    impl Lease {
        /// A hold on the running upkeep thread, started with `interval` if none is.
        pub(super) fn take(interval: Duration, clock: &quanta::Clock) -> Result<Lease, ClockError> {
            let mut shared = shared();
            if let Some((leases, _)) = shared.as_mut() {
                *leases += 1;
                return Ok(Lease(()));
            }
            match quanta::Upkeep::new_with_clock(interval, clock.clone()).start() {
                Ok(handle) => {
                    *shared = Some((1, handle));
                    Ok(Lease(()))
                }
                Err(quanta::Error::UpkeepRunning) => Err(ClockError::UpkeepRunning),
                Err(quanta::Error::FailedToSpawnUpkeepThread(e)) => Err(ClockError::Spawn(e)),
            }
        }
    }

    impl Clone for Lease {
        fn clone(&self) -> Lease {
            if let Some((leases, _)) = shared().as_mut() {
                *leases += 1;
            }
            Lease(())
        }
    }

    impl Drop for Lease {
        fn drop(&mut self) {
            let mut shared = shared();
            if let Some((leases, _)) = shared.as_mut() {
                *leases -= 1;
                if *leases == 0 {
                    // Joins the thread, which clears quanta's "running" flag as it exits.
                    drop(shared.take());
                }
            }
        }
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

    /// Sets the time since the origin. Setting it backwards is allowed; limiters judge a reading
    /// older than one they have seen at a time they have seen (a keyed limiter per key state: a
    /// key evicted since has seen none, and judges the older reading itself), and measure a
    /// decision's waits from the reading.
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

    /// Advances the clock by `duration`, ready at once: `until_ready` on a manual clock runs
    /// in simulated time, as `wait` does.
    #[cfg(feature = "tokio")]
    fn sleep_async(&self, duration: Duration) -> SleepFuture<'_> {
        self.advance(duration);
        Box::pin(core::future::ready(()))
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
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
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
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
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

#[cfg(all(test, not(slidegate_loom)))]
mod tests {
    use super::*;
    use std::time::Instant;

    /// The inline scale agrees with quanta's `delta_as_nanos` on the same readings, to a
    /// nanosecond and a part in 2³⁰, from the origin to a year's worth of ticks, and a
    /// reading before the origin is the origin; readings never go back.
    #[test]
    fn quanta_clock_scales_as_quanta_does() {
        let clock = QuantaClock::new();
        let origin = clock.origin;
        for shift in 0..56 {
            for ticks in [origin + (1 << shift), origin + (1 << shift) + 12_345] {
                let ours = clock.since_origin(ticks);
                let theirs = clock.clock.delta_as_nanos(origin, ticks);
                assert!(
                    ours.abs_diff(theirs) <= 1 + (theirs >> 30),
                    "{ticks} ticks past the origin: {ours} ns against quanta's {theirs}"
                );
            }
        }
        assert_eq!(clock.since_origin(origin), 0);
        assert_eq!(clock.since_origin(origin.saturating_sub(1000)), 0);
        let mut last = clock.now();
        for _ in 0..10_000 {
            let now = clock.now();
            assert!(now >= last);
            last = now;
        }
    }

    /// One test for everything that touches the process's upkeep thread, so that no other
    /// test of this binary starts or stops it meanwhile.
    #[test]
    fn coarse_clocks_share_one_upkeep_thread_and_release_it() {
        assert!(matches!(
            CoarseClock::new(Duration::ZERO),
            Err(ClockError::ZeroInterval)
        ));

        // Clones and a second clock share the first clock's thread.
        let a = CoarseClock::new(Duration::from_millis(1)).expect("no upkeep thread yet");
        let b = CoarseClock::new(Duration::from_millis(5)).expect("shares a's thread");
        let a2 = a.clone();
        let first = a.now();
        assert!(a2.now() >= first);
        // The thread refreshes the time: wait (bounded, far above its 1 ms period) until a
        // reading moves. A broken upkeep would freeze it and fail here, not hang.
        let deadline = Instant::now() + Duration::from_secs(10);
        while a.now() == first && Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(a.now() > first, "the recent time never moved");
        // `b`'s origin is later than `a`'s, its readings never ahead of `a`'s.
        assert!(b.now() <= a.now());
        drop((a, a2, b));

        // The last clock dropped stopped the thread: quanta would refuse a second one while
        // it ran, and now an upkeep that slidegate did not start is refused instead of shared.
        let foreign = quanta::Upkeep::new(Duration::from_millis(1))
            .start()
            .expect("slidegate's thread stopped with its last clock");
        let err = CoarseClock::new(Duration::from_millis(1)).expect_err("not ours to share");
        assert!(matches!(err, ClockError::UpkeepRunning));
        assert!(err.to_string().contains("upkeep thread"), "{err}");
        drop(foreign);

        // And with it gone, a clock starts its own again.
        let c = CoarseClock::new(Duration::from_millis(1)).expect("no upkeep thread running");
        let limiter = crate::SlidingWindow::with_clock(
            crate::Quota::new(1, Duration::from_secs(3600)).expect("valid"),
            c,
        );
        assert!(limiter.check().is_allowed());
        assert!(!limiter.check().is_allowed());
    }
}
