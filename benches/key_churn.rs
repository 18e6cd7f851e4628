//! Key churn at full speed: 10 million distinct IPv6 addresses through a keyed limiter bounded
//! at `max_keys = 100_000`, on the default clock (quanta), from two threads, each address
//! checked once. With a window of a minute no key goes idle during the run, so past the bound
//! every new key forces one out: the adversarial case for the bound, not the idle sweeps.
//!
//! A third thread samples every 20 ms the keys checked so far, the live keys
//! (`KeyedLimiter::len`) and the resident-set size (`/proc/self/statm`, Linux), and the run
//! writes them as CSV and plots them as SVG (`docs/key_churn.svg`):
//!
//! ```sh
//! cargo bench --bench key_churn -- docs/key_churn   # writes .csv and .svg
//! ```
//!
//! It fails (exit status 1) if the live keys ever exceed the bound, or if resident memory
//! after the bound was first reached grows by more than half of what it was then.

mod common;

use std::net::Ipv6Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use slidegate::{KeyedLimiter, Quota};

const KEYS: u64 = 10_000_000;
const BOUND: usize = 100_000;
const THREADS: u64 = 2;

/// Resident-set size in bytes, or 0 where `/proc` is unavailable.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// The `i`th address of thread `thread`: 2001:db8::/32, the thread in the next 16 bits, and
/// `i` scrambled by an odd multiplier (a bijection of the low 64 bits), so every address is
/// distinct and neighbours share no prefix past the thread's.
fn address(thread: u64, i: u64) -> Ipv6Addr {
    let low = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    Ipv6Addr::from((0x2001_0db8_u128 << 96) | (u128::from(thread) << 80) | u128::from(low))
}

struct Sample {
    seconds: f64,
    checked: u64,
    live: usize,
    rss: u64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = common::args().nth(1).unwrap_or_else(|| "key_churn".into());
    let quota = Quota::new(10, Duration::from_secs(60))?;
    let limiter = Arc::new(
        KeyedLimiter::<Ipv6Addr>::builder(quota)
            .max_keys(BOUND)
            .build(),
    );
    let checked = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let base = rss();

    let sampler = {
        let (limiter, checked, done) = (limiter.clone(), checked.clone(), done.clone());
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            loop {
                let finished = done.load(Ordering::Acquire);
                samples.push(Sample {
                    seconds: start.elapsed().as_secs_f64(),
                    checked: checked.load(Ordering::Relaxed),
                    live: limiter.len(),
                    rss: rss(),
                });
                if finished {
                    return samples;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (limiter, checked) = (limiter.clone(), checked.clone());
            std::thread::spawn(move || {
                let mut admitted = 0u64;
                for i in 0..KEYS / THREADS {
                    admitted += u64::from(limiter.check(&address(thread, i)).is_allowed());
                    if i % 1024 == 1023 {
                        checked.fetch_add(1024, Ordering::Relaxed);
                    }
                }
                admitted
            })
        })
        .collect();
    let admitted: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let elapsed = start.elapsed();
    done.store(true, Ordering::Release);
    let samples = sampler.join().unwrap();

    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    let mut csv = String::from("seconds,keys_checked,live_keys,rss_mib\n");
    for s in &samples {
        csv += &format!(
            "{:.3},{},{},{:.2}\n",
            s.seconds,
            s.checked,
            s.live,
            mib(s.rss)
        );
    }
    std::fs::write(format!("{out}.csv"), csv)?;
    std::fs::write(format!("{out}.svg"), svg(&samples))?;

    let peak_live = samples.iter().map(|s| s.live).max().unwrap_or(0);
    // Resident memory when the bound was first reached, and the most it was afterwards.
    let full = samples.iter().position(|s| s.live >= BOUND);
    let at_full = full.map_or(0, |i| samples[i].rss);
    let peak_rss = samples.iter().map(|s| s.rss).max().unwrap_or(0);
    println!(
        "{KEYS} distinct IPv6 keys in {:.2} s ({:.0} ns per check per thread, {THREADS} threads), \
         {admitted} admitted",
        elapsed.as_secs_f64(),
        elapsed.as_nanos() as f64 * THREADS as f64 / KEYS as f64
    );
    println!(
        "live keys: peak {peak_live} (bound {BOUND}), {} at the end; forced evictions {}, idle {}",
        limiter.len(),
        limiter.forced_evictions(),
        limiter.evictions()
    );
    println!(
        "rss: {:.1} MiB before, {:.1} MiB when the bound was first reached, peak {:.1} MiB, \
         {:.1} MiB at the end; {} samples -> {out}.csv, {out}.svg",
        mib(base),
        mib(at_full),
        mib(peak_rss),
        mib(samples.last().map_or(0, |s| s.rss)),
        samples.len()
    );
    if peak_live > BOUND {
        eprintln!("live keys exceeded the bound");
        std::process::exit(1);
    }
    let after = full.map_or(&samples[..0], |i| &samples[i..]);
    let peak_after = after.iter().map(|s| s.rss).max().unwrap_or(0);
    if at_full > 0 && peak_after > at_full + at_full / 2 {
        eprintln!("resident memory grew by more than half after the bound was reached");
        std::process::exit(1);
    }
    Ok(())
}

/// The samples as an SVG chart: resident memory (MiB, left axis) and live keys (thousands,
/// right axis) against seconds.
fn svg(samples: &[Sample]) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 360.0, 60.0, 70.0, 40.0, 45.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let t_max = samples.last().map_or(1.0, |s| s.seconds).max(1e-9);
    let rss_max = samples.iter().map(|s| s.rss).max().unwrap_or(1) as f64 / (1 << 20) as f64;
    let rss_top = (rss_max / 10.0).ceil().max(1.0) * 10.0;
    let live_top = (BOUND as f64 * 1.25 / 1000.0).ceil();
    let x = |t: f64| left + pw * t / t_max;
    let y = |v: f64, top_value: f64| top + ph * (1.0 - v / top_value);
    let line = |f: &dyn Fn(&Sample) -> f64, top_value: f64| {
        samples
            .iter()
            .map(|s| format!("{:.1},{:.1}", x(s.seconds), y(f(s), top_value)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">\
         {KEYS} distinct IPv6 keys, max_keys = {BOUND}, two threads at full speed</text>\n",
        w / 2.0
    );
    // Axes, ticks and grid.
    out += &format!(
        "<rect x=\"{left}\" y=\"{top}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" \
         stroke=\"black\"/>\n"
    );
    for i in 0..=5 {
        let f = f64::from(i) / 5.0;
        let gy = top + ph * (1.0 - f);
        out += &format!(
            "<line x1=\"{left}\" y1=\"{gy:.1}\" x2=\"{}\" y2=\"{gy:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#1f77b4\">{:.0}</text>\n\
             <text x=\"{}\" y=\"{:.1}\" fill=\"#d62728\">{:.0}</text>\n",
            left + pw,
            left - 6.0,
            gy + 4.0,
            rss_top * f,
            left + pw + 6.0,
            gy + 4.0,
            live_top * f
        );
        let gx = left + pw * f;
        out += &format!(
            "<text x=\"{gx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{:.1}</text>\n",
            top + ph + 16.0,
            t_max * f
        );
    }
    out += &format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">seconds</text>\n\
         <text x=\"14\" y=\"{}\" fill=\"#1f77b4\" transform=\"rotate(-90 14 {})\" \
         text-anchor=\"middle\">resident memory, MiB</text>\n\
         <text x=\"{}\" y=\"{}\" fill=\"#d62728\" transform=\"rotate(90 {} {})\" \
         text-anchor=\"middle\">live keys, thousands</text>\n",
        left + pw / 2.0,
        h - 8.0,
        top + ph / 2.0,
        top + ph / 2.0,
        w - 14.0,
        top + ph / 2.0,
        w - 14.0,
        top + ph / 2.0
    );
    let bound_y = y(BOUND as f64 / 1000.0, live_top);
    out += &format!(
        "<line x1=\"{left}\" y1=\"{bound_y:.1}\" x2=\"{}\" y2=\"{bound_y:.1}\" \
         stroke=\"#d62728\" stroke-dasharray=\"4 4\"/>\n",
        left + pw
    );
    out += &format!(
        "<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"1.5\" points=\"{}\"/>\n",
        line(&|s| s.live as f64 / 1000.0, live_top)
    );
    out += &format!(
        "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"{}\"/>\n",
        line(&|s| s.rss as f64 / (1 << 20) as f64, rss_top)
    );
    out += "</svg>\n";
    out
}
