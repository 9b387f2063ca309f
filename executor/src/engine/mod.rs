//! The engine boundary: what a worker asks of an engine, and what an engine tells the host.
//!
//! An engine runs one execution: it evaluates the protocol's entry scope and codec with
//! the host functions installed, starts each call on the [`Host`] the moment the
//! program makes it, and reports log lines as [`Event`]s. The worker feeds it late
//! answers and time, and reads its [`Settlement`].
//! QuickJS (`quickjs/`) is the engine here; a second engine implements [`Engine`].

pub(crate) mod quickjs;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use codemode_protocol::Value;
use tokio::sync::mpsc::UnboundedSender;

use crate::config::Limits;
use crate::host::Host;
use crate::outbound::OutboundResponse;
use crate::worker::WorkerMessage;

/// Everything an engine needs to start one execution.
pub(crate) struct Job {
    pub(crate) execution: u64,
    /// The protocol's entry scope for this program; the codec is the engine's to load.
    pub(crate) scope_source: String,
    pub(crate) limits: Limits,
    pub(crate) deadline: Instant,
    pub(crate) host: Arc<Host>,
    pub(crate) retain: bool,
    pub(crate) events: UnboundedSender<Event>,
    /// Raised at the deadline (by the watchdog) or when the host drops the execution:
    /// the engine stops at its next interrupt check.
    pub(crate) stop: Arc<AtomicBool>,
    /// The inbox of the worker that took the job, set when it starts.
    pub(crate) home: Arc<OnceLock<crossbeam_channel::Sender<WorkerMessage>>>,
}

/// What an engine reports to the execution's host side, in the order it happens.
#[derive(Debug)]
pub(crate) enum Event {
    /// One console call, formatted.
    Log(String),
    /// The run ended.
    Settled(Settlement),
    /// The watchdog: the deadline passed, whatever the engine is doing.
    TimedOut(String),
}

/// The host's answer to a tool call or a fetch.
#[derive(Debug)]
pub(crate) enum CallAnswer {
    Tool(String),
    Fetch(Result<OutboundResponse, String>),
}

/// How a run ended, before the logs are attached.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Settlement {
    Returned(Option<Value>),
    Failed(String),
}

/// One execution's engine, driven by a worker thread.
pub(crate) trait Engine: Sized {
    /// An empty engine made ahead of time, while the worker is idle, for the next job
    /// only: never used by two executions.
    type Blank;
    /// Make a blank engine.
    fn blank() -> Self::Blank;
    /// A fresh engine (from `blank`, or made now) that has evaluated the job's entry
    /// source and run its microtasks.
    fn start(job: Job, blank: Option<Self::Blank>) -> Self;
    /// Deliver an answer to a pending call, then run microtasks.
    fn answer(&mut self, call: u64, answer: CallAnswer);
    /// Run the timers due by `now`, then microtasks.
    fn fire_due_timers(&mut self, now: Instant);
    /// When the next timer is due.
    fn next_timer(&self) -> Option<Instant>;
    /// How the run ended, once; `None` while it runs.
    fn take_settlement(&mut self) -> Option<Settlement>;
    /// Mark the run over while idle (the deadline passed): late calls meet the completion text.
    fn end(&mut self);
}
