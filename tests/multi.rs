//! `check_all`: one request against several limits, all charged or none.
//!
//! Unit tests of the public surface, and a property test: on any sequence of clock steps,
//! multi-checks and single checks over direct and keyed limiters with random quotas, every
//! decision equals the sequential specification "all limits admit ⇒ all charged, else none"
//! built from the reference model.

use slidegate_testkit::model as common;

use std::hash::{Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{MODES, Model};
use proptest::prelude::*;
use slidegate::clock::{Clock, ManualClock, Nanos};
use slidegate::{CostError, KeyedLimiter, Limit, Mode, Quota, SlidingWindow, check_all};

fn quota(limit: u64, buckets: u64, g: u64) -> Quota {
    Quota::new(limit, Duration::from_nanos(g * buckets))
        .and_then(|q| q.with_granularity(Duration::from_nanos(g)))
        .expect("valid quota")
}

#[test]
fn all_admit_charges_every_limit() {
    let clock = ManualClock::new();
    let a = SlidingWindow::with_clock(quota(3, 2, 10), clock.clone());
    let users = KeyedLimiter::<&str, _>::with_clock(quota(5, 1, 10), clock.clone());
    let alice = users.key(&"alice");
    let d = check_all(&[(&a, 2), (&alice, 3)]).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.denied_by(), None);
    assert_eq!(d.retry_after(), None);
    assert_eq!(d.remaining(), 1);
    assert_eq!(a.admitted_total(), 2);
    assert_eq!(users.admitted_total(&"alice"), 3);
}

#[test]
fn a_denial_charges_no_limit() {
    let clock = ManualClock::new();
    let a = SlidingWindow::with_clock(quota(10, 1, 10), clock.clone());
    let b = SlidingWindow::with_clock(quota(2, 1, 10), clock.clone());
    let tenants = KeyedLimiter::<u64, _>::with_clock(quota(10, 1, 10), clock.clone());
    let t = tenants.key(&7u64);
    assert!(b.check_n(2).unwrap().is_allowed());
    let d = check_all(&[(&a, 1), (&t, 4), (&b, 1)]).unwrap();
    assert!(!d.is_allowed());
    assert_eq!(d.denied_by(), Some(2));
    assert_eq!(a.admitted_total(), 0);
    assert_eq!(tenants.admitted_total(&7), 0);
    assert_eq!(a.peek().remaining(), 10);
    assert_eq!(tenants.peek(&7).remaining(), 10);
    // The reservations were released: the full limits are available again.
    assert!(a.check_n(10).unwrap().is_allowed());
    assert!(tenants.check_n(&7, 10).unwrap().is_allowed());
}

#[test]
fn retry_after_is_the_longest_wait_and_remaining_the_least() {
    let clock = ManualClock::new();
    // N = 1 bucket of 10 ns: Strict counts an admission at t = 0 until t = 20.
    let short = SlidingWindow::with_clock(quota(1, 1, 10), clock.clone());
    // N = 3 buckets of 10 ns: until t = 40.
    let long = SlidingWindow::with_clock(quota(1, 3, 10), clock.clone());
    let roomy = SlidingWindow::with_clock(quota(9, 1, 10), clock.clone());
    assert!(short.check().is_allowed());
    assert!(long.check().is_allowed());
    let d = check_all(&[(&roomy, 1), (&short, 1), (&long, 1)]).unwrap();
    assert_eq!(d.denied_by(), Some(1));
    assert_eq!(d.retry_after(), Some(Duration::from_nanos(40)));
    assert_eq!(d.remaining(), 0);
    clock.set(Duration::from_nanos(39));
    assert!(!check_all(&[(&short, 1), (&long, 1)]).unwrap().is_allowed());
    clock.set(Duration::from_nanos(40));
    let d = check_all(&[(&roomy, 1), (&short, 1), (&long, 1)]).unwrap();
    assert!(d.is_allowed());
    assert_eq!(roomy.admitted_total(), 1);
}

#[test]
fn cost_errors_charge_nothing() {
    let clock = ManualClock::new();
    let a = SlidingWindow::with_clock(quota(5, 1, 10), clock.clone());
    let b = SlidingWindow::with_clock(quota(2, 1, 10), clock.clone());
    assert_eq!(
        check_all(&[(&a, 1), (&b, 3)]),
        Err(CostError::ExceedsLimit { cost: 3, limit: 2 })
    );
    assert_eq!(check_all(&[(&a, 1), (&b, 0)]), Err(CostError::Zero));
    // A cost error after a denial is still an error: it never depends on timing.
    assert!(b.check_n(2).unwrap().is_allowed());
    assert_eq!(
        check_all(&[(&b, 1), (&a, 6)]).map(|_| ()),
        Err(CostError::ExceedsLimit { cost: 6, limit: 5 })
    );
    assert_eq!(a.admitted_total(), 0);
    assert_eq!(a.peek().remaining(), 5);
}

#[test]
fn one_limit_listed_twice_is_charged_the_sum() {
    let a = SlidingWindow::with_clock(quota(3, 1, 10), ManualClock::new());
    let d = check_all(&[(&a, 2), (&a, 1)]).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 0);
    assert_eq!(a.admitted_total(), 3);
}

/// Regression: costs summing above the limit on one limit were a denial whose `retry_after`
/// never admitted, so a caller waiting it out and retrying looped forever.
#[test]
fn a_limit_listed_twice_above_its_limit_is_a_cost_error_that_charges_nothing() {
    for mode in MODES {
        let clock = ManualClock::new();
        let a = SlidingWindow::with_clock(quota(5, 1, 10).with_mode(mode), clock.clone());
        let over = Err(CostError::ExceedsLimit { cost: 6, limit: 5 });
        assert_eq!(check_all(&[(&a, 3), (&a, 3)]), over, "{mode:?}");
        assert_eq!(a.peek().remaining(), 5, "{mode:?}");
        // Checked before anything is reserved, whatever else the request lists.
        let b = SlidingWindow::with_clock(quota(9, 1, 10).with_mode(mode), clock.clone());
        assert_eq!(check_all(&[(&b, 1), (&a, 3), (&a, 3)]), over, "{mode:?}");
        assert_eq!(b.peek().remaining(), 9, "{mode:?}");
        let d = check_all(&[(&a, 2), (&a, 3)]).unwrap();
        assert!(d.is_allowed(), "{mode:?}");
        assert_eq!(d.remaining(), 0, "{mode:?}");
        assert_eq!(a.peek().remaining(), 0, "{mode:?}");
        // An error, not a denial, even while the limit is full: it never depends on timing.
        assert_eq!(check_all(&[(&a, 3), (&a, 3)]), over, "{mode:?}");
        assert_eq!(
            check_all(&[(&a, 2), (&a, 0)]),
            Err(CostError::Zero),
            "{mode:?}"
        );
    }
}

/// One key through entries `a` and `b` of one call (one handle twice, or two handles), 5 per
/// 10 ns, unused: a sum above the limit is an error that charges nothing, and a sum within it
/// is charged to the key.
fn one_key_listed_twice(users: &KeyedLimiter<String, ManualClock>, a: &dyn Limit, b: &dyn Limit) {
    let alice = "alice".to_string();
    assert_eq!(
        check_all(&[(a, 3), (b, 3)]),
        Err(CostError::ExceedsLimit { cost: 6, limit: 5 })
    );
    assert_eq!(users.peek(&alice).remaining(), 5);
    assert!(check_all(&[(a, 3), (b, 2)]).unwrap().is_allowed());
    assert_eq!(users.admitted_total(&alice), 5);
}

#[test]
fn a_key_listed_twice_above_its_limit_is_a_cost_error() {
    let users = KeyedLimiter::with_clock(quota(5, 1, 10), ManualClock::new());
    let key = "alice".to_string();
    let alice = users.key(&key);
    one_key_listed_twice(&users, &alice, &alice);
}

/// Handles of one `String` key made from a `&str` and from a `&String` are one limit, in
/// either order: `check_all` compares them by the key's value, whatever form each was given in.
#[test]
fn handles_of_one_key_by_str_and_by_string_are_one_limit() {
    let owned = "alice".to_string();
    for str_first in [true, false] {
        let users = KeyedLimiter::<String, _>::with_clock(quota(5, 1, 10), ManualClock::new());
        let (by_str, by_string) = (users.key("alice"), users.key(&owned));
        let (a, b): (&dyn Limit, &dyn Limit) = if str_first {
            (&by_str, &by_string)
        } else {
            (&by_string, &by_str)
        };
        one_key_listed_twice(&users, a, b);
        assert_eq!(users.len(), 1);
    }
}

/// Two handles made separately for equal keys of one limiter are one limit; handles for other
/// keys, or for the same key of another limiter, are not.
#[test]
fn separate_handles_for_one_key_are_one_limit() {
    let clock = ManualClock::new();
    let users = KeyedLimiter::<String, _>::with_clock(quota(5, 1, 10), clock.clone());
    let others = KeyedLimiter::<String, _>::with_clock(quota(5, 1, 10), clock.clone());
    // Equal keys in distinct allocations, so that only `Eq` can tell they are one key.
    let (k1, k2, bob) = ("alice".to_string(), "alice".to_string(), "bob".to_string());
    let (a1, a2) = (users.key(&k1), users.key(&k2));
    one_key_listed_twice(&users, &a1, &a2);
    // A denial judges the sum: 2 + 2 fit once alice's 5 have left, and not a nanosecond
    // before.
    let d = check_all(&[(&a1, 2), (&a2, 2)]).unwrap();
    assert_eq!((d.denied_by(), d.remaining()), (Some(0), 0));
    let retry = d.retry_after().expect("denied");
    clock.set(retry - Duration::from_nanos(1));
    assert!(!check_all(&[(&a1, 2), (&a2, 2)]).unwrap().is_allowed());
    clock.set(retry);
    assert!(check_all(&[(&a1, 2), (&a2, 2)]).unwrap().is_allowed());
    assert_eq!(users.admitted_total(&k1), 9);
    // Another key of the limiter, or the same key of another limiter, is another limit: 3 + 3
    // on two of them is no error.
    let (carol, dave) = ("carol".to_string(), "dave".to_string());
    assert!(
        check_all(&[(&users.key(&bob), 3), (&users.key(&carol), 3)])
            .unwrap()
            .is_allowed()
    );
    assert!(
        check_all(&[(&users.key(&dave), 3), (&others.key(&dave), 3)])
            .unwrap()
            .is_allowed()
    );
    assert_eq!(
        [&bob, &carol, &dave].map(|k| users.admitted_total(k)),
        [3, 3, 3]
    );
    assert_eq!(others.admitted_total(&dave), 3);
}

/// A denial by one limit listed twice: judged for the sum, the answer is exact (and nothing
/// of the call's own reservation is counted in `remaining`).
#[test]
fn a_denial_by_a_limit_listed_twice_reports_the_room_and_wait_for_the_sum() {
    for mode in MODES {
        let clock = ManualClock::new();
        let a = SlidingWindow::with_clock(quota(5, 1, 10).with_mode(mode), clock.clone());
        assert!(a.check_n(2).unwrap().is_allowed());
        let d = check_all(&[(&a, 2), (&a, 2)]).unwrap();
        assert_eq!(d.denied_by(), Some(1), "{mode:?}");
        assert_eq!(d.remaining(), 3, "{mode:?}");
        assert_eq!(a.peek().remaining(), 3, "{mode:?}");
        let retry = d.retry_after().expect("denied");
        clock.set(retry - Duration::from_nanos(1));
        assert!(
            !check_all(&[(&a, 2), (&a, 2)]).unwrap().is_allowed(),
            "{mode:?}"
        );
        clock.set(retry);
        assert!(
            check_all(&[(&a, 2), (&a, 2)]).unwrap().is_allowed(),
            "{mode:?} at {retry:?}"
        );
    }
}

/// Regression: the entries reserved before the denying one reported their `remaining` with
/// this call's own reservation counted, though it was then released (`a` showed 0).
#[test]
fn remaining_of_a_denial_is_the_least_room_now_in_every_mode() {
    for mode in MODES {
        let clock = ManualClock::new();
        let a = SlidingWindow::with_clock(quota(5, 1, 10).with_mode(mode), clock.clone());
        let b = SlidingWindow::with_clock(quota(10, 1, 10).with_mode(mode), clock.clone());
        assert!(b.check_n(8).unwrap().is_allowed());
        let d = check_all(&[(&a, 5), (&b, 5)]).unwrap();
        assert_eq!(d.denied_by(), Some(1), "{mode:?}");
        assert_eq!(
            (a.peek().remaining(), b.peek().remaining()),
            (5, 2),
            "{mode:?}"
        );
        assert_eq!(d.remaining(), 2, "{mode:?}");
        // With `a` the tighter one, `a`'s own room: not what it had with the reservation.
        assert!(a.check_n(2).unwrap().is_allowed());
        let d = check_all(&[(&a, 1), (&b, 5)]).unwrap();
        assert_eq!(d.denied_by(), Some(1), "{mode:?}");
        assert_eq!(d.remaining(), 2, "{mode:?}");
        let d = check_all(&[(&a, 1), (&b, 1), (&a, 1), (&b, 5)]).unwrap();
        assert_eq!(d.denied_by(), Some(3), "{mode:?}");
        assert_eq!(d.remaining(), 2, "{mode:?}");
    }
}

/// A key whose `Hash` panics while [`BOMB_ARMED`] is set.
#[derive(Clone, PartialEq, Eq)]
struct Bomb;

static BOMB_ARMED: AtomicBool = AtomicBool::new(false);

impl Hash for Bomb {
    fn hash<H: Hasher>(&self, state: &mut H) {
        assert!(!BOMB_ARMED.load(Ordering::SeqCst), "Bomb::hash panicked");
        0u8.hash(state);
    }
}

/// Regression: a panic between reservations (here a later key's `Hash`) left the earlier
/// reservations pending forever: `a` never regained the room, not even an hour later.
#[test]
fn a_panic_mid_call_releases_the_reservations_held() {
    let clock = ManualClock::new();
    let a = SlidingWindow::with_clock(quota(5, 10, 10), clock.clone());
    let users = KeyedLimiter::<&str, _>::with_clock(quota(5, 10, 10), clock.clone());
    let alice = users.key(&"alice");
    let bombs: KeyedLimiter<Bomb, ManualClock> =
        KeyedLimiter::with_clock(quota(5, 10, 10), clock.clone());
    let bomb = bombs.key(&Bomb);
    // alice exists, so her reservation is made in the first pass, before the bomb's key.
    assert!(users.check(&"alice").is_allowed());
    BOMB_ARMED.store(true, Ordering::SeqCst);
    let result = catch_unwind(AssertUnwindSafe(|| {
        check_all(&[(&a, 3), (&alice, 2), (&bomb, 1)])
    }));
    BOMB_ARMED.store(false, Ordering::SeqCst);
    assert!(result.is_err(), "the key's Hash panics");
    // Released at once, not merely expired: nothing was admitted anywhere.
    assert_eq!(a.peek().remaining(), 5);
    assert_eq!(a.admitted_total(), 0);
    assert_eq!(users.admitted_total(&"alice"), 1);
    assert_eq!(users.peek(&"alice").remaining(), 4);
    clock.advance(Duration::from_nanos(200));
    assert_eq!(a.peek().remaining(), 5);
    // No pending left on the key: idle, it is evicted.
    assert_eq!(users.retain_recent(), 1);
}

/// A [`ManualClock`]'s time, read through two switches: every read first sets `sets`, then
/// panics if `panics_if` is set. One limit's clock can so arm another's mid-call.
#[derive(Clone)]
struct WiredClock {
    time: ManualClock,
    sets: Arc<AtomicBool>,
    panics_if: Arc<AtomicBool>,
}

impl WiredClock {
    fn new(time: &ManualClock, sets: &Arc<AtomicBool>, panics_if: &Arc<AtomicBool>) -> Self {
        WiredClock {
            time: time.clone(),
            sets: sets.clone(),
            panics_if: panics_if.clone(),
        }
    }
}

impl Clock for WiredClock {
    fn now(&self) -> Nanos {
        self.sets.store(true, Ordering::SeqCst);
        assert!(
            !self.panics_if.load(Ordering::SeqCst),
            "WiredClock panicked"
        );
        self.time.now()
    }
}

/// An exact log stamps its commit with its clock: a clock that panics then (armed here by the
/// next limit's clock, read after the log reserved) must not leave the request charged on the
/// limits committed before it, nor the log's reservation pending.
#[test]
fn a_clock_panicking_at_commit_charges_nothing() {
    let time = ManualClock::new();
    let (armed, unused, never) = (Arc::default(), Arc::default(), Arc::default());
    let first = SlidingWindow::with_clock(quota(5, 10, 10), time.clone());
    let log = SlidingWindow::with_clock(
        quota(5, 10, 10).with_mode(Mode::ExactLog),
        WiredClock::new(&time, &unused, &armed),
    );
    let arming =
        SlidingWindow::with_clock(quota(5, 10, 10), WiredClock::new(&time, &armed, &never));
    armed.store(false, Ordering::SeqCst);
    let result = catch_unwind(AssertUnwindSafe(|| {
        check_all(&[(&first, 1), (&log, 1), (&arming, 1)])
    }));
    assert!(result.is_err(), "the log's clock panics once armed");
    armed.store(false, Ordering::SeqCst);
    // Nothing admitted anywhere, nothing pending: each has its whole limit.
    assert_eq!((first.admitted_total(), first.peek().remaining()), (0, 5));
    assert_eq!((log.admitted_total(), log.peek().remaining()), (0, 5));
    assert_eq!((arming.admitted_total(), arming.peek().remaining()), (0, 5));
}

/// A GCRA reservation's release reads its clock. If that panics while another panic unwinds
/// (armed here by the panicking clock of the next limit), the process must not abort, every
/// other reservation is still released, and the GCRA reservation stays as an admission.
#[test]
fn a_clock_panicking_in_a_release_while_unwinding_does_not_abort() {
    let time = ManualClock::new();
    let (armed, unused, always) = (
        Arc::default(),
        Arc::default(),
        Arc::new(AtomicBool::new(true)),
    );
    let gcra = SlidingWindow::with_clock(
        quota(5, 10, 10).with_mode(Mode::Gcra),
        WiredClock::new(&time, &unused, &armed),
    );
    let a = SlidingWindow::with_clock(quota(5, 10, 10), time.clone());
    let arming =
        SlidingWindow::with_clock(quota(5, 10, 10), WiredClock::new(&time, &armed, &always));
    armed.store(false, Ordering::SeqCst);
    let result = catch_unwind(AssertUnwindSafe(|| {
        check_all(&[(&gcra, 1), (&a, 1), (&arming, 1)])
    }));
    assert!(result.is_err());
    armed.store(false, Ordering::SeqCst);
    assert_eq!(a.peek().remaining(), 5);
    assert_eq!(a.admitted_total(), 0);
    // The documented exception: charged as if admitted, then drained like an admission.
    assert_eq!(gcra.peek().remaining(), 4);
    time.advance(Duration::from_nanos(100));
    assert_eq!(gcra.peek().remaining(), 5);
}

/// The same release panicking outside any unwinding (on a denial): the other reservations are
/// released first, then the panic propagates.
#[test]
fn a_clock_panicking_in_a_release_on_a_denial_releases_the_rest_then_panics() {
    let time = ManualClock::new();
    let (armed, unused, never) = (Arc::default(), Arc::default(), Arc::default());
    let gcra = SlidingWindow::with_clock(
        quota(5, 10, 10).with_mode(Mode::Gcra),
        WiredClock::new(&time, &unused, &armed),
    );
    let a = SlidingWindow::with_clock(quota(5, 10, 10), time.clone());
    let full = SlidingWindow::with_clock(quota(1, 10, 10), WiredClock::new(&time, &armed, &never));
    assert!(full.check().is_allowed());
    armed.store(false, Ordering::SeqCst);
    let result = catch_unwind(AssertUnwindSafe(|| {
        check_all(&[(&gcra, 1), (&a, 1), (&full, 1)])
    }));
    assert!(result.is_err(), "the GCRA release's clock panics");
    armed.store(false, Ordering::SeqCst);
    assert_eq!(a.peek().remaining(), 5);
    assert_eq!(a.admitted_total(), 0);
}

#[test]
fn no_limits_is_allowed() {
    let d = check_all(&[]).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), u64::MAX);
}

#[test]
fn keyed_limiters_of_different_key_types_mix() {
    let clock = ManualClock::new();
    let by_name = KeyedLimiter::<String, _>::with_clock(quota(2, 1, 10), clock.clone());
    let by_id = KeyedLimiter::<u32, _>::with_clock(quota(3, 1, 10), clock.clone());
    let name = String::from("alice");
    for expect in [true, true, false] {
        let (n, i) = (by_name.key(&name), by_id.key(&42u32));
        let limits: [(&dyn Limit, u64); 2] = [(&n, 1), (&i, 1)];
        assert_eq!(check_all(&limits).unwrap().is_allowed(), expect);
    }
    assert_eq!(by_id.admitted_total(&42), 2);
    // A key's first multi-check inserts it; an evicted key is re-inserted.
    clock.set(Duration::from_nanos(100));
    assert_eq!(by_name.retain_recent(), 1);
    let n = by_name.key(&name);
    assert!(check_all(&[(&n, 2)]).unwrap().is_allowed());
    assert_eq!(by_name.admitted_total(&name), 2);
}

#[test]
fn peek_is_unchanged_by_a_released_reservation() {
    let clock = ManualClock::new();
    let a = SlidingWindow::with_clock(quota(4, 2, 10), clock.clone());
    let full = SlidingWindow::with_clock(quota(1, 2, 10), clock.clone());
    assert!(full.check().is_allowed());
    let before = a.peek();
    for t in [0, 15, 25] {
        clock.set(Duration::from_nanos(t));
        assert!(!check_all(&[(&a, 3), (&full, 1)]).unwrap().is_allowed());
    }
    clock.set(Duration::from_nanos(0));
    assert_eq!(a.peek(), before);
    // Buckets filled while reserved hold nothing: the whole limit is there in any window.
    clock.set(Duration::from_nanos(45));
    assert_eq!(a.peek().remaining(), 4);
    assert!(a.check_n(4).unwrap().is_allowed());
}

#[derive(Clone, Debug)]
enum Op {
    /// Costs per limit (0 = not listed), in the order of the limits.
    Multi(Vec<u64>),
    /// A plain check of one limit.
    Single(usize, u64),
}

fn any_quota() -> impl Strategy<Value = Quota> {
    (
        1u64..=8,
        prop::sample::select(vec![1u64, 2, 3, 5]),
        1u64..=20,
        any::<bool>(),
    )
        .prop_map(|(limit, buckets, g, weighted)| {
            quota(limit, buckets, g).with_mode(if weighted {
                Mode::Weighted
            } else {
                Mode::Strict
            })
        })
}

/// Four limits: two direct ones, and two keys of one keyed limiter (whose quota is the third).
fn case() -> impl Strategy<Value = ([Quota; 3], Vec<(u64, Op)>)> {
    [any_quota(), any_quota(), any_quota()].prop_flat_map(|qs| {
        let limits = [qs[0].limit(), qs[1].limit(), qs[2].limit(), qs[2].limit()];
        let cost = move |i: usize| 0..=limits[i];
        let multi = (cost(0), cost(1), cost(2), cost(3))
            .prop_map(|(a, b, c, d)| Op::Multi(vec![a, b, c, d]));
        let single = (0usize..4)
            .prop_flat_map(move |i| (Just(i), 1..=limits[i]))
            .prop_map(|(i, n)| Op::Single(i, n));
        let op = prop_oneof![4 => multi, 1 => single];
        (Just(qs), prop::collection::vec((0u64..=30, op), 1..80))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn multi_checks_equal_all_or_nothing_on_the_model((qs, ops) in case()) {
        let clock = ManualClock::new();
        let a = SlidingWindow::with_clock(qs[0], clock.clone());
        let b = SlidingWindow::with_clock(qs[1], clock.clone());
        let keyed = KeyedLimiter::<u8, _>::with_clock(qs[2], clock.clone());
        let (k1, k2) = (keyed.key(&1u8), keyed.key(&2u8));
        let limits: [&dyn Limit; 4] = [&a, &b, &k1, &k2];
        let mut models = [Model::new(qs[0]), Model::new(qs[1]), Model::new(qs[2]), Model::new(qs[2])];
        let mut charged = [0u64; 4];
        let mut t = 0u64;
        for (step, op) in ops {
            t += step;
            clock.set(Duration::from_nanos(t));
            match op {
                Op::Multi(costs) => {
                    let listed: Vec<(usize, u64)> = costs.iter().copied().enumerate().filter(|&(_, n)| n > 0).collect();
                    let request: Vec<(&dyn Limit, u64)> = listed.iter().map(|&(i, n)| (limits[i], n)).collect();
                    let d = check_all(&request).unwrap();
                    let deny = listed.iter().position(|&(i, n)| !models[i].admits(t, n));
                    prop_assert_eq!(d.denied_by(), deny, "multi {:?} at t={}", listed, t);
                    if deny.is_none() {
                        for &(i, n) in &listed {
                            prop_assert!(models[i].check(t, n).0);
                            charged[i] += n;
                        }
                        let least = listed.iter().map(|&(i, _)| models[i].remaining(t)).min().unwrap_or(u64::MAX);
                        prop_assert_eq!(d.remaining(), least);
                        prop_assert_eq!(d.retry_after(), None);
                    } else {
                        // Waiting `retry_after` lets every limit admit; 1 ns less does not.
                        let retry = d.retry_after().expect("denied").as_nanos() as u64;
                        prop_assert!(retry >= 1);
                        let all = |at: u64| listed.iter().all(|&(i, n)| models[i].admits(at, n));
                        prop_assert!(all(t + retry), "retry_after={} at t={}", retry, t);
                        prop_assert!(!all(t + retry - 1), "retry_after={} not the earliest at t={}", retry, t);
                    }
                }
                Op::Single(i, n) => {
                    let d = match i {
                        0 => a.check_n(n).unwrap(),
                        1 => b.check_n(n).unwrap(),
                        k => keyed.check_n(&(k as u8 - 1), n).unwrap(),
                    };
                    let (allowed, remaining) = models[i].check(t, n);
                    prop_assert_eq!(d.is_allowed(), allowed);
                    prop_assert_eq!(d.remaining(), remaining);
                    if allowed {
                        charged[i] += n;
                    }
                }
            }
        }
        // Nothing lost, nothing phantom (keyed entries may have been evicted while idle).
        prop_assert_eq!(a.admitted_total(), charged[0]);
        prop_assert_eq!(b.admitted_total(), charged[1]);
    }
}

/// More limits than `check_all` holds inline (8): all charged, or none.
#[test]
fn many_limits_are_all_or_nothing() {
    let clock = ManualClock::new();
    let q = |limit| Quota::new(limit, Duration::from_secs(1)).unwrap();
    let limiters: Vec<SlidingWindow<ManualClock>> = (0..12)
        .map(|i| SlidingWindow::with_clock(q(if i == 11 { 1 } else { 5 }), clock.clone()))
        .collect();
    let limits: Vec<(&dyn Limit, u64)> = limiters.iter().map(|l| (l as &dyn Limit, 1)).collect();
    assert!(check_all(&limits).unwrap().is_allowed());
    let d = check_all(&limits).unwrap();
    assert_eq!(d.denied_by(), Some(11));
    for (i, l) in limiters.iter().enumerate() {
        assert_eq!(l.admitted_total(), 1, "limit {i}");
        let expect = if i == 11 { 0 } else { 4 };
        assert_eq!(l.peek().remaining(), expect, "limit {i}");
    }
}

/// Regression: a reservation on an absent key made its entry at once, so a call denied by a
/// later limit left the key in the store and, at `max_keys`, had forced another key out,
/// forgetting its admissions (it was then admitted above its limit). Keys are now made only
/// once every other limit has admitted.
#[test]
fn a_denied_call_makes_no_key_and_evicts_none() {
    let clock = ManualClock::new();
    let keyed = KeyedLimiter::<&str, _>::builder(quota(2, 1, 1000))
        .clock(clock.clone())
        .max_keys(1)
        .build();
    let global = SlidingWindow::with_clock(quota(1, 1, 1000), clock.clone());
    assert!(keyed.check_n(&"a", 2).unwrap().is_allowed());
    assert!(global.check().is_allowed());
    let b = keyed.key(&"b");
    let d = check_all(&[(&b, 1), (&global, 1)]).unwrap();
    assert_eq!(d.denied_by(), Some(1));
    assert_eq!((keyed.len(), keyed.forced_evictions()), (1, 0));
    assert!(!keyed.check(&"a").is_allowed(), "a was forgotten");
    // Admitted, the call makes the key (forcing `a` out at the bound) and charges it.
    clock.set(Duration::from_nanos(2000));
    assert!(check_all(&[(&b, 1), (&global, 1)]).unwrap().is_allowed());
    assert_eq!((keyed.len(), keyed.admitted_total(&"b")), (1, 1));
    assert_eq!(global.peek().remaining(), 0);
}

/// Regression (found by the `algorithms` fuzz target): a zero cost on one of two separate
/// handles of one key was a `CostError` when the call went through, but a denial when another
/// limit denied first (`denial` summed the handles' costs without looking for a zero), so
/// the same malformed request was an error or a denial depending on traffic.
#[test]
fn a_zero_cost_on_a_second_handle_is_an_error_even_when_denied() {
    let clock = ManualClock::new();
    let keyed = KeyedLimiter::<u8, _>::with_clock(quota(5, 1, 1000), clock.clone());
    let full = SlidingWindow::with_clock(quota(1, 1, 1000), clock.clone());
    assert!(full.check().is_allowed());
    let (k1, k2) = (keyed.key(&7), keyed.key(&7));
    // The first entry denies; the zero is on the second handle of key 7.
    assert_eq!(
        check_all(&[(&full as &dyn Limit, 1), (&k1, 2), (&k2, 0)]),
        Err(CostError::Zero)
    );
    // And with nothing denying, the same call is the same error.
    assert_eq!(
        check_all(&[(&k1 as &dyn Limit, 2), (&k2, 0)]),
        Err(CostError::Zero)
    );
    assert_eq!(keyed.peek(&7).remaining(), 5);
    assert_eq!(full.admitted_total(), 1);
}

/// Two handles of one new key whose costs sum above its limit are an error before the key is
/// made: at `max_keys`, making it would have forced another key out first.
#[test]
fn handles_of_a_new_key_above_its_limit_evict_nothing() {
    let clock = ManualClock::new();
    let keyed = KeyedLimiter::<String, _>::builder(quota(3, 1, 1000))
        .clock(clock.clone())
        .max_keys(1)
        .build();
    assert!(keyed.check(&"a".to_string()).is_allowed());
    let (b1, b2) = ("b".to_string(), "b".to_string());
    let (h1, h2) = (keyed.key(&b1), keyed.key(&b2));
    assert_eq!(
        check_all(&[(&h1, 2), (&h2, 2)]),
        Err(CostError::ExceedsLimit { cost: 4, limit: 3 })
    );
    assert_eq!((keyed.len(), keyed.forced_evictions()), (1, 0));
    assert_eq!(keyed.admitted_total(&"a".to_string()), 1);
}

/// A fresh GCRA state admits nothing at the end of GCRA's time: a call denied by its new key
/// there must not make the key first, forcing another out at `max_keys`. New keys are judged
/// before any is made.
#[test]
fn a_new_gcra_key_denied_at_the_end_of_time_evicts_nothing() {
    const MAX_TIME: u64 = (1 << 63) - 1;
    let clock = ManualClock::new();
    // T = 1 µs.
    let q = Quota::new(5, Duration::from_micros(5))
        .unwrap()
        .with_mode(Mode::Gcra);
    let keyed = KeyedLimiter::<&str, _>::builder(q)
        .clock(clock.clone())
        .max_keys(1)
        .build();
    clock.set(Duration::from_nanos(MAX_TIME - 5_000));
    // a's TAT is now the end of time.
    assert!(keyed.check_n(&"a", 5).unwrap().is_allowed());
    clock.set(Duration::from_nanos(MAX_TIME - 2_000));
    let b = keyed.key(&"b");
    assert!(!check_all(&[(&b, 3)]).unwrap().is_allowed());
    assert_eq!(
        (
            keyed.len(),
            keyed.forced_evictions(),
            keyed.admitted_total(&"b")
        ),
        (1, 0, 0),
        "the denied call forced `a` out"
    );
    assert!(!keyed.check(&"a").is_allowed(), "a was forgotten");
}

/// Regression (found by the `algorithms` fuzz target): a call making two new keys of a full
/// store forced out the first key it had just made to make room for the second, so that key's
/// admission was forgotten as it was made (three forced evictions for two new keys, and a
/// second call then admitted 12 units of a limit of 10 in one window). A key holding a
/// reservation is now forced out only if every key sampled holds one. GCRA's reservation
/// cannot be told from an admission, so this covers the counter and the exact log.
#[test]
fn a_call_making_new_keys_at_the_bound_keeps_the_keys_it_made() {
    for mode in [
        Mode::Strict,
        Mode::StrictMarked,
        Mode::Weighted,
        Mode::FixedWindow,
        Mode::ExactLog,
    ] {
        let clock = ManualClock::new();
        let keyed = KeyedLimiter::<u8, _>::builder(quota(10, 6, 10_000_000_000).with_mode(mode))
            .clock(clock.clone())
            .max_keys(2)
            .build();
        clock.set(Duration::from_secs(1));
        for key in [3, 1] {
            assert!(keyed.check_n(&key, 3).unwrap().is_allowed(), "{mode:?}");
        }
        let (a, b, a2) = (keyed.key(&2), keyed.key(&0), keyed.key(&2));
        let d = check_all(&[(&a as &dyn Limit, 2), (&b, 3), (&a2, 4)]).unwrap();
        assert!(d.is_allowed(), "{mode:?}");
        // Two new keys at a bound of two: the two old keys go, and nothing else.
        assert_eq!((keyed.len(), keyed.forced_evictions()), (2, 2), "{mode:?}");
        assert_eq!(keyed.peek(&2).remaining(), 4, "{mode:?}: key 2 holds 6");
        assert_eq!(keyed.peek(&0).remaining(), 7, "{mode:?}: key 0 holds 3");
        // Over the limit of key 2 now: denied, where the forgotten admission let it through.
        let d = check_all(&[(&a as &dyn Limit, 6), (&b, 3)]).unwrap();
        assert_eq!(d.denied_by(), Some(0), "{mode:?}");
    }
}
