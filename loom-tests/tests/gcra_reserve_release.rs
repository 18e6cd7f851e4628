// GCRA — a `check_all` reservation, committed or released, racing a check.
//
// Proves the GCRA side of the reservation protocol (`window/gcra.rs`, "Reservations and
// release"): a GCRA limiter `g` (L = 3, W = 30 ns, T = 10 ns, empty) and a Strict limiter `s`
// (L = 1, one bucket of 100 ns, empty). Thread A runs `check_all([(g, 2), (s, 1)])`: it
// reserves 2 on `g` (one CAS moving the TAT: the ticket), then is admitted or denied by `s`
// depending on whether thread B's `s.check()` came first; if denied it releases `g`. Thread B
// checks `s`, moves the clock from 0 to 15 ns and checks `g` (always admitted: L = 3). On
// every interleaving:
// - all or nothing: exactly one of A and B's `s` check passes, `s` counted exactly 1, and A
//   denied means `denied_by == Some(1)`;
// - no trace: when A was denied, the TAT after joining is exactly B's charge at 15 alone
//   (25), whatever the order of the reservation, the check and the release and whichever
//   times (0 or 15) A's calls read — although the release may run after B's charge at a
//   later time (it gives back only the undrained part, read at a clock taken after its load);
// - when A was admitted, B's decision and the final TAT are the sequential cell's for A's
//   reservation at 0 or 15 ns, before or after B's check;
// - B's decision is the sequential cell's with or without the reservation in place.
//
// Would fail if the release wrote a TAT computed from a load that B's CAS overtook (B's
// charge lost: TAT 0 or 15 instead of 25), if it subtracted all of `n·T` whenever
// `now ≤ ticket` (a reservation at 0 (ticket 20), B's charge at 15 (TAT 30),
// a release at 15 leaves 10 < 25, over-admitting), if it judged with a clock read before its
// load of the TAT (the same 10), or if a denied `check_all` committed `g` (TAT 45 or 30).
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::{Answer, GcraModel, GcraSpec, answer, model, tat_seen_at};
use slidegate::clock::ManualClock;
use slidegate::{Quota, SlidingWindow, check_all};

const SPEC: GcraSpec = GcraSpec {
    limit: 3,
    window: 30,
};

/// B's answer and the final `max(TAT, 15)` in the sequential cell for a reservation of 2 at
/// `reserved_at` made before (or after) B's check of 1 at 15 ns.
fn history(reserved_at: u64, before: bool) -> (Answer, u64) {
    let mut cell = GcraModel::new(SPEC, 0);
    if before {
        assert!(cell.check(reserved_at, 2, true).0);
    }
    let b = cell.check(15, 1, true);
    if !before {
        assert!(cell.check(reserved_at, 2, true).0);
    }
    (b, cell.tat.max(15))
}

#[test]
fn check_all_reserve_release_racing_a_check() {
    model(|| {
        let clock = ManualClock::new();
        let g = SPEC.limiter(&clock);
        let quota = Quota::new(1, Duration::from_nanos(100)).expect("a valid quota");
        let s = Arc::new(SlidingWindow::with_clock(quota, ManualClock::new()));

        let a = {
            let (g, s) = (g.clone(), s.clone());
            thread::spawn(move || check_all(&[(&*g, 2), (&*s, 1)]).expect("valid costs"))
        };
        let b_s = s.check().is_allowed();
        clock.set(Duration::from_nanos(15));
        let b_g = answer(&g.check());
        let a = a.join().unwrap();

        assert_ne!(
            a.is_allowed(),
            b_s,
            "all or nothing on s: {a:?}, B's check {b_s}"
        );
        assert_eq!(s.admitted_total(), 1, "s lost or doubled a charge");
        let seen = tat_seen_at(&g.peek(), 15);
        // A's reservation at 0 must precede B's charge (a later CAS re-reads the clock).
        let with = [history(0, true), history(15, true), history(15, false)];
        if a.is_allowed() {
            assert!(
                with.contains(&(b_g, seen)),
                "committed: B {b_g:?}, max(TAT, 15) = {seen}"
            );
        } else {
            assert_eq!(a.denied_by(), Some(1), "{a:?}");
            // The world without the reservation: B's charge at 15 alone.
            let mut cell = GcraModel::new(SPEC, 0);
            let alone = cell.check(15, 1, true);
            assert_eq!(
                seen, cell.tat,
                "a released reservation left a trace: {b_g:?}"
            );
            assert!(
                b_g == alone || with.iter().any(|h| h.0 == b_g),
                "B's decision {b_g:?} is not the cell's with or without the reservation"
            );
        }
    });
}
