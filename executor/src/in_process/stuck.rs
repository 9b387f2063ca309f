//! Stuck engines: an engine still running [`STUCK_AFTER`] after its stop (the deadline, a
//! cancel, the memory limit) is counted until it returns.
//!
//! The outcome never waits for an engine (the watchdog delivers a deadline's, a cancel
//! drops the run); this only says which threads a program still holds. Each execution has
//! one [`StopWatch`]: its first stop asks the watchdog to look at the execution's
//! `ended` signal [`STUCK_AFTER`] later, and an engine found running is counted, logged
//! (a `tracing` warning in the span the run was started in: a daemon's names the
//! connection and the execution) and looked at again every [`RECHECK`] until it ends,
//! when the count goes down. Nothing here touches the engine.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::in_process::watchdog::Watchdog;
use crate::runtime::Control;

/// How long an engine may take to be gone after its stop before it counts as stuck.
pub const STUCK_AFTER: Duration = Duration::from_millis(50);

/// How often a stuck engine is looked at again.
const RECHECK: Duration = Duration::from_millis(50);

/// How long an engine may take to stop after its deadline before it counts as abandoned
/// ([`crate::Executor::abandoned_engines`], with its line on stderr).
const ABANDON_AFTER: Duration = Duration::from_secs(1);

/// What stopped an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    Deadline,
    Cancel,
    Memory,
    CpuTime,
}

impl Cause {
    fn name(self) -> &'static str {
        match self {
            Cause::Deadline => "deadline",
            Cause::Cancel => "cancel",
            Cause::Memory => "memory",
            Cause::CpuTime => "cpu time",
        }
    }
}

/// One executor's counts.
#[derive(Debug, Default)]
pub(crate) struct Stuck {
    /// Engines stuck now.
    now: AtomicUsize,
    /// Engines still running [`ABANDON_AFTER`] after their deadline, ever.
    abandoned: AtomicU64,
}

impl Stuck {
    pub(crate) fn now(&self) -> usize {
        self.now.load(Ordering::Acquire)
    }

    pub(crate) fn abandoned(&self) -> u64 {
        self.abandoned.load(Ordering::Relaxed)
    }
}

/// One execution's watch over its stop.
pub(crate) struct StopWatch {
    control: Arc<Control>,
    counts: Arc<Stuck>,
    watchdog: Watchdog,
    /// The span the run was started in, for the log lines.
    span: tracing::Span,
    /// Raised by the first stop: later ones (a timeout's ticket dropped after the
    /// deadline stopped the engine) are the same stop.
    stopped: AtomicBool,
}

impl StopWatch {
    pub(crate) fn new(control: Arc<Control>, counts: Arc<Stuck>, watchdog: Watchdog) -> Arc<StopWatch> {
        Arc::new(StopWatch {
            control,
            counts,
            watchdog,
            span: tracing::Span::current(),
            stopped: AtomicBool::new(false),
        })
    }

    /// The engine was told to stop, for `cause`: look at it [`STUCK_AFTER`] from now.
    pub(crate) fn stopped(self: &Arc<StopWatch>, cause: Cause) {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        let at = Instant::now();
        let watch = self.clone();
        self.watchdog.at(at + STUCK_AFTER, None, Box::new(move || watch.look(cause, at, Seen::default())));
    }

    /// Whether the engine is gone; if not, count it (the first time) and look again later.
    fn look(self: Arc<StopWatch>, cause: Cause, stopped_at: Instant, mut seen: Seen) {
        let ended = self.control.ended();
        let counts = &self.counts;
        let since = stopped_at.elapsed();
        if ended {
            if seen.counted {
                let now = counts.now.fetch_sub(1, Ordering::AcqRel) - 1;
                let after_ms = since.as_millis() as u64;
                tracing::info!(parent: &self.span, cause = cause.name(), after_ms, stuck = now, "stuck engine ended");
            }
            return;
        }
        if !seen.counted {
            seen.counted = true;
            let now = counts.now.fetch_add(1, Ordering::AcqRel) + 1;
            let after_ms = STUCK_AFTER.as_millis() as u64;
            tracing::warn!(
                parent: &self.span,
                cause = cause.name(),
                after_ms,
                stuck = now,
                "engine stuck: still running after its stop; its thread is held until it returns"
            );
        }
        // Once past the abandon grace: the line on stderr `abandoned_engines` promises.
        if cause == Cause::Deadline && since >= ABANDON_AFTER && !seen.abandoned {
            seen.abandoned = true;
            counts.abandoned.fetch_add(1, Ordering::Relaxed);
            eprintln!("codemode-executor: {}", codemode_protocol::texts::ENGINE_UNSTOPPABLE);
        }
        let watchdog = self.watchdog.clone();
        watchdog.at(Instant::now() + RECHECK, None, Box::new(move || self.look(cause, stopped_at, seen)));
    }
}

/// What a stuck engine's looks have done so far.
#[derive(Clone, Copy, Default)]
struct Seen {
    /// Counted as stuck.
    counted: bool,
    /// Counted as abandoned.
    abandoned: bool,
}
