//! Worker threads: each hosts many live engines and drives them by messages and time.
//!
//! A worker never waits on the host: a call that is not answered at once comes back as
//! a message, so while one execution awaits a slow dispatch the worker runs the others.
//! It takes new jobs from the pool's shared queue and sleeps until the next job,
//! message, timer or deadline.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use codemode_protocol::texts;
use crossbeam_channel::{Receiver, Select};
use tokio::sync::mpsc::UnboundedSender;

use crate::engine::{CallAnswer, Engine, Event, Job, Settlement};
use crate::pool::WorkerState;

/// Room for QuickJS's own stack limit plus the host frames around it.
const WORKER_STACK_BYTES: usize = 32 << 20;

const ENGINE_PANICKED: &str = "The executor failed internally while running this program (the engine panicked). This is a bug in codemode-executor; please report it with the program.";

/// What a worker is told about the executions it hosts.
pub(crate) enum WorkerMessage {
    Answer {
        execution: u64,
        call: u64,
        answer: CallAnswer,
    },
    /// The host dropped the execution (or released a retained one): dispose its engine.
    Cancel(u64),
}

pub(crate) fn spawn<E: Engine + 'static>(
    index: usize,
    jobs: Receiver<Job>,
    epoch: Instant,
) -> Arc<WorkerState> {
    let (inbox, messages) = crossbeam_channel::unbounded();
    let state = Arc::new(WorkerState {
        inbox,
        busy_since: AtomicU64::new(0),
        retiring: AtomicBool::new(false),
        exited: AtomicBool::new(false),
        live: AtomicUsize::new(0),
        epoch,
    });
    let me = state.clone();
    std::thread::Builder::new()
        .name(format!("codemode-worker-{index}"))
        .stack_size(WORKER_STACK_BYTES)
        .spawn(move || {
            Worker::<E> { me: me.clone(), live: HashMap::new(), blank: None }.run(&jobs, &messages);
            me.exited.store(true, Ordering::Release);
        })
        .unwrap_or_else(|e| panic!("could not start a worker thread: {e}"));
    state
}

struct Live<E> {
    engine: E,
    deadline: Instant,
    timeout_ms: u128,
    settled: bool,
    retain: bool,
    events: UnboundedSender<Event>,
}

struct Worker<E: Engine> {
    me: Arc<WorkerState>,
    live: HashMap<u64, Live<E>>,
    /// The next job's engine, made while the host reads the last outcome.
    blank: Option<E::Blank>,
}

enum Next {
    Job(Job),
    Message(WorkerMessage),
    Time,
    Exit,
}

impl<E: Engine> Worker<E> {
    fn run(&mut self, jobs: &Receiver<Job>, messages: &Receiver<WorkerMessage>) {
        let mut jobs_open = true;
        loop {
            let taking = jobs_open && !self.me.retiring.load(Ordering::Acquire);
            if !taking && self.live.is_empty() {
                return;
            }
            match self.next(taking.then_some(jobs), messages) {
                Next::Job(job) => self.start(job),
                Next::Message(WorkerMessage::Answer { execution, call, answer }) => {
                    self.drive(execution, |engine| engine.answer(call, answer));
                }
                Next::Message(WorkerMessage::Cancel(execution)) => self.dispose(execution),
                Next::Time => {}
                Next::Exit => jobs_open = false,
            }
            self.tick();
            if self.blank.is_none() && jobs_open && !self.me.retiring.load(Ordering::Relaxed) {
                self.blank = catch_unwind(E::blank).ok();
            }
        }
    }

    /// Wait for a job, a message, or the next timer or deadline.
    fn next(&self, jobs: Option<&Receiver<Job>>, messages: &Receiver<WorkerMessage>) -> Next {
        let wake = self
            .live
            .values()
            .flat_map(|l| [(!l.settled).then_some(l.deadline), l.engine.next_timer()])
            .flatten()
            .min();
        let mut select = Select::new();
        let message_index = select.recv(messages);
        let job_index = jobs.map(|jobs| select.recv(jobs));
        let selected = match wake {
            Some(at) => match select.select_deadline(at) {
                Ok(selected) => selected,
                Err(_) => return Next::Time,
            },
            None => select.select(),
        };
        if selected.index() == message_index {
            return selected.recv(messages).map_or(Next::Time, Next::Message);
        }
        match (jobs, job_index) {
            (Some(jobs), Some(index)) if selected.index() == index => {
                selected.recv(jobs).map_or(Next::Exit, Next::Job)
            }
            _ => Next::Time,
        }
    }

    fn start(&mut self, job: Job) {
        if job.stop.load(Ordering::Acquire) {
            return; // dropped by the host (or past its deadline) before it started
        }
        let _ = job.home.set(self.me.inbox.clone());
        let (execution, events, retain) = (job.execution, job.events.clone(), job.retain);
        let (deadline, timeout_ms) = (job.deadline, job.limits.timeout.as_millis());
        self.me.live.fetch_add(1, Ordering::Relaxed);
        self.me.enter_engine();
        let blank = self.blank.take();
        let started = catch_unwind(AssertUnwindSafe(|| E::start(job, blank)));
        self.me.leave_engine();
        match started {
            Ok(engine) => {
                self.live
                    .insert(execution, Live { engine, deadline, timeout_ms, settled: false, retain, events });
                self.report(execution);
            }
            Err(_) => {
                self.me.live.fetch_sub(1, Ordering::Relaxed);
                let _ = events.send(Event::Settled(Settlement::Failed(ENGINE_PANICKED.to_owned())));
            }
        }
    }

    /// Run `f` on an execution's engine; a panic inside fails that execution only.
    fn drive(&mut self, execution: u64, f: impl FnOnce(&mut E)) {
        let Some(entry) = self.live.get_mut(&execution) else { return };
        self.me.enter_engine();
        let ok = catch_unwind(AssertUnwindSafe(|| f(&mut entry.engine))).is_ok();
        self.me.leave_engine();
        if ok {
            self.report(execution);
        } else if let Some(entry) = self.live.remove(&execution) {
            self.me.live.fetch_sub(1, Ordering::Relaxed);
            if !entry.settled {
                let _ = entry.events.send(Event::Settled(Settlement::Failed(ENGINE_PANICKED.to_owned())));
            }
        }
    }

    /// Fire due timers and end executions whose deadline passed while idle.
    fn tick(&mut self) {
        let now = Instant::now();
        let ids: Vec<u64> = self.live.keys().copied().collect();
        for execution in ids {
            let Some(entry) = self.live.get_mut(&execution) else { continue };
            if !entry.settled && now >= entry.deadline {
                entry.engine.end();
                entry.settled = true;
                let text = texts::TIMEOUT.fill(&[&entry.timeout_ms.to_string()]);
                let _ = entry.events.send(Event::Settled(Settlement::Failed(text)));
                if !entry.retain {
                    self.dispose(execution);
                }
                continue;
            }
            if entry.engine.next_timer().is_some_and(|at| at <= now) {
                self.drive(execution, |engine| engine.fire_due_timers(now));
            }
        }
    }

    /// Send the settlement if the run just ended; dispose the engine unless retained.
    fn report(&mut self, execution: u64) {
        let Some(entry) = self.live.get_mut(&execution) else { return };
        let Some(settlement) = entry.engine.take_settlement() else { return };
        let first = !entry.settled;
        entry.settled = true;
        let events = entry.events.clone();
        // Out of the pool (and the count) before the host hears, so an outcome in hand means
        // the engine is gone; its memory is freed after the host has the outcome.
        let disposed = if entry.retain { None } else { self.live.remove(&execution) };
        if disposed.is_some() {
            self.me.live.fetch_sub(1, Ordering::Relaxed);
        }
        if first {
            let _ = events.send(Event::Settled(settlement));
        }
        drop(disposed);
    }

    fn dispose(&mut self, execution: u64) {
        if self.live.remove(&execution).is_some() {
            self.me.live.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
