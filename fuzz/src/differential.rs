//! The differential harness: two direct limiters and two keyed limiters (four keys each, at
//! most one to four held) with random quotas of every algorithm, driven through checks,
//! peeks, refunds, reports of usage (`record`, debt allowed), `check_all` and
//! `retain_recent` at arbitrary clock steps, each decision
//! compared with the reference model's. Any difference, and any panic, is a crash.
//!
//! A key forced out by `max_keys` forgets its admissions (documented); the harness learns
//! which key went by peeking: after a call that raised `forced_evictions` by `d`, exactly `d`
//! keys whose model holds admissions must peek as fresh, and their models restart. Nothing
//! else may force a key out: a peek, a refund, a denial or a cost error never does (a
//! report makes its key's window as a check does).

use std::time::Duration;

use arbitrary::{Result, Unstructured};
use slidegate::clock::ManualClock;
use slidegate::{CostError, Decision, KeyedLimiter, Limit, Mode, Quota, SlidingWindow, check_all};

use crate::model::{MODES, Model, assert_reset_is_tight, assert_retry_is_tight, assert_usage};

/// Keys per keyed limiter.
const KEYS: u8 = 4;
/// The clock stops moving here, 36 years in: before the end of every algorithm's time (the
/// exact log tells times apart up to 2⁶¹ ns, and counts later readings as that).
const MAX_TIME: u64 = 1 << 60;

/// One limit an operation names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// Direct limiter 0 or 1.
    Direct(usize),
    /// Keyed limiter 0 or 1, and a key.
    Keyed(usize, u8),
}

impl Target {
    fn quota_index(self) -> usize {
        match self {
            Target::Direct(i) | Target::Keyed(i, _) => i,
        }
    }
}

#[derive(Debug)]
enum Op {
    Check(Target, u64),
    Peek(Target),
    Refund(Target, u64),
    /// A report of usage (`record`, debt allowed).
    Record(Target, u64),
    All(Vec<(Target, u64)>),
    Retain(usize),
}

/// A decoded input.
#[derive(Debug)]
struct Case {
    quotas: [Quota; 2],
    max_keys: [usize; 2],
    ops: Vec<(u64, Op)>,
}

fn quota(u: &mut Unstructured) -> Result<Quota> {
    let limit = if u.ratio(1, 8)? {
        u.int_in_range(13..=300)?
    } else {
        u.int_in_range(1..=12)?
    };
    let buckets = *u.choose(&[1u64, 2, 3, 4, 7, 10, 60])?;
    let g = if u.ratio(1, 16)? {
        u.int_in_range(1_000..=1_000_000_000)?
    } else {
        u.int_in_range(1..=50)?
    };
    let mode = *u.choose(&MODES)?;
    Ok(Quota::new(limit, Duration::from_nanos(g * buckets))
        .and_then(|q| q.with_granularity(Duration::from_nanos(g)))
        .expect("a valid quota")
        .with_mode(mode))
}

/// A clock step for quota `q`: edges hit exactly and missed by 1 ns, long gaps now and then.
fn step(u: &mut Unstructured, q: &Quota) -> Result<u64> {
    let g = q.granularity().as_nanos() as u64;
    let w = q.window().as_nanos() as u64;
    Ok(match u.int_in_range(0..=15u8)? {
        0..=4 => 0,
        5..=6 => u.int_in_range(1..=g)?,
        7 => g,
        8 => g - 1,
        9 => g + 1,
        10 => w,
        11 => w - 1,
        12 => w + 1,
        13 => u.int_in_range(0..=3 * w)?,
        14 => *u.choose(&[3 * 365 * 24 * 3600 * 1_000_000_000, g << 24, g << 32])?,
        _ => u.int_in_range(0..=u64::from(u32::MAX))?,
    })
}

fn target(u: &mut Unstructured) -> Result<Target> {
    let i = usize::from(u.arbitrary::<bool>()?);
    Ok(if u.ratio(1, 3)? {
        Target::Direct(i)
    } else {
        Target::Keyed(i, u.int_in_range(0..=KEYS - 1)?)
    })
}

/// A cost for a limit of `limit`: mostly valid, now and then 0 or above the limit.
fn cost(u: &mut Unstructured, limit: u64) -> Result<u64> {
    Ok(match u.int_in_range(0..=15u8)? {
        0 => 0,
        1 => limit + 1,
        2 => limit,
        _ => u.int_in_range(1..=limit.min(4))?,
    })
}

impl Case {
    fn decode(u: &mut Unstructured) -> Result<Case> {
        let quotas = [quota(u)?, quota(u)?];
        // 1 to 3: a full store forcing keys out; 4 (`KEYS`): never full.
        let max_keys = [u.int_in_range(1..=4)?, u.int_in_range(1..=4)?];
        let mut ops = Vec::new();
        while !u.is_empty() && ops.len() < 200 {
            let t = target(u)?;
            let q = &quotas[t.quota_index()];
            let scale = usize::from(u.arbitrary::<bool>()?);
            let step = step(u, &quotas[scale])?;
            let op = match u.int_in_range(0..=17u8)? {
                // The exact log's debt record is not built: its reports are counted up to
                // its limit, where the model keeps the rest as debt.
                16..=17 if q.mode() == Mode::ExactLog => Op::Peek(t),
                16 => Op::Record(t, u.int_in_range(0..=3 * q.limit())?),
                // Reports that reach the usage ceiling, on direct limiters only: the ceiling
                // bounds every bucket the ring holds, the fixed window's previous one and a
                // marked oldest bucket too, which no rule counts, so an idle eviction, which
                // the model does not see, forgets units the clamp would have counted.
                17 if matches!(t, Target::Direct(_)) => {
                    Op::Record(t, *u.choose(&[q.usage_ceiling(), u64::MAX, 1 << 40])?)
                }
                17 => Op::Record(t, u.int_in_range(0..=q.limit())?),
                0..=6 => Op::Check(t, cost(u, q.limit())?),
                7..=8 => Op::Peek(t),
                9..=10 => Op::Refund(t, u.int_in_range(0..=q.limit() + 2)?),
                11..=14 => {
                    let n = u.int_in_range(1..=4)?;
                    let mut entries = Vec::with_capacity(n);
                    for _ in 0..n {
                        let t = target(u)?;
                        let n = cost(u, quotas[t.quota_index()].limit())?;
                        // A call naming more keys of one store than it holds must force out
                        // a key it has just reserved or made, forgetting that admission, and
                        // so may one of GCRA's, whose reservations the store cannot see
                        // (TESTING.md, "Fuzzing"): neither is generated.
                        if let Target::Keyed(i, k) = t {
                            let mut keys: Vec<u8> = entries
                                .iter()
                                .filter_map(|(x, _)| match *x {
                                    Target::Keyed(j, k) if j == i => Some(k),
                                    _ => None,
                                })
                                .collect();
                            keys.push(k);
                            keys.sort_unstable();
                            keys.dedup();
                            let gcra = quotas[t.quota_index()].mode() == Mode::Gcra;
                            let full = max_keys[i] < usize::from(KEYS);
                            if keys.len() > max_keys[i] || (gcra && full && keys.len() > 1) {
                                continue;
                            }
                        }
                        entries.push((t, n));
                    }
                    Op::All(entries)
                }
                15 => Op::Retain(usize::from(u.arbitrary::<bool>()?)),
                _ => unreachable!("drawn from 0 ..= 17"),
            };
            ops.push((step, op));
        }
        Ok(Case {
            quotas,
            max_keys,
            ops,
        })
    }
}

/// The limiters under test and their models.
struct Harness {
    quotas: [Quota; 2],
    clock: ManualClock,
    direct: [SlidingWindow<ManualClock>; 2],
    keyed: [KeyedLimiter<u8, ManualClock, ahash::RandomState>; 2],
    max_keys: [usize; 2],
    direct_models: [Model; 2],
    keyed_models: [Vec<Model>; 2],
    /// `forced_evictions` of each keyed limiter as last seen.
    forced: [u64; 2],
    t: u64,
}

impl Harness {
    fn new(case: &Case) -> Harness {
        let clock = ManualClock::new();
        let q = case.quotas;
        let keyed = |i: usize| {
            // Fixed seeds: which key a full store forces out depends on the hashes, and a
            // crash must replay.
            KeyedLimiter::builder(q[i])
                .clock(clock.clone())
                .hasher(ahash::RandomState::with_seeds(1, 2, 3, 4))
                .max_keys(case.max_keys[i])
                .build()
        };
        Harness {
            quotas: q,
            direct: [
                SlidingWindow::with_clock(q[0], clock.clone()),
                SlidingWindow::with_clock(q[1], clock.clone()),
            ],
            keyed: [keyed(0), keyed(1)],
            max_keys: case.max_keys,
            direct_models: [Model::new(q[0]), Model::new(q[1])],
            keyed_models: [
                vec![Model::new(q[0]); usize::from(KEYS)],
                vec![Model::new(q[1]); usize::from(KEYS)],
            ],
            forced: [0; 2],
            clock,
            t: 0,
        }
    }

    fn model(&mut self, target: Target) -> &mut Model {
        match target {
            Target::Direct(i) => &mut self.direct_models[i],
            Target::Keyed(i, k) => &mut self.keyed_models[i][usize::from(k)],
        }
    }

    fn limit(&self, target: Target) -> u64 {
        self.quotas[target.quota_index()].limit()
    }

    fn check(&self, target: Target, n: u64) -> std::result::Result<Decision, CostError> {
        match target {
            Target::Direct(i) => self.direct[i].check_n(n),
            Target::Keyed(i, k) => self.keyed[i].check_n(&k, n),
        }
    }

    fn peek(&self, target: Target) -> Decision {
        match target {
            Target::Direct(i) => self.direct[i].peek(),
            Target::Keyed(i, k) => self.keyed[i].peek(&k),
        }
    }

    fn refund(&self, target: Target, n: u64) -> u64 {
        match target {
            Target::Direct(i) => self.direct[i].refund(n),
            Target::Keyed(i, k) => self.keyed[i].refund(&k, n),
        }
    }

    fn run(&mut self, ops: &[(u64, Op)]) {
        for (step, op) in ops {
            if self.t.saturating_add(*step) <= MAX_TIME {
                self.t += step;
            }
            self.clock.set(Duration::from_nanos(self.t));
            let may_force = self.apply(op);
            self.reconcile(may_force, op);
            self.sweep(op);
        }
    }

    /// Applies `op` to the limiters and the models; returns whether it may have made a key
    /// (and so forced another out).
    fn apply(&mut self, op: &Op) -> bool {
        let t = self.t;
        match *op {
            Op::Check(target, n) => {
                let d = self.check(target, n);
                let limit = self.limit(target);
                if n == 0 {
                    assert_eq!(d, Err(CostError::Zero), "{target:?} check_n(0)");
                    return false;
                }
                if n > limit {
                    assert_eq!(
                        d,
                        Err(CostError::ExceedsLimit { cost: n, limit }),
                        "{target:?} check_n({n})"
                    );
                    return false;
                }
                let d = d.expect("a valid cost");
                let before = self.model(target).clone();
                let (allowed, remaining) = self.model(target).check(t, n);
                let at = format!("{target:?} check_n({n}) at t={t}");
                assert_eq!(d.is_allowed(), allowed, "{at}: allowed");
                assert_eq!(d.remaining(), remaining, "{at}: remaining");
                assert_eq!(d.limit(), limit, "{at}: limit");
                if allowed {
                    assert_eq!(d.retry_after(), None, "{at}");
                } else {
                    assert_retry_is_tight(&before, t, n, &d);
                }
                assert_reset_is_tight(self.model(target), t, &d);
                allowed
            }
            Op::Peek(target) => {
                let _ = self.peek(target);
                false
            }
            Op::Refund(target, n) => {
                let freed = self.refund(target, n);
                let expect = self.model(target).refund(t, n);
                assert_eq!(freed, expect, "{target:?} refund({n}) at t={t}");
                false
            }
            Op::Record(target, n) => {
                let usage = match target {
                    Target::Direct(i) => self.direct[i].record(n),
                    Target::Keyed(i, k) => self.keyed[i].record(&k, n),
                };
                let expect = self.model(target).record_usage(t, n);
                let at = format!("{target:?} record({n}) at t={t}");
                assert_usage(self.model(target), t, &usage, expect, &at);
                // A report makes its key's window if it has none: it may force another out.
                true
            }
            Op::Retain(i) => {
                self.keyed[i].retain_recent();
                false
            }
            Op::All(ref entries) => self.check_all(entries),
        }
    }

    fn check_all(&mut self, entries: &[(Target, u64)]) -> bool {
        let t = self.t;
        let keys: Vec<u8> = entries
            .iter()
            .map(|(target, _)| match *target {
                Target::Keyed(_, k) => k,
                Target::Direct(_) => 0,
            })
            .collect();
        let handles: Vec<_> = entries
            .iter()
            .zip(&keys)
            .map(|(&(target, _), key)| match target {
                Target::Keyed(i, _) => Some(self.keyed[i].key(key)),
                Target::Direct(_) => None,
            })
            .collect();
        let request: Vec<(&dyn Limit, u64)> = entries
            .iter()
            .zip(&handles)
            .map(|(&(target, n), handle)| match (target, handle) {
                (Target::Direct(i), _) => (&self.direct[i] as &dyn Limit, n),
                (_, Some(handle)) => (handle as &dyn Limit, n),
                (Target::Keyed(..), None) => unreachable!(),
            })
            .collect();
        let result = check_all(&request);
        drop(request);
        drop(handles);

        // Each distinct limit with the sum of its costs, in the order first named.
        let mut sums: Vec<(Target, u64)> = Vec::new();
        let mut deny = None;
        for (index, &(target, n)) in entries.iter().enumerate() {
            let sum = match sums.iter_mut().find(|(x, _)| *x == target) {
                Some((_, sum)) => {
                    *sum += n;
                    *sum
                }
                None => {
                    sums.push((target, n));
                    n
                }
            };
            if deny.is_none()
                && n > 0
                && sum <= self.limit(target)
                && !self.model(target).admits(t, sum)
            {
                deny = Some(index);
            }
        }
        let at = format!("check_all({entries:?}) at t={t}");
        let invalid = entries.iter().any(|&(_, n)| n == 0)
            || sums.iter().any(|&(target, sum)| sum > self.limit(target));
        if invalid {
            assert!(result.is_err(), "{at}: {result:?}, not a cost error");
            return false;
        }
        let d = result.unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!(d.denied_by(), deny, "{at}: denied_by");
        if deny.is_none() {
            for &(target, n) in entries {
                self.model(target).record(t, n);
            }
            assert_eq!(d.retry_after(), None, "{at}");
        } else {
            let models: Vec<(&Model, u64)> = sums
                .iter()
                .map(|&(target, sum)| {
                    let model = match target {
                        Target::Direct(i) => &self.direct_models[i],
                        Target::Keyed(i, k) => &self.keyed_models[i][usize::from(k)],
                    };
                    (model, sum)
                })
                .collect();
            let all = |at: u64| models.iter().all(|&(m, sum)| m.admits(at, sum));
            let retry = d.retry_after().expect("a denial's retry_after").as_nanos() as u64;
            assert!(retry >= 1, "{at}: retry_after 0");
            assert!(all(t + retry), "{at}: retry_after={retry} does not admit");
            assert!(
                !all(t + retry - 1),
                "{at}: retry_after={retry} is not the earliest"
            );
        }
        let least = sums
            .iter()
            .map(|&(target, _)| self.model(target).remaining(t))
            .min()
            .unwrap_or(u64::MAX);
        assert_eq!(d.remaining(), least, "{at}: remaining");
        d.is_allowed()
    }

    /// Learns which keys the `max_keys` bound forced out during `op`.
    fn reconcile(&mut self, may_force: bool, op: &Op) {
        let t = self.t;
        for i in 0..2 {
            let keyed = &self.keyed[i];
            assert!(
                keyed.len() <= self.max_keys[i],
                "keyed limiter {i} holds {} keys, max_keys {}",
                keyed.len(),
                self.max_keys[i]
            );
            let now = keyed.forced_evictions();
            let forced = now - self.forced[i];
            self.forced[i] = now;
            if forced == 0 {
                continue;
            }
            assert!(may_force, "{op:?} at t={t} forced {forced} key(s) out");
            let fresh = Model::new(self.quotas[i]);
            let (mut gone, mut idle) = (0, 0);
            for k in 0..KEYS {
                let model = &mut self.keyed_models[i][usize::from(k)];
                if model.is_empty_at(t) {
                    // Its eviction changes no decision, but the store may count it as forced
                    // (a fixed-window key is idle only a window after its own).
                    idle += 1;
                    continue;
                }
                let d = keyed.peek(&k);
                if d.reset_after().is_zero() && d.remaining() == fresh.remaining(t) {
                    *model = fresh.clone();
                    gone += 1;
                }
            }
            assert!(
                gone <= forced && forced <= gone + idle,
                "keyed limiter {i}: {forced} forced out by {op:?} at t={t}, {gone} keys forgot"
            );
        }
    }

    /// Every limit's peek equals its model's.
    fn sweep(&mut self, op: &Op) {
        let t = self.t;
        let mut targets = vec![Target::Direct(0), Target::Direct(1)];
        for i in 0..2 {
            targets.extend((0..KEYS).map(|k| Target::Keyed(i, k)));
        }
        for target in targets {
            let d = self.peek(target);
            let model = self.model(target).clone();
            let at = format!("peek of {target:?} at t={t} after {op:?}");
            assert_eq!(d.is_allowed(), model.admits(t, 1), "{at}: allowed");
            assert_eq!(d.remaining(), model.remaining(t), "{at}: remaining");
            if !d.is_allowed() {
                assert_retry_is_tight(&model, t, 1, &d);
            }
            assert_reset_is_tight(&model, t, &d);
        }
    }
}

/// Decodes `data` into a case and runs it; panics on any difference from the model.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(case) = Case::decode(&mut u) else {
        return;
    };
    if std::env::var_os("SLIDEGATE_FUZZ_DEBUG").is_some() {
        eprintln!("{case:#?}");
    }
    let mut harness = Harness::new(&case);
    harness.run(&case.ops);
}
