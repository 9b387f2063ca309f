//! The watchdog: one thread per executor that makes deadlines hold whatever a program does.
//!
//! At an execution's deadline it raises the execution's stop flag (the engine's interrupt
//! handler reads it) and hands the host the timeout outcome itself, so the outcome
//! arrives on time even while the engine is still inside a long native call. Between
//! deadlines it looks for workers stuck inside one engine call and has the pool replace
//! them, so the pool never shrinks.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use codemode_protocol::texts;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use tokio::sync::mpsc::UnboundedSender;

use crate::engine::Event;
use crate::pool::Pool;

/// How often the watchdog looks for stuck workers.
const SUPERVISE_EVERY: Duration = Duration::from_millis(50);

/// One execution's deadline, as the watchdog holds it.
pub(crate) struct Watch {
    pub(crate) deadline: Instant,
    pub(crate) timeout_ms: u128,
    /// Raised at the deadline; the engine stops at its next interrupt check.
    pub(crate) stop: Arc<AtomicBool>,
    /// Raised by the host once it has the outcome: the deadline no longer applies.
    pub(crate) done: Arc<AtomicBool>,
    pub(crate) events: UnboundedSender<Event>,
}

struct Due(Instant, Watch);

impl PartialEq for Due {
    fn eq(&self, other: &Due) -> bool {
        self.0 == other.0
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Due) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

pub(crate) fn spawn(pool: Weak<Pool>) -> Sender<Watch> {
    let (watches, incoming) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("codemode-watchdog".to_owned())
        .spawn(move || run(incoming, pool))
        .unwrap_or_else(|e| panic!("could not start the watchdog thread: {e}"));
    watches
}

fn run(incoming: Receiver<Watch>, pool: Weak<Pool>) {
    let mut due: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
    let mut next_supervision = Instant::now() + SUPERVISE_EVERY;
    loop {
        let wake = due.peek().map_or(next_supervision, |Reverse(Due(at, _))| (*at).min(next_supervision));
        match incoming.recv_timeout(wake.saturating_duration_since(Instant::now())) {
            Ok(watch) => due.push(Reverse(Due(watch.deadline, watch))),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = Instant::now();
        while due.peek().is_some_and(|Reverse(Due(at, _))| *at <= now) {
            let Some(Reverse(Due(_, watch))) = due.pop() else { break };
            if !watch.done.load(Ordering::Acquire) {
                watch.stop.store(true, Ordering::Release);
                let text = texts::TIMEOUT.fill(&[&watch.timeout_ms.to_string()]);
                let _ = watch.events.send(Event::TimedOut(text));
            }
        }
        due.retain(|Reverse(Due(_, watch))| !watch.done.load(Ordering::Relaxed));
        if now >= next_supervision {
            next_supervision = now + SUPERVISE_EVERY;
            match pool.upgrade() {
                Some(pool) => pool.replace_stuck_workers(),
                None => return,
            }
        }
    }
}
