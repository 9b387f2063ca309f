//! One cell: its state (the lines heard and handed out, what the run waits on, its end),
//! the task that awaits its run, and [`Cell`], the handle a caller waits on.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use codemode_protocol::{Outcome, OutcomeKind, texts};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{CELLS_REAPED_TOTAL, CellError, CellId, Shared, Until, Waited};
use crate::api::execute::ExecuteFuture;
use crate::api::request::Request;
use crate::api::watch::Event;
use crate::sync::lock;

/// Why a cell's task is asked to end its run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// [`Cell::terminate`].
    Terminated,
    /// Nobody waited on it for its time to live.
    Expired { ms: u128 },
    /// Past the cap on live cells, it was waited on least recently.
    Evicted { limit: usize },
    /// The [`super::Cells`] it belongs to went.
    Abandoned,
}

impl Stop {
    /// The outcome a run ended this way has, with `logs`.
    fn outcome(self, logs: Vec<String>) -> Outcome {
        let text = match self {
            Stop::Terminated | Stop::Abandoned => texts::CANCELLED.to_owned(),
            Stop::Expired { ms } => texts::CELL_EXPIRED.fill(&[&ms.to_string()]),
            Stop::Evicted { limit } => texts::CELL_EVICTED.fill(&[&limit.to_string()]),
        };
        Outcome::failure(OutcomeKind::Cancelled, text, logs)
    }

    /// The `reason` of the reaping metric and warning, for a stop nobody asked for.
    fn reason(self) -> Option<&'static str> {
        match self {
            Stop::Expired { .. } => Some("expired"),
            Stop::Evicted { .. } => Some("evicted"),
            Stop::Terminated | Stop::Abandoned => None,
        }
    }
}

/// Where the run is.
enum End {
    Running,
    /// Ended; the outcome not yet handed out.
    Settled(Outcome),
    /// The outcome was handed out (or dropped): the cell is gone.
    Claimed,
}

/// What a cell has heard of its run, and what it handed out.
struct Progress {
    /// Every line heard live, in order: a prefix of the outcome's logs.
    lines: Vec<String>,
    /// How many of `lines` were handed out.
    delivered: usize,
    /// An event was lost: no more lines are heard live.
    dropped: bool,
    calls: usize,
    timers: usize,
    /// Pending frontiers reached ([`Event::Waiting`]s heard).
    frontiers: u64,
    /// The run is at a frontier now: it reported waiting and nothing since.
    at_frontier: bool,
    /// `frontiers` as of the last running answer: a frontier wait answers one not yet
    /// reported, so repeated waits on a run that stays put do not spin.
    answered_frontiers: u64,
    end: End,
    /// When a wait last began or ended.
    last_waited: Instant,
    /// Waits in progress.
    waiters: usize,
    /// Why the task is asked to end the run, once asked.
    stop: Option<Stop>,
    /// Whether the cell is still on its table (found by id, counted live).
    listed: bool,
}

/// A cell's state, shared by its task, its handles and its table.
pub(crate) struct CellState {
    pub(crate) id: CellId,
    pub(crate) owner: Option<String>,
    progress: Mutex<Progress>,
    /// Woken on every change: a line, a frontier, the end.
    changed: Notify,
    /// Wakes the task to read `stop`.
    stop: Notify,
}

impl CellState {
    pub(crate) fn new(id: CellId, owner: Option<String>) -> CellState {
        let progress = Progress {
            lines: Vec::new(),
            delivered: 0,
            dropped: false,
            calls: 0,
            timers: 0,
            frontiers: 0,
            at_frontier: false,
            answered_frontiers: 0,
            end: End::Running,
            last_waited: Instant::now(),
            waiters: 0,
            stop: None,
            listed: true,
        };
        CellState { id, owner, progress: Mutex::new(progress), changed: Notify::new(), stop: Notify::new() }
    }

    /// Orders cells for eviction: first those with no wait in progress, then by the
    /// last wait, oldest first.
    pub(crate) fn eviction_rank(&self) -> (bool, Instant) {
        let progress = lock(&self.progress);
        (progress.waiters > 0, progress.last_waited)
    }

    /// End this cell (taken off its table already), said in a warning and counted.
    pub(crate) fn reap(&self, why: Stop) {
        let reason = why.reason().unwrap_or("ended");
        tracing::warn!(cell = %self.id, reason, "a cell was reaped: {}", why.outcome(Vec::new()).error_text().unwrap_or_default());
        metrics::counter!(CELLS_REAPED_TOTAL, "reason" => reason).increment(1);
        self.ask_to_stop(why);
    }

    /// End this cell with no warning: its `Cells` went.
    pub(crate) fn stop_quietly(&self) {
        self.ask_to_stop(Stop::Abandoned);
    }

    fn ask_to_stop(&self, why: Stop) {
        {
            let mut progress = lock(&self.progress);
            progress.listed = false;
            progress.stop.get_or_insert(why);
        }
        self.stop.notify_one();
    }

    /// What the run reported: lines, frontiers, calls, lost events.
    fn heard(&self, event: &Event) {
        {
            let mut progress = lock(&self.progress);
            match event {
                Event::Log { line, .. } => {
                    progress.at_frontier = false;
                    if !progress.dropped {
                        progress.lines.push(line.clone());
                    }
                }
                Event::Waiting { calls, timers } => {
                    (progress.calls, progress.timers) = (*calls, *timers);
                    progress.frontiers += 1;
                    progress.at_frontier = true;
                }
                Event::CallStarted { .. } => {
                    progress.calls += 1;
                    progress.at_frontier = false;
                }
                Event::CallEnded { .. } => {
                    progress.calls = progress.calls.saturating_sub(1);
                    progress.at_frontier = false;
                }
                Event::Dropped { .. } => progress.dropped = true,
                _ => return,
            }
        }
        self.changed.notify_waiters();
    }

    /// The run ended with `outcome` (unless a stop outcome was recorded first).
    fn settle(&self, outcome: Outcome) {
        {
            let mut progress = lock(&self.progress);
            if matches!(progress.end, End::Running) {
                progress.end = End::Settled(outcome);
            }
        }
        self.changed.notify_waiters();
    }

    /// The outcome with the lines not yet handed out, if the run ended; the cell is then
    /// gone (taken off `shared`'s table).
    fn claim(&self, progress: &mut Progress, shared: &Weak<Shared>) -> Option<Outcome> {
        if !matches!(progress.end, End::Settled(_)) {
            return None;
        }
        let End::Settled(outcome) = std::mem::replace(&mut progress.end, End::Claimed) else { return None };
        progress.listed = false;
        if let Some(shared) = shared.upgrade() {
            shared.forget(&self.id);
        }
        self.stop.notify_one();
        Some(rest_of(outcome, progress.delivered))
    }

    /// A running answer: the lines heard since the last answer.
    fn running(progress: &mut Progress) -> Waited {
        let logs = progress.lines[progress.delivered..].to_vec();
        progress.delivered = progress.lines.len();
        progress.answered_frontiers = progress.frontiers;
        Waited::Running { logs, calls_in_flight: progress.calls, timers: progress.timers }
    }

    /// When nobody will have waited on it for `ttl`; `None` while a wait is in progress.
    fn expiry(&self, ttl: Duration) -> Option<Instant> {
        let progress = lock(&self.progress);
        (progress.waiters == 0).then(|| later(progress.last_waited, ttl))
    }
}

/// `at` plus `duration`, at most thirty years on (a duration of any size is taken).
fn later(at: Instant, duration: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 24 * 3600);
    at.checked_add(duration.min(FAR)).unwrap_or(at)
}

/// `outcome` with its first `delivered` log lines left out (handed out already).
fn rest_of(mut outcome: Outcome, delivered: usize) -> Outcome {
    match &mut outcome {
        Outcome::Result { logs, .. } | Outcome::Error { logs, .. } => {
            logs.drain(..delivered.min(logs.len()));
        }
    }
    outcome
}

/// Start the task of `state`'s run of `request` on the current runtime; outside one the
/// cell is settled at once.
pub(crate) fn spawn(shared: &Arc<Shared>, state: Arc<CellState>, mut request: Request) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        state.settle(Outcome::failure(OutcomeKind::Invalid, texts::CELL_NO_RUNTIME, Vec::new()));
        return;
    };
    let listening = state.clone();
    let host = request.on_event.take();
    request = request.on_event(move |event| {
        listening.heard(event);
        if let Some(host) = &host {
            host(event);
        }
    });
    let (executor, ttl, weak) = (shared.executor(), shared.limits().time_to_live, Arc::downgrade(shared));
    runtime.spawn(async move {
        let guard = SettleOnDrop(state.clone());
        let outcome = run_until_end(&state, executor.execute(request), ttl).await;
        state.settle(outcome);
        keep_until_claimed(&state, ttl).await;
        drop(guard);
        if let Some(shared) = weak.upgrade() {
            shared.forget(&state.id);
        }
    });
}

/// Settles a cell whose task went before its run ended (the runtime shut down).
struct SettleOnDrop(Arc<CellState>);

impl Drop for SettleOnDrop {
    fn drop(&mut self) {
        let logs = {
            let progress = lock(&self.0.progress);
            if !matches!(progress.end, End::Running) {
                return;
            }
            progress.lines.clone()
        };
        self.0.settle(Stop::Abandoned.outcome(logs));
    }
}

/// The run's outcome, or the outcome of the stop that ended it first. Returning drops the
/// run, which ends its engine.
async fn run_until_end(state: &CellState, run: ExecuteFuture<'_>, ttl: Duration) -> Outcome {
    let mut run = std::pin::pin!(run);
    loop {
        let expiry = state.expiry(ttl).unwrap_or_else(|| later(Instant::now(), ttl));
        tokio::select! {
            outcome = &mut run => return outcome,
            () = state.stop.notified() => {}
            () = tokio::time::sleep_until(expiry) => {
                if state.expiry(ttl).is_some_and(|at| at <= Instant::now()) {
                    state.reap(Stop::Expired { ms: ttl.as_millis() });
                }
            }
        }
        let mut progress = lock(&state.progress);
        if let Some(stop) = progress.stop {
            return stop.outcome(std::mem::take(&mut progress.lines));
        }
    }
}

/// Keep a finished cell's outcome until it is handed out, the cell is taken off its
/// table, or nobody waited for the time to live (then the outcome is dropped).
async fn keep_until_claimed(state: &CellState, ttl: Duration) {
    loop {
        {
            let progress = lock(&state.progress);
            if !progress.listed || !matches!(progress.end, End::Settled(_)) {
                return;
            }
        }
        let expiry = state.expiry(ttl).unwrap_or_else(|| later(Instant::now(), ttl));
        tokio::select! {
            () = state.stop.notified() => {}
            () = tokio::time::sleep_until(expiry) => {
                if state.expiry(ttl).is_some_and(|at| at <= Instant::now()) {
                    tracing::warn!(cell = %state.id, reason = "unclaimed", "a finished cell's outcome was dropped: nobody waited for it");
                    metrics::counter!(CELLS_REAPED_TOTAL, "reason" => "unclaimed").increment(1);
                    let mut progress = lock(&state.progress);
                    progress.end = End::Claimed;
                    progress.listed = false;
                    return;
                }
            }
        }
    }
}

/// A handle on a cell: wait on it, or end it. Handles of one cell (from
/// [`super::Cells::start`] and [`super::Cells::find`]) see the same run, and each line
/// is handed out to one answer only.
#[derive(Clone)]
pub struct Cell {
    state: Arc<CellState>,
    cells: Weak<Shared>,
}

impl Cell {
    pub(crate) fn new(state: Arc<CellState>, cells: Weak<Shared>) -> Cell {
        Cell { state, cells }
    }

    /// The cell's id, by which [`super::Cells::find`] finds it.
    pub fn id(&self) -> &CellId {
        &self.state.id
    }

    /// Wait until the run ends or `yield_after` passes: [`Waited::Settled`] with the
    /// outcome (the cell is then gone), or [`Waited::Running`] with the lines written
    /// since the last answer. `Err` once the outcome was handed out or the cell reaped
    /// and handed out.
    pub async fn wait(&self, yield_after: Duration) -> Result<Waited, CellError> {
        self.wait_until(yield_after, Until::YieldAfter).await
    }

    /// [`Cell::wait`], answering early as `until` says.
    pub async fn wait_until(&self, yield_after: Duration, until: Until) -> Result<Waited, CellError> {
        let deadline = later(Instant::now(), yield_after);
        self.begin_wait()?;
        let _waiting = Waiting(&self.state);
        loop {
            let changed = self.state.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            {
                let mut progress = lock(&self.state.progress);
                if let Some(outcome) = self.state.claim(&mut progress, &self.cells) {
                    return Ok(Waited::Settled(outcome));
                }
                if matches!(progress.end, End::Claimed) {
                    return Err(self.unknown());
                }
                // At a frontier no answer has reported yet, reached before this wait began
                // or during it.
                if until == Until::Frontier
                    && progress.at_frontier
                    && progress.frontiers > progress.answered_frontiers
                {
                    return Ok(CellState::running(&mut progress));
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                let mut progress = lock(&self.state.progress);
                return Ok(match self.state.claim(&mut progress, &self.cells) {
                    Some(outcome) => Waited::Settled(outcome),
                    None => CellState::running(&mut progress),
                });
            }
        }
    }

    /// Count a wait in.
    fn begin_wait(&self) -> Result<(), CellError> {
        let mut progress = lock(&self.state.progress);
        if matches!(progress.end, End::Claimed) {
            return Err(self.unknown());
        }
        progress.waiters += 1;
        progress.last_waited = Instant::now();
        Ok(())
    }

    /// End the run: its engine ends, and the answer is its outcome, kind `cancelled` with
    /// `texts::CANCELLED` and the lines no earlier answer handed out. A run that had ended
    /// already answers the outcome it ended with. The cell is then gone.
    pub async fn terminate(&self) -> Result<Outcome, CellError> {
        {
            let mut progress = lock(&self.state.progress);
            if matches!(progress.end, End::Claimed) {
                return Err(self.unknown());
            }
            progress.stop.get_or_insert(Stop::Terminated);
        }
        self.state.stop.notify_one();
        loop {
            let changed = self.state.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            {
                let mut progress = lock(&self.state.progress);
                if let Some(outcome) = self.state.claim(&mut progress, &self.cells) {
                    return Ok(outcome);
                }
                if matches!(progress.end, End::Claimed) {
                    return Err(self.unknown());
                }
            }
            changed.await;
        }
    }

    fn unknown(&self) -> CellError {
        CellError::Unknown(self.state.id.to_string())
    }
}

/// A wait in progress: counted out (and its end noted as the last wait) when dropped.
struct Waiting<'a>(&'a CellState);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut progress = lock(&self.0.progress);
        progress.waiters = progress.waiters.saturating_sub(1);
        progress.last_waited = Instant::now();
    }
}

impl std::fmt::Debug for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cell").field("id", &self.state.id).finish()
    }
}
