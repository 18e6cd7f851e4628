//! The line ring's tests: its word's fields, and the same answers as the three-word ring of
//! compact slots on any single-threaded sequence of checks, refunds and clock jumps.

use core::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::algo::Op;
use crate::algo::sliding_counter::CounterRule;
use crate::decision::Decision;
use crate::quota::{Mode, Quota};
use crate::window::counter;
use crate::window::line_counter::{self, *};
use crate::window::ring::{self, JudgedCum};

/// The shortest bucket a line ring takes.
const G: u64 = LINE_MIN_GRANULARITY;

fn owned(buckets: u64) -> Box<[AtomicU64]> {
    (0..Line::words(buckets))
        .map(|i| AtomicU64::new(Line::initial(buckets, i)))
        .collect()
}

fn ring_words(buckets: u64) -> Box<[AtomicU64]> {
    (0..Ring::<Compact>::words(buckets))
        .map(|i| AtomicU64::new(Ring::<Compact>::initial(buckets, i)))
        .collect()
}

/// A Strict check on the three-word ring (`None`: retired).
fn ring_check(ring: &Ring<'_, Compact>, t: u64, limit: u64, cost: u64) -> Option<bool> {
    loop {
        let (fits, seen): (bool, JudgedCum) =
            ring.read(G, || t, true, |r| r.tail(0) + cost <= limit)?;
        if !fits {
            return Some(false);
        }
        if ring.try_charge(seen, cost) {
            return Some(true);
        }
    }
}

#[test]
fn ten_buckets_take_seven_words_with_a_half_slot_to_spare() {
    // The word and six words of slots: eleven compact slots and one half left for a hash.
    assert_eq!(Line::words(LINE_MAX_BUCKETS), 7);
    assert_eq!(
        Line::words(LINE_MAX_BUCKETS) * 8 + 8,
        64,
        "with an 8-byte key"
    );
    assert!(Line::fits(COMPACT_MAX_LIMIT, LINE_MAX_BUCKETS, G));
    assert!(!Line::fits(COMPACT_MAX_LIMIT + 1, LINE_MAX_BUCKETS, G));
    assert!(!Line::fits(10, LINE_MAX_BUCKETS + 1, G));
    assert!(!Line::fits(10, 0, G));
    assert!(!Line::fits(10, LINE_MAX_BUCKETS, G - 1));
}

#[test]
fn the_word_packs_count_front_and_flags_apart() {
    let word = ((FRONT - 1) << FRONT_SHIFT) | COUNT;
    assert_eq!(front_of(word), FRONT - 1);
    // The count wraps within its bits, never into the front.
    assert_eq!(add_count(word, 2), ((FRONT - 1) << FRONT_SHIFT) | 1);
    assert_eq!(front_of(word | FILLING | RETIRED), FRONT - 1);
    // A claim keeps the count, sets the flag, and never spills a goal into the flags.
    let claimed = claim(word, FRONT);
    assert_eq!((front_of(claimed), claimed & COUNT), (FRONT, COUNT));
    assert_eq!(claimed & (FILLING | RETIRED), FILLING);
}

#[test]
fn a_fresh_ring_holds_an_established_empty_window() {
    let words = owned(3);
    let line = Line::on(&words, 3);
    assert_eq!(line.window(), (4, vec![(1, 0), (2, 0), (3, 0), (4, 0)]));
    // A check in a bucket far ahead fills every slot with the count.
    assert_eq!(check_strict(&line, G, || 1000 * G + 5, 2, 1), Some(true));
    let front = 1000 + 4;
    let expected: Vec<_> = (front - 3..=front).map(|k| (k as u32 & 0xff, 0)).collect();
    assert_eq!(line.window(), (front, expected));
    assert_eq!(line.admitted(), 1);
}

#[test]
fn strict_admits_the_limit_per_window_and_no_more() {
    // N = 2, L = 3: three units in bucket 0, none more until bucket 0 leaves at bucket 3.
    let words = owned(2);
    let line = Line::on(&words, 2);
    let check = |t: u64| check_strict(&line, G, || t, 3, 1);
    for _ in 0..3 {
        assert_eq!(check(1), Some(true));
    }
    assert_eq!(check(1), Some(false));
    assert_eq!(
        check(2 * G + 1),
        Some(false),
        "bucket 0 is still in the window"
    );
    assert_eq!(check(3 * G), Some(true), "bucket 0 has left");
    assert_eq!(line.admitted(), 4);
}

#[test]
fn a_refund_frees_the_oldest_units() {
    let words = owned(2);
    let line = Line::on(&words, 2);
    let check = |t: u64| check_strict(&line, G, || t, 3, 1);
    assert_eq!(check(1), Some(true));
    assert_eq!(check(G + 1), Some(true));
    assert_eq!(check(G + 2), Some(true));
    assert_eq!(check(G + 3), Some(false));
    assert_eq!(line.refund(G, || G + 4, 2, |_| 0), Some(2));
    assert_eq!(check(G + 5), Some(true));
    assert_eq!(check(G + 5), Some(true));
    assert_eq!(check(G + 5), Some(false));
    // The refund raised the oldest snapshots, newest first, to the same value.
    let (_, slots) = line.window();
    assert!(slots.windows(2).all(|w| w[0].1 <= w[1].1), "{slots:?}");
    // Nothing is left to refund beyond what the window counts.
    assert_eq!(line.refund(G, || G + 6, 10, |_| 0), Some(3));
}

#[test]
fn retirement_ends_every_read_and_charge() {
    let words = owned(2);
    let line = Line::on(&words, 2);
    assert_eq!(check_strict(&line, G, || 1, 3, 1), Some(true));
    assert!(
        !line.retire_idle(G, 2 * G),
        "bucket 0 is in the window of bucket 2"
    );
    let (_, seen) = line.read(G, || 2 * G, true, |_| ()).unwrap();
    assert!(line.retire_idle(G, 3 * G), "bucket 0 has left");
    assert!(!line.try_charge(seen, 1));
    assert_eq!(check_strict(&line, G, || 3 * G, 3, 1), None);
    assert_eq!(line.refund(G, || 3 * G, 1, |_| 0), None);
    assert!(!line.retire_now(), "retired already");

    let words = owned(2);
    let line = Line::on(&words, 2);
    assert_eq!(check_strict(&line, G, || 1, 3, 1), Some(true));
    assert!(line.retire_now());
    assert_eq!(check_strict(&line, G, || 1, 3, 1), None);
}

#[test]
fn a_clock_behind_the_front_is_judged_at_the_front() {
    let words = owned(2);
    let line = Line::on(&words, 2);
    assert_eq!(check_strict(&line, G, || 5 * G, 3, 1), Some(true));
    // A reading of bucket 1 is judged in bucket 5, the front: it sees that unit.
    let front = line
        .read(G, || G, true, |r| (r.bucket, r.tail(0)))
        .unwrap()
        .0;
    assert_eq!(front, (5 + 3, 1));
}

#[test]
fn a_fill_left_half_done_is_finished_by_the_next_reader() {
    // A claimed fill whose filler stopped before its first slot: the word says everything a
    // helper needs.
    let words = owned(2);
    let line = Line::on(&words, 2);
    assert_eq!(check_strict(&line, G, || 1, 3, 2), Some(true));
    let word = words[0].load(Ordering::Relaxed);
    let claimed = claim(word, front_of(word) + 1);
    words[0].store(claimed, Ordering::Relaxed);
    assert_eq!(check_strict(&line, G, || G + 1, 3, 1), Some(true));
    assert_eq!(check_strict(&line, G, || G + 1, 3, 1), Some(false));
    let (front, slots) = line.window();
    assert_eq!(front, 4);
    assert_eq!(slots, vec![(2, 0), (3, 0), (4, 2)]);
}

/// One step of a single-threaded sequence.
#[derive(Clone, Debug)]
enum Step {
    /// Advance the clock by this many quarter buckets, then check this cost.
    Check(u64, u64),
    /// Advance the clock, then refund.
    Refund(u64, u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u64..6, 1u64..4).prop_map(|(d, n)| Step::Check(d, n)),
        1 => (0u64..6, 1u64..6).prop_map(|(d, n)| Step::Refund(d, n)),
        // A jump of hundreds of buckets, across multiples of the tags' 2⁸.
        1 => (1000u64..2100, 1u64..3).prop_map(|(d, n)| Step::Check(d, n)),
    ]
}

proptest! {
    /// The line ring answers every check and refund as the three-word ring does (same slot
    /// encoding, same rule), single-threaded: one word instead of three changes no decision.
    #[test]
    fn answers_as_the_ring_of_three_words(
        buckets in 1u64..=LINE_MAX_BUCKETS,
        limit in 1u64..8,
        steps in prop::collection::vec(step(), 1..80),
    ) {
        let (lw, rw) = (owned(buckets), ring_words(buckets));
        let line = Line::on(&lw, buckets);
        let ring = Ring::<Compact>::from_parts(ring::packed(&rw), buckets);
        let mut t = 0;
        for (i, step) in steps.iter().enumerate() {
            match *step {
                Step::Check(d, n) => {
                    t += d * G / 4;
                    let ours = check_strict(&line, G, || t, limit, n);
                    prop_assert_eq!(ours, ring_check(&ring, t, limit, n), "step {}", i);
                }
                Step::Refund(d, n) => {
                    t += d * G / 4;
                    let ours = line.refund(G, || t, n, |_| 0);
                    prop_assert_eq!(ours, ring.refund(G, || t, n, |_| 0), "step {}", i);
                }
            }
            let tails = |j| {
                let ours = line.read(G, || t, false, |r| r.tail(j)).map(|r| r.0);
                let theirs = ring.read(G, || t, false, |r| r.tail(j)).map(|r| r.0);
                (ours, theirs)
            };
            let at = (
                line.read(G, || t, false, |r| (r.bucket, r.offset)).map(|r| r.0),
                ring.read(G, || t, false, |r| (r.bucket, r.offset)).map(|r| r.0),
            );
            prop_assert_eq!(at.0, at.1, "step {}", i);
            for j in 0..=buckets {
                let (ours, theirs) = tails(j);
                prop_assert_eq!(ours, theirs, "step {} tail {}", i, j);
            }
            prop_assert_eq!(line.admitted(), ring.admitted() & COUNT);
        }
    }
}

/// The counter rule of `mode` over `buckets` buckets of `G` (the fixed window: one bucket).
fn counter_rule(mode: Mode, limit: u64, buckets: u64) -> CounterRule {
    let g = Duration::from_nanos(G);
    let quota = match mode {
        Mode::FixedWindow => Quota::new(limit, g).unwrap().with_mode(mode),
        _ => Quota::new(limit, g * buckets as u32)
            .unwrap()
            .with_granularity(g)
            .unwrap()
            .with_mode(mode),
    };
    CounterRule::new(quota)
}

/// One call of a whole-decision sequence.
#[derive(Clone, Copy, Debug)]
enum Call {
    Check(u64, u64),
    Peek(u64, u64),
    Refund(u64, u64),
    /// A check whose clock reads this many quarter buckets behind the others'.
    Behind(u64, u64),
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        6 => (0u64..6, 1u64..4).prop_map(|(d, n)| Call::Check(d, n)),
        2 => (0u64..6, 1u64..4).prop_map(|(d, n)| Call::Peek(d, n)),
        1 => (0u64..6, 1u64..6).prop_map(|(d, n)| Call::Refund(d, n)),
        1 => (1000u64..2100, 1u64..3).prop_map(|(d, n)| Call::Check(d, n)),
        1 => (1u64..8, 1u64..3).prop_map(|(d, n)| Call::Behind(d, n)),
    ]
}

proptest! {
    /// Under every rule the line ring holds (Strict, Weighted, the fixed window), its checks,
    /// peeks and refunds give the whole decision the three-word ring gives — `remaining`,
    /// `retry_after`, `reset_after` — through the same judgement, single-threaded.
    #[test]
    fn decides_as_the_ring_of_three_words(
        mode in prop_oneof![Just(Mode::Strict), Just(Mode::Weighted), Just(Mode::FixedWindow)],
        buckets in 1u64..=LINE_MAX_BUCKETS,
        limit in 1u64..8,
        // Units of 2¹⁸: limits up to 7·2¹⁸ < 2²¹, whose admissions wrap the 24-bit count.
        scale in prop_oneof![Just(1u64), Just(COMPACT_MAX_LIMIT / 8)],
        calls in prop::collection::vec(call(), 1..60),
    ) {
        let limit = limit * scale;
        let rule = counter_rule(mode, limit, buckets);
        let n_buckets = rule.buckets;
        let (lw, rw) = (owned(n_buckets), ring_words(n_buckets));
        let line = Line::on(&lw, n_buckets);
        let ring = Ring::<Compact>::from_parts(ring::packed(&rw), n_buckets);
        let mut t = 0;
        for (i, c) in calls.iter().enumerate() {
            let (ours, theirs) = on_both(&line, ring, &rule, scale, *c, &mut t);
            prop_assert_eq!(ours, theirs, "call {}", i);
        }
    }
}

/// What a call answered: a check's or a peek's decision, or a refund's units freed.
#[derive(Debug, PartialEq)]
enum Answer {
    Decision(Option<Decision>),
    Freed(Option<u64>),
}

/// `call` on the line ring and on the three-word ring, under `rule`, with costs in units of
/// `scale`, advancing the clock `t`: the two answers.
fn on_both(
    line: &Line<'_>,
    ring: Ring<'_, Compact>,
    rule: &CounterRule,
    scale: u64,
    call: Call,
    t: &mut u64,
) -> (Answer, Answer) {
    // The limiters refuse a cost above the limit before any judgement.
    let cost = |n: u64| (n * scale).min(rule.limit);
    match call {
        Call::Check(d, n) => {
            *t += d * G / 4;
            let (now, n) = (*t, cost(n));
            (
                Answer::Decision(line_counter::charge(line, rule, || now, n)),
                Answer::Decision(counter::charge(ring, rule, || now, n)),
            )
        }
        Call::Peek(d, n) => {
            *t += d * G / 4;
            let (now, n) = (*t, cost(n));
            (
                Answer::Decision(line_counter::peek(line, rule, || now, n)),
                Answer::Decision(counter::decide(ring, rule, || now, n, Op::Peek).map(|d| d.0)),
            )
        }
        Call::Refund(d, n) => {
            *t += d * G / 4;
            let (now, n) = (*t, n * scale);
            (
                Answer::Freed(line_counter::refund(line, rule, || now, n)),
                Answer::Freed(counter::refund(ring, rule, || now, n)),
            )
        }
        Call::Behind(d, n) => {
            let (now, n) = (t.saturating_sub(d * G / 4), cost(n));
            (
                Answer::Decision(line_counter::charge(line, rule, || now, n)),
                Answer::Decision(counter::charge(ring, rule, || now, n)),
            )
        }
    }
}

proptest! {
    /// A line ring retired and copied to the three-word ring ([`copy_to_ring`], for a key
    /// that leaves the inline table) goes on deciding as the line ring it was would, whole
    /// decisions included, also when the retirement froze a fill it had claimed (finished
    /// in the copy, as its first reader finishes it on the line).
    #[test]
    fn a_retired_line_ring_goes_on_as_the_three_word_ring(
        mode in prop_oneof![Just(Mode::Strict), Just(Mode::Weighted), Just(Mode::FixedWindow)],
        buckets in 1u64..=LINE_MAX_BUCKETS,
        limit in 1u64..8,
        before in prop::collection::vec(call(), 0..40),
        claimed in any::<bool>(),
        after in prop::collection::vec(call(), 1..40),
    ) {
        let rule = counter_rule(mode, limit, buckets);
        let n_buckets = rule.buckets;
        let lw = owned(n_buckets);
        let line = Line::on(&lw, n_buckets);
        // The line ring's first calls, alongside a three-word ring as above.
        let before_words = ring_words(n_buckets);
        let alongside = Ring::<Compact>::from_parts(ring::packed(&before_words), n_buckets);
        let mut t = 0;
        for (i, c) in before.iter().enumerate() {
            let (ours, theirs) = on_both(&line, alongside, &rule, 1, *c, &mut t);
            prop_assert_eq!(ours, theirs, "call {} before", i);
        }
        if claimed {
            let word = lw[0].load(Ordering::Relaxed);
            lw[0].store(claim(word, front_of(word) + 1), Ordering::Relaxed);
        }
        // The line ring that goes on, and the retired one's copy.
        let kept: Box<[AtomicU64]> = lw.iter().map(|w| AtomicU64::new(w.load(Ordering::Relaxed))).collect();
        let kept = Line::on(&kept, n_buckets);
        prop_assert!(line.retire_now());
        let rw = ring_words(n_buckets);
        copy_to_ring(&line, &rw);
        let ring = Ring::<Compact>::from_parts(ring::packed(&rw), n_buckets);
        for (i, c) in after.iter().enumerate() {
            let (ours, theirs) = on_both(&kept, ring, &rule, 1, *c, &mut t);
            prop_assert_eq!(ours, theirs, "call {}", i);
        }
    }
}

#[test]
fn decisions_hold_across_the_wrap_of_the_count() {
    // The count wraps at 2²⁴: eight windows of the largest compact limit. Every other bucket
    // (Strict counts the whole oldest bucket) admits the limit, then denies one more unit,
    // as the three-word ring does, forty times.
    let limit = COMPACT_MAX_LIMIT;
    let rule = counter_rule(Mode::Strict, limit, 1);
    let (lw, rw) = (owned(1), ring_words(1));
    let line = Line::on(&lw, 1);
    let ring = Ring::<Compact>::from_parts(ring::packed(&rw), 1);
    for b in 0..40 {
        let t = 2 * b * G + G / 2;
        for n in [limit, 1] {
            let ours = line_counter::charge(&line, &rule, || t, n);
            assert_eq!(ours, counter::charge(ring, &rule, || t, n), "bucket {b}");
            assert_eq!(ours.map(|d| d.is_allowed()), Some(n == limit), "bucket {b}");
        }
    }
    // 40·2²¹ is a multiple of 2²⁴.
    assert_eq!(line.admitted(), 0, "the count wrapped");
}

/// The fast path decides both a second admission and the denial after it, as the three-word
/// ring does, wherever the front's slot falls: each step jumps `N + 2` buckets, so the front
/// visits every slot, and the fast path reads the slots of the oldest bucket, the next one
/// and the front from one index. Fails with either neighbour's slot misplaced (its tag does
/// not match, and the fast path gives the check to the general loop).
#[test]
fn the_fast_path_decides_wherever_the_front_falls() {
    for mode in [Mode::Strict, Mode::Weighted] {
        for n in 1..=LINE_MAX_BUCKETS {
            let rule = counter_rule(mode, 2, n);
            let (lw, rw) = (owned(n), ring_words(n));
            let line = Line::on(&lw, n);
            let ring = Ring::<Compact>::from_parts(ring::packed(&rw), n);
            for step in 1..=n + 2 {
                let t = step * (n + 2) * G + G / 2;
                let first = line_counter::charge(&line, &rule, || t, 1);
                assert_eq!(first, counter::charge(ring, &rule, || t, 1));
                assert!(first.is_some_and(|d| d.is_allowed()), "{mode:?}, N = {n}");
                for allowed in [true, false] {
                    let fast = charge_fast(&line, &rule, || t, 1);
                    let at = format!("{mode:?}, N = {n}, bucket {}", t / G);
                    assert!(fast.is_some(), "the general loop decided: {at}");
                    assert_eq!(fast, counter::charge(ring, &rule, || t, 1), "{at}");
                    assert_eq!(fast.map(|d| d.is_allowed()), Some(allowed), "{at}");
                }
            }
        }
    }
}

/// The slot index by reciprocal is the remainder, for every `N` a line ring takes, over
/// buckets from 0 to well past any a reading reaches (fails with a reciprocal rounded down).
#[test]
fn slot_indices_by_reciprocal_are_the_remainders() {
    for n in 1..=LINE_MAX_BUCKETS {
        let words = owned(n);
        let line = Line::on(&words, n);
        let d = n + 1;
        let edges = (0..64).flat_map(|s| {
            let p = 1u64 << s;
            [p - 1, p, p + 1, p.wrapping_mul(d).wrapping_sub(1)]
        });
        for bucket in (0..10_000).chain(edges).filter(|&b| b < 1 << 60) {
            assert_eq!(
                line.index(bucket) as u64,
                bucket % d,
                "N = {n}, bucket {bucket}"
            );
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let bucket = x >> 4;
            assert_eq!(
                line.index(bucket) as u64,
                bucket % d,
                "N = {n}, bucket {bucket}"
            );
        }
    }
}
