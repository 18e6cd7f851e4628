//! The `RateLimit-Policy`, `RateLimit` and `Retry-After` fields.
//!
//! Both rate-limit fields are Structured Field Lists (RFC 9651) of Items whose value is a
//! String naming the policy (draft-ietf-httpapi-ratelimit-headers-11, §3 and §4):
//!
//! ```text
//! RateLimit-Policy: "per-ip";q=100;w=60, "global";q=10000;w=1
//! RateLimit: "per-ip";r=99;t=60, "global";r=9999;t=1
//! ```
//!
//! Integers are at most 15 digits in a Structured Field, so larger values are written as
//! 999999999999999; every duration is written in whole seconds, rounded up.

use core::time::Duration;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue};

use crate::http::{RATELIMIT, RATELIMIT_POLICY};

/// A policy's fixed description: its name in the header fields and in metrics and traces.
/// Public in a private module, as the sealed traits that hand it out need.
#[derive(Clone, Debug)]
pub struct Meta {
    /// The name as written in the header fields: a Structured Field String.
    pub(crate) field: String,
    /// The name as given, for metrics and traces.
    pub(crate) name: Arc<str>,
}

/// The largest Integer a Structured Field can carry (RFC 9651 §3.3.1).
pub(crate) const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// The rate-limit header fields of one response (`Retry-After`, on denials only, is added
/// where the denial is built: an admitted request's future carries no room for it). Public
/// in this private module, since a variant of [`ResponseFuture`](super::ResponseFuture)
/// holds it.
#[derive(Default)]
pub struct Fields {
    pub(crate) policy: Option<HeaderValue>,
    pub(crate) limit: Option<HeaderValue>,
}

impl Fields {
    pub(crate) fn take(&mut self) -> Fields {
        core::mem::take(self)
    }

    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.policy.is_none() && self.limit.is_none()
    }

    pub(crate) fn add_to(self, headers: &mut HeaderMap) {
        if self.is_empty() {
            return;
        }
        // Appended, not inserted: a field another layer wrote stays, and lists split over
        // field lines are one list (RFC 9651 §3.1).
        if let Some(policy) = self.policy {
            headers.append(RATELIMIT_POLICY, policy);
        }
        if let Some(limit) = self.limit {
            headers.append(RATELIMIT, limit);
        }
    }
}

/// Whole seconds in `d`, rounded up: a client told to wait this long never comes back early.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `name` as a Structured Field String, or why it cannot be one (only printable ASCII).
pub(crate) fn sf_string(name: &str) -> Result<String, String> {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {
                return Err(format!(
                    "policy name {name:?} has {c:?}: a Structured Field String holds printable ASCII only"
                ));
            }
        }
    }
    out.push('"');
    Ok(out)
}

/// A field value built on the stack and copied into its `HeaderValue` once: one allocation
/// per field, no thread-local scratch (whose access and borrow flag cost as much as writing
/// the field). A value longer than the inline room (long policy names, partition keys)
/// moves to the heap. The one builder of every field the layer and [`super::fields`] write.
#[derive(Clone)]
pub(crate) struct FieldBuf {
    inline: [u8; 128],
    len: usize,
    heap: Vec<u8>,
}

impl FieldBuf {
    pub(crate) fn new() -> Self {
        FieldBuf {
            inline: [0; 128],
            len: 0,
            heap: Vec::new(),
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        if self.heap.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.heap
        }
    }

    /// The value written, `None` if nothing was.
    pub(crate) fn value(&self) -> Option<HeaderValue> {
        let bytes = self.as_bytes();
        if bytes.is_empty() {
            return None;
        }
        // `HeaderValue::from_bytes` would check every byte again (debug builds still do).
        // SAFETY: the builders write visible ASCII only (names through `sf_string`, which
        // refuses anything else; digits; `;`, `=`, `,`, `:` and spaces; base64), bytes a
        // field value may hold.
        Some(unsafe { HeaderValue::from_maybe_shared_unchecked(Bytes::copy_from_slice(bytes)) })
    }

    /// Appends `ascii` (the builders write visible ASCII only). The inline case is inlined
    /// into the builders, a constant's copy becoming a few moves; the move to the heap is
    /// out of line.
    #[inline(always)]
    fn put(&mut self, ascii: &[u8]) {
        if self.heap.is_empty() {
            let end = self.len + ascii.len();
            if let Some(room) = self.inline.get_mut(self.len..end) {
                room.copy_from_slice(ascii);
                self.len = end;
                return;
            }
        }
        self.put_on_heap(ascii);
    }

    /// [`FieldBuf::put`] past the inline room.
    #[cold]
    #[inline(never)]
    fn put_on_heap(&mut self, ascii: &[u8]) {
        if self.heap.is_empty() {
            self.heap.reserve(self.len + ascii.len());
            self.heap.extend_from_slice(&self.inline[..self.len]);
        }
        self.heap.extend_from_slice(ascii);
    }

    fn is_empty(&self) -> bool {
        self.len == 0 && self.heap.is_empty()
    }
}

impl Default for FieldBuf {
    fn default() -> Self {
        FieldBuf::new()
    }
}

impl core::fmt::Debug for FieldBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Visible ASCII only, so the bytes are their text.
        f.debug_tuple("FieldBuf")
            .field(&String::from_utf8_lossy(self.as_bytes()))
            .finish()
    }
}

/// A Structured Field Byte Sequence: `:` base64 `:`.
fn push_byte_sequence(out: &mut FieldBuf, bytes: &[u8]) {
    out.put(b":");
    out.put(
        base64::engine::general_purpose::STANDARD
            .encode(bytes)
            .as_bytes(),
    );
    out.put(b":");
}

/// `;name=value` (`key` is `;name=`), the digits by `itoa`: `write!` through `fmt` cost a
/// tenth of the layer's time per request. The key is a constant, so its copy is a few moves.
#[inline(always)]
fn push_integer(out: &mut FieldBuf, key: &[u8; 3], value: u64) {
    let mut digits = itoa::Buffer::new();
    out.put(key);
    out.put(digits.format(value.min(SF_INTEGER_MAX)).as_bytes());
}

/// One member of `RateLimit-Policy`: `"name";q=limit;w=window[;pk=:…:]`.
pub(crate) fn push_policy_item(
    out: &mut FieldBuf,
    name: &str,
    limit: u64,
    window: Duration,
    pk: Option<&[u8]>,
) {
    if !out.is_empty() {
        out.put(b", ");
    }
    out.put(name.as_bytes());
    push_integer(out, b";q=", limit);
    // `w` must be a positive integer of seconds: a sub-second window is written as 1 s,
    // which tells a client a stricter policy than the true one, never a looser.
    push_integer(out, b";w=", ceil_secs(window).max(1));
    if let Some(pk) = pk {
        out.put(b";pk=");
        push_byte_sequence(out, pk);
    }
}

/// One member of `RateLimit`: `"name";r=remaining;t=seconds[;pk=:…:]`.
pub(crate) fn push_limit_item(
    out: &mut FieldBuf,
    name: &str,
    remaining: u64,
    reset: Duration,
    pk: Option<&[u8]>,
) {
    if !out.is_empty() {
        out.put(b", ");
    }
    out.put(name.as_bytes());
    push_integer(out, b";r=", remaining);
    push_integer(out, b";t=", ceil_secs(reset));
    if let Some(pk) = pk {
        out.put(b";pk=");
        push_byte_sequence(out, pk);
    }
}

/// `Retry-After` in delay-seconds, rounded up.
pub(crate) fn retry_after(d: Duration) -> HeaderValue {
    HeaderValue::from(ceil_secs(d).min(SF_INTEGER_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(7)), 7);
        assert_eq!(ceil_secs(Duration::from_millis(7001)), 8);
        assert_eq!(retry_after(Duration::from_millis(1100)), "2");
        assert_eq!(retry_after(Duration::from_nanos(u64::MAX)), "18446744074");
    }

    #[test]
    fn strings() {
        assert_eq!(sf_string("per-ip").unwrap(), "\"per-ip\"");
        assert_eq!(sf_string("a \"b\" \\c").unwrap(), r#""a \"b\" \\c""#);
        assert!(
            sf_string("tab\there")
                .unwrap_err()
                .contains("printable ASCII")
        );
        assert!(sf_string("é").is_err());
    }

    /// The text a builder wrote.
    fn text(buf: &FieldBuf) -> String {
        String::from_utf8(buf.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn items() {
        let mut s = FieldBuf::new();
        push_policy_item(&mut s, "\"a\"", 100, Duration::from_secs(60), None);
        push_policy_item(&mut s, "\"b\"", 5, Duration::from_millis(500), Some(b"k1"));
        assert_eq!(text(&s), "\"a\";q=100;w=60, \"b\";q=5;w=1;pk=:azE=:");
        let mut s = FieldBuf::new();
        push_limit_item(&mut s, "\"a\"", u64::MAX, Duration::from_millis(1), None);
        assert_eq!(text(&s), "\"a\";r=999999999999999;t=1");
    }

    /// Across its move from the stack to the heap, the builder writes what a naive `format!`
    /// of the same items does.
    #[test]
    fn field_buf_across_its_inline_room() {
        for name_len in [1, 40, 126, 127, 128, 300] {
            let name = sf_string(&"n".repeat(name_len)).unwrap();
            let mut buf = FieldBuf::new();
            let mut expected = Vec::new();
            for i in 0..3u64 {
                let pk = (i == 1).then_some(&b"key"[..]);
                push_limit_item(&mut buf, &name, 7 * i, Duration::from_secs(i), pk);
                let pk_text = if pk.is_some() { ";pk=:a2V5:" } else { "" };
                expected.push(format!("{name};r={};t={i}{pk_text}", 7 * i));
                push_policy_item(&mut buf, &name, u64::MAX, Duration::from_secs(60), None);
                expected.push(format!("{name};q=999999999999999;w=60"));
            }
            assert_eq!(buf.value().unwrap(), expected.join(", ").as_str());
        }
        assert_eq!(FieldBuf::new().value(), None);
    }

    /// Every field written parses as a Structured Field List with the same members.
    #[test]
    fn parses_as_structured_fields() {
        use sfv::{BareItem, ListEntry, Parser, SerializeValue};
        let mut buf = FieldBuf::new();
        let pk = [0, 255, 7];
        let name = sf_string("x \"y\"").unwrap();
        push_policy_item(&mut buf, &name, 7, Duration::from_secs(3600), Some(&pk));
        push_limit_item(
            &mut buf,
            &sf_string("z").unwrap(),
            3,
            Duration::from_millis(2500),
            None,
        );
        let s = text(&buf);
        let list = Parser::new(&s).parse_list().unwrap();
        assert_eq!(list.len(), 2);
        let ListEntry::Item(first) = &list[0] else {
            panic!("not an item: {s}")
        };
        match &first.bare_item {
            BareItem::String(v) => assert_eq!(v.as_str(), "x \"y\""),
            other => panic!("not a string: {other:?}"),
        }
        let params: Vec<(&str, &BareItem)> =
            first.params.iter().map(|(k, v)| (k.as_str(), v)).collect();
        assert_eq!(params[0], ("q", &BareItem::Integer(sfv::integer(7))));
        assert_eq!(params[1], ("w", &BareItem::Integer(sfv::integer(3600))));
        assert_eq!(params[2], ("pk", &BareItem::ByteSequence(pk.to_vec())));
        // Serialised again by an independent implementation: byte for byte the same.
        assert_eq!(list.serialize_value().unwrap(), s);
    }
}
