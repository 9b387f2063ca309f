//! Upstream MCP servers as providers, against real servers: the reference servers of the
//! official MCP packages (`server-everything` over stdio and streamable HTTP,
//! `server-memory`), installed with npm, and a small peer written here for the failures
//! real servers do not produce on demand (a JSON-RPC refusal, a malformed result, a call
//! never answered).
#[path = "support/npm.rs"]
mod npm;
mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use codemode_executor::mcp::upstream::{SERVER_DISCONNECTED, Upstream, UpstreamError};
use codemode_executor::{Request, Toolbox};
use support::{json, run};

const EVERYTHING: &str = "@modelcontextprotocol/server-everything/dist/index.js";
const MEMORY: &str = "@modelcontextprotocol/server-memory/dist/index.js";

/// server-everything over stdio.
async fn everything() -> Upstream {
    let script = npm::node_script(EVERYTHING);
    Upstream::spawn("node", [script.as_os_str(), "stdio".as_ref()]).await.expect("server-everything starts")
}

/// A file of its own in the temporary directory, absent.
fn temp_file(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("codemode-mcp-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// server-memory over stdio, its graph in `file`.
async fn memory(file: &std::path::Path) -> Upstream {
    let mut command = tokio::process::Command::new("node");
    command.arg(npm::node_script(MEMORY)).env("MEMORY_FILE_PATH", file);
    Upstream::spawn_command(command, Stdio::null()).await.expect("server-memory starts")
}

/// A peer speaking MCP's JSON-RPC by hand: `gone` is listed but refused as unknown when
/// called, `garbled` answers with a result that is not a tool result, `hang` never
/// answers and appends `cancelled: <reason>` to `$QUIRKS_MARKER` when told it is
/// cancelled; the rest answer with content shapes the unwrapping rules name.
const QUIRKS: &str = r#"
const fs = require('node:fs');
const pending = new Set();
const send = (message) => process.stdout.write(JSON.stringify({ jsonrpc: '2.0', ...message }) + '\n');
const object = { type: 'object', properties: {} };
require('node:readline').createInterface({ input: process.stdin }).on('line', (line) => {
  const { id, method, params } = JSON.parse(line);
  if (method === 'initialize') {
    send({ id, result: { protocolVersion: params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'quirks', version: '1.0.0' } } });
  } else if (method === 'tools/list') {
    send({ id, result: { tools: [
      { name: 'gone', description: 'Listed, then unknown.', inputSchema: object },
      { name: 'garbled', description: 'Answers with something else.', inputSchema: object },
      { name: 'hang', description: 'Never answers.', inputSchema: object },
      { name: 'lines', description: 'Two text items.', inputSchema: object },
      { name: 'nothing', description: 'No content.', inputSchema: object },
      { name: 'mute-failure', description: 'An error without text.', inputSchema: object },
      { name: 'bad-image', description: 'An image that is not base64.', inputSchema: object },
    ] } });
  } else if (method === 'tools/call') {
    const text = (text) => ({ type: 'text', text });
    if (params.name === 'garbled') send({ id, result: { content: 'not a list' } });
    else if (params.name === 'lines') send({ id, result: { content: [text('one'), text('two')] } });
    else if (params.name === 'nothing') send({ id, result: { content: [] } });
    else if (params.name === 'mute-failure') send({ id, result: { content: [], isError: true } });
    else if (params.name === 'bad-image') send({ id, result: { content: [{ type: 'image', data: '%%%', mimeType: 'image/png' }] } });
    else if (params.name === 'hang') pending.add(id);
    else send({ id, error: { code: -32602, message: `Unknown tool: ${params.name}` } });
  } else if (method === 'notifications/cancelled') {
    if (pending.delete(params.requestId)) fs.appendFileSync(process.env.QUIRKS_MARKER, `cancelled: ${params.reason}\n`);
  } else if (id !== undefined && method) {
    send({ id, error: { code: -32601, message: `Method not found: ${method}` } });
  }
});
"#;

async fn quirks(marker: &std::path::Path) -> Upstream {
    npm::peers();
    let mut command = tokio::process::Command::new("node");
    command.args(["-e", QUIRKS]).env("QUIRKS_MARKER", marker);
    Upstream::spawn_command(command, Stdio::inherit()).await.expect("the quirks peer starts")
}

async fn toolbox(upstream: &Upstream, name: &str) -> Toolbox {
    Toolbox::new([upstream.provider(name).await.expect("the provider")]).expect("the toolbox")
}

/// Wait up to `limit` for `condition`.
async fn eventually(limit: Duration, condition: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

#[tokio::test]
async fn a_program_calls_server_everythings_tools_by_their_sandbox_names() {
    let upstream = everything().await;
    let names: Vec<String> = upstream.tools().await.unwrap().into_iter().map(|tool| tool.name).collect();
    assert_eq!(
        names,
        [
            "echo",
            "get-annotated-message",
            "get-env",
            "get-resource-links",
            "get-resource-reference",
            "get-structured-content",
            "get-sum",
            "get-tiny-image",
            "gzip-file-as-resource",
            "toggle-simulated-logging",
            "toggle-subscriber-updates",
            "trigger-long-running-operation",
            "simulate-research-query",
        ]
    );
    let toolbox = toolbox(&upstream, "everything").await;
    let descriptors = toolbox.descriptors();
    assert_eq!(descriptors.len(), 1);
    assert_eq!(
        serde_json::to_value(&descriptors[0]).unwrap(),
        serde_json::json!({
            "name": "everything",
            "tools": [
                "echo",
                "get_annotated_message",
                "get_env",
                "get_resource_links",
                "get_resource_reference",
                "get_structured_content",
                "get_sum",
                "get_tiny_image",
                "gzip_file_as_resource",
                "toggle_simulated_logging",
                "toggle_subscriber_updates",
                "trigger_long_running_operation",
                "simulate_research_query",
            ],
            "positionalArgs": false,
        })
    );

    let outcome = run(Request::new(
        "async () => [
            await everything.echo({ message: 'hi' }),
            await everything.get_sum({ a: 1, b: 2 }),
            await everything['get-sum']({ a: 2.5, b: 3 }),
            await everything.get_structured_content({ location: 'Chicago' }),
            await everything.get_annotated_message({ messageType: 'success' }),
        ]",
    )
    .toolbox(&toolbox))
    .await;
    assert_eq!(
        json(&outcome),
        r#"{"result":["Echo: hi","The sum of 1 and 2 is 3.","The sum of 2.5 and 3 is 5.5.",{"temperature":36,"conditions":"Light rain / drizzle","humidity":82},"Operation completed successfully"],"logs":[]}"#
    );
}

#[tokio::test]
async fn a_tool_error_and_a_bad_argument_are_errors_the_program_catches() {
    let upstream = everything().await;
    let toolbox = toolbox(&upstream, "everything").await;
    let outcome = run(Request::new(
        "async () => {
            const caught = []
            for (const call of [
                () => everything.get_resource_reference({ resourceId: -1 }),
                () => everything.echo({ message: 7 }),
                () => everything.echo('hi'),
            ]) {
                try { await call(); caught.push('answered') } catch (e) { caught.push([e instanceof Error, e.message]) }
            }
            return caught
        }",
    )
    .toolbox(&toolbox))
    .await;
    let expected = serde_json::json!({
        "result": [
            [true, "Invalid resourceId: -1. Must be a finite positive integer."],
            [true, "MCP error -32602: Input validation error: Invalid arguments for tool echo: Invalid input: expected string, received number at message"],
            [true, "The arguments of everything.echo do not fit its parameters: invalid type: string \"hi\", expected a map."],
        ],
        "logs": [],
    });
    assert_eq!(serde_json::from_str::<serde_json::Value>(&json(&outcome)).unwrap(), expected);
}

#[tokio::test]
async fn images_and_blobs_arrive_as_bytes() {
    let upstream = everything().await;
    let toolbox = toolbox(&upstream, "everything").await;
    let outcome = run(Request::new(
        "async () => {
            const image = await everything.get_tiny_image()
            const [before, picture, after] = image
            const reference = await everything.get_resource_reference({ resourceType: 'Blob', resourceId: 1 })
            const blob = reference[1].resource.blob
            return {
                items: image.length,
                texts: [before.text, after.text],
                type: picture.type,
                mimeType: picture.mimeType,
                bytes: picture.data instanceof Uint8Array,
                magic: Array.from(picture.data.slice(0, 8)),
                length: picture.data.length,
                resource: [reference[1].type, reference[1].resource.uri, reference[1].resource.mimeType, blob instanceof Uint8Array],
                blob: String.fromCharCode(...blob).slice(0, 45),
            }
        }",
    )
    .toolbox(&toolbox))
    .await;
    assert_eq!(
        json(&outcome),
        r#"{"result":{"items":3,"texts":["Here's the image you requested:","The image above is the MCP logo."],"type":"image","mimeType":"image/png","bytes":true,"magic":[137,80,78,71,13,10,26,10],"length":4033,"resource":["resource","demo://resource/dynamic/blob/1","text/plain",true],"blob":"Resource 1: This is a base64 blob created at "},"logs":[]}"#
    );
}

#[tokio::test]
async fn two_servers_in_one_program() {
    let file = temp_file("two-servers.jsonl");
    let (everything, memory) = tokio::join!(everything(), memory(&file));
    let toolbox = Toolbox::new([
        everything.provider("everything").allow(["echo"]).await.unwrap(),
        memory.provider("memory").await.unwrap(),
    ])
    .unwrap();
    let outcome = run(Request::new(
        "async () => {
            await memory.create_entities({ entities: [{ name: 'ada', entityType: 'person', observations: ['wrote the first program'] }] })
            const graph = await memory.read_graph()
            return everything.echo({ message: graph.entities.map((e) => `${e.name}: ${e.observations[0]}`).join() })
        }",
    )
    .toolbox(&toolbox))
    .await;
    assert_eq!(json(&outcome), r#"{"result":"Echo: ada: wrote the first program","logs":[]}"#);
    let _ = std::fs::remove_file(&file);
}

#[tokio::test]
async fn an_allowlist_declares_and_routes_only_its_tools_and_positional_lays_arguments_out() {
    let upstream = everything().await;
    let toolbox = Toolbox::new([upstream
        .provider("everything")
        .allow(["get-sum", "echo"])
        .positional()
        .await
        .unwrap()])
    .unwrap();
    assert_eq!(
        serde_json::to_value(&toolbox.descriptors()[0]).unwrap(),
        serde_json::json!({ "name": "everything", "tools": ["echo", "get_sum"] })
    );
    let outcome = run(Request::new(
        "async () => {
            const sum = await everything.get_sum(1, 2)
            try { await everything.get_env() } catch (e) { return [sum, e.message] }
        }",
    )
    .toolbox(&toolbox))
    .await;
    assert_eq!(
        json(&outcome),
        r#"{"result":["The sum of 1 and 2 is 3.","Tool \"get_env\" not found"],"logs":[]}"#
    );

    let refused = upstream
        .provider("everything")
        .allow(["echo", "nope", "get_sum", "nope"])
        .await
        .err()
        .expect("refused");
    assert!(matches!(refused, UpstreamError::UnknownTools(_)));
    let origin = format!("node {} stdio", npm::node_script(EVERYTHING).display());
    assert_eq!(
        refused.to_string(),
        format!(
            "The allowlist of provider \"everything\" names tools MCP server {origin} does not list: \"nope\", \"get_sum\". It lists: echo, get-annotated-message, get-env, get-resource-links, get-resource-reference, get-structured-content, get-sum, get-tiny-image, gzip-file-as-resource, toggle-simulated-logging, toggle-subscriber-updates, trigger-long-running-operation, simulate-research-query."
        )
    );
    let bad_name = upstream.provider("my-tools").await.err().expect("refused");
    assert_eq!(
        bad_name.to_string(),
        "Provider name \"my-tools\" must be ASCII letters, digits, underscore and dollar, and must not start with a digit."
    );
}

#[tokio::test]
async fn a_server_killed_mid_run_is_an_error_the_program_catches() {
    let upstream = everything().await;
    let toolbox = toolbox(&upstream, "everything").await;
    let pid = upstream.process_id().expect("a spawned server has a process id");
    let kill = async {
        assert!(eventually(Duration::from_secs(10), || upstream.calls_in_flight() == 1).await);
        // Mostly after the request went out; before it, the write fails, with the same text.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let status = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
        assert!(status.success());
    };
    let start = Instant::now();
    let (outcome, ()) = tokio::join!(
        run(Request::new(
            "async () => {
                const caught = []
                try { await everything.trigger_long_running_operation({ duration: 20, steps: 2 }) } catch (e) { caught.push(e.message) }
                try { await everything.echo({ message: 'still there?' }) } catch (e) { caught.push(e.message) }
                return caught
            }",
        )
        .toolbox(&toolbox)),
        kill
    );
    assert!(start.elapsed() < Duration::from_secs(10), "the call failed when the server died");
    let lost = SERVER_DISCONNECTED
        .replace("{server}", "everything")
        .replace("{tool}", "trigger-long-running-operation");
    let after = SERVER_DISCONNECTED.replace("{server}", "everything").replace("{tool}", "echo");
    assert_eq!(json(&outcome), serde_json::json!({ "result": [lost, after], "logs": [] }).to_string());
    assert_eq!(
        lost,
        "MCP server \"everything\" is no longer connected: the call of trigger-long-running-operation was not answered."
    );
    assert!(!upstream.is_connected());
    assert_eq!(upstream.calls_in_flight(), 0);
}

#[tokio::test]
async fn a_call_never_answered_ends_with_the_execution_at_its_deadline() {
    let upstream = everything().await;
    let toolbox = toolbox(&upstream, "everything").await;
    let start = Instant::now();
    let outcome = run(Request::new(
        "async () => everything.trigger_long_running_operation({ duration: 60, steps: 1 })",
    )
    .toolbox(&toolbox)
    .timeout(Duration::from_millis(500)))
    .await;
    let elapsed = start.elapsed();
    assert_eq!(json(&outcome), r#"{"error":"Execution timed out after 500 ms.","kind":"timeout","logs":[]}"#);
    assert!(elapsed < Duration::from_millis(1500), "on time: {elapsed:?}");
    assert!(
        eventually(Duration::from_secs(2), || upstream.calls_in_flight() == 0).await,
        "the handler stopped when the execution ended"
    );
    // The connection outlives the abandoned call.
    let outcome =
        run(Request::new("async () => everything.echo({ message: 'after' })").toolbox(&toolbox)).await;
    assert_eq!(json(&outcome), r#"{"result":"Echo: after","logs":[]}"#);
}

#[tokio::test]
async fn an_abandoned_call_is_cancelled_on_the_server() {
    let marker = temp_file("cancelled.txt");
    let upstream = quirks(&marker).await;
    let toolbox = toolbox(&upstream, "quirks").await;
    let outcome =
        run(Request::new("async () => quirks.hang()").toolbox(&toolbox).timeout(Duration::from_millis(300)))
            .await;
    assert_eq!(json(&outcome), r#"{"error":"Execution timed out after 300 ms.","kind":"timeout","logs":[]}"#);
    assert!(
        eventually(Duration::from_secs(5), || marker.exists()).await,
        "the server heard the cancellation"
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "cancelled: request abandoned by the caller\n");

    // With a call timeout the program catches it, and the server hears the cancellation too.
    let timed = Toolbox::new([upstream
        .provider("quirks")
        .allow(["hang"])
        .call_timeout(Duration::from_millis(100))
        .await
        .unwrap()])
    .unwrap();
    let outcome =
        run(Request::new("async () => { try { await quirks.hang() } catch (e) { return e.message } }")
            .toolbox(&timed))
        .await;
    assert_eq!(
        json(&outcome),
        r#"{"result":"MCP server \"quirks\" did not answer the call of hang within 100 ms.","logs":[]}"#
    );
    assert!(
        eventually(Duration::from_secs(5), || {
            std::fs::read_to_string(&marker).is_ok_and(|text| text.lines().count() == 2)
        })
        .await
    );
    let _ = std::fs::remove_file(&marker);
}

#[tokio::test]
async fn refusals_malformed_answers_and_the_content_rules_on_a_hand_written_peer() {
    let marker = temp_file("refused.txt");
    let upstream = quirks(&marker).await;
    let toolbox = toolbox(&upstream, "quirks").await;
    let outcome = run(Request::new(
        "async () => {
            const caught = []
            try { await quirks.gone() } catch (e) { caught.push(e.message) }
            try { await quirks.garbled() } catch (e) { caught.push(e.message) }
            try { await quirks.mute_failure() } catch (e) { caught.push(e.message) }
            try { await quirks.bad_image() } catch (e) { caught.push(e.message) }
            return [caught, await quirks.lines(), await quirks.nothing()]
        }",
    )
    .toolbox(&toolbox))
    .await;
    assert_eq!(
        json(&outcome),
        r#"{"result":[["MCP server \"quirks\" refused the call of gone: Unknown tool: gone (error -32602)","MCP server \"quirks\" answered the call of garbled with something that is not a tool result.","MCP server \"quirks\" reported that mute-failure failed, without a message.","MCP server \"quirks\" answered the call of bad-image with image data that is not base64."],"one\ntwo",null],"logs":[]}"#
    );
    assert!(upstream.is_connected());
}

#[tokio::test]
async fn server_everything_over_streamable_http() {
    npm::peers();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = tokio::process::Command::new("node");
    server
        .arg(npm::node_script(EVERYTHING))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let _server = server.spawn().expect("server-everything over HTTP starts");
    let address = format!("127.0.0.1:{port}");
    let listening = async {
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(&address).await.is_ok() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    };
    assert!(listening.await, "server-everything listens on {address}");

    let upstream = Upstream::connect_http(format!("http://{address}/mcp"), Some("a-token".into()))
        .await
        .expect("connected");
    let toolbox =
        Toolbox::new([upstream.provider("everything").allow(["echo", "get-tiny-image"]).await.unwrap()])
            .unwrap();
    let outcome = run(Request::new(
        "async () => {
            const image = await everything.get_tiny_image()
            return [await everything.echo({ message: 'over HTTP' }), image[1].data.length]
        }",
    )
    .toolbox(&toolbox))
    .await;
    assert_eq!(json(&outcome), r#"{"result":["Echo: over HTTP",4033],"logs":[]}"#);
    upstream.close();
}

#[tokio::test]
async fn a_server_that_does_not_start_or_speak_mcp_is_an_error_of_the_host() {
    let missing = Upstream::spawn("/nonexistent/mcp-server", ["stdio"]).await.unwrap_err();
    assert_eq!(
        missing.to_string(),
        "Could not start the MCP server `/nonexistent/mcp-server stdio`: No such file or directory (os error 2)"
    );
    npm::peers();
    let silent = Upstream::spawn("node", ["-e", "process.exit(3)"]).await.unwrap_err();
    assert!(matches!(silent, UpstreamError::Handshake(_)), "{silent}");
    assert_eq!(
        silent.to_string(),
        "MCP server node -e process.exit(3) did not complete the MCP handshake: connection closed: initialize response"
    );
}

/// One HTTP request's head, read from `stream`.
async fn request_head(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

#[tokio::test]
async fn http_sends_the_bearer_token_and_a_refusal_is_an_error_of_the_host() {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let head = request_head(&mut stream).await;
        stream
            .write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        head
    });
    let refused = Upstream::connect_http(url.clone(), Some("a-token".into())).await.unwrap_err();
    let head = server.await.unwrap();
    assert!(head.starts_with("POST /mcp HTTP/1.1\r\n"), "{head}");
    assert!(head.to_ascii_lowercase().contains("\r\nauthorization: bearer a-token\r\n"), "{head}");
    assert!(matches!(refused, UpstreamError::Handshake(_)), "{refused}");
    assert_eq!(
        refused.to_string(),
        format!(
            "MCP server {url} did not complete the MCP handshake: unexpected server response: HTTP 401 Unauthorized"
        )
    );
}

#[tokio::test]
async fn https_runs_on_ring_and_an_untrusted_certificate_is_refused() {
    use std::sync::Arc;
    use tokio_rustls::rustls;
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der()).unwrap();
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![certified.cert.der().clone()], key)
            .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://localhost:{}/mcp", listener.local_addr().unwrap().port());
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        acceptor.accept(stream).await.err().map(|e| e.to_string())
    });
    let refused = Upstream::connect_http(url.clone(), None).await.unwrap_err();
    assert_eq!(server.await.unwrap().as_deref(), Some("received fatal alert: UnknownCA"));
    assert_eq!(
        refused.to_string(),
        format!(
            "MCP server {url} did not complete the MCP handshake: error sending request for url ({url}): client error (Connect): invalid peer certificate: UnknownIssuer"
        )
    );
}

#[tokio::test]
async fn server_memorys_declarations() {
    let file = temp_file("declarations.jsonl");
    let upstream = memory(&file).await;
    let toolbox = toolbox(&upstream, "memory").await;
    assert_eq!(toolbox.declarations(), MEMORY_DECLARATIONS);
}

const MEMORY_DECLARATIONS: &str = r#"declare const memory: {
  /** Create multiple new entities in the knowledge graph */
  create_entities(options: {
    entities: {
      /** The name of the entity */
      name: string;
      /** The type of the entity */
      entityType: string;
      /** An array of observation contents associated with the entity */
      observations: string[];
    }[];
  }): Promise<{
    entities: {
      /** The name of the entity */
      name: string;
      /** The type of the entity */
      entityType: string;
      /** An array of observation contents associated with the entity */
      observations: string[];
    }[];
  }>;
  /** Create multiple new relations between entities in the knowledge graph. Relations should be in active voice */
  create_relations(options: {
    relations: {
      /** The name of the entity where the relation starts */
      from: string;
      /** The name of the entity where the relation ends */
      to: string;
      /** The type of the relation */
      relationType: string;
    }[];
  }): Promise<{
    relations: {
      /** The name of the entity where the relation starts */
      from: string;
      /** The name of the entity where the relation ends */
      to: string;
      /** The type of the relation */
      relationType: string;
    }[];
  }>;
  /** Add new observations to existing entities in the knowledge graph */
  add_observations(options: {
    observations: {
      /** The name of the entity to add the observations to */
      entityName: string;
      /** An array of observation contents to add */
      contents: string[];
    }[];
  }): Promise<{ results: { entityName: string; addedObservations: string[] }[] }>;
  /** Delete multiple entities and their associated relations from the knowledge graph */
  delete_entities(options: {
    /** An array of entity names to delete */
    entityNames: string[];
  }): Promise<{ success: boolean; message: string }>;
  /** Delete specific observations from entities in the knowledge graph */
  delete_observations(options: {
    deletions: {
      /** The name of the entity containing the observations */
      entityName: string;
      /** An array of observations to delete */
      observations: string[];
    }[];
  }): Promise<{ success: boolean; message: string }>;
  /** Delete multiple relations from the knowledge graph */
  delete_relations(options: {
    /** An array of relations to delete */
    relations: {
      /** The name of the entity where the relation starts */
      from: string;
      /** The name of the entity where the relation ends */
      to: string;
      /** The type of the relation */
      relationType: string;
    }[];
  }): Promise<{ success: boolean; message: string }>;
  /** Read the entire knowledge graph */
  read_graph(options?: Record<string, unknown>): Promise<{
    entities: {
      /** The name of the entity */
      name: string;
      /** The type of the entity */
      entityType: string;
      /** An array of observation contents associated with the entity */
      observations: string[];
    }[];
    relations: {
      /** The name of the entity where the relation starts */
      from: string;
      /** The name of the entity where the relation ends */
      to: string;
      /** The type of the relation */
      relationType: string;
    }[];
  }>;
  /** Search for nodes in the knowledge graph based on a query */
  search_nodes(options: {
    /** The search query to match against entity names, types, and observation content */
    query: string;
  }): Promise<{
    entities: {
      /** The name of the entity */
      name: string;
      /** The type of the entity */
      entityType: string;
      /** An array of observation contents associated with the entity */
      observations: string[];
    }[];
    relations: {
      /** The name of the entity where the relation starts */
      from: string;
      /** The name of the entity where the relation ends */
      to: string;
      /** The type of the relation */
      relationType: string;
    }[];
  }>;
  /** Open specific nodes in the knowledge graph by their names */
  open_nodes(options: {
    /** An array of entity names to retrieve */
    names: string[];
  }): Promise<{
    entities: {
      /** The name of the entity */
      name: string;
      /** The type of the entity */
      entityType: string;
      /** An array of observation contents associated with the entity */
      observations: string[];
    }[];
    relations: {
      /** The name of the entity where the relation starts */
      from: string;
      /** The name of the entity where the relation ends */
      to: string;
      /** The type of the relation */
      relationType: string;
    }[];
  }>;
};
"#;
