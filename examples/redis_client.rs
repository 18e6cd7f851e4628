//! One client process of the Redis tests' multi-process run: `TASKS` tasks check one key
//! of a Strict limiter as fast as they can for `MILLIS` milliseconds, then the process
//! prints its own wall-clock time (µs since the epoch) and the server time of every
//! admission, one per line.
//!
//! `redis_client URL PREFIX LIMIT WINDOW_MS GRANULARITY_MS TASKS MILLIS`

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use slidegate::Quota;
use slidegate::redis::{Connection, Path, RedisLimiter};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 8 {
        return Err(
            "usage: redis_client URL PREFIX LIMIT WINDOW_MS GRANULARITY_MS TASKS MILLIS".into(),
        );
    }
    let num = |i: usize| a[i].parse::<u64>();
    let quota = Quota::new(num(3)?, Duration::from_millis(num(4)?))?
        .with_granularity(Duration::from_millis(num(5)?))?;
    let conn = Connection::open(&a[1]).await?;
    let limiter = RedisLimiter::builder(quota)
        .prefix(a[2].clone())
        .deadline(Duration::from_secs(5))
        .build(&conn)?;
    let until = Instant::now() + Duration::from_millis(num(7)?);
    let mut tasks = Vec::new();
    for _ in 0..num(6)? {
        let limiter = limiter.clone();
        tasks.push(tokio::spawn(async move {
            let mut admitted = Vec::new();
            while Instant::now() < until {
                let d = limiter.check("hot").await.expect("a valid key");
                assert_eq!(d.path(), Path::Redis, "Redis decides");
                if d.is_allowed() {
                    admitted.push(d.server_time_micros());
                }
            }
            admitted
        }));
    }
    let mut out = String::new();
    let own = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros();
    out.push_str(&format!("clock {own}\n"));
    for t in tasks {
        for at in t.await? {
            out.push_str(&format!("{at}\n"));
        }
    }
    print!("{out}");
    Ok(())
}
