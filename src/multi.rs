//! Checks across several limits at once: every limit charged, or none.
//!
//! A request often has to pass several quotas — 10/s *and* 1000/h, per user *and* per tenant
//! — and must be charged to all of them or to none. Charging each in turn and subtracting on
//! a denial is wrong for a snapshot ring: a bucket's snapshot may be taken between the add
//! and the subtract, after which a later window undercounts by the phantom (over-admits).
//!
//! [`check_all`] instead runs a two-phase protocol on the `cum` word of each limit's ring
//! (`window/ring.rs`, "The `cum` word and reservations"):
//! 1. **Reserve**, in the order given: judge the request on the limit, counting every pending
//!    reservation as admitted, and if it is allowed add the cost to the limit's *pending*
//!    field by compare-and-swap from the value judged (re-judging on a lost CAS). A key not
//!    in its store (or whose quota changed shape) is passed over and reserved after all the
//!    others, when its entry is made: making one at `max_keys` forces another key out, and a
//!    denied call must leave no trace, in the store either. Before any is made, each is
//!    judged as a fresh state (for the sum of its entries), so only a concurrent check that
//!    makes the same key between the two passes, or a later step that errs or panics, can
//!    leave a key made (and at `max_keys` another forced out) for a call that then fails.
//! 2. If a limit denies: **release** the reservations made so far (`pending −= n`; the
//!    admitted count, and hence every snapshot, is untouched) and report the denial, every
//!    limit judged again without reserving: judged before the release, an entry would count
//!    this call's own reservations, and its `remaining` would be short by them.
//! 3. If all reserved: **commit** each (`count += n, pending −= n`, one CAS).
//!
//! The reservations are held in a guard (`Reservations`) whose drop releases any not yet
//! committed, so a panic in code of the caller's that a later entry runs (a key's `Hash` or
//! `Eq`, a `Clock`) cannot leave pending cost that nothing would ever release: the limit would
//! never regain the room, and a key with pending can never be evicted as idle. Before any of
//! this, a limit listed more than once is judged for the sum of its costs without reserving:
//! a sum above its limit is a `CostError`, not a denial to be retried forever. (Separate
//! handles of one key are recognised as one limit only if the call is denied, when the
//! denial is judged; a call they fit in is charged the same either way.)
//!
//! A reservation holds its room against every other check (plain or multi) until it is
//! committed or released, so a concurrent check may be denied for room that a multi-check
//! then gives back: a spurious denial bounded, like every other one, by the overlap of the
//! calls. Two multi-checks that take the same limits in opposite orders can deny each other
//! this way; list limits in one agreed order (say, the widest first) to avoid it.
//!
//! A keyed limit's entry is kept alive by the epoch pin of the whole call, from reservation
//! to commit or release. An idle eviction never retires an entry with a pending reservation;
//! a forced one (`max_keys`, or a quota change of shape) may, and then the reservation counts
//! as admitted before the eviction and is forgotten with the evicted key's other admissions
//! (see `window/ring.rs`).

use core::cell::OnceCell;
use core::ptr;
use core::time::Duration;
use std::panic::{self, AssertUnwindSafe};

use crate::algo::{Op, Rule};
use crate::clock::Clock;
use crate::decision::{CostError, Decision};
use crate::sync::epoch::Guard;
use crate::window::state::State;

pub(crate) mod sealed {
    use core::any::Any;
    use core::cell::OnceCell;

    use super::{Clock, CostError, Decision, Guard, Op, State};

    /// What a limit answered in [`check_all`](super::check_all): its decision for the cost,
    /// and what it did with it.
    pub struct Judged {
        /// The decision; not meaningful when [`Taken::Deferred`].
        pub(crate) decision: Decision,
        pub(crate) taken: Taken,
    }

    /// What [`Reserve::judge_cost`] did with the cost it judged.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Taken {
        /// Reserved it, pushing the reservation onto the caller's list.
        Reserved,
        /// Nothing: a judgement only, or a denial.
        Nothing,
        /// Nothing, and judged nothing: a reservation whose limit must first make its state,
        /// which may evict another key (see [`Reserve::make_and_reserve`]).
        Deferred,
    }

    impl Judged {
        /// The answer of a reservation that needs its state made first.
        pub(crate) fn deferred() -> Self {
            Judged {
                decision: Decision::allowed(0, 0, 0),
                taken: Taken::Deferred,
            }
        }
    }

    /// Pushes onto `held` the reservation of cost `n` made on `state` with `ticket`, judged
    /// at `clock`.
    #[inline]
    pub(crate) fn hold<'g>(
        held: &mut ReservedCosts<'g>,
        n: u64,
        state: State<'g>,
        ticket: u64,
        clock: &'g dyn Clock,
    ) {
        let reserved = Reserved {
            state,
            ticket,
            clock,
        };
        held.push((reserved, n));
    }

    /// The reservations a [`check_all`](super::check_all) holds, each with its cost.
    pub type ReservedCosts<'g> = Vec<(Reserved<'g>, u64)>;

    /// A reservation held by [`check_all`](super::check_all).
    #[derive(Clone, Copy)]
    pub struct Reserved<'g> {
        /// The state holding it.
        pub(crate) state: State<'g>,
        /// The algorithm's ticket for a commit or release (GCRA's; the mark of Strict with
        /// marks; a log's carries its commit stamp, set by `Reservations::commit`).
        pub(crate) ticket: u64,
        /// The limit's clock, for stamping a commit or judging a release.
        pub(crate) clock: &'g dyn Clock,
    }

    /// The protocol side of [`Limit`](super::Limit), not part of the public API.
    pub trait Reserve {
        /// Judges cost `n` now and does `op` with it: [`Op::Peek`] writes nothing;
        /// [`Op::Reserve`] reserves it if allowed, on a state that exists already — a limit
        /// that would first have to make its state (a key not in its limiter's store, or
        /// whose quota changed shape), which may evict another key, answers
        /// [`Judged::deferred`] instead, having written nothing. A reservation made is
        /// pushed onto `held` with its cost, built there rather than returned: copied out of
        /// the answer, it was read with wide loads of what had just been stored in narrower
        /// pieces, a store-forwarding stall. Its state stays alive while the epoch guard in
        /// `pin` lives (a keyed limit pins it on first use, so checks over direct limiters
        /// alone never pin).
        fn judge_cost<'g>(
            &'g self,
            n: u64,
            op: Op,
            pin: &'g OnceCell<Guard>,
            held: &mut ReservedCosts<'g>,
        ) -> Result<Judged, CostError>;

        /// Reserves cost `n` if allowed, as [`Reserve::judge_cost`] with [`Op::Reserve`]
        /// does, making the limit's state first if need be. A limit whose state always
        /// exists (a direct limiter) has nothing to make.
        fn make_and_reserve<'g>(
            &'g self,
            n: u64,
            pin: &'g OnceCell<Guard>,
            held: &mut ReservedCosts<'g>,
        ) -> Result<Judged, CostError> {
            self.judge_cost(n, Op::Reserve, pin, held)
        }

        /// For one key of a keyed limiter, the limiter's address; `None` for a limit that is
        /// an object of its own (a direct limiter), which is one limit only with itself.
        fn keyed_by(&self) -> Option<usize> {
            None
        }

        /// For one key of a keyed limiter, the key.
        fn key(&self) -> Option<&dyn Any> {
            None
        }

        /// Whether this limit is key `key` (asked only of a key handle, about a key of the
        /// same limiter, so of the same type).
        fn is_key(&self, _key: &dyn Any) -> bool {
            false
        }
    }
}

use sealed::{Judged, ReservedCosts, Taken};

/// One limit a request can be checked against with [`check_all`]: a
/// [`SlidingWindow`](crate::SlidingWindow), or one key of a
/// [`KeyedLimiter`](crate::KeyedLimiter) (made by [`KeyedLimiter::key`](crate::KeyedLimiter::key)).
///
/// The trait is sealed: slidegate's limiters implement it, others cannot.
///
/// ```
/// use slidegate::{check_all, KeyedLimiter, Limit, Quota, SlidingWindow};
/// use std::time::Duration;
///
/// let global = SlidingWindow::new(Quota::new(100, Duration::from_secs(1))?);
/// let users = KeyedLimiter::<String>::new(Quota::new(5, Duration::from_secs(1))?);
/// let alice = users.key("alice");
/// let limits: [(&dyn Limit, u64); 2] = [(&global, 1), (&alice, 1)];
/// assert!(check_all(&limits)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Limit: sealed::Reserve {}

/// The answer to a [`check_all`]: allowed (every limit charged) or denied (none charged), which
/// limit denied, and what the caller can do next.
///
/// ```
/// use slidegate::{check_all, clock::ManualClock, Quota, SlidingWindow};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let per_second = SlidingWindow::with_clock(Quota::new(2, Duration::from_secs(1))?, clock.clone());
/// let per_minute = SlidingWindow::with_clock(Quota::new(3, Duration::from_secs(60))?, clock.clone());
/// let d = check_all(&[(&per_second, 2), (&per_minute, 2)])?;
/// assert!(d.is_allowed());
/// assert_eq!(d.remaining(), 0); // per_second has nothing left
/// let d = check_all(&[(&per_second, 1), (&per_minute, 1)])?;
/// assert_eq!(d.denied_by(), Some(0));
/// assert!(d.retry_after().is_some());
/// assert_eq!(d.remaining(), 0); // nothing charged: per_second has 0 left, per_minute 1
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a rate-limit decision does nothing unless `is_allowed` is consulted"]
pub struct MultiDecision {
    denied_by: Option<usize>,
    remaining: u64,
    retry_after: u64,
}

impl MultiDecision {
    /// Whether every limit admitted the request (and was charged).
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.denied_by.is_none()
    }

    /// When denied: the index, in the slice given to [`check_all`], of the first limit that
    /// denied. `None` when allowed.
    #[inline]
    pub fn denied_by(&self) -> Option<usize> {
        self.denied_by
    }

    /// How much more cost could be admitted by all the limits right now, after this decision:
    /// the least any of them has left. When allowed, that is after this request's charges (a
    /// limit listed twice has both taken). When denied, nothing was charged, so it is the
    /// least room any limit has now, what a peek of each would report. `u64::MAX` for no
    /// limits.
    #[inline]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// When denied: the longest [`Decision::retry_after`] among the limits that deny the
    /// request now (a limit listed more than once judged for the sum of its costs), the
    /// earliest wait after which they would all admit it if nothing else arrives. `None` when
    /// allowed.
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        self.denied_by
            .map(|_| Duration::from_nanos(self.retry_after))
    }
}

/// Checks one request against several limits and charges all of them or none.
///
/// Each entry is a limit and the cost to charge it (costs may differ per limit). The limits
/// are judged and reserved in the order given (but for keys new to their stores, reserved
/// last, when they are made, so that a denied call adds no key and, at `max_keys`, evicts
/// none, unless a concurrent check makes the same key meanwhile); if one denies, the
/// reservations made so far are released — nothing is charged, and no trace is left once
/// this returns — and every limit is judged again without reserving, for the
/// [`MultiDecision`]'s `remaining` and `retry_after`. A cost of zero or above a limit's limit
/// is a [`CostError`], and then nothing is charged either. Lock-free, like a single check; see
/// the module documentation of the source for the protocol.
///
/// **A limit listed more than once** (one [`SlidingWindow`](crate::SlidingWindow) in several
/// entries, or one key of a [`KeyedLimiter`](crate::KeyedLimiter) through one or several
/// [`KeyLimit`](crate::KeyLimit) handles) is charged the sum of its entries' costs. A sum
/// above its limit could never be admitted, so it is [`CostError::ExceedsLimit`] with that sum
/// as the `cost`, returned before anything is charged, rather than a denial whose
/// `retry_after` a caller would wait for forever. Two handles are one limit when they name
/// equal keys (by the key's `Eq`) of the same `KeyedLimiter`.
///
/// **Panics.** The limits call code of the caller's: a key's `Hash` and `Eq`, each limiter's
/// [`Clock`]. If any of it panics, the reservations held so far are released as the panic
/// unwinds, and nothing is committed: the request is charged nowhere, the limits regain the
/// room, and an idle key can be evicted as usual. The one exception is a GCRA reservation,
/// which is a charge already and whose release reads its clock: if that clock panics during
/// the release, that one reservation stays charged, as if admitted when it was made, and
/// drains like any admission (every other reservation is still released). Commits read no
/// clock (an exact log's stamps are read before the first commit), so a request is never
/// left charged on some limits and not others.
///
/// ```
/// use slidegate::{check_all, clock::ManualClock, KeyedLimiter, Limit, Quota, SlidingWindow};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let q = |n, secs| Quota::new(n, Duration::from_secs(secs));
/// let users = KeyedLimiter::<String, _>::with_clock(q(2, 1)?, clock.clone());
/// let tenants = KeyedLimiter::<u32, _>::with_clock(q(3, 1)?, clock.clone());
/// let hourly = SlidingWindow::with_clock(q(1000, 3600)?, clock.clone());
///
/// let request = |user: &str| {
///     let (u, t) = (users.key(user), tenants.key(&7u32));
///     check_all(&[(&u as &dyn Limit, 1), (&t, 1), (&hourly, 1)])
/// };
/// assert!(request("alice")?.is_allowed());
/// assert!(request("alice")?.is_allowed());
/// assert_eq!(request("alice")?.denied_by(), Some(0)); // alice's 2/s
/// assert!(request("bob")?.is_allowed());
/// assert_eq!(request("carol")?.denied_by(), Some(1)); // tenant 7's 3/s
/// // The denied requests charged nothing anywhere.
/// assert_eq!(hourly.peek().remaining(), 997);
/// // One limit listed twice is charged the sum, and a sum above its limit is an error.
/// assert!(check_all(&[(&hourly, 500), (&hourly, 497)])?.is_allowed());
/// assert!(check_all(&[(&hourly, 600), (&hourly, 401)]).is_err());
/// // So is one key named by two handles: dave may make 2 a second, not 3.
/// let (d1, d2) = (users.key("dave"), users.key("dave"));
/// assert!(check_all(&[(&d1 as &dyn Limit, 2), (&d2, 1)]).is_err());
/// assert!(check_all(&[(&d1 as &dyn Limit, 1), (&d2, 1)])?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn check_all(limits: &[(&dyn Limit, u64)]) -> Result<MultiDecision, CostError> {
    // Pinned only if a keyed limit needs it; it keeps reserved entries alive to the end.
    // Declared before `held` so that it is dropped after it: a release on unwinding still
    // finds its entry alive.
    let pin = OnceCell::new();
    reject_repeated_overflow(limits, &pin)?;
    let mut held = Reservations {
        entries: Vec::with_capacity(limits.len()),
        settled: 0,
    };
    let mut remaining = u64::MAX;
    // Keys to be made in their stores (absent, evicted, or of another shape), reserved once
    // every other limit has: making one at `max_keys` evicts another key, which a denied
    // call must not do. `Vec::new` allocates nothing until a key is deferred.
    let mut deferred = Vec::new();
    for (i, &(limit, n)) in limits.iter().enumerate() {
        // On an error (or a panic) `held` is dropped, which releases what it holds. The
        // result is read where the call wrote it, and the reservation is pushed by the limit
        // itself: moved out whole by `?`, or copied out of the answer into `held`, each was
        // read with wide loads of what had just been stored in narrower pieces, a
        // store-forwarding stall (`check_all`).
        let result = limit.judge_cost(n, Op::Reserve, &pin, &mut held.entries);
        let judged = match &result {
            Ok(judged) => judged,
            Err(e) => return Err(*e),
        };
        if !Reservations::hold(judged, &mut remaining) {
            if judged.taken == Taken::Deferred {
                deferred.push(i);
                continue;
            }
            // Give back what was reserved before judging anything again: the answer is about
            // the limits as they are without this request.
            drop(held);
            return denial(limits, i, &judged.decision, &pin);
        }
    }
    if !deferred.is_empty() {
        if let Some((i, decision)) =
            make_deferred(limits, &deferred, &mut held, &mut remaining, &pin)?
        {
            // A state just made admits any valid cost: this is a concurrent check that made
            // the key first and took its room, or the call's own other entries of the key.
            drop(held);
            return denial(limits, i, &decision, &pin);
        }
    }
    held.commit();
    Ok(MultiDecision {
        denied_by: None,
        remaining,
        retry_after: 0,
    })
}

/// Reserves the limits `deferred` (indices into `limits`) making their states, into `held`:
/// the second pass of [`check_all`]. `Some` with the index and decision of one that denied,
/// leaving the caller to release `held`. Out of line: it runs only on a key's first check.
#[cold]
#[inline(never)]
fn make_deferred<'g>(
    limits: &[(&'g dyn Limit, u64)],
    deferred: &[usize],
    held: &mut Reservations<'g>,
    remaining: &mut u64,
    pin: &'g OnceCell<Guard>,
) -> Result<Option<(usize, Decision)>, CostError> {
    // Judge every new key, fresh, before making any (which may evict another key): two
    // handles of one key whose costs sum above its limit are the error, and a fresh state
    // that admits nothing (GCRA at the end of its time) is the denial, with no key made.
    // Only a concurrent check that makes one of these keys first, or a later step that
    // errs or panics, can still leave a key made for a call that then fails.
    for &i in deferred {
        let (limit, n) = limits[i];
        let total = listing(limits, i).map_or(n, |listing| listing.total);
        let judged = limit.judge_cost(total, Op::Peek, pin, &mut ReservedCosts::new())?;
        if !judged.decision.is_allowed() {
            return Ok(Some((i, judged.decision)));
        }
    }
    for &i in deferred {
        let (limit, n) = limits[i];
        let judged = limit.make_and_reserve(n, pin, &mut held.entries)?;
        if !Reservations::hold(&judged, remaining) {
            return Ok(Some((i, judged.decision)));
        }
    }
    Ok(None)
}

/// The reservations a [`check_all`] holds: those not yet settled (committed or released) are
/// released on drop, so that a return by `?` or a panic that unwinds through the call leaves
/// no reservation holding room forever. [`Reservations::commit`] settles them all.
struct Reservations<'g> {
    /// Each reservation and its cost.
    entries: ReservedCosts<'g>,
    /// How many, from the front, are settled.
    settled: usize,
}

impl<'g> Reservations<'g> {
    /// Whether `judged` pushed a reservation (lowering `remaining` to its decision's);
    /// `false` if it made none (it denied).
    #[inline(always)]
    fn hold(judged: &Judged, remaining: &mut u64) -> bool {
        if judged.taken != Taken::Reserved {
            return false;
        }
        *remaining = (*remaining).min(judged.decision.remaining());
        true
    }

    /// Turns every reservation into an admission.
    fn commit(&mut self) {
        // An exact log stamps a commit with its clock. Read those clocks before the first
        // commit, so that a clock that panics leaves every reservation held for `drop` to
        // release (the request charged nowhere), and the commits themselves run no code of
        // the caller's. Read after the log's reservation, a stamp is no older than the
        // reservation's judgement, which is all the log's proof needs (`window/log.rs`). A
        // log's reservation has no ticket (its release needs none), so the ticket carries the
        // stamp; a third field per entry cost a copy of each entry at its push.
        for (r, _) in &mut self.entries {
            if let State::Log { .. } = r.state {
                r.ticket = r.clock.now().0;
            }
        }
        while let Some(&(r, n)) = self.entries.get(self.settled) {
            // `false` only if the state was forcibly retired (a key evicted at `max_keys`, or
            // whose quota changed shape) since the reservation: the reservation counts as
            // admitted before that retirement and is forgotten with everything it forgot.
            // Other limits may be committed already, and counts are never subtracted, so no
            // redo.
            let _ = r.state.commit(n, r.ticket);
            self.settled += 1;
        }
    }
}

impl Drop for Reservations<'_> {
    fn drop(&mut self) {
        // Only a GCRA release can panic (it reads the limit's clock, caller's code). Catch it
        // so that the other reservations are still released, then re-raise it unless this
        // drop is part of an unwinding already (a second panic would abort the process).
        let mut panicked = None;
        for &(r, n) in &self.entries[self.settled..] {
            let release = || r.state.release(n, r.ticket, || r.clock.now().0);
            if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(release)) {
                panicked.get_or_insert(payload);
            }
        }
        if let Some(payload) = panicked {
            if !std::thread::panicking() {
                panic::resume_unwind(payload);
            }
        }
    }
}

/// Entries of one limit: the sum of their costs, how many there are, and whether a cost is
/// zero.
struct Listing {
    total: u64,
    entries: usize,
    zero: bool,
}

/// Whether two entries are one limit: the same object (a limiter, or a key handle; no `Limit`
/// type is zero-sized, so two entries share an address only if they are the same limit), or
/// handles naming equal keys of one keyed limiter.
fn same_limit(a: &dyn Limit, b: &dyn Limit) -> bool {
    if ptr::addr_eq(a, b) {
        return true;
    }
    // A direct limit answers `None` at once.
    let Some(limiter) = a.keyed_by() else {
        return false;
    };
    b.keyed_by() == Some(limiter) && b.key().is_some_and(|key| a.is_key(key))
}

/// The entries of the limit of `limits[i]`, if `i` is its first entry; `None` for a later
/// entry of a limit listed before.
fn listing(limits: &[(&dyn Limit, u64)], i: usize) -> Option<Listing> {
    let limit = limits[i].0;
    if limits[..i].iter().any(|&(l, _)| same_limit(l, limit)) {
        return None;
    }
    let mut listing = Listing {
        total: 0,
        entries: 0,
        zero: false,
    };
    for &(_, n) in limits[i..].iter().filter(|&&(l, _)| same_limit(l, limit)) {
        listing.total = listing.total.saturating_add(n);
        listing.entries += 1;
        listing.zero |= n == 0;
    }
    Some(listing)
}

/// `Err` if a limit listed more than once has a zero cost, or costs that sum above its limit
/// (then the request could never be admitted, and reserving would only deny it, every time).
/// Judges without reserving, so nothing is charged. A call listing no object twice costs a
/// comparison of addresses per pair of entries.
fn reject_repeated_overflow(
    limits: &[(&dyn Limit, u64)],
    pin: &OnceCell<Guard>,
) -> Result<(), CostError> {
    // The common call lists no object twice: each pair's addresses compared once, and
    // nothing else. Two handles of one key are found by `denial` instead, the one place a
    // sum above the limit can lead (a call that fits is charged the same either way), so
    // that the common call makes no dynamic call to compare keys.
    let repeated = (0..limits.len())
        .any(|i| (i + 1..limits.len()).any(|j| ptr::addr_eq(limits[i].0, limits[j].0)));
    if !repeated {
        return Ok(());
    }
    for (i, &(limit, _)) in limits.iter().enumerate() {
        match listing(limits, i) {
            Some(l) if l.entries > 1 && l.zero => return Err(CostError::Zero),
            // The limit validates the sum like any cost: `ExceedsLimit { cost: total, .. }`.
            Some(l) if l.entries > 1 => {
                limit.judge_cost(l.total, Op::Peek, pin, &mut ReservedCosts::new())?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// The answer when `limits[denier]` denied the request with `first`, every reservation of the
/// call released: each limit judged now without reserving — a limit listed more than once
/// for the sum of its costs — for the least `remaining` and the longest `retry_after`. A sum
/// above its limit is that limit's `CostError::ExceedsLimit`: for one object listed twice
/// [`reject_repeated_overflow`] found it before, but separate handles of one key are first
/// recognised here (a call that fits is charged the same whether they are or not).
fn denial(
    limits: &[(&dyn Limit, u64)],
    denier: usize,
    first: &Decision,
    pin: &OnceCell<Guard>,
) -> Result<MultiDecision, CostError> {
    let mut remaining = u64::MAX;
    let mut retry_after = 0;
    for (i, &(limit, _)) in limits.iter().enumerate() {
        let Some(listing) = listing(limits, i) else {
            continue;
        };
        // A zero cost among separate handles of one key, which `reject_repeated_overflow`
        // does not compare: the same error whether or not another limit denies.
        if listing.zero {
            return Err(CostError::Zero);
        }
        let d = if i == denier && listing.entries == 1 {
            // No reservation of this call was on the denier's state when it was judged, so
            // `first` is what judging it again would say (bar concurrent checks), and it
            // denies for sure: a concurrent change cannot turn the answer into `retry_after`
            // zero.
            *first
        } else {
            // Judged before with this call's reservations counted (an entry before the
            // denier, or a limit listed again), or not at all (after it).
            limit
                .judge_cost(listing.total, Op::Peek, pin, &mut ReservedCosts::new())?
                .decision
        };
        remaining = remaining.min(d.remaining());
        retry_after = retry_after.max(wait(&d));
    }
    Ok(MultiDecision {
        denied_by: Some(denier),
        remaining,
        retry_after,
    })
}

fn wait(d: &Decision) -> u64 {
    d.retry_after().map_or(0, |w| w.as_nanos() as u64)
}

/// Judges cost `n` on `state` under `rule` at `clock`'s now and does `op` (a peek or a
/// reservation, re-judged after a lost CAS), a reservation pushed onto `held`. `None` if the
/// state is retired.
#[inline]
pub(crate) fn judge_on<'r>(
    state: State<'r>,
    rule: &Rule,
    clock: &'r dyn Clock,
    n: u64,
    op: Op,
    held: &mut ReservedCosts<'r>,
) -> Option<Judged> {
    debug_assert!(op != Op::Charge, "check_all peeks and reserves");
    // Spelled out so that the compiler sees no charge here and leaves the charge path out.
    let op = if op == Op::Peek {
        Op::Peek
    } else {
        Op::Reserve
    };
    let (decision, ticket) = state.check(rule, || clock.now().0, n, op)?;
    let taken = if op == Op::Reserve && decision.is_allowed() {
        sealed::hold(held, n, state, ticket, clock);
        Taken::Reserved
    } else {
        Taken::Nothing
    };
    Some(Judged { decision, taken })
}
