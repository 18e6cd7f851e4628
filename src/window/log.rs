//! The exact sliding log: the admission times of the last `cap ≥ L` units, in one ring.
//!
//! # State
//! - `cum`: the same word as [`Ring`](super::ring)'s (see "The `cum` word" there): bit 63
//!   `RETIRED`, bits 32..63 *pending* (reserved, not yet committed), bits 0..32 the *count*,
//!   the number of units ever admitted (mod 2³²). The count is also the next free
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
//!   the whole ring (measured: `cargo bench --bench algorithms`, L = 2²⁰, ~120 ns to ~40 ns
//!   per allowed check). The hint only chooses where to probe: a hinted unit `d ≤ k` below
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
//!   all written. (The spec's separate scan of the `n` overwritten slots is therefore
//!   unnecessary: the check is O(1) in `n` apart from the `n` stores.)
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
//! # Spurious denials (contract item 4)
//! A check that finds `h − 1` claimed but not written cannot stamp its own units (it does not
//! know `h − 1`'s time). It backs off, spinning and then yielding the processor ([`WAITS`]
//! times), and if the unit is still unwritten denies, reporting `remaining = 0`, a
//! `retry_after` of 1 µs or `W` if shorter (the stores are moments away; the request may fit
//! once they land, and in a window every unit now inside has left) and `reset_after = W`.
//! That happens only while another admission is between its CAS and its last slot store:
//! `n` plain stores that follow the CAS at once, so only a writer descheduled there, or one
//! storing more units than the back-off outlasts, makes others deny, and never for longer
//! than it is stalled. With four spins and no yield, a thread
//! checking 1 unit beside one admitting 4096 at a time (clock stopped, `L = 2²⁰`) was denied
//! thousands of times with the window far from full in 2 of 6 runs, each time told to wait
//! a whole window; with these waits, in none of 20. A commit, which must not deny, waits for
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
//! # Deviations from the protocol spec, and why
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

use crate::decision::{Decision, NEVER};
use crate::sync::{AtomicU64, Backoff, Ordering};
use crate::window::ring::{COUNT, HIGH, PENDING_SHIFT, add_count, pending_of, update_reserved};
use crate::window::{self, Op, RETIRED};

/// The shift of a slot's lap tag (bits 62..64).
const LAP_SHIFT: u32 = 62;

/// The bit of a slot set when a refund freed its unit.
const FREED: u64 = 1 << 61;

/// The bits of a slot that hold its stamp: `t + 1`, or 0 for "before time began".
const STAMP: u64 = FREED - 1;

/// The latest time (ns, about 73 years) the log distinguishes; later readings count as it.
/// Time then stops for the log: units stop leaving, which errs toward denial, and a denial
/// that waits on a unit that never leaves says so (`retry_after` of `u64::MAX` ns).
const MAX_TIME: u64 = STAMP - 1;

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

/// The `retry_after` of a check that gave up waiting on a unit still being stored (or the
/// window, if shorter): that admission's last stores are moments away, after which the same
/// request may fit at once.
const RETRY_UNSTORED: u64 = 1_000;

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

/// Whether a unit stamped `stamp` is inside the window `(t − window, t]`.
#[inline]
fn inside(stamp: u64, t: u64, window: u64) -> bool {
    stamp != 0 && stamp.saturating_add(window) > t + 1
}

/// The time a stamp stands for (0 for "never"): a lower bound for later stamps.
#[inline]
fn time_of(stamp: u64) -> u64 {
    stamp.saturating_sub(1)
}

/// How long until a unit stamped `stamp` leaves the window of `t` (0 if it is outside);
/// `u64::MAX` ns (never) if it is still inside at [`MAX_TIME`], where the log's time stops.
#[inline]
fn leaves_after(stamp: u64, t: u64, window: u64) -> u64 {
    if !inside(stamp, t, window) {
        0
    } else if inside(stamp, MAX_TIME, window) {
        NEVER
    } else {
        stamp.saturating_add(window) - (t + 1)
    }
}

/// What a judgement reads: the units below position `h`, seen at time `t`, and the request.
struct View {
    h: u32,
    t: u64,
    window: u64,
    limit: u64,
    pending: u64,
    n: u64,
    /// The stamp of unit `h − 1`, written.
    last_stamp: u64,
}

impl View {
    /// How long until the window is empty if nothing else arrives; pending cost counts as
    /// admitted now (it may be committed now), so it leaves a whole window from now.
    fn reset_after(&self) -> u64 {
        if self.pending > 0 {
            self.window
        } else {
            leaves_after(self.last_stamp, self.t, self.window)
        }
    }
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

    /// Whether the unit `d` positions below `h` (`d ≥ 1`) is inside the window. A unit
    /// claimed but not written counts as inside (its stamp will be at least every written
    /// one's); `None` if the slot belongs to a later lap: the reading is stale.
    #[inline]
    fn probe(&self, view: &View, d: u64) -> Option<bool> {
        let p = view.h.wrapping_sub(d as u32);
        // Acquire: pairs with the Release store of the unit (and, by invariant 2, of every
        // unit below it).
        let slot = self.slot(p).load(Ordering::Acquire);
        if self.written(slot, p) {
            Some(inside(stamp_of(slot), view.t, view.window))
        } else if self.claimed(slot, p) {
            Some(true)
        } else {
            None
        }
    }

    /// The number of units inside the window, given that the unit `inside_d` below `h` is
    /// inside (0: none known) and the unit `outside_d` below is outside (`cap + 1`: none
    /// known). Gallops from the `from_inside` end, then bisects: O(log) of the distance.
    fn count_inside(
        &self,
        view: &View,
        mut inside_d: u64,
        mut outside_d: u64,
        from_inside: bool,
    ) -> Option<u64> {
        let mut step = 1;
        while outside_d - inside_d > 1 {
            let d = if from_inside {
                (inside_d + step).min(outside_d - 1)
            } else {
                outside_d.saturating_sub(step).max(inside_d + 1)
            };
            let is_inside = self.probe(view, d)?;
            if is_inside {
                inside_d = d;
            } else {
                outside_d = d;
            }
            if is_inside != from_inside {
                break;
            }
            step *= 2;
        }
        while outside_d - inside_d > 1 {
            let d = inside_d + (outside_d - inside_d) / 2;
            if self.probe(view, d)? {
                inside_d = d;
            } else {
                outside_d = d;
            }
        }
        Some(inside_d)
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
    /// (ns) against "at most `limit` units in any window `(t − window, t]`", applying `op` if
    /// allowed. `None` if the log is retired (the caller looks the key up again).
    pub(crate) fn check(
        &self,
        limit: u64,
        window: u64,
        now: impl Fn() -> u64,
        n: u64,
        op: Op,
    ) -> Option<Decision> {
        debug_assert!((1..=limit).contains(&n) && limit <= self.capacity());
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
            // Acquire: pairs with the Release store of the newest unit and, by invariant 2,
            // of all below it.
            let last = self.slot(h.wrapping_sub(1)).load(Ordering::Acquire);
            if !self.written(last, h.wrapping_sub(1)) {
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
                // Within a window every unit now inside has left, the one in flight too (it
                // was stamped no later than now), so the wait is at most `W`.
                let retry = RETRY_UNSTORED.min(window);
                return Some(Decision::new(false, limit, 0, retry, window));
            }
            let last_stamp = stamp_of(last);
            let t = now().min(MAX_TIME).max(time_of(last_stamp));
            let view = View {
                h,
                t,
                window,
                limit,
                pending,
                n,
                last_stamp,
            };
            let Some((decision, within)) = self.judge(&view) else {
                backoff.spin();
                continue;
            };
            let taken = match op {
                _ if !decision.is_allowed() => None,
                Op::Peek => None,
                // The count wraps within its 32 bits, never carrying into pending. AcqRel:
                // Release publishes the claim after the reads it was judged on (the chain
                // invariant 2 needs); Acquire orders our slot stores after earlier claims.
                Op::Charge => Some(self.cum.compare_exchange_weak(
                    cum,
                    add_count(cum, n),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )),
                // Pending stays ≤ the limit judged with it (< 2³¹), so this does not reach
                // `RETIRED`. AcqRel as for a charge.
                Op::Reserve => Some(self.cum.compare_exchange_weak(
                    cum,
                    cum + (n << PENDING_SHIFT),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )),
            };
            match taken {
                Some(Ok(_)) => {
                    if op == Op::Charge {
                        self.write(h, n, t);
                    }
                    // Relaxed: a guess (see `hint`); written only by a check that already
                    // wrote `cum`, so peeks and denials still write nothing.
                    let newest_outside = u64::from(h.wrapping_sub(within as u32 + 1));
                    if self.hint.load(Ordering::Relaxed) != newest_outside {
                        self.hint.store(newest_outside, Ordering::Relaxed);
                    }
                    return Some(decision);
                }
                // Acquire: the slots we read belong to the `cum` we read iff it is unchanged
                // now (the count only grows).
                None if self.cum.load(Ordering::Acquire) == cum => {
                    return Some(if op == Op::Peek && decision.is_allowed() {
                        // Nothing was taken: report the room there is now.
                        Decision::new(true, limit, decision.remaining() + n, 0, view.reset_after())
                    } else {
                        decision
                    });
                }
                // A lost CAS, or a peek or denial whose reading went stale: judge again.
                _ => backoff.spin(),
            }
        }
    }

    /// The decision for `view.n` on `view`, as if charged when allowed, and the number of
    /// units inside the window; `None` if the reading turned out to be stale.
    fn judge(&self, view: &View) -> Option<(Decision, u64)> {
        let (limit, pending, n, window) = (view.limit, view.pending, view.n, view.window);
        let cap = self.capacity();
        if pending + n > limit {
            // No unit leaving makes room: only the reservations can, within a window.
            let known = u64::from(inside(view.last_stamp, view.t, window));
            let within = self.count_inside(view, known, cap + 1, true)?;
            let remaining = limit.saturating_sub(within + pending);
            return Some((
                Decision::new(false, limit, remaining, window, window),
                within,
            ));
        }
        // The unit that must be outside for `n` to fit: `k` below `h`, 1 ≤ k ≤ limit.
        let k = limit - pending - n + 1;
        if !inside(view.last_stamp, view.t, window) {
            // The newest unit is outside, so all are (invariant 1).
            return Some((self.allowed(view, 0), 0));
        }
        // Relaxed: only where to probe first. A unit `d ≤ k` below `h` found outside
        // proves `q` outside too (it is older), with the count of units inside in the same
        // few probes: O(1) while the window's oldest unit moves little between checks.
        let hinted = u64::from(
            view.h
                .wrapping_sub(self.hint.load(Ordering::Relaxed) as u32),
        );
        if 1 < hinted && hinted <= k && !self.probe(view, hinted)? {
            let within = self.count_inside(view, 1, hinted, false)?;
            return Some((self.allowed(view, within), within));
        }
        let q_stamp = if k == 1 {
            view.last_stamp
        } else {
            let q = view.h.wrapping_sub(k as u32);
            // Acquire: pairs with the Release store of unit `q`.
            let slot = self.slot(q).load(Ordering::Acquire);
            if !self.written(slot, q) {
                // `h − 1` was written, so by invariant 2 `q` was too: the log moved on.
                return None;
            }
            stamp_of(slot)
        };
        if inside(q_stamp, view.t, window) {
            let within = self.count_inside(view, k, cap + 1, true)?;
            // `q` inside means fewer than `n` fit; the minimum keeps that so even if the
            // count saw a concurrent refund that the test of `q` did not.
            let remaining = limit.saturating_sub(within + pending).min(n - 1);
            let retry = leaves_after(q_stamp, view.t, window);
            let reset = view.reset_after();
            return Some((Decision::new(false, limit, remaining, retry, reset), within));
        }
        // The newest unit (`d = 1`) is inside and `q` (`d = k`) outside.
        let within = self.count_inside(view, 1, k, false)?;
        Some((self.allowed(view, within), within))
    }

    /// The allowed decision when `within ≤ k − 1 = limit − pending − n` units are inside.
    /// The new units (or the reservation, which counts as admitted now) leave a whole window
    /// from now.
    #[inline]
    fn allowed(&self, view: &View, within: u64) -> Decision {
        let remaining = view.limit - view.pending - view.n - within;
        Decision::new(true, view.limit, remaining, 0, view.window)
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
            // Acquire: as in `check`; a commit may not deny, so it waits for the stores of
            // an admission in flight (they follow its CAS immediately).
            let last = self.slot(h.wrapping_sub(1)).load(Ordering::Acquire);
            if !self.written(last, h.wrapping_sub(1)) {
                backoff.spin();
                continue;
            }
            let t = now().min(MAX_TIME).max(time_of(stamp_of(last)));
            // AcqRel: Release publishes the claim (with the read of `h − 1` it relies on).
            if self
                .cum
                .compare_exchange_weak(
                    cum,
                    add_count(cum, n) - (n << PENDING_SHIFT),
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
        update_reserved(&self.cum, |cum| cum - (n << PENDING_SHIFT));
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
        'attempt: loop {
            // Acquire: as in `check`.
            let cum = self.cum.load(Ordering::Acquire);
            if cum & RETIRED != 0 || n == 0 {
                return 0;
            }
            let h = cum as u32;
            // Acquire: as in `check`.
            let last = self.slot(h.wrapping_sub(1)).load(Ordering::Acquire);
            let mut r = now.min(MAX_TIME);
            if self.written(last, h.wrapping_sub(1)) {
                r = r.max(time_of(stamp_of(last)));
            }
            let view = View {
                h,
                t: r,
                window,
                limit: cap,
                pending: 0,
                n,
                last_stamp: stamp_of(last),
            };
            let Some(within) = self.count_inside(&view, 0, cap + 1, true) else {
                backoff.spin();
                continue;
            };
            let mut freed = 0;
            for d in (1..=within).rev() {
                let p = h.wrapping_sub(d as u32);
                loop {
                    // Acquire: pairs with the unit's store and with other refunds' CAS.
                    let slot = self.slot(p).load(Ordering::Acquire);
                    if !self.written(slot, p) {
                        // Not yet stored (a refund waits for nothing) or the log moved on.
                        if freed == 0 && !self.claimed(slot, p) {
                            backoff.spin();
                            continue 'attempt;
                        }
                        return freed;
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
            return freed;
        }
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
        let h = cum as u32;
        // Acquire: pairs with the newest unit's store (and, by invariant 2, every older one).
        let last = self.slot(h.wrapping_sub(1)).load(Ordering::Acquire);
        let now = now.min(MAX_TIME);
        if !self.written(last, h.wrapping_sub(1)) || inside(stamp_of(last), now, window) {
            return false;
        }
        // AcqRel: success proves nothing was claimed or reserved since `cum` was loaded; the
        // Release orders the retirement before the store's unlinking of the entry.
        self.cum
            .compare_exchange(cum, cum | RETIRED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Retires the log whatever it holds; `true` if this call retired it.
    pub(crate) fn retire_now(&self) -> bool {
        window::retire_now(&self.cum)
    }

    /// Whether the log is retired.
    pub(crate) fn is_retired(&self) -> bool {
        window::is_retired(&self.cum)
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
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    /// The sequential definition: a list of unit times; a unit at `u` is in the window of
    /// `t` iff `u > t − W`. Pending reservations count as admitted now.
    struct Model {
        limit: u64,
        window: u64,
        units: VecDeque<u64>,
        pending: u64,
    }

    impl Model {
        fn new(limit: u64, window: u64) -> Model {
            Model {
                limit,
                window,
                units: VecDeque::new(),
                pending: 0,
            }
        }

        fn expire(&mut self, t: u64) {
            while self.units.front().is_some_and(|&u| u + self.window <= t) {
                self.units.pop_front();
            }
        }

        fn reset_after(&self, t: u64) -> u64 {
            match self.units.back() {
                _ if self.pending > 0 => self.window,
                Some(&u) => u + self.window - t,
                None => 0,
            }
        }

        fn check(&mut self, t: u64, n: u64, op: Op) -> Decision {
            self.expire(t);
            let (l, w, p) = (self.limit, self.window, self.pending);
            let within = self.units.len() as u64;
            if p + n > l {
                return Decision::new(false, l, l.saturating_sub(within + p), w, w);
            }
            if within + p + n > l {
                // The m-th oldest unit must leave.
                let m = within + p + n - l;
                let retry = self.units[m as usize - 1] + w - t;
                return Decision::new(false, l, l - within - p, retry, self.reset_after(t));
            }
            match op {
                Op::Peek => return Decision::new(true, l, l - within - p, 0, self.reset_after(t)),
                Op::Charge => self.units.extend((0..n).map(|_| t)),
                Op::Reserve => self.pending += n,
            }
            Decision::new(true, l, l - within - p - n, 0, w)
        }

        fn commit(&mut self, t: u64, n: u64) {
            self.pending -= n;
            self.units.extend((0..n).map(|_| t));
        }

        fn release(&mut self, n: u64) {
            self.pending -= n;
        }

        /// Expires the oldest units still in the window.
        fn refund(&mut self, t: u64, n: u64) -> u64 {
            self.expire(t);
            let freed = n.min(self.units.len() as u64);
            self.units.drain(..freed as usize);
            freed
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Step {
        Check(u64),
        Peek(u64),
        Refund(u64),
        /// Reserve, held until a `Commit` or `Release` (oldest first).
        Reserve(u64),
        Commit,
        Release,
    }

    /// Runs `steps` (each after advancing the clock) on a log whose count starts at `start`
    /// and on the model; every answer must be equal.
    fn run(limit: u64, window: u64, start: u32, steps: &[(u64, Step)]) {
        let log = Log::starting_at(limit, start);
        let mut model = Model::new(limit, window);
        let mut held = VecDeque::new();
        let mut t = 0;
        for (i, &(dt, step)) in steps.iter().enumerate() {
            t += dt;
            let at = || t;
            match step {
                Step::Check(n) | Step::Peek(n) | Step::Reserve(n) => {
                    let op = match step {
                        Step::Check(_) => Op::Charge,
                        Step::Peek(_) => Op::Peek,
                        _ => Op::Reserve,
                    };
                    let got = log.check(limit, window, at, n, op);
                    let want = model.check(t, n, op);
                    assert_eq!(got, Some(want), "step {i} {step:?} at t = {t}");
                    if op == Op::Reserve && want.is_allowed() {
                        held.push_back(n);
                    }
                }
                Step::Refund(n) => {
                    assert_eq!(
                        log.refund(window, t, n),
                        model.refund(t, n),
                        "step {i} {step:?} at t = {t}"
                    );
                }
                Step::Commit => {
                    if let Some(n) = held.pop_front() {
                        assert!(log.commit(n, at));
                        model.commit(t, n);
                    }
                }
                Step::Release => {
                    if let Some(n) = held.pop_front() {
                        log.release(n);
                        model.release(n);
                    }
                }
            }
            let admitted = u64::from(start) + model_admitted(&log, start);
            assert_eq!(log.admitted(), admitted & COUNT);
            assert_sorted(&log);
        }
    }

    /// Units admitted since the log's count was `start`.
    fn model_admitted(log: &Log, start: u32) -> u64 {
        u64::from((log.admitted() as u32).wrapping_sub(start))
    }

    /// Invariant 1: among the `cap` newest positions, stamps never decrease.
    fn assert_sorted(log: &Log) {
        let h = log.admitted() as u32;
        let cap = log.capacity() as u32;
        let stamps: Vec<u64> = (0..cap)
            .map(|i| {
                let p = h.wrapping_sub(cap).wrapping_add(i);
                let slot = log.slot(p).load(Ordering::Relaxed);
                assert!(log.written(slot, p), "position {p} not written");
                stamp_of(slot)
            })
            .collect();
        assert!(stamps.is_sorted(), "stamps not sorted: {stamps:?}");
    }

    fn step(limit: u64) -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (1..=limit).prop_map(Step::Check),
            1 => (1..=limit).prop_map(Step::Peek),
            1 => (1..=limit).prop_map(Step::Refund),
            1 => (1..=limit).prop_map(Step::Reserve),
            1 => Just(Step::Commit),
            1 => Just(Step::Release),
        ]
    }

    fn case() -> impl Strategy<Value = (u64, u64, u32, Vec<(u64, Step)>)> {
        (
            1..=6u64,
            1..=40u64,
            prop_oneof![Just(0u32), (1..=20u32).prop_map(|k| 0u32.wrapping_sub(k))],
        )
            .prop_flat_map(|(limit, window, start)| {
                let dt = prop_oneof![3 => Just(0), 3 => 0..=window / 4 + 1, 1 => 0..=2 * window];
                (
                    Just(limit),
                    Just(window),
                    Just(start),
                    prop::collection::vec((dt, step(limit)), 1..120),
                )
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Every decision, refund count and admitted total equals the sequential model's,
        /// from a fresh count and from one about to cross 2³².
        #[test]
        fn equals_the_sequential_model((limit, window, start, steps) in case()) {
            run(limit, window, start, &steps);
        }
    }

    fn check(log: &Log, limit: u64, window: u64, t: u64, n: u64) -> Decision {
        log.check(limit, window, || t, n, Op::Charge).expect("live")
    }

    #[test]
    fn times_before_the_first_window_ends() {
        // W = 100: a unit at 0 is inside until t = 100, and the empty log's stamp-0 slots
        // never count, even at t < W.
        let log = Log::new(2);
        assert_eq!(check(&log, 2, 100, 0, 1), Decision::new(true, 2, 1, 0, 100));
        assert_eq!(
            check(&log, 2, 100, 30, 1),
            Decision::new(true, 2, 0, 0, 100)
        );
        assert_eq!(
            check(&log, 2, 100, 40, 1),
            Decision::new(false, 2, 0, 60, 90)
        );
        assert_eq!(
            check(&log, 2, 100, 99, 1),
            Decision::new(false, 2, 0, 1, 31)
        );
        assert_eq!(
            check(&log, 2, 100, 100, 1),
            Decision::new(true, 2, 0, 0, 100)
        );
    }

    #[test]
    fn limit_one_and_cost_equal_to_the_limit() {
        let log = Log::new(1);
        assert_eq!(log.capacity(), 1);
        assert!(check(&log, 1, 10, 5, 1).is_allowed());
        assert_eq!(check(&log, 1, 10, 14, 1), Decision::new(false, 1, 0, 1, 1));
        assert!(check(&log, 1, 10, 15, 1).is_allowed());
        let log = Log::new(5);
        assert_eq!(log.capacity(), 8);
        assert_eq!(check(&log, 5, 10, 0, 5), Decision::new(true, 5, 0, 0, 10));
        assert_eq!(check(&log, 5, 10, 3, 1), Decision::new(false, 5, 0, 7, 7));
        assert_eq!(check(&log, 5, 10, 10, 5), Decision::new(true, 5, 0, 0, 10));
    }

    #[test]
    fn laps_wrap_and_the_count_crosses_2_pow_32() {
        // Four laps of a 4-slot log, crossing 2³² half-way.
        let log = Log::starting_at(3, u32::MAX - 7);
        for i in 0..16 {
            let t = i * 10;
            assert!(check(&log, 3, 10, t, 1).is_allowed(), "admission {i}");
            assert_sorted(&log);
        }
        assert_eq!(log.admitted(), 8);
        assert!(!log.is_retired());
        assert_eq!(pending_of(log.cum.load(Ordering::Relaxed)), 0);
    }

    #[test]
    fn lap_tags_of_consecutive_laps_differ_at_the_largest_capacity() {
        for p in [0, 5, (1 << 31) - 1, 1 << 31, u32::MAX] {
            let before = p.wrapping_sub(1 << 31);
            assert_ne!(lap(31, p), lap(31, before), "p = {p}");
            assert!(lap(31, p) < 2);
        }
        // Consecutive laps across the wrap of the count, for a small capacity.
        assert_eq!(lap(2, u32::MAX), 3);
        assert_eq!(lap(2, 0), 0);
    }

    #[test]
    fn gaps_of_years() {
        const YEAR: u64 = 365 * 24 * 3600 * 1_000_000_000;
        let log = Log::new(2);
        let window = YEAR;
        assert!(check(&log, 2, window, 0, 2).is_allowed());
        let d = check(&log, 2, window, YEAR - 1, 1);
        assert_eq!(d, Decision::new(false, 2, 0, 1, 1));
        assert!(check(&log, 2, window, 30 * YEAR, 1).is_allowed());
        assert_eq!(log.last_active(), 30 * YEAR);
        assert!(log.retire_idle(window, 31 * YEAR));
    }

    #[test]
    fn time_stops_at_the_largest_stamp() {
        // Readings past ~73 years count as `MAX_TIME`: units stop leaving (errs toward
        // denial) instead of wrapping into the past, and a denial says it is for good.
        let log = Log::new(1);
        assert!(check(&log, 1, 10, u64::MAX, 1).is_allowed());
        let d = check(&log, 1, 10, u64::MAX, 1);
        assert_eq!(d, Decision::new(false, 1, 0, u64::MAX, u64::MAX));
        // Before time stops, a unit still leaves when its window has passed.
        let log = Log::new(1);
        assert!(check(&log, 1, 10, MAX_TIME - 10, 1).is_allowed());
        assert_eq!(
            check(&log, 1, 10, MAX_TIME - 5, 1),
            Decision::new(false, 1, 0, 5, 5)
        );
        assert!(check(&log, 1, 10, MAX_TIME, 1).is_allowed());
        assert_eq!(log.last_active(), MAX_TIME);
    }

    #[test]
    fn a_clock_set_back_judges_at_the_newest_unit() {
        let log = Log::new(1);
        assert!(check(&log, 1, 10, 100, 1).is_allowed());
        // Judged at 100, not 50: the unit leaves in 10, not 60.
        assert_eq!(
            check(&log, 1, 10, 50, 1),
            Decision::new(false, 1, 0, 10, 10)
        );
        // And the next unit is stamped no earlier than 100.
        assert!(check(&log, 1, 10, 110, 1).is_allowed());
    }

    /// Regression (spec flaw): with refunds replacing a unit's time by "empty", a check
    /// whose clock reading predates the refund saw a hole below a unit still inside at its
    /// own time, and over-admitted: units at 0 and 5, a refund at 12, then two admitted at
    /// 9 made three in `(−1, 9]`. A lowered stamp keeps the refunded unit inside before 12.
    #[test]
    fn a_check_behind_a_refund_sees_no_hole() {
        let log = Log::new(2);
        assert!(check(&log, 2, 10, 0, 1).is_allowed());
        assert!(check(&log, 2, 10, 5, 1).is_allowed());
        assert_eq!(log.refund(10, 12, 1), 1);
        let d = check(&log, 2, 10, 9, 2);
        assert!(!d.is_allowed(), "{d:?}");
        // At the refund's time the room is there.
        assert!(check(&log, 2, 10, 12, 2).is_allowed());
    }

    /// Regression (spec flaw): with "empty" refunds the newest unit, once refunded, no longer
    /// bounded the next stamp; a refund must also never lower a stamp below one freed later.
    #[test]
    fn refunds_keep_stamps_sorted() {
        let log = Log::new(3);
        for t in [12, 13, 14] {
            assert!(check(&log, 3, 10, t, 1).is_allowed());
        }
        assert_eq!(log.refund(10, 20, 1), 1);
        // A refund whose clock is behind: it meets the unit freed at 20 and moves to 20.
        assert_eq!(log.refund(10, 15, 1), 1);
        assert_sorted(&log);
        // All three refunded newest-last: the next stamp is still bounded below.
        assert_eq!(log.refund(10, 20, 5), 1);
        // A check behind the refunds is judged at the newest stamp (10), where the refunded
        // units still count; from 20 on they are gone, and new stamps stay above theirs.
        assert_eq!(check(&log, 3, 10, 5, 3), Decision::new(false, 3, 0, 10, 10));
        assert_eq!(check(&log, 3, 10, 20, 3), Decision::new(true, 3, 0, 0, 10));
        assert_sorted(&log);
    }

    /// The hint (where a check starts looking for the window's oldest unit) is a guess:
    /// a reservation judged at 12 leaves it at the unit of 0, which is inside again for a
    /// check whose clock reads 9 (no unit newer than 5 bounds it). The check must probe it,
    /// not trust it, or it admits 2 beside the units at 0 and 5.
    #[test]
    fn a_hint_from_a_later_time_is_probed_not_trusted() {
        let log = Log::new(3);
        assert!(check(&log, 3, 10, 0, 1).is_allowed());
        assert!(check(&log, 3, 10, 5, 1).is_allowed());
        let reserved = log.check(3, 10, || 12, 1, Op::Reserve).expect("live");
        assert_eq!(reserved, Decision::new(true, 3, 1, 0, 10));
        log.release(1);
        assert_eq!(check(&log, 3, 10, 9, 2), Decision::new(false, 3, 1, 1, 6));
        assert_eq!(check(&log, 3, 10, 9, 1), Decision::new(true, 3, 0, 0, 10));
    }

    #[test]
    fn refund_frees_only_units_inside_the_window() {
        let log = Log::new(4);
        assert!(check(&log, 4, 10, 0, 2).is_allowed());
        assert!(check(&log, 4, 10, 6, 2).is_allowed());
        // At 12 the units at 0 are out; only the two at 6 can be freed.
        assert_eq!(log.refund(10, 12, 4), 2);
        assert_eq!(log.refund(10, 12, 1), 0);
        assert_eq!(check(&log, 4, 10, 12, 4), Decision::new(true, 4, 0, 0, 10));
        assert_eq!(log.admitted(), 8);
    }

    /// Claims position `h` without storing its unit: an admission stalled after its CAS.
    fn claim_without_store(log: &Log) -> u32 {
        let cum = log.cum.load(Ordering::Relaxed);
        log.cum.store(add_count(cum, 1), Ordering::Relaxed);
        cum as u32
    }

    #[test]
    fn a_unit_in_flight_makes_checks_deny_conservatively() {
        let log = Log::new(2);
        let h = claim_without_store(&log);
        for op in [Op::Charge, Op::Peek, Op::Reserve] {
            assert_eq!(
                log.check(2, 10, || 0, 1, op),
                Some(Decision::new(false, 2, 0, 10, 10)),
                "{op:?}"
            );
        }
        // A refund stops at it; retirement waits for it.
        assert_eq!(log.refund(10, 0, 1), 0);
        assert!(!log.retire_idle(10, 100));
        log.write(h, 1, 0);
        assert_eq!(check(&log, 2, 10, 0, 1), Decision::new(true, 2, 0, 0, 10));
    }

    #[test]
    fn reservations_count_until_released_and_leave_no_trace() {
        let log = Log::new(3);
        let reserve = |t, n| log.check(3, 10, || t, n, Op::Reserve).expect("live");
        assert!(reserve(0, 2).is_allowed());
        assert_eq!(check(&log, 3, 10, 1, 2), Decision::new(false, 3, 1, 10, 10));
        assert!(
            !log.retire_idle(10, 100),
            "retired with a reservation pending"
        );
        log.release(2);
        assert_eq!(log.admitted(), 0);
        assert_eq!(log.cum.load(Ordering::Relaxed), 0);
        assert!(reserve(5, 3).is_allowed());
        assert!(log.commit(3, || 7));
        assert_eq!(log.admitted(), 3);
        assert_eq!(pending_of(log.cum.load(Ordering::Relaxed)), 0);
        // Committed units are stamped at the commit's time.
        assert_eq!(check(&log, 3, 10, 16, 1), Decision::new(false, 3, 0, 1, 1));
        assert!(check(&log, 3, 10, 17, 1).is_allowed());
    }

    #[test]
    fn retirement() {
        let log = Log::new(2);
        assert!(log.retire_idle(10, 0), "a fresh log is idle");
        assert!(log.is_retired());
        assert_eq!(log.check(2, 10, || 0, 1, Op::Peek), None);
        assert_eq!(log.refund(10, 0, 1), 0);

        let log = Log::new(2);
        assert!(check(&log, 2, 10, 5, 1).is_allowed());
        for t in [5, 10, 14] {
            assert!(
                !log.retire_idle(10, t),
                "retired at {t} with a unit at 5 inside"
            );
        }
        assert!(log.retire_idle(10, 15));
        assert!(!log.retire_idle(10, 15), "retired twice");
        assert!(!log.retire_now(), "retired twice");
        assert_eq!(log.check(2, 10, || 15, 1, Op::Charge), None);
        assert_eq!(log.admitted(), 1);
        assert_eq!(log.last_active(), 5);

        // A forced retirement makes a pending commit fail, writing nothing.
        let log = Log::new(2);
        assert!(
            log.check(2, 10, || 0, 1, Op::Reserve)
                .is_some_and(|d| d.is_allowed())
        );
        assert!(log.retire_now());
        assert!(!log.commit(1, || 0));
        log.release(1);
        assert_eq!(log.admitted(), 0);
    }
}
