//! Key extractors: what a request is counted as.
//!
//! | extractor | key | from |
//! |---|---|---|
//! | [`ClientIp`] | [`IpAddr`] | the peer address, or behind trusted proxies the client address they report; IPv6 by prefix (/64 by default) |
//! | [`Header`] | [`HeaderValue`] | a request header (an API token) |
//! | [`Extension`] | `T` | a request extension an earlier layer inserted (an authenticated principal) |
//! | [`Route`] | `(String, K)` | the matched route (axum's `MatchedPath`, else the path) and another extractor's key |
//! | [`FromFn`] | `K` | a closure over the request's head |
//! | [`Global`] | `()` | nothing: one budget for every request |

use core::fmt;
use core::marker::PhantomData;
use core::net::{IpAddr, SocketAddr};

use http::request::Parts;
use http::{Extensions, HeaderMap, HeaderName, HeaderValue, Method, Request, Uri, Version};
use ipnet::IpNet;

pub use crate::http::forwarded::ProxyHeader;
use crate::http::forwarded::{self, TrustedProxies};

/// A request's head, borrowed from the request: what a key is extracted from.
///
/// The layer hands its extractors the request in place, through this view, so that the
/// request's head is not moved out of it and back for them. Its fields are named as those of
/// [`http::request::Parts`], so code written against `&Parts` reads the same
/// (`head.headers.get(..)`, `head.extensions.get::<T>()`); `From` makes one from a `&Request`
/// or a `&Parts`.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct RequestHead<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The request's URI.
    pub uri: &'a Uri,
    /// The request's HTTP version.
    pub version: Version,
    /// The request's header fields.
    pub headers: &'a HeaderMap,
    /// The request's extensions (axum's `ConnectInfo`, an authenticated user).
    pub extensions: &'a Extensions,
}

impl<'a, B> From<&'a Request<B>> for RequestHead<'a> {
    #[inline]
    fn from(request: &'a Request<B>) -> Self {
        RequestHead {
            method: request.method(),
            uri: request.uri(),
            version: request.version(),
            headers: request.headers(),
            extensions: request.extensions(),
        }
    }
}

impl<'a> From<&'a Parts> for RequestHead<'a> {
    fn from(parts: &'a Parts) -> Self {
        RequestHead {
            method: &parts.method,
            uri: &parts.uri,
            version: parts.version,
            headers: &parts.headers,
            extensions: &parts.extensions,
        }
    }
}

/// Extracts a rate-limit key from a request's head.
///
/// A key that cannot be extracted is an error, never a panic: the layer then applies the
/// policy's [`OnMissingKey`](crate::http::OnMissingKey) outcome. (A panic in `extract` is
/// caught and treated the same way.)
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key.
    type Key: Send + Sync + 'static;

    /// The key of the request whose head is `head`.
    fn extract(&self, head: &RequestHead<'_>) -> Result<Self::Key, KeyError>;
}

/// Why no key could be extracted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The request carries no peer address: no `ConnectInfo<SocketAddr>` (serve the axum
    /// router with `into_make_service_with_connect_info::<SocketAddr>()`) and no `SocketAddr`
    /// extension.
    #[error(
        "no peer address in the request's extensions (axum: serve with into_make_service_with_connect_info::<SocketAddr>())"
    )]
    NoPeerAddress,
    /// The header is absent.
    #[error("no {0} header")]
    MissingHeader(HeaderName),
    /// The extension is absent.
    #[error("no {0} extension")]
    MissingExtension(&'static str),
    /// A closure found no key.
    #[error("the key closure found no key")]
    NotFound,
    /// The extractor panicked.
    #[error("the key extractor panicked")]
    Panicked,
}

/// One key for every request: for a [`SlidingWindow`](crate::SlidingWindow) shared by all.
#[derive(Clone, Copy, Debug, Default)]
pub struct Global;

impl KeyExtractor for Global {
    type Key = ();

    fn extract(&self, _: &RequestHead<'_>) -> Result<(), KeyError> {
        Ok(())
    }
}

/// Where a [`ClientIp`] reads the peer address.
type PeerFn = dyn Fn(&RequestHead<'_>) -> Option<IpAddr> + Send + Sync;

/// The client's IP address: the peer, or behind trusted proxies the client they report.
///
/// By default the key is the address of the peer (the TCP connection's other end), read from
/// axum's `ConnectInfo<SocketAddr>` (with the `axum` feature) or a `SocketAddr` request
/// extension (what a hyper server inserts by hand); `Forwarded` and `X-Forwarded-For` are
/// ignored, since any client can write them. Behind a reverse proxy every peer is the proxy:
/// [`ClientIp::behind_proxies`] names the proxies, and for a request from one of them the key
/// is the first address, walking the header's chain from the right, that is not a trusted
/// proxy — a hop a client forged left of it is never reached.
///
/// IPv6 addresses are keyed by their first 64 bits: one host commonly owns a whole /64, and
/// keyed by full address it could use 2⁶⁴ budgets. [`ClientIp::ipv6_prefix`] changes it
/// (128 keys every address apart; 56 or 48 count a whole site as one client).
/// IPv4-mapped IPv6 addresses are keyed as the IPv4 address they carry.
///
/// ```
/// use slidegate::http::key::{ClientIp, ProxyHeader};
///
/// // Behind a load balancer on 10.0.0.0/8 that appends to X-Forwarded-For.
/// let key = ClientIp::new().behind_proxies(ProxyHeader::XForwardedFor, ["10.0.0.0/8"])?;
/// # Ok::<(), slidegate::http::key::ProxyListError>(())
/// ```
#[derive(Clone)]
pub struct ClientIp {
    trusted: TrustedProxies,
    header: ProxyHeader,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
    peer: Option<std::sync::Arc<PeerFn>>,
}

/// A trusted-proxy entry that is neither an address nor a network.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("trusted proxy {0:?} is neither an IP address nor a network in CIDR notation (10.0.0.0/8)")]
pub struct ProxyListError(String);

impl ClientIp {
    /// The peer address, IPv6 by /64.
    pub fn new() -> Self {
        ClientIp {
            trusted: TrustedProxies::default(),
            header: ProxyHeader::XForwardedFor,
            ipv4_prefix: 32,
            ipv6_prefix: 64,
            peer: None,
        }
    }

    /// Trusts the hosts of `proxies` (addresses such as `"10.0.0.1"` or networks such as
    /// `"10.0.0.0/8"`, `"fd00::/8"`) to report, in `header`, the address they forward for.
    pub fn behind_proxies<I, S>(
        mut self,
        header: ProxyHeader,
        proxies: I,
    ) -> Result<Self, ProxyListError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let nets = proxies
            .into_iter()
            .map(|p| {
                let p = p.as_ref().trim();
                p.parse::<IpNet>()
                    .or_else(|_| p.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| ProxyListError(p.to_owned()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.trusted = TrustedProxies::new(nets);
        self.header = header;
        Ok(self)
    }

    /// Keys IPv6 clients by their first `bits` bits (at most 128; default 64).
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.ipv6_prefix = bits.min(128);
        self
    }

    /// Keys IPv4 clients by their first `bits` bits (at most 32; default 32).
    pub fn ipv4_prefix(mut self, bits: u8) -> Self {
        self.ipv4_prefix = bits.min(32);
        self
    }

    /// Reads the peer address with `f` instead (say, from tonic's `TcpConnectInfo`).
    pub fn peer_from(
        mut self,
        f: impl Fn(&RequestHead<'_>) -> Option<IpAddr> + Send + Sync + 'static,
    ) -> Self {
        self.peer = Some(std::sync::Arc::new(f));
        self
    }

    fn peer(&self, head: &RequestHead<'_>) -> Option<IpAddr> {
        if let Some(f) = &self.peer {
            return f(head);
        }
        #[cfg(feature = "axum")]
        if let Some(info) = head
            .extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
        {
            return Some(info.0.ip());
        }
        head.extensions.get::<SocketAddr>().map(SocketAddr::ip)
    }
}

impl Default for ClientIp {
    fn default() -> Self {
        ClientIp::new()
    }
}

impl fmt::Debug for ClientIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIp")
            .field("trusted", &self.trusted)
            .field("header", &self.header)
            .field("ipv4_prefix", &self.ipv4_prefix)
            .field("ipv6_prefix", &self.ipv6_prefix)
            .field("custom_peer", &self.peer.is_some())
            .finish()
    }
}

impl KeyExtractor for ClientIp {
    type Key = IpAddr;

    fn extract(&self, head: &RequestHead<'_>) -> Result<IpAddr, KeyError> {
        let peer = self.peer(head).ok_or(KeyError::NoPeerAddress)?;
        let client = forwarded::client_address(peer, head.headers, self.header, &self.trusted);
        Ok(forwarded::prefix(
            client,
            self.ipv4_prefix,
            self.ipv6_prefix,
        ))
    }
}

/// An address entry as a proxy writes it in `X-Forwarded-For` (`192.0.2.1`,
/// `[2001:db8::1]:443`), read as [`ClientIp`] reads it. For the benchmark that weighs its
/// dotted-quad parser against the standard library's (`benches/http/layer.rs`).
#[doc(hidden)]
pub fn parse_proxy_entry(entry: &[u8]) -> Option<IpAddr> {
    forwarded::parse_node(entry)
}

/// A request header's value (the first, if it appears more than once).
#[derive(Clone, Debug)]
pub struct Header(HeaderName);

impl Header {
    /// The header `name`.
    ///
    /// # Panics
    /// If `name` is not a valid header name; [`Header::from_name`] takes a checked one.
    pub fn new(name: &'static str) -> Self {
        Header(HeaderName::from_static(name))
    }

    /// The header `name`.
    pub fn from_name(name: HeaderName) -> Self {
        Header(name)
    }
}

impl KeyExtractor for Header {
    type Key = HeaderValue;

    fn extract(&self, head: &RequestHead<'_>) -> Result<HeaderValue, KeyError> {
        head.headers
            .get(&self.0)
            .cloned()
            .ok_or_else(|| KeyError::MissingHeader(self.0.clone()))
    }
}

/// A request extension of type `T`, inserted by an earlier layer (an authenticated user).
pub struct Extension<T>(PhantomData<fn() -> T>);

impl<T> Extension<T> {
    /// The extension of type `T`.
    pub fn new() -> Self {
        Extension(PhantomData)
    }
}

impl<T> Default for Extension<T> {
    fn default() -> Self {
        Extension::new()
    }
}

impl<T> Clone for Extension<T> {
    fn clone(&self) -> Self {
        Extension::new()
    }
}

impl<T> fmt::Debug for Extension<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Extension<{}>", core::any::type_name::<T>())
    }
}

impl<T: Clone + Send + Sync + 'static> KeyExtractor for Extension<T> {
    type Key = T;

    fn extract(&self, head: &RequestHead<'_>) -> Result<T, KeyError> {
        head.extensions
            .get::<T>()
            .cloned()
            .ok_or(KeyError::MissingExtension(core::any::type_name::<T>()))
    }
}

/// The route and another extractor's key: one budget per client per route.
///
/// The route is axum's `MatchedPath` (the route's pattern, `/users/{id}`) with the `axum`
/// feature, else the request's path. Keying by raw path lets a client make a key per path it
/// invents, so outside axum bound the limiter's keys (`max_keys`).
#[derive(Clone, Debug)]
pub struct Route<X>(X);

impl<X> Route<X> {
    /// The route, and `inner`'s key.
    pub fn new(inner: X) -> Self {
        Route(inner)
    }
}

impl<X: KeyExtractor> KeyExtractor for Route<X> {
    type Key = (String, X::Key);

    fn extract(&self, head: &RequestHead<'_>) -> Result<Self::Key, KeyError> {
        #[cfg(feature = "axum")]
        if let Some(matched) = head.extensions.get::<axum::extract::MatchedPath>() {
            return Ok((matched.as_str().to_owned(), self.0.extract(head)?));
        }
        Ok((head.uri.path().to_owned(), self.0.extract(head)?))
    }
}

/// A key from a closure over the request's head; `None` is a missing key.
///
/// ```
/// use slidegate::http::key::{FromFn, RequestHead};
///
/// // The tenant, from the host name: `acme.example.com` → "acme".
/// let tenant = FromFn::new(|head: &RequestHead<'_>| {
///     let host = head.headers.get(http::header::HOST)?.to_str().ok()?;
///     Some(host.split('.').next()?.to_owned())
/// });
/// ```
pub struct FromFn<F>(F);

impl<F> FromFn<F> {
    /// The key `f` finds.
    pub fn new(f: F) -> Self {
        FromFn(f)
    }
}

impl<F> fmt::Debug for FromFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FromFn")
    }
}

impl<F, K> KeyExtractor for FromFn<F>
where
    F: Fn(&RequestHead<'_>) -> Option<K> + Send + Sync + 'static,
    K: Send + Sync + 'static,
{
    type Key = K;

    fn extract(&self, head: &RequestHead<'_>) -> Result<K, KeyError> {
        (self.0)(head).ok_or(KeyError::NotFound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn parts(peer: Option<&str>, headers: &[(&str, &str)]) -> Parts {
        let mut b = Request::builder();
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let (mut parts, ()) = b.body(()).unwrap().into_parts();
        if let Some(p) = peer {
            parts.extensions.insert(p.parse::<SocketAddr>().unwrap());
        }
        parts
    }

    #[test]
    fn client_ip_defaults_to_the_peer_and_ignores_headers() {
        let p = parts(
            Some("198.51.100.1:4000"),
            &[("x-forwarded-for", "203.0.113.9")],
        );
        assert_eq!(
            ClientIp::new().extract(&(&p).into()),
            Ok("198.51.100.1".parse().unwrap())
        );
        let p = parts(None, &[]);
        assert_eq!(
            ClientIp::new().extract(&(&p).into()),
            Err(KeyError::NoPeerAddress)
        );
    }

    #[test]
    fn client_ip_behind_proxies() {
        let key = ClientIp::new()
            .behind_proxies(ProxyHeader::Forwarded, ["127.0.0.1", "10.0.0.0/8"])
            .unwrap();
        let p = parts(
            Some("127.0.0.1:1"),
            &[("forwarded", "for=\"[2001:db8::7:1]:80\"")],
        );
        assert_eq!(key.extract(&(&p).into()), Ok("2001:db8::".parse().unwrap()));
        let key = key.ipv6_prefix(128);
        assert_eq!(
            key.extract(&(&p).into()),
            Ok("2001:db8::7:1".parse().unwrap())
        );
        assert_eq!(
            ClientIp::new()
                .behind_proxies(ProxyHeader::Forwarded, ["10.0.0.0/33"])
                .unwrap_err(),
            ProxyListError("10.0.0.0/33".into())
        );
    }

    #[test]
    fn header_extension_route_closure() {
        let mut p = parts(None, &[("x-api-key", "k1")]);
        assert_eq!(
            Header::new("x-api-key").extract(&(&p).into()),
            Ok(HeaderValue::from_static("k1"))
        );
        assert_eq!(
            Header::new("x-other").extract(&(&p).into()),
            Err(KeyError::MissingHeader(HeaderName::from_static("x-other")))
        );
        assert!(matches!(
            Extension::<u32>::new().extract(&(&p).into()),
            Err(KeyError::MissingExtension(_))
        ));
        p.extensions.insert(7u32);
        assert_eq!(Extension::<u32>::new().extract(&(&p).into()), Ok(7));
        assert_eq!(
            Route::new(Global).extract(&(&p).into()),
            Ok(("/".to_owned(), ()))
        );
        let f = FromFn::new(|h: &RequestHead<'_>| h.headers.get("x-api-key").map(|v| v.len()));
        assert_eq!(f.extract(&(&p).into()), Ok(2));
        assert_eq!(
            FromFn::new(|_: &RequestHead<'_>| None::<u8>).extract(&(&p).into()),
            Err(KeyError::NotFound)
        );
    }
}
