//! The body type the layer answers in: the inner service's own.

use bytes::Bytes;
use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
use http_body_util::{BodyExt, Either, Full};

/// A response body type the layer can write its own responses in (a denial, the status for
/// a missing key or a limiter that cannot decide).
///
/// The layer's responses have the inner service's body type, so an admitted request's
/// response passes through unchanged: axum, for one, boxes any other body type into its
/// `Body` on every response, an allocation and dynamic calls per request. Implemented for
/// axum's `Body` (feature `axum`), tonic's `Body` (feature `tonic`), [`Full<Bytes>`],
/// [`BoxBody`] and [`UnsyncBoxBody`] over [`Bytes`], and [`Either`] with such a body on the
/// right. A service whose body is none of these is answered in
/// `Either<its body, Full<Bytes>>` once its responses are mapped into `Either::Left`
/// (`tower::ServiceExt::map_response`).
pub trait DenialBody: Sized {
    /// A body holding `bytes`.
    fn from_bytes(bytes: Bytes) -> Self;
}

impl DenialBody for Full<Bytes> {
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes)
    }
}

impl<E: 'static> DenialBody for BoxBody<Bytes, E> {
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes).map_err(|never| match never {}).boxed()
    }
}

impl<E: 'static> DenialBody for UnsyncBoxBody<Bytes, E> {
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes)
            .map_err(|never| match never {})
            .boxed_unsync()
    }
}

impl<L, R: DenialBody> DenialBody for Either<L, R> {
    fn from_bytes(bytes: Bytes) -> Self {
        Either::Right(R::from_bytes(bytes))
    }
}

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl DenialBody for axum::body::Body {
    fn from_bytes(bytes: Bytes) -> Self {
        axum::body::Body::from(bytes)
    }
}

#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
impl DenialBody for tonic::body::Body {
    fn from_bytes(bytes: Bytes) -> Self {
        tonic::body::Body::new(Full::new(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::convert::Infallible;

    async fn bytes_of<B: BodyExt<Data = Bytes>>(body: B) -> Bytes
    where
        B::Error: core::fmt::Debug,
    {
        body.collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn every_body_type_holds_the_bytes_it_was_made_from() {
        let hello = || Bytes::from_static(b"hello");
        assert_eq!(bytes_of(Full::from_bytes(hello())).await, hello());
        let boxed = BoxBody::<Bytes, Infallible>::from_bytes(hello());
        assert_eq!(bytes_of(boxed).await, hello());
        let unsync = UnsyncBoxBody::<Bytes, std::io::Error>::from_bytes(hello());
        assert_eq!(bytes_of(unsync).await, hello());
        let either = Either::<http_body_util::Empty<Bytes>, Full<Bytes>>::from_bytes(hello());
        assert!(matches!(either, Either::Right(_)));
        assert_eq!(bytes_of(either).await, hello());
        #[cfg(feature = "axum")]
        assert_eq!(
            bytes_of(axum::body::Body::from_bytes(hello())).await,
            hello()
        );
        #[cfg(feature = "tonic")]
        assert_eq!(
            bytes_of(tonic::body::Body::from_bytes(hello())).await,
            hello()
        );
    }
}
