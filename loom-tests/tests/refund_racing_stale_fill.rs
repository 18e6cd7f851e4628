// Ring refunds — a fill that read the count before an admission and a refund past it.
//
// Proves the refund's barrier on `goal` (`window/ring.rs`, "Refunds"): a Strict limiter,
// L = 3, N = 1 bucket of 10 ns, holds 1 unit admitted at t = 5 (bucket 0). Thread A checks 1
// and then refunds 2, at whatever the clock reads (5 or 15); thread B moves the clock to 15
// and checks 1, filling bucket 1 — a fill that may have read the count (1) before A's
// admission and the refund's raise. On every interleaving every check is admitted (3 units
// fit), the refund frees exactly 2, `admitted_total()` is exactly 3, and
// `assert_refunds_explained` finds one sequential history — refunds removing the oldest
// units counted — that explains every decision and the peeks after joining at 15, 25 and
// 35 ns: the two refunded units do not come back in bucket 1's or bucket 2's window, and no
// window ever held more than L of admitted minus refunded.
//
// Would fail without the barrier: B's fill, having read count 1, establishes bucket 1's
// snapshot at 1 after A's refund raised bucket 0's to 3, so the window of bucket 2 reads
// 3 − 1 = 2 units where the history leaves 1 (a peek at 25 reports `remaining` 1, not 2):
// the refunded unit is back.
//
// The model runs on the direct limiter (`::direct`) and on one key of a keyed limiter
// (`::keyed`, `Spec::keyed_limiter`; `on_both_limiters!`), whose ring is stored in the key's
// entry: the same oracle checks both stores' rings.
//
// Without the barrier the direct variant fails: its failing history has A's refund read
// the clock at 5 after B set it to 15 (a stale reading). The keyed calls' epoch pins rule
// that reading out under loom, where a pin's fence is a full one (if B's pin comes first in
// their order A's refund reads 15, else B's fill reads the count with A's admission), so
// the plain keyed variant passes; a third, `_keyed_lagging`, has A's clock read at most 5
// (`RecordingClock::read_at_most`: a thread whose clock lags) and fails as the direct one
// does.
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::thread;
use loom_tests::on_both_limiters;
use loom_tests::{
    NewLimiter, RecordingClock, RingEvent, RingOp, Spec, assert_refunds_explained, finals, model,
    run_ring,
};

/// `a_lags`: thread A's clock reads at most 5 ns (see the header).
fn refund_racing_a_fill_that_read_an_older_count(new: NewLimiter, a_lags: bool) {
    let spec = Spec::strict(3, 1, 10);
    let (limiter, clock) = new(&spec);
    clock.set(Duration::from_nanos(5));
    assert!(limiter.check().is_allowed());

    let a = {
        let limiter = limiter.clone();
        thread::spawn(move || {
            if a_lags {
                RecordingClock::read_at_most(5);
            }
            [
                run_ring(&limiter, 0, RingOp::Check(1)),
                run_ring(&limiter, 0, RingOp::Refund(2)),
            ]
        })
    };
    clock.set(Duration::from_nanos(15));
    let b = run_ring(&limiter, 1, RingOp::Check(1));
    let [a_check, a_refund] = a.join().unwrap();
    let racing: Vec<RingEvent> = vec![a_check, a_refund, b];

    assert!(a_check.charged() == 1 && b.charged() == 1, "{racing:#?}");
    assert_eq!(a_refund.freed, 2, "{racing:#?}");
    assert_eq!(limiter.admitted_total(), 3, "{racing:#?}");
    // Peeks at 15, 25 and 35 ns.
    let finals = finals(&limiter, &clock, &spec, 2);
    assert_refunds_explained(&spec, &[(0, 1)], &racing, &finals);
}

#[test]
fn refund_racing_a_fill_that_read_an_older_count_keyed_lagging() {
    model(|| refund_racing_a_fill_that_read_an_older_count(Spec::keyed_limiter, true));
}

on_both_limiters! {
    refund_racing_a_fill_that_read_an_older_count(false);
}
