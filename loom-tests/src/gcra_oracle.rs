//! GCRA's sequential specification and a linearisability oracle for the GCRA models.
//!
//! The model is written from the rule in `docs/design.md` (governor's virtual scheduling) with no
//! code shared with the crate: a theoretical arrival time (TAT), emission interval
//! `T = ⌈W / L⌉` and tolerance `τ = L·T`; a cost `n` at `t` is admitted iff
//! `max(TAT, t) + n·T − t ≤ τ`. A refund of `n` at `t` moves the TAT back by `n·T`, never
//! below `t`, and reports the rise of `remaining` at `t`.
//!
//! The state is observable from outside: a peek at `t` reports `reset_after = TAT − t`
//! (0 when the cell is empty at `t`), so `max(TAT, t)` — all that any time `≥ t` can tell
//! apart — is `t + reset_after` ([`tat_seen_at`]).

use std::time::Duration;

use loom::sync::Arc;
use slidegate::clock::ManualClock;
use slidegate::{Decision, Mode, Quota, SlidingWindow};

use crate::{RecordingClock, last_reading};

/// A GCRA quota: `limit` units per `window` ns.
#[derive(Clone, Copy, Debug)]
pub struct GcraSpec {
    /// `L`.
    pub limit: u64,
    /// `W` in nanoseconds.
    pub window: u64,
}

impl GcraSpec {
    /// `T = ⌈W / L⌉`.
    pub const fn interval(&self) -> u64 {
        self.window.div_ceil(self.limit)
    }

    /// `τ = L·T`.
    pub const fn tau(&self) -> u64 {
        self.limit * self.interval()
    }

    /// The quota, in GCRA mode.
    pub fn quota(&self) -> Quota {
        Quota::new(self.limit, Duration::from_nanos(self.window))
            .expect("a valid quota")
            .with_mode(Mode::Gcra)
    }

    /// A direct GCRA limiter reading `clock` through a [`RecordingClock`].
    pub fn limiter(&self, clock: &ManualClock) -> Arc<SlidingWindow<RecordingClock>> {
        Arc::new(SlidingWindow::with_clock(
            self.quota(),
            RecordingClock(clock.clone()),
        ))
    }

    /// A keyed GCRA limiter on `clock` with a deterministic hasher.
    pub fn keyed(&self, clock: &ManualClock) -> crate::Keyed {
        crate::keyed(self.quota(), clock.clone())
    }
}

/// A decision as numbers: (allowed, remaining, retry_after ns or 0, reset_after ns).
pub type Answer = (bool, u64, u64, u64);

/// `d` as an [`Answer`].
pub fn answer(d: &Decision) -> Answer {
    let ns = |d: Duration| u64::try_from(d.as_nanos()).expect("small");
    (
        d.is_allowed(),
        d.remaining(),
        d.retry_after().map_or(0, ns),
        ns(d.reset_after()),
    )
}

/// `max(TAT, t)` as a peek at `t` reports it: `t + reset_after`.
pub fn tat_seen_at(peek: &Decision, t: u64) -> u64 {
    t + answer(peek).3
}

/// The sequential GCRA cell.
#[derive(Clone, Copy, Debug)]
pub struct GcraModel {
    /// The theoretical arrival time.
    pub tat: u64,
    spec: GcraSpec,
}

impl GcraModel {
    /// A cell holding `tat`.
    pub const fn new(spec: GcraSpec, tat: u64) -> GcraModel {
        GcraModel { tat, spec }
    }

    fn room(&self, t: u64) -> u64 {
        (t + self.spec.tau() - self.tat.max(t)) / self.spec.interval()
    }

    /// What a check of `n` at `t` answers, charging it if allowed and `charge`.
    pub fn check(&mut self, t: u64, n: u64, charge: bool) -> Answer {
        let (interval, tau) = (self.spec.interval(), self.spec.tau());
        let base = self.tat.max(t);
        let new = base + n * interval;
        if new - t > tau {
            let left = (t + tau).saturating_sub(base) / interval;
            return (false, left, new - tau - t, self.tat.saturating_sub(t));
        }
        if !charge {
            return (
                true,
                (t + tau - base) / interval,
                0,
                self.tat.saturating_sub(t),
            );
        }
        self.tat = new;
        (true, (t + tau - new) / interval, 0, new - t)
    }

    /// Frees up to `n` units at `t`; the rise of `remaining` at `t`.
    pub fn refund(&mut self, t: u64, n: u64) -> u64 {
        if self.tat <= t {
            return 0;
        }
        let before = self.room(t);
        self.tat = self.tat.saturating_sub(n * self.spec.interval()).max(t);
        self.room(t) - before
    }
}

/// What a GCRA model thread asks the direct limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcraOp {
    /// `check_n(n)`.
    Check(u64),
    /// `peek()`.
    Peek,
    /// `refund(n)`.
    Refund(u64),
}

/// One call, the last clock reading it took, and its answer (for a refund, the units freed
/// in `answer.1`).
#[derive(Clone, Copy, Debug)]
pub struct GcraEvent {
    /// The model's name for the thread that made the call.
    pub thread: usize,
    /// The call.
    pub op: GcraOp,
    /// The last clock reading the call took.
    pub at: u64,
    /// The answer.
    pub answer: Answer,
}

/// Makes one call on `limiter` from model thread `thread` and records it.
pub fn run_gcra(limiter: &SlidingWindow<RecordingClock>, thread: usize, op: GcraOp) -> GcraEvent {
    let answer = match op {
        GcraOp::Check(n) => self::answer(&limiter.check_n(n).expect("a valid cost")),
        GcraOp::Peek => self::answer(&limiter.peek()),
        GcraOp::Refund(n) => (true, limiter.refund(n), 0, 0),
    };
    GcraEvent {
        thread,
        op,
        at: last_reading(),
        answer,
    }
}

/// Linearisability against [`GcraModel`]: there is an order of all events, respecting each
/// thread's own order and in which checks and peeks read the clock in non-decreasing order,
/// in which the sequential cell starting at `initial` gives every event exactly its answer
/// (`remaining`, `retry_after` and `reset_after` included, and a refund's count) and ends
/// with `max(TAT, t) == seen` for the final observation `(t, seen)` made after joining
/// (see [`tat_seen_at`]). Proves that no charge is lost or doubled, that a denial, a peek
/// and a released reservation leave nothing behind, and that a refund frees what it reports.
pub fn assert_gcra_linearizable(
    spec: GcraSpec,
    initial: u64,
    events: &[GcraEvent],
    (t, seen): (u64, u64),
) {
    let mut threads: Vec<usize> = events.iter().map(|e| e.thread).collect();
    threads.sort_unstable();
    threads.dedup();
    let queues: Vec<Vec<&GcraEvent>> = threads
        .iter()
        .map(|&th| events.iter().filter(|e| e.thread == th).collect())
        .collect();
    let mut next = vec![0; queues.len()];
    let model = GcraModel::new(spec, initial);
    let end = |m: &GcraModel| m.tat.max(t) == seen;
    assert!(
        linearize(model, 0, &queues, &mut next, &end),
        "no sequential order explains these answers (TAT {initial} before, \
         max(TAT, {t}) = {seen} after): {events:#?}"
    );
}

fn linearize(
    model: GcraModel,
    clock: u64,
    queues: &[Vec<&GcraEvent>],
    next: &mut [usize],
    end: &impl Fn(&GcraModel) -> bool,
) -> bool {
    if queues.iter().zip(next.iter()).all(|(q, &i)| i == q.len()) {
        return end(&model);
    }
    for th in 0..queues.len() {
        let Some(e) = queues[th].get(next[th]) else {
            continue;
        };
        let mut m = model;
        let (ok, clock) = match e.op {
            GcraOp::Check(n) => (e.at >= clock && m.check(e.at, n, true) == e.answer, e.at),
            GcraOp::Peek => (e.at >= clock && m.check(e.at, 1, false) == e.answer, e.at),
            GcraOp::Refund(n) => (m.refund(e.at, n) == e.answer.1, clock),
        };
        if ok {
            next[th] += 1;
            let found = linearize(m, clock, queues, next, end);
            next[th] -= 1;
            if found {
                return true;
            }
        }
    }
    false
}
