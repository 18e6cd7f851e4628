//! The lock-free bucket ring: a cumulative counter and a ring of epoch-tagged snapshots.
//!
//! # State
//! - `cum`: the total cost ever admitted (wrapping). Admission is one compare-and-swap on it;
//!   nothing is ever subtracted, so nothing can drift, and a denial writes nothing.
//! - `slots`: `R = N + 1` words, each packing a 32-bit *tag* (the bucket index `k`, mod 2³²)
//!   and a 32-bit *snapshot* (`cum` when bucket `k` started, mod 2³²). Bucket `k` lives in
//!   slot `k mod R`. A slot whose tag is not `k` is stale and is overwritten in place by CAS:
//!   expiry needs no delete and no sweep.
//! - `front`: the newest bucket whose snapshot is established. Invariant: the ring holds
//!   exactly the buckets `front − N ..= front`, so the cost admitted in buckets `k ..= b` is
//!   `cum − snap[k]`: O(1) whatever `N` is.
//! - `goal`: the bucket a fill in progress is moving `front` to (`goal == front` when none).
//!
//! # Protocol
//! - **Fill** (the first request that sees a bucket newer than `front`): claim a goal with a
//!   CAS on `goal` (only possible while `goal == front`), establish the goal's snapshots in
//!   increasing order, each by CAS from a stale tag to `(k, max(cum, previous snapshot))`,
//!   then CAS `front` to the goal. Any thread that finds a fill in progress helps finish it,
//!   so a stalled filler blocks no one. Helpers re-check `front` after every slot load, so a
//!   helper that wakes up late never overwrites a newer bucket.
//! - **Check**: load `front`, `cum`, the needed slots (tags must match), `front` again; judge;
//!   CAS `cum` from the value read. A changed `front` or tag means the ring moved: retry.
//!
//! # Why Strict never over-admits
//! Every admission judged at bucket `j` happens after `front ≥ j` was published, hence after
//! every snapshot `≤ j` was established from a `cum` read that precedes it: each admission is
//! counted after `snap[k]` for every `k ≤ j`. For an interval `[s, s + W)`, take the admission
//! in it whose CAS is last: it judged at `b ≥ b(s)`, and `b − N ≤ b(s)`, so its window sum
//! `cum − snap[b − N]` included every other admission in the interval. A writer whose clock
//! read is a bucket old lands after a newer snapshot: it is counted in the newer bucket, which
//! only ever errs toward denial. Snapshots are 32-bit, which is exact because a window sum
//! read consistently never exceeds `2·limit < 2³²` (see `MAX_LIMIT`).
//!
//! # Why tags never alias
//! Between the two loads of `front` that bracket every read, the ring holds `front − N ..=
//! front` plus the goal window of the one fill that may be in progress from that `front`. An
//! incremental fill's tags differ from the ring's by 1 to 2N; a fill that jumps more than `N`
//! buckets is given a goal whose distance from `front`, mod 2³², is in `N + 1 ..= 2³² − N − 1`
//! (after a gap near a multiple of 2³² buckets it stops half-way, at `front + 2³¹`), so no two
//! tags that can meet in one slot are equal mod 2³².
//!
//! The loom models in `loom-tests/` check these claims on every interleaving of small cases.

use core::cell::Cell;

use crate::sync::{AtomicU64, Backoff, Ordering};

/// Packs a bucket's tag and snapshot into one slot word.
#[inline]
fn pack(bucket: u64, snapshot: u32) -> u64 {
    (u64::from(bucket as u32) << 32) | u64::from(snapshot)
}

#[inline]
fn tag_of(slot: u64) -> u32 {
    (slot >> 32) as u32
}

#[inline]
fn snapshot_of(slot: u64) -> u32 {
    slot as u32
}

/// The later of two snapshots, in the wrapping order of 32-bit counters (they are always
/// within `2·limit < 2³¹` of each other).
#[inline]
fn later(a: u32, b: u32) -> u32 {
    if (b.wrapping_sub(a) as i32) > 0 { b } else { a }
}

/// A window's state: see the module documentation.
pub(crate) struct Ring {
    front: AtomicU64,
    goal: AtomicU64,
    cum: AtomicU64,
    /// `N`, the number of buckets in a window; the ring has `N + 1` slots.
    buckets: u64,
    /// `bucket mod (N + 1)` without a division.
    modulus: FastMod,
    slots: Box<[AtomicU64]>,
}

/// Remainder by a fixed divisor with two multiplications instead of a 64-bit division
/// (Lemire, Kaser and Kurz, "Faster remainder by direct computation", 2019, with a 128-bit
/// multiplier so it is exact for every 64-bit dividend). A division is 13–44 cycles on the
/// machines this was measured on, a large share of a 10 ns check.
#[derive(Clone, Copy, Debug)]
struct FastMod {
    divisor: u64,
    multiplier: u128,
}

impl FastMod {
    fn new(divisor: u64) -> FastMod {
        debug_assert!(divisor > 1, "the ring has at least two slots");
        FastMod {
            divisor,
            multiplier: u128::MAX / u128::from(divisor) + 1,
        }
    }

    #[inline]
    fn rem(&self, x: u64) -> u64 {
        let low = self.multiplier.wrapping_mul(u128::from(x));
        // The high 64 bits of the 192-bit product `low · divisor`.
        let d = u128::from(self.divisor);
        let top = (low >> 64) * d;
        let bottom = ((low as u64 as u128) * d) >> 64;
        ((top + bottom) >> 64) as u64
    }
}

/// A reading of the ring, taken by [`Ring::read`]; valid only if `read` returns it.
pub(crate) struct Reading<'a> {
    ring: &'a Ring,
    front: u64,
    /// The internal index of the bucket judged.
    pub(crate) bucket: u64,
    /// Nanoseconds into that bucket.
    pub(crate) offset: u64,
    /// `cum` as read.
    pub(crate) cum: u64,
    torn: Cell<bool>,
}

impl Reading<'_> {
    /// The cost admitted in buckets `b − N + j ..= b`.
    #[inline]
    pub(crate) fn tail(&self, j: u64) -> u64 {
        let k = self.bucket - self.ring.buckets + j;
        if k > self.front {
            // Nothing is admitted in a bucket newer than `front`.
            return 0;
        }
        // Acquire: pairs with the Release of the slot's establishing CAS.
        let slot = self.ring.slot(k).load(Ordering::Acquire);
        if tag_of(slot) != k as u32 {
            self.torn.set(true);
            return 0;
        }
        u64::from((self.cum as u32).wrapping_sub(snapshot_of(slot)))
    }
}

impl Ring {
    /// A ring for `buckets` (N) buckets that has admitted nothing.
    pub(crate) fn new(buckets: u64) -> Ring {
        let len = buckets + 1;
        // Internal bucket index = t / G + R, so `b − N ≥ 1` never underflows; the ring starts
        // established at front = R, holding buckets 1 ..= R with snapshot 0.
        let slots = (0..len)
            .map(|s| AtomicU64::new(pack(if s == 0 { len } else { s }, 0)))
            .collect();
        Ring {
            front: AtomicU64::new(len),
            goal: AtomicU64::new(len),
            cum: AtomicU64::new(0),
            buckets,
            modulus: FastMod::new(len),
            slots,
        }
    }

    #[inline]
    fn slot(&self, bucket: u64) -> &AtomicU64 {
        &self.slots[self.modulus.rem(bucket) as usize]
    }

    /// The internal index of the bucket holding time `t` (ns), and the offset into it.
    /// Avoids the division when `t` falls in bucket `front`, the common case.
    #[inline]
    fn locate(&self, t: u64, granularity: u64, front: u64) -> (u64, u64) {
        let len = self.buckets + 1;
        // `(front − R)·G ≤ t` for some reading `t` already seen, so it does not overflow.
        let start = (front - len).wrapping_mul(granularity);
        match t.checked_sub(start) {
            Some(into) if into < granularity => (front, into),
            _ => ((t / granularity).saturating_add(len), t % granularity),
        }
    }

    /// Reads the ring consistently at time `now()`, hands the reading to `judge`, and returns
    /// what it returned with the reading (to charge with [`Ring::try_charge`]). When
    /// `establish` is set the ring is first moved to the bucket of `now`, as an admission
    /// needs; otherwise (a peek) nothing is written.
    #[inline]
    pub(crate) fn read<T>(
        &self,
        granularity: u64,
        now: impl Fn() -> u64,
        establish: bool,
        mut judge: impl FnMut(&Reading<'_>) -> T,
    ) -> (T, Reading<'_>) {
        let mut t = now();
        let mut reread = false;
        loop {
            // Acquire: pairs with the Release of the CAS that published `front`, so every
            // snapshot at or below it is visible.
            let front = self.front.load(Ordering::Acquire);
            let (mut bucket, mut offset) = self.locate(t, granularity, front);
            if bucket < front {
                // Someone read a later time. Read the clock again once; if it is still behind
                // (a clock set backwards), judge at the start of the newest bucket seen.
                if !reread {
                    t = now();
                    reread = true;
                    continue;
                }
                (bucket, offset) = (front, 0);
            }
            if bucket > front && establish {
                self.advance(bucket);
                continue;
            }
            // Acquire: pairs with the Release of admissions, so an admission we count here was
            // judged at a bucket no newer than a `front` our later loads see.
            let cum = self.cum.load(Ordering::Acquire);
            let reading = Reading {
                ring: self,
                front,
                bucket,
                offset,
                cum,
                torn: Cell::new(false),
            };
            let verdict = judge(&reading);
            // Acquire: any fill that overwrote a slot we read published a later `front`.
            if !reading.torn.get() && self.front.load(Ordering::Acquire) == front {
                return (verdict, reading);
            }
            // The ring moved under us: a fill is in progress or done. Help it finish, then
            // retry (and, being behind now, read the clock again).
            self.help(front);
            reread = false;
        }
    }

    /// Adds `cost` to `cum` if it still holds the value of `reading`: the admission.
    #[inline]
    pub(crate) fn try_charge(&self, reading: &Reading<'_>, cost: u64) -> bool {
        // Release: publishes the admission after the snapshots its judgement used (see
        // `read`). Acquire on failure is not needed; the caller re-reads.
        self.cum
            .compare_exchange_weak(
                reading.cum,
                reading.cum.wrapping_add(cost),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// The total cost ever admitted (wrapping).
    pub(crate) fn admitted(&self) -> u64 {
        self.cum.load(Ordering::Acquire)
    }

    /// Moves `front` to at least `bucket`, helping or claiming fills as needed.
    #[cold]
    fn advance(&self, bucket: u64) {
        loop {
            let front = self.front.load(Ordering::Acquire);
            if front >= bucket {
                return;
            }
            if !self.help(front) {
                // No fill in progress from `front`: claim one. Losing the CAS means someone
                // else claimed (or finished) one; the loop helps it.
                let goal = goal_for(front, bucket, self.buckets);
                // AcqRel: the claim is read by helpers with Acquire; nothing else rides on it.
                let _ =
                    self.goal
                        .compare_exchange(front, goal, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }

    /// If a fill from `front` is in progress, helps finish it and returns `true`.
    fn help(&self, front: u64) -> bool {
        let goal = self.goal.load(Ordering::Acquire);
        // `goal` changes only while `goal == front`; if `front` is unchanged after reading
        // it, the goal read is the one claimed from this `front` (or `front` itself).
        if self.front.load(Ordering::Acquire) != front {
            return true;
        }
        if goal == front {
            return false;
        }
        self.fill(front, goal);
        true
    }

    /// Establishes the snapshots of `goal`'s window and moves `front` from `front` to `goal`.
    fn fill(&self, front: u64, goal: u64) {
        // Read after `front` was seen, so it is at least every snapshot up to `front`.
        let mut snapshot = self.cum.load(Ordering::Acquire) as u32;
        let first = (front + 1).max(goal - self.buckets);
        let backoff = Backoff::new();
        for k in first..=goal {
            let slot = self.slot(k);
            loop {
                let seen = slot.load(Ordering::Acquire);
                // Acquire: if this fill is over, `front` says so; then `seen` may belong to a
                // newer bucket and must not be overwritten.
                if self.front.load(Ordering::Acquire) != front {
                    return;
                }
                if tag_of(seen) == k as u32 {
                    // Established by another helper; keep snapshots monotone.
                    snapshot = later(snapshot, snapshot_of(seen));
                    break;
                }
                // `seen` is stale (tag in `front − N ..= front`). AcqRel: Release publishes
                // the `cum` read behind `snapshot` before any admission at bucket `k`.
                if slot
                    .compare_exchange(seen, pack(k, snapshot), Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    break;
                }
                backoff.spin();
            }
        }
        // AcqRel: Release publishes every snapshot this thread saw established (and so, by
        // the chain of Acquire loads above, every one of the goal's window).
        let _ = self
            .front
            .compare_exchange(front, goal, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Where a fill from `front` towards `bucket` goes: `bucket` itself, unless the jump is
/// more than `N` and within `N` of a multiple of 2³² buckets (tags would alias), in which
/// case half-way round the tag space first.
fn goal_for(front: u64, bucket: u64, buckets: u64) -> u64 {
    let gap = bucket - front;
    if gap <= buckets {
        return bucket;
    }
    let residue = gap as u32;
    if u64::from(residue) > buckets && u64::from(residue.wrapping_neg()) > buckets {
        bucket
    } else {
        front + (1 << 31)
    }
}

#[cfg(all(test, not(slidegate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn goal_jumps_straight_unless_tags_would_alias() {
        assert_eq!(goal_for(100, 103, 10), 103);
        assert_eq!(goal_for(100, 1000, 10), 1000);
        let far = 100 + (1u64 << 32) + 3;
        assert_eq!(goal_for(100, far, 10), 100 + (1 << 31));
        // From half-way the rest of the jump is safe.
        assert_eq!(goal_for(100 + (1 << 31), far, 10), far);
        let near = 100 + (1u64 << 32) - 5;
        assert_eq!(goal_for(100, near, 10), 100 + (1 << 31));
    }

    #[test]
    fn fast_remainder_is_exact() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for divisor in [2u64, 3, 7, 11, 61, 1000, 3601, 65_536, 65_537] {
            let m = FastMod::new(divisor);
            let edges = [
                0,
                1,
                divisor - 1,
                divisor,
                divisor + 1,
                u64::MAX,
                u64::MAX - 1,
                1 << 63,
            ];
            for v in edges {
                assert_eq!(m.rem(v), v % divisor, "{v} % {divisor}");
            }
            for _ in 0..100_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                for v in [x, x >> 17, x >> 40] {
                    assert_eq!(m.rem(v), v % divisor, "{v} % {divisor}");
                }
            }
        }
    }

    #[test]
    fn later_follows_wrapping_order() {
        assert_eq!(later(5, 9), 9);
        assert_eq!(later(9, 5), 9);
        assert_eq!(later(u32::MAX - 1, 3), 3);
    }

    #[test]
    fn a_fill_establishes_every_bucket_of_the_goal_window() {
        let ring = Ring::new(3);
        ring.advance(4 + 2);
        assert_eq!(ring.front.load(Ordering::Relaxed), 6);
        for k in 3..=6 {
            assert_eq!(tag_of(ring.slot(k).load(Ordering::Relaxed)), k as u32);
        }
        ring.advance(6 + 100);
        for k in 103..=106 {
            assert_eq!(tag_of(ring.slot(k).load(Ordering::Relaxed)), k as u32);
        }
    }
}
