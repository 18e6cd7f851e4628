//! Replay: every algorithm on its own keyed limiter over the same trace, on a simulated clock,
//! and the measures the report and the chart are made of.
//!
//! Each algorithm runs independently: after its first disagreement with the exact log it has
//! admitted different traffic, so its later decisions are made on a different state — as in
//! production, and as in Cloudflare's comparison. "Wrongly allowed" and "wrongly denied" are
//! per-request disagreements with the exact log, as a share of all requests.

use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use slidegate::clock::ManualClock;
use slidegate::{ConfigError, CostError, KeyedLimiter, Mode, Quota};

use crate::simulate::trace::Trace;

/// One algorithm to replay: a mode and a granularity.
#[derive(Clone, Debug)]
pub struct Algorithm {
    pub name: &'static str,
    pub quota: Quota,
    /// Whether the granularity is a parameter of the algorithm (shown in the table).
    pub bucketed: bool,
    /// For a bucketed algorithm, the place of its granularity in the list it came from (the
    /// defaults, or `--granularity`), whether or not the others of the list apply: what keeps
    /// its colour in the chart from one run to the next. 0 for the others.
    pub rank: usize,
}

impl Algorithm {
    /// The exact sliding log: the reference every other algorithm is compared to.
    pub fn is_reference(&self) -> bool {
        self.quota.mode() == Mode::ExactLog
    }
}

/// The numbers of buckets the table shows by default: 1 (Cloudflare's two counters), 10
/// (slidegate's default), 60 (a minute in seconds).
pub const DEFAULT_BUCKETS: [u64; 3] = [1, 10, 60];

/// Strict, Strict with last-admission marks and Weighted at each granularity, then the fixed
/// window, GCRA and the exact log
/// (the reference, last). `granularities` empty ⇒ [`DEFAULT_BUCKETS`], skipping those that do
/// not divide the window into whole nanoseconds.
pub fn algorithms(base: Quota, granularities: &[Duration]) -> Result<Vec<Algorithm>, ConfigError> {
    let window = base.window();
    let mut quotas = Vec::new();
    if granularities.is_empty() {
        for (rank, n) in DEFAULT_BUCKETS.into_iter().enumerate() {
            let window_ns = window.as_nanos();
            if window_ns.is_multiple_of(u128::from(n)) {
                quotas.push((rank, base.with_granularity(window / n as u32)?));
            }
        }
    } else {
        for (rank, &g) in granularities.iter().enumerate() {
            quotas.push((rank, base.with_granularity(g)?));
        }
    }
    let mut out = Vec::new();
    for (mode, name) in [
        (Mode::Strict, "Strict"),
        (Mode::StrictMarked, "StrictMarked"),
        (Mode::Weighted, "Weighted"),
    ] {
        for &(rank, q) in &quotas {
            out.push(Algorithm {
                name,
                quota: q.with_mode(mode),
                bucketed: true,
                rank,
            });
        }
    }
    for (mode, name) in [
        (Mode::FixedWindow, "FixedWindow"),
        (Mode::Gcra, "GCRA"),
        (Mode::ExactLog, "ExactLog"),
    ] {
        out.push(Algorithm {
            name,
            // FixedWindow sets its granularity to the window; the others have none.
            quota: base.with_mode(mode),
            bucketed: false,
            rank: 0,
        });
    }
    Ok(out)
}

/// What one algorithm decided on every request of a trace.
pub struct Replay {
    /// Indexed like the trace's requests.
    pub allowed: Vec<bool>,
    /// Wall time of the replay loop.
    pub elapsed: Duration,
}

/// The trace time the simulated clock reads 0 at for `quota`: at most the first request's.
///
/// The exact log tells apart only [`MAX_SPAN`](crate::simulate::trace::MAX_SPAN) from its clock's
/// origin (later readings count as that one), so Unix-like timestamps (2e9 s and more) would
/// give it wrong answers: it counts from the first request, and a trace's span is checked
/// against that bound. Fixed windows and buckets are aligned to their clock's origin, so for
/// the other algorithms it stays a multiple of the window, below the first request: each
/// window starts where it would on the trace's own clock, where a boundary attack aims (and
/// their readings are never later than the trace's timestamps, which they store exactly).
pub fn origin(trace: &Trace, quota: Quota) -> u64 {
    let first = trace.requests.first().map_or(0, |r| r.at);
    if quota.mode() == Mode::ExactLog {
        first
    } else {
        let window = u64::try_from(quota.window().as_nanos()).unwrap_or(u64::MAX);
        first - first % window
    }
}

/// Replays `trace` through a fresh keyed limiter of `quota`, the simulated clock set to each
/// request's time since [`origin`]. `progress` is advanced by the number of requests.
pub fn replay(trace: &Trace, quota: Quota, progress: &ProgressBar) -> Result<Replay, CostError> {
    const TICK: usize = 1 << 16;
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::<String, ManualClock>::with_clock(quota, clock.clone());
    let mut allowed = Vec::with_capacity(trace.requests.len());
    let origin = origin(trace, quota);
    let start = Instant::now();
    for chunk in trace.requests.chunks(TICK) {
        for r in chunk {
            clock.set(Duration::from_nanos(r.at - origin));
            let decision = limiter.check_n(&trace.keys[r.key as usize], u64::from(r.cost))?;
            allowed.push(decision.is_allowed());
        }
        progress.inc(chunk.len() as u64);
    }
    Ok(Replay {
        allowed,
        elapsed: start.elapsed(),
    })
}

/// Each key's requests, as indices into the trace in time order.
pub fn by_key(trace: &Trace) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new(); trace.keys.len()];
    for (i, r) in trace.requests.iter().enumerate() {
        // Fits: a trace this long would not fit in memory long before 2³² requests.
        out[r.key as usize].push(i as u32);
    }
    out
}

/// The largest admitted cost in any interval `(t − window, t]`, over every key: a two-pointer
/// sweep over each key's admitted requests (time order), O(requests).
pub fn worst_window(trace: &Trace, keys: &[Vec<u32>], allowed: &[bool], window: u64) -> u64 {
    let mut worst = 0;
    for indices in keys {
        let admitted = indices
            .iter()
            .map(|&i| i as usize)
            .filter(|&i| allowed[i])
            .map(|i| (trace.requests[i].at, u64::from(trace.requests[i].cost)));
        worst = worst.max(worst_in_window(admitted, window));
    }
    worst
}

/// The largest sum of costs of points inside any `(t − window, t]`; points in time order.
pub fn worst_in_window(points: impl Iterator<Item = (u64, u64)> + Clone, window: u64) -> u64 {
    let mut left = points.clone();
    let (mut sum, mut worst) = (0u64, 0u64);
    for (t, cost) in points {
        sum += cost;
        // Drop points at or before t − window: outside the half-open interval.
        while let Some(cut) = t.checked_sub(window) {
            let mut peek = left.clone();
            match peek.next() {
                Some((old, c)) if old <= cut => {
                    sum -= c;
                    left = peek;
                }
                _ => break,
            }
        }
        worst = worst.max(sum);
    }
    worst
}

/// The largest admitted cost in `(t − window, t]` for `t` anywhere in each of `bins` bins of
/// `width` from `start`; `points` (time order) are one key's admitted requests.
pub fn trailing_peaks(
    points: &[(u64, u64)],
    window: u64,
    start: u64,
    width: u64,
    bins: usize,
) -> Vec<u64> {
    let (mut left, mut right, mut sum) = (0, 0, 0u64);
    let mut out = Vec::with_capacity(bins);
    let expire = |left: &mut usize, sum: &mut u64, t: u64| {
        if let Some(cut) = t.checked_sub(window) {
            while *left < points.len() && points[*left].0 <= cut {
                *sum -= points[*left].1;
                *left += 1;
            }
        }
    };
    for bin in 0..bins as u64 {
        let a = start.saturating_add(bin.saturating_mul(width));
        let b = a.saturating_add(width);
        // The value at the bin's start…
        while right < points.len() && points[right].0 <= a {
            sum += points[right].1;
            right += 1;
        }
        expire(&mut left, &mut sum, a);
        let mut peak = sum;
        // …and after every admission inside it: the sum only rises at admissions.
        while right < points.len() && points[right].0 < b {
            let t = points[right].0;
            sum += points[right].1;
            right += 1;
            expire(&mut left, &mut sum, t);
            peak = peak.max(sum);
        }
        out.push(peak);
    }
    out
}

/// Per-request disagreements of `allowed` with the reference: (wrongly allowed, wrongly
/// denied).
pub fn disagreements(allowed: &[bool], reference: &[bool]) -> (u64, u64) {
    let (mut wrongly_allowed, mut wrongly_denied) = (0, 0);
    for (&a, &r) in allowed.iter().zip(reference) {
        wrongly_allowed += u64::from(a && !r);
        wrongly_denied += u64::from(!a && r);
    }
    (wrongly_allowed, wrongly_denied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::generate::{Params, Scenario, generate};

    const S: u64 = 1_000_000_000;

    /// The exact sliding log's rule, computed plainly: admit cost `n` at `t` iff the cost admitted
    /// in `(t − W, t]` plus `n` is at most `L`. A queue of admissions and a running sum per key.
    fn definition(trace: &Trace, limit: u64, window: u64) -> Replay {
        let start = Instant::now();
        let mut logs: Vec<(std::collections::VecDeque<(u64, u64)>, u64)> =
            vec![Default::default(); trace.keys.len()];
        let mut allowed = Vec::with_capacity(trace.requests.len());
        for r in &trace.requests {
            let (log, sum) = &mut logs[r.key as usize];
            if let Some(cut) = r.at.checked_sub(window) {
                while let Some(&(t, c)) = log.front() {
                    if t > cut {
                        break;
                    }
                    *sum -= c;
                    log.pop_front();
                }
            }
            let cost = u64::from(r.cost);
            let ok = *sum + cost <= limit;
            if ok {
                log.push_back((r.at, cost));
                *sum += cost;
            }
            allowed.push(ok);
        }
        Replay {
            allowed,
            elapsed: start.elapsed(),
        }
    }

    /// The definition, by brute force: every earlier admission of the key is looked at.
    fn brute_definition(trace: &Trace, limit: u64, window: u64) -> Vec<bool> {
        let mut admitted: Vec<(u64, u32, u64)> = Vec::new();
        let mut out = Vec::new();
        for r in &trace.requests {
            let used: u64 = admitted
                .iter()
                .filter(|&&(t, k, _)| k == r.key && t + window > r.at)
                .map(|&(_, _, c)| c)
                .sum();
            let ok = used + u64::from(r.cost) <= limit;
            if ok {
                admitted.push((r.at, r.key, u64::from(r.cost)));
            }
            out.push(ok);
        }
        out
    }

    fn brute_worst(points: &[(u64, u64)], window: u64) -> u64 {
        points
            .iter()
            .map(|&(t, _)| {
                points
                    .iter()
                    .filter(|&&(u, _)| u <= t && u + window > t)
                    .map(|&(_, c)| c)
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0)
    }

    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    #[test]
    fn worst_window_sweep_equals_brute_force() {
        let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
        for case in 0..2000 {
            let len = rng.next(40) as usize;
            let window = 1 + rng.next(20);
            let mut t = rng.next(5);
            let mut points = Vec::new();
            for _ in 0..len {
                t += rng.next(6); // repeats allowed
                points.push((t, 1 + rng.next(4)));
            }
            let fast = worst_in_window(points.iter().copied(), window);
            assert_eq!(
                fast,
                brute_worst(&points, window),
                "case {case}: {points:?} w={window}"
            );
            // Every bin's peak is at most the worst, and some bin reaches it.
            let peaks = trailing_peaks(&points, window, 0, 1 + rng.next(7), 40);
            assert!(peaks.iter().all(|&p| p <= fast));
            if t < 40 {
                assert_eq!(peaks.iter().max().copied().unwrap_or(0), fast, "{points:?}");
            }
        }
        // Edges: the interval is half-open, (t − W, t].
        assert_eq!(worst_in_window([(0, 1), (10, 1)].into_iter(), 10), 1);
        assert_eq!(worst_in_window([(0, 1), (9, 1)].into_iter(), 10), 2);
        assert_eq!(worst_in_window([(5, 3), (5, 4)].into_iter(), 1), 7);
    }

    fn params() -> Params {
        Params {
            limit: 10,
            window: 10 * S,
            duration: 200 * S,
            keys: 40,
            rate: 1.5,
            on: 3 * S,
            off: 8 * S,
            lifetime: 30 * S,
            seed: 3,
        }
    }

    #[test]
    fn the_reference_is_the_definition() {
        let p = Params {
            duration: 60 * S,
            keys: 8,
            ..params()
        };
        for s in [Scenario::Mixed, Scenario::Churn, Scenario::Boundary] {
            let trace = generate(s, &p);
            let got = definition(&trace, p.limit, p.window).allowed;
            assert_eq!(got, brute_definition(&trace, p.limit, p.window), "{s}");
        }
        // Costs, and the edge of the half-open window (t − W, t].
        let mut b = crate::simulate::trace::TraceBuilder::default();
        let k = b.key("k");
        for (at, cost) in [(0, 3), (5, 2), (10, 3), (14, 1), (15, 2), (20, 1)] {
            b.push(at, k, cost);
        }
        let trace = b.finish();
        let want = [true, true, true, false, true, true];
        assert_eq!(definition(&trace, 5, 10).allowed, want);
        assert_eq!(brute_definition(&trace, 5, 10), want);
    }

    #[test]
    fn the_library_exact_log_is_the_definition() {
        let p = params();
        for s in [
            Scenario::Mixed,
            Scenario::Bursts,
            Scenario::Churn,
            Scenario::Boundary,
        ] {
            let trace = generate(s, &p);
            let quota = Quota::new(p.limit, Duration::from_nanos(p.window))
                .unwrap()
                .with_mode(Mode::ExactLog);
            let got = replay(&trace, quota, &ProgressBar::hidden())
                .unwrap()
                .allowed;
            assert_eq!(got, definition(&trace, p.limit, p.window).allowed, "{s}");
        }
        // Costs, and the edge of the half-open window (t − W, t].
        let mut b = crate::simulate::trace::TraceBuilder::default();
        let k = b.key("k");
        for (at, cost) in [(0, 3), (5, 2), (10, 3), (14, 1), (15, 2), (20, 1), (20, 3)] {
            b.push(at, k, cost);
        }
        let trace = b.finish();
        let quota = Quota::new(5, Duration::from_nanos(10))
            .unwrap()
            .with_mode(Mode::ExactLog);
        let got = replay(&trace, quota, &ProgressBar::hidden())
            .unwrap()
            .allowed;
        assert_eq!(got, [true, true, true, false, true, true, false]);
    }

    #[test]
    fn late_timestamps_replay_like_early_ones() {
        // 2.4e9 s is past the ~2.3e9 s the exact log tells apart from its clock's origin.
        let p = Params {
            duration: 60 * S,
            keys: 8,
            ..params()
        };
        let early = generate(Scenario::Mixed, &p);
        let base = Quota::new(p.limit, Duration::from_nanos(p.window)).unwrap();
        // A whole number of windows later every algorithm decides alike; a shift by a part of
        // one moves fixed windows and buckets, but not the exact log or GCRA.
        for shift in [2_400_000_000 * S, 2_400_000_000 * S + 3 * S + 7] {
            let mut late = early.clone();
            for r in &mut late.requests {
                r.at += shift;
            }
            for a in algorithms(base, &[]).unwrap() {
                if shift % p.window != 0 && !matches!(a.quota.mode(), Mode::ExactLog | Mode::Gcra) {
                    continue;
                }
                let replay =
                    |t: &Trace| replay(t, a.quota, &ProgressBar::hidden()).unwrap().allowed;
                let (late, early) = (replay(&late), replay(&early));
                let differ = late.iter().zip(&early).position(|(l, e)| l != e);
                assert_eq!(
                    differ, None,
                    "{} shifted by {shift}: first difference",
                    a.name
                );
            }
        }
    }

    #[test]
    fn strict_never_exceeds_the_limit_and_fixed_window_doubles_it_under_attack() {
        let p = params();
        let trace = generate(Scenario::Boundary, &p);
        let keys = by_key(&trace);
        let base = Quota::new(p.limit, Duration::from_nanos(p.window)).unwrap();
        let algos = algorithms(base, &[]).unwrap();
        // N = 1 and 10; 10 s / 60 is not whole nanoseconds.
        assert_eq!(algos.len(), 3 * 2 + 3);
        let reference = definition(&trace, p.limit, p.window).allowed;
        assert_eq!(worst_window(&trace, &keys, &reference, p.window), p.limit);
        for a in &algos {
            let allowed = replay(&trace, a.quota, &ProgressBar::hidden())
                .unwrap()
                .allowed;
            let worst = worst_window(&trace, &keys, &allowed, p.window);
            match a.quota.mode() {
                Mode::Strict | Mode::StrictMarked | Mode::ExactLog => {
                    assert_eq!(worst, p.limit, "{}", a.name)
                }
                Mode::FixedWindow => assert_eq!(worst, 2 * p.limit),
                _ => assert!(worst >= p.limit, "{}", a.name),
            }
        }
    }

    #[test]
    fn disagreements_count_both_ways() {
        let a = [true, true, false, false, true];
        let r = [true, false, true, false, false];
        assert_eq!(disagreements(&a, &r), (2, 1));
    }

    #[test]
    fn default_granularities_skip_those_that_do_not_divide_the_window() {
        let base = Quota::new(5, Duration::from_nanos(30)).unwrap();
        let names: Vec<_> = algorithms(base, &[])
            .unwrap()
            .iter()
            .map(|a| (a.name, a.quota.buckets()))
            .collect();
        // 30 ns: N = 1 and 10 divide it, 60 does not.
        assert_eq!(names[..2], [("Strict", 1), ("Strict", 10)]);
        // Each keeps the rank (and so the chart colour) it has when all three apply.
        let ranks = |base: Quota| -> Vec<(u64, usize)> {
            algorithms(base, &[])
                .unwrap()
                .iter()
                .filter(|a| a.bucketed)
                .map(|a| (a.quota.buckets(), a.rank))
                .collect()
        };
        let all = Quota::new(5, Duration::from_secs(60)).unwrap();
        assert_eq!(ranks(all)[..3], [(1, 0), (10, 1), (60, 2)]);
        assert_eq!(ranks(base)[..2], [(1, 0), (10, 1)]);
        let err = algorithms(base, &[Duration::from_nanos(7)]).unwrap_err();
        assert!(err.to_string().contains("does not divide"), "{err}");
    }
}
