//! The runner, the recording clock and the sequential oracles the models compare against.

use std::cell::Cell;
use std::time::Duration;

use loom::sync::Arc;
use slidegate::clock::{Clock, ManualClock, Nanos};
use slidegate::{CostError, Decision, KeyedLimiter, Mode, Quota, SlidingWindow};

use crate::{FixedHasher, keyed};

/// The preemption bound every model runs with, set in code so that a run does not depend on
/// `LOOM_MAX_PREEMPTIONS` (which is ignored). Two preemptions interleave a stalled reader or
/// helper with a complete fill by another thread (see the models' comments); the third lets
/// the stalled thread be overtaken once more after it resumes. The whole suite takes about
/// 4.5 minutes on two cores in `--release` (`time cargo test -p loom-tests --release`, load
/// average 2 to 4.5), about 40% of it in the keyed variants of the ring models.
pub const PREEMPTION_BOUND: usize = 3;

/// Runs `f` under loom on every interleaving within [`PREEMPTION_BOUND`]. Like
/// `loom::model`, logs each execution when `LOOM_LOG` is set (`LOOM_LOG=trace` shows a
/// failing interleaving, `LOOM_LOCATION=1` adds source locations).
pub fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(PREEMPTION_BOUND);
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("LOOM_LOG"))
        .with_test_writer()
        .without_time()
        .finish();
    tracing::subscriber::with_default(subscriber, || builder.check(f));
}

/// A ring model run as two tests, one per store of a ring: `$test::direct` on a
/// `SlidingWindow` and `$test::keyed` on one key of a `KeyedLimiter` (whose small quotas keep
/// compact slots). Each calls `$body(new, $args…)` inside [`model`], `new` being
/// [`Spec::limiter`] or [`Spec::keyed_limiter`]. Items are `$test: $body($args…);`, or
/// `$body($args…);` for tests named after their body.
#[macro_export]
macro_rules! on_both_limiters {
    () => {};
    ($test:ident: $body:ident($($arg:expr),*); $($rest:tt)*) => {
        mod $test {
            use super::*;

            #[test]
            fn direct() {
                $crate::model(|| $body($crate::Spec::limiter $(, $arg)*));
            }

            #[test]
            fn keyed() {
                $crate::model(|| $body($crate::Spec::keyed_limiter $(, $arg)*));
            }
        }
        $crate::on_both_limiters!($($rest)*);
    };
    ($body:ident($($arg:expr),*); $($rest:tt)*) => {
        $crate::on_both_limiters!($body: $body($($arg),*); $($rest)*);
    };
}

loom::thread_local! {
    static LAST_READING: Cell<Option<u64>> = Cell::new(None);
    static READS_AT_MOST: Cell<Option<u64>> = Cell::new(None);
}

/// A [`ManualClock`] that remembers, per loom thread, the last reading it handed out.
///
/// The limiter may read the clock more than once in one check (again after a retry, or when
/// its first reading is older than the ring's newest bucket); the last reading is the time
/// the check judged at, unless the ring moved past it once more, in which case the check
/// judged at the start of the newer bucket (see [`effective_times`]).
#[derive(Clone, Debug)]
pub struct RecordingClock(pub ManualClock);

impl RecordingClock {
    /// Makes the calling loom thread's readings at most `t` ns: its clock lags behind the
    /// others', which a limiter must tolerate (a reading older than one seen counts as the
    /// newest seen). On a direct limiter loom already lets a thread read a clock value older
    /// than one another thread set; a keyed limiter's calls pin the epoch, whose fence is a
    /// full one under loom and rules such readings out, so a keyed model that needs one says
    /// so with this.
    pub fn read_at_most(t: u64) {
        READS_AT_MOST.with(|cap| cap.set(Some(t)));
    }
}

impl Clock for RecordingClock {
    fn now(&self) -> Nanos {
        let mut t = self.0.now();
        if let Some(cap) = READS_AT_MOST.with(Cell::get) {
            t = Nanos(t.0.min(cap));
        }
        LAST_READING.with(|last| last.set(Some(t.0)));
        t
    }
}

/// Takes this thread's last clock reading; panics if the clock was not read since the last
/// call.
pub fn last_reading() -> u64 {
    LAST_READING
        .with(Cell::take)
        .expect("the limiter read the clock")
}

/// A quota in whole nanoseconds, and the sequential sliding-window counter it defines.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// `L`.
    pub limit: u64,
    /// `N`, buckets per window.
    pub buckets: u64,
    /// `G` in nanoseconds.
    pub granularity: u64,
    /// Strict or Weighted (the only modes the counter oracles model; `fixed_window.rs` uses
    /// a fixed-window spec only for `limiter`, `bucket` and `effective_times`).
    pub mode: Mode,
}

/// A limiter under test, reading a [`RecordingClock`]: a direct limiter, or one key
/// ([`Limiter::KEY`]) of a keyed limiter, whose ring lives inline in the key's entry. The
/// ring models run on both, so that each store's ring is checked by the same oracles.
#[derive(Clone)]
pub enum Limiter {
    /// A `SlidingWindow`.
    Direct(Arc<SlidingWindow<RecordingClock>>),
    /// A `KeyedLimiter`, every call on [`Limiter::KEY`].
    Keyed(Arc<KeyedLimiter<u32, RecordingClock, FixedHasher>>),
}

impl Limiter {
    /// The one key a keyed limiter under test is called on.
    pub const KEY: u32 = 0;

    /// `check()`.
    pub fn check(&self) -> Decision {
        match self {
            Limiter::Direct(l) => l.check(),
            Limiter::Keyed(l) => l.check(&Self::KEY),
        }
    }

    /// `check_n(n)`.
    pub fn check_n(&self, n: u64) -> Result<Decision, CostError> {
        match self {
            Limiter::Direct(l) => l.check_n(n),
            Limiter::Keyed(l) => l.check_n(&Self::KEY, n),
        }
    }

    /// `peek()`.
    pub fn peek(&self) -> Decision {
        match self {
            Limiter::Direct(l) => l.peek(),
            Limiter::Keyed(l) => l.peek(&Self::KEY),
        }
    }

    /// `refund(n)`: the units freed.
    pub fn refund(&self, n: u64) -> u64 {
        match self {
            Limiter::Direct(l) => l.refund(n),
            Limiter::Keyed(l) => l.refund(&Self::KEY, n),
        }
    }

    /// A report of `n` units of usage (debt allowed).
    pub fn record(&self, n: u64) -> slidegate::Usage {
        match self {
            Limiter::Direct(l) => l.record(n),
            Limiter::Keyed(l) => l.record(&Self::KEY, n),
        }
    }

    /// The total cost ever admitted (the key's entry's, for a keyed limiter; it wraps at
    /// 2³², far above any model's).
    pub fn admitted_total(&self) -> u64 {
        match self {
            Limiter::Direct(l) => l.admitted_total(),
            Limiter::Keyed(l) => l.admitted_total(&Self::KEY),
        }
    }

    /// The direct limiter itself, for models of the direct limiter alone (`check_all` with
    /// marks); panics on a keyed one.
    pub fn direct(&self) -> &SlidingWindow<RecordingClock> {
        match self {
            Limiter::Direct(l) => l,
            Limiter::Keyed(_) => panic!("a direct limiter expected"),
        }
    }
}

/// Builds a limiter for a spec, and the clock it reads: [`Spec::limiter`] (direct) or
/// [`Spec::keyed_limiter`]. A model written once over `NewLimiter` runs on both.
pub type NewLimiter = fn(&Spec) -> (Limiter, ManualClock);

impl Spec {
    /// A Strict spec.
    pub const fn strict(limit: u64, buckets: u64, granularity: u64) -> Spec {
        Spec {
            limit,
            buckets,
            granularity,
            mode: Mode::Strict,
        }
    }

    /// `W = N·G`.
    pub const fn window(&self) -> u64 {
        self.buckets * self.granularity
    }

    /// The bucket holding time `t`.
    pub const fn bucket(&self, t: u64) -> u64 {
        t / self.granularity
    }

    /// This spec's quota.
    pub fn quota(&self) -> Quota {
        Quota::new(self.limit, Duration::from_nanos(self.window()))
            .and_then(|q| q.with_granularity(Duration::from_nanos(self.granularity)))
            .expect("a valid quota")
            .with_mode(self.mode)
    }

    /// A fresh direct limiter for this spec on a [`ManualClock`] at zero, and that clock.
    pub fn limiter(&self) -> (Limiter, ManualClock) {
        let clock = ManualClock::new();
        let limiter = SlidingWindow::with_clock(self.quota(), RecordingClock(clock.clone()));
        (Limiter::Direct(Arc::new(limiter)), clock)
    }

    /// A fresh keyed limiter giving every key this spec's quota, on a [`ManualClock`] at
    /// zero, and that clock; the models call it on [`Limiter::KEY`] only.
    pub fn keyed_limiter(&self) -> (Limiter, ManualClock) {
        let clock = ManualClock::new();
        let limiter = keyed(self.quota(), RecordingClock(clock.clone()));
        (Limiter::Keyed(Arc::new(limiter)), clock)
    }

    /// The window's use as the rule weighs it at time `t`, given admitted costs placed in
    /// buckets: Strict sums buckets `b − N ..= b`; Weighted sums `b − N + 1 ..= b` and the
    /// oldest bucket `b − N` in proportion to how much of it is still in the window (rounded
    /// up, as the limiter reports). A cost placed in a bucket newer than `b` counts as recent:
    /// it was seen, and nothing but `b − N`'s snapshot could have excluded it.
    pub fn used(&self, t: u64, placed: &[(u64, u64)]) -> u64 {
        let (b, r, n, g) = (
            self.bucket(t),
            t % self.granularity,
            self.buckets,
            self.granularity,
        );
        let in_window = |beta: u64| beta + n >= b;
        let oldest: u64 = placed
            .iter()
            .filter(|&&(beta, _)| beta + n == b)
            .map(|p| p.1)
            .sum();
        let all: u64 = placed
            .iter()
            .filter(|&&(beta, _)| in_window(beta))
            .map(|p| p.1)
            .sum();
        match self.mode {
            Mode::Strict => all,
            Mode::Weighted => all - oldest + (oldest * (g - r)).div_ceil(g),
            // The fixed window, the exact log and GCRA have their own rules and oracles.
            other => unimplemented!("the sliding-window oracle does not model {other:?}"),
        }
    }

    /// Whether `decision` is what a sequential limiter answers to `op` when the window's use
    /// is `used`.
    pub fn answers(&self, op: Op, used: u64, decision: &Decision) -> bool {
        let l = self.limit;
        match op {
            Op::Peek => {
                decision.is_allowed() == (used < l)
                    && decision.remaining() == l.saturating_sub(used)
            }
            Op::Check(n) if decision.is_allowed() => {
                used + n <= l && decision.remaining() == l - used - n
            }
            Op::Check(n) => used + n > l && decision.remaining() == l.saturating_sub(used),
        }
    }
}

/// What a model thread asks the limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `check_n(n)` (`check()` when `n == 1`).
    Check(u64),
    /// `peek()`.
    Peek,
}

/// One call, the last clock reading it took, and its answer.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// The model's name for the thread that made the call.
    pub thread: usize,
    /// The call.
    pub op: Op,
    /// The last clock reading the call took.
    pub at: u64,
    /// The answer.
    pub decision: Decision,
}

impl Event {
    /// The cost this call charged: its cost if it was an allowed check, else zero.
    pub fn charged(&self) -> u64 {
        match self.op {
            Op::Check(n) if self.decision.is_allowed() => n,
            _ => 0,
        }
    }
}

/// Peeks after the racing threads joined: now, then after each of `steps` more buckets
/// (the clock advanced by one granularity at a time), as thread 9.
pub fn finals(limiter: &Limiter, clock: &ManualClock, spec: &Spec, steps: u64) -> Vec<Event> {
    let mut out = vec![run(limiter, 9, Op::Peek)];
    for _ in 0..steps {
        clock.advance(Duration::from_nanos(spec.granularity));
        out.push(run(limiter, 9, Op::Peek));
    }
    out
}

/// Makes one call on `limiter` from model thread `thread` and records it.
pub fn run(limiter: &Limiter, thread: usize, op: Op) -> Event {
    let decision = match op {
        Op::Check(1) => limiter.check(),
        Op::Check(n) => limiter.check_n(n).expect("a valid cost"),
        Op::Peek => limiter.peek(),
    };
    Event {
        thread,
        op,
        at: last_reading(),
        decision,
    }
}

/// The total cost the events charged.
pub fn charged(events: &[Event]) -> u64 {
    events.iter().map(Event::charged).sum()
}

/// The times a concurrent call may have judged at: its last clock reading, or — if the ring
/// moved past that reading's bucket again after the call re-read the clock — the start of a
/// newer bucket (`Ring::read` then judges at `(front, 0)`). The latter is legitimate: some
/// thread had already read the (monotone) clock in that bucket before the call looked at
/// `front`, so the call ran at or after that bucket's start.
///
/// The decision cannot say which: its durations are measured from the reading either way
/// (`docs/design.md`, "Time"), so `reset_after` is `k·G − r` for the reading's offset `r`
/// and some `k ≥ 1` whenever the window is not empty (always, for a check). A decision whose
/// `reset_after` fits no such `k` matches no time: the empty list. The models' readings are
/// never bucket starts.
pub fn effective_times(spec: &Spec, e: &Event, newest: u64) -> Vec<u64> {
    let g = spec.granularity;
    assert_ne!(
        e.at % g,
        0,
        "a model's concurrent readings must not be bucket starts: {e:?}"
    );
    let later = (spec.bucket(e.at) + 1..=newest).map(|j| j * g);
    let reset = u64::try_from(e.decision.reset_after().as_nanos()).expect("small");
    if reset != 0 && (g - reset % g) % g != e.at % g {
        return Vec::new();
    }
    std::iter::once(e.at).chain(later).collect()
}

/// The newest bucket any fill can have established: that of the latest check's reading.
fn newest_bucket(spec: &Spec, events: &[Event]) -> u64 {
    events
        .iter()
        .filter(|e| matches!(e.op, Op::Check(_)))
        .map(|e| spec.bucket(e.at))
        .max()
        .unwrap_or(0)
}

/// Whether some choice, one option per slot, satisfies `pred`.
fn exists<T: Copy>(options: &[Vec<T>], mut pred: impl FnMut(&[T]) -> bool) -> bool {
    if options.iter().any(Vec::is_empty) {
        return false;
    }
    let mut idx = vec![0; options.len()];
    let mut pick: Vec<T> = options.iter().map(|o| o[0]).collect();
    loop {
        if pred(&pick) {
            return true;
        }
        let mut k = 0;
        loop {
            if k == options.len() {
                return false;
            }
            idx[k] += 1;
            if idx[k] < options[k].len() {
                pick[k] = options[k][idx[k]];
                break;
            }
            idx[k] = 0;
            pick[k] = options[k][0];
            k += 1;
        }
    }
}

/// Strict safety: no interval `[s, s + W)` holds more than `L` of the cost admitted, each
/// admission taken at the time it judged at (its clock reading unless its decision shows it
/// judged at a newer bucket's start; see [`effective_times`]).
pub fn assert_strict_safe(spec: &Spec, events: &[Event]) {
    let newest = newest_bucket(spec, events);
    let admitted: Vec<&Event> = events.iter().filter(|e| e.charged() > 0).collect();
    let options: Vec<Vec<u64>> = admitted
        .iter()
        .map(|e| effective_times(spec, e, newest))
        .collect();
    let safe = exists(&options, |times| {
        times.iter().all(|&s| {
            let held: u64 = times
                .iter()
                .zip(&admitted)
                .filter(|&(&t, _)| t >= s && t < s + spec.window())
                .map(|(_, e)| e.charged())
                .sum();
            held <= spec.limit
        })
    });
    assert!(
        safe,
        "over-admission: more than {} in some window {}: {events:#?}",
        spec.limit,
        spec.window()
    );
}

/// Strict's bound over admissions `(clock reading, cost)`: no interval of length `W` holds
/// more than `L`, each admission at its own reading (for Strict with marks, whose decisions'
/// `reset_after` does not tell [`effective_times`] the time judged at; a unit judged at a
/// newer bucket's start is counted there, which only keeps it longer).
pub fn assert_safe_at_readings(spec: &Spec, admitted: &[(u64, u64)]) {
    for &(s, _) in admitted {
        let held: u64 = admitted
            .iter()
            .filter(|&&(t, _)| t >= s && t < s + spec.window())
            .map(|&(_, n)| n)
            .sum();
        assert!(held <= spec.limit, "{held} in [{s}, {s} + W): {admitted:?}");
    }
}

/// Linearisability at one instant (no bucket boundary crossed by any event): there is an
/// order of all events, respecting each thread's own order, in which a sequential counter
/// starting at `initial` gives every event exactly the decision it got. Proves that no
/// admission is lost or doubled and that nothing (a denial, a peek) charges even briefly.
pub fn assert_linearizable(spec: &Spec, initial: u64, events: &[Event]) {
    let mut threads: Vec<usize> = events.iter().map(|e| e.thread).collect();
    threads.sort_unstable();
    threads.dedup();
    let queues: Vec<Vec<&Event>> = threads
        .iter()
        .map(|&t| events.iter().filter(|e| e.thread == t).collect())
        .collect();
    let mut next = vec![0; queues.len()];
    assert!(
        linearize(spec, initial, &queues, &mut next),
        "no sequential order explains these decisions (starting from {initial} used): {events:#?}"
    );
}

fn linearize(spec: &Spec, used: u64, queues: &[Vec<&Event>], next: &mut [usize]) -> bool {
    if queues.iter().zip(next.iter()).all(|(q, &i)| i == q.len()) {
        return true;
    }
    for t in 0..queues.len() {
        let Some(e) = queues[t].get(next[t]) else {
            continue;
        };
        if spec.answers(e.op, used, &e.decision) {
            next[t] += 1;
            let ok = linearize(spec, used + e.charged(), queues, next);
            next[t] -= 1;
            if ok {
                return true;
            }
        }
    }
    false
}

/// Every concurrent decision is one a sequential sliding-window counter gives at the time the
/// call judged at, for some set of the other threads' concurrent admissions (those whose
/// compare-and-swap preceded its read) each placed in a bucket no older than the one it was
/// judged in (a snapshot taken before a late compare-and-swap landed counts it in the newer
/// bucket, which only errs toward denial; an older bucket would under-count) and none judged
/// in a bucket newer than the observer's.
///
/// `pre` are calls made before the threads were spawned (counted exactly, in their own
/// buckets); `racing` are the threads' calls, each thread's in its program order.
pub fn assert_explained(spec: &Spec, pre: &[Event], racing: &[Event]) {
    let newest = newest_bucket(spec, &[pre, racing].concat());
    let fixed: Vec<(u64, u64)> = pre
        .iter()
        .filter(|e| e.charged() > 0)
        .map(|e| (spec.bucket(e.at), e.charged()))
        .collect();
    let times: Vec<Vec<u64>> = racing
        .iter()
        .map(|e| effective_times(spec, e, newest))
        .collect();
    for (i, e) in racing.iter().enumerate() {
        let explained = times[i].iter().any(|&at| {
            let b = spec.bucket(at);
            let mut costs = Vec::new();
            let mut options: Vec<Vec<Option<u64>>> = Vec::new();
            for (j, a) in racing.iter().enumerate() {
                if j == i || a.charged() == 0 || (a.thread == e.thread && j > i) {
                    continue;
                }
                let mut opts: Vec<Option<u64>> = Vec::new();
                if a.thread != e.thread {
                    opts.push(None);
                }
                // Judged no later than the observer: its earliest such bucket and newer.
                if let Some(from) = times[j]
                    .iter()
                    .map(|&t| spec.bucket(t))
                    .filter(|&k| k <= b)
                    .min()
                {
                    opts.extend((from..=newest).map(Some));
                }
                costs.push(a.charged());
                options.push(opts);
            }
            exists(&options, |pick| {
                let mut placed = fixed.clone();
                placed.extend(
                    pick.iter()
                        .zip(&costs)
                        .filter_map(|(p, &c)| p.map(|k| (k, c))),
                );
                spec.answers(e.op, spec.used(at, &placed), &e.decision)
            })
        });
        assert!(
            explained,
            "no sequential state explains {e:#?}\n(pre: {pre:#?}, racing: {racing:#?})"
        );
    }
}

/// After every thread has joined: one placement of each concurrent admission (a bucket no
/// older than the one it was judged in, no newer than the newest checked) explains all of
/// `finals` at once, every admission counted. With `finals` stepping through the next
/// windows this compares the ring's window sums, bucket by bucket, with the sequential
/// counter's. `finals` are sequential calls, judged at their readings.
pub fn assert_final(spec: &Spec, pre: &[Event], racing: &[Event], finals: &[Event]) {
    let newest = newest_bucket(spec, &[pre, racing].concat());
    let fixed: Vec<(u64, u64)> = pre
        .iter()
        .filter(|e| e.charged() > 0)
        .map(|e| (spec.bucket(e.at), e.charged()))
        .collect();
    let admitted: Vec<&Event> = racing.iter().filter(|e| e.charged() > 0).collect();
    let options: Vec<Vec<u64>> = admitted
        .iter()
        .map(|a| {
            let from = effective_times(spec, a, newest)
                .iter()
                .map(|&t| spec.bucket(t))
                .min();
            from.map_or_else(Vec::new, |from| (from..=newest).collect())
        })
        .collect();
    let ok = exists(&options, |pick| {
        let mut placed = fixed.clone();
        placed.extend(pick.iter().zip(&admitted).map(|(&k, a)| (k, a.charged())));
        finals.iter().all(|f| {
            let ok = spec.answers(f.op, spec.used(f.at, &placed), &f.decision);
            if f.charged() > 0 {
                placed.push((spec.bucket(f.at), f.charged()));
            }
            ok
        })
    });
    assert!(
        ok,
        "no placement of the admissions explains the final window sums {finals:#?}\n\
         (pre: {pre:#?}, racing: {racing:#?})"
    );
}

/// Every order of `pre` followed by an interleaving of `a` and `b` that keeps each in its
/// own order: the calls, and for each call after `pre` whether it is `a`'s.
pub fn interleavings<T: Copy>(pre: &[T], a: &[T], b: &[T]) -> Vec<(Vec<T>, Vec<bool>)> {
    let n = a.len() + b.len();
    (0u32..1 << n)
        .filter(|mask| mask.count_ones() as usize == a.len())
        .map(|mask| {
            let (mut order, mut of_a) = (pre.to_vec(), Vec::with_capacity(n));
            let (mut i, mut j) = (0, 0);
            for bit in 0..n {
                if mask & (1 << bit) != 0 {
                    order.push(a[i]);
                    i += 1;
                } else {
                    order.push(b[j]);
                    j += 1;
                }
                of_a.push(mask & (1 << bit) != 0);
            }
            (order, of_a)
        })
        .collect()
}
