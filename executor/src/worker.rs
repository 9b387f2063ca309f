//! Worker threads: each hosts many live engines and drives them by messages and time.
//!
//! A worker never waits on the host: a call leaves as an event and its answer comes
//! back as a message, so while one execution awaits a slow dispatch the worker runs
//! the others. It sleeps until the next message, timer or deadline.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Instant;

use codemode_protocol::texts;
use tokio::sync::mpsc::UnboundedSender;

use crate::engine::{CallAnswer, Engine, Event, Job, Settlement};

/// Room for QuickJS's own stack limit plus the host frames around it.
const WORKER_STACK_BYTES: usize = 32 << 20;

const ENGINE_PANICKED: &str = "The executor failed internally while running this program (the engine panicked). This is a bug in codemode-executor; please report it with the program.";

/// What a worker is asked to do.
pub(crate) enum WorkerMessage {
    Start(Job),
    Answer {
        execution: u64,
        call: u64,
        answer: CallAnswer,
    },
    /// The host dropped the execution (or released a retained one): dispose its engine.
    Cancel(u64),
}

/// The host side's handle on one worker thread.
#[derive(Clone)]
pub(crate) struct WorkerHandle {
    pub(crate) inbox: Sender<WorkerMessage>,
    /// Executions assigned to this worker and not yet disposed: counted up by the host when
    /// it sends `Start` (so a burst spreads over the workers), down by the worker.
    pub(crate) live: Arc<AtomicUsize>,
}

impl WorkerHandle {
    pub(crate) fn spawn<E: Engine + 'static>(index: usize) -> WorkerHandle {
        let (inbox, messages) = std::sync::mpsc::channel();
        let live = Arc::new(AtomicUsize::new(0));
        let count = live.clone();
        std::thread::Builder::new()
            .name(format!("codemode-worker-{index}"))
            .stack_size(WORKER_STACK_BYTES)
            .spawn(move || run::<E>(messages, count))
            .unwrap_or_else(|e| panic!("could not start a worker thread: {e}"));
        WorkerHandle { inbox, live }
    }
}

struct Live<E> {
    engine: E,
    deadline: Instant,
    timeout_ms: u128,
    settled: bool,
    retain: bool,
    events: UnboundedSender<Event>,
}

fn guarded<T>(f: impl FnOnce() -> T) -> Option<T> {
    catch_unwind(AssertUnwindSafe(f)).ok()
}

fn run<E: Engine>(messages: Receiver<WorkerMessage>, live_count: Arc<AtomicUsize>) {
    let mut live: HashMap<u64, Live<E>> = HashMap::new();
    loop {
        let wake = live
            .values()
            .flat_map(|l| [(!l.settled).then_some(l.deadline), l.engine.next_timer()])
            .flatten()
            .min();
        let message = match wake {
            None => match messages.recv() {
                Ok(message) => Some(message),
                Err(_) => break,
            },
            Some(at) => match messages.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(message) => Some(message),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            },
        };
        match message {
            Some(WorkerMessage::Start(job)) => {
                let (execution, events, retain) = (job.execution, job.events.clone(), job.retain);
                let (deadline, timeout_ms) = (job.deadline, job.limits.timeout.as_millis());
                match guarded(|| E::start(job)) {
                    Some(engine) => {
                        live.insert(
                            execution,
                            Live { engine, deadline, timeout_ms, settled: false, retain, events },
                        );
                    }
                    None => {
                        live_count.fetch_sub(1, Ordering::Relaxed);
                        let _ = events.send(Event::Settled(Settlement::Failed(ENGINE_PANICKED.to_owned())));
                        continue;
                    }
                }
                report(&mut live, execution, &live_count);
            }
            Some(WorkerMessage::Answer { execution, call, answer }) => {
                if let Some(entry) = live.get_mut(&execution) {
                    if guarded(|| entry.engine.answer(call, answer)).is_none() {
                        fail(&mut live, execution, &live_count);
                    }
                    report(&mut live, execution, &live_count);
                }
            }
            Some(WorkerMessage::Cancel(execution)) if live.remove(&execution).is_some() => {
                live_count.fetch_sub(1, Ordering::Relaxed);
            }
            Some(WorkerMessage::Cancel(_)) | None => {}
        }
        let now = Instant::now();
        let ids: Vec<u64> = live.keys().copied().collect();
        for execution in ids {
            let Some(entry) = live.get_mut(&execution) else { continue };
            if !entry.settled && now >= entry.deadline {
                entry.engine.end();
                entry.settled = true;
                let text = texts::TIMEOUT.fill(&[&entry.timeout_ms.to_string()]);
                let events = entry.events.clone();
                if !entry.retain {
                    live.remove(&execution);
                    live_count.fetch_sub(1, Ordering::Relaxed);
                }
                let _ = events.send(Event::Settled(Settlement::Failed(text)));
                continue;
            }
            if entry.engine.next_timer().is_some_and(|at| at <= now) {
                if guarded(|| entry.engine.fire_due_timers(now)).is_none() {
                    fail(&mut live, execution, &live_count);
                }
                report(&mut live, execution, &live_count);
            }
        }
    }
}

/// Send the settlement if the run just ended; dispose the engine unless it is retained.
fn report<E: Engine>(live: &mut HashMap<u64, Live<E>>, execution: u64, live_count: &AtomicUsize) {
    let Some(entry) = live.get_mut(&execution) else { return };
    let Some(settlement) = entry.engine.take_settlement() else { return };
    let first = !entry.settled;
    entry.settled = true;
    let events = entry.events.clone();
    // Out of the pool (and the count) before the host hears, so an outcome in hand means
    // the engine is gone; its memory is freed after the host has the outcome.
    let disposed = if entry.retain { None } else { live.remove(&execution) };
    if disposed.is_some() {
        live_count.fetch_sub(1, Ordering::Relaxed);
    }
    if first {
        let _ = events.send(Event::Settled(settlement));
    }
    drop(disposed);
}

fn fail<E: Engine>(live: &mut HashMap<u64, Live<E>>, execution: u64, live_count: &AtomicUsize) {
    if let Some(entry) = live.remove(&execution) {
        live_count.fetch_sub(1, Ordering::Relaxed);
        if !entry.settled {
            let _ = entry.events.send(Event::Settled(Settlement::Failed(ENGINE_PANICKED.to_owned())));
        }
    }
}
