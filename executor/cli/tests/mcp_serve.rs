//! `codemode mcp` driven by a real MCP client, the official TypeScript SDK on node
//! (`tests/mcp/client.mjs`), over stdio and over streamable HTTP. Nothing is mocked: the
//! binary serves the SQLite example database and the reference `server-everything` (the
//! node peers installed by `support/npm.rs` when missing), and the client's answers are
//! compared whole.

#[path = "../../tests/support/npm.rs"]
mod npm;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use codemode_protocol::texts;
use serde_json::{Value as Json, json};

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn shop() -> String {
    manifest().join("examples/shop.sql").display().to_string()
}

fn codemode() -> &'static str {
    env!("CARGO_BIN_EXE_codemode")
}

/// One step of the client: list the tools, or call one.
fn list() -> Json {
    json!({ "list": true })
}

fn call(code: &str) -> Json {
    json!({ "call": "execute", "arguments": { "code": code } })
}

/// Run the client with `steps` against `target` (`["stdio", command, args...]` or
/// `["http", url]`): its lines, parsed, and its stderr (where a stdio server's goes too).
fn client(steps: &[Json], target: &[&str]) -> (Vec<Json>, String) {
    let output = Command::new("node")
        .arg(npm::peers().join("client.mjs"))
        .arg(Json::from(steps.to_vec()).to_string())
        .args(target)
        .output()
        .expect("node runs");
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "the client failed:\n{stdout}\n{stderr}");
    let lines: Vec<Json> = stdout.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(lines.len(), steps.len() + 1, "one line per step after the server's:\n{stdout}\n{stderr}");
    assert_eq!(lines[0]["server"], json!({"name": "codemode", "title": "Code mode", "version": VERSION}));
    (lines[1..].to_vec(), stderr)
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The code tool `codemode declarations` prints for these arguments.
fn code_tool(args: &[&str]) -> Json {
    let output =
        Command::new(codemode()).arg("declarations").args(args).args(["--format", "code-tool"]).output();
    serde_json::from_slice(&output.unwrap().stdout).unwrap()
}

/// The tools the server lists around `code_tool`: it taking `yieldAfterMs`, then `wait`
/// and `terminate`.
fn served(code_tool: Json) -> Json {
    use codemode_protocol::tools::{CodeTool, terminate_tool, wait_tool};
    let code_tool: CodeTool = serde_json::from_value(code_tool).unwrap();
    json!({ "tools": [code_tool.with_yield(), wait_tool(), terminate_tool()] })
}

/// A returned outcome as the server answers it.
fn returned(result: Json, text: &str, logs: &[&str]) -> Json {
    let mut content = vec![json!({"type": "text", "text": text})];
    if !logs.is_empty() {
        content.push(json!({"type": "text", "text": logs.join("\n")}));
    }
    json!({"content": content, "structuredContent": {"result": result, "logs": logs}, "isError": false})
}

/// An error outcome as the server answers it.
fn failed(kind: &str, error: &str, logs: &[&str]) -> Json {
    let mut content = vec![json!({"type": "text", "text": error})];
    if !logs.is_empty() {
        content.push(json!({"type": "text", "text": logs.join("\n")}));
    }
    json!({
        "content": content,
        "structuredContent": {"error": error, "kind": kind, "logs": logs},
        "isError": true
    })
}

/// An error outcome placed at `line`, `column` of the program: the model reads the place
/// after the text, and structuredContent carries it as `location`.
fn failed_at(kind: &str, error: &str, (line, column): (u32, u32), logs: &[&str]) -> Json {
    let mut outcome = failed(kind, error, logs);
    outcome["content"][0]["text"] = json!(format!("{error} (at line {line}, column {column})"));
    outcome["structuredContent"]["location"] = json!({"line": line, "column": column});
    outcome
}

const CUSTOMERS: &str = "async () => {
  const rows = await db.query('SELECT name FROM customers WHERE id <= ? ORDER BY id', 2)
  console.log(`${rows.length} customers`)
  console.log('done')
  return rows.map((row) => row.name)
}";

const THROWS: &str = "async () => {
  console.log('looking for customer 9')
  const [customer] = await db.query('SELECT name FROM customers WHERE id = ?', 9)
  if (!customer) throw new Error('No customer 9.')
}";

const SPINS: &str = "async () => { console.log('spinning'); while (true) {} }";

#[test]
fn over_stdio_a_client_lists_one_tool_and_runs_programs_against_the_database() {
    let started = Instant::now();
    let top_customers = std::fs::read_to_string(manifest().join("examples/top-customers.js")).unwrap();
    let steps = [
        list(),
        call(CUSTOMERS),
        call(&top_customers),
        call(THROWS),
        call(SPINS),
        call("async () => { globalThis.seen = (globalThis.seen ?? 0) + 1; return globalThis.seen }"),
        call("async () => { globalThis.seen = (globalThis.seen ?? 0) + 1; return globalThis.seen }"),
        call("async () => {"),
        json!({ "call": "execute", "arguments": {} }),
        json!({ "call": "execute", "arguments": { "code": 7 } }),
        json!({ "call": "execute", "arguments": { "code": "async () => 1", "language": "js" } }),
        json!({ "call": "query", "arguments": { "sql": "SELECT 1" } }),
    ];
    let (lines, stderr) =
        client(&steps, &["stdio", codemode(), "mcp", "--db", &shop(), "--timeout-ms", "300"]);

    // The code tool, its description declaring the provider `db` and how to go on with a
    // run that yields, then `wait` and `terminate`.
    assert_eq!(lines[0], served(code_tool(&["--db"])));
    let execute = &lines[0]["tools"][0];
    assert!(
        execute["description"].as_str().unwrap().contains(codemode_protocol::texts::CELL_CODE_TOOL_PARAGRAPH)
    );
    assert_eq!(execute["inputSchema"]["properties"]["yieldAfterMs"]["type"], "integer");
    assert!(lines[0]["tools"][0]["description"].as_str().unwrap().contains("declare const db: {"));

    assert_eq!(
        lines[1],
        returned(
            json!(["Ada Lovelace", "Grace Hopper"]),
            r#"["Ada Lovelace","Grace Hopper"]"#,
            &["2 customers", "done"]
        )
    );
    // The README's main job: structuredContent is what `codemode run` prints.
    let run = Command::new(codemode())
        .args(["run", &manifest().join("examples/top-customers.js").display().to_string(), "--db", &shop()])
        .output()
        .unwrap();
    let printed: Json = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(lines[2]["structuredContent"], printed);
    assert_eq!(
        lines[2]["content"],
        json!([
            {"type": "text", "text": concat!(
                r#"[{"id":2,"name":"Grace Hopper","orders":1,"spent_cents":13200,"spent":"132.00","avatarBytes":4},"#,
                r#"{"id":1,"name":"Ada Lovelace","orders":2,"spent_cents":12350,"spent":"123.50","avatarBytes":8},"#,
                r#"{"id":4,"name":"Katherine Johnson","orders":2,"spent_cents":11300,"spent":"113.00","avatarBytes":4}]"#
            )},
            {"type": "text", "text": "4 tables: customers, order_items, orders, products"}
        ])
    );

    assert_eq!(lines[3], failed_at("thrown", "No customer 9.", (4, 24), &["looking for customer 9"]));
    assert_eq!(lines[4], failed("timeout", "Execution timed out after 300 ms.", &["spinning"]));
    // Every call is a fresh engine: nothing a program left behind is there for the next.
    assert_eq!(lines[5], returned(json!(1), "1", &[]));
    assert_eq!(lines[6], returned(json!(1), "1", &[]));
    assert_eq!(lines[7]["structuredContent"]["kind"], "syntax");
    assert_eq!(lines[7]["isError"], true);

    // Arguments that do not fit are a tool error the model reads (SEP-1303) ...
    assert_eq!(
        lines[8],
        failed(
            "invalid",
            "The tool `execute` needs the argument `code`: the program's source as a string, such as \
             {\"code\": \"async () => { return 1 }\"}.",
            &[]
        )
    );
    assert_eq!(
        lines[9],
        failed(
            "invalid",
            "The argument `code` of the tool `execute` must be a string (the program's source), not a number.",
            &[]
        )
    );
    assert_eq!(
        lines[10],
        failed(
            "invalid",
            "The tool `execute` takes the argument `code` (and, optionally, `yieldAfterMs`); `language` is \
             not one of its arguments. Send {\"code\": \"async () => { ... }\"}.",
            &[]
        )
    );
    // ... and an unknown tool is a JSON-RPC error.
    assert_eq!(
        lines[11],
        json!({"error": {
            "code": -32602,
            "message": "MCP error -32602: Unknown tool: \"query\". This server's tools are `execute`, `wait` and `terminate`."
        }})
    );
    assert!(stderr.contains("codemode mcp: providers: db"), "{stderr}");
    eprintln!("stdio: {:?}", started.elapsed());
}

#[test]
fn with_no_providers_it_still_serves_programs_that_compute_and_says_so() {
    let (lines, stderr) = client(&[list(), call("async () => 6 * 7")], &["stdio", codemode(), "mcp"]);
    let none = codemode_protocol::ToolTable::new(Vec::new()).unwrap().code_tool();
    assert_eq!(lines[0], served(serde_json::to_value(none).unwrap()));
    assert_eq!(lines[1], returned(json!(42), "42", &[]));
    assert!(stderr.contains("codemode mcp: note: no providers (give --db, --spec or --server)"), "{stderr}");
}

/// `--isolation process` runs each execution in a worker process (this binary's `stdio`,
/// confined), said on stderr at start; QuickJS's default stays in-process, said nothing of.
#[test]
fn process_isolation_is_chosen_by_flag_and_said_at_start() {
    let (lines, stderr) =
        client(&[call("async () => 6 * 7")], &["stdio", codemode(), "mcp", "--isolation", "process"]);
    assert_eq!(lines[0], returned(json!(42), "42", &[]));
    let confinement = if cfg!(target_os = "linux") { "required" } else { "off" };
    assert_eq!(
        stderr.lines().next(),
        Some(
            format!(
                "codemode mcp: executions run in worker processes ({} stdio), confinement {confinement}",
                codemode()
            )
            .as_str()
        ),
        "{stderr}"
    );
    let (_, stderr) = client(&[call("async () => 1")], &["stdio", codemode(), "mcp"]);
    assert!(!stderr.contains("worker processes") && !stderr.contains("warning"), "{stderr}");
}

/// `codemode mcp --http` on a port of its own; killed when dropped.
struct HttpServer {
    child: Child,
    url: String,
}

impl HttpServer {
    fn start(args: &[&str]) -> HttpServer {
        let mut child = Command::new(codemode())
            .arg("mcp")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (sender, lines) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        let mut seen = Vec::new();
        loop {
            match lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => match line.strip_prefix("codemode mcp: serving streamable HTTP at ") {
                    Some(url) => return HttpServer { child, url: url.to_owned() },
                    None => seen.push(line),
                },
                Err(_) => {
                    let _ = child.kill();
                    panic!(
                        "`codemode mcp {}` did not say where it serves:\n{}",
                        args.join(" "),
                        seen.join("\n")
                    );
                }
            }
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn over_http_each_session_runs_its_own_executions() {
    let started = Instant::now();
    let server = HttpServer::start(&["--db", &shop(), "--http", "127.0.0.1:0", "--timeout-ms", "300"]);
    assert!(server.url.starts_with("http://127.0.0.1:") && server.url.ends_with("/mcp"), "{}", server.url);

    let leave = "async () => { globalThis.left = 'by session one'; return typeof globalThis.left }";
    let look = "async () => typeof globalThis.left";
    let (first, _) =
        client(&[list(), call(CUSTOMERS), call(leave), call(look), call(SPINS)], &["http", &server.url]);
    assert_eq!(first[0], served(code_tool(&["--db"])));
    assert_eq!(
        first[1],
        returned(
            json!(["Ada Lovelace", "Grace Hopper"]),
            r#"["Ada Lovelace","Grace Hopper"]"#,
            &["2 customers", "done"]
        )
    );
    assert_eq!(first[2], returned(json!("string"), r#""string""#, &[]));
    assert_eq!(first[3], returned(json!("undefined"), r#""undefined""#, &[]));
    assert_eq!(first[4], failed("timeout", "Execution timed out after 300 ms.", &["spinning"]));

    // A second session, on the same server, finds nothing of the first's.
    let (second, _) = client(&[call(look), call(THROWS)], &["http", &server.url]);
    assert_eq!(second[0], returned(json!("undefined"), r#""undefined""#, &[]));
    assert_eq!(second[1], failed_at("thrown", "No customer 9.", (4, 24), &["looking for customer 9"]));
    eprintln!("http: {:?}", started.elapsed());
}

/// The reference server of the official MCP packages, on stdio.
fn everything() -> String {
    let entry = npm::node_script("@modelcontextprotocol/server-everything/dist/index.js");
    format!("everything=node '{}' stdio", entry.display())
}

#[test]
fn an_upstream_servers_tools_are_a_provider_beside_the_database() {
    let program = "async () => {
  const [echo, sum, weather] = await Promise.all([
    everything.echo({ message: 'from codemode' }),
    everything.get_sum({ a: 19, b: 23 }),
    everything.get_structured_content({ location: 'Chicago' }),
  ])
  try {
    await everything.get_sum({ a: 'nineteen', b: 23 })
  } catch (error) {
    console.log(error.message)
  }
  const [{ n }] = await db.query('SELECT count(*) AS n FROM customers')
  return { echo, sum, weather, customers: n }
}";
    let (lines, stderr) = client(
        &[list(), call(program)],
        &["stdio", codemode(), "mcp", "--db", &shop(), "--server", &everything()],
    );
    let tools = lines[0]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 3);
    assert_eq!(tools[0]["name"], "execute");
    let description = tools[0]["description"].as_str().unwrap();
    for declared in [
        "declare const db: {",
        "declare const everything: {",
        "  /** Returns the sum of two numbers */\n  get_sum(options: {\n    /** First number */\n    a: number;",
    ] {
        assert!(description.contains(declared), "{declared:?} in {description}");
    }
    assert_eq!(
        lines[1],
        returned(
            json!({
                "echo": "Echo: from codemode",
                "sum": "The sum of 19 and 23 is 42.",
                "weather": {"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82},
                "customers": 4
            }),
            concat!(
                r#"{"echo":"Echo: from codemode","sum":"The sum of 19 and 23 is 42.","#,
                r#""weather":{"temperature":36,"conditions":"Light rain / drizzle","humidity":82},"customers":4}"#
            ),
            &[
                "MCP error -32602: Input validation error: Invalid arguments for tool get-sum: Invalid input: \
               expected number, received string at a"
            ]
        )
    );
    assert!(stderr.contains("codemode mcp: providers: db, everything"), "{stderr}");
}

#[test]
fn code_mode_is_an_upstream_of_code_mode_over_http() {
    let inner = HttpServer::start(&["--db", &shop(), "--http", "127.0.0.1:0"]);
    let program = format!(
        "async () => {{
  const count = await inner.execute({{ code: {count:?} }})
  try {{
    await inner.execute({{ code: {throws:?} }})
  }} catch (error) {{
    console.log(error.message)
  }}
  return count
}}",
        count = "async () => { console.log('counting'); return (await db.query('SELECT count(*) AS n FROM customers'))[0].n }",
        throws = THROWS,
    );
    let server = format!("inner={}", inner.url);
    let (lines, _) = client(&[call(&program)], &["stdio", codemode(), "mcp", "--server", &server]);
    // The inner server's structuredContent is what the outer program gets; its error
    // outcome's texts (error, then logs) are the message the outer program catches.
    assert_eq!(
        lines[0],
        returned(
            json!({"result": 4, "logs": ["counting"]}),
            r#"{"result":4,"logs":["counting"]}"#,
            &["No customer 9. (at line 4, column 24)\nlooking for customer 9"]
        )
    );
}

#[test]
fn a_call_beyond_the_maximum_of_executions_at_once_is_refused_not_queued() {
    let together = json!({ "together": [call(SPINS), call("async () => 1")], "staggerMs": 200 });
    let (lines, _) = client(
        &[together, call("async () => 2")],
        &["stdio", codemode(), "mcp", "--max-executions", "1", "--timeout-ms", "1000"],
    );
    assert_eq!(
        lines[0],
        json!([
            failed("timeout", "Execution timed out after 1000 ms.", &["spinning"]),
            failed(
                "invalid",
                "This server is running its maximum of 1 executions at once. Wait for one to end, then call again.",
                &[]
            )
        ])
    );
    // The permit comes back when the execution ends.
    assert_eq!(lines[1], returned(json!(2), "2", &[]));
}

#[test]
fn a_call_the_client_cancels_ends_its_execution() {
    let started = Instant::now();
    let mut cancelled = call(SPINS);
    cancelled["abortAfterMs"] = json!(300);
    let mut after = call("async () => 'the only execution'");
    after["delayMs"] = json!(200);
    // One execution at a time, each allowed a minute: the next call runs only if the
    // cancelled one has ended.
    let (lines, _) = client(
        &[cancelled, after],
        &["stdio", codemode(), "mcp", "--max-executions", "1", "--timeout-ms", "60000"],
    );
    // The SDK's own error for a request it aborted.
    assert_eq!(
        lines[0],
        json!({"error": {"code": -32001, "message": "MCP error -32001: Error: aborted by the client"}})
    );
    assert_eq!(lines[1], returned(json!("the only execution"), r#""the only execution""#, &[]));
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
}

/// The status line of a POST of an `initialize` to `url` with this `Host` header.
fn initialize_status(url: &str, host: &str) -> String {
    use std::io::{Read, Write};
    let authority = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut head = [0; 12];
    stream.read_exact(&mut head).unwrap();
    String::from_utf8_lossy(&head).into_owned()
}

#[test]
fn on_loopback_a_request_naming_another_host_is_refused() {
    // A web page that rebinds its own name to 127.0.0.1 still sends its name as the Host.
    let server = HttpServer::start(&["--http", "127.0.0.1:0"]);
    let authority = server.url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    assert_eq!(initialize_status(&server.url, "evil.example"), "HTTP/1.1 403");
    assert_eq!(initialize_status(&server.url, &authority), "HTTP/1.1 200");
    let port = authority.rsplit(':').next().unwrap();
    assert_eq!(initialize_status(&server.url, &format!("localhost:{port}")), "HTTP/1.1 200");
}

#[test]
fn a_bind_that_is_not_loopback_is_refused_unless_allowed() {
    let output = Command::new(codemode()).args(["mcp", "--http", "0.0.0.0:0"]).output().unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--http 0.0.0.0:0 is not a loopback address, and the server has no authentication")
    );
    assert!(stderr.contains("pass --allow-remote to accept the exposure"), "{stderr}");

    let server = HttpServer::start(&["--http", "0.0.0.0:0", "--allow-remote"]);
    assert!(server.url.starts_with("http://0.0.0.0:"), "{}", server.url);
}

#[test]
fn bad_usage_exits_2_with_what_to_fix() {
    for (args, expected) in [
        (&["--timeout-ms", "0"][..], "timeoutMs"),
        (&["--max-executions", "0"][..], "must be at least 1"),
        (&["--max-cells", "0"][..], "runs that yielded kept at once must be at least 1"),
        (&["--server", "everything"][..], "--server \"everything\" has no `=`"),
        (&["--server", "everything=node 'index.js"][..], "a single quote is not closed"),
        (&["--allow-remote"][..], "--http"),
        (&["--db", "/nonexistent/shop.sqlite"][..], "cannot open the database"),
        (
            &["--ask", "db."][..],
            "codemode: --ask \"db.\" is not a tool pattern: write PROVIDER.TOOL, where either part may be *, such as db.exec or db.*\n",
        ),
        (&["--deny", ".query"][..], "codemode: --deny \".query\" is not a tool pattern"),
    ] {
        let output = Command::new(codemode()).arg("mcp").args(args).stdin(Stdio::null()).output().unwrap();
        let (stdout, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}");
    }
}

/// Logs every 50 ms for a second, then returns.
const TWENTY_LINES: &str = "async () => { for (let i = 0; i < 20; i++) { console.log('line ' + i); await new Promise(r => setTimeout(r, 50)) } return 'done' }";

fn yielding(code: &str, yield_after_ms: Json) -> Json {
    json!({ "call": "execute", "arguments": { "code": code, "yieldAfterMs": yield_after_ms } })
}

fn on_cell(tool: &str, arguments: Json) -> Json {
    json!({ "call": tool, "arguments": arguments })
}

/// The logs of a running answer, checked whole: the text telling the model to call
/// `wait`, the lines, and the structured shape.
fn running_logs(answer: &Json, cell: &str) -> Vec<String> {
    let status = &answer["structuredContent"];
    assert_eq!(
        (status["status"].as_str(), status["cell"].as_str()),
        (Some("running"), Some(cell)),
        "{answer}"
    );
    let logs: Vec<String> = serde_json::from_value(status["logs"].clone()).unwrap();
    let mut content = vec![json!({"type": "text", "text": texts::CELL_RUNNING.fill(&[cell])})];
    if !logs.is_empty() {
        content.push(json!({"type": "text", "text": logs.join("\n")}));
    }
    assert_eq!(answer["content"], json!(content), "{answer}");
    assert_eq!(answer["isError"], false);
    logs
}

/// `wait` answers until the outcome, read: every line once in order, and the outcome's
/// own answer as `execute` gives one with the lines not yet handed out.
fn twenty_lines_in_order(first: &Json, waits: &Json) {
    let cell = first["structuredContent"]["cell"].as_str().unwrap().to_owned();
    let mut heard = running_logs(first, &cell);
    let waits = waits.as_array().unwrap();
    assert!(waits.len() >= 2, "a second-long run yields more than once: {waits:?}");
    for answer in &waits[..waits.len() - 1] {
        heard.extend(running_logs(answer, &cell));
    }
    let expected: Vec<String> = (0..20).map(|i| format!("line {i}")).collect();
    let rest: Vec<&str> = expected[heard.len()..].iter().map(String::as_str).collect();
    assert_eq!(heard, expected[..heard.len()]);
    assert_eq!(waits.last().unwrap(), &returned(json!("done"), r#""done""#, &rest));
}

#[test]
fn a_run_that_yields_is_waited_on_until_its_outcome_or_terminated() {
    let sleeps = "async () => { console.log('sleeping'); await new Promise(r => setTimeout(r, 600000)) }";
    let steps = [
        yielding(TWENTY_LINES, json!(100)),
        json!({ "call": "wait", "arguments": { "cell": "$cell", "yieldAfterMs": 100 }, "untilSettled": true }),
        yielding(sleeps, json!(300)),
        on_cell("terminate", json!({ "cell": "$cell" })),
        on_cell("wait", json!({ "cell": "$cell" })),
        yielding("async () => { console.log('quick'); return 1 }", json!(20000)),
        yielding("async () => 1", json!(-5)),
        yielding("async () => 1", json!("soon")),
        on_cell("wait", json!({})),
        on_cell("wait", json!({ "cell": "nope" })),
    ];
    let (lines, _) = client(&steps, &["stdio", codemode(), "mcp", "--timeout-ms", "20000"]);
    twenty_lines_in_order(&lines[0], &lines[1]);

    let sleeping = lines[2]["structuredContent"]["cell"].as_str().unwrap().to_owned();
    assert_eq!(running_logs(&lines[2], &sleeping), ["sleeping"]);
    assert_eq!(
        lines[2]["structuredContent"],
        json!({"status": "running", "cell": sleeping, "logs": ["sleeping"], "calls": 0, "timers": 1})
    );
    assert_eq!(lines[3], failed("cancelled", texts::CANCELLED, &[]));
    assert_eq!(lines[4], failed("invalid", &texts::CELL_UNKNOWN.fill(&[&sleeping]), &[]));
    // A run that ends before its yield answers exactly as without one.
    assert_eq!(lines[5], returned(json!(1), "1", &["quick"]));
    assert_eq!(
        lines[6],
        failed(
            "invalid",
            "The argument `yieldAfterMs` of the tool `execute` must be a non-negative integer number of \
             milliseconds, not -5.",
            &[]
        )
    );
    assert_eq!(
        lines[7],
        failed(
            "invalid",
            "The argument `yieldAfterMs` of the tool `execute` must be a non-negative integer number of \
             milliseconds, not a string.",
            &[]
        )
    );
    assert_eq!(lines[8], failed("invalid", &texts::CELL_ARGUMENT_MISSING.fill(&["wait"]), &[]));
    assert_eq!(
        lines[9],
        failed(
            "invalid",
            "No running cell has the id \"nope\": its outcome was already handed out, it was ended \
             (terminated, or not waited on in time), or it never existed. Start a new execution.",
            &[]
        )
    );
}

#[test]
fn over_http_a_cell_belongs_to_the_session_that_started_it() {
    let server = HttpServer::start(&["--http", "127.0.0.1:0", "--timeout-ms", "20000"]);
    let steps = [
        yielding(TWENTY_LINES, json!(100)),
        json!({ "call": "wait", "arguments": { "cell": "$cell" }, "session": "second" }),
        json!({ "call": "terminate", "arguments": { "cell": "$cell" }, "session": "second" }),
        json!({ "call": "wait", "arguments": { "cell": "$cell", "yieldAfterMs": 100 }, "untilSettled": true }),
    ];
    let (lines, _) = client(&steps, &["http", &server.url]);
    let cell = lines[0]["structuredContent"]["cell"].as_str().unwrap().to_owned();
    let unknown = failed("invalid", &texts::CELL_UNKNOWN.fill(&[&cell]), &[]);
    assert_eq!((&lines[1], &lines[2]), (&unknown, &unknown));
    // The other session's refusals took nothing from the run.
    twenty_lines_in_order(&lines[0], &lines[3]);
}

/// `--cpu-time-limit-ms` and `--max-calls` bound every execution the server runs: a spin
/// ends `cpuTime`, a second call under `--max-calls 1` ends `callLimit` though caught, and
/// a run within both returns.
#[test]
fn the_cpu_and_call_budgets_bound_every_execution() {
    let shop = shop();
    let two_calls = "async () => { await db.tables(); try { await db.tables() } catch {} return 'escaped' }";
    let (lines, _) = client(
        &[call(SPINS), call(two_calls), call("async () => (await db.tables()).length > 0")],
        &["stdio", codemode(), "mcp", "--db", &shop, "--cpu-time-limit-ms", "200", "--max-calls", "1"],
    );
    assert_eq!(lines[0], failed("cpuTime", "Execution used its CPU time limit of 200 ms.", &["spinning"]));
    assert_eq!(
        lines[1],
        failed(
            "callLimit",
            "Execution reached its limit of 1 calls (tool calls and fetches together); the call over it was not sent.",
            &[]
        )
    );
    assert_eq!(lines[2], returned(json!(true), "true", &[]));
}

/// Queries customer 1, and answers what a denial says, caught at the call site.
const ASKS: &str = "async () => {
  try {
    const rows = await db.query('SELECT name FROM customers WHERE id = ?', 1)
    return rows.map((row) => row.name)
  } catch (error) {
    return { caught: error.message }
  }
}";

/// A step of `code` whose elicitations the client answers with `answer`.
fn eliciting(code: &str, answer: Json) -> Json {
    let mut step = call(code);
    step["elicit"] = answer;
    step
}

/// What a program catches when `provider.tool` is denied for `reason`.
fn caught(provider: &str, tool: &str, reason: &str) -> Json {
    let text = texts::APPROVAL_DENIED.fill(&[provider, tool, reason]);
    returned(json!({ "caught": text }), &json!({ "caught": text }).to_string(), &[])
}

#[test]
fn over_mcp_a_call_that_needs_approval_is_asked_of_the_person_behind_the_client() {
    let tables =
        "async () => { try { return await db.tables() } catch (error) { return { caught: error.message } } }";
    let decline = |reason: Option<&str>| match reason {
        Some(reason) => json!({ "action": "decline", "content": { "reason": reason } }),
        None => json!({ "action": "decline" }),
    };
    let steps = [
        eliciting(ASKS, json!({ "action": "accept" })),
        eliciting(ASKS, decline(Some("not customer data, please"))),
        eliciting(ASKS, decline(None)),
        eliciting(ASKS, json!({ "action": "cancel" })),
        eliciting(tables, json!({ "action": "accept" })),
        // A run that yields asks through the session that started it, while it waits.
        {
            let mut step = yielding(ASKS, json!(0));
            step["elicit"] = json!({ "action": "accept" });
            step
        },
        on_cell("wait", json!({ "cell": "$cell" }))
            .as_object()
            .cloned()
            .map(|mut wait| {
                wait.insert("untilSettled".to_owned(), json!(true));
                Json::Object(wait)
            })
            .unwrap(),
    ];
    let (lines, stderr) = client(
        &steps,
        &["stdio", codemode(), "mcp", "--db", &shop(), "--ask", "db.query", "--deny", "db.tables"],
    );
    assert!(stderr.contains("codemode mcp: approvals: --deny db.tables --ask db.query\n"), "{stderr}");

    // Accepted: the call runs and the program returns what it found. The person read
    // the pinned message, the arguments as the dispatch got them, and could give a reason.
    assert_eq!(lines[0]["answer"], returned(json!(["Ada Lovelace"]), r#"["Ada Lovelace"]"#, &[]));
    let arguments = "[\n  \"SELECT name FROM customers WHERE id = ?\",\n  1\n]";
    let message = texts::APPROVAL_ELICITATION.fill(&["db", "query", arguments]);
    assert_eq!(
        message,
        "A program wants to call db.query with these arguments:\n[\n  \"SELECT name FROM customers WHERE id = ?\",\n  1\n]\n\
         Accept to let this call run, or decline to refuse it; a reason you give goes to the program."
    );
    assert_eq!(
        lines[0]["elicited"],
        json!([{
            "mode": "form",
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": { "reason": {
                    "type": "string",
                    "title": "Reason",
                    "description": "Why you decline the call (optional): the program reads it."
                } }
            }
        }])
    );
    // Declined: the program catches the denial with the person's reason, or the default.
    assert_eq!(lines[1]["answer"], caught("db", "query", "not customer data, please"));
    assert_eq!(lines[1]["elicited"].as_array().map(Vec::len), Some(1));
    assert_eq!(lines[2]["answer"], caught("db", "query", texts::APPROVAL_DECLINED));
    assert_eq!(lines[3]["answer"], caught("db", "query", texts::APPROVAL_ELICITATION_CANCELLED));
    // --deny: denied with the server's reason, nobody asked.
    let reason = texts::APPROVAL_DENIED_BY_SERVER.fill(&["db.tables"]);
    assert_eq!(reason, "denied by the server's --deny db.tables");
    assert_eq!(lines[4], json!({ "answer": caught("db", "tables", &reason), "elicited": [] }));
    // The cell's outcome, after the person approved.
    let waits = lines[6].as_array().unwrap();
    assert_eq!(waits.last().unwrap(), &returned(json!(["Ada Lovelace"]), r#"["Ada Lovelace"]"#, &[]));
}

#[test]
fn a_client_without_elicitation_gets_the_call_denied_saying_it_cannot_ask() {
    let (lines, _) = client(
        &[call(ASKS), call("async () => (await db.tables()).length")],
        &["stdio", codemode(), "mcp", "--db", &shop(), "--ask", "db.query"],
    );
    assert_eq!(lines[0], caught("db", "query", texts::APPROVAL_NO_ELICITATION));
    assert_eq!(
        texts::APPROVAL_DENIED.fill(&["db", "query", texts::APPROVAL_NO_ELICITATION]),
        "The call db.query was denied: it needs a person's approval, and the MCP client that started this \
         run cannot ask a person for it (the client does not support elicitation)"
    );
    // A call no pattern names passes.
    assert_eq!(lines[1], returned(json!(4), "4", &[]));
}

#[test]
fn over_http_the_session_that_started_the_run_is_asked() {
    let server = HttpServer::start(&["--db", &shop(), "--http", "127.0.0.1:0", "--ask", "db.*"]);
    let steps = [
        eliciting(ASKS, json!({ "action": "accept" })),
        eliciting(ASKS, json!({ "action": "decline", "content": { "reason": "no" } })),
    ];
    let (lines, _) = client(&steps, &["http", &server.url]);
    assert_eq!(lines[0]["answer"], returned(json!(["Ada Lovelace"]), r#"["Ada Lovelace"]"#, &[]));
    assert_eq!(lines[0]["elicited"].as_array().map(Vec::len), Some(1));
    assert_eq!(lines[1]["answer"], caught("db", "query", "no"));
}

/// `--discovery`: `execute` carries the summary layer, and `search` and `describe` answer
/// a real client from the same index the CLI's `search` and `describe` use.
#[test]
fn with_discovery_search_and_describe_answer_the_client() {
    let shop = shop();
    let steps = [
        list(),
        on_cell("search", json!({ "query": "run a read-only SQL statement", "limit": 1 })),
        on_cell("describe", json!({ "path": "db.query" })),
        on_cell("describe", json!({ "path": "db.qeury" })),
    ];
    let (lines, _) = client(&steps, &["stdio", codemode(), "mcp", "--db", &shop, "--discovery"]);
    let names: Vec<&str> =
        lines[0]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["execute", "wait", "terminate", "search", "describe"]);
    assert_eq!(
        lines[1]["structuredContent"],
        json!({"query": "run a read-only SQL statement", "tools": 3, "matches": 3, "offset": 0, "limit": 1, "hits": [
            {"path": "db.query", "description": "Run one read-only SQL statement (SELECT) with its ? parameters; one object per row.",
             "needsApproval": false, "destructive": false, "score": 3.9685}
        ]})
    );
    assert_eq!(lines[1]["isError"], false);
    let described = &lines[2]["structuredContent"];
    assert_eq!(described["path"], "db.query", "{described}");
    assert!(described["declaration"].as_str().unwrap().contains("query("), "{described}");
    assert_eq!(lines[3]["isError"], true, "{}", lines[3]);
    assert_eq!(
        lines[3]["content"][0]["text"],
        "No tool \"db.qeury\" in the catalog. The nearest paths: db.query, db.schema, db.tables. Describe one of them, or search."
    );
}
