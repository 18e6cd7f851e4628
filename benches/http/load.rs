//! The open-loop load generator of the HTTP load benchmark (`RATE=… benches/http/run.sh`):
//! requests at a fixed rate, each timed from when the schedule said to send it.
//!
//! ```text
//! http_load <port> <requests per second> <seconds> <connections>
//! ```
//!
//! Request `i` is due at `i / rate` after the start, whatever became of the others. Each of
//! the `connections` HTTP/1.1 connections claims the next due request, waits for its time
//! (spinning: tokio's timers tick in milliseconds, and a request here takes tens of
//! microseconds), sends it and reads the whole response. A request that finds every
//! connection busy goes out late, and its latency counts from when it was due, not from when
//! it went out: a server that stalls is charged for every request it held back (the
//! coordinated omission that wrk's closed loop has). Every request carries an
//! `X-Forwarded-For` address from a pool of 1,000, as `run.sh`'s wrk script does, and must
//! be answered `200 OK`.
//!
//! One tokio thread, so that `taskset` can give the generator one core and the server the
//! other. The output, one `name value` pair a line (microseconds): `requests`,
//! `requests_per_second` (answered over the time from the first due to the last answer),
//! `p50_us`, `p99_us`, and `lag_p50_us` / `lag_p99_us`, how long after its due time a
//! request went out — the generator's own delay, which should stay a few microseconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The schedule the connections share.
struct Schedule {
    start: Instant,
    rate: f64,
    requests: u64,
    /// The index of the next request no connection has claimed.
    next: AtomicU64,
}

impl Schedule {
    fn due(&self, i: u64) -> Instant {
        self.start + Duration::from_secs_f64(i as f64 / self.rate)
    }
}

/// One connection's measurements: each request's latency from its due time, and how late it
/// was sent, in nanoseconds.
#[derive(Default)]
struct Samples {
    latency: Vec<u64>,
    lag: Vec<u64>,
    last: Option<Instant>,
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [port, rate, seconds, connections] = args.as_slice() else {
        return Err("usage: http_load <port> <requests per second> <seconds> <connections>".into());
    };
    let port: u16 = port.parse()?;
    let rate: f64 = rate.parse()?;
    let seconds: f64 = seconds.parse()?;
    let connections: usize = connections.parse()?;
    if !(rate > 0.0 && seconds > 0.0 && connections > 0) {
        return Err("the rate, the seconds and the connections must be positive".into());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(port, rate, seconds, connections))
}

async fn run(port: u16, rate: f64, seconds: f64, connections: usize) -> Result<(), Error> {
    let mut senders = Vec::with_capacity(connections);
    for _ in 0..connections {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        senders.push(sender);
    }
    let schedule = Arc::new(Schedule {
        start: Instant::now() + Duration::from_millis(10),
        rate,
        requests: (rate * seconds) as u64,
        next: AtomicU64::new(0),
    });
    let host = format!("127.0.0.1:{port}");
    let tasks: Vec<_> = senders
        .into_iter()
        .map(|sender| tokio::spawn(connection(sender, schedule.clone(), host.clone())))
        .collect();
    let mut all = Samples::default();
    for task in tasks {
        let samples = task.await??;
        all.latency.extend(samples.latency);
        all.lag.extend(samples.lag);
        all.last = all.last.max(samples.last);
    }
    let Some(last) = all.last else {
        return Err("no request was due in that time".into());
    };
    let elapsed = (last - schedule.start).as_secs_f64();
    println!("requests {}", all.latency.len());
    println!(
        "requests_per_second {:.1}",
        all.latency.len() as f64 / elapsed
    );
    for (name, values) in [("", &mut all.latency), ("lag_", &mut all.lag)] {
        values.sort_unstable();
        for (p, q) in [("p50", 0.50), ("p99", 0.99)] {
            let at = ((values.len() as f64 * q) as usize).min(values.len() - 1);
            println!("{name}{p}_us {:.1}", values[at] as f64 / 1e3);
        }
    }
    Ok(())
}

/// Sends the requests this connection claims until the schedule runs out.
async fn connection(
    mut sender: http1::SendRequest<Empty<&'static [u8]>>,
    schedule: Arc<Schedule>,
    host: String,
) -> Result<Samples, Error> {
    let mut samples = Samples::default();
    loop {
        let i = schedule.next.fetch_add(1, Ordering::Relaxed);
        if i >= schedule.requests {
            return Ok(samples);
        }
        let client = i % 1000;
        let request = Request::get("/")
            .header("host", &host)
            .header(
                "x-forwarded-for",
                format!("10.1.{}.{}", client / 256, client % 256),
            )
            .body(Empty::new())?;
        sender.ready().await?;
        let due = schedule.due(i);
        // Yielding lets the other connections read their responses while this one waits.
        while Instant::now() < due {
            tokio::task::yield_now().await;
        }
        let sent = Instant::now();
        let response = sender.send_request(request).await?;
        let status = response.status();
        response.into_body().collect().await?;
        let done = Instant::now();
        if status != hyper::StatusCode::OK {
            return Err(format!("request {i} answered {status}").into());
        }
        samples.latency.push((done - due).as_nanos() as u64);
        samples.lag.push((sent - due).as_nanos() as u64);
        samples.last = Some(done);
    }
}
