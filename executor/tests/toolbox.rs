//! The toolbox: typed tools per provider, their dispatch, its texts, and the per-call context.
mod support;

use std::sync::Arc;
use std::time::Duration;

use codemode_executor::{CallContext, Provider, Request, Toolbox};
use codemode_protocol::{Bytes, Dispatch, ToolCall};
use serde::{Deserialize, Serialize};
use support::{json, run};

#[derive(Deserialize, schemars::JsonSchema)]
struct FindUser {
    /// The user's id.
    id: String,
    /// How many orders to include.
    limit: Option<u32>,
}

#[derive(Serialize, schemars::JsonSchema)]
struct User {
    id: String,
    orders: Vec<u32>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct ListOrders {
    status: Option<String>,
    #[serde(default)]
    limit: u32,
}

fn shop() -> Toolbox {
    Toolbox::new([
        Provider::new("store")
            .tool("findUser", "Find a user by id.", |FindUser { id, limit }: FindUser, _| async move {
                if id == "nobody" {
                    return Err(format!("No user \"{id}\"."));
                }
                Ok(User { id, orders: (1..=limit.unwrap_or(0)).collect() })
            })
            .sync_tool("add", "Add two numbers.", |(a, b): (f64, f64), _| Ok::<_, String>(a + b))
            .sync_tool("version", "The store's version.", |(): (), _| Ok::<_, String>("1.2"))
            .sync_tool("avatar", "The bytes of an avatar.", |(size,): (u8,), _| {
                Ok::<_, String>(Bytes::from(vec![size; 3]))
            })
            .sync_tool("length", "The length of some bytes.", |bytes: Bytes, _| Ok::<_, String>(bytes.len())),
        Provider::new("orders").options_object().sync_tool(
            "list",
            "List orders.",
            |ListOrders { status, limit }: ListOrders, _| {
                Ok::<_, String>(format!("{} {limit}", status.as_deref().unwrap_or("any")))
            },
        ),
        Provider::new("github").sync_tool("list-issues", "List issues.", |(): (), _| Ok::<_, String>(["#1"])),
    ])
    .unwrap()
}

async fn run_shop(code: &str) -> String {
    json(&run(Request::new(code).toolbox(&shop())).await)
}

#[tokio::test]
async fn a_struct_is_the_positional_parameters_in_order() {
    assert_eq!(
        run_shop("async () => [await store.findUser('ada'), await store.findUser('bob', 2)]").await,
        r#"{"result":[{"id":"ada","orders":[]},{"id":"bob","orders":[1,2]}],"logs":[]}"#
    );
    assert_eq!(
        run_shop("async () => store.findUser('ada', undefined)").await,
        r#"{"result":{"id":"ada","orders":[]},"logs":[]}"#
    );
}

#[tokio::test]
async fn tuples_unit_options_objects_and_bytes_take_their_conventions() {
    assert_eq!(
        run_shop(
            "async () => [await store.add(2, 3), await store.version(), await orders.list({ status: 'open', limit: 5 }), await orders.list()]"
        )
        .await,
        r#"{"result":[5,"1.2","open 5","any 0"],"logs":[]}"#
    );
    assert_eq!(
        run_shop(
            "async () => { const a = await store.avatar(7); return [a instanceof Uint8Array, [...a], await store.length(new Uint8Array([1, 2]))] }"
        )
        .await,
        r#"{"result":[true,[7,7,7],2],"logs":[]}"#
    );
}

#[tokio::test]
async fn arguments_that_do_not_fit_are_catchable_errors_naming_what_was_wrong() {
    let caught = |call: &str| {
        format!(
            "async () => {{ try {{ await {call}; return 'no throw' }} catch (e) {{ return e.message }} }}"
        )
    };
    let cases = [
        (
            "store.findUser(7)",
            "The arguments of store.findUser do not fit its parameters: at `id`, invalid type: integer `7`, expected a string.",
        ),
        (
            "store.findUser()",
            "The arguments of store.findUser do not fit its parameters: missing field `id`.",
        ),
        (
            "store.findUser('ada', -1)",
            "The arguments of store.findUser do not fit its parameters: at `limit`, invalid value: integer `-1`, expected u32.",
        ),
        (
            "store.findUser('ada', 1, 2)",
            "store.findUser(id, limit) takes at most 2 arguments, but was called with 3.",
        ),
        ("store.version('x')", "store.version() takes no arguments, but was called with 1."),
        (
            "store.add(1)",
            "The arguments of store.add do not fit its parameters: at `[1]`, invalid type: null, expected f64.",
        ),
        (
            "orders.list({ status: 3 })",
            "The arguments of orders.list do not fit its parameters: at `status`, invalid type: integer `3`, expected a string.",
        ),
        (
            "store.length('abc')",
            "The arguments of store.length do not fit its parameters: invalid type: string \"abc\", expected bytes (a Uint8Array, an ArrayBuffer or another typed array).",
        ),
        ("store.findUser('nobody')", "No user \"nobody\"."),
        ("store.nope()", "Tool \"nope\" not found"),
    ];
    for (call, text) in cases {
        let expected = serde_json::json!({ "result": text, "logs": [] }).to_string();
        assert_eq!(run_shop(&caught(call)).await, expected, "{call}");
    }
    assert_eq!(
        run_shop("async () => __dispatch('secrets', 'read', '[]')").await,
        r#"{"result":"{\"error\":\"Tool \\\"read\\\" not found\"}","logs":[]}"#
    );
}

#[tokio::test]
async fn a_name_from_elsewhere_is_called_by_its_sandbox_name_or_its_own() {
    assert_eq!(
        run_shop("async () => [await github.list_issues(), await github['list-issues']()]").await,
        r##"{"result":[["#1"],["#1"]],"logs":[]}"##
    );
    let toolbox = shop();
    assert_eq!(toolbox.descriptors()[2].tools, ["list_issues"]);
}

#[test]
fn registration_refuses_what_the_sandbox_cannot_serve() {
    let unit = |(): (), _: CallContext| Ok::<_, String>(1);
    let refused = |providers: Vec<Provider>| Toolbox::new(providers).unwrap_err().to_string();
    assert_eq!(
        refused(vec![Provider::new("gh").sync_tool("list-issues", "", unit).sync_tool(
            "list_issues",
            "",
            unit
        )]),
        "Tools \"list-issues\" and \"list_issues\" of provider \"gh\" both become \"list_issues\" in the sandbox. Rename one of them, or leave one out."
    );
    assert_eq!(
        refused(vec![Provider::new("gh").sync_tool("a", "", unit).sync_tool("a", "", unit)]),
        "Tool \"a\" of provider \"gh\" is declared twice. Give each tool its own name."
    );
    assert_eq!(
        refused(vec![Provider::new("gh").sync_tool("", "", unit)]),
        "A tool of provider \"gh\" has an empty name. Give every tool a name."
    );
    assert_eq!(
        refused(vec![Provider::new("class")]),
        "Provider name \"class\" is on the list this executor refuses: every ECMAScript reserved word, the names strict mode reserves, and async. Pick a name outside it."
    );
    assert_eq!(
        refused(vec![Provider::new("gh").options_object().sync_tool(
            "add",
            "",
            |(a, b): (f64, f64), _| Ok::<_, String>(a + b)
        )]),
        "Provider \"gh\" sends one options object, but the input schema of its tool \"add\" is not an object. Describe the arguments as an object (a struct), or use positional arguments."
    );
}

#[tokio::test]
async fn a_handler_knows_its_execution_and_hears_when_it_ends() {
    let heard = Arc::new(tokio::sync::Notify::new());
    let notify = heard.clone();
    let toolbox = Toolbox::new([Provider::new("ctx")
        .sync_tool("id", "", |(): (), cx: CallContext| Ok::<_, String>(cx.execution_id().get()))
        .tool("wait", "", move |(): (), cx: CallContext| {
            let notify = notify.clone();
            async move {
                cx.cancelled().await;
                notify.notify_one();
                Ok::<_, String>(())
            }
        })])
    .unwrap();
    let ids = |outcome: codemode_executor::Outcome| -> Vec<u64> {
        serde_json::from_str::<serde_json::Value>(&json(&outcome)).unwrap()["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    let code = "async () => [await ctx.id(), await ctx.id()]";
    let first = ids(run(Request::new(code).toolbox(&toolbox)).await);
    let second = ids(run(Request::new(code).toolbox(&toolbox)).await);
    assert_eq!(first[0], first[1], "one execution, one id");
    assert_ne!(first[0], second[0], "two executions, two ids");

    let outcome = run(Request::new("async () => { await ctx.wait() }")
        .toolbox(&toolbox)
        .timeout(Duration::from_millis(200)))
    .await;
    assert_eq!(json(&outcome), r#"{"error":"Execution timed out after 200 ms.","kind":"timeout","logs":[]}"#);
    tokio::time::timeout(Duration::from_secs(10), heard.notified())
        .await
        .expect("the handler heard its execution end");
}

#[tokio::test]
async fn an_ended_execution_is_refused_and_unrouted_calls_reach_a_fallback() {
    let toolbox = shop();
    let (context, end) = CallContext::new();
    let dispatch = toolbox.dispatch(context);
    assert_eq!(dispatch.dispatch(ToolCall::new("store", "version", "[]")).await, r#"{"result":"1.2"}"#);
    end.end();
    assert_eq!(
        dispatch.dispatch(ToolCall::new("store", "version", "[]")).await,
        r#"{"error":"Execution has already completed."}"#
    );

    let outcome = run(Request::new("async () => [await store.version(), await other.thing(1)]")
        .provider(codemode_protocol::ProviderDescriptor::new("other", ["thing"]))
        .dispatch(|call: ToolCall| async move {
            format!(
                r#"{{"result":"{}.{} {}"}}"#,
                call.provider,
                call.tool,
                call.args_json.replace('"', "\\\"")
            )
        })
        .toolbox(&toolbox))
    .await;
    assert_eq!(json(&outcome), r#"{"result":["1.2","other.thing [1]"],"logs":[]}"#);
}

#[tokio::test]
async fn with_discovery_a_program_searches_and_describes_the_other_tools_and_calls_them() {
    use codemode_executor::Executor;
    let toolbox = Toolbox::new([Provider::new("store")
        .description("The shop.")
        .sync_tool("findUser", "Find a user by id. Reads only.", |id: String, _| {
            Ok::<_, String>(format!("user {id}"))
        })
        .sync_tool("refundOrder", "Give an order's money back.", |id: String, _| Ok::<_, String>(id))])
    .unwrap();
    assert_eq!(toolbox.catalog().tool_count(), 2);
    let toolbox = toolbox.with_discovery().unwrap();
    let code = r#"async () => {
        const found = await catalog.search({ query: "money back for an order", limit: 1 });
        const described = await catalog.describe(found.hits[0].path);
        let unknown;
        try { await catalog.describe("store.findUsr"); } catch (e) { unknown = e.message; }
        return [found.tools, found.hits[0].path, described.declaration.includes("refundOrder("), unknown, await store.findUser("7")];
    }"#;
    let outcome = Executor::default().execute(Request::new(code).toolbox(&toolbox)).await;
    assert_eq!(
        outcome.to_json_string(),
        r#"{"result":[2,"store.refundOrder",true,"No tool \"store.findUsr\" in the catalog. The nearest paths: store.findUser, store.refundOrder. Describe one of them, or search.","user 7"],"logs":[]}"#
    );
}

/// With discovery required a run calls only what it described first; another run starts
/// with nothing described.
#[tokio::test]
async fn with_required_discovery_a_run_calls_only_the_tools_it_described() {
    use codemode_executor::Executor;
    let toolbox = Toolbox::new([Provider::new("store").sync_tool(
        "findUser",
        "Find a user by id.",
        |id: String, _| Ok::<_, String>(format!("user {id}")),
    )])
    .unwrap()
    .with_required_discovery()
    .unwrap();
    let code = r#"async () => {
        let before;
        try { await store.findUser("7"); } catch (e) { before = e.message; }
        await catalog.describe("store.findUser");
        return [before, await store.findUser("7")];
    }"#;
    let executor = Executor::default();
    let outcome = executor.execute(Request::new(code).toolbox(&toolbox)).await;
    assert_eq!(
        outcome.to_json_string(),
        r#"{"result":["The tool store.findUser has not been described in this run, so it was not called. Describe it first with catalog.describe, read its declaration, then call it.","user 7"],"logs":[]}"#
    );
    let again = "async () => { try { return await store.findUser('8') } catch (e) { return 'refused' } }";
    let outcome = executor.execute(Request::new(again).toolbox(&toolbox)).await;
    assert_eq!(outcome.to_json_string(), r#"{"result":"refused","logs":[]}"#);
}
