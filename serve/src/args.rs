//! The options of `slidegate serve` (and of `slidegate-serve`), as clap reads them: the only
//! module that knows clap.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::duration::parse_duration;
use crate::engine::Unavailable;

/// The options of `slidegate serve`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The rules file: TOML (slidegate's format), or `.yaml`/`.yml` in the format of Envoy's
    /// reference rate limit service. Reloaded when it changes and on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub(crate) rules: PathBuf,

    /// Where the HTTP/JSON API listens (port 0: any free port, printed at start).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub(crate) http: SocketAddr,

    /// Where the gRPC API (Envoy's rate limit service) listens.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081")]
    pub(crate) grpc: SocketAddr,

    /// Keep the counts in Redis (`redis://host:port[/db]`), shared by every server with the
    /// same rules and --redis-prefix. Several URLs: the nodes of a Redis Cluster.
    #[arg(long, value_name = "URL")]
    pub(crate) redis: Vec<String>,

    /// The prefix of every Redis key this server writes (no braces).
    #[arg(
        long,
        value_name = "PREFIX",
        default_value = "slidegate:",
        requires = "redis"
    )]
    pub(crate) redis_prefix: String,

    /// How long a Redis decision may take before --redis-unavailable decides.
    #[arg(long, value_name = "DURATION", default_value = "50ms", value_parser = parse_duration, requires = "redis")]
    pub(crate) redis_deadline: Duration,

    /// What decides while Redis does not answer: allow, deny, or local (each rule's quota
    /// counted by this server alone).
    #[arg(long, value_enum, default_value_t = WhenUnavailable::Local, requires = "redis")]
    pub(crate) redis_unavailable: WhenUnavailable,

    /// The most keys one rule holds in memory (the least recently active are evicted beyond).
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub(crate) max_keys: usize,

    /// The largest HTTP request body accepted, in bytes (larger: 413).
    #[arg(long, value_name = "BYTES", default_value_t = 64 * 1024)]
    pub(crate) max_body: usize,

    /// After SIGTERM/SIGINT, keep serving this long with /readyz failing and every HTTP
    /// response closing its connection, so a load balancer moves traffic away first.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub(crate) drain: Duration,

    /// After the listeners close, how long in-flight requests may take to finish.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub(crate) shutdown_timeout: Duration,

    /// Worker threads [default: one per core].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) threads: Option<u16>,

    /// Also serve no-op endpoints (POST /v1/noop, gRPC slidegate.serve.v1.Noop) that parse
    /// a request and decide nothing: the baseline of the load benchmark.
    #[arg(long)]
    pub(crate) noop_endpoints: bool,
}

const AFTER_HELP: &str = "\
The first line on standard output gives the addresses the APIs listen on:
  slidegate serve: http=127.0.0.1:8080 grpc=127.0.0.1:8081 rules=rules.toml (3 rules)
Logs go to standard error (RUST_LOG=debug for more). The API, the rules format and the
metrics are described in docs/serve.md.";

/// `--redis-unavailable`: clap's side of [`Unavailable`], which the engine decides by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum WhenUnavailable {
    /// Admit every request.
    Allow,
    /// Deny every request.
    Deny,
    /// Each rule's quota counted in this process alone.
    Local,
}

impl From<WhenUnavailable> for Unavailable {
    fn from(w: WhenUnavailable) -> Unavailable {
        match w {
            WhenUnavailable::Allow => Unavailable::Allow,
            WhenUnavailable::Deny => Unavailable::Deny,
            WhenUnavailable::Local => Unavailable::Local,
        }
    }
}
