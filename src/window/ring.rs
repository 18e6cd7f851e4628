//! The lock-free bucket ring: a cumulative counter and a ring of epoch-tagged snapshots.
//!
//! # State
//! - `cum`: one word packing three fields (see "The `cum` word" below); its low 32 bits,
//!   the *count*, are the total cost ever admitted (mod 2³²). Admission is one
//!   compare-and-swap on it; nothing is ever subtracted from the count, so nothing can
//!   drift, and a denial writes nothing.
//! - `slots`: `R = N + 1` slots, each packing a *tag* (the bucket index `k`, mod 2²⁴), an
//!   8-bit *mark* (when bucket `k` last admitted, for Strict with marks; see
//!   "Last-admission marks") and a *snapshot* (`cum` when bucket `k` started, mod 2³²). Those
//!   are the widths of [`Wide`] slots, a 64-bit word each; [`Compact`] slots, two in a word,
//!   have an 8-bit tag, no mark and a 24-bit snapshot, for quotas small enough that every
//!   argument below holds with those widths (`ring/slots.rs` says why). Bucket `k` lives in
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
//! read consistently never exceeds `2·limit < 2³²` (see `MAX_LIMIT`; compact slots' 24 bits,
//! `2·limit < 2²³`).
//!
//! # Why tags never alias
//! Between the two loads of `front` that bracket every read, the ring holds `front − N ..=
//! front` plus the goal window of the one fill that may be in progress from that `front`. An
//! incremental fill's tags differ from the ring's by 1 to 2N; a fill that jumps more than `N`
//! buckets is given a goal whose distance from `front`, mod 2²⁴, is in `N + 1 ..= 2²⁴ − N − 1`
//! (after a gap near a multiple of 2²⁴ buckets it stops half-way, at `front + 2²³`), so no two
//! tags that can meet in one slot are equal mod 2²⁴ (`N ≤ 2¹⁶` leaves room for that; with
//! compact slots' 8-bit tags, the same with 2⁸, and `N ≤ 63`).
//!
//! # Retirement (for stores that evict)
//! A keyed store frees a key's ring once it is indistinguishable from a fresh one. Freeing it
//! under a check that already found it would lose that check's admission: it would be charged
//! to a ring nobody reads again. So a ring is first *retired*: the top bit of `cum`
//! (`RETIRED`) is set by a compare-and-swap, after which every charge fails (its CAS expects a
//! `cum` without the bit) and every [`Ring::read`] returns `None`, telling the caller to look
//! the key up again.
//!
//! - **Idle retirement** ([`Ring::retire_idle`]): read the ring at `now` as a peek does
//!   ([`Ring::read`], which writes nothing); if that reading's window counts nothing
//!   (`tail(0) = 0`, pending included), CAS `cum` from the reading's value to
//!   `cum | RETIRED`. The reading is consistent (see `read`), and `tail(0) = 0` says that
//!   every unit its `cum` counts is counted in a bucket before the window of `now` (of
//!   `front`, if `now` is older; nothing is counted past `front`), so all of them lie before
//!   that window — and before the window of any later time. The CAS succeeding proves
//!   no admission came in between (the count only grows, so `cum` cannot return to a value
//!   but through a reservation that was released, which admitted nothing). The
//!   retired ring therefore answers every check at `now` or later exactly as a fresh ring
//!   would, and a check that raced it either landed before (and was counted in the idle test)
//!   or fails its CAS and re-judges on the fresh ring: no admission lost, no decision changed.
//!   This relies on clock readings taken after the retirement being no older than `now`, which
//!   holds for a clock that is monotone across threads (quanta's and a `ManualClock` that is
//!   only advanced).
//! - **Forced retirement** ([`Ring::retire_now`], for a store at its key bound or a key whose
//!   quota changed shape): set the bit unconditionally. Admissions before it are forgotten, on
//!   purpose and counted by the store; none after it is charged to the dead ring.
//!
//! # The `cum` word and reservations (for checks across several limits)
//! `cum` packs bit 63 `RETIRED`, bits 32..63 *pending* (31 bits) and bits 0..32 the *count*
//! of admitted cost (mod 2³², which the 32-bit snapshots already assume): see
//! [`cum`]. A check across
//! several limits (`crate::multi`) must charge all or none. Charging each and subtracting on
//! failure is wrong here: a fill may snapshot `cum` between the add and the subtract, and
//! that snapshot then counts a phantom in one bucket and a negative in the next, so a later
//! window that starts at the second bucket undercounts (over-admits). So a multi-check
//! *reserves* instead:
//! - **Judging counts pending as admitted in the bucket judged**: every tail sum is
//!   `count − snapshot + pending` ([`Reading::tail`]). A plain check therefore never admits
//!   into room a reservation holds.
//! - **Reserve** ([`Ring::try_reserve`]): CAS `pending += n` from the value judged, exactly
//!   like an admission; it fails, and the caller re-reads, if anything changed.
//! - **Release** ([`Ring::release`]): `pending −= n`. It never touches the count, so no
//!   snapshot, which holds only count bits, ever saw it: a released reservation leaves no
//!   trace once it returns.
//! - **Commit** ([`Ring::commit`]): one CAS `count += n, pending −= n`, not re-judged. It
//!   lands after every snapshot established before it, so at a bucket no older than the one
//!   the reservation was judged at: like a check whose clock read is a bucket old, it can
//!   only err toward denial.
//!
//! Strict stays safe: among the units counted in buckets `a ..= a + N`, take the one whose
//! judgement (a charge's or a reservation's CAS) came last, at bucket `j ≤ a + N`. Every
//! other unit in those buckets was judged before it, so at that CAS it was either counted
//! (in a bucket `≥ a ≥ j − N`, so inside the judged window) or pending (added to every tail
//! sum): the last judgement saw them all, so the buckets hold at most `L`. Pending never
//! exceeds `L ≤ MAX_LIMIT < 2³¹` (a reservation is judged with pending included), so it
//! fits its 31 bits, and a count that wraps at 2³² never carries into it.
//!
//! Retirement and reservations: [`Ring::retire_idle`] requires `pending == 0` in the `cum`
//! it swaps, so an idle retirement never races a reservation (a reservation made after the
//! load fails the retirement's CAS; one made after the retirement fails its own CAS). `cum`
//! is no longer monotone (a reserve and a release restore it), but a reservation released
//! between the retirement's load and CAS admitted nothing, so its CAS succeeding is still
//! correct. (No decision depends on the `pending == 0` rule: a reservation establishes its
//! bucket, so its ring looks idle only a whole window later, when its commit would land in
//! a bucket outside every current window; the rule keeps `admitted` exact.) A forced retirement ([`Ring::retire_now`]) may hit a reservation not yet
//! committed: the commit then finds `RETIRED` and returns `false`, and the caller counts the
//! reservation as admitted before the retirement and forgotten with everything else that
//! retirement forgets (it was judged, and held room, before the retirement's `fetch_or`).
//! The multi-check cannot redo it instead: other limits may be committed already, and the
//! count is never subtracted from. A release on a retired ring does nothing.
//!
//! # Refunds ([`Ring::refund`])
//! A refund frees up to `n` units of room now by expiring the *oldest* units counted in the
//! window: units are numbered by the count as they are admitted, and the window of bucket
//! `b` counts those numbered after `snap[b − N]`. Expiring the oldest ones is raising
//! snapshots; nothing is subtracted from the count, so checks racing a refund never see
//! the count go back (no ABA on their CAS) and only judge conservatively.
//!
//! - Move the ring to the bucket of now (`read` with establish) and read `cum`'s count `c`
//!   and the oldest snapshot `s = snap[k]`, `k = front − N`. The target is
//!   `s' = s + min(n, c − s)`: never past the count, so pending reservations, which are not
//!   in it, are never refunded.
//! - *Barrier*: a no-op CAS of `goal` from `front` to `front`, which fails if a fill from
//!   `front` was claimed. After it, every fill claims by a CAS that reads from it, so every
//!   fill helper reads a `cum` at least `c ≥ s'` and establishes snapshots `≥ s'` (a fill's
//!   `later(...)` only ever raises its snapshot further, and every value it takes is a `cum`
//!   it read, so no snapshot ever exceeds the count). Without the barrier a fill that read
//!   `cum` before the refund would establish a newer bucket below a raised older one, and the
//!   refunded units would come back at the next bucket. A failed barrier helps the fill and
//!   starts again.
//! - *Raise* `snap[j]` to `max(snap[j], s')` for `j = front` down to `k`, each by CAS from
//!   its exact loaded value with its tag required to be `j`. Newest first keeps the
//!   snapshots monotone at every instant (`snap[j + 1]` is already `≥ s'` when `snap[j]` is
//!   raised to it), so every tail is non-increasing for every reader. The last CAS, on
//!   `snap[k]`, is the refund's moment: from the value `v` it finds there, if `v < s'`, and
//!   then `freed = s' − v` (`v = s` unless a racing refund raised it part of the way). If
//!   another refund raised it to `s'` or past, this one freed nothing, and its raises of
//!   newer slots are covered by that refund's; judge again. (Requiring exactly `s` there
//!   would leave the loser's raises of newer slots in place, unreported, when the ring moves
//!   on before it judges again: two refunds together would free more than they report, the
//!   case `loom-tests/tests/refund_racing_refund.rs` pins.) If a tag no longer matches, a
//!   fill recycled that slot (and every older one: fills go oldest first): the ring moved on
//!   to a bucket whose window no longer holds the oldest units we meant, which time has
//!   expired instead, and the live slots are raised; `s' − s` is reported. (If a racing
//!   refund took some of those units first, both report them: stricter than reported, never
//!   looser; known, not fixed.)
//! - A reader whose `cum` was loaded before a refund's and whose slot load sees the raise
//!   would compute a negative tail: [`Reading::tail`] treats a snapshot later than its count
//!   as torn when the count has moved since (a raise past it requires that), and the reader
//!   re-reads. One refund raises at most `2³¹ − 1` units, so such a snapshot is always later
//!   in the wrapping order unless `2³¹` units are admitted while one reader stalls.
//!
//! *Strict stays safe relative to admitted − refunded*: the proof above holds with "counted"
//! meaning admitted and not expired by a refund that took effect before the last judgement:
//! every judgement reads `cum − snap[b − N]`, the units of its window that no refund expired;
//! so in any `N + 1` buckets, admitted minus refunded (as of the last admission) is at most
//! `L`. A refund never frees more than was counted, and never counts anything twice.
//!
//! *Weighted*: "oldest" is the same numbering, so a refund empties the oldest bucket first,
//! the one weighed by `1 − r/G`: the room it frees now is its weighted share, less than the
//! units expired (`freed` reports units, the same as for Strict), and the rest of the room
//! comes back as the bucket slides out as usual.
//!
//! # Last-admission marks (Strict with marks)
//! Strict counts the oldest bucket `k = b − N` whole, though the window `(t − W, t]` has
//! already left part of it. Strict with marks leaves it out when every unit it counts has
//! left: each slot's 8-bit mark `m` bounds the offset of the bucket's last admission into it,
//! `(m − 1)·s` with a step `s = ⌈G / 254⌉` ns, rounded up (0: nothing recorded). At offset
//! `r` of bucket `b`, `t − W` is offset `r` of bucket `k`, so the bucket has left iff
//! `(m − 1)·s ≤ r`; the check then counts `tail(1)` (`CounterRule::has_left`).
//!
//! - **Recording** ([`Ring::record_mark`]): an admission judged at bucket `k = front`, `r` into
//!   it, raises slot `k`'s mark to `⌈r / s⌉ + 1` by CAS (keeping tag and snapshot, and only if
//!   the tag is still `k`) *before* its CAS on `cum`; a mark already that high is left alone
//!   (a load of a line the check has in cache, and no store: at most 255 writes per bucket).
//!   A check's reservation records its mark when it is committed ([`Ring::commit_marked`], the
//!   mark carried in its ticket), before the commit's CAS, so a released reservation leaves
//!   none. A fill establishes a slot with mark 0; a refund's raise keeps the mark.
//! - **Why a bucket is never dropped while a unit of it is in the window.** Take a check that
//!   reads `cum` = `c`, then slot `k` (tag `k`) with mark `m`, and drops bucket `k`: it counts
//!   `c − snap[k + 1]`, so the units it leaves out are those counted at or before `snap[k + 1]`,
//!   in buckets `≤ k`. A unit counted in a bucket `j < k`, or in `k` though its clock read an
//!   earlier bucket (it landed after bucket `k` started, see "Why Strict never
//!   over-admits"), was read before `start(k) ≤ t − W`. A unit counted in `k` whose clock read
//!   bucket `k` was judged at `front = k`, and raised slot `k`'s mark to cover its offset
//!   while the tag was `k` before its Release CAS on `cum`; the check's Acquire load of `cum`
//!   read that CAS or a later one (all writes of `cum` are read-modify-writes, so they continue
//!   its release sequence), so its load of slot `k` sees that raise or a later value: a higher
//!   mark, a refund's raise (which keeps it), or another tag (the reading tears). A mark found
//!   high enough, not written, is seen too: the admission's load read a write that the check's
//!   load, happening after it, cannot precede (read-read coherence). So `m` covers the unit's
//!   offset, and `(m − 1)·s ≤ r` puts it at or before `t − W`: outside the window. A unit
//!   that recorded a mark into a recycled slot (tag not `k`) finds a fill in progress from a
//!   `front` it no longer shares: its CAS, if it lands, lands in a bucket after its clock's.
//! - **What concurrency can cost.** A mark is raised before the CAS that may then be lost, and
//!   the admission re-judged and denied: the mark stays and keeps its bucket counted longer
//!   (a spurious denial, never an admission). A bucket holding only late-landing units keeps
//!   mark 0 and is counted whole, as Strict counts it. Single-threaded neither arises, and the
//!   rule equals the reference model exactly.
//!
//! The loom models in `loom-tests/` check these claims on every interleaving of small cases
//! (`mark_racing_admission` and `mark_racing_commit` the marks').

use core::cell::Cell;
use core::marker::PhantomData;

use crate::algo::Op;
use crate::algo::sliding_counter::MAX_MARK;
use crate::decision::Decision;
use crate::sync::{AtomicU64, Backoff, Ordering};
use crate::window::cum::{
    self, COUNT, RETIRED, add_count, add_pending, commit_pending, pending_of, release_pending,
    update_reserved,
};

mod slots;

pub(crate) use slots::{COMPACT_MAX_BUCKETS, COMPACT_MAX_LIMIT, Compact, Slots, Wide};

/// How [`raise`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Raised {
    /// Every snapshot of the window, the oldest last, is at least the target; this refund
    /// raised the oldest by the units given.
    Oldest(u32),
    /// The ring moved on while raising: the slots still live are raised.
    Moved,
    /// A racing refund raised the oldest snapshot to the target or past it: this one freed
    /// nothing (its raises of newer snapshots are covered by that one's).
    Lost,
}

/// A window's state (see the module documentation), viewed where its owner keeps it: a
/// keyed entry packs `front`, `goal`, `cum` and the `N + 1` slots inline after its key
/// ([`packed`]: one allocation, one cache miss fewer at a million keys); a direct
/// limiter gives `cum` a cache line of its own ([`Ring::from_parts`]). `S` is how the
/// slots are encoded ([`Slots`]: [`Wide`] or [`Compact`]).
#[derive(Clone, Copy)]
pub(crate) struct Ring<'a, S = Wide> {
    front: &'a AtomicU64,
    goal: &'a AtomicU64,
    cum: &'a AtomicU64,
    /// `N`, the number of buckets in a window; the ring has `N + 1` slots.
    buckets: u64,
    /// The words holding the slots (see [`Slots`]).
    slots: &'a [AtomicU64],
    encoding: PhantomData<S>,
}

impl<S: Slots> Ring<'_, S> {
    /// The number of words a packed ring of `buckets` (N) buckets needs: `front`, `goal`,
    /// `cum` and the slots' words.
    pub(crate) fn words(buckets: u64) -> usize {
        3 + S::words(buckets + 1)
    }

    /// The initial value of word `i` of a packed ring of `buckets` buckets that has admitted
    /// nothing: `front = goal = R`, `cum = 0`, then the slots' words (see
    /// [`Ring::initial_slot`]).
    pub(crate) fn initial(buckets: u64, i: usize) -> u64 {
        match i {
            0 | 1 => buckets + 1,
            2 => 0,
            _ => S::initial_word(i - 3, buckets + 1, |s| {
                Ring::<S>::initial_slot(buckets, s as usize)
            }),
        }
    }

    /// The initial value of slot `s` of a fresh ring of `buckets` buckets. Internal bucket
    /// index = t / G + R, so `b − N ≥ 1` never underflows; the ring starts established at
    /// front = R, holding buckets 1 ..= R with snapshot 0.
    pub(crate) fn initial_slot(buckets: u64, s: usize) -> u64 {
        let len = buckets + 1;
        S::pack(if s == 0 { len } else { s as u64 }, 0)
    }
}

/// Where a ring's words are: `front`, `goal`, `cum`, then the words holding the slots.
pub(crate) type Parts<'a> = (&'a AtomicU64, &'a AtomicU64, &'a AtomicU64, &'a [AtomicU64]);

impl<'a, S: Slots> Ring<'a, S> {
    /// The ring of `buckets` buckets on `parts`: a keyed entry's words packed after its key
    /// ([`packed`]), or a direct limiter's, wherever it put them (initialised as
    /// [`Ring::initial`] says, `cum` with `front = goal = N + 1` and the slots' words after).
    #[inline]
    pub(crate) fn from_parts((front, goal, cum, slots): Parts<'a>, buckets: u64) -> Ring<'a, S> {
        Ring {
            front,
            goal,
            cum,
            buckets,
            slots,
            encoding: PhantomData,
        }
    }
}

/// The parts of a ring packed in `words` (at least [`Ring::words`] of them, initialised by
/// [`Ring::initial`]). The offsets are constants: computed from a runtime layout flag, the
/// extra instructions on a keyed check were enough to stop the processor overlapping one
/// check's cache misses with the next one's (`keyed_allowed` at a million keys).
#[inline]
pub(crate) fn packed(words: &[AtomicU64]) -> Parts<'_> {
    let (head, slots) = words.split_at(3);
    (&head[0], &head[1], &head[2], slots)
}

/// The `cum` a judgement was made on, returned by [`Ring::read`] for [`Ring::try_charge`] and
/// [`Ring::try_reserve`]. Only the word, not the whole [`Reading`]: moving the reading out of
/// `read` went through the stack with store-forwarding stalls.
#[derive(Clone, Copy, Debug)]
pub(crate) struct JudgedCum(u64);

/// A reading of the ring, handed to the judge of [`Ring::read`].
pub(crate) struct Reading<'a, S = Wide> {
    ring: &'a Ring<'a, S>,
    front: u64,
    /// The internal index of the bucket judged.
    pub(crate) bucket: u64,
    /// Nanoseconds into that bucket.
    pub(crate) offset: u64,
    /// How far the clock reading lies before the time judged (0 unless it was older than
    /// bucket `front`, then judged at its start): what a decision's durations add, to be
    /// measured from the reading ([`Decision::measured_from_reading`]).
    pub(crate) lag: u64,
    /// `cum` as read.
    pub(crate) cum: u64,
    /// The slot of bucket `front − N`, as read after `cum`.
    oldest: u64,
    torn: Cell<bool>,
}

impl<S: Slots> Reading<'_, S> {
    /// The cost admitted in buckets `b − N + j ..= b`, counting pending reservations as
    /// admitted in bucket `b` (see "The `cum` word").
    #[inline]
    pub(crate) fn tail(&self, j: u64) -> u64 {
        let k = self.bucket - self.ring.buckets + j;
        if k > self.front {
            // Nothing is counted in a bucket newer than `front`; only pending cost is in `b`.
            return if k > self.bucket {
                0
            } else {
                pending_of(self.cum)
            };
        }
        let slot = if k == self.front - self.ring.buckets {
            self.oldest
        } else {
            // Acquire: pairs with the Release of the slot's establishing CAS.
            self.ring.load_slot(k, Ordering::Acquire)
        };
        // Not clean: another bucket's snapshot, or one above the count, torn only if a refund
        // raised it past this reading's count.
        if !clean::<S>(slot, k, self.cum) && (S::tag_of(slot) != S::tag(k) || self.raised_past()) {
            self.torn.set(true);
            return 0;
        }
        tail_from::<S>(self.cum, slot)
    }

    /// The last-admission mark of bucket `b − N + j` (0 for a bucket newer than `front`, where
    /// nothing is counted). A slot of another bucket tears the reading, as in
    /// [`Reading::tail`].
    #[inline]
    pub(crate) fn mark(&self, j: u64) -> u64 {
        let k = self.bucket - self.ring.buckets + j;
        if k > self.front {
            return 0;
        }
        let slot = if k == self.front - self.ring.buckets {
            self.oldest
        } else {
            // Acquire: as in `Reading::tail`.
            self.ring.load_slot(k, Ordering::Acquire)
        };
        if S::tag_of(slot) != S::tag(k) {
            self.torn.set(true);
            return 0;
        }
        S::mark_of(slot)
    }

    /// Records an admission judged on this reading, at its offset, in the mark of its
    /// bucket (which is `front`: charges are judged there), before the caller's CAS makes
    /// the cost visible; returns the bucket's mark with it. See [`Ring::record_mark`].
    #[inline]
    pub(crate) fn record_mark(&self, step: u64) -> u64 {
        self.ring.record_mark(self.bucket, self.offset, step)
    }

    /// What a reservation judged on this reading must record in its bucket's mark when it is
    /// committed (see [`Ring::commit_marked`]): the bucket's tag and the mark of this
    /// reading's offset (at least 1, so a ticket is never 0, which is no mark).
    #[inline]
    pub(crate) fn mark_ticket(&self, step: u64) -> u64 {
        (u64::from(S::tag(self.bucket)) << 8) | (self.offset.div_ceil(step) + 1)
    }

    /// Whether a snapshot that looks later than this reading's count was raised by a refund
    /// past it (see "Refunds"): only possible if the count has moved since it was read.
    #[cold]
    fn raised_past(&self) -> bool {
        // Acquire: as `read`'s load of `cum`.
        self.ring.cum.load(Ordering::Acquire) as u32 != self.cum as u32
    }
}

/// What [`Ring::fast_read`] loaded, for [`Ring::read_from`] to go on from: the first clock
/// reading, then `front`, `cum` and the oldest snapshot of `front`'s window, as `read` loads
/// them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Loads {
    t: u64,
    front: u64,
    cum: u64,
    oldest: u64,
}

// SAFETY: four `u64` fields, nothing else: 32 bytes, 8-aligned, no padding.
unsafe impl crate::sync::Words for Loads {}

/// What [`Ring::fast_read`] read: the window at bucket `front`.
pub(crate) struct Fast<'a, S = Wide> {
    ring: &'a Ring<'a, S>,
    loads: Loads,
    /// Nanoseconds into bucket `front`.
    pub(crate) offset: u64,
    /// The window's count, `tail(0)`.
    pub(crate) sum: u64,
}

impl<S: Slots> Fast<'_, S> {
    /// `tail(1)`, the count without the oldest bucket; `None` if that snapshot is torn or
    /// raised (the caller takes the general path).
    #[inline(always)]
    pub(crate) fn rest(&self) -> Option<u64> {
        let (front, cum) = (self.loads.front, self.loads.cum);
        let k = front - self.ring.buckets + 1;
        // Acquire: as in `Reading::tail`.
        let slot = self.ring.load_slot(k, Ordering::Acquire);
        clean::<S>(slot, k, cum).then(|| tail_from::<S>(cum, slot))
    }

    /// The bucket this reading is at, `front`.
    #[inline(always)]
    pub(crate) fn front(&self) -> u64 {
        self.loads.front
    }

    /// The index of the slot of bucket `front − N`, the oldest, for [`Fast::tail_from_oldest`].
    #[inline(always)]
    pub(crate) fn oldest_index(&self) -> usize {
        self.ring.index(self.loads.front - self.ring.buckets)
    }

    /// `tail(j)` for `1 ≤ j ≤ N` (the count of buckets `front − N + j ..= front`), given the
    /// index of the oldest bucket's slot ([`Fast::oldest_index`]); `None` if its snapshot is
    /// torn or raised (the caller takes the general path).
    #[inline(always)]
    pub(crate) fn tail_from_oldest(&self, oldest_at: usize, j: u64) -> Option<u64> {
        let (front, cum) = (self.loads.front, self.loads.cum);
        let len = self.ring.buckets as usize + 1;
        // `j ≤ N < N + 1`, so one subtraction wraps it into the ring.
        let at = oldest_at + j as usize;
        let at = if at >= len { at - len } else { at };
        // Acquire: as in `Reading::tail`.
        let slot = S::load(self.ring.slots, at, Ordering::Acquire);
        let k = front - self.ring.buckets + j;
        clean::<S>(slot, k, cum).then(|| tail_from::<S>(cum, slot))
    }

    /// The index of the slot of bucket `front`, for [`Fast::rest_at`] and
    /// [`Fast::current_at`].
    #[inline(always)]
    pub(crate) fn front_index(&self) -> usize {
        self.ring.index(self.loads.front)
    }

    /// [`Fast::rest`], given the index of bucket `front`'s slot ([`Fast::front_index`]).
    #[inline(always)]
    pub(crate) fn rest_at(&self, front_at: usize) -> Option<u64> {
        let (front, cum) = (self.loads.front, self.loads.cum);
        let k = front - self.ring.buckets + 1;
        // Bucket `front − N + 1 ≡ front + 2` in a ring of `N + 1 ≥ 2` slots: its index
        // without a second division.
        let len = self.ring.buckets as usize + 1;
        let at = if front_at + 2 >= len {
            front_at + 2 - len
        } else {
            front_at + 2
        };
        // Acquire: as in `Reading::tail`.
        let slot = S::load(self.ring.slots, at, Ordering::Acquire);
        clean::<S>(slot, k, cum).then(|| tail_from::<S>(cum, slot))
    }

    /// `tail(N)`, the count of the current bucket, `front`, given the index of its slot
    /// ([`Fast::front_index`]); `None` if its snapshot is torn or raised (the caller takes
    /// the general path).
    #[inline(always)]
    pub(crate) fn current_at(&self, front_at: usize) -> Option<u64> {
        let (front, cum) = (self.loads.front, self.loads.cum);
        // Acquire: as in `Reading::tail`.
        let slot = S::load(self.ring.slots, front_at, Ordering::Acquire);
        clean::<S>(slot, front, cum).then(|| tail_from::<S>(cum, slot))
    }

    /// Whether `front` is still the one this reading loaded: the re-check that makes a
    /// reading consistent, as [`Ring::read`] makes it after its judgement. A denial judged on
    /// this reading returns only if it holds, so that it was made on exactly what `read`
    /// would have handed its judge.
    #[inline(always)]
    pub(crate) fn unmoved(&self) -> bool {
        // Acquire: as `read`'s re-check of `front`.
        self.ring.front.load(Ordering::Acquire) == self.loads.front
    }

    /// The last-admission mark of the oldest bucket, `front − N`, loaded with its snapshot.
    #[inline(always)]
    pub(crate) fn oldest_mark(&self) -> u64 {
        S::mark_of(self.loads.oldest)
    }

    /// Records this admission's mark, as [`Reading::record_mark`] does, in bucket `front`,
    /// whose slot precedes the oldest's in the ring.
    #[inline(always)]
    pub(crate) fn record_mark(&self, step: u64) -> u64 {
        let front = self.loads.front;
        record_mark_in(self.ring.slot(front), front, self.offset, step)
    }

    /// The loads this reading was made of, for [`Ring::read_from`] when the caller declines
    /// to charge it.
    #[inline(always)]
    pub(crate) fn loads(&self) -> Loads {
        self.loads
    }

    /// Charges `cost` judged on this reading, as [`Ring::read`] and [`Ring::try_charge`] do:
    /// `false`, having written nothing, if `front` moved since or the CAS lost. The re-check
    /// of `front` is `read`'s, kept so that this stays `read`'s protocol step for step; no
    /// loom model fails without it here, as every slot this reading used was loaded and
    /// tag-checked before the judgement, and an admission landing after a newer snapshot is
    /// counted in the newer bucket, which only errs toward denial ("Why Strict never
    /// over-admits").
    #[inline(always)]
    pub(crate) fn charge(&self, cost: u64) -> bool {
        // Acquire: as `read`'s re-check of `front`.
        self.ring.front.load(Ordering::Acquire) == self.loads.front
            && self.ring.try_charge(JudgedCum(self.loads.cum), cost)
    }
}

/// A tail of a [`Fast`] reading that its denial loads only if the judgement asks for it
/// ([`CounterRule::strict_denied_fast`](crate::algo::sliding_counter::CounterRule::strict_denied_fast)):
/// `tail(N)`, the current bucket's, if `CURRENT`, else `tail(1)`, given the index of bucket
/// `front`'s slot. Its load is always inlined, where a closure's was called out of line.
#[derive(Clone, Copy)]
pub(crate) struct FastTail<'f, 'a, S, const CURRENT: bool> {
    pub(crate) fast: &'f Fast<'a, S>,
    pub(crate) front_at: usize,
}

impl<S: Slots, const CURRENT: bool> crate::algo::sliding_counter::Tail
    for FastTail<'_, '_, S, CURRENT>
{
    #[inline(always)]
    fn load(self) -> Option<u64> {
        if CURRENT {
            self.fast.current_at(self.front_at)
        } else {
            self.fast.rest_at(self.front_at)
        }
    }
}

/// The tails of a [`Fast`] reading, `tail(j)` for `1 ≤ j ≤ N`, given the index of its oldest
/// bucket's slot ([`Fast::oldest_index`]).
#[derive(Clone, Copy)]
pub(crate) struct FastTails<'f, 'a, S> {
    pub(crate) fast: &'f Fast<'a, S>,
    pub(crate) oldest_at: usize,
}

impl<S: Slots> crate::algo::sliding_counter::Tails for FastTails<'_, '_, S> {
    #[inline(always)]
    fn tail(self, j: u64) -> Option<u64> {
        self.fast.tail_from_oldest(self.oldest_at, j)
    }
}

/// Whether `slot` is bucket `k`'s snapshot at or below the count of `cum`, so that a tail is
/// counted from it ([`tail_from`]). [`Reading::tail`] looks further into a slot that is not
/// (it may be raised by a refund); the fast path leaves that to the general one.
#[inline]
fn clean<S: Slots>(slot: u64, k: u64, cum: u64) -> bool {
    S::tag_of(slot) == S::tag(k) && S::at_or_after(S::count(cum), S::snapshot_of(slot))
}

/// The cost counted since `slot`'s snapshot, plus pending: a tail, if `slot` is clean.
#[inline]
fn tail_from<S: Slots>(cum: u64, slot: u64) -> u64 {
    // `cum` of a reading is never retired, so its high bits are the pending field.
    u64::from(S::since(S::count(cum), S::snapshot_of(slot))) + pending_of(cum)
}

/// One slot of a ring: what [`Slots`] makes of slot `i` of `words`.
#[derive(Clone, Copy)]
struct Slot<'a, S> {
    words: &'a [AtomicU64],
    i: usize,
    encoding: PhantomData<S>,
}

impl<S: Slots> Slot<'_, S> {
    #[inline(always)]
    fn load(self, order: Ordering) -> u64 {
        S::load(self.words, self.i, order)
    }

    #[inline(always)]
    fn compare_exchange(
        self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        S::compare_exchange(self.words, self.i, current, new, success, failure)
    }
}

/// The largest clock reading the ring tells apart (ns, about 292 years); later ones count
/// as it.
pub(crate) const MAX_READING: u64 = (1 << 63) - 1;

impl<S: Slots> Ring<'_, S> {
    #[inline]
    fn slot(&self, bucket: u64) -> Slot<'_, S> {
        Slot {
            words: self.slots,
            i: self.index(bucket),
            encoding: PhantomData,
        }
    }

    /// Bucket `bucket`'s slot, loaded.
    #[inline(always)]
    fn load_slot(&self, bucket: u64, order: Ordering) -> u64 {
        S::load(self.slots, self.index(bucket), order)
    }

    /// The index of bucket `bucket`'s slot.
    #[inline]
    fn index(&self, bucket: u64) -> usize {
        // A plain remainder: a multiply-based one (Lemire's fastmod) is no faster here
        // (`check`) and costs 32 bytes per ring.
        (bucket % (self.buckets + 1)) as usize
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

    /// The three loads a reading at clock reading `t` starts with.
    #[inline(always)]
    fn load(&self, t: u64) -> Loads {
        // Acquire: pairs with the Release of the CAS that published `front`, so every
        // snapshot at or below it is visible.
        let front = self.front.load(Ordering::Acquire);
        // Acquire: pairs with the Release of admissions, so an admission we count here was
        // judged at a bucket no newer than a `front` our later loads see.
        let cum = self.cum.load(Ordering::Acquire);
        // The oldest slot of the window of bucket `front`, the one a check almost always
        // needs. Acquire: pairs with the Release of the slot's establishing CAS.
        let oldest = self.load_slot(front - self.buckets, Ordering::Acquire);
        Loads {
            t,
            front,
            cum,
            oldest,
        }
    }

    /// Reads the ring consistently at time `now()`, hands the reading to `judge`, and returns
    /// what it returned with the reading (to charge with [`Ring::try_charge`]). When
    /// `establish` is set the ring is first moved to the bucket of `now`, as an admission
    /// needs; otherwise (a peek) nothing is written. `None` if the ring is retired: the
    /// caller must find the key's live ring instead.
    #[inline]
    pub(crate) fn read<T>(
        &self,
        granularity: u64,
        now: impl Fn() -> u64,
        establish: bool,
        judge: impl FnMut(&Reading<'_, S>) -> T,
    ) -> Option<(T, JudgedCum)> {
        self.read_from(None, granularity, now, establish, judge)
    }

    /// [`Ring::read`], whose first pass uses `loads` (made by
    /// [`Ring::fast_read`], exactly as this loop makes them) instead of making its own.
    #[inline]
    pub(crate) fn read_from<T>(
        &self,
        mut loads: Option<Loads>,
        granularity: u64,
        now: impl Fn() -> u64,
        establish: bool,
        mut judge: impl FnMut(&Reading<'_, S>) -> T,
    ) -> Option<(T, JudgedCum)> {
        let mut t = loads.map(|loads| loads.t);
        let mut reread = false;
        loop {
            // The clock first: read between the load of `cum` and its CAS it would widen the
            // window in which another thread's admission fails this one's CAS
            // (`contended_2_threads`).
            // Readings count as at most `MAX_READING`, where time stops for the ring: from
            // a reading near `u64::MAX`, 1 ns buckets overflowed the bucket arithmetic. The
            // fast path needs no clamp: it takes a reading only within bucket `front` (an
            // offset below G), and does no bucket arithmetic with it.
            let now_t = (*t.get_or_insert_with(&now)).min(MAX_READING);
            let Loads {
                front, cum, oldest, ..
            } = match loads.take() {
                Some(loads) => loads,
                None => self.load(now_t),
            };
            if cum & RETIRED != 0 {
                return None;
            }
            let (mut bucket, mut offset) = self.locate(now_t, granularity, front);
            let mut lag = 0;
            if bucket < front {
                // Someone read a later time. Read the clock again once; if it is still behind
                // (a clock set backwards, or the ring moved on again while we re-read: another
                // thread read a time in that bucket), judge at the start of the newest bucket.
                if !reread {
                    t = None;
                    reread = true;
                    continue;
                }
                (bucket, offset) = (front, 0);
                // Bucket `front` starts at `(front − N − 1)·G`, after `now_t`.
                lag = (front - self.buckets - 1)
                    .wrapping_mul(granularity)
                    .wrapping_sub(now_t);
            }
            if bucket > front && establish {
                self.advance(bucket);
                continue;
            }
            let reading = Reading {
                ring: self,
                front,
                bucket,
                offset,
                lag,
                cum,
                oldest,
                torn: Cell::new(false),
            };
            let verdict = judge(&reading);
            // Acquire: any fill that overwrote a slot we read published a later `front`.
            if !reading.torn.get() && self.front.load(Ordering::Acquire) == front {
                return Some((verdict, JudgedCum(cum)));
            }
            // The ring moved under us: a fill is in progress or done. Help it finish, then
            // retry (and, being behind now, read the clock again).
            self.help(front);
            (t, reread) = (None, false);
        }
    }

    /// One decision on this ring: reads it at `now()`, asks `judge`, and applies `op` — a
    /// peek or a reservation — to an allowed cost `n`, re-judging whenever its CAS is lost.
    /// Charges go through [`counter`](super::counter), the same loop specialised to a charge,
    /// which keeps the check paths small enough to be inlined. `None` if the ring is retired.
    /// `judge` returns the decision with a ticket, returned with it.
    #[inline]
    pub(crate) fn decide(
        &self,
        granularity: u64,
        now: impl Fn() -> u64,
        n: u64,
        op: Op,
        judge: impl Fn(&Reading<'_, S>) -> (Decision, u64),
    ) -> Option<(Decision, u64)> {
        debug_assert!(
            op != Op::Charge,
            "charges go through the counter's own loop"
        );
        let reserve = op == Op::Reserve;
        let backoff = Backoff::new();
        loop {
            // A reservation first moves the ring to the bucket of now; a peek writes nothing.
            let (verdict, judged) = self.read(granularity, &now, reserve, &judge)?;
            if !verdict.0.is_allowed() || !reserve || self.try_reserve(judged, n) {
                return Some(verdict);
            }
            // Lost the CAS to a concurrent admission (or a retirement): judge again.
            backoff.spin();
        }
    }

    /// Raises the mark of bucket `k` to cover an admission `offset` ns into it (marks count
    /// steps of `step` ns, rounded up), unless it covers it already; returns the mark then
    /// held (see "Last-admission marks"). Called after the admission was judged at bucket
    /// `k = front` and before its CAS on `cum`. Writes only when the mark changes, at most
    /// `MAX_MARK` times per bucket.
    #[inline(always)]
    pub(crate) fn record_mark(&self, k: u64, offset: u64, step: u64) -> u64 {
        record_mark_in(self.slot(k), k, offset, step)
    }

    /// Adds `cost` to `cum` if it still holds the value of `reading`: the admission. Fails
    /// (the caller re-reads) if anything was admitted since, or if the ring was retired.
    #[inline]
    pub(crate) fn try_charge(&self, seen: JudgedCum, cost: u64) -> bool {
        // The count wraps within its 32 bits, never carrying into pending.
        let next = add_count(seen.0, cost);
        // Release: publishes the admission after the snapshots its judgement used (see
        // `read`). Acquire on failure is not needed; the caller re-reads.
        self.cum
            .compare_exchange_weak(seen.0, next, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// The common case of a reading, in as few instructions as the protocol allows: `now()`
    /// falls in bucket `front` and the oldest snapshot belongs to the window of `front`. On
    /// anything else — a bucket to establish, a fill in progress, a torn or raised snapshot, a
    /// retired ring — it returns what it loaded, having written nothing, for the caller to
    /// hand to [`Ring::read_from`], the general path, which goes on from those loads. The
    /// caller judges a [`Fast`] reading and, to admit, charges it with [`Fast::charge`]; to
    /// decline it hands [`Fast::loads`] on the same way.
    ///
    /// With `Fast::charge` it is [`Ring::read`] and [`Ring::try_charge`] specialised to that
    /// case, step for step: the same loads in the same order with the same orderings, the same
    /// check that `front` did not move before the CAS, the same CAS, so every argument made
    /// for `read` holds; and as the general path resumes from its loads rather than
    /// repeating them, a check makes the same atomic accesses as before the fast path existed
    /// (but for a Weighted or fixed-window decline, which loads its second snapshot twice, a
    /// retired ring, whose oldest snapshot is now loaded before the retirement is seen, and a
    /// denial, which `counter::deny_strict` or `counter::deny_fast` judges from these loads,
    /// the second and newest snapshots and `front` again, as `read` would, and returns), so
    /// the loom models of rotation, which explore every interleaving of them, stay as small.
    /// It exists for speed: the general path's loop and judgement cost an allowed check about
    /// twice the instructions (`check_allowed`).
    #[inline(always)]
    pub(crate) fn fast_read(
        &self,
        granularity: u64,
        now: impl Fn() -> u64,
    ) -> Result<Fast<'_, S>, Loads> {
        let loads = self.load(now());
        self.fast_from(granularity, loads).ok_or(loads)
    }

    /// The [`Fast`] reading made of `loads` (from [`Ring::fast_read`], as it loads them), if
    /// they meet its conditions.
    #[inline(always)]
    pub(crate) fn fast_from(&self, granularity: u64, loads: Loads) -> Option<Fast<'_, S>> {
        let Loads {
            t,
            front,
            cum,
            oldest,
        } = loads;
        let first = front - self.buckets;
        // `locate`'s common case: `t` in bucket `front`, which starts at `(front − N − 1)·G`.
        let offset = t.wrapping_sub((first - 1).wrapping_mul(granularity));
        (offset < granularity && cum & RETIRED == 0 && clean::<S>(oldest, first, cum)).then(|| {
            Fast {
                ring: self,
                loads,
                offset,
                // `tail(0)` at bucket `front`.
                sum: tail_from::<S>(cum, oldest),
            }
        })
    }

    /// Adds `cost` to pending if `cum` still holds the value of `reading`: a reservation
    /// judged on that reading. Fails (the caller re-reads) like [`Ring::try_charge`].
    #[inline]
    pub(crate) fn try_reserve(&self, seen: JudgedCum, cost: u64) -> bool {
        // Pending stays ≤ the limit judged with it (< 2³¹), so this does not reach `RETIRED`.
        let next = add_pending(seen.0, cost);
        // Release: as in `try_charge`, a reservation is judged on the snapshots it read.
        self.cum
            .compare_exchange_weak(seen.0, next, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Turns a reservation of `cost` into an admission: `count += cost, pending −= cost` in
    /// one CAS. `false` if the ring was retired (forcibly: an idle retirement needs no
    /// pending), in which case nothing is written.
    pub(crate) fn commit(&self, cost: u64) -> bool {
        update_reserved(self.cum, |cum| commit_pending(cum, cost))
    }

    /// [`Ring::commit`], which for Strict with marks first records the mark `ticket` carries
    /// (made by [`Reading::mark_ticket`] when the reservation was judged; 0 for the other
    /// rules, and then nothing is recorded) in its bucket, if that
    /// bucket is still `front`, so that a released reservation leaves no mark behind. If
    /// `front` moved on, the commit lands in a bucket newer than the reservation's clock
    /// reading, where no mark is needed (and a tag that aliases after a jump of 2²⁴ buckets
    /// only raises a newer bucket's mark: it keeps that bucket longer, never shorter).
    pub(crate) fn commit_marked(&self, cost: u64, ticket: u64) -> bool {
        if ticket != 0 {
            // Acquire: as `load`'s, so that the slot of `front` is established.
            let front = self.front.load(Ordering::Acquire);
            if S::tag(front) == (ticket >> 8) as u32 {
                let slot = self.slot(front);
                // Relaxed: as in `record_mark_in`; the commit's CAS on `cum` follows.
                let seen = slot.load(Ordering::Relaxed);
                let mark = ticket & u64::from(MAX_MARK);
                if S::mark_of(seen) < mark {
                    raise_mark(slot, front, seen, mark);
                }
            }
        }
        self.commit(cost)
    }

    /// Gives back a reservation of `cost`: `pending −= cost`; the count is untouched, so no
    /// snapshot ever saw the reservation. Does nothing on a retired ring.
    pub(crate) fn release(&self, cost: u64) {
        update_reserved(self.cum, |cum| release_pending(cum, cost));
    }

    /// Frees up to `n` units of room now by expiring the oldest units counted in buckets
    /// `b − N + skip(reading) ..= b` of the window of `now()` (`skip` is 0 for the
    /// sliding-window counter, 1 for Strict with marks when its oldest bucket has left, `N`
    /// for the fixed window, which counts bucket `b` alone); returns how many (see
    /// "Refunds"). `None` if the ring is retired.
    pub(crate) fn refund(
        &self,
        granularity: u64,
        now: impl Fn() -> u64,
        n: u64,
        skip: impl Fn(&Reading<'_, S>) -> u64,
    ) -> Option<u64> {
        let backoff = Backoff::new();
        // At most 2³¹ − 1 per raise, so a stale reader always sees a raised snapshot as later
        // than its count (`Reading::tail`); a Weighted window can hold up to about twice a
        // limit, so a refund may take more than one raise (capping `n` itself freed at most
        // 2³¹ − 1 of a window holding 2³² − 5).
        let mut left = n;
        let mut freed = 0;
        while left > 0 {
            let read = self.read(granularity, &now, true, |r| {
                let skip = skip(r);
                // Count only: pending reservations are not refundable.
                // Saturating: a torn reading may show less than pending; `read` retries it.
                let counted = r.tail(skip).saturating_sub(pending_of(r.cum));
                // The snapshot of the oldest bucket refunded from: `tail(skip)` is the count
                // less that snapshot (for `skip = 0`, the slot `read` already loaded).
                let from = if skip == 0 {
                    S::snapshot_of(r.oldest)
                } else {
                    S::since(S::count(r.cum), counted as u32)
                };
                (r.front, from, counted, skip)
            });
            let Some(((front, from, counted, skip), _)) = read else {
                // Retired. Once this refund's own raises have emptied the window, an idle
                // retirement may come next: what was freed stays freed (the successor state is
                // fresh), so report it rather than "retired".
                return (freed > 0).then_some(freed);
            };
            let raise = left.min(counted).min(S::MAX_RAISE);
            if raise == 0 {
                break;
            }
            let to = S::ahead(from, raise as u32);
            // The barrier: a no-op CAS on `goal`, possible only while no fill from `front`
            // is claimed. AcqRel: every later claim reads from it (all writes of `goal` are
            // read-modify-writes), so every later fill reads a `cum` no older than ours and
            // establishes snapshots at or above `to`: snapshots stay monotone.
            if self
                .goal
                .compare_exchange(front, front, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                self.help(front);
                continue;
            }
            match self.raise(front - self.buckets + skip, front, to) {
                Raised::Oldest(units) => {
                    freed += u64::from(units);
                    left -= u64::from(units);
                }
                // The ring moved on: the units meant were expired, by us or by time.
                Raised::Moved => return Some(freed + raise),
                // Another refund raised the oldest snapshot first: judge again.
                Raised::Lost => backoff.spin(),
            }
        }
        Some(freed)
    }

    /// Raises the snapshots of buckets `oldest ..= front`, newest first, to at least `to`:
    /// [`raise`] on this ring's slots.
    fn raise(&self, oldest: u64, front: u64, to: u32) -> Raised {
        raise::<S>(self.slots, self.buckets + 1, oldest, front, to)
    }

    /// The total cost ever admitted (wrapping at 2³²).
    pub(crate) fn admitted(&self) -> u64 {
        // Acquire: pairs with the Release of admissions, for callers that read after joining.
        self.cum.load(Ordering::Acquire) & COUNT
    }

    /// `N`, the number of buckets in this ring's window.
    #[inline]
    pub(crate) fn buckets(&self) -> u64 {
        self.buckets
    }

    /// Whether the ring is retired.
    pub(crate) fn is_retired(&self) -> bool {
        cum::is_retired(self.cum)
    }

    /// Whether a reservation of a `check_all` is pending on the ring.
    pub(crate) fn holds_reservation(&self) -> bool {
        cum::holds_reservation(self.cum)
    }

    /// The start (ns) of the newest bucket in which anything may have been admitted: a
    /// recency for least-recently-used choices. Peeks do not move it.
    pub(crate) fn last_active(&self, granularity: u64) -> u64 {
        // Relaxed: a heuristic; a stale value only makes a worse eviction choice.
        let front = self.front.load(Ordering::Relaxed);
        (front - (self.buckets + 1)).saturating_mul(granularity)
    }

    /// Retires the ring if its window is empty at `now` and at every later time, so that it
    /// answers exactly as a fresh ring would; `true` if this call retired it. See the module
    /// documentation for why no admission can be lost.
    pub(crate) fn retire_idle(&self, granularity: u64, now: u64) -> bool {
        // A consistent reading at `now` (at `front` if `now` is older), writing nothing: the
        // window counts nothing, pending included. Judged on the window's contents, not on
        // `front` alone: a denial establishes its bucket too, and a ring whose last
        // admission had left the window was kept a whole window after its last denial.
        let Some((empty, seen)) = self.read(granularity, || now, false, |r| r.tail(0) == 0) else {
            return false;
        };
        // AcqRel: success proves nothing was admitted or reserved since the reading's `cum`
        // was loaded; the Release orders the retirement before the store's unlinking of the
        // entry that follows.
        empty
            && self
                .cum
                .compare_exchange(
                    seen.0,
                    seen.0 | RETIRED,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Retires the ring whatever it holds; `true` if this call retired it. Admissions counted
    /// in it are forgotten; none made after it is charged to it.
    pub(crate) fn retire_now(&self) -> bool {
        cum::retire_now(self.cum)
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
                let goal = goal_for::<S>(front, bucket, self.buckets);
                // AcqRel: the claim is read by helpers with Acquire; nothing else rides on it.
                let _ =
                    self.goal
                        .compare_exchange(front, goal, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }

    /// Helps every fill in progress to its end, and returns a `front` from which no fill
    /// was claimed when `goal` was loaded. On a retired ring (the inline table's freeze,
    /// `keyed::inline::slot`) only a check that read `cum` before the retirement can claim
    /// one more fill; a live ring's callers would race new claims.
    pub(crate) fn settle(&self) -> u64 {
        loop {
            // Acquire: as `advance`'s.
            let front = self.front.load(Ordering::Acquire);
            if !self.help(front) {
                return front;
            }
        }
    }

    /// Whether no fill has been claimed from `front` (`goal` and then `front` still hold
    /// it): `goal` grows only by a claim and never comes back, so a claim whose fill wrote a
    /// slot this thread has since loaded (Acquire) is seen here.
    pub(crate) fn settled_at(&self, front: u64) -> bool {
        // Acquire: pairs with the claim's Release (through the helper's slot CAS that a
        // caller's earlier load read), so that load's claim is not missed.
        self.goal.load(Ordering::Acquire) == front && self.front.load(Ordering::Acquire) == front
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
        let mut snapshot = S::count(self.cum.load(Ordering::Acquire));
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
                if S::tag_of(seen) == S::tag(k) {
                    // Established by another helper; keep snapshots monotone.
                    snapshot = S::later(snapshot, S::snapshot_of(seen));
                    break;
                }
                // `seen` is stale (tag in `front − N ..= front`). AcqRel: Release publishes
                // the `cum` read behind `snapshot` before any admission at bucket `k`.
                if slot
                    .compare_exchange(
                        seen,
                        S::pack(k, snapshot),
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
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

/// Raises the snapshots of buckets `oldest ..= front` of the ring whose `len` slots are in
/// `words`, newest first, to at least `to`;
/// the last, the oldest, must still be below `to` (its raise is the refund's moment, and
/// the refund frees what it raises it by: from the value the refund read, or from where
/// a racing refund left it, so that no raise of a newer snapshot is left unreported).
/// Two refunds racing across a bucket change froze the loser's raise of the newer
/// snapshot, unreported, when the oldest had to hold exactly the value read
/// (`loom-tests/tests/refund_racing_refund.rs`).
pub(crate) fn raise<S: Slots>(
    words: &[AtomicU64],
    len: u64,
    oldest: u64,
    front: u64,
    to: u32,
) -> Raised {
    for k in (oldest..=front).rev() {
        let slot = Slot::<S> {
            words,
            i: (k % len) as usize,
            encoding: PhantomData,
        };
        // Acquire: pairs with the Release of the CAS that established or raised it.
        let mut seen = slot.load(Ordering::Acquire);
        loop {
            if S::tag_of(seen) != S::tag(k) {
                // Recycled by a fill, and so is every older slot (fills go oldest first).
                return Raised::Moved;
            }
            let snapshot = S::snapshot_of(seen);
            if k == oldest && S::later(snapshot, to) == snapshot {
                // Another refund raised the oldest to our target or past it: our raises of
                // newer slots are subsumed by its, and we freed nothing.
                return Raised::Lost;
            }
            if S::later(snapshot, to) == snapshot {
                // At or above `to` already (a newer refund, or a later fill).
                break;
            }
            // AcqRel: Release publishes the raise to readers of the slot, after the `cum`
            // read that bounds `to`; Acquire on failure as the load above.
            match slot.compare_exchange(
                seen,
                S::with_snapshot(seen, to),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                // The oldest from below `to` (from the value the refund read, or from
                // where a racing refund left it): this refund freed `to − snapshot`, and
                // no raise of ours is left above the oldest snapshot unreported.
                Ok(_) if k == oldest => return Raised::Oldest(S::since(to, snapshot)),
                Ok(_) => break,
                Err(now_seen) => seen = now_seen,
            }
        }
    }
    // Unreachable: a refund's target is above the snapshot it read, so the oldest either
    // returns `Lost` above or is raised from below it.
    Raised::Lost
}

/// [`Ring::record_mark`] on `slot`, bucket `k`'s.
#[inline(always)]
fn record_mark_in<S: Slots>(slot: Slot<'_, S>, k: u64, offset: u64, step: u64) -> u64 {
    // Relaxed: the mark reaches a checker through this admission's CAS on `cum` (Release,
    // after this in program order) and the checker's Acquire load of `cum`; a mark found
    // here already, written by another admission, is then seen by that checker too
    // (read-read coherence).
    let seen = slot.load(Ordering::Relaxed);
    let mark = S::mark_of(seen);
    // `mark ≥ ⌈offset / step⌉ + 1`.
    if mark * step >= offset + step {
        return mark;
    }
    raise_mark(slot, k, seen, offset.div_ceil(step) + 1)
}

/// [`Ring::record_mark`]'s write: raises the mark of `slot` (bucket `k`, loaded as `seen`)
/// to `mark` by CAS, keeping its tag and snapshot. A function apart, taking no `Ring`: a
/// method made the inlined check build the ring in memory for it.
#[cold]
fn raise_mark<S: Slots>(slot: Slot<'_, S>, k: u64, mut seen: u64, mark: u64) -> u64 {
    loop {
        if S::tag_of(seen) != S::tag(k) {
            // Recycled by a fill that jumps past the window of `k`: bucket `k` never
            // becomes the oldest of any reading, and a unit counted in a later bucket
            // than its clock's needs no mark there (see "Last-admission marks").
            return mark;
        }
        if S::mark_of(seen) >= mark {
            return S::mark_of(seen);
        }
        // Relaxed: as the load in `record_mark`. A failure (a racing mark, a refund's
        // raise) loads the slot again.
        match slot.compare_exchange(
            seen,
            S::with_mark(seen, mark),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return mark,
            Err(now) => seen = now,
        }
    }
}

/// Where a fill from `front` towards `bucket` goes: `bucket` itself, unless the jump is
/// more than `N` and within `N` of a multiple of `2^S::TAG_BITS` buckets (tags would alias), in which
/// case half-way round the tag space first.
pub(crate) fn goal_for<S: Slots>(front: u64, bucket: u64, buckets: u64) -> u64 {
    let gap = bucket - front;
    if gap <= buckets {
        return bucket;
    }
    let residue = S::tag(gap);
    if u64::from(residue) > buckets
        && u64::from(S::tag(u64::from(residue.wrapping_neg()))) > buckets
    {
        bucket
    } else {
        front + (1 << (S::TAG_BITS - 1))
    }
}

#[cfg(all(test, not(slidegate_loom)))]
mod tests;
