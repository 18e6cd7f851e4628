//! The decision script (`limiter.lua`), its arguments and its reply, and the key layout.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use redis::cluster_routing::Slot;

use super::Error;
use crate::decision::Decision;
use crate::quota::{Mode, Quota};

/// The library's source: every rule, and the two entry points (`decide`, `all`).
pub(crate) const SOURCE: &str = include_str!("limiter.lua");

/// The longest window the backend counts, in microseconds: `2⁴⁸` µs, about 8.9 years, so
/// that a time (µs since the epoch, about `2^50.6` today) plus a few windows stays below
/// `2⁵³`, where Lua's doubles stop being exact.
pub const MAX_WINDOW_MICROS: u64 = 1 << 48;

/// The longest granularity of Strict with last-admission marks, in nanoseconds: the script
/// computes a mark's offsets in nanoseconds of a bucket, `G` plus a step of `⌈G / 254⌉` at
/// most, which must stay below `2⁵³` to be exact in Lua's doubles (about 104 days).
pub const MAX_MARKED_GRANULARITY_NANOS: u64 = (1 << 53) - 1000 * 254;

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
/// the server's `TIME`), GCRA's interval `T = ⌈W / L⌉` as microseconds and nanoseconds, and
/// the limiter's TTL slack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) quota: Quota,
    mode: u8,
    window: u64,
    granularity: u64,
    buckets: u64,
    interval_us: u64,
    interval_ns: u64,
    slack_ms: u64,
    /// The eight numbers as `decide` takes them ([`Shape::text`]), made once: formatting them
    /// for every call was a visible share of a lone check's client-side work (`benches/redis.rs`).
    text: Arc<str>,
}

impl Shape {
    pub(crate) fn of(quota: Quota, slack_ms: u64) -> Result<Shape, Error> {
        let w = quota.window_nanos();
        let g = quota.granularity_nanos();
        let mode = match quota.mode() {
            Mode::Strict => 0,
            Mode::Weighted => 1,
            Mode::FixedWindow => 2,
            Mode::ExactLog => 3,
            Mode::Gcra => 4,
            Mode::StrictMarked => 5,
        };
        if w % 1000 != 0 {
            return Err(Error::Quota(format!(
                "window {:?} is not a whole number of microseconds, the resolution of the server's TIME",
                quota.window()
            )));
        }
        if (mode <= 2 || mode == 5) && g % 1000 != 0 {
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
        if mode == 5 && g > MAX_MARKED_GRANULARITY_NANOS {
            return Err(Error::Quota(format!(
                "granularity {:?} is longer than the {MAX_MARKED_GRANULARITY_NANOS} ns (about 104 days) the backend keeps last-admission marks of exactly",
                quota.granularity()
            )));
        }
        let interval = w.div_ceil(quota.limit());
        let mut shape = Shape {
            quota,
            mode,
            window: w / 1000,
            granularity: g / 1000,
            buckets: quota.buckets(),
            interval_us: interval / 1000,
            interval_ns: interval % 1000,
            slack_ms,
            text: Arc::from(""),
        };
        let [a, b, c, d, e, f, g, h] = shape.numbers();
        shape.text = format!("{a} {b} {c} {d} {e} {f} {g} {h}").into();
        Ok(shape)
    }

    /// The eight numbers the script takes for a quota (see `limiter.lua`).
    fn numbers(&self) -> [u64; 8] {
        [
            u64::from(self.mode),
            self.quota.limit(),
            self.window,
            self.granularity,
            self.buckets,
            self.interval_us,
            self.interval_ns,
            self.slack_ms,
        ]
    }

    /// The eight numbers as one text, space-separated: `decide` keeps the quotas it has
    /// parsed by this text.
    fn text(&self) -> Arc<str> {
        self.text.clone()
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
    // Built by hand: through `format!` the two names were a visible share of a lone check's
    // client-side work (`benches/redis.rs`).
    let (open, close) = if has_tag(key) {
        ("t:", "")
    } else if key.is_empty() || key.starts_with('}') {
        return Err(Error::Key(format!(
            "a key must not be empty or start with '}}' unless it holds a hash tag, got {key:?}"
        )));
    } else {
        ("{", "}")
    };
    let mut h = String::with_capacity(prefix.len() + open.len() + key.len() + close.len() + 2);
    h.push_str(prefix);
    h.push_str(open);
    h.push_str(key);
    h.push_str(close);
    let mut z = h.clone();
    h.push_str(":h");
    z.push_str(":z");
    Ok((h, z))
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

/// One limit of an `all` call.
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

/// One decision of a `decide` call: a check of cost `n` on one key, or a peek (`n` = 0,
/// judging a cost of 1), at `at_us` (`None`: the server's TIME).
#[derive(Clone)]
pub(crate) struct Single<'a> {
    pub(crate) shape: &'a Shape,
    /// Moved into the call (the batch's requests need them no more).
    pub(crate) keys: (String, String),
    pub(crate) n: u64,
    pub(crate) at_us: Option<u64>,
}

/// The library's two entry points (see `limiter.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A batch of independent single-key decisions.
    Decide,
    /// Several limits at once, and the operations other than check and peek.
    All,
}

/// The library as the server takes it, in both forms: a Redis 7 function library, and two
/// scripts for `EVALSHA` on servers without functions. Its names carry a digest of the
/// source, so processes of different versions sharing a server never call each other's.
pub(crate) struct Library {
    /// `FUNCTION LOAD`'s argument.
    pub(crate) source: String,
    decide: String,
    all: String,
    eval_decide: Eval,
    eval_all: Eval,
}

/// A script for `EVAL`, and its digest for `EVALSHA`.
struct Eval {
    source: String,
    sha: String,
}

impl Eval {
    fn new(source: String) -> Eval {
        let sha = redis::Script::new(&source).get_hash().to_owned();
        Eval { source, sha }
    }
}

impl Library {
    pub(crate) fn get() -> &'static Library {
        static LIBRARY: OnceLock<Library> = OnceLock::new();
        LIBRARY.get_or_init(|| {
            let digest = redis::Script::new(SOURCE).get_hash().to_owned();
            let name = format!("slidegate_{}", &digest[..16]);
            let (decide, all) = (format!("{name}_decide"), format!("{name}_all"));
            Library {
                source: format!(
                    "#!lua name={name}\n{SOURCE}\nredis.register_function('{decide}', decide)\n\
                     redis.register_function('{all}', all)\n"
                ),
                decide,
                all,
                eval_decide: Eval::new(format!("{SOURCE}\nreturn decide(KEYS, ARGV)\n")),
                eval_all: Eval::new(format!("{SOURCE}\nreturn all(KEYS, ARGV)\n")),
            }
        })
    }

    /// `FCALL name keys… args…`.
    pub(crate) fn fcall(&self, entry: Entry, inv: &Invocation) -> redis::Cmd {
        let mut c = redis::cmd("FCALL");
        c.arg(match entry {
            Entry::Decide => &self.decide,
            Entry::All => &self.all,
        });
        inv.append(&mut c);
        c
    }

    /// `EVALSHA sha …`, or `EVAL source …` when `cached` is false.
    pub(crate) fn eval(&self, entry: Entry, inv: &Invocation, cached: bool) -> redis::Cmd {
        let script = match entry {
            Entry::Decide => &self.eval_decide,
            Entry::All => &self.eval_all,
        };
        let mut c;
        if cached {
            c = redis::cmd("EVALSHA");
            c.arg(&script.sha);
        } else {
            c = redis::cmd("EVAL");
            c.arg(&script.source);
        }
        inv.append(&mut c);
        c
    }
}

/// One argument: a number, or text.
#[derive(Clone, Debug)]
pub(crate) enum Arg {
    Num(u64),
    Text(&'static str),
    Shared(Arc<str>),
}

impl redis::ToRedisArgs for Arg {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + redis::RedisWrite,
    {
        match self {
            Arg::Num(n) => n.write_redis_args(out),
            Arg::Text(t) => t.write_redis_args(out),
            Arg::Shared(t) => t.as_bytes().write_redis_args(out),
        }
    }
}

/// The keys and arguments of one call, for whichever form the server takes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Invocation {
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<Arg>,
}

impl Invocation {
    fn append(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.keys.len()).arg(&self.keys).arg(&self.args);
    }

    /// A quota's eight numbers (see `limiter.lua`).
    pub(crate) fn push_shape(&mut self, s: &Shape) {
        self.args.extend(s.numbers().map(Arg::Num));
    }

    /// `decide`'s keys and arguments for `items`, in order: each distinct key once, each
    /// distinct quota once, and per decision one number packing its cost, quota and key
    /// (see `limiter.lua`), followed by its time when it has one. At most
    /// [`DECIDE_MAX`] decisions.
    pub(crate) fn decide<'a>(items: impl ExactSizeIterator<Item = Single<'a>>) -> Self {
        debug_assert!(items.len() <= DECIDE_MAX);
        let items: Vec<Single<'a>> = items.collect();
        let mut shapes: Vec<&Shape> = Vec::new();
        let mut entries = Vec::with_capacity(items.len());
        // Whether each item's key is met for the first time (its keys are then sent).
        let mut first = Vec::with_capacity(items.len());
        {
            // Fixed seeds: a call's map holds at most DECIDE_MAX keys of its own callers,
            // and SipHash cost a lone check more.
            let mut keys: HashMap<&str, u64, ahash::RandomState> =
                HashMap::with_capacity_and_hasher(
                    items.len(),
                    ahash::RandomState::with_seeds(1, 2, 3, 4),
                );
            for it in &items {
                let q = match shapes.iter().position(|s| *s == it.shape) {
                    Some(i) => i as u64,
                    None => {
                        shapes.push(it.shape);
                        shapes.len() as u64 - 1
                    }
                };
                let next = keys.len() as u64;
                let k = *keys.entry(&it.keys.0).or_insert(next);
                first.push(k == next);
                // n ≤ MAX_LIMIT < 2³¹: the packed number stays below 2⁵², exact in Lua.
                let packed = ((it.n * 1024 + q) * 1024 + k) * 2 + u64::from(it.at_us.is_some());
                entries.push(Arg::Num(packed));
                if let Some(t) = it.at_us {
                    entries.push(Arg::Num(t));
                }
            }
        }
        let mut inv = Invocation {
            keys: Vec::with_capacity(2 * items.len()),
            args: Vec::with_capacity(1 + shapes.len() + entries.len()),
        };
        inv.args.push(Arg::Num(shapes.len() as u64));
        for s in shapes {
            inv.args.push(Arg::Shared(s.text()));
        }
        inv.args.extend(entries);
        // Moved, not copied: the requests need their keys no more.
        for (it, first) in items.into_iter().zip(first) {
            if first {
                inv.keys.push(it.keys.0);
                inv.keys.push(it.keys.1);
            }
        }
        inv
    }

    /// `all`'s arguments for `op` on `limits`, at `now_us` (`None`: the server's TIME).
    pub(crate) fn all(op: Op, now_us: Option<u64>, limits: &[Call<'_>]) -> Self {
        let mut inv = Invocation {
            keys: Vec::with_capacity(2 * limits.len()),
            args: Vec::with_capacity(2 + 13 * limits.len()),
        };
        inv.args.push(Arg::Text(op.name()));
        inv.args.push(now_us.map_or(Arg::Text(""), Arg::Num));
        for l in limits {
            inv.keys.push(l.keys.0.clone());
            inv.keys.push(l.keys.1.clone());
            inv.push_shape(l.shape);
            inv.args
                .extend([l.n, l.back, l.ticket.us, l.ticket.ns, l.need].map(Arg::Num));
        }
        inv
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
    let out = shapes
        .iter()
        .zip(reply[1..].chunks_exact(FIELDS))
        .map(|(s, f)| Outcome {
            decision: decision(s.quota.limit(), f),
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

/// The most decisions one `decide` call carries: its keys and quotas are numbered in 10 bits
/// of a packed argument.
pub(crate) const DECIDE_MAX: usize = 1024;

/// Parses `decide`'s reply for decisions on quotas of `limits` (in call order): each
/// decision and the time it was judged at (µs). Per decision: a head (remaining·8 + 1 if
/// allowed, + 2 if a time follows, + 4 if the reset's nanoseconds follow), the time if
/// it changed, the reset's µs (and ns), and when denied the retry's µs and ns.
pub(crate) fn parse_decide(
    reply: &[i64],
    limits: impl ExactSizeIterator<Item = u64>,
) -> Result<Vec<(u64, Decision)>, Error> {
    let short = || {
        Error::Reply(format!(
            "a reply of {} numbers from the script is cut short",
            reply.len()
        ))
    };
    let mut out = Vec::with_capacity(limits.len());
    let mut rest = reply.iter().map(|&x| pos(x));
    let mut time = None;
    for limit in limits {
        let head = rest.next().ok_or_else(short)?;
        if head & 2 != 0 {
            time = Some(rest.next().ok_or_else(short)?);
        }
        let t =
            time.ok_or_else(|| Error::Reply("the script's first decision carries no time".into()))?;
        let reset_us = rest.next().ok_or_else(short)?;
        let reset_ns = if head & 4 != 0 {
            rest.next().ok_or_else(short)?
        } else {
            0
        };
        let reset = nanos(reset_us, reset_ns);
        let remaining = head >> 3;
        let d = if head & 1 != 0 {
            Decision::allowed(limit, remaining, reset)
        } else {
            let (ru, rn) = (
                rest.next().ok_or_else(short)?,
                rest.next().ok_or_else(short)?,
            );
            Decision::denied(limit, remaining, nanos(ru, rn), reset)
        };
        out.push((t, d));
    }
    if rest.next().is_some() {
        return Err(Error::Reply(format!(
            "{} numbers from the script are more than {} decisions take",
            reply.len(),
            out.len()
        )));
    }
    Ok(out)
}

fn pos(x: i64) -> u64 {
    u64::try_from(x).unwrap_or(0)
}

/// A decision from the script's six numbers: allowed, remaining, retry (µs, ns), reset
/// (µs, ns).
fn decision(limit: u64, f: &[i64]) -> Decision {
    let [allowed, rem, ru, rn, su, sn] = [f[0], f[1], f[2], f[3], f[4], f[5]].map(pos);
    if allowed == 1 {
        Decision::allowed(limit, rem, nanos(su, sn))
    } else {
        Decision::denied(limit, rem, nanos(ru, rn), nanos(su, sn))
    }
}

/// A duration the script gives as µs and ns, in ns.
fn nanos(us: u64, ns: u64) -> u64 {
    us.saturating_mul(1000).saturating_add(ns)
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
