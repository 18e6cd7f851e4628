//! `slidegate simulate --redis URL`: the same trace through the Redis backend, each request
//! judged at its own time (the script's test-time mode, `RedisLimiter::check_n_at`), so its
//! decisions can be compared with the local limiters' in one table.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use slidegate::Quota;
use slidegate::redis::{Connection, Path, Policy, RedisLimiter};

use crate::simulate::run::{self, Replay};
use crate::simulate::trace::Trace;

/// Keys replayed at once (each key's requests stay in order).
const CONCURRENT_KEYS: usize = 256;

/// A connection and a runtime for the run.
pub struct Backend {
    rt: tokio::runtime::Runtime,
    conn: Connection,
    run_id: String,
}

impl Backend {
    pub fn connect(url: &str) -> Result<Backend, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("--redis: cannot start a runtime: {e}"))?;
        let conn = rt
            .block_on(Connection::open(url))
            .map_err(|e| format!("--redis: {e}"))?;
        let run_id = format!(
            "{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis())
        );
        Ok(Backend { rt, conn, run_id })
    }

    /// Replays `trace` through a `RedisLimiter` of `quota` under a prefix of its own; the
    /// keys it writes expire an hour after their last request. An error if the backend
    /// cannot count the quota (sub-microsecond durations) or Redis fails to decide.
    pub fn replay(&self, trace: &Trace, quota: Quota, index: usize) -> Result<Replay, String> {
        let limiter = RedisLimiter::builder(quota)
            .prefix(format!("slidegate-simulate:{}:{index}:", self.run_id))
            .deadline(Duration::from_secs(10))
            .ttl_slack(Duration::from_secs(3600))
            .policy(Policy::Deny)
            .build(&self.conn)
            .map_err(|e| e.to_string())?;
        let origin = run::origin(trace, quota);
        let keys = Arc::new(run::by_key(trace));
        let trace = Arc::new(trace.clone());
        let start = Instant::now();
        let allowed = self.rt.block_on(async {
            let mut allowed = vec![false; trace.requests.len()];
            let mut tasks = tokio::task::JoinSet::new();
            let mut next = 0;
            loop {
                while tasks.len() < CONCURRENT_KEYS && next < keys.len() {
                    let (limiter, keys, trace, k) =
                        (limiter.clone(), keys.clone(), trace.clone(), next);
                    tasks.spawn(async move {
                        let mut out = Vec::with_capacity(keys[k].len());
                        for &i in &keys[k] {
                            let r = &trace.requests[i as usize];
                            let at = (r.at - origin) / 1000;
                            let d = limiter
                                .check_n_at(&trace.keys[k], u64::from(r.cost), at)
                                .await
                                .map_err(|e| e.to_string())?;
                            if d.path() != Path::Redis {
                                return Err(format!(
                                    "Redis did not decide ({:?}): {}",
                                    d.degraded(),
                                    limiter.last_error().unwrap_or_default()
                                ));
                            }
                            out.push((i, d.is_allowed()));
                        }
                        Ok::<_, String>(out)
                    });
                    next += 1;
                }
                match tasks.join_next().await {
                    Some(done) => {
                        for (i, a) in done.map_err(|e| e.to_string())?? {
                            allowed[i as usize] = a;
                        }
                    }
                    None => break,
                }
            }
            Ok::<_, String>(allowed)
        })?;
        Ok(Replay {
            allowed,
            elapsed: start.elapsed(),
        })
    }
}
