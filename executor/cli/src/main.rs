//! `codemode`: run a program against providers served from a real store, print the outcome.
//! Also `declarations`, `stdio`, `serve` (the daemon) and, with the `mcp` feature, `mcp`.
//! Install with `cargo install codemode-cli`; `codemode --help` says the rest.
//!
//! Exit status: 0 for a result, 1 for an error outcome (its text also on stderr, with its
//! place in the program when known: `codemode: thrown error: boom (at line 3, column 14)`),
//! 2 for bad usage or unreadable input (with a message on stderr saying what to fix),
//! 130 for a run Ctrl-C interrupted (its outcome keeps the logs written until then).

mod admin;
mod ask;
mod db;
mod discover;
mod fixture;
#[cfg(feature = "mcp")]
mod mcp;
mod serve;
mod spec;
mod watch;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use codemode_executor::daemon::{RemoteOptions, RemoteTls};
use codemode_executor::{
    ApprovalPolicy, Confinement, Endpoints, EngineKind, Executor, ExecutorConfig, ProcessExecutor, Provider,
    RemoteExecutor, Request, Toolbox, WorkerCommand,
};
use codemode_protocol::ToolTable;

#[derive(Parser)]
#[command(
    name = "codemode",
    version,
    propagate_version = true,
    about = "Run programs written by language models in a sandbox whose only way out is a tool call.",
    after_help = "Examples:
  codemode run program.js --db shop.sql
  codemode declarations --db
  codemode serve --listen unix:/run/codemode/codemode.sock

`codemode help COMMAND` (or `codemode COMMAND --help`) describes each command and its exit codes."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run PROGRAM.js and print its outcome: one JSON object (the codec's form), or for a
    /// person on a terminal.
    #[command(after_help = RUN_AFTER_HELP)]
    Run {
        /// The program: a file holding the source of an async arrow function (or any form
        /// the normalizer accepts), or - to read it from stdin.
        #[arg(value_name = "PROGRAM.js")]
        program: PathBuf,
        /// Serve the provider `db` from SQLite: FILE.sql is loaded into memory, anything else opened read-only.
        #[arg(long, value_name = "FILE")]
        db: Option<PathBuf>,
        /// Serve fixed results: a JSON object mapping "provider.tool" to the value it returns
        /// (for calls no other provider answers).
        #[arg(long, value_name = "FILE.json")]
        fixture: Option<PathBuf>,
        /// Serve the providers of a tool spec file: tools with descriptions and JSON Schemas,
        /// answered by an SQL query on the database or a fixed result (docs/tools.md).
        #[arg(long, value_name = "SPEC.json")]
        spec: Option<PathBuf>,
        /// Wall-clock limit in milliseconds [default: 30000].
        #[arg(long, value_name = "N")]
        timeout_ms: Option<u64>,
        /// The engine's memory limit in bytes.
        #[arg(long, value_name = "N")]
        memory_limit_bytes: Option<usize>,
        #[command(flatten)]
        budget: BudgetArgs,
        #[command(flatten)]
        approval: ask::ApprovalArgs,
        /// Where the program runs: in this process, or in a worker process killed on overrun.
        #[arg(long, value_enum, default_value_t = IsolationArg::InProcess)]
        isolation: IsolationArg,
        /// How a worker process is confined: required (default on Linux), best-effort or off
        /// (docs/security.md).
        #[arg(long, value_name = "LEVEL", value_parser = ["required", "best-effort", "off"])]
        confinement: Option<String>,
        #[command(flatten)]
        engine: EngineArg,
        #[command(flatten)]
        connect: ConnectArgs,
        #[command(flatten)]
        view: ViewArgs,
    },
    /// Print what the model is told about the providers: TypeScript declarations to paste
    /// into a prompt, their JSON Schemas, or the whole code tool.
    #[command(after_help = DECLARATIONS_AFTER_HELP)]
    Declarations {
        /// A tool spec file (the same as `run --spec`).
        spec: Option<PathBuf>,
        /// Include the provider `db` (tables, schema, query).
        #[arg(long)]
        db: bool,
        /// What to print.
        #[arg(long, value_enum, default_value_t = Format::Typescript)]
        format: Format,
    },
    /// Search the providers' tools by what they do: paths (provider.tool), first sentences
    /// and scores, best first.
    #[command(after_help = discover::SEARCH_AFTER_HELP)]
    Search {
        /// Plain words for what the tool does.
        query: String,
        /// Search only this provider's tools.
        #[arg(long, value_name = "NAME")]
        provider: Option<String>,
        /// How many hits [default: 8; at most 50].
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// How many of the best hits to skip.
        #[arg(long, value_name = "N")]
        offset: Option<usize>,
        #[command(flatten)]
        catalog: discover::CatalogArgs,
    },
    /// Describe one tool by its path (provider.tool): its TypeScript declaration and schemas.
    #[command(after_help = discover::DESCRIBE_AFTER_HELP)]
    Describe {
        /// The tool's path, provider.tool, as `search` answers it.
        path: String,
        #[command(flatten)]
        catalog: discover::CatalogArgs,
    },
    /// Serve the built-in executor over the wire protocol on stdin and stdout (one JSON
    /// message per line), for conformance runners, process isolation and other hosts.
    #[command(after_help = STDIO_AFTER_HELP)]
    Stdio {
        /// The JavaScript engine: quickjs, or v8 in a build with the `v8` feature. By
        /// default the engine the host names in CODEMODE_ENGINE (process isolation passes
        /// its own), else quickjs; given, it must agree with the host's.
        #[arg(long = "engine", value_name = "NAME")]
        engine: Option<String>,
        /// Put WebAssembly on the global of every program whose request does not say
        /// otherwise (V8 only).
        #[arg(long)]
        webassembly: bool,
        #[command(flatten)]
        budget: BudgetArgs,
    },
    /// Serve the executor as a daemon: every call travels back over the connection.
    Serve(Box<serve::ServeArgs>),
    /// Serve code mode to any MCP client: one tool, `execute`, whose description declares
    /// the providers (from --db, --spec and upstream MCP servers), over stdio or
    /// streamable HTTP.
    #[cfg(feature = "mcp")]
    Mcp(mcp::McpArgs),
}

const RUN_AFTER_HELP: &str = "\
Providers:
  --db FILE        db.tables()               the names of the tables
                   db.schema(table)          the columns of one table
                   db.query(sql, ...params)  one read-only statement (SELECT), one object per row
  --fixture FILE   a fixed result per \"provider.tool\" key; --db, --spec and --fixture combine
                   (a provider --db or --spec serves is theirs, not the fixture's)
  --spec FILE      the providers a tool spec file declares (docs/tools.md)

Limits: 30 s of wall-clock time unless --timeout-ms says otherwise.

Watching (docs/watching.md): --trace prints each call and log line on stderr as it happens,
  → store.get({\"id\":7})        a call leaves (its arguments cut to 80 characters)
  ← store.get 1.2 ms ok         its answer came back (or: error: TEXT)
  log: LINE                     a console line
On a terminal, a run 3 s without progress says on stderr what it waits on (calls, timers).
Ctrl-C ends the run: the outcome printed keeps the logs so far and says it was interrupted.

Output: the outcome as one JSON object when stdout is not a terminal (--output json); for a
person on a terminal (--output human): the logs, then the result pretty-printed or the error.

Exit status:
  0    the program returned: stdout holds {\"result\": ..., \"logs\": [...]}
  1    the program failed (threw, timed out, ran out of memory): stdout holds {\"error\": ..., \"kind\": ...}
  2    bad usage or unreadable input: nothing on stdout, stderr says what to fix
  130  interrupted (Ctrl-C): stdout holds {\"error\": \"Execution was interrupted ...\", \"kind\": \"cancelled\", \"logs\": [...]}

Examples:
  codemode run executor/cli/examples/top-customers.js --db executor/cli/examples/shop.sql
  echo 'async () => (await db.tables()).length' | codemode run - --db shop.sql
  codemode run program.js --db shop.sql --fixture weather.json --timeout-ms 5000
  codemode run program.js --db shop.sql --trace --output human";

const DECLARATIONS_AFTER_HELP: &str = "\
Exit status:
  0  the declarations are on stdout
  2  bad usage, no providers, or a spec file that does not read: stderr says what to fix

Examples:
  codemode declarations --db
  codemode declarations executor/cli/examples/shop.spec.json --format code-tool";

const STDIO_AFTER_HELP: &str = "\
Exit status:
  0  stdin closed and every execution ended
  1  the protocol failed (a message that does not read, stdout closed): stderr says why
  2  bad usage (such as an engine this build lacks)

Example:
  codemode-conformance --executor-cmd \"codemode stdio --engine quickjs\"";

/// How `run` shows the run: as it goes (`--trace`, the waiting line) and at its end (`--output`).
#[derive(clap::Args)]
struct ViewArgs {
    /// Print each tool call (provider, tool, arguments, time taken, error or ok) and each log
    /// line on stderr as it happens.
    #[arg(long, short = 'v')]
    trace: bool,
    /// How the outcome is printed on stdout [default: json when stdout is not a terminal,
    /// human when it is].
    #[arg(long, value_enum, value_name = "FORMAT")]
    output: Option<watch::Output>,
    /// Say what the run waits on after this many ms without progress, even when stderr is
    /// not a terminal (for tests; a terminal hears it after 3000).
    #[arg(long, value_name = "MS", hide = true)]
    waiting_after_ms: Option<u64>,
}

/// The budgets of a run that every command running programs takes (over the defaults).
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub(crate) struct BudgetArgs {
    /// The CPU time a run's engine thread may spend, in milliseconds; waiting on calls,
    /// fetches and timers is not counted. Past it the run ends with kind cpuTime
    /// [default: none; the wall clock still holds].
    #[arg(long, value_name = "N")]
    pub(crate) cpu_time_limit_ms: Option<u64>,
    /// How many calls (tool calls and fetches together) one run may make; the call over it
    /// is not sent and the run ends with kind callLimit [default: no bound].
    #[arg(long, value_name = "N")]
    pub(crate) max_calls: Option<usize>,
}

impl BudgetArgs {
    /// `request` with these budgets, where given.
    pub(crate) fn apply(self, mut request: Request) -> Request {
        if let Some(ms) = self.cpu_time_limit_ms {
            request = request.cpu_time_limit(Duration::from_millis(ms));
        }
        if let Some(calls) = self.max_calls {
            request = request.max_calls(calls);
        }
        request
    }

    /// `limits` with these budgets, where given.
    pub(crate) fn over(self, mut limits: codemode_executor::Limits) -> codemode_executor::Limits {
        if let Some(ms) = self.cpu_time_limit_ms {
            limits.cpu_time_limit = Some(Duration::from_millis(ms));
        }
        if self.max_calls.is_some() {
            limits.max_calls = self.max_calls;
        }
        limits
    }
}

/// `--engine`, read with `EngineKind`'s own parser so an engine this build lacks is
/// refused with its text (exit code 2).
#[derive(clap::Args)]
struct EngineArg {
    /// The JavaScript engine: quickjs, or v8 in a build with the `v8` feature.
    #[arg(long = "engine", value_name = "NAME", default_value = "quickjs")]
    name: String,
    /// Put WebAssembly on every program's global (V8 only), every byte it uses charged to
    /// the memory limit (docs/engines.md).
    #[arg(long)]
    webassembly: bool,
}

impl EngineArg {
    fn kind(&self) -> Result<EngineKind, String> {
        self.name.parse().map_err(|e: codemode_executor::ParseEngineError| e.to_string())
    }

    /// The engine named, refused when it cannot have the WebAssembly asked for.
    fn kind_with_web_assembly(&self) -> Result<EngineKind, String> {
        let engine = self.kind()?;
        web_assembly_on(engine, self.webassembly)?;
        Ok(engine)
    }
}

/// `--webassembly` on `engine`: refused, with the pinned text, on an engine without it.
fn web_assembly_on(engine: EngineKind, asked: bool) -> Result<(), String> {
    if asked && !engine.has_web_assembly() {
        return Err(codemode_protocol::texts::WEB_ASSEMBLY_NEEDS_V8.to_owned());
    }
    Ok(())
}

/// The executor's default configuration on `engine`.
fn config(engine: EngineKind) -> ExecutorConfig {
    ExecutorConfig::default().engine(engine)
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// `declare const provider: { tool(...): Promise<...> }`, for a prompt.
    Typescript,
    /// Every provider with its tools' JSON Schemas.
    JsonSchema,
    /// The code tool an agent offers the model: name, description, input schema (JSON).
    CodeTool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum IsolationArg {
    /// In this process, each execution on a thread of its own.
    #[value(name = "in-process")]
    InProcess,
    /// In a `codemode stdio` worker process.
    Process,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    match cli.command {
        #[cfg(feature = "mcp")]
        Command::Mcp(args) => mcp::mcp(args),
        Command::Serve(args) => match serve::serve(*args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(problem) => usage_error(problem),
        },
        Command::Stdio { engine, webassembly, budget } => {
            match stdio_engine(engine.as_deref(), webassembly) {
                Err(problem) => usage_error(problem),
                Ok(engine) => match stdio(engine, webassembly, budget) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(message) => {
                        eprintln!("codemode stdio: {message}");
                        ExitCode::FAILURE
                    }
                },
            }
        }
        Command::Search { query, provider, limit, offset, catalog } => {
            printed(discover::search(query, provider, limit, offset, &catalog))
        }
        Command::Describe { path, catalog } => printed(discover::describe(&path, &catalog)),
        Command::Declarations { spec, db, format } => match declarations(spec, db, format) {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(problem) => usage_error(problem),
        },
        Command::Run {
            program,
            db,
            fixture,
            spec,
            timeout_ms,
            memory_limit_bytes,
            budget,
            approval,
            isolation,
            confinement,
            engine,
            connect,
            view,
        } => {
            let policy = match approval.policy() {
                Ok(policy) => policy,
                Err(problem) => return usage_error(problem),
            };
            // Over --connect the daemon's engine runs it, and refuses what it cannot.
            let checked =
                if connect.connect.is_empty() { engine.kind_with_web_assembly() } else { engine.kind() };
            let web_assembly = engine.webassembly;
            let engine = match checked {
                Ok(engine) => engine,
                Err(problem) => return usage_error(problem),
            };
            if !connect.connect.is_empty() && isolation == IsolationArg::Process {
                return usage_error(
                    "--isolation is the daemon's to choose: drop it when running with --connect".to_owned(),
                );
            }
            let confinement = confinement.and_then(|c| c.parse().ok()).unwrap_or_default();
            let sources = Sources { db, fixture, spec };
            match run(
                program,
                sources,
                (timeout_ms, memory_limit_bytes, budget, policy),
                (isolation, confinement),
                (engine, web_assembly),
                connect,
                view,
            ) {
                Ok(code) => code,
                Err(message) => {
                    eprintln!("codemode: {message}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// A text printed on stdout (exit 0), or the problem on stderr (exit 2).
fn printed(text: Result<String, String>) -> ExitCode {
    match text {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(problem) => usage_error(problem),
    }
}

fn usage_error(problem: String) -> ExitCode {
    eprintln!("codemode: {problem}");
    ExitCode::from(2)
}

/// The engine `codemode stdio` serves on: its `--engine`, agreeing with the host's.
fn stdio_engine(flag: Option<&str>, webassembly: bool) -> Result<EngineKind, String> {
    let flag = flag.map(|name| name.parse::<EngineKind>().map_err(|e| e.to_string())).transpose()?;
    let engine = codemode_executor::wire::worker::worker_engine(flag).map_err(|e| e.to_string())?;
    web_assembly_on(engine, webassembly)?;
    Ok(engine)
}

/// A worker of process isolation: confined as its host asks (`wire::worker`).
fn stdio(engine: EngineKind, web_assembly: bool, budget: BudgetArgs) -> Result<(), String> {
    let mut config = ExecutorConfig::default().engine(engine).web_assembly(web_assembly);
    config.limits = budget.over(config.limits);
    codemode_executor::wire::worker::serve_stdio_with(config).map_err(|e| e.to_string())
}

/// Where a run's providers come from.
struct Sources {
    db: Option<PathBuf>,
    fixture: Option<PathBuf>,
    spec: Option<PathBuf>,
}

/// The toolbox of `--db` and `--spec`; `None` when neither is given.
fn toolbox(db: Option<&Path>, spec: Option<&Path>) -> Result<Option<Toolbox>, String> {
    let providers = providers(db, spec)?;
    if providers.is_empty() {
        return Ok(None);
    }
    Toolbox::new(providers).map(Some).map_err(|e| e.to_string())
}

/// The providers of `--db` and `--spec` (the spec's SQL tools query `--db`, else the
/// spec's own database).
fn providers(db: Option<&Path>, spec: Option<&Path>) -> Result<Vec<Provider>, String> {
    let spec = spec.map(spec::Spec::load).transpose()?;
    let path = db.map(Path::to_owned).or_else(|| spec.as_ref().and_then(spec::Spec::database));
    let database = path.as_deref().map(db::Database::open).transpose()?;
    let mut providers = Vec::new();
    if let (Some(database), Some(_)) = (&database, db) {
        providers.push(database.provider());
    }
    if let Some(spec) = &spec {
        providers.extend(spec.providers(database.as_ref())?);
    }
    Ok(providers)
}

fn declarations(spec: Option<PathBuf>, db: bool, format: Format) -> Result<String, String> {
    let mut providers = Vec::new();
    if db {
        providers.push(db::Database::spec()?);
    }
    if let Some(path) = spec {
        providers.extend(spec::Spec::load(&path)?.specs());
    }
    if providers.is_empty() {
        return Err("give a tool spec file, --db, or both: there are no providers to declare".to_owned());
    }
    let table = ToolTable::new(providers).map_err(|e| e.to_string())?;
    Ok(match format {
        Format::Typescript => table.declarations().trim_end().to_owned(),
        Format::JsonSchema => pretty(&table.json_schemas()),
        Format::CodeTool => pretty(&serde_json::to_value(table.code_tool()).unwrap_or_default()),
    })
}

fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// `run --connect`: the program runs on daemons, its calls answered here.
#[derive(clap::Args)]
struct ConnectArgs {
    /// Run on a daemon instead of here: unix:/path/to.sock, tcp:HOST:PORT, or
    /// dns:NAME:PORT (every address the name resolves to, resolved again every 5 s).
    /// Repeat it for a fleet: each run goes to one daemon, chosen by load, and moves to
    /// another only if none of its calls had reached this host.
    #[arg(long, value_name = "ADDRESS")]
    connect: Vec<String>,
    /// A file holding the daemons' token (TCP daemons require one).
    #[arg(long, value_name = "FILE", requires = "connect")]
    token_file: Option<PathBuf>,
    /// The CA (PEM) the daemons' TLS certificates chain to; TLS for tcp: and dns: addresses.
    #[arg(long, value_name = "FILE", requires_all = ["connect", "tls_server_name"])]
    tls_ca: Option<PathBuf>,
    /// The name the daemons' certificates carry.
    #[arg(long, value_name = "NAME", requires = "tls_ca")]
    tls_server_name: Option<String>,
}

impl ConnectArgs {
    fn fleet(&self) -> Result<(Endpoints, RemoteOptions), String> {
        let token = match &self.token_file {
            None => None,
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?
                    .trim()
                    .to_owned(),
            ),
        };
        let tls = match (&self.tls_ca, &self.tls_server_name) {
            (Some(ca), Some(name)) => Some(RemoteTls::new(ca.clone(), name.clone())),
            _ => None,
        };
        let options = RemoteOptions::default().token(token).tls(tls);
        let dns: Vec<&String> = self.connect.iter().filter(|a| a.starts_with("dns:")).collect();
        let endpoints = match (dns.as_slice(), self.connect.len()) {
            ([], _) => Endpoints::Static(self.connect.clone()),
            ([one], 1) => {
                let (name, port) = one["dns:".len()..]
                    .rsplit_once(':')
                    .and_then(|(name, port)| Some((name.to_owned(), port.parse::<u16>().ok()?)))
                    .ok_or_else(|| format!("{one:?} is not an address: write dns:NAME:PORT"))?;
                Endpoints::Dns { name, port, every: Duration::from_secs(5) }
            }
            _ => return Err("a dns: address names the whole fleet: give it alone".to_owned()),
        };
        Ok((endpoints, options))
    }
}

/// The program's source, from its file or from stdin (`-`); an empty one is bad input.
fn read_program(program: &Path) -> Result<String, String> {
    let (code, named) = if program == Path::new("-") {
        let mut code = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut code)
            .map_err(|e| format!("cannot read the program from stdin: {e}"))?;
        (code, "the program on stdin".to_owned())
    } else {
        let code = std::fs::read_to_string(program).map_err(|e| {
            let path = program.display();
            format!("cannot read the program {path}: {e}. Pass the path of a .js file, or - for stdin.")
        })?;
        (code, format!("the program {}", program.display()))
    };
    if code.trim().is_empty() {
        return Err(format!(
            "{named} is empty: write the source of an async arrow function in it, such as `async () => (await db.tables()).length`"
        ));
    }
    Ok(code)
}

fn run(
    program: PathBuf,
    sources: Sources,
    (timeout_ms, memory_limit_bytes, budget, policy): (
        Option<u64>,
        Option<usize>,
        BudgetArgs,
        ApprovalPolicy,
    ),
    (isolation, confinement): (IsolationArg, Confinement),
    (engine, web_assembly): (EngineKind, bool),
    connect: ConnectArgs,
    view: ViewArgs,
) -> Result<ExitCode, String> {
    let code = read_program(&program)?;
    let watch = watch::Watch::new(view.trace);
    let heard = watch.clone();
    let mut request = Request::new(code).on_event(move |event| heard.hear(event));
    if web_assembly {
        request = request.web_assembly(true);
    }
    let toolbox = toolbox(sources.db.as_deref(), sources.spec.as_deref())?;
    if let Some(path) = &sources.fixture {
        let fixture = fixture::Fixture::load(path)?;
        let declared: Vec<&str> =
            toolbox.iter().flat_map(|t| t.table().providers()).map(|p| p.name.as_str()).collect();
        // A fixture's provider that the toolbox also serves is the toolbox's.
        let providers: Vec<_> =
            fixture.descriptors().into_iter().filter(|p| !declared.contains(&p.name.as_str())).collect();
        // A name the sandbox refuses is the fixture's fault: bad input, not the program's failure.
        codemode_protocol::validate_providers(&providers)
            .map_err(|e| format!("the fixture {} does not serve: {e}", path.display()))?;
        request = request.providers(providers).dispatch(fixture.dispatch());
    }
    if let Some(toolbox) = &toolbox {
        request = request.toolbox(toolbox);
    }
    if let Some(ms) = timeout_ms {
        request = request.timeout(Duration::from_millis(ms));
    }
    if let Some(bytes) = memory_limit_bytes {
        request = request.memory_limit_bytes(bytes);
    }
    request = budget.apply(request).approvals(policy, &ask::terminal_approvals());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let mut config = config(engine);
    let worker = if isolation == IsolationArg::Process {
        let program = std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?;
        // The worker takes its engine from the executor (`CODEMODE_ENGINE`).
        config.confinement = confinement;
        config.workers = 1;
        Some(WorkerCommand::new(program, ["stdio"]))
    } else {
        None
    };
    let waiting_after = match view.waiting_after_ms {
        Some(ms) => Some(Duration::from_millis(ms)),
        None => std::io::stderr().is_terminal().then_some(watch::WAITING_AFTER),
    };
    let fleet = if connect.connect.is_empty() { None } else { Some(connect.fleet()?) };
    let (outcome, interrupted) = runtime.block_on(async {
        // Installed before the run starts, so a Ctrl-C at any moment ends it with its outcome.
        let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map_err(|e| format!("cannot watch for Ctrl-C: {e}"))?;
        let announcer = waiting_after.map(|after| tokio::spawn(watch.clone().announce_waits(after)));
        let run = async {
            match (fleet, worker) {
                (None, None) => Ok(Executor::new(config).execute(request).await),
                (None, Some(worker)) => Ok(ProcessExecutor::new(config, worker).execute(request).await),
                (Some((endpoints, options)), _) => {
                    let remote =
                        RemoteExecutor::connect_fleet(endpoints, options).await.map_err(|e| e.to_string())?;
                    Ok::<_, String>(remote.execute(request).await)
                }
            }
        };
        // Ctrl-C drops the run, which stops its engine (or cancels it on the daemon).
        let outcome = tokio::select! {
            outcome = run => outcome.map(|outcome| (outcome, false)),
            _ = interrupt.recv() => Ok((watch::interrupted(watch.logs()), true)),
        };
        if let Some(announcer) = announcer {
            announcer.abort();
        }
        outcome
    })?;
    let output = view.output.unwrap_or(if std::io::stdout().is_terminal() {
        watch::Output::Human
    } else {
        watch::Output::Json
    });
    match output {
        watch::Output::Json => {
            println!("{}", outcome.to_json_string());
            // For a person: the error as text, with its place in the program when known.
            if interrupted {
                eprintln!("codemode: {}", codemode_protocol::texts::INTERRUPTED);
            } else if let Some(text) = outcome.error_display() {
                eprintln!("codemode: {} error: {text}", outcome.kind());
            }
        }
        // The logs were on stderr already when traced.
        watch::Output::Human => println!("{}", watch::human(&outcome, !view.trace)),
    }
    Ok(if interrupted {
        ExitCode::from(INTERRUPTED_EXIT)
    } else if outcome.error_text().is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The exit status of a run Ctrl-C ended: 128 + SIGINT, as shells report it.
const INTERRUPTED_EXIT: u8 = 130;
