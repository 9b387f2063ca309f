//! The daemon's metrics, through the `metrics` facade: the library records, and only a
//! binary that installs a recorder (the CLI's Prometheus exporter) makes them visible.
//! Names follow Prometheus's rules (base units, `_total` on counters); no label takes a
//! value a program or client chooses, so provider and tool names never appear.

use std::time::Duration;

/// Executions that ended, by `outcome`: the outcome's kind, `refused` or `shutdown`.
pub const EXECUTIONS_TOTAL: &str = "codemode_executions_total";
/// From execute to outcome, in seconds, by `engine`.
pub const EXECUTION_DURATION_SECONDS: &str = "codemode_execution_duration_seconds";
/// From a call leaving to its answer arriving, in seconds.
pub const CALL_DURATION_SECONDS: &str = "codemode_call_duration_seconds";
/// Executions admitted and not yet ended: the autoscaling signal.
pub const EXECUTIONS_IN_FLIGHT: &str = "codemode_executions_in_flight";
/// Engines alive (running or retained), by `engine`.
pub const ENGINES_LIVE: &str = "codemode_engines_live";
/// Connections open, authenticated or not.
pub const CONNECTIONS_OPEN: &str = "codemode_connections_open";
/// 1 while the daemon drains, else 0.
pub const DRAINING: &str = "codemode_draining";
/// Always 1, with the build's `version` and the `engine` it serves.
pub const BUILD_INFO: &str = "codemode_build_info";
/// Engines stopped and still running past `STUCK_AFTER` (50 ms), each holding a thread;
/// in-process only (process isolation kills the worker instead).
pub const STUCK_ENGINES: &str = "codemode_stuck_engines";

/// Cells ended before their outcome was handed out, by `reason` (`expired`, `evicted`,
/// `unclaimed`): [`crate::cells`].
pub use crate::cells::CELLS_REAPED_TOTAL;

/// Every metric's name, for an exporter to describe.
pub const ALL: [&str; 10] = [
    EXECUTIONS_TOTAL,
    EXECUTION_DURATION_SECONDS,
    CALL_DURATION_SECONDS,
    EXECUTIONS_IN_FLIGHT,
    ENGINES_LIVE,
    CONNECTIONS_OPEN,
    DRAINING,
    BUILD_INFO,
    STUCK_ENGINES,
    CELLS_REAPED_TOTAL,
];

pub(crate) fn ended(outcome: &'static str) {
    metrics::counter!(EXECUTIONS_TOTAL, "outcome" => outcome).increment(1);
}

pub(crate) fn execution_duration(engine: &'static str, duration: Duration) {
    metrics::histogram!(EXECUTION_DURATION_SECONDS, "engine" => engine).record(duration.as_secs_f64());
}

pub(crate) fn call_duration(duration: Duration) {
    metrics::histogram!(CALL_DURATION_SECONDS).record(duration.as_secs_f64());
}

pub(crate) fn in_flight(n: usize) {
    metrics::gauge!(EXECUTIONS_IN_FLIGHT).set(n as f64);
}

pub(crate) fn engines_live(engine: &'static str, n: usize) {
    metrics::gauge!(ENGINES_LIVE, "engine" => engine).set(n as f64);
}

pub(crate) fn connections_open(n: usize) {
    metrics::gauge!(CONNECTIONS_OPEN).set(n as f64);
}

pub(crate) fn draining(draining: bool) {
    metrics::gauge!(DRAINING).set(if draining { 1.0 } else { 0.0 });
}

pub(crate) fn build_info(engine: &'static str) {
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION"), "engine" => engine).set(1.0);
}

/// Set by the daemon's heartbeat (the CLI's exporter also sets it before each render).
pub(crate) fn stuck_engines(n: usize) {
    metrics::gauge!(STUCK_ENGINES).set(n as f64);
}
