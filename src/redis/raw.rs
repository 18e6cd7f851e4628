//! The connection underneath a [`Connection`](super::Connection) and the batches sent on it:
//! which server or Cluster, and how it calls the function library (`FCALL`, or `EVALSHA`
//! where the server has no functions).

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{Cmd, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

use super::script::{Entry, Invocation, Library};

/// The connection to the server or Cluster, and how it calls the library.
#[derive(Clone)]
pub(crate) struct Raw {
    pub(super) inner: Inner,
    /// Shared by clones: limits on one connection can share a script call.
    id: usize,
    /// Set once a server is found without functions (before Redis 7, or with `FCALL` renamed
    /// away): calls go through `EVALSHA` from then on.
    eval_only: Arc<AtomicBool>,
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

/// The client of one server, or of one Cluster.
#[derive(Clone)]
pub(crate) enum Inner {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Raw {
    pub(super) fn new(inner: Inner) -> Raw {
        Raw {
            inner,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            eval_only: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Shared by clones: limits on one connection can share a script call.
    pub(crate) fn id(&self) -> usize {
        self.id
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.inner, Inner::Cluster(_))
    }

    /// Calls the library's `entry` with `inv`, whose keys live in `slot` (on a Cluster).
    ///
    /// `FCALL`; when the server answers that the function is missing (a restart, a
    /// `FUNCTION FLUSH`, a failover to a node that never had it, a slot moved to one) the
    /// library is loaded on the node that answered and the call made again. A server without
    /// functions gets `EVALSHA`, and `EVAL` (which caches the script again) on `NOSCRIPT`:
    /// `EVAL` runs the script it carries, so a flush between the two cannot fail the call.
    pub(crate) async fn invoke(
        &self,
        entry: Entry,
        inv: &Invocation,
        slot: Slot,
    ) -> RedisResult<Value> {
        let lib = Library::get();
        let mut conn = self.clone();
        // A flush between a load and the call it was for sends the call round again; three
        // flushes in a row within a round trip each are not a server to keep calling.
        for _ in 0..3 {
            if self.eval_only.load(Ordering::Relaxed) {
                return match conn.query(&lib.eval(entry, inv, true)).await {
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                        conn.query(&lib.eval(entry, inv, false)).await
                    }
                    r => r,
                };
            }
            match conn.query(&lib.fcall(entry, inv)).await {
                Err(e) if missing_function(&e) => {
                    if let Err(e) = conn.load(lib, slot).await {
                        if !without_functions(&e) {
                            return Err(e);
                        }
                        // Functions exist but this client may not load them (ACL): scripts.
                        self.eval_only.store(true, Ordering::Relaxed);
                    }
                }
                Err(e) if without_functions(&e) => self.eval_only.store(true, Ordering::Relaxed),
                r => return r,
            }
        }
        Err(RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "the slidegate function library was flushed again each time it was loaded",
        )))
    }

    /// Loads the library on the server (on a Cluster, on every master), so that the first
    /// decisions do not each find it missing and load it; or learns that the server has no
    /// functions. Any other failure is left to the first call, which loads the library where
    /// it is missing.
    pub(super) async fn prepare(&mut self) {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg("REPLACE").arg(&Library::get().source);
        match self.query(&cmd).await {
            Err(e) if without_functions(&e) => self.eval_only.store(true, Ordering::Relaxed),
            _ => {}
        }
    }

    /// `FUNCTION LOAD REPLACE`, on the master of `slot` (a Cluster's other masters load it when
    /// they first miss it).
    async fn load(&mut self, lib: &Library, slot: Slot) -> RedisResult<()> {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg("REPLACE").arg(&lib.source);
        match &mut self.inner {
            Inner::Single(c) => cmd.query_async::<Value>(c).await.map(drop),
            Inner::Cluster(c) => {
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::with_slot(slot, SlotAddr::Master),
                ));
                c.route_command(cmd, route).await.map(drop)
            }
        }
    }

    /// Sends one command to the server (on a Cluster, to the node of its keys).
    async fn query(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match &mut self.inner {
            Inner::Single(c) => cmd.query_async(c).await,
            Inner::Cluster(c) => cmd.query_async(c).await,
        }
    }

    /// `PING`, answered `PONG`: the server speaks Redis.
    pub(super) async fn ping(&mut self) -> redis::RedisResult<()> {
        let pong: String = redis::from_redis_value(self.query(&redis::cmd("PING")).await?)?;
        if pong == "PONG" {
            Ok(())
        } else {
            Err(redis::RedisError::from((
                redis::ErrorKind::Parse,
                "the server answered PING with something other than PONG",
            )))
        }
    }
}

/// The server has no function by that name: it lost the library or never had it.
fn missing_function(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && e.detail()
            .is_some_and(|d| d.starts_with("Function not found"))
}

/// The server has no functions (before Redis 7, or `FCALL` renamed away), or may not load
/// them (an ACL without `FUNCTION`).
fn without_functions(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        || (e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
            && e.detail().is_some_and(|d| d.starts_with("unknown command")))
}
