//! What the APIs write of a rule, made once when the rule is made: its name as a header field
//! carries it, its `RateLimit-Policy` item, and its parts of a JSON answer. The engine keeps
//! one beside each rule without reading it, so an answer copies these instead of building
//! them per request, and the engine names no header or JSON type.

use std::time::Duration;

use axum::http::HeaderValue;
use slidegate::http::fields::{Fields, PolicyName};

use crate::rules::RuleSpec;

/// A rule as the answers write it.
pub(crate) struct RuleWire {
    /// Its name as a header-field String.
    pub(crate) field: PolicyName,
    /// Its `RateLimit-Policy` item, for the common answer that names one rule.
    pub(crate) policy: HeaderValue,
    /// Its constant part of a status in the JSON answer, `"rule":…,"limit":…,"window_ms":…`.
    pub(crate) json: Box<str>,
    /// The JSON answer up to `"remaining":` when it admits with this rule alone.
    pub(crate) json_admitted: Box<str>,
}

impl RuleWire {
    pub(crate) fn new(spec: &RuleSpec) -> Result<RuleWire, String> {
        let field = PolicyName::new(&header_name(&spec.display)).map_err(|e| e.to_string())?;
        let mut one = Fields::new();
        one.policy(&field, spec.quota.limit(), spec.quota.window());
        let policy = one.into_values().0.ok_or("an empty RateLimit-Policy")?;
        let json = format!(
            r#""rule":{},"limit":{},"window_ms":{}"#,
            serde_json::to_string(&spec.display).map_err(|e| e.to_string())?,
            spec.quota.limit(),
            ceil_ms(spec.quota.window()),
        );
        let json_admitted =
            format!(r#"{{"allowed":true,"code":"OK","statuses":[{{"code":"OK",{json}"#);
        Ok(RuleWire {
            field,
            policy,
            json: json.into(),
            json_admitted: json_admitted.into(),
        })
    }
}

/// A name as a header field can carry it: bytes outside printable ASCII percent-encoded.
fn header_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if (b' '..=b'~').contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Milliseconds, rounded up: a client told to wait this long is never early.
#[inline]
pub(crate) fn ceil_ms(d: Duration) -> u64 {
    // In u64s: through `as_nanos`, a u128 division per figure of the answer.
    let ms = u64::from(d.subsec_nanos().div_ceil(1_000_000));
    d.as_secs()
        .checked_mul(1000)
        .and_then(|s| s.checked_add(ms))
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_round_up() {
        let reference =
            |d: Duration| u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
        let top = u64::MAX / 1000;
        for (secs, nanos) in [
            (0, 0),
            (0, 1),
            (0, 999_999),
            (0, 1_000_000),
            (0, 1_000_001),
            (1, 500_000_000),
            (3600, 999_999_999),
            (top, 0),
            (top, 615_000_000),
            (top, 615_000_001),
            (top, 999_999_999),
            (top + 1, 0),
            (u64::MAX, 999_999_999),
        ] {
            let d = Duration::new(secs, nanos);
            assert_eq!(ceil_ms(d), reference(d), "{d:?}");
        }
    }
    use slidegate::Quota;
    use slidegate::http::fields::limit_item;

    #[test]
    fn a_single_rules_ratelimit_item_is_the_librarys() {
        // Names as YAML's `rate_limit.name` may give them: quotes, a backslash, a character
        // outside ASCII (percent-encoded), and one longer than the builder's stack buffer.
        let long = "y".repeat(200);
        let names = ["per-user", r#"a "quoted" \ name"#, "caf\u{e9}", &long];
        let remainings = [
            0,
            1,
            9,
            10,
            999_999_999_999_999,
            1_000_000_000_000_000,
            u64::MAX,
        ];
        let resets = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_secs(1),
            Duration::from_millis(59_500),
            Duration::from_secs(3600),
            // The longest a decision reports: its times are u64 nanoseconds.
            Duration::from_nanos(u64::MAX),
        ];
        let quota = Quota::new(5, Duration::from_secs(10)).unwrap();
        let mut fast = 0;
        for name in names {
            let spec = RuleSpec {
                name: name.to_owned(),
                display: name.to_owned(),
                named: true,
                quota,
                shadow: false,
                replaces: Vec::new(),
            };
            let rule = RuleWire::new(&spec).unwrap();
            fast += 1;
            for remaining in remainings {
                for reset in resets {
                    let mut fields = Fields::new();
                    fields.limit(&rule.field, remaining, reset);
                    assert_eq!(
                        limit_item(&rule.field, remaining, reset).unwrap(),
                        fields.into_values().1.unwrap(),
                        "{name:?}, r = {remaining}, t = {reset:?}"
                    );
                }
            }
        }
        assert_eq!(fast, names.len());
    }
}
