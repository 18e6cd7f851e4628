//! What slidegate's tests, benches and fuzz targets share, in one place instead of files each
//! of them includes by path.
//!
//! - [`model`]: the plain sequential reference model that property tests and the fuzzer
//!   compare every algorithm to;
//! - [`redis_server`]: real `redis-server` processes and Redis Clusters on free loopback
//!   ports, for the Redis backend's tests and benches and for the command's.
//!
//! Not published: it exists for the workspace's own tests.

pub mod model;
pub mod redis_server;
