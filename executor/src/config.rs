//! Limits and pool settings: every knob has a default here, and a request may override
//! the ones the wire carries (timeout, memory, payload).

use std::time::Duration;

/// The bounds one execution runs within.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock limit, from `execute` to the outcome.
    pub timeout: Duration,
    /// The engine's memory limit, in bytes.
    pub memory_limit_bytes: usize,
    /// The engine's stack limit, in bytes; deep recursion past it is a catchable error.
    pub stack_limit_bytes: usize,
    /// Bound on provider + tool + argsJson of one call, measured before it leaves.
    pub max_payload_bytes: usize,
    /// Bound on the result in the codec's JSON form.
    pub max_result_bytes: usize,
    /// Bound on the bytes of all log lines together; past it logs stop with a marker line.
    pub max_log_bytes: usize,
    /// Bound on tool and fetch calls awaiting an answer at once.
    pub max_calls_in_flight: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            timeout: Duration::from_secs(30),
            memory_limit_bytes: 64 << 20,
            stack_limit_bytes: 1 << 20,
            max_payload_bytes: 8 << 20,
            max_result_bytes: 8 << 20,
            max_log_bytes: 1 << 20,
            max_calls_in_flight: 256,
        }
    }
}

/// Where executions run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Isolation {
    /// In this process, on the executor's worker threads (the default).
    #[default]
    InProcess,
    /// Each execution in a worker process from a pool, killed on overrun, so a deadline
    /// holds against anything a single native call does. Needs a Tokio runtime with the
    /// time driver (as `#[tokio::main]` gives); retention is not available there.
    Process(crate::wire::process::WorkerCommand),
}

/// How an [`crate::Executor`] runs its executions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// Worker threads, each hosting many engines (or, with process isolation, worker
    /// processes kept ready); defaults to the machine's parallelism.
    pub workers: usize,
    /// Limits for requests that do not override them.
    pub limits: Limits,
    /// In this process, or in worker processes.
    pub isolation: Isolation,
}

impl Default for ExecutorConfig {
    fn default() -> ExecutorConfig {
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        ExecutorConfig { workers, limits: Limits::default(), isolation: Isolation::InProcess }
    }
}
