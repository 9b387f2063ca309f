//! Execution threads: each live execution runs on a thread of its own, so the operating
//! system preempts a busy program in favour of every other execution that has work.
//!
//! Threads are kept idle between executions and leave after a while without work beyond
//! the configured number. As many warm engines as kept threads are kept ready (made ahead
//! of demand on idle threads, the runtime's built-ins booted in them), and a job goes to
//! a thread holding one first; taking one sets an idle thread to making the next. A thread
//! whose run ended keeps its engine renewed (where the engine can be) as its next warm
//! one, instead of freeing it and making another. A thread stuck in a native call past
//! its deadline holds only its own execution: new executions take other threads, so
//! capacity never shrinks.

use std::panic::catch_unwind;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Sender;

use crate::api::config::Limits;
use crate::engine::Engine;
use crate::runtime::{self, Job, Live, Warm};
use crate::sync::lock;

/// An idle thread beyond the kept ones leaves after this long without work.
const IDLE_EXIT_AFTER: Duration = Duration::from_secs(10);

/// A renewed engine beyond the kept warm ones (a burst's thread's) is freed after this
/// long without work: it holds the engine and its seal's copy, about 400 KiB.
const SURPLUS_WARM_FOR: Duration = Duration::from_secs(1);

/// Stack of an execution thread beyond the engine's stack limit: room for the host's frames.
const STACK_MARGIN_BYTES: usize = 8 << 20;

/// The stack of a kept thread; a request asking for a deeper engine stack gets a thread of its own.
const THREAD_STACK_BYTES: usize = 16 << 20;

/// What a thread is handed.
enum Work {
    Run(Box<Job>),
    /// Make a warm engine, then wait for a job: the kept warm engines are short.
    Warm,
}

/// How a job reaches a thread: each thread has one channel for its whole life. It holds
/// at most a `Warm` and then a `Run`, so a send never blocks.
type Door = Sender<Work>;

/// The threads that can take a job now or soon, by what they hold.
#[derive(Default)]
struct Idle {
    /// Waiting, with a warm engine.
    warm: Vec<Door>,
    /// Making a warm engine: a job given now runs as soon as it is made.
    warming: Vec<Door>,
    /// Waiting, without an engine.
    cold: Vec<Door>,
}

impl Idle {
    fn waiting(&self) -> usize {
        self.warm.len() + self.cold.len()
    }

    /// A thread for a job: one with a warm engine, else one about to have it (sooner than
    /// any other thread could make one), else one without.
    fn take(&mut self) -> Option<Door> {
        self.warm.pop().or_else(|| self.warming.pop()).or_else(|| self.cold.pop())
    }

    /// Whether the warm engines ready or being made are fewer than `keep`.
    fn short(&self, keep: usize) -> bool {
        self.warm.len() + self.warming.len() < keep
    }

    /// Set waiting threads without an engine to making one until `keep` are ready or on the way.
    fn replenish(&mut self, keep: usize) {
        while self.short(keep) {
            let Some(thread) = self.cold.pop() else { return };
            // A thread that left after its idle wait is simply gone.
            if thread.send(Work::Warm).is_ok() {
                self.warming.push(thread);
            }
        }
    }

    fn remove(list: &mut Vec<Door>, door: &Door) -> bool {
        let before = list.len();
        list.retain(|other| !other.same_channel(door));
        list.len() != before
    }
}

struct Shared {
    idle: Mutex<Idle>,
    /// Threads kept even when idle, and warm engines kept ready.
    keep: usize,
    /// Executions holding an engine, or about to.
    live: Arc<AtomicUsize>,
    threads: AtomicUsize,
    spawned: AtomicUsize,
    spawn: fn(&Arc<Shared>, Option<Job>, usize),
    /// The memory and stack limits warm engines are made for: the executor's own, which
    /// its requests have unless they ask otherwise (V8 fixes a heap limit when made).
    warm_limits: (usize, usize),
}

/// The execution threads of one executor, for one engine.
#[derive(Clone)]
pub(crate) struct Pool {
    shared: Arc<Shared>,
}

impl Pool {
    /// A pool for engine `E` keeping `keep` threads ready.
    pub(crate) fn new<E: Engine + 'static>(keep: usize, limits: &Limits) -> Pool {
        let shared = Arc::new(Shared {
            idle: Mutex::default(),
            keep: keep.max(1),
            live: Arc::default(),
            threads: AtomicUsize::new(0),
            spawned: AtomicUsize::new(0),
            spawn: spawn_thread::<E>,
            warm_limits: (limits.memory_limit_bytes, limits.stack_limit_bytes),
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
        let mut work = Work::Run(Box::new(job));
        loop {
            let thread = {
                let mut idle = lock(&self.shared.idle);
                let thread = idle.take();
                idle.replenish(self.shared.keep);
                thread
            };
            match thread {
                // A thread that left after its idle wait gives the job back.
                Some(thread) => match thread.send(work) {
                    Ok(()) => return,
                    Err(returned) => work = returned.0,
                },
                None => {
                    let Work::Run(job) = work else { return };
                    return (self.shared.spawn)(&self.shared, Some(*job), THREAD_STACK_BYTES);
                }
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

    /// Idle threads holding a warm engine.
    pub(crate) fn warm_engines(&self) -> usize {
        lock(&self.shared.idle).warm.len()
    }
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

/// One thread's life: run jobs, make a warm engine when the kept ones are short, leave
/// when not needed.
fn serve<E: Engine>(shared: &Arc<Shared>, first: Option<Job>, dedicated: bool) {
    let (door, work) = crossbeam_channel::bounded(2);
    let mut warm: Option<Warm<E>> = None;
    // A new kept thread makes its engine at once; a burst's extra threads make none: they
    // would each hold an engine nobody asked for.
    let mut warming = first.is_none() && {
        let mut idle = lock(&shared.idle);
        let short = idle.short(shared.keep);
        if short {
            idle.warming.push(door.clone());
        }
        short
    };
    let mut next = first.map(|job| Work::Run(Box::new(job)));
    loop {
        match next.take() {
            Some(Work::Run(job)) => {
                // The engine is renewed (or dropped) once the host has the outcome, before
                // this goes on: a renewed engine is this thread's next warm one.
                warm = runtime::run::<E>(*job, warm.take(), !dedicated);
                if dedicated {
                    return;
                }
                if warm.is_none() {
                    let mut idle = lock(&shared.idle);
                    warming = idle.short(shared.keep);
                    if warming {
                        idle.warming.push(door.clone());
                    }
                }
            }
            // The thread that asked moved this one to the warming list.
            Some(Work::Warm) => warming = true,
            None => {}
        }
        if warming {
            warming = false;
            let (memory, stack) = shared.warm_limits;
            warm = catch_unwind(|| Warm::make(memory, stack, true)).ok().and_then(Result::ok);
            let mut idle = lock(&shared.idle);
            // Still listed: no job came while the engine was made, so wait with it.
            if Idle::remove(&mut idle.warming, &door) {
                if warm.is_some() { idle.warm.push(door.clone()) } else { idle.cold.push(door.clone()) }
            }
        } else if warm.is_some() {
            let mut idle = lock(&shared.idle);
            let surplus = !idle.short(shared.keep);
            idle.warm.push(door.clone());
            drop(idle);
            if surplus {
                match work.recv_timeout(SURPLUS_WARM_FOR) {
                    Ok(got) => {
                        next = Some(got);
                        continue;
                    }
                    Err(_) => {
                        let mut idle = lock(&shared.idle);
                        if !Idle::remove(&mut idle.warm, &door) {
                            // A submitter took this thread meanwhile: its work is in the channel.
                            drop(idle);
                            next = work.recv().ok();
                            continue;
                        }
                        idle.cold.push(door.clone());
                        drop(idle);
                        warm = None;
                    }
                }
            }
        } else {
            lock(&shared.idle).cold.push(door.clone());
        }
        match work.recv_timeout(IDLE_EXIT_AFTER) {
            Ok(got) => next = Some(got),
            Err(_) => {
                let mut idle = lock(&shared.idle);
                if idle.waiting() <= shared.keep {
                    drop(idle);
                    next = work.recv().ok();
                    continue;
                }
                let listed = Idle::remove(&mut idle.warm, &door) || Idle::remove(&mut idle.cold, &door);
                // A thread leaving with a warm engine leaves the kept ones short: a cold
                // thread that stays makes the next.
                idle.replenish(shared.keep);
                drop(idle);
                // A submitter that took this thread before it left gave its work to the channel.
                if !listed {
                    next = work.recv().ok();
                    continue;
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Door, Idle, Work};

    fn door() -> (Door, crossbeam_channel::Receiver<Work>) {
        crossbeam_channel::bounded(2)
    }

    #[test]
    fn a_job_goes_to_a_warm_engine_then_one_being_made_then_a_cold_thread() {
        let (warm, _w) = door();
        let (warming, _m) = door();
        let (cold, _c) = door();
        let mut idle =
            Idle { warm: vec![warm.clone()], warming: vec![warming.clone()], cold: vec![cold.clone()] };
        assert!(idle.take().is_some_and(|door| door.same_channel(&warm)));
        assert!(idle.take().is_some_and(|door| door.same_channel(&warming)));
        assert!(idle.take().is_some_and(|door| door.same_channel(&cold)));
        assert!(idle.take().is_none());
    }

    #[test]
    fn taking_a_warm_engine_sets_cold_threads_to_making_the_kept_number() {
        let threads: Vec<_> = (0..3).map(|_| door()).collect();
        let mut idle =
            Idle { cold: threads.iter().map(|(door, _)| door.clone()).collect(), ..Idle::default() };
        idle.replenish(2);
        assert_eq!((idle.warm.len(), idle.warming.len(), idle.cold.len()), (0, 2, 1));
        let asked: Vec<bool> =
            threads.iter().map(|(_, work)| matches!(work.try_recv(), Ok(Work::Warm))).collect();
        assert_eq!(asked, [false, true, true], "the newest waiting threads are asked");
        // A thread that has left is passed over.
        let (gone, receiver) = door();
        drop(receiver);
        let mut idle = Idle { cold: vec![threads[0].0.clone(), gone], ..Idle::default() };
        idle.replenish(1);
        assert_eq!((idle.warming.len(), idle.cold.len()), (1, 0));
        assert!(idle.warming[0].same_channel(&threads[0].0));
    }
}
