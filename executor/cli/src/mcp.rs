//! `codemode mcp`: code mode served to any MCP client (stdio, or streamable HTTP), its
//! providers from SQLite, tool spec files and upstream MCP servers.

use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use codemode_executor::cells::{DEFAULT_CELL_TIME_TO_LIVE, DEFAULT_MAX_LIVE_CELLS};
use codemode_executor::mcp::serve::{
    CodeModeServer, DEFAULT_MAX_EXECUTIONS, Discovery, HTTP_PATH, ServeLimits,
};
use codemode_executor::mcp::upstream;
use codemode_executor::{
    ApprovalPolicy, Confinement, DEFAULT_APPROVAL_TIMEOUT, EngineKind, Execute, Executor,
    IN_PROCESS_V8_WARNING, IsolationKind, ProcessExecutor, Provider, ToolPattern, Toolbox, WorkerCommand,
};
use codemode_protocol::texts;

use crate::EngineArg;

/// What `codemode mcp` is told on its command line.
#[derive(clap::Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct McpArgs {
    /// Serve the provider `db` from SQLite: FILE.sql is loaded into memory, anything else opened read-only.
    #[arg(long, value_name = "FILE")]
    db: Option<PathBuf>,
    /// Serve the providers of a tool spec file (as `run --spec`).
    #[arg(long, value_name = "SPEC.json")]
    spec: Option<PathBuf>,
    /// Serve an upstream MCP server's tools as the provider NAME: NAME=URL for streamable
    /// HTTP (http:// or https://), or NAME=COMMAND ARGS... for a child process over stdio,
    /// the words split as a shell would (quotes group, a backslash escapes, nothing is
    /// expanded) and its stderr going to ours. Each tool takes one arguments object
    /// (`NAME.tool({ ... })`). Repeat for more servers.
    #[arg(long = "server", value_name = "NAME=COMMAND ARGS...|NAME=URL")]
    servers: Vec<String>,
    /// Serve streamable HTTP on ADDR (HOST:PORT, e.g. 127.0.0.1:8808) at the path /mcp,
    /// instead of stdio. Only a loopback address unless --allow-remote.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Accept --http on an address that is not loopback. There is no authentication:
    /// whoever reaches the port runs programs against every provider.
    #[arg(long, requires = "http")]
    allow_remote: bool,
    /// Wall-clock limit of each execution in milliseconds.
    #[arg(long, value_name = "N")]
    timeout_ms: Option<u64>,
    /// The engine's memory limit of each execution in bytes.
    #[arg(long, value_name = "N")]
    memory_limit_bytes: Option<usize>,
    #[command(flatten)]
    budget: crate::BudgetArgs,
    /// Executions running at once, over every client; a call beyond is refused (an error
    /// result saying so), not queued.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_EXECUTIONS)]
    max_executions: usize,
    /// A run that yielded (`execute` with yieldAfterMs) and that nobody waits on for this
    /// many seconds is ended; a finished one's outcome is dropped.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_CELL_TIME_TO_LIVE.as_secs())]
    cell_ttl_secs: u64,
    /// Runs that yielded kept at once, over every client; one more ends the one waited on
    /// least recently.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_LIVE_CELLS)]
    max_cells: usize,
    /// Progressive discovery: `execute` carries each provider's name, description and tool
    /// count instead of every declaration, and the tools `search` and `describe` are listed.
    /// auto turns it on above 100 tools or 40,000 bytes of declarations; --discovery alone is on.
    #[arg(long, value_name = "WHEN", value_parser = ["auto", "on", "off"], default_value = "auto", num_args = 0..=1, default_missing_value = "on")]
    discovery: String,
    /// Hold each call matching PATTERN (PROVIDER.TOOL, either part may be *: db.query,
    /// db.*, *) until a person approves it: the MCP client that started the run asks them
    /// by elicitation, showing the tool and its arguments. A client without elicitation
    /// gets such calls denied. Repeat for more patterns.
    #[arg(long = "ask", value_name = "PATTERN")]
    ask: Vec<String>,
    /// Deny each call matching PATTERN without asking anyone (before every --ask: a call
    /// matching both is denied). Repeat for more patterns.
    #[arg(long = "deny", value_name = "PATTERN")]
    deny: Vec<String>,
    /// How long a held call waits for the person's answer, in milliseconds, the run's
    /// wall clock paused meanwhile; past it the call is not made. 0: as long as it takes.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_APPROVAL_TIMEOUT.as_secs() * 1000)]
    approval_timeout_ms: u64,
    #[command(flatten)]
    engine: EngineArg,
    /// in-process, or process: each execution in a `codemode stdio` worker process killed
    /// at its stop [default: process on v8, whose builtins ignore their stop; in-process on
    /// quickjs].
    #[arg(long, value_name = "WHERE", value_parser = ["in-process", "process"])]
    isolation: Option<String>,
    /// How process isolation confines its workers: required (default on Linux), best-effort
    /// or off (docs/security.md).
    #[arg(long, value_name = "LEVEL", value_parser = ["required", "best-effort", "off"])]
    confinement: Option<String>,
}

const AFTER_HELP: &str = "\
The server offers the tool `execute`, whose description declares every provider; each
call runs its program in a fresh engine. Given yieldAfterMs, a run still going after that
long answers that it is running, and the tools `wait` and `terminate` go on with it.
Over stdio, stdout carries the protocol and notes go to stderr. With --ask, a call that
needs approval is shown to the person behind the client (elicitation) and waits for them.

Examples:
  codemode mcp --db shop.sql
  codemode mcp --server 'everything=npx -y @modelcontextprotocol/server-everything'
  codemode mcp --server 'files=node \"/opt/my server/index.js\" --root /srv' --http 127.0.0.1:8808
  codemode mcp --server tracker=https://mcp.example.com/mcp
  codemode mcp --db shop.sql --ask 'db.*' --deny db.tables

An MCP client's configuration entry:
  {\"command\": \"codemode\", \"args\": [\"mcp\", \"--db\", \"/path/to/shop.sql\"]}

Exit status:
  0  the client closed stdin
  1  serving failed: stderr says why
  2  bad usage, or a provider that cannot start: stderr says what to fix";

/// Where an upstream MCP server is, as `--server` says.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// A child process speaking MCP on its stdin and stdout.
    Command { program: String, args: Vec<String> },
    /// A streamable HTTP endpoint.
    Url(String),
}

/// `NAME=COMMAND ARGS...` or `NAME=URL`, read.
fn parse_server(text: &str) -> Result<(String, Target), String> {
    let Some((name, target)) = text.split_once('=') else {
        return Err(format!(
            "--server {text:?} has no `=`: write --server NAME=COMMAND ARGS... or --server NAME=URL"
        ));
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("--server {text:?} has no provider name before `=`"));
    }
    let target = target.trim();
    if target.starts_with("http://") || target.starts_with("https://") {
        return Ok((name.to_owned(), Target::Url(target.to_owned())));
    }
    let mut words =
        split_words(target).map_err(|problem| format!("--server {text:?}: {problem}"))?.into_iter();
    let Some(program) = words.next() else {
        return Err(format!("--server {text:?} names no command or URL after `=`"));
    };
    Ok((name.to_owned(), Target::Command { program, args: words.collect() }))
}

/// Words as a POSIX shell splits them, without expansions: whitespace separates, single
/// quotes keep everything, double quotes keep everything but `\"` and `\\`, and a
/// backslash outside quotes keeps the next character.
fn split_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => words.extend(word.take()),
            '\'' => {
                let current = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => current.push(c),
                        None => return Err("a single quote is not closed".to_owned()),
                    }
                }
            }
            '"' => {
                let current = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => current.push(c),
                            Some(c) => {
                                current.push('\\');
                                current.push(c);
                            }
                            None => return Err("a double quote is not closed".to_owned()),
                        },
                        Some(c) => current.push(c),
                        None => return Err("a double quote is not closed".to_owned()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(c) => word.get_or_insert_with(String::new).push(c),
                None => return Err("it ends with a lone backslash".to_owned()),
            },
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

/// Run `codemode mcp`: exit 2 for bad usage or a provider that cannot start, 1 when
/// serving fails, 0 when the client (stdio) closes.
pub(crate) fn mcp(args: McpArgs) -> ExitCode {
    let engine = match args.engine.kind_with_web_assembly() {
        Ok(engine) => engine,
        Err(problem) => return crate::usage_error(problem),
    };
    let servers = match args.servers.iter().map(|s| parse_server(s)).collect::<Result<Vec<_>, _>>() {
        Ok(servers) => servers,
        Err(problem) => return crate::usage_error(problem),
    };
    let approvals = match approval_policy(&args) {
        Ok(approvals) => approvals,
        Err(problem) => return crate::usage_error(problem),
    };
    let limits = ServeLimits::default()
        .timeout(args.timeout_ms.map(Duration::from_millis))
        .memory_limit_bytes(args.memory_limit_bytes)
        .cpu_time_limit(args.budget.cpu_time_limit_ms.map(Duration::from_millis))
        .max_calls(args.budget.max_calls)
        .max_executions(args.max_executions)
        .cell_time_to_live(Duration::from_secs(args.cell_ttl_secs))
        .max_cells(args.max_cells);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return crate::usage_error(format!("cannot start the async runtime: {e}")),
    };
    let code = runtime.block_on(async {
        let server = match start(&args, servers, limits, engine).await {
            Ok(server) => server,
            Err(problem) => return crate::usage_error(problem),
        };
        let server = match approvals {
            Some(policy) => server.with_approvals(policy),
            None => server,
        };
        let served = match &args.http {
            None => server.serve_stdio().await,
            Some(address) => match bind(address, args.allow_remote).await {
                Ok(listener) => server.serve_http(listener).await,
                Err(problem) => return crate::usage_error(problem),
            },
        };
        match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(problem) => {
                eprintln!("codemode mcp: {problem}");
                ExitCode::FAILURE
            }
        }
    });
    // A blocking read of stdin, or an upstream's task, must not hold the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// The approval policy of --deny, --ask and --approval-timeout-ms (denials first, each
/// with [`texts::APPROVAL_DENIED_BY_SERVER`]); `None` when they are all left as they
/// default, so calls pass as before. `Err` names the pattern that does not parse.
fn approval_policy(args: &McpArgs) -> Result<Option<ApprovalPolicy>, String> {
    let timeout = (args.approval_timeout_ms > 0).then(|| Duration::from_millis(args.approval_timeout_ms));
    if args.ask.is_empty() && args.deny.is_empty() && timeout == Some(DEFAULT_APPROVAL_TIMEOUT) {
        return Ok(None);
    }
    let pattern = |flag: &str, text: &str| text.parse::<ToolPattern>().map_err(|e| format!("{flag} {e}"));
    let mut policy = ApprovalPolicy::new().timeout(timeout);
    for text in &args.deny {
        policy = policy.deny(pattern("--deny", text)?, texts::APPROVAL_DENIED_BY_SERVER.fill(&[text]));
    }
    for text in &args.ask {
        policy = policy.ask(pattern("--ask", text)?);
    }
    if !args.ask.is_empty() || !args.deny.is_empty() {
        let said = |flag: &str, patterns: &[String]| {
            patterns.iter().map(|p| format!(" {flag} {p}")).collect::<String>()
        };
        eprintln!("codemode mcp: approvals:{}{}", said("--deny", &args.deny), said("--ask", &args.ask));
    }
    Ok(Some(policy))
}

/// The server: the providers of --db, --spec and every --server, on the chosen engine.
async fn start(
    args: &McpArgs,
    servers: Vec<(String, Target)>,
    limits: ServeLimits,
    engine: codemode_executor::EngineKind,
) -> Result<CodeModeServer, String> {
    let mut providers = crate::providers(args.db.as_deref(), args.spec.as_deref())?;
    for (name, target) in servers {
        providers.push(upstream_provider(&name, target).await?);
    }
    let names: Vec<String> = providers.iter().map(|p| p.spec().name.clone()).collect();
    let toolbox = Toolbox::new(providers).map_err(|e| e.to_string())?;
    let discovery = match args.discovery.as_str() {
        "on" => Discovery::On,
        "off" => Discovery::Off,
        _ => Discovery::Auto,
    };
    let server = CodeModeServer::with_discovery(executor(args, engine)?, toolbox, limits, discovery)
        .map_err(|e| e.to_string())?;
    if names.is_empty() {
        eprintln!(
            "codemode mcp: note: no providers (give --db, --spec or --server); programs can only compute"
        );
    } else {
        eprintln!("codemode mcp: providers: {}", names.join(", "));
    }
    Ok(server)
}

/// The executor on `engine`: in worker processes (this binary's `stdio`, confined as
/// --confinement says) unless --isolation in-process, or QuickJS's default; V8 in-process
/// is warned of on stderr.
fn executor(args: &McpArgs, engine: EngineKind) -> Result<Arc<dyn Execute>, String> {
    let isolation = match args.isolation.as_deref() {
        Some("process") => IsolationKind::Process,
        Some(_) => IsolationKind::InProcess,
        None => IsolationKind::default_for(engine),
    };
    let mut config = crate::config(engine).web_assembly(args.engine.webassembly);
    if isolation != IsolationKind::Process {
        if engine == EngineKind::V8 {
            eprintln!("codemode mcp: warning: {IN_PROCESS_V8_WARNING}");
        }
        return Ok(Arc::new(Executor::new(config)));
    }
    if let Some(confinement) = args.confinement.as_deref() {
        config.confinement = confinement.parse::<Confinement>().map_err(|e| e.to_string())?;
    }
    let program = std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?;
    eprintln!(
        "codemode mcp: executions run in worker processes ({} stdio), confinement {}",
        program.display(),
        config.confinement.name()
    );
    Ok(Arc::new(ProcessExecutor::new(config, WorkerCommand::new(program, ["stdio"]))))
}

/// An upstream MCP server's tools as the provider `name`, each taking one arguments object.
async fn upstream_provider(name: &str, target: Target) -> Result<Provider, String> {
    let connected = match target {
        // The server's stderr is ours: an MCP client logs a server's stderr, and a server
        // that fails to start says why there.
        Target::Command { program, args } => {
            let mut command = tokio::process::Command::new(program);
            command.args(args);
            upstream::Upstream::spawn_command(command, Stdio::inherit()).await
        }
        Target::Url(url) => upstream::Upstream::connect_http(url, None).await,
    };
    let provider = match connected {
        Ok(connected) => connected.provider(name).await,
        Err(error) => Err(error),
    };
    provider.map_err(|error| format!("--server {name}: {error}"))
}

/// The providers of `--server` flags, as specs (for `search` and `describe`).
pub(crate) fn upstream_specs(servers: &[String]) -> Result<Vec<codemode_protocol::ProviderSpec>, String> {
    if servers.is_empty() {
        return Ok(Vec::new());
    }
    let servers = servers.iter().map(|s| parse_server(s)).collect::<Result<Vec<_>, _>>()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let specs = runtime.block_on(async {
        let mut specs = Vec::new();
        for (name, target) in servers {
            specs.push(upstream_provider(&name, target).await?.spec().clone());
        }
        Ok::<_, String>(specs)
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    specs
}

/// Bind `address`; refuse one that is not loopback unless `allow_remote`.
async fn bind(address: &str, allow_remote: bool) -> Result<tokio::net::TcpListener, String> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| format!("cannot listen on {address}: {e} (write HOST:PORT, e.g. 127.0.0.1:8808)"))?;
    let local = listener.local_addr().map_err(|e| format!("cannot read the bound address: {e}"))?;
    if !local.ip().is_loopback() {
        if !allow_remote {
            return Err(format!(
                "--http {address} is not a loopback address, and the server has no authentication: \
                 anyone who reaches {local} could run programs against every provider. Bind 127.0.0.1 \
                 or [::1] (a client on another machine can come through an SSH tunnel or an \
                 authenticating proxy), or pass --allow-remote to accept the exposure."
            ));
        }
        eprintln!(
            "codemode mcp: warning: serving on {local} without authentication (--allow-remote): \
             whoever reaches it runs programs against every provider"
        );
    }
    eprintln!("codemode mcp: serving streamable HTTP at http://{local}{HTTP_PATH}");
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        split_words(text).unwrap()
    }

    #[test]
    fn words_split_as_a_shell_would() {
        assert_eq!(words("  node  index.js stdio "), ["node", "index.js", "stdio"]);
        assert_eq!(
            words(r#"node "/opt/my server/index.js" 'a b' c\ d"#),
            ["node", "/opt/my server/index.js", "a b", "c d"]
        );
        assert_eq!(words(r#"echo "" '' "say \"hi\" \n""#), ["echo", "", "", r#"say "hi" \n"#]);
        assert_eq!(words(r#"a"b"'c'"#), ["abc"]);
        assert!(split_words("node 'open").is_err());
        assert!(split_words("node \"open").is_err());
        assert!(split_words("node \\").is_err());
    }

    #[test]
    fn a_server_is_a_url_or_a_command() {
        assert_eq!(
            parse_server("gh=https://example.com/mcp").unwrap(),
            ("gh".to_owned(), Target::Url("https://example.com/mcp".to_owned()))
        );
        assert_eq!(
            parse_server("everything=node /x/index.js stdio").unwrap(),
            (
                "everything".to_owned(),
                Target::Command {
                    program: "node".to_owned(),
                    args: vec!["/x/index.js".to_owned(), "stdio".to_owned()]
                }
            )
        );
        for bad in ["everything", "=node", "everything=", "everything=  "] {
            assert!(parse_server(bad).is_err(), "{bad}");
        }
    }
}
