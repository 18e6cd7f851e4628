// Ring refunds — a refund racing a fill and a check (Strict).
//
// Proves the refund protocol of the snapshot ring (`window/ring.rs`, "Refunds") through
// `refund`: a Strict limiter, L = 2, N = 1 bucket of 10 ns, holds 2 units admitted at t = 5
// (bucket 0). Thread A refunds 1 at whatever the clock reads (5 or 15);
// thread B moves the clock to 15 (so its check fills bucket 1 while the refund raises
// snapshots) and checks 1. On every interleaving:
// - the refund frees exactly 1, and `admitted_total()` is exactly 2 plus B's admission
//   (refunds never lower the count);
// - `assert_refunds_explained`: some sequential history explains B's decision, the refund's
//   count, and peeks after joining at 15, 25 and 35 ns, in which a refund removes the
//   oldest units its window counts. So the refunded unit never comes back in a later
//   window, and at every admission the window — admitted minus refunded so far — holds at
//   most L = 2 (Strict safety relative to refunds); B is admitted exactly when the refund
//   took effect first (a full window denies it otherwise).
//
// Would fail if the raise of a slot did not require the slot's tag (a fill's recycled slot
// overwritten: the newer bucket's snapshot replaced by an old count, and a later window
// reads garbage), if the raise went oldest first (a reader between the two raises sees a
// newer snapshot below an older one), or if a refund subtracted from the count (a check's
// CAS racing it is lost or the count goes back).
//
// The model runs on the direct limiter (`::direct`) and on one key of a keyed limiter
// (`::keyed`, `Spec::keyed_limiter`; `on_both_limiters!`), whose ring is stored in the key's
// entry: the same oracle checks both stores' rings.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::thread;
use loom_tests::on_both_limiters;
use loom_tests::{NewLimiter, RingEvent, RingOp, Spec, assert_refunds_explained, finals, run_ring};

fn refund_racing_a_fill_and_a_check(new: NewLimiter) {
    let spec = Spec::strict(2, 1, 10);
    let (limiter, clock) = new(&spec);
    clock.set(Duration::from_nanos(5));
    assert!(limiter.check_n(2).unwrap().is_allowed());

    let refunder = {
        let limiter = limiter.clone();
        thread::spawn(move || run_ring(&limiter, 0, RingOp::Refund(1)))
    };
    clock.set(Duration::from_nanos(15));
    let b = run_ring(&limiter, 1, RingOp::Check(1));
    let a = refunder.join().unwrap();
    let racing: Vec<RingEvent> = vec![a, b];

    assert_eq!(a.freed, 1, "{racing:#?}");
    assert_eq!(limiter.admitted_total(), 2 + b.charged(), "{racing:#?}");
    // Peeks at 15, 25 and 35 ns.
    let finals = finals(&limiter, &clock, &spec, 2);
    assert_refunds_explained(&spec, &[(0, 2)], &racing, &finals);
}

on_both_limiters! {
    refund_racing_a_fill_and_a_check();
}
