//! One multiplexed connection to a Redis server or a Redis Cluster.

use core::time::Duration;

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{
    Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};

use super::Error;
use super::batch::{self, Batches};
use super::script::{Entry, Invocation, Library};

/// A connection slidegate decides through: one server or one Cluster.
///
/// Both kinds multiplex: every clone shares one TCP connection per server, and any number of
/// tasks may have requests in flight on it at once (pipelined), so a thousand concurrent
/// decisions need no more connections than there are servers. Both reconnect by themselves
/// after the server goes away and comes back; the Cluster connection also follows slot moves
/// and failovers (`MOVED`, `ASK`), re-reading the slot map.
#[derive(Clone)]
pub struct Connection {
    pub(crate) raw: Raw,
    /// The queue of single-key decisions, sent in batches (see `batch.rs`).
    pub(crate) batches: Batches,
}

/// The connection to the server or Cluster, and how it calls the library.
#[derive(Clone)]
pub(crate) struct Raw {
    inner: Inner,
    /// Shared by clones: limits on one connection can share a script call.
    id: usize,
    /// Set once a server is found without functions (before Redis 7, or with `FCALL` renamed
    /// away): calls go through `EVALSHA` from then on.
    eval_only: Arc<AtomicBool>,
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone)]
enum Inner {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// How long to wait for a TCP connection before calling a server unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

impl Connection {
    /// Connects to one Redis server: `redis://[user:password@]host:port[/db]` (or
    /// `rediss://` with a TLS build of the `redis` crate, `redis+unix:///path`). Fails with a
    /// clear [`Error::Connect`] if the server cannot be reached, refuses the credentials or
    /// does not speak Redis; after that, reconnects by itself whenever the server comes back.
    pub async fn open(url: &str) -> Result<Connection, Error> {
        within(url, Connection::open_now(url)).await
    }

    async fn open_now(url: &str) -> Result<Connection, Error> {
        let client = redis::Client::open(url).map_err(|e| Error::connect(url, e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            // Decisions carry their own deadline (see `RedisLimiterBuilder::deadline`).
            .set_response_timeout(None)
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200));
        let manager = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| Error::connect(url, e))?;
        let mut raw = Raw::new(Inner::Single(manager));
        raw.ping().await.map_err(|e| Error::connect(url, e))?;
        raw.prepare().await;
        Ok(Connection::from(raw))
    }

    /// Connects to a Redis Cluster through any of its nodes (`redis://host:port`, with the
    /// password in each URL if the cluster needs one); the client learns the slot map from
    /// them.
    pub async fn open_cluster(nodes: &[&str]) -> Result<Connection, Error> {
        within(&nodes.join(", "), Connection::open_cluster_now(nodes)).await
    }

    async fn open_cluster_now(nodes: &[&str]) -> Result<Connection, Error> {
        let all = nodes.join(", ");
        let client = ClusterClientBuilder::new(nodes.to_vec())
            .connection_timeout(CONNECT_TIMEOUT)
            .retries(3)
            .min_retry_wait(10)
            .max_retry_wait(200)
            .build()
            .map_err(|e| Error::connect(&all, e))?;
        let cluster = client
            .get_async_connection()
            .await
            .map_err(|e| Error::connect(&all, e))?;
        let mut raw = Raw::new(Inner::Cluster(cluster));
        raw.ping().await.map_err(|e| Error::connect(&all, e))?;
        raw.prepare().await;
        Ok(Connection::from(raw))
    }

    fn from(raw: Raw) -> Connection {
        let batches = batch::start(raw.clone());
        Connection { raw, batches }
    }

    pub(crate) fn id(&self) -> usize {
        self.raw.id
    }

    /// Whether this is a Cluster connection (keys of different slots cannot share a script).
    pub fn is_cluster(&self) -> bool {
        self.raw.is_cluster()
    }
}

impl Raw {
    fn new(inner: Inner) -> Raw {
        Raw {
            inner,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            eval_only: Arc::new(AtomicBool::new(false)),
        }
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
    async fn prepare(&mut self) {
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

    async fn ping(&mut self) -> redis::RedisResult<()> {
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

/// `open` bounded by twice the connect timeout: a server that accepts and never answers
/// would otherwise hold the handshake forever.
async fn within(
    url: &str,
    open: impl Future<Output = Result<Connection, Error>>,
) -> Result<Connection, Error> {
    match tokio::time::timeout(2 * CONNECT_TIMEOUT, open).await {
        Ok(r) => r,
        Err(_) => Err(Error::connect(
            url,
            redis::RedisError::from((
                redis::ErrorKind::Io,
                "no answer to the handshake: is this a Redis server?",
            )),
        )),
    }
}

/// Commands of the caller's own through the connection (the server's, or the Cluster's).
impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.raw.inner {
            Inner::Single(c) => c.req_packed_command(cmd),
            Inner::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.raw.inner {
            Inner::Single(c) => c.req_packed_commands(cmd, offset, count),
            Inner::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.raw.inner {
            Inner::Single(c) => c.get_db(),
            Inner::Cluster(c) => c.get_db(),
        }
    }
}
