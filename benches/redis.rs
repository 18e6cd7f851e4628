//! The Redis backend against its peers, on a `redis-server` this harness starts on a free
//! loopback port: decisions per second of slidegate's script, of the naive sorted-set design
//! of the classic write-ups (MULTI of ZREMRANGEBYSCORE, ZADD, ZCARD, PEXPIRE) and of PING
//! round trips, through the same multiplexed client at 1 and 64 concurrent callers; the
//! server's cost per decision at N = 10 and N = 3600 (`INFO commandstats`); and leases on
//! one hot key (round trips per 1000 admitted, and what they cost in admissions).
//!
//! `cargo bench --bench redis --features redis` (a custom harness: criterion measures one
//! future at a time, and the question here is throughput under concurrency). Each figure is
//! the median of `ROUNDS` runs of `SECS` seconds, the designs alternating within each round.

use slidegate_testkit::redis_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use slidegate::Quota;
use slidegate::redis::{Connection, LeaseConfig, Path, RedisLimiter};

const ROUNDS: usize = 3;
const SECS: f64 = 1.5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Design {
    Slidegate,
    Naive,
    Ping,
    /// The least any one-round-trip design with the server's time can do: a script that
    /// reads the time and one hash and writes one field, deciding nothing.
    Floor,
}

const FLOOR: &str = "local t = redis.call('TIME') local v = redis.call('HMGET', KEYS[1], 'c', 'f') \
                     redis.call('HSET', KEYS[1], 'c', (tonumber(v[1]) or 0) + 1) return t[1]";

/// Decisions per second of `design` with `callers` concurrent tasks for `SECS`.
async fn rate(design: Design, limiter: &RedisLimiter, conn: &Connection, callers: usize) -> f64 {
    let until = Instant::now() + Duration::from_secs_f64(SECS);
    let done = Arc::new(AtomicU64::new(0));
    let seq = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..callers {
        let (limiter, mut conn, done, seq) =
            (limiter.clone(), conn.clone(), done.clone(), seq.clone());
        let floor = redis::Script::new(FLOOR);
        tasks.push(tokio::spawn(async move {
            let key = format!("user-{}", c % 16);
            while Instant::now() < until {
                match design {
                    Design::Slidegate => {
                        let d = limiter.check(&key).await.unwrap();
                        assert_eq!(d.path(), Path::Redis);
                    }
                    Design::Naive => {
                        let now = SystemTime::now()
                            .duration_since(UNIX_EPOCH)
                            .unwrap()
                            .as_micros() as u64;
                        let member = format!("{now}-{}", seq.fetch_add(1, Ordering::Relaxed));
                        let zkey = format!("naive:{key}");
                        let (_, _, card, _): (i64, i64, u64, i64) = redis::pipe()
                            .atomic()
                            .cmd("ZREMRANGEBYSCORE")
                            .arg(&zkey)
                            .arg(0)
                            .arg(now.saturating_sub(60_000_000))
                            .cmd("ZADD")
                            .arg(&zkey)
                            .arg(now)
                            .arg(&member)
                            .cmd("ZCARD")
                            .arg(&zkey)
                            .cmd("PEXPIRE")
                            .arg(&zkey)
                            .arg(60_000)
                            .query_async(&mut conn)
                            .await
                            .unwrap();
                        std::hint::black_box(card <= 1_000_000_000);
                    }
                    Design::Floor => {
                        let t: i64 = floor
                            .key(format!("floor:{key}"))
                            .invoke_async(&mut conn)
                            .await
                            .unwrap();
                        std::hint::black_box(t);
                    }
                    Design::Ping => {
                        let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
                        std::hint::black_box(pong);
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// `usec_per_call` of FCALL from `INFO commandstats` after `calls` decisions on one key.
async fn server_cost(
    server: &redis_server::Server,
    limiter: &RedisLimiter,
    calls: u64,
) -> (f64, f64) {
    server.cli(&["CONFIG", "RESETSTAT"]).unwrap();
    let start = Instant::now();
    for _ in 0..calls {
        let _ = limiter.check("one").await.unwrap();
    }
    let per_sec = calls as f64 / start.elapsed().as_secs_f64();
    let stats = server.cli(&["INFO", "commandstats"]).unwrap();
    let line = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_fcall:"))
        .expect("fcall ran");
    let usec = line
        .split(',')
        .find_map(|f| f.strip_prefix("usec_per_call="))
        .unwrap()
        .parse()
        .unwrap();
    (usec, per_sec)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it once, quickly, as a test.
    let quick = !std::env::args().any(|a| a == "--bench");
    let rounds = if quick { 1 } else { ROUNDS };
    let server = redis_server::Server::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let conn = Connection::open(&server.url()).await.unwrap();
        // Never denies in these runs: the peers' work is a decision that admits.
        let q = Quota::new(1_000_000_000, Duration::from_secs(60)).unwrap();
        let limiter = RedisLimiter::builder(q).deadline(Duration::from_secs(5)).build(&conn).unwrap();
        println!("decisions/s, median of {rounds} runs of {SECS} s, one multiplexed connection, 1 client worker thread");
        println!("| callers | slidegate | naive MULTI/ZSET | floor script | PING | slidegate / naive | slidegate / PING | floor / PING |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
        for callers in [1usize, 64] {
            let mut r = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
            for _ in 0..rounds {
                for (i, d) in [Design::Slidegate, Design::Naive, Design::Floor, Design::Ping].into_iter().enumerate() {
                    r[i].push(rate(d, &limiter, &conn, callers).await);
                }
                server.cli(&["FLUSHALL"]).unwrap();
            }
            let [s, n, f, p] = r.map(median);
            println!("| {callers} | {s:.0} | {n:.0} | {f:.0} | {p:.0} | {:.2} | {:.2} | {:.2} |", s / n, s / p, f / p);
        }

        println!();
        println!("server cost per decision (INFO commandstats usec_per_call), Strict, window 3.6 s, a key");
        println!("checked 20 000 times (every bucket of the window written at N = 3600)");
        println!("| N | usec_per_call | decisions/s, one caller |");
        println!("|---:|---:|---:|");
        let calls = if quick { 2000 } else { 20_000 };
        let mut costs = Vec::new();
        for _ in 0..rounds {
            for n in [10u64, 3600] {
                let q = Quota::new(1_000_000_000, Duration::from_millis(3600))
                    .unwrap()
                    .with_granularity(Duration::from_millis(3600 / n))
                    .unwrap();
                let l = RedisLimiter::builder(q).prefix(format!("cost{n}:")).deadline(Duration::from_secs(5)).build(&conn).unwrap();
                costs.push((n, server_cost(&server, &l, calls).await));
            }
            server.cli(&["FLUSHALL"]).unwrap();
        }
        let mut ratio = Vec::new();
        for n in [10u64, 3600] {
            let us = median(costs.iter().filter(|c| c.0 == n).map(|c| c.1.0).collect());
            let ps = median(costs.iter().filter(|c| c.0 == n).map(|c| c.1.1).collect());
            ratio.push(us);
            println!("| {n} | {us:.2} | {ps:.0} |");
        }
        println!("N = 3600 / N = 10: {:.2}", ratio[1] / ratio[0]);

        println!();
        println!("leases on one hot key: 3 limiters (3 processes' worth), 16 tasks each, each task");
        println!("checking 2 000 times; quota 200 000 per 10 s in 1 s buckets (never reached), then");
        println!("20 000 per 600 s (reached), lease max 200");
        let procs = |q: Quota, leases: bool, prefix: String| {
            let mut v = Vec::new();
            for _ in 0..3 {
                let mut b = RedisLimiter::builder(q).prefix(prefix.clone()).deadline(Duration::from_secs(5));
                if leases {
                    b = b.leases(LeaseConfig { max: 200, max_duration: Duration::from_secs(1) });
                }
                v.push(b.build(&conn).unwrap());
            }
            v
        };
        let checks = if quick { 200 } else { 2000 };
        let run = |ls: Vec<RedisLimiter>| async move {
            let start = Instant::now();
            let mut tasks = Vec::new();
            for l in &ls {
                for _ in 0..16 {
                    let l = l.clone();
                    tasks.push(tokio::spawn(async move {
                        let mut ok = 0u64;
                        for _ in 0..checks {
                            ok += u64::from(l.check("hot").await.unwrap().is_allowed());
                        }
                        ok
                    }));
                }
            }
            let mut ok = 0;
            for t in tasks {
                ok += t.await.unwrap();
            }
            let secs = start.elapsed().as_secs_f64();
            let (trips, leased) = ls.iter().map(|l| l.lease_stats()).fold((0, 0), |a, s| (a.0 + s.0, a.1 + s.1));
            (ok, secs, trips, leased)
        };
        println!("| quota | mode | admitted | decisions/s | round trips | per 1000 admitted |");
        println!("|---|---|---:|---:|---:|---:|");
        let under = Quota::new(200_000, Duration::from_secs(10)).unwrap().with_granularity(Duration::from_secs(1)).unwrap();
        let over = Quota::new(20_000, Duration::from_secs(600)).unwrap().with_granularity(Duration::from_secs(600)).unwrap();
        let asked = 3 * 16 * checks;
        let mut admitted = Vec::new();
        for (name, q) in [("200 000 / 10 s", under), ("20 000 / 600 s", over)] {
            for leases in [false, true] {
                let prefix = format!("lease-{name}-{leases}:");
                let (ok, secs, trips, leased) = run(procs(q, leases, prefix)).await;
                let trips = if leases { trips } else { asked };
                let per = 1000.0 * trips as f64 / leased.max(ok).max(1) as f64;
                println!("| {name} | {} | {ok} | {:.0} | {trips} | {per:.1} |", if leases { "leases" } else { "no leases" }, asked as f64 / secs);
                admitted.push(ok);
            }
        }
        println!(
            "wrongly denied at the limit (admitted without leases − with, before leases are returned): {} (bound: 3 × 200 = 600)",
            admitted[2] - admitted[3]
        );
    });
}
