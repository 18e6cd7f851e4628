//! An axum server with per-IP and per-user rate limits.
//!
//! ```text
//! cargo run --example axum --features axum            # listens on 127.0.0.1:3000
//! curl -i localhost:3000/                              # 20 a minute per client address
//! curl -i -H 'authorization: Bearer alice' localhost:3000/me   # and 5 a second per user
//! ```
//!
//! `PORT` picks the port; `TRUSTED_PROXIES` (say `10.0.0.0/8,127.0.0.1`) names the reverse
//! proxies whose `X-Forwarded-For` is believed. Every response carries the `RateLimit` and
//! `RateLimit-Policy` fields; a denial is `429` with `Retry-After`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, Request};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use slidegate::http::key::{self, ClientIp, ProxyHeader};
use slidegate::http::{All, Policy, RateLimitLayer};
use slidegate::{KeyedLimiter, Quota};

/// The user a request is authenticated as.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct User(Arc<str>);

/// A stand-in for real authentication: `Authorization: Bearer <name>` is user `<name>`.
async fn authenticate(mut request: Request, next: Next) -> Result<Response, StatusCode> {
    let user = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .filter(|name| !name.is_empty())
        .ok_or(StatusCode::UNAUTHORIZED)?;
    let user = User(user.into());
    request.extensions_mut().insert(user);
    Ok(next.run(request).await)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = std::env::var("PORT").map_or(Ok(3000), |p| p.parse())?;
    let proxies = std::env::var("TRUSTED_PROXIES").unwrap_or_default();
    let proxies: Vec<&str> = proxies.split(',').filter(|p| !p.is_empty()).collect();

    // One client address (an IPv6 /64) gets 20 requests a minute, counted in 1 s buckets;
    // at most a million addresses are tracked at once.
    let per_ip = Arc::new(
        KeyedLimiter::builder(
            Quota::new(20, Duration::from_secs(60))?.with_granularity(Duration::from_secs(1))?,
        )
        .max_keys(1_000_000)
        .build(),
    );
    // A signed-in user gets 5 requests a second.
    let per_user = KeyedLimiter::builder(Quota::new(5, Duration::from_secs(1))?)
        .max_keys(100_000)
        .build();
    let client_ip = ClientIp::new().behind_proxies(ProxyHeader::XForwardedFor, &proxies)?;

    let public = RateLimitLayer::new(Policy::new("per-ip", per_ip.clone())?.key(client_ip.clone()));
    // Both limits at once: a request is charged to both or to neither.
    let signed_in = RateLimitLayer::new(All::new((
        Policy::new("per-ip", per_ip)?.key(client_ip),
        Policy::new("per-user", per_user)?.key(key::Extension::<User>::new()),
    )));

    let app = Router::new()
        .route("/", get(|| async { "hello\n" }).route_layer(public))
        .route(
            "/me",
            get(|Extension(User(name)): Extension<User>| async move { format!("hello, {name}\n") })
                .route_layer(signed_in)
                // Runs first: the per-user limit reads the user it inserts.
                .route_layer(middleware::from_fn(authenticate)),
        )
        .route("/health", get(|| async { "ok\n" }));

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    // The per-IP key is the peer address, which axum hands over as `ConnectInfo`.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
