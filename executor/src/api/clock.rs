//! A run's wall clock, paused while one of its calls is held for a person's decision.
//!
//! The deadline of a run is its start plus its timeout plus the time it spent held: a
//! person deciding takes no time from the program. While any call is held the deadline is
//! not due at all. Whoever keeps the deadline (the in-process watchdog and runtime, a
//! host's backstop for a worker or a daemon) asks [`RunClock::deadline`]; whoever holds a
//! call takes a [`Hold`]; a wire client that runs the program elsewhere hears each change
//! ([`RunClock::on_change`]) and tells the other side.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::sync::lock;

/// Told `true` when the first call is held and `false` when the last is released.
pub(crate) type ClockListener = Box<dyn Fn(bool) + Send + Sync>;

/// The held time of one run.
#[derive(Default)]
pub(crate) struct RunClock {
    state: Mutex<State>,
    listener: OnceLock<ClockListener>,
    /// The most held time that moves the deadline (`None`: no bound): a daemon's clock,
    /// held by a client it does not trust that far.
    cap: Option<Duration>,
}

#[derive(Default)]
struct State {
    holds: usize,
    /// When the current stretch of holding began.
    since: Option<Instant>,
    /// Held time of the stretches that ended.
    paused: Duration,
}

impl std::fmt::Debug for RunClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("RunClock").field("holds", &state.holds).field("paused", &state.paused).finish()
    }
}

/// Keeps its run's clock paused until dropped.
#[must_use = "the clock runs again when the hold is dropped"]
pub(crate) struct Hold {
    clock: Arc<RunClock>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.clock.release();
    }
}

impl RunClock {
    /// A clock that has not been held.
    pub(crate) fn new() -> Arc<RunClock> {
        Arc::new(RunClock::default())
    }

    /// A clock whose held time moves the deadline by `cap` at most; past it the deadline
    /// is due again even while held.
    pub(crate) fn capped(cap: Duration) -> Arc<RunClock> {
        Arc::new(RunClock { cap: Some(cap), ..RunClock::default() })
    }

    /// Pause the clock until the returned hold is dropped (holds nest).
    pub(crate) fn hold(self: &Arc<RunClock>) -> Hold {
        let first = {
            let mut state = lock(&self.state);
            state.holds += 1;
            if state.holds == 1 {
                state.since = Some(Instant::now());
            }
            state.holds == 1
        };
        if first {
            self.tell(true);
        }
        Hold { clock: self.clone() }
    }

    fn release(&self) {
        let last = {
            let mut state = lock(&self.state);
            state.holds = state.holds.saturating_sub(1);
            if state.holds == 0
                && let Some(since) = state.since.take()
            {
                state.paused += since.elapsed();
            }
            state.holds == 0
        };
        if last {
            self.tell(false);
        }
    }

    fn tell(&self, held: bool) {
        if let Some(listener) = self.listener.get() {
            listener(held);
        }
    }

    /// Hear each change: `true` when the clock stops, `false` when it runs again. One
    /// listener per clock (the wire client of the run); a second is ignored.
    pub(crate) fn on_change(&self, listener: ClockListener) {
        let held = lock(&self.state).holds > 0;
        if self.listener.set(listener).is_ok() && held {
            self.tell(true);
        }
    }

    /// Whether a call holds the clock now.
    #[cfg(test)]
    pub(crate) fn is_held(&self) -> bool {
        lock(&self.state).holds > 0
    }

    /// The time held so far, the current stretch included.
    #[cfg(test)]
    pub(crate) fn paused(&self) -> Duration {
        let state = lock(&self.state);
        state.paused + state.since.map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// The deadline of a run started at `start` with `timeout`: `None` while held (not due).
    pub(crate) fn deadline(&self, start: Instant, timeout: Duration) -> Option<Instant> {
        let state = lock(&self.state);
        let held = state.paused + state.since.map_or(Duration::ZERO, |since| since.elapsed());
        match self.cap {
            Some(cap) if held >= cap => start.checked_add(timeout + cap),
            _ if state.holds > 0 => None,
            _ => start.checked_add(timeout + held),
        }
    }
}

/// A run's deadline as its keepers read it: fixed, or moved by its clock's held time.
#[derive(Clone, Debug)]
pub(crate) struct Deadline {
    start: Instant,
    timeout: Duration,
    clock: Option<Arc<RunClock>>,
}

impl Deadline {
    pub(crate) fn new(start: Instant, timeout: Duration, clock: Option<Arc<RunClock>>) -> Deadline {
        Deadline { start, timeout, clock }
    }

    /// Whether the deadline has passed at `now` (never while a call is held).
    pub(crate) fn passed(&self, now: Instant) -> bool {
        self.due().is_some_and(|due| now >= due)
    }

    /// When it falls due, as known now; while held, one timeout from `now` (a time to look
    /// again, since a release moves it).
    pub(crate) fn next(&self, now: Instant) -> Instant {
        self.due().unwrap_or_else(|| now + self.timeout.max(Duration::from_millis(10)))
    }

    fn due(&self) -> Option<Instant> {
        match &self.clock {
            Some(clock) => clock.deadline(self.start, self.timeout),
            None => self.start.checked_add(self.timeout),
        }
    }
}

/// `future`'s output, or `None` once `deadline` has passed first (looked at again as it
/// moves: a host's backstop for a run that goes on elsewhere, a worker or a daemon).
pub(crate) async fn within<F: std::future::Future>(deadline: &Deadline, future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    loop {
        let next = tokio::time::Instant::from_std(deadline.next(Instant::now()));
        match tokio::time::timeout_at(next, &mut future).await {
            Ok(output) => return Some(output),
            Err(_) if deadline.passed(Instant::now()) => return None,
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Deadline, RunClock};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    #[test]
    fn held_time_moves_the_deadline_and_holds_nest() {
        let clock = RunClock::new();
        let start = Instant::now();
        let deadline = Deadline::new(start, Duration::from_millis(100), Some(clock.clone()));
        assert!(!deadline.passed(start + Duration::from_millis(99)));
        assert!(deadline.passed(start + Duration::from_millis(100)));
        let first = clock.hold();
        let second = clock.hold();
        assert!(!deadline.passed(start + Duration::from_secs(3600)), "never due while held");
        std::thread::sleep(Duration::from_millis(30));
        drop(first);
        assert!(clock.is_held());
        drop(second);
        assert!(!clock.is_held());
        assert!(clock.paused() >= Duration::from_millis(30));
        assert!(!deadline.passed(start + Duration::from_millis(120)), "moved by the held time");
    }

    #[test]
    fn the_listener_hears_the_first_hold_and_the_last_release() {
        let clock = RunClock::new();
        let heard = Arc::new(AtomicUsize::new(0));
        let count = heard.clone();
        clock.on_change(Box::new(move |held| {
            count.fetch_add(if held { 1 } else { 100 }, Ordering::SeqCst);
        }));
        let (a, b) = (clock.hold(), clock.hold());
        drop((a, b));
        assert_eq!(heard.load(Ordering::SeqCst), 101);
    }
}
