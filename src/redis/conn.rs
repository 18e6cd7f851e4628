//! One multiplexed connection to a Redis server or a Redis Cluster.

use core::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::Error;
use super::batch::{self, Batches};
use super::raw::{Inner, Raw};

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
        self.raw.id()
    }

    /// Whether this is a Cluster connection (keys of different slots cannot share a script).
    pub fn is_cluster(&self) -> bool {
        self.raw.is_cluster()
    }
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
