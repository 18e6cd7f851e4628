// Fixed window — admission racing rotation, through the counter's fast path.
//
// Proves: with the clock crossing from one fixed window into the next while two threads check
// a limiter of L = 2 whose first window holds one unit, every call is judged in one window
// (its own reading's, or — if the ring moved past it — the next one's, as its decision
// shows: its reading plus its `reset_after` is the end of the window it judged); no window admits more than L of the units judged in it; each unit is counted in the
// window it was judged in or, if its compare-and-swap landed after the next window's snapshot,
// in that later one (the ring's documented lean toward denial, never the other way); no
// check is denied in a window that did not hold L by that count; and the total count is
// exactly what was admitted (nothing lost or doubled).
//
// The fixed window judges the current bucket's snapshot, which the fast path reads as the
// ring's second slot (`Fast::rest`), and charges without re-judging. Builds that fail
// here: the fast path admitting while the clock is already in the next window but
// `front` is not (it judged the old window's count and reported a wait from it), and the
// fast path undercounting the window by one (window 0 over). Not visible here, by the
// ring's own argument: the fast path passing no loads on a decline (the general loop then
// re-reads; only slower), dropping its re-check of `front` before the CAS (an admission
// landing after the next snapshot is counted in the newer window, the lean above).
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::thread;
use loom_tests::{Event, Op, Spec, charged, effective_times, model, run};
use slidegate::Mode;

/// L = 2, one bucket of 10 ns (G = W).
const SPEC: Spec = Spec {
    limit: 2,
    buckets: 1,
    granularity: 10,
    mode: Mode::FixedWindow,
};

/// One unit admitted at t = 5 (window 0 has room for one more). A ticker moves the clock to
/// 15 (window 1) while two threads `check()`: each may be admitted in either window, through
/// the fast path or the general one.
#[test]
fn checks_race_a_clock_crossing_into_the_next_window() {
    model(|| {
        let (limiter, clock) = SPEC.limiter();
        clock.set(Duration::from_nanos(5));
        let pre = run(&limiter, 0, Op::Check(1));
        assert!(pre.decision.is_allowed());

        let ticker = {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(Duration::from_nanos(10)))
        };
        let checkers: Vec<_> = (1..=2)
            .map(|t| {
                let limiter = limiter.clone();
                thread::spawn(move || run(&limiter, t, Op::Check(1)))
            })
            .collect();
        ticker.join().unwrap();
        let all: Vec<Event> = std::iter::once(pre)
            .chain(checkers.into_iter().map(|h| h.join().unwrap()))
            .collect();

        // The window each call was judged in: its reading's, or the next one's start. Its
        // decision's waits are measured from its reading, and the window it judged (never
        // empty at a check: it counts the call's unit or denied it) empties when it ends, so
        // reading + reset_after is that window's end.
        let window = |e: &Event| {
            let times = effective_times(&SPEC, e, 1);
            let end = e.at + e.decision.reset_after().as_nanos() as u64;
            let w = SPEC.bucket(end) - 1;
            assert!(times.contains(&(w * SPEC.granularity).max(e.at)), "{e:?}");
            w
        };
        let admitted_in = |w: u64| -> u64 {
            all.iter()
                .filter(|e| window(e) == w)
                .map(Event::charged)
                .sum()
        };
        // Window 1's count, read after the race: its own units plus any of window 0's racing
        // units that landed after its snapshot (the pre-race unit cannot).
        let last = run(&limiter, 9, Op::Peek);
        assert_eq!(last.at, 15);
        let counted_1 = SPEC.limit - last.decision.remaining();
        let racing_in_0 = admitted_in(0) - all[0].charged();
        assert!(
            (admitted_in(1)..=admitted_in(1) + racing_in_0).contains(&counted_1),
            "window 1 counts {counted_1}: {all:#?}"
        );
        for e in &all {
            let w = window(e);
            assert!(admitted_in(w) <= SPEC.limit, "window {w} over: {all:#?}");
            // A denial saw its window full: window 0 only ever counts units judged in it.
            let full = if w == 0 { admitted_in(0) } else { counted_1 };
            assert!(
                e.decision.is_allowed() || full >= SPEC.limit,
                "spurious denial in window {w}: {all:#?}"
            );
        }
        assert_eq!(limiter.admitted_total(), charged(&all), "{all:#?}");
    });
}
