//! The Redis backend on a real Redis Cluster (3 masters, 1 replica each), started once for
//! this binary and shared by its tests one at a time: decisions equal the local limiter's on
//! keys spread over every master, several limits across slots (reserve, then release),
//! a slot migrated and a master killed mid-run.
//! One test runs the phases in order on one Cluster.
#![cfg(feature = "redis")]

use slidegate_testkit::model as common;
use slidegate_testkit::redis_server;

use std::time::{Duration, Instant};

use redis_server::Cluster;
use redis_server::runtime as rt;
use slidegate::clock::ManualClock;
use slidegate::redis::{Connection, Path, Policy, RedisLimiter, check_all};
use slidegate::{Quota, SlidingWindow};

/// One Cluster for the binary (starting one is the expensive part), its phases run in
/// order — the failover last, as it kills a master — and stopped when the test ends.
#[test]
fn redis_cluster() {
    let mut c = Cluster::start(3, 1);
    for (name, phase) in [
        (
            "decisions",
            decisions_on_every_master_equal_the_local_limiters as fn(&mut Cluster),
        ),
        (
            "check_all",
            several_limits_across_slots_are_reserved_then_released,
        ),
        ("migration", a_slot_migrated_mid_run_is_followed),
        (
            "failover",
            a_master_killed_mid_run_fails_over_and_the_policy_decides_meanwhile,
        ),
    ] {
        c.wait_ok(Duration::from_secs(20));
        eprintln!("cluster phase: {name}");
        phase(&mut c);
    }
}

async fn connect(c: &Cluster) -> Connection {
    let urls = c.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    Connection::open_cluster(&urls).await.unwrap()
}

fn decisions_on_every_master_equal_the_local_limiters(c: &mut Cluster) {
    rt().block_on(async {
        let conn = connect(c).await;
        assert!(conn.is_cluster());
        for mode in common::REDIS_MODES {
            let q = Quota::new(3, Duration::from_millis(40))
                .unwrap()
                .with_granularity(Duration::from_millis(10))
                .unwrap()
                .with_mode(mode);
            let clock = ManualClock::new();
            let remote = RedisLimiter::builder(q)
                .test_clock(clock.clone())
                .build(&conn)
                .unwrap();
            // Keys on all three masters.
            let keys: Vec<String> = (0..12).map(|i| format!("user-{i}")).collect();
            let masters: std::collections::HashSet<usize> = keys
                .iter()
                .map(|k| c.master_of(&remote.redis_keys(k).unwrap().0))
                .collect();
            assert_eq!(masters.len(), 3);
            for k in &keys {
                let local = SlidingWindow::with_clock(q, clock.clone());
                for step in [0u64, 3, 0, 11, 7, 25, 0, 40, 1] {
                    clock.advance(Duration::from_millis(step));
                    let d = remote.check(k).await.unwrap();
                    assert_eq!(d.path(), Path::Redis);
                    assert_eq!(d.decision(), local.check(), "{mode:?} {k}");
                }
                assert_eq!(remote.refund(k, 2).await.unwrap(), local.refund(2));
                assert_eq!(remote.peek(k).await.unwrap().decision(), local.peek());
            }
        }
    });
}

fn several_limits_across_slots_are_reserved_then_released(c: &mut Cluster) {
    rt().block_on(async {
        let conn = connect(c).await;
        let q = |n| Quota::new(n, Duration::from_secs(60)).unwrap();
        let users = RedisLimiter::builder(q(2))
            .prefix("cu:")
            .build(&conn)
            .unwrap();
        let tenants = RedisLimiter::builder(q(3))
            .prefix("ct:")
            .build(&conn)
            .unwrap();
        // Different slots.
        let slot = |k: &str| c.live().cli(&["CLUSTER", "KEYSLOT", k]).unwrap();
        let (a, t) = (
            users.redis_keys("alice").unwrap().0,
            tenants.redis_keys("t7").unwrap().0,
        );
        assert_ne!(slot(&a), slot(&t));
        let request = |user: &'static str| {
            let (users, tenants) = (&users, &tenants);
            async move {
                check_all(&[(users, user, 1), (tenants, "t7", 1)])
                    .await
                    .unwrap()
            }
        };
        assert!(request("alice").await.is_allowed());
        assert!(request("alice").await.is_allowed());
        assert_eq!(request("alice").await.denied_by(), Some(0));
        // The tenant's reservation for alice's third request was released.
        assert_eq!(tenants.peek("t7").await.unwrap().remaining(), 1);
        assert!(request("bob").await.is_allowed());
        let d = request("carol").await;
        assert_eq!(d.denied_by(), Some(1));
        // Carol's reservation on her own key was released: no trace.
        assert_eq!(users.peek("carol").await.unwrap().remaining(), 2);
        // Keys tagged alike share a slot: one script, all or nothing.
        let (u, t) = (
            users.redis_keys("{t9}:dave").unwrap().0,
            tenants.redis_keys("t9").unwrap().0,
        );
        assert_eq!(slot(&u), slot(&t));
        for _ in 0..2 {
            assert!(
                check_all(&[(&users, "{t9}:dave", 1), (&tenants, "t9", 1)])
                    .await
                    .unwrap()
                    .is_allowed()
            );
        }
        assert_eq!(
            check_all(&[(&users, "{t9}:dave", 1), (&tenants, "t9", 1)])
                .await
                .unwrap()
                .denied_by(),
            Some(0)
        );
        assert_eq!(tenants.peek("t9").await.unwrap().remaining(), 1);
    });
}

/// Runs `tasks` tasks checking `keys` until `stop` returns true; returns every decision's
/// path and any error.
async fn traffic(limiter: &RedisLimiter, keys: &[String], for_ms: u64) -> Vec<(Path, bool)> {
    let until = Instant::now() + Duration::from_millis(for_ms);
    let mut tasks = Vec::new();
    for t in 0..8 {
        let limiter = limiter.clone();
        let keys = keys.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut i = t;
            while Instant::now() < until {
                let d = limiter.check(&keys[i % keys.len()]).await.unwrap();
                seen.push((d.path(), d.is_allowed()));
                i += 1;
            }
            seen
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

fn a_slot_migrated_mid_run_is_followed(c: &mut Cluster) {
    let rt = rt();
    let conn = rt.block_on(connect(c));
    let limiter = RedisLimiter::builder(Quota::new(1_000_000, Duration::from_secs(60)).unwrap())
        .prefix("mig:")
        .deadline(Duration::from_millis(500))
        .policy(Policy::Deny)
        .build(&conn)
        .unwrap();
    let keys: Vec<String> = (0..4).map(|i| format!("{{slot}}:k{i}")).collect();
    let key0 = limiter.redis_keys(&keys[0]).unwrap().0;
    let slot: u16 = c
        .live()
        .cli(&["CLUSTER", "KEYSLOT", &key0])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let from = c.master_of_slot(slot);
    let to = (0..c.nodes.len())
        .find(|&i| i != from && c.master_of_slot(slot) == from && is_master(c, i))
        .unwrap();
    let (from_id, to_id) = (c.id(from), c.id(to));
    let s = slot.to_string();
    let seen = rt.block_on(async {
        let run = traffic(&limiter, &keys, 1500);
        let migrate = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let cli = |i: usize, args: Vec<String>| {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                c.nodes[i].cli(&args).unwrap()
            };
            cli(
                to,
                vec![
                    "CLUSTER".into(),
                    "SETSLOT".into(),
                    s.clone(),
                    "IMPORTING".into(),
                    from_id.clone(),
                ],
            );
            cli(
                from,
                vec![
                    "CLUSTER".into(),
                    "SETSLOT".into(),
                    s.clone(),
                    "MIGRATING".into(),
                    to_id.clone(),
                ],
            );
            loop {
                let keys = cli(
                    from,
                    vec![
                        "CLUSTER".into(),
                        "GETKEYSINSLOT".into(),
                        s.clone(),
                        "100".into(),
                    ],
                );
                let keys: Vec<String> = keys
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(String::from)
                    .collect();
                if keys.is_empty() {
                    break;
                }
                let mut args: Vec<String> = vec![
                    "MIGRATE".into(),
                    "127.0.0.1".into(),
                    c.nodes[to].port.to_string(),
                    "".into(),
                    "0".into(),
                    "5000".into(),
                    "KEYS".into(),
                ];
                args.extend(keys);
                cli(from, args);
            }
            for i in 0..c.nodes.len() {
                cli(
                    i,
                    vec![
                        "CLUSTER".into(),
                        "SETSLOT".into(),
                        s.clone(),
                        "NODE".into(),
                        to_id.clone(),
                    ],
                );
            }
        };
        let (seen, ()) = tokio::join!(run, migrate);
        seen
    });
    assert_eq!(c.master_of_slot(slot), to, "the slot moved");
    assert!(!seen.is_empty());
    assert!(
        !limiter
            .last_error()
            .unwrap_or_default()
            .contains("CROSSSLOT"),
        "{:?}",
        limiter.last_error()
    );
    // Whatever decided, Redis or the policy (deny) while a redirection failed, said so.
    assert!(seen.iter().all(|p| (p.0 == Path::Redis) == p.1));
    // Redis decides every key again once the move is done.
    redis_decides_again(&rt, &limiter, &keys, Duration::from_secs(5));
    // The state moved with the slot: everything Redis admitted is still counted.
    let admitted = seen.iter().filter(|p| p.0 == Path::Redis).count() as u64;
    let counted: u64 = rt.block_on(async {
        let mut counted = 0;
        for k in &keys {
            counted += 1_000_000 - limiter.peek(k).await.unwrap().remaining();
        }
        counted
    });
    assert!(
        counted >= admitted,
        "{counted} counted, {admitted} admitted"
    );
}

/// Runs traffic until Redis decides every key of a round, for at most `within`.
fn redis_decides_again(
    rt: &tokio::runtime::Runtime,
    limiter: &RedisLimiter,
    keys: &[String],
    within: Duration,
) {
    let start = Instant::now();
    while !rt
        .block_on(traffic(limiter, keys, 100))
        .iter()
        .all(|p| p.0 == Path::Redis)
    {
        assert!(start.elapsed() < within, "{:?}", limiter.last_error());
    }
}

fn is_master(c: &Cluster, i: usize) -> bool {
    c.nodes[i]
        .cli(&["ROLE"])
        .is_ok_and(|r| r.lines().next() == Some("master"))
}

fn a_master_killed_mid_run_fails_over_and_the_policy_decides_meanwhile(c: &mut Cluster) {
    let rt = rt();
    let conn = rt.block_on(connect(c));
    let limiter = RedisLimiter::builder(Quota::new(1_000_000, Duration::from_secs(60)).unwrap())
        .prefix("fo:")
        .deadline(Duration::from_millis(50))
        .cooldown(Duration::from_millis(100))
        .policy(Policy::Local(
            Quota::new(1_000_000, Duration::from_secs(60)).unwrap(),
        ))
        .build(&conn)
        .unwrap();
    let keys: Vec<String> = (0..16).map(|i| format!("fo-{i}")).collect();
    let victim = c.master_of(&limiter.redis_keys(&keys[0]).unwrap().0);
    let seen = rt.block_on(async {
        let before = traffic(&limiter, &keys, 200).await;
        assert!(before.iter().all(|p| p.0 == Path::Redis));
        c.nodes[victim].kill();
        traffic(&limiter, &keys, 400).await
    });
    // While the slot's master is down, the policy decides; never a panic or an error.
    assert!(seen.iter().any(|p| p.0 == Path::Fallback));
    assert!(seen.iter().all(|p| p.1));
    // The replica takes over (node timeout 1 s); Redis decides every key again.
    let slot: u16 = c
        .live()
        .cli(&[
            "CLUSTER",
            "KEYSLOT",
            &limiter.redis_keys(&keys[0]).unwrap().0,
        ])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let start = Instant::now();
    while c.master_of_slot(slot) == victim {
        assert!(start.elapsed() < Duration::from_secs(20), "no failover");
    }
    c.wait_ok(Duration::from_secs(20));
    redis_decides_again(&rt, &limiter, &keys, Duration::from_secs(15));
    assert!(
        !limiter
            .last_error()
            .unwrap_or_default()
            .contains("CROSSSLOT")
    );
}
