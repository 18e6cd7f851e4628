//! The Redis backend on a real single `redis-server`: several limits at once, many callers
//! on few connections, TTLs, clients with skewed clocks in several processes, leases, the
//! degraded mode under SIGSTOP, kill and restart, a flushed script cache, and bad input.
#![cfg(feature = "redis")]

use slidegate_testkit::model as common;
use slidegate_testkit::redis_server;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_server::Server;
use slidegate::redis::{
    Connection, Degraded, Error, LeaseConfig, Path, Policy, RedisLimiter, check_all,
};
use slidegate::{Mode, Quota};

use redis_server::runtime as rt;

fn quota(limit: u64, window: Duration) -> Quota {
    Quota::new(limit, window).unwrap()
}

#[test]
fn several_limits_are_charged_all_or_none() {
    let server = Server::start();
    rt().block_on(async {
        let conn = Connection::open(&server.url()).await.unwrap();
        let users = RedisLimiter::builder(quota(2, Duration::from_secs(60)))
            .prefix("u:")
            .build(&conn)
            .unwrap();
        let tenants = RedisLimiter::builder(quota(3, Duration::from_secs(60)))
            .prefix("t:")
            .build(&conn)
            .unwrap();
        let hourly = RedisLimiter::builder(
            quota(1000, Duration::from_secs(3600)).with_mode(Mode::ExactLog),
        )
        .prefix("h:")
        .build(&conn)
        .unwrap();
        let request = |user: &'static str| {
            let (users, tenants, hourly) = (&users, &tenants, &hourly);
            async move { check_all(&[(users, user, 1), (tenants, "t7", 1), (hourly, "all", 1)]).await }
        };
        assert!(request("alice").await.unwrap().is_allowed());
        assert!(request("alice").await.unwrap().is_allowed());
        let d = request("alice").await.unwrap();
        assert_eq!(d.denied_by(), Some(0), "alice's 2 a minute");
        assert!(d.retry_after().unwrap() > Duration::from_secs(50));
        assert!(request("bob").await.unwrap().is_allowed());
        assert_eq!(request("carol").await.unwrap().denied_by(), Some(1), "tenant's 3");
        // The denied requests charged nothing anywhere.
        assert_eq!(hourly.peek("all").await.unwrap().remaining(), 997);
        assert_eq!(users.peek("carol").await.unwrap().remaining(), 2);
        // One limit listed twice is charged the sum; a sum above the limit is an error.
        assert!(matches!(
            check_all(&[(&users, "dave", 2), (&users, "dave", 1)]).await,
            Err(Error::Cost(_))
        ));
        assert!(check_all(&[(&users, "dave", 1), (&users, "dave", 1)]).await.unwrap().is_allowed());
        assert!(!users.peek("dave").await.unwrap().is_allowed());
        assert_eq!(server.cli(&["SCRIPT", "EXISTS", "x"]).unwrap().trim(), "0");
    });
}

#[test]
fn a_thousand_concurrent_requests_share_one_connection() {
    let server = Server::start();
    rt().block_on(async {
        let conn = Connection::open(&server.url()).await.unwrap();
        let limiter = RedisLimiter::builder(quota(500, Duration::from_secs(60)))
            .deadline(Duration::from_secs(10))
            .build(&conn)
            .unwrap();
        let admitted = Arc::new(AtomicU64::new(0));
        let peak = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for i in 0..1000 {
            let (limiter, admitted, peak) = (limiter.clone(), admitted.clone(), peak.clone());
            let port = server.port;
            tasks.push(tokio::spawn(async move {
                let d = limiter.check("shared").await.unwrap();
                assert_eq!(d.path(), Path::Redis);
                if d.is_allowed() {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
                if i == 500 {
                    let out = Command::new("redis-cli")
                        .args(["-p", &port.to_string(), "INFO", "clients"])
                        .output()
                        .unwrap();
                    let s = String::from_utf8_lossy(&out.stdout).into_owned();
                    let n: u64 = s
                        .lines()
                        .find_map(|l| l.strip_prefix("connected_clients:"))
                        .unwrap()
                        .trim()
                        .parse()
                        .unwrap();
                    peak.store(n, Ordering::Relaxed);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(admitted.load(Ordering::Relaxed), 500);
        // The limiter's one connection, and redis-cli's own.
        assert_eq!(peak.load(Ordering::Relaxed), 2);
    });
}

#[test]
fn every_key_has_a_ttl_and_the_database_empties_once_the_windows_pass() {
    let server = Server::start();
    rt().block_on(async {
        let conn = Connection::open(&server.url()).await.unwrap();
        for (i, mode) in common::REDIS_MODES.iter().enumerate() {
            let q = quota(5, Duration::from_millis(1000))
                .with_granularity(Duration::from_millis(1000))
                .unwrap()
                .with_mode(*mode);
            let limiter = RedisLimiter::builder(q)
                .prefix(format!("ttl{i}:"))
                .ttl_slack(Duration::from_millis(10))
                .build(&conn)
                .unwrap();
            for k in ["a", "b", "{t}:c"] {
                for _ in 0..7 {
                    let _ = limiter.check(k).await.unwrap();
                }
                assert_eq!(limiter.refund(k, 1).await.unwrap(), 1);
            }
        }
    });
    let keys = server.cli(&["--scan"]).unwrap();
    let keys: Vec<&str> = keys.lines().collect();
    // Counter and log keys have a hash and a sorted set, GCRA a hash: 3·(2·5 + 1).
    assert_eq!(keys.len(), 33, "{keys:?}");
    for k in &keys {
        let ttl: i64 = server.cli(&["PTTL", k]).unwrap().trim().parse().unwrap();
        assert!(ttl > 0 && ttl <= 2 * 1000 + 10 + 2, "{k}: pttl {ttl}");
    }
    // Twice the window plus the slack: every key gone (polled, not slept on).
    let start = Instant::now();
    while server.dbsize() != 0 && start.elapsed() < Duration::from_secs(6) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.dbsize(), 0);
}

/// Three client processes, two of them with clocks 5 s ahead and 5 s behind (libfaketime),
/// 64 tasks each on one key: no interval of the window's length holds more than the limit
/// among the admissions' server times, and the limit is reached.
#[test]
fn processes_with_skewed_clocks_share_one_limit() {
    let server = Server::start();
    let exe = std::env::current_exe().unwrap();
    let client = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("examples/redis_client");
    assert!(
        client.exists(),
        "{} is built by cargo test",
        client.display()
    );
    let (limit, window_ms) = (50u64, 200u64);
    let children: Vec<_> = ["+5s", "-5s", ""]
        .iter()
        .map(|skew| {
            let mut cmd = if skew.is_empty() {
                Command::new(&client)
            } else {
                let mut c = Command::new("faketime");
                c.args(["-f", skew]).arg(&client);
                c
            };
            cmd.args([
                &server.url(),
                "skew:",
                &limit.to_string(),
                &window_ms.to_string(),
                "20",
                "64",
                "700",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("faketime and the example run (apt-get install -y faketime)")
        })
        .collect();
    let mut clocks = Vec::new();
    let mut admitted: Vec<(u64, u64)> = Vec::new();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            match line.strip_prefix("clock ") {
                Some(t) => clocks.push(t.parse::<i64>().unwrap()),
                None => admitted.push((line.parse::<u64>().unwrap(), 1)),
            }
        }
    }
    // The clocks really were 5 s apart.
    assert!(
        (clocks[0] - clocks[1] - 10_000_000).abs() < 2_000_000,
        "{clocks:?}"
    );
    let worst = common::worst_window(&mut admitted, window_ms * 1000);
    assert!(worst <= limit, "{worst} admitted in one window");
    assert_eq!(worst, limit, "the limit is reached under this load");
}

/// `FUNCTION FLUSH` and `SCRIPT FLUSH` every 100 ms never reach a caller: on a Redis 7
/// server (the library is loaded again where it went missing), and on a server without
/// `FCALL` (renamed away, as a server before Redis 7 answers: decisions go through `EVALSHA`,
/// and `EVAL` when the script cache was flushed).
#[test]
fn a_flushed_script_cache_never_reaches_a_caller() {
    for server in [
        Server::start(),
        Server::with_args(&["--rename-command", "FCALL", ""]),
    ] {
        let admitted = admitted_through_flushes(&server);
        assert!(admitted > 0);
    }
}

fn admitted_through_flushes(server: &Server) -> u64 {
    let flushes = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let flusher = {
        let (stop, flushes, port) = (stop.clone(), flushes.clone(), server.port);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for what in ["FUNCTION", "SCRIPT"] {
                    Command::new("redis-cli")
                        .args(["-p", &port.to_string(), what, "FLUSH"])
                        .output()
                        .unwrap();
                }
                flushes.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let admitted = rt().block_on(async {
        let conn = Connection::open(&server.url()).await.unwrap();
        let limiter = RedisLimiter::builder(quota(1000, Duration::from_secs(60)))
            .deadline(Duration::from_secs(5))
            .build(&conn)
            .unwrap();
        let mut admitted = 0;
        // Through ten flushes, 100 ms apart.
        while flushes.load(Ordering::Relaxed) < 10 {
            let d = limiter.check("k").await.unwrap();
            assert_eq!(d.path(), Path::Redis, "{:?}", limiter.last_error());
            admitted += u64::from(d.is_allowed());
        }
        let peek = limiter.peek("k").await.unwrap();
        assert_eq!(peek.remaining(), 1000 - admitted.min(1000));
        admitted
    });
    stop.store(true, Ordering::Relaxed);
    flusher.join().unwrap();
    admitted
}

/// SIGSTOP, then kill, then restart: every decision returns within its deadline, the policy
/// decides meanwhile (and the breaker spares the dead server), and Redis decides again within
/// a second of coming back.
///
/// The deadline is long against the machine's scheduling noise, so that the healthy phases
/// never miss it by accident, and each decision is held to it from both sides: one that
/// Redis did not answer in time took at least the deadline (the timer fired, nothing cut it
/// short), and no decision took two (a decision never waits past its deadline, for a reload
/// or a retry, say). The margin between the two is the deadline itself, far above the
/// timer's lateness on a loaded machine.
#[test]
fn a_paused_killed_and_restarted_server_costs_one_deadline_and_recovers() {
    let mut server = Server::start();
    let rt = rt();
    let deadline = Duration::from_millis(250);
    let conn = rt.block_on(Connection::open(&server.url())).unwrap();
    let limiter = RedisLimiter::builder(quota(1_000_000, Duration::from_secs(60)))
        .deadline(deadline)
        .cooldown(Duration::from_millis(100))
        .policy(Policy::Local(quota(3, Duration::from_secs(60))))
        .build(&conn)
        .unwrap();
    // Runs 4 tasks × `n` checks; returns each decision's (path, degraded, allowed, time).
    let burst = |n: usize| {
        let limiter = limiter.clone();
        rt.block_on(async move {
            let mut tasks = Vec::new();
            for t in 0..4 {
                let limiter = limiter.clone();
                tasks.push(tokio::spawn(async move {
                    let mut seen = Vec::new();
                    for _ in 0..n {
                        let start = Instant::now();
                        let d = limiter.check(&format!("k{t}")).await.unwrap();
                        seen.push((d.path(), d.degraded(), d.is_allowed(), start.elapsed()));
                    }
                    seen
                }));
            }
            let mut seen = Vec::new();
            for t in tasks {
                seen.extend(t.await.unwrap());
            }
            seen
        })
    };
    let within_deadline = |seen: &[(Path, Option<Degraded>, bool, Duration)]| {
        for &(_, why, _, took) in seen {
            if why == Some(Degraded::Deadline) {
                assert!(took >= deadline, "a deadline fired early, after {took:?}");
            }
            assert!(took < 2 * deadline, "a decision took {took:?}");
        }
    };
    let paths = burst(5);
    assert!(paths.iter().all(|p| p.0 == Path::Redis), "{paths:?}");

    let recovers = |what: &str| {
        let start = Instant::now();
        loop {
            if burst(1).iter().all(|p| p.0 == Path::Redis) {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(1),
                "no recovery after {what}"
            );
        }
    };

    server.pause();
    let paths = burst(20);
    server.resume();
    within_deadline(&paths);
    assert!(paths.iter().all(|p| p.0 == Path::Fallback));
    assert!(paths.iter().any(|p| p.1 == Some(Degraded::Deadline)));
    assert!(
        paths.iter().any(|p| p.1 == Some(Degraded::BreakerOpen)),
        "the breaker spared the server"
    );
    // The fallback quota of 3 per key held.
    assert_eq!(paths.iter().filter(|p| p.2).count(), 4 * 3);
    recovers("SIGCONT");

    server.kill();
    let paths = burst(10);
    within_deadline(&paths);
    assert!(paths.iter().all(|p| p.0 == Path::Fallback));
    server.restart();
    recovers("restart");
    assert!(limiter.last_error().is_some());
}

/// A load run through a schedule of faults: in every 1.5 s the server is stopped (SIGSTOP) for
/// 200 ms, and later killed and restarted 200 ms after (empty: no persistence), while four
/// tasks check four keys about every millisecond each. Every decision returns (no error, no
/// panic), Redis decides again after every fault, and the limit holds as the degraded policy
/// says: in any window, Redis admits at most `L` per key for each server life the window
/// touches (a restarted server has forgotten its keys), and the local fallback at most its own
/// limit. Windows are judged on the times the checks started, shortened by the slowest
/// decision's time (an admission is decided between its start and its return), so no
/// assertion depends on the machine's speed.
///
/// `SLIDEGATE_REDIS_FAULT_SECS` sets the run's length (3 s by default); the run prints its
/// figures, among them the decisions later than the deadline by more than 5 ms, which this
/// test does not assert (a loaded machine can delay any task), and `TESTING.md` quotes.
#[test]
fn a_load_run_through_scheduled_pauses_kills_and_restarts_keeps_the_limit() {
    const KEYS: usize = 4;
    const LIMIT: u64 = 100;
    const LOCAL: u64 = 20;
    let window = Duration::from_secs(1);
    let deadline = Duration::from_millis(50);
    let secs: u64 = std::env::var("SLIDEGATE_REDIS_FAULT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(2);
    let run = Duration::from_secs(secs);
    let mut server = Server::start();
    let rt = rt();
    let conn = rt.block_on(Connection::open(&server.url())).unwrap();
    let limiter = RedisLimiter::builder(
        quota(LIMIT, window)
            .with_granularity(Duration::from_millis(100))
            .unwrap(),
    )
    .deadline(deadline)
    .cooldown(Duration::from_millis(100))
    .policy(Policy::Local(quota(LOCAL, window)))
    .build(&conn)
    .unwrap();
    let start = Instant::now();
    // The faults, in a thread of their own: (time since start, what), and the restarts' times.
    let faults = {
        std::thread::spawn(move || {
            let mut log = Vec::new();
            let at = |ms: u64| Duration::from_millis(ms);
            // Whole cycles only, each over before the load stops.
            let mut cycle = Duration::ZERO;
            while cycle + at(1200) < run {
                let sleep_until = |t: Duration| {
                    if let Some(d) = t.checked_sub(start.elapsed()) {
                        std::thread::sleep(d);
                    }
                };
                sleep_until(cycle + at(400));
                log.push((start.elapsed(), "pause"));
                server.pause();
                sleep_until(cycle + at(600));
                server.resume();
                log.push((start.elapsed(), "resume"));
                sleep_until(cycle + at(1000));
                log.push((start.elapsed(), "kill"));
                server.kill();
                sleep_until(cycle + at(1200));
                server.restart();
                log.push((start.elapsed(), "restarted"));
                cycle += at(1500);
            }
            (server, log)
        })
    };
    // (key, started, took, path, degraded, allowed), per decision.
    type Seen = (usize, Duration, Duration, Path, Option<Degraded>, bool);
    let (seen, wakeups): (Vec<Seen>, Vec<Duration>) = rt.block_on(async {
        let mut tasks = Vec::new();
        for key in 0..KEYS {
            let limiter = limiter.clone();
            tasks.push(tokio::spawn(async move {
                let mut seen = Vec::new();
                let name = format!("k{key}");
                while start.elapsed() < run {
                    let began = start.elapsed();
                    let d = limiter
                        .check(&name)
                        .await
                        .expect("a decision, never an error");
                    let took = start.elapsed() - began;
                    seen.push((key, began, took, d.path(), d.degraded(), d.is_allowed()));
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                seen
            }));
        }
        // A control: how late the runtime wakes a task that sleeps 1 ms, on this machine now.
        let control = tokio::spawn(async move {
            let mut late = Vec::new();
            while start.elapsed() < run {
                let began = Instant::now();
                tokio::time::sleep(Duration::from_millis(1)).await;
                late.push(began.elapsed().saturating_sub(Duration::from_millis(1)));
            }
            late
        });
        let mut seen = Vec::new();
        for t in tasks {
            seen.extend(t.await.expect("no task panicked"));
        }
        (seen, control.await.unwrap())
    });
    let (server, log) = faults.join().expect("the fault schedule ran");
    // Redis decides again once the last fault is over.
    rt.block_on(async {
        let begun = Instant::now();
        while limiter.check("after").await.unwrap().path() != Path::Redis {
            assert!(begun.elapsed() < Duration::from_secs(10), "no recovery");
        }
    });
    drop(server);

    // A server life ends when it is killed (logged just before): the next one may answer
    // any time after, even before its restart is logged.
    let restarts: Vec<Duration> = log
        .iter()
        .filter(|(_, what)| *what == "kill")
        .map(|&(t, _)| t)
        .collect();
    let slowest = seen.iter().map(|s| s.2).max().unwrap();
    let span = window.saturating_sub(slowest);
    // The most Redis admitted in a window within one server life, and in one across a
    // restart; the most the fallback admitted in one.
    let (mut one_life, mut across, mut local_worst) = (0, 0, 0);
    for key in 0..KEYS {
        let mut mine: Vec<&Seen> = seen.iter().filter(|s| s.0 == key && s.5).collect();
        mine.sort_by_key(|s| s.1);
        for (i, first) in mine.iter().enumerate() {
            let (from, to) = (first.1, first.1 + span);
            let inside = mine[i..].iter().take_while(|s| s.1 < to);
            let (redis, local) = inside.fold((0, 0), |(r, l), s| match s.3 {
                Path::Redis => (r + 1, l),
                _ => (r, l + 1),
            });
            // Server lives the window's decisions may have met: one, and one per kill
            // during the window or the slowest decision before it.
            let lives = 1 + restarts
                .iter()
                .filter(|&&r| r + slowest >= from && r < to)
                .count() as u64;
            assert!(
                redis <= LIMIT * lives,
                "key {key}: Redis admitted {redis} in {span:?} from {from:?} ({lives} lives)"
            );
            assert!(local <= LOCAL, "key {key}: the fallback admitted {local}");
            if lives == 1 {
                one_life = one_life.max(redis);
            } else {
                across = across.max(redis);
            }
            local_worst = local_worst.max(local);
        }
    }
    let count = |f: &dyn Fn(&Seen) -> bool| seen.iter().filter(|s| f(s)).count();
    let late = count(&|s| s.2 > deadline + Duration::from_millis(5));
    let late_redis = count(&|s| s.2 > deadline + Duration::from_millis(5) && s.3 == Path::Redis);
    let woke_late = wakeups
        .iter()
        .filter(|&&d| d > Duration::from_millis(5))
        .count();
    println!(
        "{} decisions in {secs} s, {} pauses and {} kills and restarts: Redis {}, fallback {} \
         (deadline {}, breaker open {}, failed {}); admitted {}; slowest {slowest:?}, \
         later than deadline + 5 ms: {late} ({late_redis} of them answered by Redis); a 1 ms \
         sleep in the same runtime woke more than 5 ms late {woke_late} times in {}, at worst \
         {:?} late; most admitted in a window of {span:?} per key: \
         Redis {one_life} within one server life (limit {LIMIT}), {across} across a restart \
         (limit {}), fallback {local_worst} (limit {LOCAL})",
        seen.len(),
        log.iter().filter(|(_, what)| *what == "pause").count(),
        restarts.len(),
        count(&|s| s.3 == Path::Redis),
        count(&|s| s.3 == Path::Fallback),
        count(&|s| s.4 == Some(Degraded::Deadline)),
        count(&|s| s.4 == Some(Degraded::BreakerOpen)),
        count(&|s| s.4 == Some(Degraded::Failed)),
        count(&|s| s.5),
        wakeups.len(),
        wakeups.iter().max().unwrap(),
        2 * LIMIT,
    );
    assert!(!restarts.is_empty(), "the schedule ran: {log:?}");
    // Every fault was noticed, and Redis decided between them.
    assert!(count(&|s| s.3 == Path::Fallback) > 0);
    assert!(count(&|s| s.3 == Path::Redis) > 0);
}

#[test]
fn policies_allow_and_deny_decide_while_redis_is_down() {
    let mut server = Server::start();
    rt().block_on(async {
        let conn = Connection::open(&server.url()).await.unwrap();
        let build = |p| {
            RedisLimiter::builder(quota(1, Duration::from_secs(60)))
                .deadline(Duration::from_millis(30))
                .cooldown(Duration::from_secs(3600))
                .policy(p)
                .build(&conn)
                .unwrap()
        };
        let (allow, deny) = (build(Policy::Allow), build(Policy::Deny));
        assert!(allow.check("a").await.unwrap().is_allowed());
        assert!(!allow.check("a").await.unwrap().is_allowed());
        server.kill();
        for _ in 0..3 {
            let d = allow.check("a").await.unwrap();
            assert!(d.is_allowed());
            assert_eq!(d.path(), Path::PolicyAllow);
            let d = deny.check("b").await.unwrap();
            assert!(!d.is_allowed());
            assert_eq!(d.path(), Path::PolicyDeny);
        }
        assert!(allow.is_degraded());
        assert_eq!(
            allow.check("a").await.unwrap().degraded(),
            Some(Degraded::BreakerOpen)
        );
        assert!(matches!(
            allow.refund("a", 1).await,
            Err(Error::Unavailable(_))
        ));
    });
}

/// A caller that stops waiting (its future dropped) while its decision is the half-open
/// breaker's probe gives the probe back: the next decision probes, and Redis decides again.
#[test]
fn a_probe_whose_caller_stops_waiting_does_not_hold_the_breaker_open() {
    let server = Server::start();
    // One thread: the connection's task cannot run while this test polls, so the probe is
    // still waiting for Redis when it is dropped.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let conn = Connection::open(&server.url()).await.unwrap();
        let limiter = RedisLimiter::builder(quota(100, Duration::from_secs(60)))
            .deadline(Duration::from_secs(10))
            .cooldown(Duration::from_millis(20))
            .build(&conn)
            .unwrap();
        // A key of another type fails its decision, which opens the breaker.
        let (h, _) = limiter.redis_keys("wrong").unwrap();
        server.cli(&["SET", &h, "x"]).unwrap();
        let d = limiter.check("wrong").await.unwrap();
        assert_eq!(d.degraded(), Some(Degraded::Failed));
        // Once the cool-down has passed, the next decision is the probe; its caller stops
        // waiting after the first poll.
        while limiter.is_degraded() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let probe = limiter.check("alice");
        assert!(futures_util::FutureExt::now_or_never(probe).is_none());
        let d = limiter.check("alice").await.unwrap();
        assert_eq!((d.path(), d.degraded()), (Path::Redis, None));
        assert!(!limiter.is_degraded());
    });
}

/// Three processes' worth of leasing limiters on one hot key: the shared limit holds
/// exactly, round trips stay under 100 per 1000 admitted, and what leases held unused is
/// given back.
#[test]
fn leases_keep_the_limit_exact_and_save_round_trips() {
    let server = Server::start();
    rt().block_on(async {
        let q = quota(20_000, Duration::from_secs(600))
            .with_granularity(Duration::from_secs(600))
            .unwrap();
        let max = 200;
        let mut procs = Vec::new();
        for _ in 0..3 {
            let conn = Connection::open(&server.url()).await.unwrap();
            procs.push(
                RedisLimiter::builder(q)
                    .prefix("lease:")
                    .deadline(Duration::from_secs(5))
                    .leases(LeaseConfig {
                        max,
                        max_duration: Duration::from_secs(1),
                    })
                    .build(&conn)
                    .unwrap(),
            );
        }
        let mut tasks = Vec::new();
        for p in &procs {
            for _ in 0..16 {
                let p = p.clone();
                tasks.push(tokio::spawn(async move {
                    let mut admitted = 0u64;
                    for _ in 0..600 {
                        if p.check("hot").await.unwrap().is_allowed() {
                            admitted += 1;
                        }
                    }
                    admitted
                }));
            }
        }
        let mut admitted = 0;
        for t in tasks {
            admitted += t.await.unwrap();
        }
        // 28 800 asked of a limit of 20 000: the limit is reached less what leases hold.
        assert!(admitted <= 20_000);
        assert!(admitted >= 20_000 - 3 * max, "{admitted}");
        let (trips, leased) = procs
            .iter()
            .map(|p| p.lease_stats())
            .fold((0, 0), |a, s| (a.0 + s.0, a.1 + s.1));
        assert_eq!(leased, admitted);
        assert!(
            trips * 1000 <= 100 * leased,
            "{trips} round trips for {leased}"
        );
        for p in &procs {
            p.return_leases().await.unwrap();
        }
        let plain = RedisLimiter::builder(q)
            .prefix("lease:")
            .build(&Connection::open(&server.url()).await.unwrap())
            .unwrap();
        assert_eq!(
            plain.peek("hot").await.unwrap().remaining(),
            20_000 - admitted
        );
        // The exact log cannot lease.
        assert!(
            RedisLimiter::builder(q.with_mode(Mode::ExactLog))
                .leases(LeaseConfig {
                    max,
                    max_duration: Duration::from_secs(1)
                })
                .build(&Connection::open(&server.url()).await.unwrap())
                .is_err()
        );
    });
}

#[test]
fn bad_input_is_a_clear_error() {
    let rt = rt();
    // Unreachable: nothing listens on a free port.
    let port = redis_server::free_port();
    let err = rt
        .block_on(Connection::open(&format!("redis://127.0.0.1:{port}")))
        .err()
        .unwrap();
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    assert!(err.to_string().contains(&port.to_string()), "{err}");
    assert!(rt.block_on(Connection::open("not a url")).is_err());

    // A wrong password.
    let server = Server::with_args(&["--requirepass", "sesame"]);
    let err = rt
        .block_on(Connection::open(&format!(
            "redis://:wrong@127.0.0.1:{}",
            server.port
        )))
        .err()
        .unwrap();
    assert!(err.to_string().to_lowercase().contains("pass"), "{err}");
    let conn = rt
        .block_on(Connection::open(&format!(
            "redis://:sesame@127.0.0.1:{}",
            server.port
        )))
        .unwrap();

    // Something that is not Redis: an HTTP server, and one that never answers.
    for reply in [&b"HTTP/1.1 400 Bad Request\r\n\r\n"[..], b""] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let reply = reply.to_vec();
        std::thread::spawn(move || {
            for s in listener.incoming().take(4) {
                let Ok(mut s) = s else { continue };
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                if !reply.is_empty() {
                    let _ = s.write_all(&reply);
                } else {
                    std::thread::sleep(Duration::from_secs(6));
                }
            }
        });
        let start = Instant::now();
        let err = rt
            .block_on(Connection::open(&format!("redis://127.0.0.1:{port}")))
            .err()
            .unwrap();
        assert!(matches!(err, Error::Connect { .. }), "{err}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    rt.block_on(async {
        let limiter = RedisLimiter::builder(quota(5, Duration::from_secs(1)))
            .build(&conn)
            .unwrap();
        // A key of 1 MB: refused by default, accepted when allowed.
        let big = "x".repeat(1 << 20);
        assert!(matches!(limiter.check(&big).await, Err(Error::Key(_))));
        let roomy = RedisLimiter::builder(quota(5, Duration::from_secs(1)))
            .max_key_len(2 << 20)
            .deadline(Duration::from_secs(5))
            .build(&conn)
            .unwrap();
        let d = roomy.check(&big).await.unwrap();
        assert!(
            d.is_allowed() && d.path() == Path::Redis,
            "{d:?} {:?}",
            roomy.last_error()
        );
        // Keys with braces: their own tag kept, wrapped otherwise, never sharing state.
        for k in ["{a}", "a}", "{}x", "{t7}:alice", "a{b"] {
            let d = limiter.check_n(k, 5).await.unwrap();
            assert!(d.is_allowed(), "{k}");
            assert_eq!(d.path(), Path::Redis);
        }
        assert!(limiter.check("a").await.unwrap().is_allowed());
        assert!(matches!(limiter.check("").await, Err(Error::Key(_))));
        assert!(matches!(limiter.check("}x").await, Err(Error::Key(_))));
        assert!(matches!(limiter.check_n("a", 0).await, Err(Error::Cost(_))));
        assert!(matches!(limiter.check_n("a", 6).await, Err(Error::Cost(_))));
        assert!(
            RedisLimiter::builder(quota(5, Duration::from_secs(1)))
                .prefix("{x}")
                .build(&conn)
                .is_err()
        );
        // Strict with last-admission marks keeps its marks in nanoseconds of a bucket, exact
        // in Lua's doubles up to buckets of about 104 days: longer ones are refused, with a
        // message that names the limit; the longest one is built.
        let longest = slidegate::redis::MAX_MARKED_GRANULARITY_NANOS / 1000 * 1000;
        let marked = |g: u64| {
            Quota::new(5, Duration::from_nanos(2 * g))
                .and_then(|q| q.with_granularity(Duration::from_nanos(g)))
                .unwrap()
                .with_mode(Mode::StrictMarked)
        };
        match RedisLimiter::builder(marked(longest + 1000)).build(&conn) {
            Err(Error::Quota(message)) => assert!(message.contains("104 days"), "{message}"),
            other => panic!("marks of too long a bucket built: {:?}", other.map(|_| ())),
        }
        assert!(RedisLimiter::builder(marked(longest)).build(&conn).is_ok());
        // A key that holds something else: an error from Redis, so the policy decides and the
        // decision says why.
        server.cli(&["SET", "wrong:{k}:h", "v"]).unwrap();
        let wrong = RedisLimiter::builder(quota(5, Duration::from_secs(1)))
            .prefix("wrong:")
            .build(&conn)
            .unwrap();
        let d = wrong.check("k").await.unwrap();
        assert_eq!(d.degraded(), Some(Degraded::Failed));
        assert!(
            wrong.last_error().unwrap().contains("WRONGTYPE"),
            "{:?}",
            wrong.last_error()
        );
    });
}

/// The HTTP layer's `Limiter` trait over a `RedisLimiter`: Redis's decisions, and the
/// policy's counted as degraded.
#[cfg(feature = "tower")]
#[test]
fn the_http_layer_can_enforce_a_redis_limiter() {
    use slidegate::http::Limiter;
    let mut server = Server::start();
    rt().block_on(async {
        let conn = Connection::open(&server.url()).await.unwrap();
        let limiter = RedisLimiter::builder(quota(1, Duration::from_secs(60)))
            .deadline(Duration::from_millis(30))
            .policy(Policy::Allow)
            .build(&conn)
            .unwrap();
        let key = "k".to_string();
        let c = Limiter::check(&limiter, &key, 1).await.unwrap();
        assert!(c.decision.is_allowed() && !c.degraded);
        let c = Limiter::check(&limiter, &key, 1).await.unwrap();
        assert!(!c.decision.is_allowed() && !c.degraded);
        assert!(Limiter::check(&limiter, &key, 2).await.is_err());
        assert_eq!(Limiter::quota(&limiter, &key).limit(), 1);
        server.kill();
        let c = Limiter::check(&limiter, &key, 1).await.unwrap();
        assert!(c.decision.is_allowed() && c.degraded);
    });
}
