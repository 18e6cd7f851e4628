//! The header fields for decisions made outside a [`RateLimitLayer`](super::RateLimitLayer):
//! a decision service answering for another server (`slidegate serve`), or a handler that
//! checks a limiter itself. The same syntax and rounding as the layer's (see the module
//! `headers` and `docs/http.md`): `RateLimit-Policy` and `RateLimit` as Structured Field
//! Lists of draft-ietf-httpapi-ratelimit-headers-11, durations in whole seconds rounded up.
//!
//! ```
//! use slidegate::http::fields::{Fields, PolicyName};
//! use std::time::Duration;
//!
//! let name = PolicyName::new("per-user")?;
//! let mut fields = Fields::new();
//! fields.policy(&name, 100, Duration::from_secs(60));
//! fields.limit(&name, 99, Duration::from_millis(59_500));
//! let (policy, limit) = fields.into_values();
//! assert_eq!(policy.unwrap(), "\"per-user\";q=100;w=60");
//! assert_eq!(limit.unwrap(), "\"per-user\";r=99;t=60");
//! # Ok::<(), slidegate::http::PolicyNameError>(())
//! ```

use core::time::Duration;

use http::HeaderValue;

use super::PolicyNameError;
use super::headers::{self, FieldBuf};

/// A policy's name as a Structured Field String, checked once (printable ASCII only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyName(String);

impl PolicyName {
    /// `name`, quoted and escaped; an error if it holds other than printable ASCII.
    pub fn new(name: &str) -> Result<PolicyName, PolicyNameError> {
        headers::sf_string(name)
            .map(PolicyName)
            .map_err(PolicyNameError)
    }
}

/// The values of `RateLimit-Policy` and `RateLimit`, built item by item on the stack (the
/// layer's builder): each value is copied into its `HeaderValue` once.
#[derive(Clone, Debug, Default)]
pub struct Fields {
    policy: FieldBuf,
    limit: FieldBuf,
}

impl Fields {
    /// No items yet.
    pub fn new() -> Fields {
        Fields::default()
    }

    /// Appends `name;q=limit;w=window` to `RateLimit-Policy` (`w` in seconds, rounded up,
    /// at least 1).
    pub fn policy(&mut self, name: &PolicyName, limit: u64, window: Duration) -> &mut Fields {
        headers::push_policy_item(&mut self.policy, &name.0, limit, window, None);
        self
    }

    /// Appends `name;r=remaining;t=reset` to `RateLimit` (`t` in seconds, rounded up).
    pub fn limit(&mut self, name: &PolicyName, remaining: u64, reset: Duration) -> &mut Fields {
        headers::push_limit_item(&mut self.limit, &name.0, remaining, reset, None);
        self
    }

    /// The `RateLimit-Policy` and `RateLimit` values; `None` for a field with no item.
    pub fn into_values(self) -> (Option<HeaderValue>, Option<HeaderValue>) {
        (self.policy.value(), self.limit.value())
    }
}

/// A `RateLimit` value of one item, `name;r=remaining;t=reset`: what [`Fields::limit`] writes
/// for a single policy, without building the `RateLimit-Policy` buffer beside it (a decision
/// service answering for one rule writes this on every request).
///
/// ```
/// use std::time::Duration;
/// use slidegate::http::fields::{Fields, PolicyName, limit_item};
///
/// let name = PolicyName::new("per-user").unwrap();
/// let one = limit_item(&name, 4, Duration::from_millis(1500)).unwrap();
/// assert_eq!(one, "\"per-user\";r=4;t=2");
/// let mut fields = Fields::new();
/// fields.limit(&name, 4, Duration::from_millis(1500));
/// assert_eq!(Some(one), fields.into_values().1);
/// ```
pub fn limit_item(name: &PolicyName, remaining: u64, reset: Duration) -> Option<HeaderValue> {
    let mut out = FieldBuf::new();
    headers::push_limit_item(&mut out, &name.0, remaining, reset, None);
    out.value()
}

/// [`limit_item`]'s bytes written at the start of `out`, for a caller that keeps the value
/// beside other bytes of one allocation: their length, or `None` if `out` is too short. They
/// are visible ASCII only, bytes any `HeaderValue` may hold.
///
/// ```
/// use std::time::Duration;
/// use slidegate::http::fields::{PolicyName, limit_item, write_limit_item};
///
/// let name = PolicyName::new("per-user").unwrap();
/// let mut out = [0; 64];
/// let n = write_limit_item(&mut out, &name, 4, Duration::from_millis(1500)).unwrap();
/// assert_eq!(&out[..n], limit_item(&name, 4, Duration::from_millis(1500)).unwrap().as_bytes());
/// assert_eq!(write_limit_item(&mut out[..n - 1], &name, 4, Duration::from_millis(1500)), None);
/// ```
pub fn write_limit_item(
    out: &mut [u8],
    name: &PolicyName,
    remaining: u64,
    reset: Duration,
) -> Option<usize> {
    let mut item = FieldBuf::new();
    headers::push_limit_item(&mut item, &name.0, remaining, reset, None);
    let bytes = item.as_bytes();
    out.get_mut(..bytes.len())?.copy_from_slice(bytes);
    Some(bytes.len())
}

/// `Retry-After` for a wait: delay-seconds, rounded up, so a client that waits it is never
/// early.
pub fn retry_after(wait: Duration) -> HeaderValue {
    headers::retry_after(wait)
}
