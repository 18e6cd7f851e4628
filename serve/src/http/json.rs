//! The JSON answers: a decision written straight into one buffer (the fast path, held to
//! serde's output by the tests), and errors and other bodies through serde.

use std::cell::Cell;

use axum::body::{Body, Bytes};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use serde::Serialize;
use slidegate::http::fields::{limit_item, write_limit_item};
use slidegate::http::{RATELIMIT, RATELIMIT_POLICY};

use crate::engine::{Outcome, Rule, RuleSet, Status};
use crate::headers;
use crate::wire::ceil_ms;

/// A JSON error: `{"error": message, "field": field}`.
pub(super) fn error(status: StatusCode, field: &str, message: &str) -> Response {
    #[derive(Serialize)]
    struct Error<'a> {
        error: &'a str,
        #[serde(skip_serializing_if = "str::is_empty")]
        field: &'a str,
    }
    json(
        status,
        &Error {
            error: message,
            field,
        },
    )
}

pub(super) fn json(status: StatusCode, value: &impl Serialize) -> Response {
    json_body(status, serde_json::to_vec(value).unwrap_or_default())
}

/// A response of JSON already written.
#[inline]
pub(super) fn json_body(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut res = Response::new(body.into());
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

/// Writes the JSON of a decision (docs/serve.md lists its fields) into `out`, byte for byte
/// what serde_json writes of the same answer (a test holds it to that), without a value per
/// field: the integers by `itoa`, each rule's constant part (`"rule":…,"limit":…,
/// "window_ms":…`) built once with the rules. Through serde, the answer cost more
/// instructions than the decision it reports.
#[inline]
pub(super) fn write_reply(out: &mut impl Out, set: &RuleSet, o: &Outcome) {
    // The common answer, admitted by one rule: its head written with the rule.
    if let ([s], true) = (&o.statuses[..], o.allowed)
        && let Some(rule) = &s.rule
    {
        let r = rule.get(set);
        out.put(r.wire.json_admitted.as_bytes());
        write_status_rest(out, r, s);
        out.put(b"]}");
        return;
    }
    out.put(if o.allowed {
        &br#"{"allowed":true,"code":"OK""#[..]
    } else {
        &br#"{"allowed":false,"code":"OVER_LIMIT""#[..]
    });
    if let Some(wait) = o.retry_after.filter(|_| !o.allowed) {
        put_u64(out, br#","retry_after_ms":"#, ceil_ms(wait));
    }
    out.put(br#","statuses":["#);
    for (i, s) in o.statuses.iter().enumerate() {
        if i > 0 {
            out.put(b",");
        }
        let Some(rule) = &s.rule else {
            out.put(br#"{"code":"OK","rule":null}"#);
            continue;
        };
        let r = rule.get(set);
        out.put(if s.over {
            &br#"{"code":"OVER_LIMIT","#[..]
        } else {
            &br#"{"code":"OK","#[..]
        });
        out.put(r.wire.json.as_bytes());
        write_status_rest(out, r, s);
    }
    out.put(b"]}");
}

/// A status after its rule's constant part: the figures, the flags, the closing brace.
#[inline]
pub(super) fn write_status_rest(out: &mut impl Out, r: &Rule, s: &Status) {
    put_u64(out, br#","remaining":"#, s.remaining);
    put_u64(out, br#","reset_after_ms":"#, ceil_ms(s.reset_after));
    if let Some(wait) = s.retry_after.filter(|_| s.over) {
        put_u64(out, br#","retry_after_ms":"#, ceil_ms(wait));
    }
    if r.spec.shadow {
        out.put(br#","shadow":true"#);
    }
    if s.shadow_over {
        out.put(br#","would_deny":true"#);
    }
    out.put(b"}");
}

/// Where [`write_reply`] writes: a `Vec` (a batch, an answer too wide for an [`AnswerBuf`]), or
/// an [`AnswerBuf`] with room for it.
pub(super) trait Out {
    fn put(&mut self, bytes: &[u8]);
}

impl Out for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Room for the JSON answer and the `RateLimit` value of an [`AnswerBuf`]; the answers of the
/// rules in `serve/examples/` take less than 250 bytes.
pub(super) const ANSWER_ROOM: usize = 384;

/// The JSON answer and its `RateLimit` value side by side, which become one allocation
/// (`Bytes::from_owner`) of which the body and the field's value are two slices: one
/// allocation and one free per answer where a `Bytes` for each took two, and no per-thread
/// buffer to copy the answer from.
pub(super) struct AnswerBuf {
    len: usize,
    buf: [u8; ANSWER_ROOM],
}

impl Out for AnswerBuf {
    /// Past the room it panics; [`answer`] writes only answers `reply_capacity` says fit.
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        self.buf[self.len..end].copy_from_slice(bytes);
        self.len = end;
    }
}

impl AsRef<[u8]> for AnswerBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The answer to `o`: its JSON body and its `RateLimit-Policy`, `RateLimit` and
/// `Retry-After` fields. The common answer, with one rule, is one [`AnswerBuf`]; any other is
/// the JSON in its own allocation and the fields of [`headers::fields`].
#[inline]
pub(super) fn answer(set: &RuleSet, o: &Outcome) -> Response {
    let status = if o.allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let Some((s, r)) = o
        .single(set)
        .filter(|_| reply_capacity(set, o) <= ANSWER_ROOM)
    else {
        let [policy, limit, retry] = headers::fields(o, set);
        return with_fields(json_body(status, reply(set, o)), policy, limit, retry);
    };
    let mut a = AnswerBuf {
        len: 0,
        buf: [0; ANSWER_ROOM],
    };
    write_reply(&mut a, set, o);
    let json = a.len;
    let limit = o.in_limit(s);
    let item = limit
        .then(|| {
            write_limit_item(
                &mut a.buf[json..],
                &r.wire.field,
                s.remaining,
                o.reset_of(s),
            )
        })
        .flatten();
    if let Some(n) = item {
        a.len += n;
    }
    let mut body = Bytes::from_owner(a);
    let value = match item {
        Some(_) => {
            let value = body.split_off(json);
            // SAFETY: `write_limit_item` writes visible ASCII only, bytes a field value may
            // hold.
            Some(unsafe { HeaderValue::from_maybe_shared_unchecked(value) })
        }
        // A name too long for the room left: the item in its own allocation.
        None if limit => limit_item(&r.wire.field, s.remaining, o.reset_of(s)),
        None => None,
    };
    with_fields(
        json_body(status, body),
        Some(r.wire.policy.clone()),
        value,
        headers::retry_field(o),
    )
}

/// `res` with the fields that are present of `RateLimit-Policy`, `RateLimit` and
/// `Retry-After`.
#[inline]
pub(super) fn with_fields(
    mut res: Response,
    policy: Option<HeaderValue>,
    limit: Option<HeaderValue>,
    retry: Option<HeaderValue>,
) -> Response {
    let h = res.headers_mut();
    if let Some(v) = policy {
        h.insert(RATELIMIT_POLICY, v);
    }
    if let Some(v) = limit {
        h.insert(RATELIMIT, v);
    }
    if let Some(v) = retry {
        h.insert(RETRY_AFTER, v);
    }
    res
}

/// The JSON of `o`, in one allocation of its length: written in a per-thread buffer and
/// copied out, where a `Vec` sized for the widest answer becomes `Bytes` with a second
/// allocation (its length short of its capacity).
pub(super) fn reply(set: &RuleSet, o: &Outcome) -> Bytes {
    thread_local! {
        static BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    }
    BUFFER.with(|cell| {
        let mut buf = cell.take();
        buf.clear();
        buf.reserve(reply_capacity(set, o));
        write_reply(&mut buf, set, o);
        let body = Bytes::copy_from_slice(&buf);
        cell.set(buf);
        body
    })
}

/// Room for the JSON of `o`, so `write_reply` writes it without growing the buffer.
#[inline]
pub(super) fn reply_capacity(set: &RuleSet, o: &Outcome) -> usize {
    // The widest status less its rule's part: a code, three numbers of at most 20 digits
    // with their names, the two flags.
    const STATUS: usize = 160;
    64 + o
        .statuses
        .iter()
        .map(|s| STATUS + s.rule.as_ref().map_or(0, |w| w.get(set).wire.json.len()))
        .sum::<usize>()
}

/// `name` and `value`'s digits.
#[inline]
pub(super) fn put_u64(out: &mut impl Out, name: &[u8], value: u64) {
    out.put(name);
    out.put(itoa::Buffer::new().format(value).as_bytes());
}
