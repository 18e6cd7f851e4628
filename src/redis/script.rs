//! The decision script (`limiter.lua`), its arguments and its reply, and the key layout.

use redis::cluster_routing::Slot;

use super::Error;
use crate::decision::Decision;
use crate::quota::{Mode, Quota};

/// The script: one call reads, decides and writes for one or several limits.
pub(crate) const SOURCE: &str = include_str!("limiter.lua");

/// The longest window the backend counts, in microseconds: `2⁴⁸` µs, about 8.9 years, so
/// that a time (µs since the epoch, about `2^50.6` today) plus a few windows stays below
/// `2⁵³`, where Lua's doubles stop being exact.
pub const MAX_WINDOW_MICROS: u64 = 1 << 48;

/// What the script does with each limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Check,
    Peek,
    Refund,
    Release,
    Lease,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Check => "check",
            Op::Peek => "peek",
            Op::Refund => "refund",
            Op::Release => "release",
            Op::Lease => "lease",
        }
    }
}

/// A quota as the script takes it: every duration in whole microseconds (the resolution of
/// the server's `TIME`), GCRA's interval `T = ⌈W / L⌉` as microseconds and nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) quota: Quota,
    mode: u8,
    window: u64,
    granularity: u64,
    buckets: u64,
    interval_us: u64,
    interval_ns: u64,
}

impl Shape {
    pub(crate) fn of(quota: Quota) -> Result<Shape, Error> {
        let w = quota.window_nanos();
        let g = quota.granularity_nanos();
        let mode = match quota.mode() {
            Mode::Strict => 0,
            Mode::Weighted => 1,
            Mode::FixedWindow => 2,
            Mode::ExactLog => 3,
            Mode::Gcra => 4,
        };
        if w % 1000 != 0 {
            return Err(Error::Quota(format!(
                "window {:?} is not a whole number of microseconds, the resolution of the server's TIME",
                quota.window()
            )));
        }
        if mode <= 2 && g % 1000 != 0 {
            return Err(Error::Quota(format!(
                "granularity {:?} is not a whole number of microseconds, the resolution of the server's TIME",
                quota.granularity()
            )));
        }
        if w / 1000 > MAX_WINDOW_MICROS {
            return Err(Error::Quota(format!(
                "window {:?} is longer than the {MAX_WINDOW_MICROS} µs (about 8.9 years) the backend counts exactly",
                quota.window()
            )));
        }
        let interval = w.div_ceil(quota.limit());
        Ok(Shape {
            quota,
            mode,
            window: w / 1000,
            granularity: g / 1000,
            buckets: quota.buckets(),
            interval_us: interval / 1000,
            interval_ns: interval % 1000,
        })
    }

    /// Whether leases can be taken on this quota: not on the exact log, whose units carry the
    /// time they were admitted at and so cannot be admitted later than they were counted.
    pub(crate) fn leases(&self) -> bool {
        self.mode != 3
    }
}

/// The Redis keys of one limiter key: the state hash and the sorted set, sharing a hash tag.
///
/// A key that carries a non-empty hash tag of its own (`"{tenant-7}:alice"`) keeps it, so that
/// keys a caller tags alike share a Cluster slot and can be checked together in one call:
/// `<prefix>t:<key>:h`. Any other key is wrapped whole in braces, `<prefix>{<key>}:h`, which
/// needs it non-empty and not starting with `}` (else the tag would be empty). The two forms
/// never meet (`t` against `{`), so distinct keys never share state.
pub(crate) fn keys(prefix: &str, key: &str) -> Result<(String, String), Error> {
    let base = if has_tag(key) {
        format!("{prefix}t:{key}")
    } else if key.is_empty() || key.starts_with('}') {
        return Err(Error::Key(format!(
            "a key must not be empty or start with '}}' unless it holds a hash tag, got {key:?}"
        )));
    } else {
        format!("{prefix}{{{key}}}")
    };
    Ok((format!("{base}:h"), format!("{base}:z")))
}

/// Redis Cluster's rule: the part between the first `{` and the first `}` after it, if
/// non-empty.
fn has_tag(key: &str) -> bool {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
}

/// The Cluster slot of a limiter key's state.
pub(crate) fn slot(redis_key: &str) -> Slot {
    Slot::for_key(redis_key)
}

/// One limit of a script call.
#[derive(Clone)]
pub(crate) struct Call<'a> {
    pub(crate) shape: &'a Shape,
    pub(crate) keys: (String, String),
    pub(crate) n: u64,
    /// Units to give back, and the ticket of the charge they came from.
    pub(crate) back: u64,
    pub(crate) ticket: Ticket,
    /// The least a lease must grant.
    pub(crate) need: u64,
}

/// Where a charge landed, for giving back part of it: the counter's bucket, the exact log's
/// admission time, GCRA's arrival time after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ticket {
    pub(crate) us: u64,
    pub(crate) ns: u64,
}

/// The script's arguments for `op` on `limits`, at `now_us` (`None`: the server's TIME).
pub(crate) struct Invocation {
    keys: Vec<String>,
    args: Vec<String>,
}

impl Invocation {
    pub(crate) fn new(op: Op, now_us: Option<u64>, ttl_slack_ms: u64, limits: &[Call<'_>]) -> Self {
        let mut keys = Vec::with_capacity(2 * limits.len());
        let mut args = Vec::with_capacity(3 + 12 * limits.len());
        args.push(op.name().to_owned());
        args.push(now_us.map(|t| t.to_string()).unwrap_or_default());
        args.push(ttl_slack_ms.to_string());
        for l in limits {
            let s = l.shape;
            keys.push(l.keys.0.clone());
            keys.push(l.keys.1.clone());
            for x in [
                u64::from(s.mode),
                s.quota.limit(),
                s.window,
                s.granularity,
                s.buckets,
                s.interval_us,
                s.interval_ns,
                l.n,
                l.back,
                l.ticket.us,
                l.ticket.ns,
                l.need,
            ] {
                args.push(x.to_string());
            }
        }
        Invocation { keys, args }
    }

    /// `EVALSHA sha …`, or `EVAL source …` without a hash.
    pub(crate) fn cmd(&self, sha: Option<&str>) -> redis::Cmd {
        let mut cmd = match sha {
            Some(sha) => {
                let mut c = redis::cmd("EVALSHA");
                c.arg(sha);
                c
            }
            None => {
                let mut c = redis::cmd("EVAL");
                c.arg(SOURCE);
                c
            }
        };
        cmd.arg(self.keys.len()).arg(&self.keys).arg(&self.args);
        cmd
    }
}

/// One limit's part of the reply.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outcome {
    pub(crate) decision: Decision,
    pub(crate) ticket: Ticket,
    /// Units freed (refund) or granted (lease).
    pub(crate) extra: u64,
    /// How long a lease may be used, µs (negative: as long as the caller likes).
    pub(crate) valid_us: i64,
}

const FIELDS: usize = 10;

/// Parses the reply for `shapes` (in call order): the time judged at, and each outcome.
pub(crate) fn parse(reply: &[i64], shapes: &[&Shape]) -> Result<(u64, Vec<Outcome>), Error> {
    if reply.len() != 1 + FIELDS * shapes.len() {
        return Err(Error::Reply(format!(
            "expected {} numbers from the script, got {}",
            1 + FIELDS * shapes.len(),
            reply.len()
        )));
    }
    let pos = |x: i64| u64::try_from(x).unwrap_or(0);
    let nanos = |us: i64, ns: i64| pos(us).saturating_mul(1000).saturating_add(pos(ns));
    let out = shapes
        .iter()
        .zip(reply[1..].chunks_exact(FIELDS))
        .map(|(s, f)| Outcome {
            decision: if f[0] == 1 {
                Decision::allowed(s.quota.limit(), pos(f[1]), nanos(f[4], f[5]))
            } else {
                Decision::denied(
                    s.quota.limit(),
                    pos(f[1]),
                    nanos(f[2], f[3]),
                    nanos(f[4], f[5]),
                )
            },
            ticket: Ticket {
                us: pos(f[6]),
                ns: pos(f[7]),
            },
            extra: pos(f[8]),
            valid_us: f[9],
        })
        .collect();
    Ok((pos(reply[0]), out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_a_tag() {
        let k = |key| keys("p:", key).unwrap();
        assert_eq!(k("alice").0, "p:{alice}:h");
        assert_eq!(k("{t7}:alice").1, "p:t:{t7}:alice:z");
        // "alice" and "{alice}" are different keys.
        assert_ne!(k("alice"), k("{alice}"));
        // No tag of its own (empty, or no closing brace): wrapped.
        assert_eq!(k("{}x").0, "p:{{}x}:h");
        assert_eq!(k("a{b").0, "p:{a{b}:h");
        for key in [
            "alice",
            "{t7}:alice",
            "{}x",
            "a{b",
            "a}b",
            "x}{",
            "{{}}",
            "x{}{y}",
        ] {
            let (h, z) = k(key);
            assert_eq!(slot(&h), slot(&z), "{key}");
        }
        assert!(keys("p:", "").is_err());
        assert!(keys("p:", "}{").is_err());
        // Tagged alike, one slot.
        assert_eq!(slot(&k("tenant7").0), slot(&k("{tenant7}:alice").0));
    }
}
