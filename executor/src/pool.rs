//! Execution threads: each live execution runs on a thread of its own, so the operating
//! system preempts a busy program in favour of every other execution that has work.
//!
//! Threads are kept idle between executions, each with a blank engine made ahead of
//! demand, and leave after a while without work beyond the configured number. A thread
//! stuck in a native call past its deadline holds only its own execution: new executions
//! take other threads, so capacity never shrinks.

use std::panic::catch_unwind;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Sender;

use crate::engine::Engine;
use crate::runtime::{self, Job, Live};

/// An idle thread beyond the kept ones leaves after this long without work.
const IDLE_EXIT_AFTER: Duration = Duration::from_secs(10);

/// Stack of an execution thread beyond the engine's stack limit: room for the host's frames.
const STACK_MARGIN_BYTES: usize = 8 << 20;

/// The stack of a kept thread; a request asking for a deeper engine stack gets a thread of its own.
const THREAD_STACK_BYTES: usize = 16 << 20;

struct Shared {
    idle: Mutex<Vec<Sender<Job>>>,
    /// Threads kept even when idle.
    keep: usize,
    /// Executions holding an engine, or about to.
    live: Arc<AtomicUsize>,
    threads: AtomicUsize,
    spawned: AtomicUsize,
    spawn: fn(&Arc<Shared>, Option<Job>, usize),
}

/// The execution threads of one executor, for one engine.
#[derive(Clone)]
pub(crate) struct Pool {
    shared: Arc<Shared>,
}

impl Pool {
    /// A pool for engine `E` keeping `keep` threads ready.
    pub(crate) fn new<E: Engine + 'static>(keep: usize) -> Pool {
        let shared = Arc::new(Shared {
            idle: Mutex::new(Vec::new()),
            keep: keep.max(1),
            live: Arc::default(),
            threads: AtomicUsize::new(0),
            spawned: AtomicUsize::new(0),
            spawn: spawn_thread::<E>,
        });
        for _ in 0..shared.keep {
            (shared.spawn)(&shared, None, THREAD_STACK_BYTES);
        }
        Pool { shared }
    }

    /// Counts an execution as live until its engine is gone (see [`Live`]).
    pub(crate) fn live(&self) -> Live {
        Live::new(self.shared.live.clone())
    }

    /// Start `job` on an idle thread, or on a new one.
    pub(crate) fn submit(&self, job: Job) {
        let stack = job.limits.stack_limit_bytes.saturating_add(STACK_MARGIN_BYTES);
        if stack > THREAD_STACK_BYTES {
            return (self.shared.spawn)(&self.shared, Some(job), stack);
        }
        let mut job = job;
        loop {
            let idle = lock(&self.shared.idle).pop();
            match idle {
                // A thread that left after its idle wait gives the job back.
                Some(thread) => match thread.send(job) {
                    Ok(()) => return,
                    Err(returned) => job = returned.0,
                },
                None => return (self.shared.spawn)(&self.shared, Some(job), THREAD_STACK_BYTES),
            }
        }
    }

    /// Executions holding an engine now or about to start one, retained ones included.
    pub(crate) fn live_engines(&self) -> usize {
        self.shared.live.load(Ordering::Acquire)
    }

    /// Execution threads running now, idle ones included.
    pub(crate) fn threads(&self) -> usize {
        self.shared.threads.load(Ordering::Acquire)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn spawn_thread<E: Engine + 'static>(shared: &Arc<Shared>, first: Option<Job>, stack: usize) {
    let index = shared.spawned.fetch_add(1, Ordering::Relaxed);
    shared.threads.fetch_add(1, Ordering::AcqRel);
    let dedicated = stack > THREAD_STACK_BYTES;
    let thread_shared = shared.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("codemode-{}-{index}", E::NAME))
        .stack_size(stack)
        .spawn(move || {
            serve::<E>(&thread_shared, first, dedicated);
            thread_shared.threads.fetch_sub(1, Ordering::AcqRel);
        });
    if let Err(error) = spawned {
        // The machine refuses another thread: the job's host side hears it as a lost worker.
        shared.threads.fetch_sub(1, Ordering::AcqRel);
        eprintln!("codemode-executor: could not start an execution thread: {error}");
    }
}

/// One thread's life: run jobs, make a blank engine while idle, leave when not needed.
fn serve<E: Engine>(shared: &Arc<Shared>, first: Option<Job>, dedicated: bool) {
    let mut blank: Option<E::Blank> = None;
    let mut next = first;
    loop {
        if let Some(job) = next.take() {
            runtime::run::<E>(job, blank.take());
        }
        if dedicated {
            return;
        }
        // Blank engines are made for the kept threads only: a burst's extra threads would
        // otherwise each hold an engine nobody asked for.
        if blank.is_none() && lock(&shared.idle).len() < shared.keep {
            blank = catch_unwind(E::blank).ok();
        }
        let (sender, jobs) = crossbeam_channel::bounded(1);
        lock(&shared.idle).push(sender.clone());
        match jobs.recv_timeout(IDLE_EXIT_AFTER) {
            Ok(job) => next = Some(job),
            Err(_) => {
                let mut idle = lock(&shared.idle);
                let kept = idle.len() <= shared.keep;
                if kept {
                    drop(idle);
                    next = jobs.recv().ok();
                    continue;
                }
                idle.retain(|other| !other.same_channel(&sender));
                drop(idle);
                // A submitter that took our sender before we left gave its job to the channel.
                if let Ok(job) = jobs.try_recv() {
                    next = Some(job);
                    continue;
                }
                return;
            }
        }
    }
}
