//! An agent's side of code mode, end to end: a toolbox, its declarations in the code
//! tool offered to the model, the model's program executed, the outcome fed back.
//!
//! The model here is scripted so the example runs offline (`cargo run --example
//! agent_loop`); swap `ScriptedModel` for a client of any model API: the messages are
//! plain JSON, and `toolbox.code_tool().anthropic()` / `.openai()` give the tool in
//! the shape those APIs take.

use codemode_executor::{Executor, Provider, Request, Toolbox};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What the store's `orders` tool takes.
#[derive(Deserialize, schemars::JsonSchema)]
struct Orders {
    /// Only orders in this status.
    status: Option<Status>,
}

#[derive(Clone, Copy, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Status {
    Open,
    Shipped,
}

/// One order.
#[derive(Serialize, schemars::JsonSchema)]
struct Order {
    id: u32,
    customer: String,
    status: Status,
    total_cents: u64,
}

fn toolbox() -> Toolbox {
    let orders =
        [(1, "ada", Status::Shipped, 4200), (2, "grace", Status::Open, 3100), (3, "ada", Status::Open, 1550)];
    Toolbox::new([Provider::new("store").description("The shop's orders.").sync_tool(
        "orders",
        "Orders, newest first.",
        move |Orders { status }: Orders, _| {
            Ok::<_, String>(
                orders
                    .iter()
                    .filter(|(_, _, s, _)| status.is_none_or(|wanted| wanted == *s))
                    .map(|&(id, customer, status, total_cents)| Order {
                        id,
                        customer: customer.to_owned(),
                        status,
                        total_cents,
                    })
                    .collect::<Vec<_>>(),
            )
        },
    )])
    .expect("the providers are valid")
}

/// A model: the conversation so far in, its next message out.
trait Model {
    fn reply(&mut self, tools: &[Value], messages: &[Value]) -> Value;
}

/// Answers as a model would: first a program for the code tool, then the answer.
struct ScriptedModel;

impl Model for ScriptedModel {
    fn reply(&mut self, _tools: &[Value], messages: &[Value]) -> Value {
        match messages.last().and_then(|m| m["content"][0]["type"].as_str()) {
            Some("tool_result") => {
                let outcome = &messages.last().unwrap()["content"][0]["content"];
                json!({ "role": "assistant", "content": [{ "type": "text", "text": format!("Open orders: {outcome}") }] })
            }
            _ => json!({ "role": "assistant", "content": [{
                "type": "tool_use", "id": "call-1", "name": "execute",
                "input": { "code": "async () => {\n  const open = await store.orders('open');\n  return { count: open.length, cents: open.reduce((sum, o) => sum + o.total_cents, 0) };\n}" }
            }] }),
        }
    }
}

#[tokio::main]
async fn main() {
    let toolbox = toolbox();
    let executor = Executor::default();
    let tools = [toolbox.code_tool().anthropic()];
    let mut model = ScriptedModel;
    let mut messages = vec![
        json!({ "role": "user", "content": [{ "type": "text", "text": "How much is in open orders?" }] }),
    ];
    println!("The code tool's description:\n{}\n", tools[0]["description"].as_str().unwrap_or_default());
    loop {
        let reply = model.reply(&tools, &messages);
        messages.push(reply.clone());
        let Some(call) = reply["content"].as_array().and_then(|c| c.iter().find(|b| b["type"] == "tool_use"))
        else {
            println!("{}", reply["content"][0]["text"].as_str().unwrap_or_default());
            break;
        };
        let code = call["input"]["code"].as_str().unwrap_or_default();
        let outcome = executor.execute(Request::new(code).toolbox(&toolbox)).await;
        // The outcome as the model reads it: result or error, with the logs.
        messages.push(json!({ "role": "user", "content": [{
            "type": "tool_result", "tool_use_id": call["id"], "content": outcome.to_json_string(),
            "is_error": outcome.error_text().is_some(),
        }] }));
    }
}
