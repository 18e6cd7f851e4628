//! The exact sliding log's storage: the admission times of the last `cap ≥ L` units, in one
//! ring, judged by the rule in [`crate::algo::sliding_log`].
//!
//! # State
//! - `cum`: the word of [`cum`]: bit 63 `RETIRED`, bits 32..63 *pending*
//!   (reserved, not yet committed), bits 0..32 the *count*, the number of units ever
//!   admitted (mod 2³²). The count is also the next free
//!   *position*: the `k`-th unit ever admitted has position `k` (mod 2³²). Admission is one
//!   compare-and-swap on `cum`; a denial writes nothing.
//! - `slots`: `cap = L.next_power_of_two()` words (so `cap` divides 2³² and positions taken
//!   mod 2³² map consistently); the unit at position `p` lives in slot `p mod cap`. A slot
//!   word packs a 2-bit *lap* tag `(p / cap) mod 4` (only `mod 2` when `cap = 2³¹`: see
//!   [`lap`]), a `FREED` bit (set by a refund) and a 61-bit *stamp*: `t + 1` for a unit
//!   admitted at time `t` ns, `0` for "before time began" (outside every window, even while
//!   `t < W`). A new log holds, in every slot, the written, stamp-0 unit of the position
//!   one lap before, so "position `p` is written" is always "slot `p mod cap` has tag
//!   `lap(p)`".
//!
//! A unit with stamp `s` is *inside* the window `(t − W, t]` iff `s ≠ 0` and `s + W > t + 1`.
//!
//! # Invariants
//! 1. **Sorted stamps.** Stamps never decrease with position (among the `cap` newest).
//! 2. **Written prefix.** If a reader sees position `x` written, every position below `x`
//!    has been written (its store happens-before the reader's later loads).
//!
//! Together they make the rule O(1): the units inside a window are a suffix of the
//! positions, so "in-window + pending + n ≤ L" holds iff the one position
//! `q = h − (L − pending − n + 1)` is outside, where `h` is the count.
//!
//! # Protocol
//! - **Check** (cost `n`, `1 ≤ n ≤ L ≤ cap`): load `cum` (`h`, pending `p`), load slot
//!   `h − 1`. If it is claimed but not yet written (tag `lap(h − 1 − cap)`), back off a few
//!   times and then deny conservatively (see "Spurious denials"). Read the clock once and
//!   judge at `t = max(now, time of h − 1)`: time never goes backwards as seen by the log.
//!   If `p + n > L`, deny. Otherwise load slot `q`: inside ⇒ deny (retry when its stamp
//!   leaves); outside ⇒ allowed. A charge then CASes `cum` to `count + n` and, having won,
//!   stores `(lap, t + 1)` into slots `h ..= h + n − 1` *in increasing order*, each a
//!   Release store. A reservation CASes `pending += n`. A peek or a denial re-loads `cum`
//!   and retries if it changed, so every decision is judged on a reading in which no
//!   position moved. A lost CAS re-reads.
//! - **Counting** the units inside (for `remaining`, and in place of loading `q`): the
//!   inside units are a suffix, so their number is found by galloping and bisecting over
//!   the positions. A check starts at `hint`, the newest position the last admission found
//!   outside (Relaxed, written only after a won CAS, so peeks and denials still write
//!   nothing): in steady traffic the window's oldest unit moves about one position per
//!   check, so this takes a few probes near one another instead of `log L` probes across
//!   the whole ring. The hint only chooses where to probe: a hinted unit `d ≤ k` below
//!   `h` that a probe finds outside proves `q` outside (it is older), and one found inside
//!   sends the check to the test of `q`. A stale or garbage hint costs probes, never
//!   correctness.
//! - **Commit** (`count += n, pending −= n` in one CAS): like a charge that is not
//!   re-judged; it too waits until `h − 1` is written and stamps `max(now, time of h − 1)`.
//! - **Release**: `pending −= n`; no slot and no count changes, so it leaves no trace.
//! - **Refund** of `n` at `r = max(now, time of h − 1)`: from the oldest unit inside the
//!   window of `r` upward, CAS each inside, not yet freed slot to `FREED` with the stamp
//!   lowered to `max(0, r + 1 − W)`, the newest stamp that is outside at `r`; a slot freed
//!   already raises `r` to the time it was freed at (`stamp + W − 1`); stop at a unit
//!   claimed but not yet written, after `n` frees, or at `h`. The count never decreases,
//!   so no admission's CAS is disturbed (no ABA on `cum`).
//!
//! # Why the invariants hold
//! - *Written prefix*: a claim of positions `h ..` is made only after seeing `h − 1` written
//!   (Acquire), and its slots are stored in increasing order with Release. So a reader that
//!   acquires the store of `x` also acquires, through program order and that chain of
//!   Acquire loads, every store below `x`. This is also why a claim never overwrites a slot a
//!   stalled writer will store to later: the slots it reuses hold positions below `h − 1`,
//!   all written, so a claim needs no scan of the `n` slots it reuses: the check is O(1) in
//!   `n` apart from the `n` stores.
//! - *Sorted stamps*: a claimer stamps `max(now, time of h − 1)`, and `h − 1` was written
//!   when it looked, with a final stamp (refunds only lower stamps, see next). A refund at `r`
//!   lowers the stamp of a unit `x` inside the window of `r` to `max(0, r + 1 − W)`: every
//!   unit below `x` is outside at `r` or freed at a time `≤ r` (the refund raised `r` past
//!   every freed slot it met), so its stamp is `≤ r + 1 − W`; every unit above `x` is
//!   inside at `r` or freed later, so its stamp is `≥` that. Concurrent refunds only lower
//!   stamps, never below a neighbour's bound (each re-reads the slot it CASes).
//!
//! # Why the log never admits more than `L` in a window
//! Read a freed unit as a unit admitted at its lowered stamp (it counts for windows ending
//! before the refund's time and for none after). Take any window `(s − W, s]` and, among
//! the units stamped inside it, the one whose judgement — a charge's or a reservation's CAS
//! on `cum` — came last in `cum`'s order: `J`, judged at `t_J` on count `h_J`, pending `p_J`,
//! cost `n`. Its own units are stamped `≥ t_J` (a commit stamps `max(now, time of h − 1)`,
//! no older than the reservation's judgement), so `t_J ≤ s`. Every other unit in the
//! window was judged before `J`: at `J`'s CAS it was counted (position `< h_J`) or pending
//! (in `p_J`). `J` saw `q_J = h_J − (L − p_J − n + 1)` (or a newer unit) outside at `t_J`,
//! so by sorted stamps every position `≤ q_J` has stamp `≤ t_J + 1 − W ≤ s + 1 − W`,
//! outside the window. Hence the window holds at most `(h_J − q_J − 1) + p_J + n = L`
//! units. Positions are claimed only by a CAS from the `cum` the judgement read, and the
//! slots read are validated by that CAS (or by the re-load of a peek or denial): the count
//! only grows, so an unchanged count means no position was claimed meanwhile, and slot `q`
//! held `q` or, if `q` was claimed but not yet written, the unit one lap before (treated
//! as inside: see below).
//!
//! # Spurious denials
//! The bound that the concurrency contract in `docs/design.md` asks each cell to state. A
//! check that finds `h − 1` claimed but not written cannot stamp its own units (it does not
//! know `h − 1`'s time). It backs off, spinning and then yielding the processor ([`WAITS`]
//! times), and if the unit is still unwritten denies, reporting `remaining = 0`, a
//! `retry_after` of 1 µs or `W` if shorter (the stores are moments away; the request may fit
//! once they land, and in a window every unit now inside has left) and `reset_after = W`.
//! That happens only while another admission is between its CAS and its last slot store:
//! `n` plain stores that follow the CAS at once, so only a writer descheduled there, or one
//! storing more units than the back-off outlasts, makes others deny, and never for longer
//! than it is stalled. The yields matter: spinning alone does not outlast a writer of
//! thousands of units that shares the core with the waiting check. A commit, which must not deny, waits for
//! those stores instead: the one step of this log that is not lock-free. A refund stops at
//! such a unit and frees fewer.
//!
//! # Retirement (for stores that evict; see the ring's "Retirement")
//! [`Log::retire_idle`] loads `cum`; it needs pending `= 0` and `h − 1` written and outside
//! the window of `now`: by the two invariants every unit counted is then outside at `now`
//! and at any later time (a clock monotone across threads gives no later reading older than
//! `now`), so the log answers every later check exactly as a fresh one. It CASes `cum` to
//! `cum | RETIRED`; success proves no claim and no reservation came in between. A check that
//! raced it either claimed first (and the retirement's CAS fails) or fails its own CAS on the
//! retired word, re-reads, gets `None` and looks the key up again: no admission is lost.
//! [`Log::retire_now`] sets the bit whatever the log holds, as the ring's does.
//!
//! # Design choices, and why
//! - A refunded unit's stamp is *lowered* to `r + 1 − W` instead of being replaced by an
//!   `EMPTY` value. With `EMPTY`, (a) a refunded newest unit no longer bounds the next
//!   stamp, so with a clock that is not monotone across threads stamps stop being sorted and
//!   the O(1) test can over-admit; and (b) a check whose clock reading predates the refund
//!   but which loads the slot after it sees a hole below units still inside *at its own
//!   time* and over-admits (L = 2, W = 10: units at 0 and 5; a check reads t = 9, a refund at
//!   12 empties the unit at 5, the check finds `q` empty and admits 2 more at 9: three in
//!   `(−1, 9]`). A lowered stamp keeps invariant 1, so neither can happen: to a check behind
//!   the refund's time, the unit is still inside.
//! - Stamps are `t + 1` with `0` for "never", which keeps `t < W` free of underflow.
//! - The lap of the unit one lap before `p` is computed as `lap(p − cap)`, not
//!   `lap(p) − 1`: for `cap = 2³¹` the tag has only two values.
//! - Peeks and denials re-load `cum` and retry if it changed, so their `remaining`,
//!   `retry_after` and `reset_after` come from one consistent reading.
//!
//! # Known limit
//! Slot tags are 2 bits, so a refund that stalls between loading a slot and its CAS while
//! the log goes round 4 times, all at one clock reading (possible only if refunds free at
//! least `3·cap + 1` of those units meanwhile), could free a unit of a later lap. The ring's
//! counters make the same kind of assumption (no 2³² admissions between a load and a CAS);
//! this one needs a frozen or very coarse clock to be reachable at all.
//!
//! The loom models in `loom-tests/tests/log_*.rs` check these claims on every interleaving
//! of small cases, through the public limiters.

use crate::algo::Op;
use crate::algo::sliding_log::{
    LogRule, MAX_TIME, Unit, Units, View, count_inside, inside, judged_time, time_of,
};
use crate::decision::Decision;
use crate::sync::{AtomicU64, Backoff, Ordering};
use crate::window::cum::{
    self, COUNT, HIGH, RETIRED, add_count, add_pending, commit_pending, pending_of,
    release_pending, update_reserved,
};

/// The shift of a slot's lap tag (bits 62..64).
const LAP_SHIFT: u32 = 62;

/// The bit of a slot set when a refund freed its unit.
const FREED: u64 = 1 << 61;

/// The bits of a slot that hold its stamp: `t + 1`, or 0 for "before time began".
const STAMP: u64 = FREED - 1;

const _: () = assert!(
    MAX_TIME == STAMP - 1,
    "the rule's last time is the last stamp's"
);

/// How many times a check backs off waiting for the newest unit's slot store before it
/// denies conservatively (see "Spurious denials"): crossbeam's `snooze`, 127 spins and then
/// 57 yields of the processor, time for a writer to store thousands of units even when it
/// shares a core with the waiting check. Four under loom, whose models explore every yield;
/// the number of waits changes no decision a model checks, only how long a check waits
/// before its conservative denial.
#[cfg(not(slidegate_loom))]
const WAITS: u32 = 64;
#[cfg(slidegate_loom)]
const WAITS: u32 = 4;

/// The lap tag of position `p` in a log of `2^shift` slots: `(p / cap) mod 4`. Since `cap`
/// divides 2³², consecutive laps differ also across the wrap of `p` (for `cap = 2³¹` the
/// tag takes only the values 0 and 1, still different for consecutive laps).
#[inline]
fn lap(shift: u32, p: u32) -> u64 {
    u64::from((p >> shift) & 3)
}

#[inline]
fn stamp_of(slot: u64) -> u64 {
    slot & STAMP
}

/// An exact sliding log of the last `limit` admitted units.
pub(crate) struct Log {
    cum: AtomicU64,
    /// A guess of the newest position outside the window, where the next check starts
    /// looking for the window's oldest unit (it moves about one unit per check in steady
    /// traffic). Only a guess: every conclusion comes from probing slots.
    hint: AtomicU64,
    /// `log2(cap)`.
    shift: u32,
    slots: Box<[AtomicU64]>,
}

/// The units below position `h` of a log, as a judgement reads them (see [`Units`]).
struct Reading<'a> {
    log: &'a Log,
    h: u32,
}

impl Units for Reading<'_> {
    #[inline]
    fn unit(&self, d: u64) -> Option<Unit> {
        let p = self.h.wrapping_sub(d as u32);
        // Acquire: pairs with the Release store of the unit (and, by invariant 2, of every
        // unit below it).
        let slot = self.log.slot(p).load(Ordering::Acquire);
        if self.log.written(slot, p) {
            Some(Unit::Written(stamp_of(slot)))
        } else if self.log.claimed(slot, p) {
            Some(Unit::Unwritten)
        } else {
            None
        }
    }

    #[inline]
    fn hinted(&self) -> u64 {
        // Relaxed: only where to probe first (see `Log::hint`).
        u64::from(
            self.h
                .wrapping_sub(self.log.hint.load(Ordering::Relaxed) as u32),
        )
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.log.capacity()
    }
}

impl Log {
    /// A log for quotas of up to `limit` units (the capacity is `limit` rounded up to a power
    /// of two).
    pub(crate) fn new(limit: u64) -> Log {
        Log::starting_at(limit, 0)
    }

    /// A fresh log whose count starts at `count` (tests use it to cross 2³²).
    fn starting_at(limit: u64, count: u32) -> Log {
        debug_assert!((1..=1 << 31).contains(&limit), "limit {limit} out of range");
        let cap = limit.clamp(1, 1 << 31).next_power_of_two();
        let shift = cap.trailing_zeros();
        let mask = (cap - 1) as u32;
        // Every slot holds the written, stamp-0 unit of its position in
        // `count − cap .. count`: outside every window, so the log reads as empty.
        let mut words = vec![0; cap as usize];
        for i in 0..cap {
            let p = count.wrapping_sub(cap as u32).wrapping_add(i as u32);
            words[(p & mask) as usize] = lap(shift, p) << LAP_SHIFT;
        }
        Log {
            cum: AtomicU64::new(u64::from(count)),
            hint: AtomicU64::new(u64::from(count.wrapping_sub(1))),
            shift,
            slots: words.into_iter().map(AtomicU64::new).collect(),
        }
    }

    /// The number of unit slots.
    pub(crate) fn capacity(&self) -> u64 {
        1 << self.shift
    }

    #[inline]
    fn slot(&self, p: u32) -> &AtomicU64 {
        &self.slots[(p & (self.capacity() as u32 - 1)) as usize]
    }

    /// Whether `slot` holds position `p` (written), as opposed to the unit one lap before
    /// (`p` claimed, its store not yet visible) or a later lap (the log moved on).
    #[inline]
    fn written(&self, slot: u64, p: u32) -> bool {
        slot >> LAP_SHIFT == lap(self.shift, p)
    }

    /// Whether `slot` holds the unit one lap before `p`: `p` is claimed but not written (or,
    /// when `cap = 2³¹`, possibly a lap later; callers validate with `cum`).
    #[inline]
    fn claimed(&self, slot: u64, p: u32) -> bool {
        slot >> LAP_SHIFT == lap(self.shift, p.wrapping_sub(self.capacity() as u32))
    }

    /// The stamp of the newest unit below the count `h` if it is written; `None` while the
    /// admission that claimed it has not stored it yet (or if the log moved on since `h` was
    /// read). Every step that needs the time of the newest unit starts here: a check and a
    /// commit stamp no earlier than it, a refund judges no earlier than it, and a retirement
    /// needs it outside the window.
    #[inline]
    fn newest(&self, h: u32) -> Option<u64> {
        let p = h.wrapping_sub(1);
        // Acquire: pairs with the Release store of the newest unit and, by invariant 2, of
        // all below it.
        let slot = self.slot(p).load(Ordering::Acquire);
        self.written(slot, p).then(|| stamp_of(slot))
    }

    /// Stores `n` units stamped `t` at positions `h ..`, which this thread has just claimed.
    #[inline]
    fn write(&self, h: u32, n: u64, t: u64) {
        for i in 0..n as u32 {
            let p = h.wrapping_add(i);
            // Release, in increasing order: a reader that acquires this store sees every unit
            // below it written (invariant 2).
            self.slot(p)
                .store(lap(self.shift, p) << LAP_SHIFT | (t + 1), Ordering::Release);
        }
    }

    /// Judges cost `n` (`1 ≤ n ≤ limit ≤ capacity`, validated by the caller) at time `now()`
    /// (ns) under `rule`, applying `op` if allowed. `None` if the log is retired (the caller
    /// looks the key up again).
    pub(crate) fn check(
        &self,
        rule: &LogRule,
        now: impl Fn() -> u64,
        n: u64,
        op: Op,
    ) -> Option<Decision> {
        debug_assert!((1..=rule.limit).contains(&n) && rule.limit <= self.capacity());
        let backoff = Backoff::new();
        let mut waits = 0;
        loop {
            // Acquire: pairs with the Release of claims, so our slot loads below see the
            // stores that preceded each claim (invariant 2).
            let cum = self.cum.load(Ordering::Acquire);
            if cum & RETIRED != 0 {
                return None;
            }
            let (h, pending) = (cum as u32, pending_of(cum));
            let Some(last_stamp) = self.newest(h) else {
                // Claimed and not yet stored (or the log moved on since `cum` was read).
                if waits < WAITS {
                    waits += 1;
                    backoff.snooze();
                    continue;
                }
                // Acquire: as the first load. An unchanged `cum` means the claim is still
                // in flight, not that our reading is stale.
                if self.cum.load(Ordering::Acquire) != cum {
                    continue;
                }
                return Some(rule.unwritten_denial());
            };
            let reading = now().min(MAX_TIME);
            let view = View {
                t: judged_time(reading, last_stamp),
                pending,
                n,
                last_stamp,
            };
            let Some((decision, within)) = rule.judge(&view, &Reading { log: self, h }) else {
                backoff.spin();
                continue;
            };
            if !decision.is_allowed() || op == Op::Peek {
                // Acquire: the slots we read belong to the `cum` we read iff it is unchanged
                // now (the count only grows). A peek or denial whose reading went stale
                // judges again.
                if self.cum.load(Ordering::Acquire) != cum {
                    backoff.spin();
                    continue;
                }
                let decision = if decision.is_allowed() {
                    rule.uncharged(&view, &decision)
                } else {
                    decision
                };
                return Some(decision.measured_from_reading(view.t - reading));
            }
            if self.claim(cum, n, op) {
                if op == Op::Charge {
                    self.write(h, n, view.t);
                }
                // Relaxed: a guess (see `hint`); written only by a check that already wrote
                // `cum`, so peeks and denials still write nothing.
                let newest_outside = u64::from(h.wrapping_sub(within as u32 + 1));
                if self.hint.load(Ordering::Relaxed) != newest_outside {
                    self.hint.store(newest_outside, Ordering::Relaxed);
                }
                return Some(decision.measured_from_reading(view.t - reading));
            }
            // A lost CAS: judge again.
            backoff.spin();
        }
    }

    /// Claims `n` units (a charge) or reserves them if `cum` still holds the value judged.
    #[inline]
    fn claim(&self, cum: u64, n: u64, op: Op) -> bool {
        let next = if op == Op::Charge {
            // The count wraps within its 32 bits, never carrying into pending.
            add_count(cum, n)
        } else {
            add_pending(cum, n)
        };
        // AcqRel: Release publishes the claim after the reads it was judged on (the chain
        // invariant 2 needs); Acquire orders our slot stores after earlier claims.
        self.cum
            .compare_exchange_weak(cum, next, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Turns a reservation of `n` into `n` admitted units stamped `now()`. `false` if the log
    /// was retired (forcibly), writing nothing.
    pub(crate) fn commit(&self, n: u64, now: impl Fn() -> u64) -> bool {
        let backoff = Backoff::new();
        loop {
            // Acquire: as in `check`.
            let cum = self.cum.load(Ordering::Acquire);
            if cum & RETIRED != 0 {
                return false;
            }
            debug_assert!(pending_of(cum) >= n, "no reservation of {n} to commit");
            let h = cum as u32;
            // A commit may not deny, so it waits for the stores of an admission in flight
            // (they follow its CAS immediately).
            let Some(last_stamp) = self.newest(h) else {
                backoff.spin();
                continue;
            };
            let t = judged_time(now(), last_stamp);
            // AcqRel: Release publishes the claim (with the read of `h − 1` it relies on).
            if self
                .cum
                .compare_exchange_weak(
                    cum,
                    commit_pending(cum, n),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                self.write(h, n, t);
                return true;
            }
            backoff.spin();
        }
    }

    /// Gives back a reservation of `n`, leaving no trace. Nothing on a retired log.
    pub(crate) fn release(&self, n: u64) {
        update_reserved(&self.cum, |cum| release_pending(cum, n));
    }

    /// Frees up to `n` units of room now by expiring the oldest units still in the window
    /// `(now − window, now]`; returns how many were freed.
    ///
    /// The window then holds up to `n` fewer units now. The refunded request's own units
    /// keep their times, so later the log may deny slightly more than an exact refund of
    /// those units would; it never admits more.
    pub(crate) fn refund(&self, window: u64, now: u64, n: u64) -> u64 {
        let backoff = Backoff::new();
        let cap = self.capacity();
        loop {
            // Acquire: as in `check`.
            let cum = self.cum.load(Ordering::Acquire);
            if cum & RETIRED != 0 || n == 0 {
                return 0;
            }
            let h = cum as u32;
            // A refund waits for nothing: with the newest unit in flight it judges at now.
            let r = match self.newest(h) {
                Some(stamp) => judged_time(now, stamp),
                None => now.min(MAX_TIME),
            };
            let units = Reading { log: self, h };
            if let Some(within) = count_inside(&units, r, window, 0, cap + 1, true) {
                if let Some(freed) = self.free_oldest(h, within, r, window, n) {
                    return freed;
                }
            }
            // The reading went stale: the log moved on.
            backoff.spin();
        }
    }

    /// Frees up to `n` of the `within` units below `h` that are inside the window of `r`,
    /// oldest first: each inside, not yet freed slot is CASed to `FREED` with its stamp
    /// lowered to `max(0, r + 1 − W)`, and a slot freed already raises `r` to the time it was
    /// freed at. Stops at a unit claimed but not yet written. `None` if nothing was freed
    /// and the log moved on (the caller reads it again).
    fn free_oldest(&self, h: u32, within: u64, mut r: u64, window: u64, n: u64) -> Option<u64> {
        let backoff = Backoff::new();
        let mut freed = 0;
        for d in (1..=within).rev() {
            let p = h.wrapping_sub(d as u32);
            loop {
                // Acquire: pairs with the unit's store and with other refunds' CAS.
                let slot = self.slot(p).load(Ordering::Acquire);
                if !self.written(slot, p) {
                    // Not yet stored (a refund waits for nothing) or the log moved on.
                    if freed == 0 && !self.claimed(slot, p) {
                        return None;
                    }
                    return Some(freed);
                }
                let stamp = stamp_of(slot);
                if slot & FREED != 0 {
                    // Freed at `stamp + W − 1` by another refund: that time was seen, and
                    // our lowered stamps must not go below this one.
                    if stamp != 0 {
                        r = r.max(stamp.saturating_add(window) - 1).min(MAX_TIME);
                    }
                    break;
                }
                if !inside(stamp, r, window) {
                    break;
                }
                let lowered = (r + 1).saturating_sub(window);
                // AcqRel: Release publishes the lowered stamp to checks (Acquire loads);
                // Acquire orders the next slot's load after this one.
                match self.slot(p).compare_exchange(
                    slot,
                    (slot & !STAMP) | FREED | lowered,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        freed += 1;
                        break;
                    }
                    Err(_) => backoff.spin(),
                }
            }
            if freed == n {
                break;
            }
        }
        Some(freed)
    }

    /// Retires the log if nothing it holds is in the window of `now` or any later time and
    /// nothing is pending; `true` if this call retired it. See the module documentation for
    /// why no admission can be lost.
    pub(crate) fn retire_idle(&self, window: u64, now: u64) -> bool {
        // Acquire: pairs with the Release of every claim counted, so the load of `h − 1`
        // below sees its store or a newer one.
        let cum = self.cum.load(Ordering::Acquire);
        if cum & HIGH != 0 {
            // Retired already, or a reservation is pending (it may yet be committed).
            return false;
        }
        match self.newest(cum as u32) {
            Some(stamp) if !inside(stamp, now.min(MAX_TIME), window) => {}
            _ => return false,
        }
        // AcqRel: success proves nothing was claimed or reserved since `cum` was loaded; the
        // Release orders the retirement before the store's unlinking of the entry.
        self.cum
            .compare_exchange(cum, cum | RETIRED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Retires the log whatever it holds; `true` if this call retired it.
    pub(crate) fn retire_now(&self) -> bool {
        cum::retire_now(&self.cum)
    }

    /// Whether the log is retired.
    pub(crate) fn is_retired(&self) -> bool {
        cum::is_retired(&self.cum)
    }

    /// Whether a reservation of a `check_all` is pending on the log.
    pub(crate) fn holds_reservation(&self) -> bool {
        cum::holds_reservation(&self.cum)
    }

    /// The time (ns) of the newest admission, 0 if none: a recency for LRU choices. A
    /// refunded newest unit reports its lowered time.
    pub(crate) fn last_active(&self) -> u64 {
        // Relaxed: a heuristic; a stale value only makes a worse eviction choice.
        let h = self.cum.load(Ordering::Relaxed) as u32;
        time_of(stamp_of(
            self.slot(h.wrapping_sub(1)).load(Ordering::Relaxed),
        ))
    }

    /// The total cost ever admitted (wrapping at 2³²).
    pub(crate) fn admitted(&self) -> u64 {
        // Acquire: pairs with the Release of claims, for callers that read after joining.
        self.cum.load(Ordering::Acquire) & COUNT
    }
}

#[cfg(all(test, not(slidegate_loom)))]
mod tests;
