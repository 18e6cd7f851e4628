//! A clock that steps: −1 s, −1 day, +1 year, and a clock stuck at one reading, through every
//! algorithm, refunds off and on, on the direct limiter, a keyed limiter of three keys and
//! `check_all` over both.
//!
//! Each run is deterministic: true time moves 1–15 ms between operations (about ten checks
//! per window on a limit of 10, so most are denied); the clock reads true time, then for 3 s
//! true time plus the step (the stuck clock: the reading it had when it stuck), then true
//! time again. A limiter treats a reading older than one it has seen as a time it has seen,
//! so what each run asserts is measured against the *newest reading* a limit has been
//! charged at (`newest`: the reading of its latest check or refund, whichever was largest):
//!
//! - nothing panics;
//! - the limit holds per window of newest-reading time: at most `L` admitted (net of
//!   refunds) in any `W` for Strict, Strict with marks and the exact log, `2L` for Weighted,
//!   the fixed window and GCRA (their bound on a monotone clock);
//! - every denial's `retry_after` is exact *on the clock that asked*: a peek at the
//!   denied reading plus `retry_after` admits, one nanosecond earlier does not;
//! - once the clock is past every reading it gave, the window empties within `reset_after`,
//!   which is at most one window and one bucket (GCRA: `τ = W`): no key stays locked out for
//!   longer. After +1 year the clock is behind the newest reading until true time catches
//!   up a year later; every check until then is denied, with a `retry_after` that says so.

use slidegate_testkit::model as common;

use std::time::Duration;

use common::{MODES, Model, worst_window};
use slidegate::clock::ManualClock;
use slidegate::{Decision, KeyedLimiter, Limit, Mode, Quota, SlidingWindow, check_all};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;
const DAY: u64 = 86_400 * SEC;
const LIMIT: u64 = 10;
const WINDOW: u64 = SEC;
const GRANULARITY: u64 = 100 * MS;
/// True time at the start: two days, so that a reading a day back is still positive.
const START: u64 = 2 * DAY;
/// How long each phase (before, during and after the step) lasts in true time.
const PHASE: u64 = 3 * SEC;

#[derive(Clone, Copy, Debug)]
enum Abuse {
    Back1s,
    Back1Day,
    Forward1Year,
    Stuck,
}

const ABUSES: [Abuse; 4] = [
    Abuse::Back1s,
    Abuse::Back1Day,
    Abuse::Forward1Year,
    Abuse::Stuck,
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Surface {
    Direct,
    Keyed,
    CheckAll,
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// One limit's record: the newest reading it was charged at, and what it admitted and
/// refunded at the newest reading of the time.
struct Record {
    /// Strict's decisions are those of the model judging at the newest reading.
    model: Option<Model>,
    newest: u64,
    admitted: Vec<(u64, u64)>,
    refunded: Vec<u64>,
}

impl Record {
    fn new(quota: Quota) -> Record {
        Record {
            model: (quota.mode() == Mode::Strict).then(|| Model::new(quota)),
            newest: 0,
            admitted: Vec::new(),
            refunded: Vec::new(),
        }
    }

    /// Holds a decision at the newest reading `at` to the model's, for Strict.
    fn compare(&mut self, at: u64, d: &Decision, ctx: &str) {
        if let Some(model) = &mut self.model {
            assert_eq!(
                model.check(at, 1),
                (d.is_allowed(), d.remaining()),
                "{ctx}: Strict judged otherwise than at the newest reading {at}"
            );
        }
    }

    fn charged_at(&mut self, reading: u64) -> u64 {
        self.newest = self.newest.max(reading);
        self.newest
    }

    /// The most admitted, net of refunds, in any window `[s, s + W)` (see `net_worst`).
    fn worst(&self) -> u64 {
        net_worst(&self.admitted, &self.refunded, WINDOW)
    }
}

/// The most cost admitted in any `[s, s + window)` less the refunds made in it. A refund
/// gives back a unit admitted before it and still counted, so at the last admission of any
/// window the limiter counted every unit admitted in the window but those refunded by then,
/// each by a refund in the window: the net is at most what the limiter counted.
fn net_worst(admitted: &[(u64, u64)], refunded: &[u64], window: u64) -> u64 {
    if refunded.is_empty() {
        return worst_window(&mut admitted.to_vec(), window);
    }
    let mut worst = 0;
    for &(s, _) in admitted {
        let inside = |t: u64| s <= t && t < s + window;
        let got: u64 = admitted.iter().filter(|a| inside(a.0)).map(|a| a.1).sum();
        let back = refunded.iter().filter(|&&t| inside(t)).count() as u64;
        worst = worst.max(got.saturating_sub(back));
    }
    worst
}

/// What a limit is allowed in any window of newest-reading time.
fn bound(mode: Mode) -> u64 {
    match mode {
        Mode::Strict | Mode::StrictMarked | Mode::ExactLog => LIMIT,
        _ => 2 * LIMIT,
    }
}

/// The limits of one run, all on one clock: a direct limiter, three keys of a keyed limiter.
struct Limits {
    clock: ManualClock,
    direct: SlidingWindow<ManualClock>,
    keyed: KeyedLimiter<u8, ManualClock>,
}

/// Index 0 is the direct limiter, 1..=3 the keys.
const LIMITS: usize = 4;

impl Limits {
    fn new(quota: Quota) -> Limits {
        let clock = ManualClock::new();
        Limits {
            direct: SlidingWindow::with_clock(quota, clock.clone()),
            keyed: KeyedLimiter::builder(quota).clock(clock.clone()).build(),
            clock,
        }
    }

    fn set(&self, reading: u64) {
        self.clock.set(Duration::from_nanos(reading));
    }

    fn peek(&self, i: usize) -> Decision {
        match i {
            0 => self.direct.peek(),
            k => self.keyed.peek(&(k as u8)),
        }
    }

    fn check(&self, i: usize) -> Decision {
        match i {
            0 => self.direct.check(),
            k => self.keyed.check(&(k as u8)),
        }
    }

    fn refund(&self, i: usize) -> u64 {
        match i {
            0 => self.direct.refund(1),
            k => self.keyed.refund(&(k as u8), 1),
        }
    }

    /// Whether limit `i` would admit one unit at `reading` (then back at `back`): a peek,
    /// which writes nothing.
    fn admits_at(&self, i: usize, reading: u64, back: u64) -> bool {
        self.set(reading);
        let allowed = self.peek(i).is_allowed();
        self.set(back);
        allowed
    }
}

/// The clock's reading at true time `t` under `abuse`, which starts at `from`.
fn reading(abuse: Abuse, from: u64, t: u64) -> u64 {
    if t < from || t >= from + PHASE {
        return t;
    }
    match abuse {
        Abuse::Back1s => t - SEC,
        Abuse::Back1Day => t - DAY,
        Abuse::Forward1Year => t + 365 * DAY,
        Abuse::Stuck => from,
    }
}

/// What a run saw: decisions, denials (each `retry_after` checked), the most admitted in a
/// window by any of its limits, the longest `reset_after` at recovery (ns).
#[derive(Default)]
struct Figures {
    decisions: u64,
    denials: u64,
    worst: u64,
    reset: u64,
}

fn run(mode: Mode, abuse: Abuse, surface: Surface, refunds: bool, seed: u64) -> Figures {
    let quota = Quota::new(LIMIT, Duration::from_nanos(WINDOW))
        .unwrap()
        .with_granularity(Duration::from_nanos(GRANULARITY))
        .unwrap()
        .with_mode(mode);
    let limits = Limits::new(quota);
    let mut records: Vec<Record> = (0..LIMITS).map(|_| Record::new(quota)).collect();
    let mut rng = Rng(seed | 1);
    let from = START + PHASE;
    let mut t = START;
    let mut max_reading = 0;
    let mut recovered = false;
    let end = START + 3 * PHASE;
    let ctx = format!("{mode:?} {abuse:?} {surface:?} refunds={refunds}");
    let mut denials = 0;
    let mut figures = Figures::default();
    while t < end {
        t += 1 + rng.below(15 * MS);
        let mut now = reading(abuse, from, t);
        if abuse_over(abuse, from, t) && now < max_reading {
            // The +1 year clock is back on true time, a year behind the newest reading: every
            // key is locked until true time catches up. Check that once, then skip the year.
            assert_locked(&limits, now, max_reading, &ctx);
            t = max_reading + 1;
            now = t;
        }
        if !recovered && abuse_over(abuse, from, t) {
            // The clock is past every reading it gave: each limit empties within
            // `reset_after`, at most a window and a bucket away.
            recovered = true;
            for i in 0..LIMITS {
                limits.set(now);
                let reset = limits.peek(i).reset_after().as_nanos() as u64;
                figures.reset = figures.reset.max(reset);
                assert!(
                    reset <= WINDOW + GRANULARITY,
                    "{ctx}: limit {i} resets {reset} ns after recovery"
                );
                limits.set(now + reset);
                assert_eq!(
                    limits.peek(i).remaining(),
                    LIMIT,
                    "{ctx}: limit {i} not fresh {reset} ns after recovery"
                );
            }
        }
        max_reading = max_reading.max(now);
        limits.set(now);
        let op = rng.below(10);
        if refunds && op == 0 {
            let i = rng.below(LIMITS as u64) as usize;
            let freed = limits.refund(i);
            let at = records[i].charged_at(now);
            records[i]
                .refunded
                .extend(std::iter::repeat_n(at, freed as usize));
            if let Some(model) = &mut records[i].model {
                assert_eq!(model.refund(at, 1), freed, "{ctx}: refund at {at}");
            }
            continue;
        }
        figures.decisions += 1;
        match surface {
            Surface::Direct | Surface::Keyed => {
                let i = if surface == Surface::Direct {
                    0
                } else {
                    1 + rng.below(3) as usize
                };
                let d = limits.check(i);
                let at = records[i].charged_at(now);
                records[i].compare(at, &d, &ctx);
                if d.is_allowed() {
                    records[i].admitted.push((at, 1));
                } else {
                    denials += 1;
                    let retry = d.retry_after().unwrap().as_nanos() as u64;
                    assert!(
                        limits.admits_at(i, now + retry, now),
                        "{ctx}: not admitted {retry} ns after a denial at {now}"
                    );
                    assert!(
                        !limits.admits_at(i, now + retry - 1, now),
                        "{ctx}: admitted before retry_after={retry} ns, denied at {now}"
                    );
                }
            }
            Surface::CheckAll => {
                // The direct limiter and one key, all or nothing.
                let k = 1 + rng.below(3) as usize;
                let name = k as u8;
                let key = limits.keyed.key(&name);
                let d = check_all(&[(&limits.direct as &dyn Limit, 1), (&key, 1)]).unwrap();
                // A denial reserved (and so moved to this reading) the limits before its
                // denier and the denier; the others were only peeked.
                let judged = d.denied_by().map_or(2, |i| i + 1);
                for i in [0, k].into_iter().take(judged) {
                    let at = records[i].charged_at(now);
                    if d.is_allowed() {
                        records[i].admitted.push((at, 1));
                        if let Some(model) = &mut records[i].model {
                            model.record(at, 1);
                        }
                    }
                }
                if !d.is_allowed() {
                    denials += 1;
                    let retry = d.retry_after().unwrap().as_nanos() as u64;
                    let all = |at| [0, k].iter().all(|&i| limits.admits_at(i, at, now));
                    assert!(
                        all(now + retry),
                        "{ctx}: not admitted {retry} ns after a denial at {now}"
                    );
                    assert!(
                        !all(now + retry - 1),
                        "{ctx}: admitted before retry_after={retry} ns, denied at {now}"
                    );
                }
            }
        }
    }
    assert!(recovered, "{ctx}: the clock never recovered");
    assert!(denials > 0, "{ctx}: the limit was never reached");
    for (i, record) in records.iter().enumerate() {
        let worst = record.worst();
        assert!(
            worst <= bound(mode),
            "{ctx}: limit {i} admitted {worst} in one window (bound {})",
            bound(mode)
        );
        figures.worst = figures.worst.max(worst);
    }
    figures.denials = denials;
    figures
}

/// Whether the abuse is over at true time `t` (the clock reads true time again).
fn abuse_over(_abuse: Abuse, from: u64, t: u64) -> bool {
    t >= from + PHASE
}

/// A clock a year behind the newest reading: every limit denies, and its `retry_after`
/// counts the year (waiting it on this clock admits; the key is locked until then).
fn assert_locked(limits: &Limits, now: u64, newest: u64, ctx: &str) {
    limits.set(now);
    for i in 0..LIMITS {
        let d = limits.peek(i);
        if limits.admits_at(i, now, now) {
            // A limit that admitted nothing during the step has nothing to hold.
            continue;
        }
        let retry = d.retry_after().unwrap().as_nanos() as u64;
        assert!(
            retry > newest - now - 2 * PHASE,
            "{ctx}: limit {i} locked for a year says retry in {retry} ns"
        );
        assert!(limits.admits_at(i, now + retry, now), "{ctx}: limit {i}");
        assert!(
            !limits.admits_at(i, now + retry - 1, now),
            "{ctx}: limit {i}"
        );
    }
}

#[test]
fn clock_steps_keep_every_limit_and_lock_no_key_past_a_window() {
    let mut seed = 0x5eed;
    for mode in MODES {
        let mut all = Figures::default();
        for abuse in ABUSES {
            for surface in [Surface::Direct, Surface::Keyed, Surface::CheckAll] {
                for refunds in [false, true] {
                    seed += 1;
                    let f = run(mode, abuse, surface, refunds, seed);
                    all.decisions += f.decisions;
                    all.denials += f.denials;
                    all.worst = all.worst.max(f.worst);
                    all.reset = all.reset.max(f.reset);
                }
            }
        }
        println!(
            "{mode:?}: 24 runs, {} decisions, {} denials with retry_after checked, most in one \
             window {} (bound {}), longest reset_after at recovery {} ms",
            all.decisions,
            all.denials,
            all.worst,
            bound(mode),
            all.reset / MS
        );
    }
}
