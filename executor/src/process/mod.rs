//! `ProcessExecutor`: process isolation as an executor of its own. Each execution runs in
//! a worker process (`codemode stdio`) from a pool, confined as the config says; its calls
//! come back over the worker's pipes to the request's dispatch in this process.

mod pool;

use std::sync::Arc;

use codemode_protocol::{Outcome, OutcomeKind, scope_source};

use self::pool::ProcessPool;
use crate::api::config::{ExecutorConfig, WorkerCommand};
use crate::api::execute::{Execute, ExecuteFuture, Profile, RetainFuture, RetainRefused};
use crate::api::request::Request;
use crate::api::watch;

/// Runs each program in a worker process of its own: a crash, a native bug or a hostile
/// program takes down one worker, never the host. Retaining an engine is refused
/// ([`crate::RetainRefused::NeedsInProcess`]).
///
/// **What it costs.** Under confinement (the default on Linux,
/// [`crate::Confinement::Required`]) every worker is locked before its first execution
/// and serves only one, so each run pays a locked worker's start. Measured on the
/// project's 2-vCPU machine (criterion means, `cargo bench --bench execute`, 2026-12-05),
/// `async () => 1` end to end:
///
/// | | one at a time | 16 at once, the whole batch |
/// |---|---|---|
/// | [`crate::Executor`] (in-process) | 0.09 ms | — |
/// | `ProcessExecutor`, [`crate::Confinement::Off`] (workers reused) | 0.22 ms | 38 ms |
/// | `ProcessExecutor`, [`crate::Confinement::Required`] (the default) | 5.7 ms | 63 ms |
///
/// Choose it for hostile programs on an engine whose builtins may ignore a deadline, or
/// where a crash must not reach the host; docs/daemon.md and docs/security.md say more.
///
/// The worker is the `codemode` binary of the package `codemode-cli` (`cargo install
/// codemode-cli`), named by its absolute path (a worker starts with an empty
/// environment), with `stdio`; for V8 that binary is built with `--features v8`. The
/// executor passes its engine and limits to each worker.
///
/// ```no_run
/// use codemode_executor::{ExecutorConfig, ProcessExecutor, Request, WorkerCommand};
///
/// # async fn run() {
/// let worker = WorkerCommand::new("/usr/local/bin/codemode", ["stdio"]);
/// let executor = ProcessExecutor::new(ExecutorConfig::default(), worker);
/// let outcome = executor.execute(Request::new("async () => 1")).await;
/// # let _ = outcome; }
/// ```
///
/// Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct ProcessExecutor {
    inner: Arc<Inner>,
}

struct Inner {
    config: ExecutorConfig,
    pool: ProcessPool,
    /// Why every run is refused: the worker command names another engine.
    mismatch: Option<String>,
}

/// The engine a worker command names with `--engine NAME` or `--engine=NAME`, if any.
fn command_engine(command: &WorkerCommand) -> Option<String> {
    let mut args = command.args.iter();
    while let Some(arg) = args.next() {
        if arg == "--engine" {
            return args.next().cloned();
        }
        if let Some(name) = arg.strip_prefix("--engine=") {
            return Some(name.to_owned());
        }
    }
    None
}

impl ProcessExecutor {
    /// An executor whose workers are `command` (a `codemode stdio`), with `config`'s
    /// engine, limits, ceilings, confinement and answer spin; `config.workers` workers
    /// are kept ready.
    pub fn new(config: ExecutorConfig, command: WorkerCommand) -> ProcessExecutor {
        // The command's own `--engine`, when it names another engine: every run is refused.
        let mismatch = command_engine(&command).filter(|named| *named != config.engine.name()).map(|named| {
            codemode_protocol::texts::WORKER_ENGINE_MISMATCH.fill(&[named.as_str(), config.engine.name()])
        });
        let pool = ProcessPool::new(
            command,
            config.engine,
            config.workers,
            config.confinement,
            config.ceilings.memory_limit_bytes,
            config.answer_spin,
        );
        ProcessExecutor { inner: Arc::new(Inner { config, pool, mismatch }) }
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &ExecutorConfig {
        &self.inner.config
    }

    /// Worker processes started (their hello answered) and waiting for a run now: a run
    /// finds one of them rather than starting its own.
    pub fn ready_workers(&self) -> usize {
        self.inner.pool.ready_workers()
    }

    /// Run one program in a worker process. Never panics; a worker that dies mid-run ends
    /// the run `lost` and is replaced. Dropping the future kills the worker.
    pub async fn execute(&self, request: Request) -> Outcome {
        let (request, _end) = request.open();
        if let Some(mismatch) = &self.inner.mismatch {
            return Outcome::failure(OutcomeKind::Invalid, mismatch.clone(), Vec::new());
        }
        let limits = match request.limits(&self.inner.config) {
            Ok(limits) => limits,
            Err(refusal) => return Outcome::failure(OutcomeKind::Invalid, refusal, Vec::new()),
        };
        if let Some(refusal) = request.web_assembly_refusal(&self.inner.config) {
            return Outcome::failure(OutcomeKind::Invalid, refusal, Vec::new());
        }
        if let Err(refusal) = scope_source(&request.code, &request.providers) {
            return crate::in_process::executor::refusal_outcome(&refusal);
        }
        let (request, delivery) = request.with_limits(&limits, &self.inner.config).watch_host_side();
        let run = self.inner.pool.execute(request, &limits);
        watch::delivered(run, delivery, |(outcome, logs)| (outcome, *logs)).await.0
    }
}

impl Execute for ProcessExecutor {
    fn execute(&self, request: Request) -> ExecuteFuture<'_> {
        Box::pin(ProcessExecutor::execute(self, request))
    }

    fn execute_retained(&self, request: Request) -> RetainFuture<'_> {
        drop(request);
        Box::pin(async { Err(RetainRefused::NeedsInProcess) })
    }

    fn profile(&self) -> Profile {
        Profile::of(&self.inner.config)
    }
}
