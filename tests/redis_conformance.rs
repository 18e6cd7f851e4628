//! The Lua script is a second implementation of every algorithm: on any sequence of (clock
//! step, check / peek / refund), a `RedisLimiter` on a real `redis-server`, judging at a
//! test clock's time, decides exactly what the local `SlidingWindow` decides on the same
//! clock — allowed, remaining, retry_after, reset_after, and what a refund frees — and both
//! equal the reference model (`slidegate-testkit`). Quotas are in whole microseconds (the
//! backend's resolution); times start at 0 or at today's Unix time and jump by up to years.
#![cfg(feature = "redis")]

use slidegate_testkit::model as common;
use slidegate_testkit::redis_server;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Model, REDIS_MODES};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use slidegate::clock::ManualClock;
use slidegate::redis::{Connection, RedisLimiter};
use slidegate::{Mode, Quota, SlidingWindow};

#[derive(Clone, Debug)]
enum Op {
    Check(u64),
    Peek(u64),
    Refund(u64),
}

const US: u64 = 1000;
/// Today, roughly, in µs since the epoch: the range the server's TIME lives in.
const TODAY_US: u64 = 1_764_000_000_000_000;

fn quota(max_limit: u64, modes: Vec<Mode>) -> impl Strategy<Value = Quota> {
    (
        1u64..=max_limit,
        prop::sample::select(vec![1u64, 2, 3, 4, 7, 10]),
        1u64..=50,
        prop::sample::select(modes),
    )
        .prop_map(|(limit, buckets, g, mode)| {
            Quota::new(limit, Duration::from_micros(g * buckets))
                .unwrap()
                .with_granularity(Duration::from_micros(g))
                .unwrap()
                .with_mode(mode)
        })
}

/// Steps in µs, on and one µs off the bucket and window edges, and gaps of up to a year.
fn step(g: u64, w: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => Just(0),
        4 => 1..=g,
        2 => Just(g),
        2 => Just(g - 1),
        2 => Just(g + 1),
        2 => Just(w),
        2 => Just(w - 1),
        1 => Just(w + 1),
        2 => 0..=3 * w,
        1 => Just(365 * 24 * 3600 * 1_000_000u64),
    ]
}

fn case(max_limit: u64, modes: Vec<Mode>) -> impl Strategy<Value = (Quota, u64, Vec<(u64, Op)>)> {
    quota(max_limit, modes).prop_flat_map(|q| {
        let g = q.granularity().as_micros() as u64;
        let w = q.window().as_micros() as u64;
        let l = q.limit();
        let op = prop_oneof![
            6 => (1..=l).prop_map(Op::Check),
            1 => Just(Op::Peek(1)),
            1 => (1..=l).prop_map(Op::Peek),
            1 => (1..=l + 2).prop_map(Op::Refund),
        ];
        (
            Just(q),
            prop_oneof![Just(0u64), Just(TODAY_US)],
            prop::collection::vec((step(g, w), op), 1..40),
        )
    })
}

struct Fixture {
    _server: redis_server::Server,
    rt: tokio::runtime::Runtime,
    conn: Connection,
    next: AtomicUsize,
}

thread_local! {
    /// One server per test, shared by its cases; a test runs on a thread of its own, so the
    /// server stops (on the thread-local's drop) when the test ends.
    static FIXTURE: Fixture = {
        let server = redis_server::Server::start();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let conn = rt.block_on(Connection::open(&server.url())).unwrap();
        Fixture {
            _server: server,
            rt,
            conn,
            next: AtomicUsize::new(0),
        }
    };
}

/// Whether `op` travels in a `decide` batch with the checks and peeks of cost 1 at its time: a
/// peek of a larger cost and a refund are calls of their own (the library's `all`), sent alone,
/// since calls made at once have no order between them.
fn batched(op: &Op) -> bool {
    matches!(op, Op::Check(_) | Op::Peek(1))
}

/// Runs one case against two fresh keys (every third operation on the second); every answer
/// of Redis must equal the local limiter's and the model's. Checks and peeks at one time
/// run concurrently, so that they travel together in one call of the library's `decide`.
fn run(quota: Quota, start: u64, ops: Vec<(u64, Op)>) -> Result<(), TestCaseError> {
    FIXTURE.with(|f| run_on(f, quota, start, ops))
}

fn run_on(f: &Fixture, quota: Quota, start: u64, ops: Vec<(u64, Op)>) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let remote = RedisLimiter::builder(quota)
        .prefix(format!("conf{}:", f.next.fetch_add(1, Ordering::Relaxed)))
        .deadline(Duration::from_secs(10))
        .test_clock(clock.clone())
        .build(&f.conn)
        .unwrap();
    let keys = ["k", "j"];
    let local = keys.map(|_| SlidingWindow::with_clock(quota, clock.clone()));
    let mut model = keys.map(|_| Model::new(quota));
    let mut t = start;
    let mut i = 0;
    while i < ops.len() {
        t += ops[i].0;
        clock.set(Duration::from_micros(t));
        let ns = t * US;
        // The run of checks and peeks at this time, sent at once.
        let burst = ops[i..]
            .iter()
            .enumerate()
            .take_while(|(j, (step, op))| batched(op) && (*j == 0 || *step == 0))
            .count();
        if burst > 0 {
            let which = |j: usize| (i + j) % 3 / 2;
            let asked = ops[i..i + burst].iter().enumerate().map(|(j, (_, op))| {
                let (remote, key) = (&remote, keys[which(j)]);
                async move {
                    match op {
                        Op::Check(n) => remote.check_n(key, *n).await,
                        _ => remote.peek(key).await,
                    }
                }
            });
            let answers = f.rt.block_on(futures_util::future::join_all(asked));
            for (j, ((_, op), r)) in ops[i..i + burst].iter().zip(answers).enumerate() {
                let (k, r) = (which(j), r.unwrap());
                prop_assert_eq!(r.path(), slidegate::redis::Path::Redis);
                prop_assert_eq!(r.server_time_micros(), t);
                if let Op::Check(n) = *op {
                    let d = local[k].check_n(n).unwrap();
                    prop_assert_eq!(r.decision(), d, "check_n({}) at t={} µs, key {}", n, t, k);
                    let (allowed, remaining) = model[k].check(ns, n);
                    prop_assert_eq!((d.is_allowed(), d.remaining()), (allowed, remaining));
                } else {
                    let d = local[k].peek();
                    prop_assert_eq!(r.decision(), d, "peek at t={} µs, key {}", t, k);
                    prop_assert_eq!(d.remaining(), model[k].remaining(ns));
                }
            }
            i += burst;
        } else if let Op::Peek(n) = ops[i].1 {
            let k = i % 3 / 2;
            let r = f.rt.block_on(remote.peek_n(keys[k], n)).unwrap();
            let d = local[k].peek_n(n).unwrap();
            prop_assert_eq!(r.decision(), d, "peek_n({}) at t={} µs, key {}", n, t, k);
            prop_assert_eq!(r.server_time_micros(), t);
            prop_assert_eq!(d.is_allowed(), model[k].admits(ns, n));
            prop_assert_eq!(d.remaining(), model[k].remaining(ns));
            i += 1;
        } else if let Op::Refund(n) = ops[i].1 {
            let k = i % 3 / 2;
            let freed = local[k].refund(n);
            let r = f.rt.block_on(remote.refund(keys[k], n)).unwrap();
            prop_assert_eq!(r, freed, "refund({}) at t={} µs, key {}", n, t, k);
            prop_assert_eq!(freed, model[k].refund(ns, n));
            i += 1;
        }
    }
    Ok(())
}

proptest! {
    // Each case is a few dozen round trips; 384 cases across the six algorithms.
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn the_script_decides_as_the_local_limiters((quota, start, ops) in case(12, REDIS_MODES.to_vec())) {
        run(quota, start, ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Limits up to the largest and buckets of hours: products of limit and granularity far
    /// above 2^53, where the script's exact multiplication takes over from doubles.
    #[test]
    fn large_limits_and_long_buckets_stay_exact(
        limit in prop_oneof![Just(slidegate::MAX_LIMIT), 1u64..=slidegate::MAX_LIMIT],
        g_secs in prop_oneof![Just(3600u64), 1u64..=7200],
        buckets in 1u64..=4,
        mode in prop::sample::select(vec![Mode::Strict, Mode::StrictMarked, Mode::Weighted, Mode::Gcra, Mode::FixedWindow]),
        ops in prop::collection::vec((0u64..=3, 0u64..1000, 1u64..=1000), 1..24),
    ) {
        let g = g_secs * 1_000_000 + 7;
        let quota = Quota::new(limit, Duration::from_micros(g * buckets)).unwrap()
            .with_granularity(Duration::from_micros(g)).unwrap()
            .with_mode(mode);
        let g = quota.granularity().as_micros() as u64;
        let steps = ops.into_iter().map(|(kind, frac, cost)| {
            let step = g / 1000 * frac + kind;
            let n = (limit / 1000).max(1) * cost % limit + 1;
            (step, if kind == 3 { Op::Refund(n) } else if kind == 2 { Op::Peek(n) } else { Op::Check(n) })
        }).collect();
        run(quota, TODAY_US, steps)?;
    }
}

#[test]
fn sub_microsecond_quotas_are_a_clear_error() {
    FIXTURE.with(sub_microsecond_quotas_on);
}

fn sub_microsecond_quotas_on(f: &Fixture) {
    let q = Quota::new(10, Duration::from_nanos(1500)).unwrap();
    let err = RedisLimiter::builder(q).build(&f.conn).unwrap_err();
    assert!(err.to_string().contains("microseconds"), "{err}");
    let q = Quota::new(10, Duration::from_secs(20 * 365 * 24 * 3600)).unwrap();
    let err = RedisLimiter::builder(q).build(&f.conn).unwrap_err();
    assert!(err.to_string().contains("8.9 years"), "{err}");
}

/// A clock set back: the script judges the older reading at a time the key has seen, as
/// the local limiters do, and measures `retry_after` and `reset_after` from the reading, as
/// they do (judged from the later time they were short by the clock's lag). Every algorithm,
/// steps back of a bucket and a half and of most of a window, then forward past both.
#[test]
fn a_clock_set_back_is_judged_and_measured_as_the_local_limiters_do() {
    for mode in REDIS_MODES {
        let quota = Quota::new(3, Duration::from_micros(1000))
            .unwrap()
            .with_granularity(Duration::from_micros(100))
            .unwrap()
            .with_mode(mode);
        let at = TODAY_US + 10_250;
        let steps = [
            (at, Op::Check(3)),
            (at - 150, Op::Check(1)),
            (at - 150, Op::Peek(1)),
            (at + 40, Op::Check(1)),
            (at - 950, Op::Check(1)),
            (at - 950, Op::Peek(1)),
            (at + 1_100, Op::Check(2)),
            (at + 300, Op::Check(1)),
            (at + 3_000, Op::Check(1)),
        ];
        FIXTURE.with(|f| {
            let clock = ManualClock::new();
            let remote = RedisLimiter::builder(quota)
                .prefix(format!("back{}:", f.next.fetch_add(1, Ordering::Relaxed)))
                .deadline(Duration::from_secs(10))
                .test_clock(clock.clone())
                .build(&f.conn)
                .unwrap();
            let local = SlidingWindow::with_clock(quota, clock.clone());
            for (t, op) in steps {
                clock.set(Duration::from_micros(t));
                let (r, d) = match op {
                    Op::Check(n) => (
                        f.rt.block_on(remote.check_n("k", n)).unwrap(),
                        local.check_n(n).unwrap(),
                    ),
                    _ => (f.rt.block_on(remote.peek("k")).unwrap(), local.peek()),
                };
                assert_eq!(r.path(), slidegate::redis::Path::Redis);
                assert_eq!(r.decision(), d, "{mode:?}: {op:?} at {} µs", t - TODAY_US);
            }
        });
    }
}
