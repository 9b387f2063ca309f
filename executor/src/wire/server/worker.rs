//! Process isolation, the worker side: `codemode stdio` as the host's pool starts it.
//!
//! Init, then lock (docs/security.md): while the process has one thread, the first half of
//! confinement ([`confine::prepare_worker`]); then the async runtime, the executor and its
//! engine start, stdio is set up and one warm-up program runs (so the engine's lazy
//! start-up, the time zone and V8's platform threads are done); then the seccomp
//! allowlist goes onto every thread ([`confine::lock_worker`]); only then is the host's
//! hello answered. At level off (no [`confine::CONFINEMENT_VAR`]), it serves as it is.

/// What a worker process's host tells it in its environment: the host's
/// [`crate::ExecutorConfig::answer_spin`] in microseconds (absent: the default).
pub(crate) const ANSWER_SPIN_VAR: &str = "CODEMODE_ANSWER_SPIN_US";

/// What a worker process's host tells it in its environment: the engine its executor runs
/// (`quickjs`, `v8`), so the worker command need not name one.
pub const ENGINE_VAR: &str = "CODEMODE_ENGINE";

/// The engine a worker serves on: `flag` (its `--engine`) or its host's [`ENGINE_VAR`],
/// which must agree when both are given; neither is QuickJS.
pub fn worker_engine(flag: Option<EngineKind>) -> Result<EngineKind, WorkerError> {
    let host = match std::env::var(ENGINE_VAR) {
        Ok(name) => Some(name.parse::<EngineKind>().map_err(WorkerError::Engine)?),
        Err(_) => None,
    };
    match (flag, host) {
        (Some(flag), Some(host)) if flag != host => {
            Err(WorkerError::EngineMismatch { worker: flag.name(), engine: host.name() })
        }
        (Some(engine), _) | (None, Some(engine)) => Ok(engine),
        (None, None) => Ok(EngineKind::default()),
    }
}

use crate::confine::{self, ConfineError};
use crate::wire::server::ConnectionError;
use crate::{EngineKind, Executor, ExecutorConfig, Request};

/// Without [`confine::DATA_LIMIT_VAR`]: the default ceiling of 4 GiB and room for the engine's own.
const DEFAULT_DATA_LIMIT: u64 = 6 << 30;

/// The program each worker runs before it locks: it starts the engine's lazy parts and
/// reads the local time zone, so a confined run prints the dates an in-process one does.
const WARM_UP: &str =
    "async () => [new Date(0).toString(), String(Math.random() < 1), JSON.stringify({ a: [1] })]";

/// Why a worker stopped serving before its host closed stdin.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// Confinement could not be set up at the level asked for.
    #[error("{0}")]
    Confine(#[from] ConfineError),
    /// The async runtime did not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// Stdin could not be set up for reading before the lock.
    #[error("cannot read stdin: {0}")]
    Stdin(#[source] std::io::Error),
    /// The program run before the lock failed: the worker could not serve the same as
    /// an unconfined one. Holds the warm-up's outcome in the codec's JSON form.
    #[error("the warm-up program failed: {outcome}")]
    WarmUp {
        /// The outcome, as JSON.
        outcome: String,
    },
    /// The connection to the host ended with an error.
    #[error("{0}")]
    Connection(#[from] ConnectionError),
    /// The serving task was cancelled before it ended.
    #[error("the worker's serving task ended early: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// The host's [`ENGINE_VAR`] names no engine of this build.
    #[error("{ENGINE_VAR}: {0}")]
    Engine(#[source] crate::ParseEngineError),
    /// The worker's `--engine` is not the engine its host runs
    /// ([`codemode_protocol::texts::WORKER_ENGINE_MISMATCH`]).
    #[error("{}", codemode_protocol::texts::WORKER_ENGINE_MISMATCH.fill(&[worker, engine]))]
    EngineMismatch {
        /// The worker's `--engine`.
        worker: &'static str,
        /// The host's engine.
        engine: &'static str,
    },
}

/// Serve the wire protocol on stdin and stdout at the level the host asked for, on
/// `engine`, with `WebAssembly` for requests that do not say (process isolation's
/// requests always say; [`ExecutorConfig::web_assembly`]); `Err` when confinement required could not be set up (the host sees the
/// worker end before its hello, and the reason on its stderr).
pub fn serve_stdio(engine: EngineKind, web_assembly: bool) -> Result<(), WorkerError> {
    serve_stdio_with(ExecutorConfig::default().engine(engine).web_assembly(web_assembly))
}

/// [`serve_stdio`] with an executor configured by `config` (its engine, WebAssembly and
/// default limits, `codemode stdio --cpu-time-limit-ms` say); the worker keeps one warm
/// engine whatever `config.workers` says, and takes the answer spin from its host.
pub fn serve_stdio_with(config: ExecutorConfig) -> Result<(), WorkerError> {
    let level = confine::requested_level();
    let data_limit = std::env::var(confine::DATA_LIMIT_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_DATA_LIMIT);
    // The CPUs it may use, read while the files they come from (the cgroup's quota) can
    // still be opened: Landlock closes them below.
    crate::runtime::cpus();
    let layers = confine::prepare_worker(level, data_limit)?;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(WorkerError::Runtime)?;
    // Served by a task, not by `block_on` on this thread: the runtime's thread that hears
    // a frame arrive then reads it itself, rather than waking this one to read it (a
    // thread hand-off per frame).
    let served = runtime.spawn(async move {
        // One warm engine: the host gives a worker one execution at a time (a confined
        // worker only one), and each warm engine is a booted prelude made at start.
        let mut config = config.workers(1);
        if let Some(micros) = std::env::var(ANSWER_SPIN_VAR).ok().and_then(|v| v.parse().ok()) {
            config.answer_spin = std::time::Duration::from_micros(micros);
        }
        let executor = Executor::new(config);
        if !level.confines() {
            let input = tokio::io::BufReader::new(tokio::io::stdin());
            return super::serve(executor, input, tokio::io::stdout()).await.map_err(WorkerError::from);
        }
        // Set up before the lock: it reads each descriptor's kind (fstat), refused after.
        let options = super::stdio_options();
        let stdio = crate::wire::framing::QuietStream::lend_stdio(options.max_frame_bytes)
            .transpose()
            .map_err(WorkerError::Stdin)?;
        let warm = executor.execute(Request::new(WARM_UP)).await;
        if warm.error_text().is_some() {
            return Err(WorkerError::WarmUp { outcome: warm.to_json_string() });
        }
        let layers = confine::lock_worker(level, layers)?;
        // Which layers it holds, for the host's log (the host checks the ones it relies on
        // itself, from /proc).
        eprintln!("codemode stdio: confined: {}", layers.describe());
        let served = match stdio {
            Some(lent) => super::serve_lent(std::sync::Arc::new(executor), lent, options).await,
            None => {
                let input = tokio::io::BufReader::new(tokio::io::stdin());
                super::serve_with(executor, input, tokio::io::stdout(), options).await
            }
        };
        served.map_err(WorkerError::from)
    });
    match runtime.block_on(served) {
        Ok(served) => served,
        // A panic goes on as it did on this thread: the worker dies of it.
        Err(failed) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
        Err(failed) => Err(WorkerError::Task(failed)),
    }
}
