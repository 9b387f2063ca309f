//! The CPU time budget: the execution thread's own CPU clock, read by the watchdog.
//!
//! A run's CPU time is what its execution thread spends from the start of the run, read
//! from that thread's clock (`pthread_getcpuclockid`), so a loaded host does not fail a
//! program and a neighbour's work is never charged. A thread asleep on a call, a fetch or
//! a timer spends nothing; the brief wait awake for an answer (`spin`) is waiting too and
//! is credited back. The watchdog reads the clock at the earliest instant the budget
//! could be spent (the time left on it, since a thread spends CPU no faster than the wall
//! clock runs) and again by the same rule, so a waiting run costs one look per budget's
//! worth of wall time and a spinning one a few looks in all; the last look comes at most
//! [`LAST_LOOKS`] after the budget is spent.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::in_process::watchdog::Watchdog;

/// The least wait between two looks at a budget nearly spent: the most CPU a run can
/// spend past its budget before the watchdog sees it (with the watchdog's own delay).
pub(crate) const LAST_LOOKS: Duration = Duration::from_millis(2);

/// One thread's CPU clock, readable from any thread while that thread lives.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ThreadClock(libc::clockid_t);

impl ThreadClock {
    /// The calling thread's clock; `None` where the system has none.
    pub(crate) fn current() -> Option<ThreadClock> {
        let mut id: libc::clockid_t = 0;
        // SAFETY: `pthread_self()` names the calling thread, alive for the whole call, and
        // `id` is a valid place for the one clockid_t the call writes.
        let status = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &raw mut id) };
        (status == 0).then_some(ThreadClock(id))
    }

    /// The CPU time the thread has spent; `None` once it has exited (the id then names no
    /// thread and the call fails).
    pub(crate) fn now(self) -> Option<Duration> {
        let mut time = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `time` is a valid place for the one timespec the call writes; a clock id
        // naming no live thread makes the call fail with EINVAL, nothing more.
        let status = unsafe { libc::clock_gettime(self.0, &raw mut time) };
        let seconds = u64::try_from(time.tv_sec).ok()?;
        let nanos = u32::try_from(time.tv_nsec).ok()?;
        (status == 0).then(|| Duration::new(seconds, nanos))
    }
}

/// One run's CPU time: its thread's clock from the run's start, less the waits awake.
#[derive(Debug)]
pub(crate) struct CpuAccount {
    clock: ThreadClock,
    start: Duration,
    /// Nanoseconds of CPU spent waiting awake for answers, credited back.
    waited: AtomicU64,
}

impl CpuAccount {
    /// The account of a run starting now on the calling thread.
    fn start() -> Option<CpuAccount> {
        let clock = ThreadClock::current()?;
        Some(CpuAccount { clock, start: clock.now()?, waited: AtomicU64::new(0) })
    }

    /// The CPU time the run has spent (zero once its thread has gone).
    pub(crate) fn used(&self) -> Duration {
        let waited = Duration::from_nanos(self.waited.load(Ordering::Relaxed));
        self.clock.now().map_or(Duration::ZERO, |now| now.saturating_sub(self.start).saturating_sub(waited))
    }

    /// Run `wait` (a wait awake for an answer, on the run's thread) without charging its CPU.
    pub(crate) fn waiting<T>(&self, wait: impl FnOnce() -> T) -> T {
        let before = self.clock.now();
        let out = wait();
        if let (Some(before), Some(after)) = (before, self.clock.now()) {
            let spent = u64::try_from(after.saturating_sub(before).as_nanos()).unwrap_or(u64::MAX);
            self.waited.fetch_add(spent, Ordering::Relaxed);
        }
        out
    }
}

/// A run's CPU budget as the executor hands it to the runtime: started on the run's
/// thread, it has the watchdog look at that thread's clock until the run is `done` or the
/// budget is spent, when `on_spent` runs (on the watchdog's thread) once.
pub(crate) struct CpuWatch {
    pub(crate) limit: Duration,
    /// Raised when the run has settled: the watchdog looks no more.
    pub(crate) done: Arc<AtomicBool>,
    pub(crate) on_spent: Box<dyn FnOnce() + Send>,
}

impl CpuWatch {
    /// Start the budget on the calling thread (the run's); the account is what the run's
    /// waits awake credit back. `None` where the system gives no thread clock: the run
    /// then has only its wall clock.
    pub(crate) fn start(self, watchdog: &Watchdog) -> Option<Arc<CpuAccount>> {
        let account = Arc::new(CpuAccount::start()?);
        schedule(after(self.limit), account.clone(), self, watchdog.clone());
        Some(account)
    }
}

fn schedule(at: Instant, account: Arc<CpuAccount>, watch: CpuWatch, watchdog: Watchdog) {
    let done = watch.done.clone();
    let again = watchdog.clone();
    watchdog.at(at, Some(done), Box::new(move || look(account, watch, again)));
}

/// One look: the budget spent ends the run; else look again when it could be.
fn look(account: Arc<CpuAccount>, watch: CpuWatch, watchdog: Watchdog) {
    if watch.done.load(Ordering::Acquire) {
        return;
    }
    let used = account.used();
    if used >= watch.limit {
        (watch.on_spent)();
        return;
    }
    let next = after(watch.limit.saturating_sub(used).max(LAST_LOOKS));
    schedule(next, account, watch, watchdog);
}

/// The instant `wait` from now, or an hour from now if that is sooner: a budget of any
/// size (a request may ask for `u64::MAX` ms) is looked at again, never an overflow.
fn after(wait: Duration) -> Instant {
    Instant::now() + wait.min(LONGEST_WAIT)
}

/// The longest the watchdog waits between two looks at one budget.
const LONGEST_WAIT: Duration = Duration::from_secs(3600);

#[cfg(test)]
mod tests {
    use super::{CpuAccount, ThreadClock};
    use std::time::{Duration, Instant};

    #[test]
    fn a_sleeping_thread_spends_nothing_and_a_spinning_one_its_time() {
        let account = CpuAccount::start().expect("a thread clock");
        std::thread::sleep(Duration::from_millis(50));
        assert!(account.used() < Duration::from_millis(20), "asleep: {:?}", account.used());
        let until = Instant::now() + Duration::from_millis(30);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        assert!(account.used() > Duration::ZERO);
    }

    #[test]
    fn a_wait_awake_is_credited_back() {
        let account = CpuAccount::start().expect("a thread clock");
        account.waiting(|| {
            let until = Instant::now() + Duration::from_millis(30);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        });
        assert!(account.used() < Duration::from_millis(10), "credited: {:?}", account.used());
    }

    #[test]
    fn another_threads_clock_is_read_from_here_and_fails_once_it_exits() {
        let (send, receive) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            send.send(ThreadClock::current().expect("a thread clock")).unwrap();
            let until = Instant::now() + Duration::from_millis(20);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        });
        let clock = receive.recv().unwrap();
        thread.join().unwrap();
        // The thread has exited: its clock names no thread.
        assert_eq!(clock.now(), None);
    }
}
