//! The specification of usage known afterwards (`docs/design.md`, "Usage known afterwards"),
//! pinned on small schedules worked by hand: every number below was computed from the
//! design's tables, not read off the model.

use std::time::Duration;

use slidegate::{Mode, Quota};

use super::{Model, Reservation, Usage};

/// A model of `limit` per `window` ns in `mode`: ten buckets of `window / 10` ns (the fixed
/// window: one bucket of `window`).
fn model(mode: Mode, limit: u64, window: u64) -> Model {
    let quota = Quota::new(limit, Duration::from_nanos(window))
        .expect("a valid quota")
        .with_mode(mode);
    Model::new(quota)
}

fn charged(n: u64) -> Usage {
    Usage {
        charged: n,
        ..Usage::default()
    }
}

fn given_back(n: u64) -> Usage {
    Usage {
        given_back: n,
        ..Usage::default()
    }
}

// Strict, L = 10, W = 100 ns, G = 10 ns (N = 10): bucket `i` is counted until bucket
// `i + 11` starts, at `10·(i + 11)`.

#[test]
fn strict_commit_below_gives_back_from_its_own_bucket() {
    let mut m = model(Mode::Strict, 10, 100);
    let r = m.reserve(5, 6).expect("6 of 10 fits");
    assert_eq!(
        r,
        Reservation {
            at: 5,
            cost: 6,
            ticket: 0
        }
    );
    assert_eq!(m.remaining(5), 4);
    assert_eq!(m.check(25, 4), (true, 0));
    assert_eq!(m.commit(30, r, 2), given_back(4));
    // Bucket 0 holds 2, bucket 2 holds 4.
    assert_eq!(m.peek_n(30, 4), (true, 4));
    assert_eq!(m.peek_n(30, 5), (false, 4));
    // 5 fits once bucket 0 has left, at 110.
    assert_eq!(m.retry_after(30, 5), Some(80));
    assert_eq!(m.retry_after(30, 4), None);
    // Bucket 2 leaves at 130.
    assert_eq!(m.reset_after(30), 100);
    // A check only charged nothing.
    assert_eq!(m.remaining(30), 4);
}

#[test]
fn strict_give_back_is_not_a_refund() {
    // Bucket 0 holds 3 of another request's; a reservation of 5 in bucket 5 uses 1.
    let mut gave = model(Mode::Strict, 10, 100);
    gave.check(0, 3);
    let r = gave.reserve(50, 5).unwrap();
    assert_eq!(gave.commit(60, r, 1), given_back(4));
    // The same room now as a refund of 4 ...
    let mut refunded = model(Mode::Strict, 10, 100);
    refunded.check(0, 3);
    refunded.check(50, 5);
    assert_eq!(refunded.refund(60, 4), 4);
    assert_eq!(gave.remaining(60), 6);
    assert_eq!(refunded.remaining(60), 6);
    // ... but the refund took bucket 0's 3 (the oldest) and 1 of bucket 5: once bucket 0 has
    // left, the give-back's limiter counts 1 and the refund's 4.
    assert_eq!(gave.remaining(110), 9);
    assert_eq!(refunded.remaining(110), 6);
}

#[test]
fn strict_commit_above_charges_the_excess_as_debt() {
    let mut m = model(Mode::Strict, 10, 100);
    let r = m.reserve(0, 5).unwrap();
    assert_eq!(m.commit(50, r, 25), charged(20));
    // 25 counted against a limit of 10: in debt.
    assert_eq!(m.remaining(50), 0);
    assert_eq!(m.check(50, 1), (false, 0));
    assert_eq!(m.peek_n(50, 10), (false, 0));
    // Bucket 0 leaving (at 110) is not enough: bucket 5's 20 must leave, at 160.
    assert_eq!(m.retry_after(50, 1), Some(110));
    assert_eq!(m.retry_after(109, 10), Some(51));
    assert_eq!(m.reset_after(50), 110);
    assert_eq!(m.remaining(159), 0);
    assert_eq!(m.remaining(160), 10);
    assert_eq!(m.check(160, 10), (true, 0));
}

#[test]
fn strict_give_back_only_while_its_bucket_is_in_the_window() {
    let mut m = model(Mode::Strict, 10, 100);
    let r2 = m.reserve(200, 4).unwrap();
    let r3 = m.reserve(200, 3).unwrap();
    // At 309 (bucket 30) bucket 20 is the oldest counted: the whole estimate comes back.
    assert_eq!(m.cancel(309, r2), given_back(4));
    assert_eq!(m.remaining(309), 7);
    // At 310 bucket 20 has left: nothing to give back, and the excess is still charged.
    assert_eq!(m.commit(310, r3, 5), charged(2));
    assert_eq!(m.remaining(310), 8);
}

#[test]
fn strict_commit_at_the_estimate_changes_nothing() {
    let mut m = model(Mode::Strict, 10, 100);
    let r = m.reserve(0, 4).unwrap();
    let before = m.clone();
    assert_eq!(m.commit(30, r, 4), Usage::default());
    for t in [30, 100, 109, 110] {
        assert_eq!(m.remaining(t), before.remaining(t));
    }
}

#[test]
fn strict_record_is_debt_and_clamps_at_the_usage_ceiling() {
    let mut m = model(Mode::Strict, 10, 100);
    let ceiling = (1 << 23) - 1 - 10;
    assert_eq!(m.usage_ceiling(), ceiling);
    assert_eq!(m.record_usage(0, 0), Usage::default());
    assert_eq!(m.record_usage(0, 30), charged(30));
    assert_eq!(m.remaining(0), 0);
    assert_eq!(m.retry_after(0, 1), Some(110));
    assert_eq!(m.reset_after(0), 110);
    // Up to the ceiling over the ring's N + 1 buckets, never a wrap.
    assert_eq!(
        m.record_usage(5, u64::MAX),
        Usage {
            charged: ceiling - 30,
            given_back: 0,
            clamped: u64::MAX - (ceiling - 30),
        }
    );
    assert_eq!(
        m.record_usage(99, 1),
        Usage {
            charged: 0,
            given_back: 0,
            clamped: 1
        }
    );
    // A bucket at the ceiling leaves whole, as a larger one would.
    assert_eq!(m.retry_after(99, 10), Some(11));
    assert_eq!(m.record_usage(110, 5), charged(5));
    assert_eq!(m.remaining(110), 5);
}

#[test]
fn the_ceiling_of_a_limit_above_two_to_the_21() {
    let m = model(Mode::Strict, 3_000_000, 100);
    assert_eq!(m.usage_ceiling(), (1 << 31) - 1 - 3_000_000);
    let m = model(Mode::Strict, 1 << 21, 100);
    assert_eq!(m.usage_ceiling(), (1 << 23) - 1 - (1 << 21));
}

// Strict with marks, L = 10, W = 100 ns, G = 10 ns: the mark's step is ⌈10/254⌉ = 1 ns, so
// bucket 0 leaves at `100 + r` once its last admission at offset `r` is `≤ t − W`.

#[test]
fn marked_give_back_until_the_oldest_bucket_has_left_by_its_mark() {
    let mut m = model(Mode::StrictMarked, 10, 100);
    let r = m.reserve(2, 6).unwrap();
    m.check(50, 4);
    assert_eq!(m.remaining(101), 0);
    assert_eq!(m.remaining(102), 6);
    let mut late = m.clone();
    // At 101 bucket 0's last admission (at 2) is still inside: given back.
    assert_eq!(m.cancel(101, r), given_back(6));
    assert_eq!(m.remaining(101), 6);
    // At 102 it has left: nothing to give back.
    assert_eq!(late.cancel(102, r), Usage::default());
    assert_eq!(late.remaining(102), 6);
}

#[test]
fn marked_give_back_keeps_the_mark() {
    let mut m = model(Mode::StrictMarked, 10, 100);
    m.check(2, 1);
    let r = m.reserve(8, 4).unwrap();
    assert_eq!(m.cancel(9, r), given_back(4));
    // Bucket 0 holds 1 unit admitted at 2, but its mark says 8: it counts until 108.
    assert_eq!(m.remaining(103), 9);
    assert_eq!(m.remaining(107), 9);
    assert_eq!(m.remaining(108), 10);
}

#[test]
fn marked_debt_leaves_with_its_mark() {
    let mut m = model(Mode::StrictMarked, 10, 100);
    assert_eq!(m.record_usage(7, 15), charged(15));
    assert_eq!(m.check(50, 1), (false, 0));
    // The debt's mark is 7: it leaves at 107, where Strict would wait for 110.
    assert_eq!(m.retry_after(7, 1), Some(100));
    assert_eq!(m.reset_after(7), 100);
    let mut strict = model(Mode::Strict, 10, 100);
    strict.record_usage(7, 15);
    assert_eq!(strict.retry_after(7, 1), Some(103));
}

// Weighted, L = 10, W = 100 ns, G = 10 ns: the oldest bucket weighs `1 − r/10`.

#[test]
fn weighted_debt_in_the_oldest_bucket_is_weighed() {
    let mut m = model(Mode::Weighted, 10, 100);
    let r = m.reserve(5, 8).unwrap();
    assert_eq!(m.commit(12, r, 20), charged(12));
    assert_eq!(m.remaining(12), 0);
    // At 110 bucket 1's 12 is whole in the window; from 110 it is the oldest, weighing
    // 12·(10 − r)/10: 1 fits when that is at most 9, at r = 3.
    assert_eq!(m.peek_n(112, 1), (false, 0));
    assert_eq!(m.peek_n(113, 1), (true, 1));
    assert_eq!(m.retry_after(12, 1), Some(101));
    assert_eq!(m.reset_after(12), 108);
}

#[test]
fn weighted_give_back_from_the_oldest_bucket_frees_its_weighted_share() {
    let mut m = model(Mode::Weighted, 10, 100);
    let r = m.reserve(5, 6).unwrap();
    m.check(50, 4);
    // At 105: 4 + 6·(1 − 5/10) = 7.
    assert_eq!(m.remaining(105), 3);
    assert_eq!(m.commit(105, r, 2), given_back(4));
    // 4 + 2·(1/2) = 5: 4 units given back, 2 of room.
    assert_eq!(m.remaining(105), 5);
}

// The fixed window, L = 10, W = G = 100 ns.

#[test]
fn fixed_window_give_back_and_debt_stay_in_their_window() {
    let mut m = model(Mode::FixedWindow, 10, 100);
    let r = m.reserve(10, 7).unwrap();
    m.check(20, 3);
    assert_eq!(m.commit(30, r, 4), given_back(3));
    assert_eq!(m.remaining(30), 3);
    let r2 = m.reserve(90, 3).unwrap();
    // The next window: nothing of r2's is counted any more.
    assert_eq!(m.cancel(110, r2), Usage::default());
    assert_eq!(m.remaining(110), 10);
    assert_eq!(m.record_usage(150, 25), charged(25));
    assert_eq!(m.remaining(150), 0);
    assert_eq!(m.retry_after(150, 1), Some(50));
    assert_eq!(m.reset_after(150), 50);
    assert_eq!(m.remaining(200), 10);
}

#[test]
fn fixed_window_clamps_on_the_rings_two_buckets() {
    let mut m = model(Mode::FixedWindow, 10, 100);
    m.check(0, 10);
    // The ring holds windows 0 and 1: the 10 of window 0 count against the ceiling.
    let u = m.record_usage(110, u64::MAX);
    assert_eq!(u.charged, m.usage_ceiling() - 10);
    assert_eq!(u.clamped, u64::MAX - u.charged);
}

// The exact log, L = 4, W = 100 ns.

#[test]
fn log_give_back_frees_the_oldest_units_up_to_its_own() {
    let mut m = model(Mode::ExactLog, 4, 100);
    m.check(10, 1);
    let r = m.reserve(20, 3).unwrap();
    assert_eq!(m.remaining(20), 0);
    assert_eq!(m.commit(30, r, 1), given_back(2));
    assert_eq!(m.remaining(30), 2);
    // The units at 10 and one at 20 were freed, not two at 20: 3 fits at 120, not at 110.
    assert_eq!(m.retry_after(30, 3), Some(90));
    assert_eq!(m.reset_after(30), 90);
}

#[test]
fn log_give_back_after_its_units_left_is_nothing() {
    let mut m = model(Mode::ExactLog, 4, 100);
    let r = m.reserve(20, 3).unwrap();
    m.check(119, 1);
    assert_eq!(m.commit(120, r, 0), Usage::default());
    assert_eq!(m.remaining(120), 3);
    // Nor are the units of a later request ever taken for it.
    let mut m = model(Mode::ExactLog, 4, 100);
    let r = m.reserve(20, 2).unwrap();
    m.check(30, 2);
    assert_eq!(m.refund(40, 2), 2); // the oldest: r's own
    assert_eq!(m.cancel(50, r), Usage::default());
    assert_eq!(m.remaining(50), 2);
}

#[test]
fn log_debt_past_the_limit_goes_to_the_debt_record() {
    let mut m = model(Mode::ExactLog, 4, 100);
    let r = m.reserve(0, 2).unwrap();
    // 7 past the estimate: 2 fit under L as units at 10, 5 are the debt record at 10.
    assert_eq!(m.commit(10, r, 9), charged(7));
    assert_eq!(m.remaining(10), 0);
    assert_eq!(m.check(50, 1), (false, 0));
    // The units at 0 leave at 100, those at 10 and the record at 110.
    assert_eq!(m.retry_after(50, 1), Some(60));
    assert_eq!(m.reset_after(50), 60);
    assert_eq!(m.peek_n(110, 4), (true, 4));
}

#[test]
fn log_debt_record_leaves_with_its_newest_charge() {
    let mut m = model(Mode::ExactLog, 4, 100);
    m.record_usage(0, 4);
    assert_eq!(m.record_usage(10, 5), charged(5));
    // Over the limit at 60: the record takes the 1 and moves to 60, its 5 with it.
    assert_eq!(m.record_usage(60, 1), charged(1));
    assert_eq!(m.retry_after(60, 1), Some(100));
    // The definition would admit at 115 (only the 1 at 60 inside); the record does not.
    assert_eq!(m.peek_n(115, 1), (false, 0));
    assert_eq!(m.peek_n(160, 4), (true, 4));
}

#[test]
fn log_usage_under_the_limit_is_logged_as_units() {
    let mut m = model(Mode::ExactLog, 4, 100);
    assert_eq!(m.record_usage(0, 1), charged(1));
    assert_eq!(m.record_usage(50, 1), charged(1));
    assert_eq!(m.remaining(50), 2);
    assert_eq!(m.remaining(120), 3);
    assert_eq!(m.reset_after(120), 30);
}

#[test]
fn log_debt_partly_inside_waits_for_the_record_or_the_units() {
    let mut m = model(Mode::ExactLog, 4, 100);
    m.check(0, 2);
    m.record_usage(10, 2); // fits: units at 10
    m.record_usage(20, 1); // past L: the record, 1 at 20
    assert_eq!(m.remaining(20), 0);
    // 1 fits when one unit leaves while the record stays (2 + 1 + 1 ≤ 4): at 100.
    assert_eq!(m.retry_after(20, 1), Some(80));
    // 3 fits beside the record once every unit has left (1 + 3 ≤ 4): at 110, before the
    // record leaves.
    assert_eq!(m.retry_after(20, 3), Some(90));
    // 4 never fits beside the record: it waits for it, at 120.
    assert_eq!(m.retry_after(20, 4), Some(100));
}

#[test]
fn log_refund_takes_the_record_in_its_time_order() {
    let mut m = model(Mode::ExactLog, 4, 100);
    let r = m.reserve(0, 2).unwrap();
    m.commit(10, r, 9); // units 0, 0, 10, 10; record 5 at 10
    assert_eq!(m.refund(50, 3), 3); // 0, 0, then a unit at 10
    assert_eq!(m.remaining(50), 0); // 1 unit and 5 of debt
    assert_eq!(m.refund(50, 2), 2); // the last unit at 10, then 1 of the record
    assert_eq!(m.remaining(50), 0); // 4 of debt: exactly at L
    assert_eq!(m.refund(50, 1), 1);
    assert_eq!(m.remaining(50), 1);
    assert_eq!(m.refund(50, 10), 3); // never more than the window holds
    assert_eq!(m.remaining(50), 4);
}

#[test]
fn log_record_clamps_at_the_usage_ceiling() {
    let mut m = model(Mode::ExactLog, 4, 100);
    let ceiling = (1 << 23) - 1 - 4;
    let u = m.record_usage(0, u64::MAX);
    assert_eq!(u.charged, ceiling);
    assert_eq!(u.clamped, u64::MAX - ceiling);
    assert_eq!(m.record_usage(1, 1).clamped, 1);
    assert_eq!(m.retry_after(1, 4), Some(99));
}

// GCRA, L = 4, W = 100 ns: T = 25 ns, τ = 100 ns.

#[test]
fn gcra_commit_below_gives_back_its_undrained_intervals() {
    let mut m = model(Mode::Gcra, 4, 100);
    let r = m.reserve(0, 2).unwrap();
    assert_eq!(r.ticket, 50);
    assert_eq!(m.remaining(0), 2);
    assert_eq!(m.check(10, 1), (true, 1)); // TAT 75
    assert_eq!(m.commit(20, r, 1), given_back(1)); // TAT 50
    assert_eq!(m.remaining(20), 2);
    assert_eq!(m.reset_after(20), 30);
}

#[test]
fn gcra_give_back_of_a_partly_drained_reservation() {
    let mut m = model(Mode::Gcra, 4, 100);
    let r = m.reserve(0, 2).unwrap();
    let mut later = m.clone();
    // At 40 only 10 ns of its 50 are left: TAT 40, one unit (partly drained) given back.
    assert_eq!(m.cancel(40, r), given_back(1));
    assert_eq!(m.remaining(40), 4);
    assert_eq!(m.reset_after(40), 0);
    // At 60 it has drained: nothing to give back.
    assert_eq!(later.cancel(60, r), Usage::default());
}

#[test]
fn gcra_debt_moves_the_arrival_time_past_the_tolerance() {
    let mut m = model(Mode::Gcra, 4, 100);
    let r = m.reserve(0, 4).unwrap(); // TAT 100
    assert_eq!(m.commit(10, r, 10), charged(6)); // TAT 250
    assert_eq!(m.remaining(10), 0);
    // retry_after = TAT + n·T − τ − t.
    assert_eq!(m.retry_after(10, 1), Some(250 + 25 - 100 - 10));
    assert_eq!(m.retry_after(10, 4), Some(250 + 100 - 100 - 10));
    assert_eq!(m.reset_after(10), 240);
    assert_eq!(m.peek_n(175, 1), (true, 1));
}

#[test]
fn gcra_record_clamps_at_the_ceiling_and_at_max_time() {
    let mut m = model(Mode::Gcra, 4, 100);
    let ceiling = (1 << 23) - 1 - 4;
    assert_eq!(m.record_usage(0, u64::MAX).charged, ceiling);
    assert_eq!(m.reset_after(0), ceiling * 25);
    assert_eq!(m.record_usage(0, 1).clamped, 1);
    // T = 2⁶¹ ns: at most three intervals fit below MAX_TIME.
    let mut m = model(Mode::Gcra, 2, 1 << 62);
    assert_eq!(
        m.record_usage(0, 10),
        Usage {
            charged: 3,
            given_back: 0,
            clamped: 7
        }
    );
}

#[test]
fn every_mode_reserve_is_a_check_and_peek_n_charges_nothing() {
    for mode in super::MODES {
        let mut reserved = model(mode, 10, 100);
        let mut checked = model(mode, 10, 100);
        for (t, n) in [
            (0, 4),
            (3, 5),
            (7, 2),
            (40, 3),
            (95, 6),
            (130, 10),
            (131, 1),
        ] {
            let before = reserved.clone();
            let peek = reserved.peek_n(t, n);
            assert_eq!(reserved.remaining(t), before.remaining(t), "{mode:?}");
            let r = reserved.reserve(t, n);
            let c = checked.check(t, n);
            assert_eq!((r.is_some(), reserved.remaining(t)), c, "{mode:?} at {t}");
            assert_eq!(peek.0, c.0, "{mode:?} at {t}");
            if let Some(r) = r {
                // Dropped, never committed: the estimate stays, as a check's.
                assert_eq!(r.cost, n);
            }
        }
    }
}

#[test]
fn every_mode_cancel_right_away_leaves_the_state_of_no_reservation() {
    for mode in super::MODES {
        let mut m = model(mode, 10, 100);
        m.check(0, 3);
        let fresh = m.clone();
        let r = m.reserve(10, 5).unwrap();
        assert_eq!(m.cancel(10, r), given_back(5), "{mode:?}");
        for t in [10, 50, 99, 100, 105, 110, 200] {
            if mode == Mode::ExactLog {
                // The oldest units inside were freed (the 3 at 0 and 2 at 10), so 3 at 10
                // stay: the same room now, stricter after.
                assert!(m.remaining(t) <= fresh.remaining(t), "at {t}");
                continue;
            }
            assert_eq!(m.remaining(t), fresh.remaining(t), "{mode:?} at {t}");
            assert_eq!(m.reset_after(t), fresh.reset_after(t), "{mode:?} at {t}");
        }
    }
}

#[test]
fn log_cancel_right_away_is_stricter_than_no_reservation() {
    let mut m = model(Mode::ExactLog, 10, 100);
    m.check(0, 3);
    let r = m.reserve(10, 5).unwrap();
    assert_eq!(m.cancel(10, r), given_back(5));
    assert_eq!(m.remaining(10), 7);
    // Without the reservation the 3 units at 0 would leave at 100; here 3 at 10 leave at 110.
    assert_eq!(m.remaining(100), 7);
    assert_eq!(m.reset_after(10), 100);
    assert_eq!(m.remaining(110), 10);
}

#[test]
fn log_refund_frees_older_units_before_the_record_and_the_record_before_newer_ones() {
    let mut m = model(Mode::ExactLog, 4, 100);
    m.check(0, 3);
    assert_eq!(m.record_usage(10, 3), charged(3)); // 1 unit at 10, the record 2 at 10
    assert_eq!(m.remaining(100), 1); // the units at 0 left
    assert_eq!(m.check(100, 1), (true, 0));
    // The unit at 10, then 1 of the record; the unit at 100 stays.
    assert_eq!(m.refund(100, 2), 2);
    assert_eq!(m.remaining(100), 2);
    assert_eq!(m.remaining(110), 3);
}

#[test]
fn gcra_give_back_never_frees_room_an_admission_after_it_took() {
    // The release rule of `check_all` reservations (src/window/gcra.rs), for a commit: a
    // check at 40 clamped to the reservation's ticket, so only its undrained 10 ns return.
    let mut m = model(Mode::Gcra, 4, 100);
    let r = m.reserve(0, 2).unwrap(); // TAT 50
    assert_eq!(m.check(40, 1), (true, 2)); // TAT 75
    assert_eq!(m.cancel(40, r), given_back(1)); // TAT 65, as without the reservation
    assert_eq!(m.remaining(40), 3);
    let mut without = model(Mode::Gcra, 4, 100);
    without.check(40, 1);
    assert_eq!(without.reset_after(40), m.reset_after(40));
}
