//! An oracle for refunds on the sliding-window counter (Strict).
//!
//! The sequential specification of a refund (`SlidingWindow::refund`): the window holds up
//! to `n` fewer units from now on, taken from the *oldest* units it still counts. As a
//! model: admitted units in the order they were admitted, each in a bucket; the window of
//! bucket `b` counts the units in buckets `b − N ..= b` (and, as in [`Spec::used`], any
//! placed in a newer bucket) that no refund removed; a refund at `b` removes the oldest
//! (first admitted) `n` of those and reports how many it removed.
//!
//! Concurrency adds what [`assert_explained`](crate::assert_explained) allows and nothing
//! more: each call is judged at its clock reading (or a newer bucket's start, see
//! [`effective_times`]); an admission may be counted in a bucket newer than the one it was
//! judged in (never older), and units are counted in buckets in the order they were
//! admitted (the count numbers them; bucket `k` holds the numbers between two snapshots).

use crate::{Event, Limiter, Op, Spec, effective_times, last_reading};

/// What a refund model thread asks the limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingOp {
    /// `check_n(n)`.
    Check(u64),
    /// `refund(n)`.
    Refund(u64),
}

/// One call: the thread, the call, its last clock reading, and its answer.
#[derive(Clone, Copy, Debug)]
pub struct RingEvent {
    /// The model's name for the thread that made the call.
    pub thread: usize,
    /// The call.
    pub op: RingOp,
    /// The last clock reading the call took.
    pub at: u64,
    /// A check's decision (`None` for a refund).
    pub decision: Option<slidegate::Decision>,
    /// A refund's units freed (0 for a check).
    pub freed: u64,
}

impl RingEvent {
    /// The cost this call charged.
    pub fn charged(&self) -> u64 {
        match (self.op, self.decision) {
            (RingOp::Check(n), Some(d)) if d.is_allowed() => n,
            _ => 0,
        }
    }

    /// The times (ns) the call may have judged at, as [`effective_times`] derives them; a
    /// refund reports no offset, so any bucket start from its reading's bucket on.
    fn times(&self, spec: &Spec, newest: u64) -> Vec<u64> {
        match (self.op, self.decision) {
            (RingOp::Check(n), Some(decision)) => {
                let e = Event {
                    thread: self.thread,
                    op: Op::Check(n),
                    at: self.at,
                    decision,
                };
                effective_times(spec, &e, newest)
            }
            _ => std::iter::once(self.at)
                .chain((spec.bucket(self.at) + 1..=newest).map(|j| j * spec.granularity))
                .collect(),
        }
    }
}

/// Makes one call on `limiter` from model thread `thread` and records it.
pub fn run_ring(limiter: &Limiter, thread: usize, op: RingOp) -> RingEvent {
    let (decision, freed) = match op {
        RingOp::Check(n) => (Some(limiter.check_n(n).expect("a valid cost")), 0),
        RingOp::Refund(n) => (None, limiter.refund(n)),
    };
    RingEvent {
        thread,
        op,
        at: last_reading(),
        decision,
        freed,
    }
}

/// The sequential model: admitted units in admission order, `(bucket, removed)`.
#[derive(Clone, Debug, Default)]
struct Units(Vec<(u64, bool)>);

impl Units {
    fn in_window(spec: &Spec, t: u64, bucket: u64) -> bool {
        bucket + spec.buckets >= spec.bucket(t)
    }

    fn used(&self, spec: &Spec, t: u64) -> u64 {
        let live = self
            .0
            .iter()
            .filter(|&&(k, gone)| !gone && Self::in_window(spec, t, k));
        live.count() as u64
    }

    fn refund(&mut self, spec: &Spec, t: u64, n: u64) -> u64 {
        let mut freed = 0;
        for (k, gone) in &mut self.0 {
            if freed == n {
                break;
            }
            if !*gone && Self::in_window(spec, t, *k) {
                *gone = true;
                freed += 1;
            }
        }
        freed
    }

    fn newest(&self) -> u64 {
        self.0.last().map_or(0, |u| u.0)
    }
}

/// Every answer is the sequential model's, for some order of the calls (each thread's in
/// its own order), some judged time of each call and some placement of each admission (in
/// a bucket no older than the one judged, buckets non-decreasing in admission order); and in
/// that same history, every `finals` peek made after joining reads exactly `L − used`.
///
/// `pre` are `(bucket, cost)` admitted before the threads started. Strict only. Since every
/// admission's decision is the model's, at every admission the model's window — admitted
/// minus refunded so far — holds at most `L`: that is the Strict bound relative to refunds
/// (`window/ring.rs`, "Refunds").
pub fn assert_refunds_explained(
    spec: &Spec,
    pre: &[(u64, u64)],
    racing: &[RingEvent],
    finals: &[Event],
) {
    let newest = racing
        .iter()
        .map(|e| spec.bucket(e.at))
        .chain(pre.iter().map(|p| p.0))
        .max()
        .unwrap_or(0);
    let mut units = Units::default();
    for &(k, n) in pre {
        units.0.extend((0..n).map(|_| (k, false)));
    }
    let mut threads: Vec<usize> = racing.iter().map(|e| e.thread).collect();
    threads.sort_unstable();
    threads.dedup();
    let queues: Vec<Vec<&RingEvent>> = threads
        .iter()
        .map(|&th| racing.iter().filter(|e| e.thread == th).collect())
        .collect();
    let mut next = vec![0; queues.len()];
    let search = Search {
        spec,
        newest,
        queues: &queues,
        finals,
    };
    assert!(
        search.explain(&units, &mut next),
        "no sequential history with oldest-first refunds explains these answers \
         (pre: {pre:?}, racing: {racing:#?}, finals: {finals:#?})"
    );
}

struct Search<'a> {
    spec: &'a Spec,
    newest: u64,
    queues: &'a [Vec<&'a RingEvent>],
    finals: &'a [Event],
}

impl Search<'_> {
    fn explain(&self, units: &Units, next: &mut [usize]) -> bool {
        let spec = self.spec;
        if self
            .queues
            .iter()
            .zip(next.iter())
            .all(|(q, &i)| i == q.len())
        {
            return self.finals.iter().all(|f| {
                f.charged() == 0 && spec.answers(f.op, units.used(spec, f.at), &f.decision)
            });
        }
        for th in 0..self.queues.len() {
            let Some(e) = self.queues[th].get(next[th]) else {
                continue;
            };
            for at in e.times(spec, self.newest) {
                let mut options: Vec<Units> = Vec::new();
                match e.op {
                    RingOp::Refund(n) => {
                        let mut u = units.clone();
                        if u.refund(spec, at, n) == e.freed {
                            options.push(u);
                        }
                    }
                    RingOp::Check(n) => {
                        let decision = e.decision.expect("a check decides");
                        if !spec.answers(Op::Check(n), units.used(spec, at), &decision) {
                            continue;
                        }
                        if decision.is_allowed() {
                            let from = spec.bucket(at).max(units.newest());
                            for k in from..=self.newest.max(from) {
                                let mut u = units.clone();
                                u.0.extend((0..n).map(|_| (k, false)));
                                options.push(u);
                            }
                        } else {
                            options.push(units.clone());
                        }
                    }
                }
                for u in options {
                    next[th] += 1;
                    let found = self.explain(&u, next);
                    next[th] -= 1;
                    if found {
                        return true;
                    }
                }
            }
        }
        false
    }
}
