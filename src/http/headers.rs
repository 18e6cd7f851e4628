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

use base64::Engine;
use http::HeaderValue;

/// The largest Integer a Structured Field can carry (RFC 9651 §3.3.1).
pub(crate) const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

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

/// A Structured Field Byte Sequence: `:` base64 `:`.
pub(crate) fn push_byte_sequence(out: &mut String, bytes: &[u8]) {
    out.push(':');
    base64::engine::general_purpose::STANDARD.encode_string(bytes, out);
    out.push(':');
}

/// `;name=value`, digits written by hand: `write!` through `fmt` cost a tenth of the
/// layer's time per request.
fn push_integer(out: &mut String, name: &str, value: u64) {
    out.push(';');
    out.push_str(name);
    out.push('=');
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    let mut v = value.min(SF_INTEGER_MAX);
    loop {
        start -= 1;
        digits[start] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.push_str(core::str::from_utf8(&digits[start..]).unwrap_or_default());
}

/// One member of `RateLimit-Policy`: `"name";q=limit;w=window[;pk=:…:]`.
pub(crate) fn push_policy_item(
    out: &mut String,
    name: &str,
    limit: u64,
    window: Duration,
    pk: Option<&[u8]>,
) {
    if !out.is_empty() {
        out.push_str(", ");
    }
    out.push_str(name);
    push_integer(out, "q", limit);
    // `w` must be a positive integer of seconds: a sub-second window is written as 1 s,
    // which tells a client a stricter policy than the true one, never a looser.
    push_integer(out, "w", ceil_secs(window).max(1));
    if let Some(pk) = pk {
        out.push_str(";pk=");
        push_byte_sequence(out, pk);
    }
}

/// One member of `RateLimit`: `"name";r=remaining;t=seconds[;pk=:…:]`.
pub(crate) fn push_limit_item(
    out: &mut String,
    name: &str,
    remaining: u64,
    reset: Duration,
    pk: Option<&[u8]>,
) {
    if !out.is_empty() {
        out.push_str(", ");
    }
    out.push_str(name);
    push_integer(out, "r", remaining);
    push_integer(out, "t", ceil_secs(reset));
    if let Some(pk) = pk {
        out.push_str(";pk=");
        push_byte_sequence(out, pk);
    }
}

/// `Retry-After` in delay-seconds, rounded up.
pub(crate) fn retry_after(d: Duration) -> HeaderValue {
    HeaderValue::from(ceil_secs(d).min(SF_INTEGER_MAX))
}

/// The field value `write` builds, `None` if it writes nothing. Built in a per-thread scratch
/// string and copied out once: one allocation per field, where an owned `String` handed to
/// `Bytes` took two.
pub(crate) fn build(write: impl FnOnce(&mut String)) -> Option<HeaderValue> {
    thread_local! {
        static SCRATCH: core::cell::RefCell<String> = const { core::cell::RefCell::new(String::new()) };
    }
    SCRATCH.with(|scratch| {
        // A scratch already borrowed (`write` building another field) is not shared.
        let mut own = String::new();
        let mut borrowed = scratch.try_borrow_mut();
        let out = match &mut borrowed {
            Ok(s) => &mut **s,
            Err(_) => &mut own,
        };
        out.clear();
        write(out);
        // The builders above write visible ASCII only.
        (!out.is_empty())
            .then(|| HeaderValue::from_str(out).ok())
            .flatten()
    })
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

    #[test]
    fn items() {
        let mut s = String::new();
        push_policy_item(&mut s, "\"a\"", 100, Duration::from_secs(60), None);
        push_policy_item(&mut s, "\"b\"", 5, Duration::from_millis(500), Some(b"k1"));
        assert_eq!(s, "\"a\";q=100;w=60, \"b\";q=5;w=1;pk=:azE=:");
        let mut s = String::new();
        push_limit_item(&mut s, "\"a\"", u64::MAX, Duration::from_millis(1), None);
        assert_eq!(s, "\"a\";r=999999999999999;t=1");
    }

    /// Every field written parses as a Structured Field List with the same members.
    #[test]
    fn parses_as_structured_fields() {
        use sfv::{BareItem, ListEntry, Parser, SerializeValue};
        let mut s = String::new();
        let pk = [0, 255, 7];
        let name = sf_string("x \"y\"").unwrap();
        push_policy_item(&mut s, &name, 7, Duration::from_secs(3600), Some(&pk));
        push_limit_item(
            &mut s,
            &sf_string("z").unwrap(),
            3,
            Duration::from_millis(2500),
            None,
        );
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
