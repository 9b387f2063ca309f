//! The code tool: its wording (snapshot) and the shapes model APIs take.

use codemode_protocol::tools::{ProviderSpec, ToolSpec, ToolTable};
use serde_json::json;

fn table() -> ToolTable {
    ToolTable::new(vec![
        ProviderSpec::new("store").description("The shop's orders.").tool(
            ToolSpec::new("orders", "Orders, newest first.")
                .input_schema(json!({ "type": "object", "properties": { "status": { "enum": ["open", "shipped"] } } }))
                .output_schema(json!({ "type": "array", "items": { "type": "object", "properties": { "id": { "type": "integer" } }, "required": ["id"] } })),
        ),
    ])
    .unwrap()
}

#[test]
fn the_code_tool_reads_as_pinned() {
    let tool = table().code_tool();
    assert_eq!(tool.name, "execute");
    insta::assert_snapshot!(tool.description);
}

#[test]
fn the_code_tool_takes_each_api_shape() {
    let tool = table().code_tool();
    let schema = json!({
        "type": "object",
        "properties": { "code": { "type": "string", "description": "The program: the source of an async arrow function, such as `async () => { return 1 }`." } },
        "required": ["code"],
        "additionalProperties": false
    });
    assert_eq!(tool.input_schema, schema);
    assert_eq!(
        tool.openai(),
        json!({ "type": "function", "function": { "name": "execute", "description": tool.description, "parameters": schema } })
    );
    assert_eq!(
        tool.anthropic(),
        json!({ "name": "execute", "description": tool.description, "input_schema": schema })
    );
    assert_eq!(
        serde_json::to_value(&tool).unwrap(),
        json!({ "name": "execute", "description": tool.description, "inputSchema": schema })
    );
}
