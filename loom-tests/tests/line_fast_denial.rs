// The line ring's fast denial — a flood's denial judged from the fast path's loads — and
// the general read's denial, racing refunds and fills.
//
// Proves: a Strict denial the line ring answers (on the fast path: the word, the oldest,
// second and newest compact slots, each tag checked, `CounterRule::judge_denied_fast`; or
// on the general read) is, in every field — `remaining`, `retry_after` and `reset_after` —
// the answer of the direct limiter run sequentially in some order of the racing calls,
// while a refund raises the snapshots it reads or a fill recycles them. Every call,
// refunds' counts included, is replayed on a fresh single-threaded `SlidingWindow` in each
// order the threads allow, at the clock readings the calls took (or, for a check whose
// reading is behind a bucket another thread's call read, at that bucket's start: that
// call's fill may have moved the ring there before its own charge).
//
// Would fail if the fast path took a snapshot whose tag it did not check (a slot a fill
// recycled for a newer bucket, read as the window's), or if a judgement loaded the oldest
// bucket's slot once per tail (a refund raises the newer snapshots first and the oldest
// last: one tail would count the refund and another not).
//
// Checked in scratch builds: with the tag check removed from `line_counter::charge_fast`'s
// loads, the fill model fails; with `LineReading::tail` loading the oldest slot on every
// call, the third model fails (a denial whose `reset_after` is 0).
#![cfg(slidegate_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::{at, interleavings, model};
use slidegate::__private::LoomLine;
use slidegate::clock::ManualClock;
use slidegate::{Decision, Quota, SlidingWindow};

const N: u64 = 1;
/// The limit of the first two models.
const L: u64 = 2;

/// What a check answered, in nanoseconds (`retry_after` `None` when admitted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Answer {
    allowed: bool,
    remaining: u64,
    retry_after: Option<u64>,
    reset_after: u64,
}

impl Answer {
    fn of(decision: Decision) -> Answer {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).expect("short durations");
        Answer {
            allowed: decision.is_allowed(),
            remaining: decision.remaining(),
            retry_after: decision.retry_after().map(nanos),
            reset_after: nanos(decision.reset_after()),
        }
    }

    /// The answer judged `lag` ns after the reading, told from the reading: the durations
    /// grow by the lag (an empty window's reset stays 0), as every limiter reports a
    /// reading behind the newest bucket.
    fn measured_from(self, lag: u64) -> Answer {
        Answer {
            retry_after: self.retry_after.map(|r| r + lag),
            reset_after: if self.reset_after == 0 {
                0
            } else {
                self.reset_after + lag
            },
            ..self
        }
    }
}

/// One call of a model thread and what it answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Check { at: u64, answer: Answer },
    Refund { at: u64, freed: u64 },
}

impl Call {
    fn at(&self) -> u64 {
        match *self {
            Call::Check { at, .. } | Call::Refund { at, .. } => at,
        }
    }
}

/// The start of the bucket holding `t`.
fn bucket_start(t: u64) -> u64 {
    t - t % LoomLine::GRANULARITY
}

/// What a fresh direct limiter of `limit` answers to `calls` made in this order, each judged at
/// `judged[i]`, at or after its own reading, and told from its reading.
fn replay(limit: u64, calls: &[Call], judged: &[u64]) -> Vec<Call> {
    let g = Duration::from_nanos(LoomLine::GRANULARITY);
    let quota = Quota::new(limit, g * N as u32)
        .and_then(|q| q.with_granularity(g))
        .expect("a valid quota");
    let clock = ManualClock::new();
    let limiter = SlidingWindow::with_clock(quota, clock.clone());
    calls
        .iter()
        .zip(judged)
        .map(|(call, &t)| {
            clock.set(Duration::from_nanos(t));
            match *call {
                Call::Check { at, .. } => Call::Check {
                    at,
                    answer: Answer::of(limiter.check()).measured_from(t - at),
                },
                Call::Refund { at, .. } => Call::Refund {
                    at,
                    freed: limiter.refund(1),
                },
            }
        })
        .collect()
}

/// Whether some interleaving of `a` and `b` (each in its own order), after `pre`, replays to
/// exactly the answers seen. A check may also be judged at the start of a later bucket that
/// a call of the other thread read: that call may have moved the ring there (its fill)
/// before its own charge, and a reading behind the ring's front is judged at the front's
/// start, as every limiter judges a reading older than one it has seen.
fn linearizable(limit: u64, pre: &[Call], a: &[Call], b: &[Call]) -> bool {
    interleavings(pre, a, b).into_iter().any(|(order, of_a)| {
        // For each call after `pre`: its reading, and the later bucket it may be judged at.
        let times: Vec<(u64, Option<u64>)> = order[pre.len()..]
            .iter()
            .zip(of_a)
            .map(|(&call, of_a)| {
                let other = if of_a { b } else { a };
                let later = other
                    .iter()
                    .map(|c| bucket_start(c.at()))
                    .filter(|&s| s > call.at() && matches!(call, Call::Check { .. }))
                    .max();
                (call.at(), later)
            })
            .collect();
        // Only the calls that have a later bucket to be judged at are shifted (each replay
        // runs under loom, whose branches per execution are bounded).
        let shiftable = (0..times.len())
            .filter(|&k| times[k].1.is_some())
            .fold(0u32, |m, k| m | 1 << k);
        (0u32..1 << times.len())
            .filter(|shift| shift & !shiftable == 0)
            .any(|shift| {
                let judged: Vec<u64> = pre
                    .iter()
                    .map(Call::at)
                    .chain(
                        times
                            .iter()
                            .enumerate()
                            .map(|(k, &(at, later))| match later {
                                Some(s) if shift & (1 << k) != 0 => s,
                                _ => at,
                            }),
                    )
                    .collect();
                replay(limit, &order, &judged) == order
            })
    })
}

/// A check of one unit against `limit` at `t`.
fn check_of(line: &LoomLine, t: u64, limit: u64) -> Call {
    Call::Check {
        at: t,
        answer: Answer::of(line.decide(t, limit, 1).expect("never retired")),
    }
}

fn check(line: &LoomLine, t: u64) -> Call {
    check_of(line, t, L)
}

/// A ring of N = 1 with a unit admitted in bucket 0 and one in bucket 1: the window of bucket
/// 1 is full, and a check there is denied with bucket 0's leaving as its `retry_after` (the
/// fast denial's case).
fn full_in_bucket_1() -> (Arc<LoomLine>, Vec<Call>) {
    let line = Arc::new(LoomLine::new(N));
    let pre = vec![check(&line, at(0, 5)), check(&line, at(1, 5))];
    (line, pre)
}

// The writing thread (the refund, the fill) runs on the model's main thread and the reading
// one is spawned: loom runs the main thread first, and a reader's loads that follow the
// writer's compare-and-swaps are what it backtracks from (a reader that ran first, with a
// writer whose own load of the word preceded its compare-and-swap, is never revisited).

/// Thread A refunds one unit (the oldest) while thread B checks twice in bucket 1.
#[test]
fn a_fast_denial_racing_a_refund_is_a_sequential_answer() {
    model(|| {
        let (line, pre) = full_in_bucket_1();
        let checker = {
            let line = line.clone();
            thread::spawn(move || vec![check(&line, at(1, 6)), check(&line, at(1, 6))])
        };
        let t = at(1, 6);
        let a = vec![Call::Refund {
            at: t,
            freed: line.refund(t, 1).expect("never retired"),
        }];
        let b = checker.join().unwrap();
        assert!(linearizable(L, &pre, &a, &b), "{pre:#?}\n{a:#?}\n{b:#?}");
    });
}

/// Thread A checks in bucket 3 (a fill of buckets 2 and 3 recycles both slots) while thread
/// B checks in bucket 1, whose window is full.
#[test]
fn a_fast_denial_racing_a_fill_is_a_sequential_answer() {
    model(|| {
        let (line, pre) = full_in_bucket_1();
        let checker = {
            let line = line.clone();
            thread::spawn(move || vec![check(&line, at(1, 6))])
        };
        let a = vec![check(&line, at(3, 5))];
        let b = checker.join().unwrap();
        assert!(linearizable(L, &pre, &a, &b), "{pre:#?}\n{a:#?}\n{b:#?}");
    });
}

/// L = 1, a unit admitted in bucket 0: a check in bucket 1 is denied. Thread A refunds that
/// unit, takes the room (an admission in bucket 1) and refunds again, raising snapshots past
/// the count of a word loaded before its admission, while thread B checks in bucket 1.
#[test]
fn a_fast_denial_racing_an_admission_and_its_refund_is_a_sequential_answer() {
    model(|| {
        let line = Arc::new(LoomLine::new(N));
        let pre = vec![check_of(&line, at(0, 5), 1)];
        let checker = {
            let line = line.clone();
            thread::spawn(move || vec![check_of(&line, at(1, 6), 1)])
        };
        let t = at(1, 6);
        let refund = |line: &LoomLine| Call::Refund {
            at: t,
            freed: line.refund(t, 1).expect("never retired"),
        };
        let a = vec![refund(&line), check_of(&line, t, 1), refund(&line)];
        let b = checker.join().unwrap();
        assert!(linearizable(1, &pre, &a, &b), "{pre:#?}\n{a:#?}\n{b:#?}");
    });
}
