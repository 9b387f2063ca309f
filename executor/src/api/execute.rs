//! `Execute`: the whole contract between a host and whatever runs its programs, implemented
//! in-process ([`crate::Executor`]), under process isolation ([`crate::ProcessExecutor`])
//! and remotely ([`crate::RemoteExecutor`]), so a host, the wire server, the daemon, the
//! MCP server and the conformance runner hold any of them as `dyn Execute`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use codemode_protocol::Outcome;

/// The text of a retained run refused by process isolation ([`RetainRefused::NeedsInProcess`]).
pub const RETAIN_NEEDS_IN_PROCESS: &str = "Retaining an engine (retainHandles) is not available with process isolation. Use an in-process executor for it.";
use crate::api::config::{EngineKind, ExecutorConfig, Limits};
use crate::api::request::Request;

/// The future [`Execute::execute`] returns.
pub type ExecuteFuture<'a> = Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>;

/// The future [`Execute::execute_retained`] returns.
pub type RetainFuture<'a> =
    Pin<Box<dyn Future<Output = Result<(Outcome, RetainedExecution), RetainRefused>> + Send + 'a>>;

/// Runs programs and reports their outcomes.
///
/// Every implementation keeps the same contract: the outcome says `result` or `error`
/// with the logs either way; nothing a program does is a panic or an `Err`; calls come
/// back to the request's dispatch in this process; dropping the future ends the execution.
///
/// ```
/// use codemode_executor::{Execute, Executor, Request};
///
/// async fn answer(executor: &dyn Execute) -> String {
///     executor.execute(Request::new("async () => 6 * 7")).await.to_json_string()
/// }
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// assert_eq!(answer(&Executor::default()).await, r#"{"result":42,"logs":[]}"#);
/// # });
/// ```
pub trait Execute: Send + Sync {
    /// Run `request`'s program in a fresh engine and report how it ended.
    fn execute(&self, request: Request) -> ExecuteFuture<'_>;

    /// Run `request`'s program and keep its engine after the run ends (`retainHandles`):
    /// its timers keep firing, and their tool calls meet `Execution has already
    /// completed.` inside the sandbox. The engine goes when the handle is released or
    /// dropped. The default implementation refuses with [`RetainRefused::Unsupported`]
    /// before it runs anything; [`crate::ProcessExecutor`] refuses with
    /// [`RetainRefused::NeedsInProcess`].
    fn execute_retained(&self, request: Request) -> RetainFuture<'_> {
        drop(request);
        Box::pin(async { Err(RetainRefused::Unsupported) })
    }

    /// What a host can know of this implementation before it runs anything.
    fn profile(&self) -> Profile {
        Profile::default()
    }

    /// Executions holding an engine now, where this side can count them.
    fn live_engines(&self) -> Option<usize> {
        None
    }

    /// Engines stuck now, where this side can count them: stopped (deadline, cancel or
    /// memory) more than [`crate::STUCK_AFTER`] ago and still running, each holding a
    /// thread of this process until it returns. `None` where no engine can hold a thread
    /// here ([`crate::ProcessExecutor`] kills the worker, a daemon's are the daemon's).
    fn stuck_engines(&self) -> Option<usize> {
        None
    }
}

/// The engine of a run kept alive after its outcome (`retainHandles`), wherever it lives:
/// from [`Execute::execute_retained`] (or the executors' own `execute_retained`); released
/// explicitly or when dropped.
pub struct RetainedExecution {
    engine: Option<Box<dyn RetainedEngine>>,
}

/// What each executor keeps of a retained engine: dropping it disposes the engine.
pub(crate) trait RetainedEngine: Send + Sync {
    /// The log lines written since the outcome (or the last call); none where the engine
    /// keeps them to itself (a daemon's).
    fn late_logs(&mut self) -> Vec<String> {
        Vec::new()
    }
}

impl RetainedExecution {
    /// `engine` held until this is released or dropped (`None`: the run kept none).
    pub(crate) fn holding(engine: Option<impl RetainedEngine + 'static>) -> RetainedExecution {
        RetainedExecution { engine: engine.map(|engine| Box::new(engine) as Box<dyn RetainedEngine>) }
    }

    /// The log lines its timers and handlers wrote since the outcome (or the last call).
    /// A daemon's retained engine keeps its late logs to itself: this is empty for one.
    pub fn late_logs(&mut self) -> Vec<String> {
        self.engine.as_mut().map(|engine| engine.late_logs()).unwrap_or_default()
    }

    /// Dispose the engine now: its timers stop and nothing of it runs again.
    pub fn release(self) {}
}

/// Why [`Execute::execute_retained`] refused; its `Display` is the pinned text.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetainRefused {
    /// Process isolation: a worker serves one run, so its engine cannot outlive it.
    NeedsInProcess,
    /// An implementation of [`Execute`] that keeps no engines.
    Unsupported,
}

impl std::fmt::Display for RetainRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RetainRefused::NeedsInProcess => f.write_str(RETAIN_NEEDS_IN_PROCESS),
            RetainRefused::Unsupported => {
                f.write_str("Retaining an engine (retainHandles) is not available on this executor.")
            }
        }
    }
}

impl std::error::Error for RetainRefused {}

/// What a host can know of an [`Execute`] before it runs anything.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Profile {
    /// The engine programs run on, where this side decides it (a daemon's is its own).
    pub engine: Option<EngineKind>,
    /// The limits of a request that sets none.
    pub limits: Limits,
    /// The most a request may ask for.
    pub ceilings: Limits,
}

impl Default for Profile {
    /// Nothing known here: the default limits and ceilings; the executor behind it (a
    /// daemon) may allow less.
    fn default() -> Profile {
        Profile { engine: None, limits: Limits::default(), ceilings: Limits::default_ceilings() }
    }
}

impl Profile {
    /// The profile of an executor configured by `config`.
    pub fn of(config: &ExecutorConfig) -> Profile {
        Profile {
            engine: Some(config.engine),
            limits: config.limits.clone(),
            ceilings: config.ceilings.clone(),
        }
    }
}

/// `Execute` through a pointer to one: `&T`, `Arc<T>`, `Box<T>`, so `dyn Execute` works
/// wherever an implementation is taken.
macro_rules! forward_execute {
    ($($pointer:ty),*) => {$(
        impl<T: Execute + ?Sized> Execute for $pointer {
            fn execute(&self, request: Request) -> ExecuteFuture<'_> {
                (**self).execute(request)
            }

            fn execute_retained(&self, request: Request) -> RetainFuture<'_> {
                (**self).execute_retained(request)
            }

            fn profile(&self) -> Profile {
                (**self).profile()
            }

            fn live_engines(&self) -> Option<usize> {
                (**self).live_engines()
            }

            fn stuck_engines(&self) -> Option<usize> {
                (**self).stuck_engines()
            }
        }
    )*};
}

forward_execute!(&T, Arc<T>, Box<T>);
