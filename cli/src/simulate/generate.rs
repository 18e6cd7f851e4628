//! Built-in traffic: seeded, deterministic generators of traces.
//!
//! Every generator takes the quota's limit `L` and window `W`, a duration, a number of keys,
//! a rate (requests per second per key, on average) and a seed; the same arguments give the
//! same trace on every run and machine. Costs are 1.

use std::fmt;

use clap::ValueEnum;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::simulate::trace::{Trace, TraceBuilder};

/// A shape of traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// A mix of the others on disjoint keys: 80% steady, 15% bursts, 5% boundary attackers.
    Mixed,
    /// Poisson arrivals at `--rate` per key.
    Steady,
    /// On/off bursts: Poisson at `--rate × (on + off) / on` during `--on`, silence for `--off`.
    Bursts,
    /// Many keys, each active for `--lifetime`: `--keys` are live at any time, new ones keep
    /// arriving as old ones go quiet.
    Churn,
    /// The boundary attack: `L` requests in the last tenth of a window and `L` in the first
    /// tenth of the next, every third window boundary, on every key.
    Boundary,
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.to_possible_value().map(|v| v.get_name().to_owned());
        f.write_str(name.as_deref().unwrap_or("?"))
    }
}

/// What a generator needs. Times in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    pub limit: u64,
    pub window: u64,
    pub duration: u64,
    pub keys: u32,
    /// Mean requests per second per key.
    pub rate: f64,
    /// Burst length (`bursts`).
    pub on: u64,
    /// Silence between bursts (`bursts`).
    pub off: u64,
    /// How long a key stays active (`churn`).
    pub lifetime: u64,
    pub seed: u64,
}

/// Requests of one generator before they are merged into a trace: `(at, key name)`.
type Arrivals = Vec<(u64, String)>;

/// The trace of `scenario` with `params`.
pub fn generate(scenario: Scenario, params: &Params) -> Trace {
    let mut rng = StdRng::seed_from_u64(params.seed);
    let mut arrivals = match scenario {
        Scenario::Steady => steady(&mut rng, params, "k", 0..params.keys),
        Scenario::Bursts => bursts(&mut rng, params, "b", 0..params.keys),
        Scenario::Churn => churn(&mut rng, params),
        Scenario::Boundary => boundary(params, "a", 0..params.keys),
        Scenario::Mixed => {
            let [steady_keys, burst_keys, boundary_keys] = mixed_keys(params.keys);
            let mut all = steady(&mut rng, params, "k", steady_keys);
            all.extend(bursts(&mut rng, params, "b", burst_keys));
            all.extend(boundary(params, "a", boundary_keys));
            all
        }
    };
    // Stable: requests at one instant keep their generation order.
    arrivals.sort_by_key(|&(at, _)| at);
    let mut builder = TraceBuilder::default();
    for (at, key) in &arrivals {
        let key = builder.key(key);
        builder.push(*at, key, 1);
    }
    builder.finish()
}

/// The keys of `mixed`'s parts, `0..keys` split in order: steady (the rest, about 80%),
/// bursts (15%, rounded down), boundary attackers (5%, rounded down).
fn mixed_keys(keys: u32) -> [std::ops::Range<u32>; 3] {
    // In u64: 15 × keys overflows u32 from 286 331 154 keys.
    let share = |percent: u64| (u64::from(keys) * percent / 100) as u32;
    let (bursts, attackers) = (share(15), share(5));
    let steady = keys - bursts - attackers;
    [0..steady, steady..steady + bursts, steady + bursts..keys]
}

/// The number of requests `scenario` generates with `params`, before generating them: exact
/// for `boundary`, the mean for the Poisson ones (for `bursts`, with every key's phase at its
/// worst, which matters only when a period is long against the duration).
pub fn expected_requests(scenario: Scenario, p: &Params) -> f64 {
    let seconds = p.duration as f64 / 1e9;
    let poisson = |keys: u32| p.rate * (f64::from(keys) * seconds);
    let bursty = |keys: u32| {
        if p.on == 0 {
            return 0.0;
        }
        // Each key bursts at most ⌊duration / period⌋ + 1 times, each at most `on` (and all
        // together at most `duration`) long, at `rate × period / on`.
        let period = p.on.saturating_add(p.off) as f64;
        let on = p.on as f64;
        let busy = (on * ((p.duration as f64 / period).floor() + 1.0)).min(p.duration as f64);
        p.rate * (f64::from(keys) * (period / on * busy / 1e9))
    };
    match scenario {
        Scenario::Steady | Scenario::Churn => poisson(p.keys),
        Scenario::Bursts => bursty(p.keys),
        Scenario::Boundary => boundary_requests(p, p.keys),
        Scenario::Mixed => {
            let [steady, bursts, attackers] = mixed_keys(p.keys).map(|r| r.len() as u32);
            poisson(steady) + bursty(bursts) + boundary_requests(p, attackers)
        }
    }
}

/// How many requests [`boundary`] makes on `keys` keys: `2L` per key per attacked boundary.
fn boundary_requests(p: &Params, keys: u32) -> f64 {
    let burst = p.window / 10;
    // Boundaries W + 3W·j with W + 3W·j + W/10 ≤ duration (and below 2⁶³, as `boundary`).
    let last = p.duration.saturating_sub(burst).min(u64::MAX / 2 - 1);
    let boundaries = match (last.checked_sub(p.window), p.window.checked_mul(3)) {
        (Some(room), Some(step)) => room / step + 1,
        (Some(_), None) => 1,
        (None, _) => 0,
    };
    2.0 * p.limit as f64 * f64::from(keys) * boundaries as f64
}

/// An exponential gap with mean `1 / rate` seconds, in nanoseconds (at least 1: two arrivals of
/// one Poisson process never coincide).
fn gap(rng: &mut StdRng, rate_per_ns: f64) -> u64 {
    let u: f64 = rng.random(); // [0, 1)
    // `as` saturates: an absurdly small rate gives a gap past any duration.
    ((-(1.0 - u).ln() / rate_per_ns) as u64).max(1)
}

/// Poisson arrivals at `rate` per key over `0..duration`, for `keys`.
fn steady(rng: &mut StdRng, p: &Params, prefix: &str, keys: std::ops::Range<u32>) -> Arrivals {
    let mut out = Vec::new();
    if keys.is_empty() || p.rate <= 0.0 {
        return out;
    }
    let total = p.rate * f64::from(keys.len() as u32) / 1e9;
    let mut t = gap(rng, total);
    while t < p.duration {
        let key = rng.random_range(keys.clone());
        out.push((t, format!("{prefix}{key}")));
        t = t.saturating_add(gap(rng, total));
    }
    out
}

/// Bursts: Poisson during `[k(on + off), k(on + off) + on)`, nothing in between, with the same
/// mean rate as `steady`. Each key's phase is shifted by a random fraction of the period so
/// that not every key bursts at once.
fn bursts(rng: &mut StdRng, p: &Params, prefix: &str, keys: std::ops::Range<u32>) -> Arrivals {
    let mut out = Vec::new();
    let period = p.on.saturating_add(p.off);
    if keys.is_empty() || p.rate <= 0.0 || p.on == 0 {
        return out;
    }
    let rate = p.rate * period as f64 / p.on as f64 / 1e9;
    for key in keys {
        let name = format!("{prefix}{key}");
        let phase = rng.random_range(0..period);
        let mut start = phase;
        while start < p.duration {
            let end = start.saturating_add(p.on).min(p.duration);
            let mut t = start.saturating_add(gap(rng, rate));
            while t < end {
                out.push((t, name.clone()));
                t = t.saturating_add(gap(rng, rate));
            }
            start = start.saturating_add(period);
        }
    }
    out
}

/// Churn: key `i` is active during `[i·lifetime/keys − lifetime, i·lifetime/keys)`, so `keys`
/// keys are live at any time and a new one starts every `lifetime / keys`. Arrivals are
/// Poisson at `rate × keys` in all, each to a uniformly chosen live key.
fn churn(rng: &mut StdRng, p: &Params) -> Arrivals {
    let mut out = Vec::new();
    if p.keys == 0 || p.rate <= 0.0 || p.lifetime == 0 {
        return out;
    }
    let total = p.rate * f64::from(p.keys) / 1e9;
    let step = (p.lifetime / u64::from(p.keys)).max(1);
    let mut t = gap(rng, total);
    while t < p.duration {
        // The live keys at t: first = ⌊t / step⌋ .. first + keys.
        let first = t / step;
        let key = first + rng.random_range(0..u64::from(p.keys));
        out.push((t, format!("c{key}")));
        t = t.saturating_add(gap(rng, total));
    }
    out
}

/// The boundary attack on each key: `L` requests evenly over `[B − W/10, B)` and `L` over
/// `[B, B + W/10)` for every third boundary `B = W, 4W, 7W, …` with `B + W/10 ≤ duration`.
/// A fixed window admits all `2L` (within `W/5`); a correct sliding window admits `L`.
fn boundary(p: &Params, prefix: &str, keys: std::ops::Range<u32>) -> Arrivals {
    let mut out = Vec::new();
    let burst = p.window / 10;
    let mut b = p.window;
    while b.saturating_add(burst) <= p.duration && b < u64::MAX / 2 {
        for i in 0..p.limit {
            // Evenly spaced: offset i·burst/L, exact in u128.
            let offset = (u128::from(i) * u128::from(burst) / u128::from(p.limit)) as u64;
            for key in keys.clone() {
                let name = format!("{prefix}{key}");
                out.push((b - burst + offset, name.clone()));
                out.push((b + offset, name));
            }
        }
        b = b.saturating_add(p.window.saturating_mul(3));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn params() -> Params {
        Params {
            limit: 10,
            window: 10 * S,
            duration: 100 * S,
            keys: 20,
            rate: 2.0,
            on: 3 * S,
            off: 9 * S,
            lifetime: 20 * S,
            seed: 7,
        }
    }

    const ALL: [Scenario; 5] = [
        Scenario::Mixed,
        Scenario::Steady,
        Scenario::Bursts,
        Scenario::Churn,
        Scenario::Boundary,
    ];

    #[test]
    fn same_seed_same_trace_other_seed_other_trace() {
        for s in ALL {
            let a = generate(s, &params());
            assert!(!a.requests.is_empty(), "{s}");
            assert_eq!(a, generate(s, &params()), "{s}");
            assert!(a.requests.windows(2).all(|w| w[0].at <= w[1].at), "{s}");
            assert!(a.requests.iter().all(|r| r.at < params().duration), "{s}");
            if s != Scenario::Boundary {
                let other = generate(
                    s,
                    &Params {
                        seed: 8,
                        ..params()
                    },
                );
                assert_ne!(a, other, "{s}");
            }
        }
    }

    #[test]
    fn steady_has_the_asked_rate() {
        let p = Params {
            duration: 1000 * S,
            ..params()
        };
        let n = generate(Scenario::Steady, &p).requests.len() as f64;
        let expected = 2.0 * 20.0 * 1000.0;
        // Poisson: σ = √40000 = 200; 5σ.
        assert!((n - expected).abs() < 1000.0, "{n}");
        // Bursts keep the same mean rate.
        let n = generate(Scenario::Bursts, &p).requests.len() as f64;
        assert!((n - expected).abs() < 2000.0, "{n}");
    }

    #[test]
    fn churn_keeps_about_keys_live_and_brings_new_ones() {
        let t = generate(Scenario::Churn, &params());
        // 100 s / (20 s / 20 keys) = 100 key starts, plus the 20 live at the start.
        assert!(
            t.keys.len() > 100 && t.keys.len() <= 120,
            "{}",
            t.keys.len()
        );
    }

    #[test]
    fn the_boundary_attack_sends_l_before_and_l_after_each_attacked_boundary() {
        let p = params();
        let t = generate(Scenario::Boundary, &Params { keys: 1, ..p });
        let times: Vec<u64> = t.requests.iter().map(|r| r.at).collect();
        // Boundaries 10 s, 40 s, 70 s (100 s is past the duration).
        assert_eq!(times.len(), 3 * 2 * 10);
        for b in [10 * S, 40 * S, 70 * S] {
            let before = times.iter().filter(|&&t| t >= b - S && t < b).count();
            let after = times.iter().filter(|&&t| t >= b && t < b + S).count();
            assert_eq!((before, after), (10, 10), "boundary {b}");
        }
        // The first request of each half is exactly at the start of its tenth.
        assert_eq!(times[0], 9 * S);
        assert_eq!(times[10], 10 * S);
        assert_eq!(*times.last().unwrap(), 70 * S + 9 * S / 10);
    }

    #[test]
    fn mixed_splits_many_keys_without_overflow() {
        // 15 × 286 331 154 overflows u32: the bursts' share wrapped to 0 keys.
        let k = 286_331_154;
        let [steady, bursts, attackers] = mixed_keys(k);
        assert_eq!(bursts.len(), 42_949_673);
        assert_eq!(attackers.len(), 14_316_557);
        assert_eq!((steady.start, attackers.end), (0, k));
        assert_eq!((steady.end, bursts.end), (bursts.start, attackers.start));
        assert_eq!(mixed_keys(20).map(|r| r.len()), [16, 3, 1]);
    }

    #[test]
    fn the_boundary_attack_stops_when_three_windows_overflow() {
        // 3W wraps past 2⁶⁴ to W' = 4W − 2⁶⁴, a second "boundary" below 2⁶³.
        let p = Params {
            limit: 2,
            window: 6_700_000_000_000_000_000,
            duration: u64::MAX,
            keys: 1,
            ..params()
        };
        assert_eq!(boundary(&p, "a", 0..1).len(), 4);
        assert_eq!(boundary_requests(&p, 1), 4.0);
    }

    #[test]
    fn the_estimate_is_what_the_generators_make() {
        let poisson = |n: f64, mean: f64| (n - mean).abs() < 5.0 * mean.sqrt() + 1.0;
        for (scenario, duration) in [
            (Scenario::Steady, 1000 * S),
            (Scenario::Churn, 1000 * S),
            (Scenario::Mixed, 1000 * S),
            (Scenario::Bursts, 1200 * S),
        ] {
            let p = Params {
                duration,
                ..params()
            };
            let n = generate(scenario, &p).requests.len() as f64;
            let mean = expected_requests(scenario, &p);
            assert!(
                poisson(n, mean),
                "{scenario}: {n} requests, estimated {mean}"
            );
        }
        // Exact for the attack, whatever the duration and window.
        for duration in [
            0,
            9 * S,
            11 * S - 1,
            11 * S,
            40 * S,
            41 * S,
            100 * S,
            1234 * S,
        ] {
            for window in [S, 10 * S, 7 * S + 3] {
                let p = Params {
                    duration,
                    window,
                    ..params()
                };
                let n = generate(Scenario::Boundary, &p).requests.len() as f64;
                assert_eq!(expected_requests(Scenario::Boundary, &p), n, "{p:?}");
            }
        }
        // Long bursts against a short run: the estimate is a bound, not the mean.
        let p = Params {
            on: 50 * S,
            off: 1000 * S,
            ..params()
        };
        let n = generate(Scenario::Bursts, &p).requests.len() as f64;
        assert!(n <= expected_requests(Scenario::Bursts, &p), "{n}");
    }

    #[test]
    fn mixed_uses_disjoint_keys_for_each_part() {
        let t = generate(Scenario::Mixed, &params());
        let count = |p: char| t.keys.iter().filter(|k| k.starts_with(p)).count();
        assert!(count('k') <= 16 && count('k') > 10);
        assert!(count('b') <= 3);
        assert_eq!(count('a'), 1);
    }
}
