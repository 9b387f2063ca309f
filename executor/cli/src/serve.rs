//! `codemode serve`: the daemon, configured by a TOML file and flags (flags win), logging
//! through tracing as text or JSON lines on stderr; it drains on SIGTERM or SIGINT and
//! serves probes and metrics on `--admin`.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use codemode_executor::daemon::{Daemon, DaemonHealth};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::oneshot;

use crate::admin::{self, Admin};
use codemode_executor::{IsolationKind, LogFormat, LogLevel, ServeConfig};

/// The flags of `codemode serve`; each overrides the config file's field of the same name.
#[derive(clap::Args)]
#[command(after_help = "Every flag may also be set in the --config file (TOML); a flag wins over the file.

Example config file:
  listen = \"unix:/run/codemode/codemode.sock\"
  log_format = \"json\"
  admin = \"0.0.0.0:9090\"
  drain_timeout_ms = 35000
  [executor]
  workers = 4
  isolation = \"process\"
  confinement = \"required\"
  [limits]
  timeout_ms = 30000
  [ceilings]
  memory_limit_bytes = 268435456
  [connections]
  max_connections = 256
  idle_timeout_ms = 300000

Exit status:
  0    the daemon stopped cleanly: SIGTERM or SIGINT, then the drain
  2    a bad flag or config file, or an address it cannot listen on: stderr says what to fix
  130  a second SIGINT during the drain: stopped at once, live executions lost
  143  a second SIGTERM during the drain: stopped at once, live executions lost

Examples:
  codemode serve --listen unix:/run/codemode/codemode.sock
  codemode serve --config /etc/codemode/serve.toml --log-format json
  codemode serve --listen unix:/run/codemode/codemode.sock --admin 127.0.0.1:9090")]
pub(crate) struct ServeArgs {
    /// A TOML file with any of the settings below (see docs/daemon.md).
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
    /// unix:/path/to.sock, or tcp:HOST:PORT (plain TCP only on a loopback address).
    #[arg(long, value_name = "ADDRESS")]
    listen: Option<String>,
    /// A file holding the token every client must present (required on TCP).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// The TLS certificate chain (PEM), for TCP.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The TLS private key (PEM), for TCP.
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Serve /livez, /readyz and /metrics (plain HTTP, no executions) on HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    admin: Option<String>,
    /// On SIGTERM or SIGINT, how long admitted executions may still run before they end
    /// [default: the ceiling on timeout_ms plus the send timeout].
    #[arg(long, value_name = "MS")]
    drain_timeout_ms: Option<u64>,
    /// Log lines on stderr: text (default) or json.
    #[arg(long, value_name = "FORMAT", value_parser = ["text", "json"])]
    log_format: Option<String>,
    /// The least level logged: info (default: connections, executions), debug (each call
    /// and fetch too, with its duration), warn or error.
    #[arg(long, value_name = "LEVEL", value_parser = ["error", "warn", "info", "debug"])]
    log_level: Option<String>,
    /// The JavaScript engine: quickjs (default), or v8 in a build with the `v8` feature.
    #[arg(long, value_name = "NAME")]
    engine: Option<String>,
    /// Execution threads (or worker processes) kept ready; default the machine's parallelism.
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// in-process, or process: each execution in a worker process killed on overrun
    /// [default: process on v8, whose builtins ignore their stop; in-process on quickjs].
    #[arg(long, value_name = "WHERE", value_parser = ["in-process", "process"])]
    isolation: Option<String>,
    /// How process isolation confines its workers: required (default on Linux), best-effort
    /// or off (docs/security.md).
    #[arg(long, value_name = "LEVEL", value_parser = ["required", "best-effort", "off"])]
    confinement: Option<String>,
    /// How long an execution's thread waits awake for a call's answer before it sleeps,
    /// at most 1000; 0 never does [default: 50].
    #[arg(long, value_name = "MICROS")]
    answer_spin_us: Option<u64>,
    /// Put WebAssembly on the global of every program whose request does not ask for it
    /// itself (V8 only), every byte it uses charged to the memory limit.
    #[arg(long)]
    webassembly: bool,
    /// In-process: past this many stuck engines (stopped and still running 50 ms later,
    /// each holding a thread) /readyz answers 503 stuck [default: 4].
    #[arg(long, value_name = "N")]
    max_stuck_engines: Option<usize>,
    /// An execution's wall-clock limit unless its request asks otherwise [default: 30000].
    #[arg(long, value_name = "MS")]
    timeout_ms: Option<u64>,
    /// An execution's memory limit unless its request asks otherwise [default: 64 MiB].
    #[arg(long, value_name = "BYTES")]
    memory_limit_bytes: Option<usize>,
    #[command(flatten)]
    budget: crate::BudgetArgs,
    /// The longest wall-clock limit a request may ask for [default: 900000].
    #[arg(long, value_name = "MS")]
    max_timeout_ms: Option<u64>,
    /// The largest memory limit a request may ask for [default: 4 GiB].
    #[arg(long, value_name = "BYTES")]
    max_memory_limit_bytes: Option<usize>,
    /// Connections open at once [default: 256].
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Executions live at once per connection [default: 1024].
    #[arg(long, value_name = "N")]
    max_executions: Option<usize>,
    /// Executions live at once across all connections [default: 1024].
    #[arg(long, value_name = "N")]
    max_live_executions: Option<usize>,
    /// The largest frame either way [default: 64 MiB].
    #[arg(long, value_name = "BYTES")]
    max_frame_bytes: Option<usize>,
    /// The largest hello, all a client may send before it is authenticated [default: 4096].
    #[arg(long, value_name = "BYTES")]
    max_hello_bytes: Option<usize>,
    /// From accept to a complete hello [default: 5000].
    #[arg(long, value_name = "MS")]
    hello_timeout_ms: Option<u64>,
    /// A connection with nothing live and no message either way is closed [default: 300000].
    #[arg(long, value_name = "MS")]
    idle_timeout_ms: Option<u64>,
    /// Bytes queued for a client that does not read before its connection pauses [default: 4 MiB].
    #[arg(long, value_name = "BYTES")]
    max_queued_bytes: Option<usize>,
    /// How long an outcome waits for a client that reads nothing [default: 10000].
    #[arg(long, value_name = "MS")]
    send_timeout_ms: Option<u64>,
}

impl ServeArgs {
    /// The flags as a configuration of their own, to lay over the file's.
    fn as_config(&self) -> ServeConfig {
        let mut config = ServeConfig::default();
        config.listen = self.listen.clone();
        config.token_file = self.token_file.clone();
        config.tls_cert = self.tls_cert.clone();
        config.tls_key = self.tls_key.clone();
        config.log_format =
            self.log_format.as_deref().map(|f| if f == "json" { LogFormat::Json } else { LogFormat::Text });
        config.log_level = self.log_level.as_deref().map(|level| match level {
            "error" => LogLevel::Error,
            "warn" => LogLevel::Warn,
            "debug" => LogLevel::Debug,
            _ => LogLevel::Info,
        });
        config.admin = self.admin.clone();
        config.drain_timeout_ms = self.drain_timeout_ms;
        let executor = &mut config.executor;
        executor.workers = self.workers;
        executor.engine = self.engine.clone();
        executor.isolation = self
            .isolation
            .as_deref()
            .map(|i| if i == "process" { IsolationKind::Process } else { IsolationKind::InProcess });
        executor.confinement = self.confinement.as_deref().and_then(|c| c.parse().ok());
        executor.answer_spin_us = self.answer_spin_us;
        executor.web_assembly = self.webassembly.then_some(true);
        executor.max_stuck_engines = self.max_stuck_engines;
        config.limits.timeout_ms = self.timeout_ms;
        config.limits.memory_limit_bytes = self.memory_limit_bytes;
        config.limits.cpu_time_limit_ms = self.budget.cpu_time_limit_ms;
        config.limits.max_calls = self.budget.max_calls;
        config.ceilings.timeout_ms = self.max_timeout_ms;
        config.ceilings.memory_limit_bytes = self.max_memory_limit_bytes;
        let connections = &mut config.connections;
        connections.max_connections = self.max_connections;
        connections.max_executions = self.max_executions;
        connections.max_live_executions = self.max_live_executions;
        connections.max_frame_bytes = self.max_frame_bytes;
        connections.max_hello_bytes = self.max_hello_bytes;
        connections.hello_timeout_ms = self.hello_timeout_ms;
        connections.idle_timeout_ms = self.idle_timeout_ms;
        connections.max_queued_bytes = self.max_queued_bytes;
        connections.send_timeout_ms = self.send_timeout_ms;
        config
    }
}

/// Read the configuration, start logging, and serve until a signal's drain ends.
pub(crate) fn serve(args: ServeArgs) -> Result<(), String> {
    let file = match &args.config {
        None => ServeConfig::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the config file {}: {e}", path.display()))?;
            from_toml(&text).map_err(|e| format!("the config file {}: {e}", path.display()))?
        }
    };
    let config = file.overridden_by(&args.as_config());
    let worker = std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?;
    let executor_config = config.executor_config().map_err(|e| e.to_string())?;
    let isolation = config.isolation().map_err(|e| e.to_string())?;
    let warning = config.isolation_warning().map_err(|e| e.to_string())?;
    let daemon_config = config.daemon_config().map_err(|e| e.to_string())?;
    let limits = config.daemon_limits();
    let drain_timeout = config.drain_timeout();
    start_logging(config.log_format.unwrap_or_default(), config.log_level.unwrap_or_default());
    let health = Arc::new(OnceLock::new());
    let control = Control::start(config.admin.as_deref(), executor_config.engine.name(), health.clone())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let served = runtime.block_on(async {
        let executor = config.executor(worker).map_err(|e| e.to_string())?;
        let daemon = Daemon::bind_with(daemon_config, limits).await.map_err(|e| e.to_string())?;
        let _ = health.set(daemon.health());
        let Control { admin, drain } = control;
        let engine = executor_config.engine.name();
        // Polled first right after the daemon's "listening" line, so that line stays first.
        let drain = async move {
            if let Some(address) = admin {
                tracing::info!(address = %address, "admin listening");
            }
            // Where executions run, and how the workers are confined when they run apart.
            if isolation == IsolationKind::Process {
                let confinement = executor_config.confinement.name();
                tracing::info!(engine, isolation = isolation.name(), confinement, "executor");
            } else {
                tracing::info!(engine, isolation = isolation.name(), "executor");
            }
            let isolation = isolation.name();
            if let Some(warning) = warning {
                tracing::warn!(engine, isolation, "{warning}");
            }
            match drain.await {
                Ok(signal) => tracing::info!(signal, "signal received"),
                // The control thread is gone (it cannot be, short of a panic): serve on.
                Err(_) => std::future::pending().await,
            }
        };
        daemon.serve_until(executor, drain, drain_timeout).await.map_err(|e| e.to_string())
    });
    // Whatever is left on the runtime (a task of a run ended at the timeout) is not waited for.
    runtime.shutdown_timeout(Duration::from_secs(1));
    served
}

/// The control thread, apart from the daemon's runtime: the signal handlers and the admin
/// port, on a current-thread runtime of its own, so both answer however starved the
/// daemon's runtime is.
struct Control {
    /// The admin port's address, once bound.
    admin: Option<std::net::SocketAddr>,
    /// Sent the first signal's name: the drain starts.
    drain: oneshot::Receiver<&'static str>,
}

impl Control {
    /// Install the signal handlers (so SIGTERM reaches a PID 1 too) and bind the admin
    /// port with the exporter, then hand both to the control thread.
    fn start(
        admin: Option<&str>,
        engine: &'static str,
        health: Arc<OnceLock<DaemonHealth>>,
    ) -> Result<Control, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the control runtime: {e}"))?;
        let (signals, admin) = runtime.block_on(async {
            let signals = Signals::install()?;
            let admin = match admin {
                None => None,
                Some(address) => {
                    let metrics = admin::install_exporter(engine)?;
                    Some(Admin::bind(address, health, metrics).await?)
                }
            };
            Ok::<_, String>((signals, admin))
        })?;
        let address = admin.as_ref().map(Admin::local_addr).transpose()?;
        let (start_drain, drain) = oneshot::channel();
        std::thread::Builder::new()
            .name("codemode-control".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    if let Some(admin) = admin {
                        tokio::spawn(admin.serve());
                    }
                    signals.handle(start_drain).await;
                })
            })
            .map_err(|e| format!("cannot start the control thread: {e}"))?;
        Ok(Control { admin: address, drain })
    }
}

/// SIGTERM and SIGINT, handled from installation on: none is lost before the drain waits.
struct Signals {
    terminate: Signal,
    interrupt: Signal,
}

impl Signals {
    fn install() -> Result<Signals, String> {
        let handler = |kind, name| signal(kind).map_err(|e| format!("cannot handle {name}: {e}"));
        Ok(Signals {
            terminate: handler(SignalKind::terminate(), "SIGTERM")?,
            interrupt: handler(SignalKind::interrupt(), "SIGINT")?,
        })
    }

    /// The first signal starts the drain; a second ends the process at once with 128 plus
    /// its number (130 for SIGINT, 143 for SIGTERM), as a shell reports a signal's death.
    async fn handle(mut self, start_drain: oneshot::Sender<&'static str>) {
        let _ = start_drain.send(self.next().await.0);
        let (signal, code) = self.next().await;
        tracing::warn!(signal, code, "second signal; exiting at once");
        std::process::exit(code);
    }

    async fn next(&mut self) -> (&'static str, i32) {
        tokio::select! {
            _ = self.terminate.recv() => ("SIGTERM", 128 + 15),
            _ = self.interrupt.recv() => ("SIGINT", 128 + 2),
        }
    }
}

/// Read a config file's TOML text; the error names the line and the key.
pub(crate) fn from_toml(text: &str) -> Result<ServeConfig, String> {
    toml::from_str(text).map_err(|e| e.to_string())
}

/// Events at `level` and above to stderr, as text
/// (`INFO connection{id=1 peer="unix"}:execution{id=1}: execution ended …`) or one JSON
/// object per line.
fn start_logging(format: LogFormat, level: LogLevel) {
    let level = match level {
        LogLevel::Error => tracing::Level::ERROR,
        LogLevel::Warn => tracing::Level::WARN,
        LogLevel::Info => tracing::Level::INFO,
        LogLevel::Debug => tracing::Level::DEBUG,
        // A level this command does not know yet: the default.
        _ => tracing::Level::INFO,
    };
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_ansi(false)
        .with_target(false);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        // A format this command does not know yet: the default, text.
        _ => builder.try_init(),
    };
}
