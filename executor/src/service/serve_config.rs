//! `ServeConfig`: everything an operator sets on a daemon, as one `Deserialize` type read
//! from a TOML file (`codemode serve --config FILE`) and overridden by flags.
//!
//! Every field is optional; an absent one keeps its documented default. Durations are
//! written in milliseconds (the answer spin, `_us`, in microseconds), sizes in bytes.
//!
//! ```toml
//! listen = "unix:/run/codemode/codemode.sock"
//! log_format = "json"
//! log_level = "info"
//! admin = "0.0.0.0:9090"   # /livez, /readyz, /metrics (the codemode binary serves it)
//! drain_timeout_ms = 35000
//!
//! [executor]
//! workers = 4
//! engine = "quickjs"
//! isolation = "process"      # default "in-process" on quickjs, "process" on v8
//! confinement = "required"   # or "best-effort", "off" (docs/security.md)
//! answer_spin_us = 50        # waits awake for a call's answer this long; 0 never
//! web_assembly = false       # true: WebAssembly on every run's global (V8 only)
//! max_stuck_engines = 4      # in-process: past this many stuck engines, not ready
//!
//! [limits]          # what a request runs with unless it asks otherwise
//! timeout_ms = 30000
//! memory_limit_bytes = 67108864
//! cpu_time_limit_ms = 10000  # CPU of the run's thread, waiting not counted; unset, none
//! max_calls = 1000           # calls and fetches of one run; unset, no bound
//!
//! [ceilings]        # the most a request may ask for
//! timeout_ms = 120000
//! memory_limit_bytes = 268435456
//!
//! [connections]
//! max_connections = 256
//! max_executions = 64
//! max_live_executions = 512
//! hello_timeout_ms = 5000
//! idle_timeout_ms = 300000
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::api::config::{EngineKind, ExecutorConfig, LimitError, Limits, ParseEngineError, WorkerCommand};
use crate::service::daemon::{Address, DaemonConfig, DaemonLimits, ParseAddressError, TlsFiles};
use crate::{Execute, Executor, ProcessExecutor};

/// Why a [`ServeConfig`] does not describe an executor or a daemon. Its Display says what
/// to change, naming the setting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `[executor] workers = 0`.
    #[error("[executor] workers must be at least 1")]
    NoWorkers,
    /// `[executor] web_assembly = true` on an engine without it.
    #[error("[executor] web_assembly: {}", codemode_protocol::texts::WEB_ASSEMBLY_NEEDS_V8)]
    WebAssemblyNeedsV8,
    /// `[executor] engine` names no engine of this build.
    #[error("{0}")]
    Engine(#[source] ParseEngineError),
    /// `[executor] answer_spin_us` above 1000 (a millisecond).
    #[error(
        "[executor] answer_spin_us is {micros}; it must be at most {most} (a longer wait awake only burns CPU); 0 never waits awake"
    )]
    AnswerSpinTooLong {
        /// The setting.
        micros: u64,
        /// The most allowed, in microseconds.
        most: u128,
    },
    /// A ceiling below its minimum.
    #[error("[ceilings]: {0}")]
    Ceilings(#[source] LimitError),
    /// A default limit below its minimum or above its ceiling.
    #[error("[limits]: {0}")]
    Limits(#[source] LimitError),
    /// No `listen`.
    #[error(
        "say where to listen: --listen unix:/path/to.sock or tcp:HOST:PORT (or `listen` in the config file)"
    )]
    NoListen,
    /// `listen` is not an address.
    #[error("{0}")]
    Listen(#[source] ParseAddressError),
    /// The token file could not be read.
    #[error("cannot read the token file {}: {source}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The token file holds only whitespace.
    #[error("the token file {} is empty; put the token in it", path.display())]
    EmptyToken {
        /// The file.
        path: PathBuf,
    },
    /// One of `tls_cert` and `tls_key` without the other.
    #[error("TLS needs both a certificate and a key (tls_cert and tls_key)")]
    TlsIncomplete,
}

/// A daemon's configuration as an operator writes it. It is `#[non_exhaustive]`, as are
/// its sections: start from [`ServeConfig::default`] (or a parsed file) and set fields.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ServeConfig {
    /// `unix:/path/to.sock` or `tcp:HOST:PORT`.
    pub listen: Option<String>,
    /// A file holding the token every client must present (required on TCP).
    pub token_file: Option<PathBuf>,
    /// The TLS certificate chain (PEM), for TCP.
    pub tls_cert: Option<PathBuf>,
    /// The TLS private key (PEM), for TCP.
    pub tls_key: Option<PathBuf>,
    /// How the daemon logs to stderr: text lines (the default) or JSON lines.
    pub log_format: Option<LogFormat>,
    /// The least level logged: `info` (the default: connections and executions), `debug`
    /// (each call and fetch too, with its duration), `warn` or `error`.
    pub log_level: Option<LogLevel>,
    /// `HOST:PORT` of the admin port: plain HTTP with `/livez`, `/readyz` and `/metrics`,
    /// no executions. Served by the `codemode` binary; the library only records.
    pub admin: Option<String>,
    /// How long a drain (on SIGTERM or SIGINT) lets admitted executions run before they
    /// end with `DAEMON_SHUT_DOWN`; default [`ServeConfig::drain_timeout`]'s.
    pub drain_timeout_ms: Option<u64>,
    /// How executions run.
    #[serde(default)]
    pub executor: ExecutorSection,
    /// What a request runs with unless it asks otherwise.
    #[serde(default)]
    pub limits: LimitsSection,
    /// The most a request may ask for.
    #[serde(default)]
    pub ceilings: LimitsSection,
    /// What a client may hold.
    #[serde(default)]
    pub connections: ConnectionsSection,
}

/// How a daemon logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The least level a daemon logs: `log_level = "info"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum LogLevel {
    /// Refusals and failures the daemon recovers from, and errors.
    Warn,
    /// Only what went wrong.
    Error,
    /// Connections opened and closed, executions started and ended, refusals.
    #[default]
    Info,
    /// Each call and fetch too: provider, tool, duration, and whether it failed.
    Debug,
}

/// Where executions run: `isolation = "in-process" | "process"`. Unset, it depends on the
/// engine ([`IsolationKind::default_for`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum IsolationKind {
    /// Each execution on a thread of the daemon. The default on QuickJS, which stops
    /// inside every long loop of its builtins.
    #[default]
    InProcess,
    /// Each execution in a `codemode stdio` worker process, killed on overrun. The default
    /// on V8, whose builtins ignore `TerminateExecution` in their loops: in-process, such a
    /// program holds its thread until the builtin returns, maybe never.
    Process,
}

impl IsolationKind {
    /// Where a daemon on `engine` runs executions unless told: in its worker processes on
    /// V8 (an engine that cannot be stopped costs a process, killed at once, not a
    /// thread held for good), in-process on QuickJS.
    pub fn default_for(engine: EngineKind) -> IsolationKind {
        match engine {
            EngineKind::V8 => IsolationKind::Process,
            EngineKind::QuickJs => IsolationKind::InProcess,
        }
    }

    /// Its name in a configuration file and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            IsolationKind::InProcess => "in-process",
            IsolationKind::Process => "process",
        }
    }
}

/// What a daemon (`codemode serve`, `codemode mcp`) says at start when told to run V8
/// in-process.
pub const IN_PROCESS_V8_WARNING: &str = "V8 in-process: a program inside a builtin that ignores TerminateExecution (Array.prototype.reverse of a huge array-like, say) can hold its execution thread until the builtin returns, maybe for good; its outcome still arrives on time. Without --isolation in-process (the default on V8) each execution runs in a worker process, killed as soon as its run is stopped.";

/// `[executor]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ExecutorSection {
    /// Execution threads (or worker processes) kept ready; default the machine's parallelism.
    pub workers: Option<usize>,
    /// `quickjs`, or `v8` in a build with the feature.
    pub engine: Option<String>,
    /// `in-process` or `process`; by default the engine's ([`IsolationKind::default_for`]:
    /// `process` on V8, `in-process` on QuickJS).
    pub isolation: Option<IsolationKind>,
    /// How process isolation confines its workers: `required` (default on Linux),
    /// `best-effort` or `off` (docs/security.md).
    pub confinement: Option<crate::Confinement>,
    /// How long an execution's thread waits awake for a call's answer, in microseconds,
    /// at most 1000; 0 never does (see [`ExecutorConfig::answer_spin`]). Default 50.
    pub answer_spin_us: Option<u64>,
    /// `WebAssembly` on the global of every run whose request does not ask for it itself
    /// (V8 only; see [`ExecutorConfig::web_assembly`]). Default false.
    pub web_assembly: Option<bool>,
    /// In-process: how many stuck engines (stopped and still running past
    /// [`crate::STUCK_AFTER`]) the daemon stays ready with; past it, not ready
    /// ([`DaemonLimits::max_stuck_engines`]). Default
    /// [`crate::daemon::MAX_STUCK_ENGINES`] (4).
    pub max_stuck_engines: Option<usize>,
}

/// `[limits]` and `[ceilings]`: each limit of an execution.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct LimitsSection {
    /// Wall-clock limit.
    pub timeout_ms: Option<u64>,
    /// The engine's memory.
    pub memory_limit_bytes: Option<usize>,
    /// The engine's stack.
    pub stack_limit_bytes: Option<usize>,
    /// One call's provider + tool + argsJson.
    pub max_payload_bytes: Option<usize>,
    /// The result in the codec's JSON.
    pub max_result_bytes: Option<usize>,
    /// All log lines together.
    pub max_log_bytes: Option<usize>,
    /// Calls awaiting an answer at once.
    pub max_calls_in_flight: Option<usize>,
    /// The CPU time of a run's engine thread (waiting not counted); unset, none.
    pub cpu_time_limit_ms: Option<u64>,
    /// Calls (tool calls and fetches) one run may make; unset, no bound.
    pub max_calls: Option<usize>,
}

/// `[connections]`: what one client may hold, and how long.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ConnectionsSection {
    /// Connections open at once.
    pub max_connections: Option<usize>,
    /// Executions live at once per connection.
    pub max_executions: Option<usize>,
    /// Executions live at once across all connections.
    pub max_live_executions: Option<usize>,
    /// The largest frame either way.
    pub max_frame_bytes: Option<usize>,
    /// The largest hello.
    pub max_hello_bytes: Option<usize>,
    /// From accept to a complete hello.
    pub hello_timeout_ms: Option<u64>,
    /// No message either way and nothing live, then the connection closes.
    pub idle_timeout_ms: Option<u64>,
    /// Bytes queued for a client that does not read, before its connection pauses.
    pub max_queued_bytes: Option<usize>,
    /// How long an outcome waits for a client that reads nothing.
    pub send_timeout_ms: Option<u64>,
}

/// Each field of `$over` that is set replaces the one of `$base`.
macro_rules! overlay {
    ($base:expr, $over:expr, [$($field:ident),* $(,)?]) => {
        $( if $over.$field.is_some() { $base.$field = $over.$field.clone(); } )*
    };
}

impl ServeConfig {
    /// This configuration with every field `flags` sets taking its place.
    pub fn overridden_by(mut self, flags: &ServeConfig) -> ServeConfig {
        overlay!(
            self,
            flags,
            [listen, token_file, tls_cert, tls_key, log_format, log_level, admin, drain_timeout_ms]
        );
        overlay!(
            self.executor,
            flags.executor,
            [workers, engine, isolation, confinement, answer_spin_us, web_assembly, max_stuck_engines]
        );
        for (base, over) in [(&mut self.limits, &flags.limits), (&mut self.ceilings, &flags.ceilings)] {
            overlay!(
                base,
                over,
                [
                    timeout_ms,
                    memory_limit_bytes,
                    stack_limit_bytes,
                    max_payload_bytes,
                    max_result_bytes,
                    max_log_bytes,
                    max_calls_in_flight,
                    cpu_time_limit_ms,
                    max_calls
                ]
            );
        }
        overlay!(
            self.connections,
            flags.connections,
            [
                max_connections,
                max_executions,
                max_live_executions,
                max_frame_bytes,
                max_hello_bytes,
                hello_timeout_ms,
                idle_timeout_ms,
                max_queued_bytes,
                send_timeout_ms
            ]
        );
        self
    }

    /// The executor it describes, made: an [`crate::Executor`], or under process
    /// isolation ([`ServeConfig::isolation`]) a [`crate::ProcessExecutor`] whose workers
    /// are `worker stdio` (the executor passes its engine), usually this binary.
    pub fn executor(&self, worker: PathBuf) -> Result<Arc<dyn Execute>, ConfigError> {
        let config = self.executor_config()?;
        Ok(match self.worker_command(worker)? {
            Some(command) => Arc::new(ProcessExecutor::new(config, command)),
            None => Arc::new(Executor::new(config)),
        })
    }

    /// Under process isolation, the command each worker is started with: `worker stdio`
    /// (the executor passes its engine to its workers).
    pub fn worker_command(&self, worker: PathBuf) -> Result<Option<WorkerCommand>, ConfigError> {
        if self.isolation()? != IsolationKind::Process {
            return Ok(None);
        }
        Ok(Some(WorkerCommand::new(worker, ["stdio"])))
    }

    /// Where executions run: `isolation` if set, else the engine's default
    /// ([`IsolationKind::default_for`]: `process` on V8).
    pub fn isolation(&self) -> Result<IsolationKind, ConfigError> {
        if let Some(isolation) = self.executor.isolation {
            return Ok(isolation);
        }
        let engine = match self.executor.engine.as_deref().map(str::parse::<EngineKind>) {
            None => EngineKind::default(),
            Some(Ok(engine)) => engine,
            // Named but not built in: its isolation all the same (the executor refuses it).
            Some(Err(ParseEngineError::NotBuiltIn { engine })) => engine,
            Some(Err(unknown)) => return Err(ConfigError::Engine(unknown)),
        };
        Ok(IsolationKind::default_for(engine))
    }

    /// What the daemon should say at start about where it runs executions: the
    /// [`IN_PROCESS_V8_WARNING`] when V8 runs in-process.
    pub fn isolation_warning(&self) -> Result<Option<&'static str>, ConfigError> {
        let on_v8 = self.executor_config()?.engine == EngineKind::V8;
        Ok((on_v8 && self.isolation()? == IsolationKind::InProcess).then_some(IN_PROCESS_V8_WARNING))
    }

    /// The configuration of the executor it describes. The defaults must lie within the
    /// ceilings, each within its minimum.
    pub fn executor_config(&self) -> Result<ExecutorConfig, ConfigError> {
        let mut config = ExecutorConfig::default();
        if let Some(workers) = self.executor.workers {
            if workers == 0 {
                return Err(ConfigError::NoWorkers);
            }
            config.workers = workers;
        }
        if let Some(engine) = &self.executor.engine {
            config.engine = engine.parse::<EngineKind>().map_err(ConfigError::Engine)?;
        }
        if let Some(confinement) = self.executor.confinement {
            config.confinement = confinement;
        }
        if let Some(on) = self.executor.web_assembly {
            if on && !config.engine.has_web_assembly() {
                return Err(ConfigError::WebAssemblyNeedsV8);
            }
            config.web_assembly = on;
        }
        if let Some(micros) = self.executor.answer_spin_us {
            let most = crate::runtime::MAX_ANSWER_SPIN.as_micros();
            if u128::from(micros) > most {
                return Err(ConfigError::AnswerSpinTooLong { micros, most });
            }
            config.answer_spin = Duration::from_micros(micros);
        }
        config.limits = self.limits.over(config.limits);
        config.ceilings = self.ceilings.over(config.ceilings);
        // An operator may raise a ceiling past the default; each still meets its minimum.
        config.ceilings.check(&config.ceilings).map_err(ConfigError::Ceilings)?;
        config.limits.check(&config.ceilings).map_err(ConfigError::Limits)?;
        Ok(config)
    }

    /// The daemon it describes: where it listens, with the token read from its file.
    pub fn daemon_config(&self) -> Result<DaemonConfig, ConfigError> {
        let listen: Address =
            self.listen.as_deref().ok_or(ConfigError::NoListen)?.parse().map_err(ConfigError::Listen)?;
        let token = match &self.token_file {
            None => None,
            Some(path) => {
                let token = std::fs::read_to_string(path)
                    .map_err(|source| ConfigError::TokenFile { path: path.clone(), source })?;
                let token = token.trim().to_owned();
                if token.is_empty() {
                    return Err(ConfigError::EmptyToken { path: path.clone() });
                }
                Some(token)
            }
        };
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles::new(cert.clone(), key.clone())),
            (None, None) => None,
            _ => return Err(ConfigError::TlsIncomplete),
        };
        let mut config = DaemonConfig { token, tls, ..DaemonConfig::new(listen) };
        if let Some(n) = self.connections.max_executions {
            config.max_executions = n;
        }
        if let Some(n) = self.connections.max_frame_bytes {
            config.max_frame_bytes = n;
        }
        Ok(config)
    }

    /// How long a drain waits for admitted executions: `drain_timeout_ms`, or else the
    /// ceiling on `timeout_ms` plus the send timeout (`send_timeout_ms`), so that every run
    /// a request may ask for can finish and its outcome wait as long as any outcome may for
    /// a client that reads slowly.
    pub fn drain_timeout(&self) -> Duration {
        match self.drain_timeout_ms {
            Some(ms) => Duration::from_millis(ms),
            None => {
                let ceiling = self
                    .ceilings
                    .timeout_ms
                    .map_or(Limits::default_ceilings().timeout, Duration::from_millis);
                ceiling.saturating_add(self.daemon_limits().send_timeout)
            }
        }
    }

    /// The bounds a daemon holds its clients to.
    pub fn daemon_limits(&self) -> DaemonLimits {
        let c = &self.connections;
        let ms = |v: Option<u64>, default: Duration| v.map_or(default, Duration::from_millis);
        let defaults = DaemonLimits::default();
        DaemonLimits {
            max_connections: c.max_connections.unwrap_or(defaults.max_connections),
            max_live_executions: c.max_live_executions.unwrap_or(defaults.max_live_executions),
            max_hello_bytes: c.max_hello_bytes.unwrap_or(defaults.max_hello_bytes),
            hello_timeout: ms(c.hello_timeout_ms, defaults.hello_timeout),
            idle_timeout: ms(c.idle_timeout_ms, defaults.idle_timeout),
            max_queued_bytes: c.max_queued_bytes.unwrap_or(defaults.max_queued_bytes),
            send_timeout: ms(c.send_timeout_ms, defaults.send_timeout),
            max_stuck_engines: self.executor.max_stuck_engines.unwrap_or(defaults.max_stuck_engines),
        }
    }
}

impl LimitsSection {
    fn over(&self, base: Limits) -> Limits {
        Limits {
            timeout: self.timeout_ms.map_or(base.timeout, Duration::from_millis),
            memory_limit_bytes: self.memory_limit_bytes.unwrap_or(base.memory_limit_bytes),
            stack_limit_bytes: self.stack_limit_bytes.unwrap_or(base.stack_limit_bytes),
            max_payload_bytes: self.max_payload_bytes.unwrap_or(base.max_payload_bytes),
            max_result_bytes: self.max_result_bytes.unwrap_or(base.max_result_bytes),
            max_log_bytes: self.max_log_bytes.unwrap_or(base.max_log_bytes),
            max_calls_in_flight: self.max_calls_in_flight.unwrap_or(base.max_calls_in_flight),
            cpu_time_limit: self.cpu_time_limit_ms.map(Duration::from_millis).or(base.cpu_time_limit),
            max_calls: self.max_calls.or(base.max_calls),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each refusal of the daemon's settings is its own variant, its text unchanged.
    #[test]
    fn a_daemon_config_refused_says_its_kind() {
        let mut config = ServeConfig::default();
        assert!(matches!(config.daemon_config(), Err(ConfigError::NoListen)));
        config.listen = Some("/run/codemode.sock".to_owned());
        let refused = config.daemon_config().unwrap_err();
        assert!(matches!(refused, ConfigError::Listen(ParseAddressError { .. })), "{refused:?}");
        assert_eq!(
            refused.to_string(),
            "\"/run/codemode.sock\" is not an address: write unix:/path/to.sock or tcp:HOST:PORT"
        );
        config.listen = Some("unix:/run/codemode.sock".to_owned());
        config.tls_cert = Some("cert.pem".into());
        let refused = config.daemon_config().unwrap_err();
        assert!(matches!(refused, ConfigError::TlsIncomplete), "{refused:?}");
        assert_eq!(refused.to_string(), "TLS needs both a certificate and a key (tls_cert and tls_key)");
        config.tls_cert = None;
        let empty = std::env::temp_dir().join(format!("codemode-empty-token-{}", std::process::id()));
        std::fs::write(&empty, " \n").unwrap();
        config.token_file = Some(empty.clone());
        let refused = config.daemon_config().unwrap_err();
        let _ = std::fs::remove_file(&empty);
        assert!(matches!(&refused, ConfigError::EmptyToken { path } if *path == empty), "{refused:?}");
        assert_eq!(
            refused.to_string(),
            format!("the token file {} is empty; put the token in it", empty.display())
        );
    }

    /// Unset, isolation follows the engine: process on V8 (its builtins ignore their
    /// stop), in-process on QuickJS; an explicit choice wins, and V8 in-process is warned of.
    #[test]
    fn isolation_defaults_to_the_engines_and_v8_in_process_is_warned_of() {
        let mut config = ServeConfig::default();
        assert_eq!(config.isolation().unwrap(), IsolationKind::InProcess);
        assert_eq!(config.isolation_warning().unwrap(), None);
        assert_eq!(config.worker_command("/bin/codemode".into()).unwrap(), None);
        config.executor.engine = Some("v8".to_owned());
        assert_eq!(config.isolation().unwrap(), IsolationKind::Process);
        let command = config.worker_command("/bin/codemode".into()).unwrap().unwrap();
        assert_eq!(
            (command.program.to_str(), command.args.as_slice()),
            (Some("/bin/codemode"), &["stdio".to_owned()][..])
        );
        config.executor.isolation = Some(IsolationKind::InProcess);
        assert_eq!(config.isolation().unwrap(), IsolationKind::InProcess);
        assert_eq!(config.worker_command("/bin/codemode".into()).unwrap(), None);
        // Only a build with V8 gets as far as the warning; without it the engine is refused.
        if cfg!(feature = "v8") {
            assert_eq!(config.isolation_warning().unwrap(), Some(IN_PROCESS_V8_WARNING));
        } else {
            assert!(matches!(config.isolation_warning(), Err(ConfigError::Engine(_))));
        }
        config.executor.engine = Some("quickjs".to_owned());
        config.executor.isolation = Some(IsolationKind::Process);
        assert_eq!(config.isolation().unwrap(), IsolationKind::Process);
        config.executor.engine = Some("spidermonkey".to_owned());
        config.executor.isolation = None;
        assert!(matches!(config.isolation(), Err(ConfigError::Engine(_))));
        assert_eq!(ServeConfig::default().daemon_limits().max_stuck_engines, 4);
        let flags: ServeConfig = {
            let mut flags = ServeConfig::default();
            flags.executor.max_stuck_engines = Some(1);
            flags
        };
        assert_eq!(ServeConfig::default().overridden_by(&flags).daemon_limits().max_stuck_engines, 1);
    }

    #[test]
    fn an_executor_config_refused_says_its_kind() {
        let mut config = ServeConfig::default();
        config.ceilings.timeout_ms = Some(5000);
        config.limits.timeout_ms = Some(9000);
        let refused = config.executor_config().unwrap_err();
        assert!(
            matches!(refused, ConfigError::Limits(LimitError::AboveCeiling { limit: "timeoutMs", .. })),
            "{refused:?}"
        );
        assert_eq!(
            refused.to_string(),
            "[limits]: The timeoutMs of 9000 is above this executor's ceiling of 5000; ask for at most 5000."
        );
        let source = std::error::Error::source(&refused).map(ToString::to_string);
        assert_eq!(
            source.as_deref(),
            Some("The timeoutMs of 9000 is above this executor's ceiling of 5000; ask for at most 5000.")
        );
    }
}
