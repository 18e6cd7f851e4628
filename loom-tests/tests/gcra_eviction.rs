// GCRA, keyed — an idle eviction racing a check of the same key.
//
// Proves the GCRA cell's retirement (`window/gcra.rs`, "Retirement") through the keyed
// store: key 1 of a GCRA `KeyedLimiter` (L = 1, W = 10 ns, T = 10 ns) was charged at t = 0
// (TAT 10); at t = 10 its cell is as empty as a fresh one, and thread A evicts it
// (`retain_recent`: retire the cell by a CAS of the TAT it judged idle, unlink it,
// `defer_destroy` it, collect garbage) while thread B checks the key, possibly on the cell
// just before it is unlinked. On every interleaving: B is admitted with exactly a fresh
// cell's decision (`remaining` 0, `reset_after` 10 ns), the store holds the key once, the
// key's live cell holds exactly B's charge (a peek reads TAT 20) whether or not it was
// evicted, and a second check is denied.
//
// Would fail if retirement set the bit with a plain store instead of a CAS from the TAT it
// judged idle (B's charge, landed in between, is forgotten with the unlinked cell: a peek
// reads a fresh cell, TAT 10, and the second check is admitted), or if a check judged a
// retired word instead of looking the key up again (its decision is not a fresh cell's).
#![cfg(slidegate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom_tests::{GcraSpec, answer, model, spawn_evictor, tat_seen_at};
use slidegate::clock::ManualClock;

#[test]
fn check_racing_idle_eviction_loses_no_admission() {
    model(|| {
        let spec = GcraSpec {
            limit: 1,
            window: 10,
        };
        let clock = ManualClock::new();
        let limiter = Arc::new(spec.keyed(&clock));
        assert!(limiter.check(&1).is_allowed());
        clock.set(Duration::from_nanos(10));

        let evictor = spawn_evictor(&limiter);
        let d = answer(&limiter.check(&1));
        let evicted = evictor.join().expect("evictor panicked");

        // A fresh cell's answer at 10: admitted, nothing left, empty again at 20.
        assert_eq!(d, (true, 0, 0, 10), "eviction changed a decision");
        assert!(evicted <= 1);
        assert_eq!(limiter.evictions(), evicted as u64);
        let seen = tat_seen_at(&limiter.peek(&1), 10);
        assert_eq!(seen, 20, "the admission was lost (evicted: {evicted})");
        assert_eq!(limiter.len(), 1);
        assert!(
            !limiter.check(&1).is_allowed(),
            "a second admission in one window"
        );
    });
}
