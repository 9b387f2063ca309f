//! Cells: runs a caller resumes. A run started in a cell hands control back after a while
//! with the log lines written so far, and goes on; the caller waits on it again, by its
//! handle or its id, until the outcome.
//!
//! Built above [`Execute`] alone, so it works the same in-process, under process
//! isolation and through a daemon, on either engine: a cell is a task on the caller's
//! Tokio runtime awaiting `execute`, and its request's [`crate::Request::on_event`] is
//! what it hears of the run as it goes (log lines, what the run waits on).
//!
//! Invariants:
//! - The log lines of every answer of one cell, concatenated, are exactly the outcome's
//!   logs: no line lost or repeated. Lines handed out live are a prefix of the outcome's
//!   logs; the outcome hands out the rest. After events were dropped
//!   ([`crate::Event::Dropped`]) no more lines are handed out live, and the outcome
//!   still hands out all the rest.
//! - An outcome whose run never yielded is exactly what `execute` returns.
//! - Memory is bounded: at most [`CellLimits::max_live`] cells are kept (starting one
//!   more ends the one waited on least recently), a cell nobody waits on for
//!   [`CellLimits::time_to_live`] is ended, and a finished cell's outcome is dropped
//!   when it is handed out or when its time to live passes. Ending a cell drops its
//!   `execute` future, which ends its engine on every executor. None of this makes
//!   another execution fail; each is a `tracing` warning and a count of
//!   [`CELLS_REAPED_TOTAL`].

mod cell;

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_protocol::{Outcome, texts};

use crate::api::execute::Execute;
use crate::api::request::Request;
use crate::sync::lock;

pub use cell::Cell;
use cell::{CellState, Stop};

/// Cells ended before their outcome was handed out, by `reason`: `expired` (nobody waited
/// for the time to live), `evicted` (past the cap on live cells), `unclaimed` (finished,
/// and nobody took the outcome within the time to live).
pub const CELLS_REAPED_TOTAL: &str = "codemode_cells_reaped_total";

/// The bounds of a [`Cells`]. It is `#[non_exhaustive]`: start from
/// [`CellLimits::default`] and chain the setters of the same names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CellLimits {
    /// A cell nobody waits on for this long is ended (kind `cancelled`,
    /// `texts::CELL_EXPIRED`), and a finished one's outcome dropped. Default 10 minutes.
    pub time_to_live: Duration,
    /// Cells kept at once (running, or finished with the outcome not yet handed out);
    /// starting one more ends the one waited on least recently (`texts::CELL_EVICTED`).
    /// Default [`DEFAULT_MAX_LIVE_CELLS`]; 0 is taken as 1.
    pub max_live: usize,
}

/// [`CellLimits::max_live`] unless set.
pub const DEFAULT_MAX_LIVE_CELLS: usize = 64;

/// [`CellLimits::time_to_live`] unless set.
pub const DEFAULT_CELL_TIME_TO_LIVE: Duration = Duration::from_secs(600);

impl Default for CellLimits {
    fn default() -> CellLimits {
        CellLimits { time_to_live: DEFAULT_CELL_TIME_TO_LIVE, max_live: DEFAULT_MAX_LIVE_CELLS }
    }
}

crate::api::config::setters!(CellLimits {
    /// With this time to live.
    time_to_live: Duration,
    /// With this cap on cells kept at once.
    max_live: usize,
});

/// A cell's id: 128 random bits in hex, so that it cannot be guessed (ownership is
/// checked all the same, [`Cells::find_owned`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CellId(String);

impl CellId {
    fn random() -> CellId {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        // Each RandomState is keyed from the system's random source (then stepped).
        let (a, b) = (RandomState::new().hash_one(n), RandomState::new().hash_one(!n));
        CellId(format!("{a:016x}{b:016x}"))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for CellId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a cell could not be found or waited on. Its Display is the pinned text.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CellError {
    /// No live cell has this id (for this owner): its outcome was handed out, it was
    /// ended, or it never existed (`texts::CELL_UNKNOWN`).
    Unknown(String),
}

impl std::fmt::Display for CellError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CellError::Unknown(id) => f.write_str(&texts::CELL_UNKNOWN.fill(&[id])),
        }
    }
}

impl std::error::Error for CellError {}

/// What a wait answers.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Waited {
    /// The run ended: its outcome, with the log lines no earlier answer handed out.
    Settled(Outcome),
    /// The run goes on.
    Running {
        /// The log lines written since the last answer, in order.
        logs: Vec<String>,
        /// Tool and fetch calls awaiting an answer, as last heard.
        calls_in_flight: usize,
        /// Timers pending, as of the run's last wait.
        timers: usize,
    },
}

/// When a wait answers, besides the run's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Until {
    /// Only at `yield_after`.
    #[default]
    YieldAfter,
    /// Also as soon as the run is at a pending frontier that no earlier answer reported
    /// (reached before the wait began or during it): it has nothing to run until a call
    /// answers or a timer falls due ([`crate::Event::Waiting`]). A run that stays at the
    /// frontier it was last reported at is waited on until it moves, so repeated waits
    /// do not spin.
    /// A model that waits this way sees the results of its calls as soon as they stop
    /// making progress, rather than at a fixed interval.
    Frontier,
}

/// Runs in cells over one executor, found again by id. Cheap to clone (a clone is the
/// same set of cells); dropping the last clone ends every cell still running.
#[derive(Clone)]
pub struct Cells {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    executor: Arc<dyn Execute>,
    limits: CellLimits,
    table: Mutex<HashMap<CellId, Arc<CellState>>>,
}

impl Cells {
    /// Cells running their programs on `executor`, bounded by `limits`.
    pub fn new(executor: Arc<dyn Execute>, limits: CellLimits) -> Cells {
        let limits = CellLimits { max_live: limits.max_live.max(1), ..limits };
        Cells { shared: Arc::new(Shared { executor, limits, table: Mutex::new(HashMap::new()) }) }
    }

    /// The bounds in force.
    pub fn limits(&self) -> CellLimits {
        self.shared.limits
    }

    /// Start `request` in a new cell, as a task on the current Tokio runtime. Past
    /// [`CellLimits::max_live`] the cell waited on least recently is ended first. Outside
    /// a Tokio runtime the cell is settled at once (kind `invalid`, `texts::CELL_NO_RUNTIME`).
    pub fn start(&self, request: Request) -> Cell {
        self.start_owned(None, request)
    }

    /// [`Cells::start`] for `owner` (such as an MCP session): only [`Cells::find_owned`]
    /// with the same owner finds it.
    pub fn start_owned(&self, owner: Option<String>, request: Request) -> Cell {
        let state = Arc::new(CellState::new(CellId::random(), owner));
        self.make_room();
        lock(&self.shared.table).insert(state.id.clone(), state.clone());
        cell::spawn(&self.shared, state.clone(), request);
        Cell::new(state, Arc::downgrade(&self.shared))
    }

    /// The cell `id` started with no owner.
    pub fn find(&self, id: &str) -> Result<Cell, CellError> {
        self.find_owned(None, id)
    }

    /// The cell `id` started by `owner`; a cell of another owner is unknown to this one.
    pub fn find_owned(&self, owner: Option<&str>, id: &str) -> Result<Cell, CellError> {
        let table = lock(&self.shared.table);
        match table.get(&CellId(id.to_owned())) {
            Some(state) if state.owner.as_deref() == owner => {
                Ok(Cell::new(state.clone(), Arc::downgrade(&self.shared)))
            }
            _ => Err(CellError::Unknown(id.to_owned())),
        }
    }

    /// Cells kept now: running, or finished with the outcome not yet handed out.
    pub fn live(&self) -> usize {
        lock(&self.shared.table).len()
    }

    /// Under the cap, end the cells waited on least recently (one with a wait in
    /// progress last).
    fn make_room(&self) {
        let max = self.shared.limits.max_live;
        loop {
            let victim = {
                let mut table = lock(&self.shared.table);
                if table.len() < max {
                    return;
                }
                let oldest = table.values().min_by_key(|state| state.eviction_rank()).map(|s| s.id.clone());
                oldest.and_then(|id| table.remove(&id))
            };
            let Some(victim) = victim else { return };
            victim.reap(Stop::Evicted { limit: max });
        }
    }
}

impl Shared {
    /// Take `id` off the table (it finished and was handed out, or was reaped).
    pub(crate) fn forget(&self, id: &CellId) {
        lock(&self.table).remove(id);
    }

    pub(crate) fn limits(&self) -> CellLimits {
        self.limits
    }

    pub(crate) fn executor(&self) -> Arc<dyn Execute> {
        self.executor.clone()
    }
}

impl Drop for Shared {
    /// The last handle on the cells went: nobody can wait on them any more.
    fn drop(&mut self) {
        let table = std::mem::take(&mut *lock(&self.table));
        for state in table.into_values() {
            state.stop_quietly();
        }
    }
}

impl std::fmt::Debug for Cells {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cells").field("limits", &self.shared.limits).field("live", &self.live()).finish()
    }
}
