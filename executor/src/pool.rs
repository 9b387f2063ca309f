//! The worker pool: one shared queue of jobs, worker threads sized to the machine that
//! take them, and the replacement of a worker stuck inside one engine call.
//!
//! Any idle worker takes the next job, so a worker busy with a long program never holds
//! up jobs queued behind it. A worker busy inside a single engine call for longer than
//! [`STUCK_AFTER`] retires (it finishes its live executions and takes no new ones) and a
//! fresh worker takes its place, up to [`MAX_THREADS_PER_WORKER`] threads per worker slot.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::engine::Job;
use crate::engine::quickjs::QuickJs;
use crate::watchdog::{self, Watch};
use crate::worker::{self, WorkerMessage};

/// A worker inside one engine call this long is replaced.
pub(crate) const STUCK_AFTER: Duration = Duration::from_millis(250);

/// The pool never runs more than this many threads per configured worker.
pub(crate) const MAX_THREADS_PER_WORKER: usize = 4;

/// What the pool and the watchdog know of one worker thread.
pub(crate) struct WorkerState {
    pub(crate) inbox: Sender<WorkerMessage>,
    /// Microseconds since the pool's epoch (plus one) at which the current engine call
    /// began; 0 while the worker is not inside an engine.
    pub(crate) busy_since: AtomicU64,
    /// Takes no new jobs; exits when its live executions are done.
    pub(crate) retiring: AtomicBool,
    pub(crate) exited: AtomicBool,
    /// Executions with an engine on this worker, retained ones included.
    pub(crate) live: AtomicUsize,
    pub(crate) epoch: Instant,
}

impl WorkerState {
    pub(crate) fn enter_engine(&self) {
        let micros = u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX - 1);
        self.busy_since.store(micros + 1, Ordering::Release);
    }

    pub(crate) fn leave_engine(&self) {
        self.busy_since.store(0, Ordering::Release);
    }

    fn busy_for(&self) -> Option<Duration> {
        match self.busy_since.load(Ordering::Acquire) {
            0 => None,
            since => Some(self.epoch.elapsed().saturating_sub(Duration::from_micros(since - 1))),
        }
    }
}

pub(crate) struct Pool {
    jobs: Sender<Job>,
    jobs_queue: Receiver<Job>,
    workers: Mutex<Vec<Arc<WorkerState>>>,
    size: usize,
    watchdog: Sender<Watch>,
    epoch: Instant,
    spawned: AtomicUsize,
}

impl Pool {
    pub(crate) fn new(size: usize) -> Arc<Pool> {
        let size = size.max(1);
        let (jobs, jobs_queue) = crossbeam_channel::unbounded();
        let pool = Arc::new_cyclic(|weak| Pool {
            jobs,
            jobs_queue,
            workers: Mutex::new(Vec::new()),
            size,
            watchdog: watchdog::spawn(weak.clone()),
            epoch: Instant::now(),
            spawned: AtomicUsize::new(0),
        });
        for _ in 0..size {
            pool.spawn_worker();
        }
        pool
    }

    fn spawn_worker(&self) {
        let index = self.spawned.fetch_add(1, Ordering::Relaxed);
        let state = worker::spawn::<QuickJs>(index, self.jobs_queue.clone(), self.epoch);
        self.lock_workers().push(state);
    }

    fn lock_workers(&self) -> std::sync::MutexGuard<'_, Vec<Arc<WorkerState>>> {
        self.workers.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queue a job for the next idle worker; `false` if the pool is gone.
    pub(crate) fn submit(&self, job: Job) -> bool {
        self.jobs.send(job).is_ok()
    }

    /// Hand the watchdog an execution's deadline.
    pub(crate) fn watch(&self, watch: Watch) {
        let _ = self.watchdog.send(watch);
    }

    /// Executions holding an engine or queued for one.
    pub(crate) fn live_engines(&self) -> usize {
        self.jobs_queue.len()
            + self.lock_workers().iter().map(|w| w.live.load(Ordering::Relaxed)).sum::<usize>()
    }

    /// Worker threads running now (retiring ones included).
    pub(crate) fn threads(&self) -> usize {
        self.lock_workers().iter().filter(|w| !w.exited.load(Ordering::Relaxed)).count()
    }

    /// Retire every worker stuck inside one engine call and start one in its place.
    pub(crate) fn replace_stuck_workers(&self) {
        let mut workers = self.lock_workers();
        workers.retain(|w| !w.exited.load(Ordering::Relaxed));
        let stuck: Vec<Arc<WorkerState>> = workers
            .iter()
            .filter(|w| !w.retiring.load(Ordering::Relaxed) && w.busy_for().is_some_and(|d| d >= STUCK_AFTER))
            .cloned()
            .collect();
        drop(workers);
        for worker in stuck {
            if self.threads() >= self.size * MAX_THREADS_PER_WORKER {
                break;
            }
            worker.retiring.store(true, Ordering::Release);
            self.spawn_worker();
        }
    }
}
