//! Batches: the single-key decisions (checks and peeks) that concurrent callers make on one
//! connection, sent together as one call of the library's `decide`.
//!
//! A task per connection owns a queue per destination (the server; on a Cluster, each slot).
//! While a destination has no call in flight, whatever its queue holds goes at once as one
//! call (up to `MAX_BATCH` decisions); requests that arrive while a call is in flight wait
//! for its answer and then go together. One caller alone sends a batch of one as soon as it
//! asks, so a lone decision still costs one round trip; 64 callers share a few calls, and
//! the script's fixed cost per call (and a key's read and write, for decisions on one key)
//! is paid once per batch instead of once per decision.
//!
//! The script decides each request of a batch as if it had come alone, in queue order, at the
//! server's time (read once per call) or at the request's own explicit time. Each request
//! keeps its own deadline: its caller stops waiting then and gets the policy (see
//! `RedisLimiter::run`); a request whose caller stopped waiting before it was sent is dropped
//! unsent, so it charges nothing.

use core::future::poll_fn;
use core::task::Poll;
use std::collections::{HashMap, VecDeque};

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::cluster_routing::Slot;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::Degraded;
use super::Error;
use super::raw::Raw;
use super::script::{self, Entry, Invocation, Shape, Single};
use crate::decision::Decision;

/// The most decisions one call carries: a call holds the server for its duration, so this
/// bounds what one batch delays other clients' commands by.
const MAX_BATCH: usize = 128;
const _: () = assert!(MAX_BATCH <= script::DECIDE_MAX);

/// Calls in flight per destination. One keeps the batches full: while it is answered the next
/// batch gathers.
const FLYING: usize = 1;

/// The queue's sending end: one per connection, shared by its clones.
pub(crate) type Batches = mpsc::UnboundedSender<Request>;

/// The answer to a request: the time judged at (µs) and the decision.
pub(crate) type Answer = Result<(u64, Decision), Error>;

/// One decision for the queue.
pub(crate) struct Request {
    pub(crate) shape: Shape,
    pub(crate) keys: (String, String),
    /// The cost; 0 for a peek (of cost 1).
    pub(crate) n: u64,
    /// The time to judge at (µs), or the server's.
    pub(crate) at_us: Option<u64>,
    /// When the caller stops waiting.
    pub(crate) expires: Instant,
    pub(crate) reply: oneshot::Sender<Answer>,
}

/// Starts the connection's batching task; it ends when every clone of the connection is
/// gone and the calls in flight are answered.
pub(crate) fn start(raw: Raw) -> Batches {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(dispatch(raw, rx));
    tx
}

enum Event {
    Request(Request),
    Closed,
    Answered(Option<Slot>),
}

async fn dispatch(raw: Raw, mut rx: mpsc::UnboundedReceiver<Request>) {
    let cluster = raw.is_cluster();
    let mut waiting: HashMap<Option<Slot>, VecDeque<Request>> = HashMap::new();
    let mut busy: HashMap<Option<Slot>, usize> = HashMap::new();
    let mut flying = FuturesUnordered::new();
    let mut open = true;
    let route = |r: &Request| cluster.then(|| script::slot(&r.keys.0));
    loop {
        let event = poll_fn(|cx| {
            if let Poll::Ready(Some(dest)) = flying.poll_next_unpin(cx) {
                return Poll::Ready(Event::Answered(dest));
            }
            if open {
                return match rx.poll_recv(cx) {
                    Poll::Ready(Some(r)) => Poll::Ready(Event::Request(r)),
                    Poll::Ready(None) => Poll::Ready(Event::Closed),
                    Poll::Pending => Poll::Pending,
                };
            }
            Poll::Pending
        })
        .await;
        match event {
            Event::Request(r) => waiting.entry(route(&r)).or_default().push_back(r),
            Event::Closed => open = false,
            Event::Answered(dest) => {
                if let Some(b) = busy.get_mut(&dest) {
                    *b -= 1;
                    if *b == 0 {
                        busy.remove(&dest);
                    }
                }
            }
        }
        // Everything queued by now joins this round.
        while open {
            match rx.try_recv() {
                Ok(r) => waiting.entry(route(&r)).or_default().push_back(r),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        for (dest, queue) in waiting.iter_mut() {
            let b = busy.entry(*dest).or_insert(0);
            while *b < FLYING && !queue.is_empty() {
                let batch = take(queue);
                if !batch.is_empty() {
                    flying.push(send(raw.clone(), *dest, batch));
                    *b += 1;
                }
            }
            if *b == 0 {
                busy.remove(dest);
            }
        }
        waiting.retain(|_, q| !q.is_empty());
        if !open && flying.is_empty() && waiting.is_empty() {
            return;
        }
    }
}

/// Up to `MAX_BATCH` requests from the front of the queue whose callers still wait.
fn take(queue: &mut VecDeque<Request>) -> Vec<Request> {
    let mut batch = Vec::with_capacity(queue.len().min(MAX_BATCH));
    while batch.len() < MAX_BATCH {
        match queue.pop_front() {
            Some(r) if r.reply.is_closed() => {}
            Some(r) => batch.push(r),
            None => break,
        }
    }
    batch
}

/// Sends one batch and answers each request; gives up when the last caller has.
async fn send(raw: Raw, dest: Option<Slot>, mut batch: Vec<Request>) -> Option<Slot> {
    let Some(last) = batch.iter().map(|r| r.expires).max() else {
        return dest;
    };
    let slot = script::slot(&batch[0].keys.0);
    let inv = Invocation::decide(batch.iter_mut().map(|r| {
        let Request {
            shape,
            keys,
            n,
            at_us,
            ..
        } = r;
        Single {
            shape,
            keys: std::mem::take(keys),
            n: *n,
            at_us: *at_us,
        }
    }));
    let reply = tokio::time::timeout_at(last, raw.invoke(Entry::Decide, &inv, slot)).await;
    let Ok(reply) = reply else {
        // The last caller's deadline has passed. Each caller's own timer fires at its
        // deadline too, but which of the two tasks runs first is the scheduler's choice: a
        // reply dropped here would reach a caller polled after this task as a failed
        // connection. Say what happened instead.
        for r in batch {
            let _ = r.reply.send(Err(Error::Unavailable(Degraded::Deadline)));
        }
        return dest;
    };
    let parsed = reply
        .and_then(|v| Ok(redis::from_redis_value::<Vec<i64>>(v)?))
        .map_err(Error::Redis)
        .and_then(|v| script::parse_decide(&v, batch.iter().map(|r| r.shape.quota.limit())));
    match parsed {
        Ok(answers) => {
            for (r, a) in batch.into_iter().zip(answers) {
                let _ = r.reply.send(Ok(a));
            }
        }
        Err(e) => {
            for r in batch {
                let e = match &e {
                    Error::Redis(e) => Error::Redis(e.clone()),
                    e => Error::Reply(e.to_string()),
                };
                let _ = r.reply.send(Err(e));
            }
        }
    }
    dest
}
