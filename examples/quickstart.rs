//! A simulated burst, decision by decision: 10 requests per second allowed, a client sends
//! 25 requests in 50 ms, pauses, then keeps sending one every 40 ms. Strict and Weighted
//! limiters see the same traffic on a simulated clock, so the run is instant and repeatable.
//!
//! Run it with `cargo run --release --example quickstart`.

use std::time::Duration;

use slidegate::clock::ManualClock;
use slidegate::{Decision, Mode, Quota, SlidingWindow};

fn main() -> Result<(), slidegate::ConfigError> {
    let quota =
        Quota::new(10, Duration::from_secs(1))?.with_granularity(Duration::from_millis(100))?;
    let clock = ManualClock::new();
    let strict = SlidingWindow::with_clock(quota, clock.clone());
    let weighted = SlidingWindow::with_clock(quota.with_mode(Mode::Weighted), clock.clone());

    println!(
        "quota: {} per {:?}, buckets of {:?}\n",
        quota.limit(),
        quota.window(),
        quota.granularity()
    );
    println!("{:>8}  {:<28}  {:<28}", "time", "strict", "weighted");

    let mut at = Vec::new();
    at.extend((0..25).map(|i| i * 2));
    at.extend((0..30).map(|i| 700 + i * 40));
    let (mut admitted_strict, mut admitted_weighted) = (0, 0);
    for ms in at {
        clock.set(Duration::from_millis(ms));
        let (s, w) = (strict.check(), weighted.check());
        admitted_strict += u32::from(s.is_allowed());
        admitted_weighted += u32::from(w.is_allowed());
        println!("{:>6}ms  {:<28}  {:<28}", ms, show(&s), show(&w));
    }
    println!("\nadmitted: strict {admitted_strict}, weighted {admitted_weighted} of 55 requests");
    println!(
        "strict never admits more than 10 in any 1 s; weighted interpolates the oldest bucket"
    );
    Ok(())
}

fn show(d: &Decision) -> String {
    match d.retry_after() {
        None => format!("allowed  remaining {:>2}", d.remaining()),
        Some(wait) => format!("denied   retry in {wait:?}"),
    }
}
