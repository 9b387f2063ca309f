//! The code tool: the one tool an agent offers the model, whose description carries the
//! providers' declarations, in a form any model API takes.

use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

use super::ToolTable;
use crate::texts;

/// The tool an agent offers the model: a name, a description with the declarations in
/// it, and the JSON Schema of its input (`{"code": string}`).
///
/// Its serde form is the common one (`name`, `description`, `inputSchema`, as MCP
/// writes a tool); [`CodeTool::openai`] and [`CodeTool::anthropic`] give the shapes
/// those APIs take.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CodeTool {
    /// The tool's name: `execute`.
    pub name: String,
    /// What the model reads: how to write the program, and the declarations.
    pub description: String,
    /// The JSON Schema of the tool's input: one string property, `code`.
    pub input_schema: Json,
}

impl CodeTool {
    /// The tool as OpenAI's function-calling APIs take it:
    /// `{"type": "function", "function": {"name", "description", "parameters"}}`.
    pub fn openai(&self) -> Json {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            }
        })
    }

    /// The same tool taking `yieldAfterMs` beside `code`, its description telling the model
    /// how to go on with `wait` and `terminate` ([`wait_tool`], [`terminate_tool`]): what
    /// a server offering runs a model resumes (cells) lists.
    pub fn with_yield(mut self) -> CodeTool {
        self.description = self.description.replacen(
            texts::CODE_TOOL_DESCRIPTION,
            &format!("{}\n\n{}", texts::CODE_TOOL_DESCRIPTION, texts::CELL_CODE_TOOL_PARAGRAPH),
            1,
        );
        if let Some(properties) = self.input_schema.get_mut("properties").and_then(Json::as_object_mut) {
            properties.insert("yieldAfterMs".to_owned(), yield_parameter());
        }
        self
    }

    /// The tool as Anthropic's Messages API takes it: `{"name", "description", "input_schema"}`.
    pub fn anthropic(&self) -> Json {
        json!({
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        })
    }
}

/// The code tool for `table`: [`texts::CODE_TOOL_DESCRIPTION`], then its declarations
/// in a TypeScript code block.
pub fn code_tool(table: &ToolTable) -> CodeTool {
    let declarations = table.declarations();
    let declarations = declarations.trim_end();
    CodeTool {
        name: texts::CODE_TOOL_NAME.to_owned(),
        description: format!("{}\n\n```ts\n{declarations}\n```", texts::CODE_TOOL_DESCRIPTION),
        input_schema: code_input_schema(),
    }
}

/// The schema of the code tool's input: one string property, `code`.
pub(crate) fn code_input_schema() -> Json {
    json!({
        "type": "object",
        "properties": {
            "code": { "type": "string", "description": texts::CODE_TOOL_CODE_PARAMETER }
        },
        "required": ["code"],
        "additionalProperties": false
    })
}

/// The schema of a `yieldAfterMs` parameter.
fn yield_parameter() -> Json {
    json!({ "type": "integer", "minimum": 0, "description": texts::CELL_YIELD_PARAMETER })
}

/// The schema of a `cell` parameter.
fn cell_parameter() -> Json {
    json!({ "type": "string", "description": texts::CELL_PARAMETER })
}

/// The tool that waits on a run the code tool left running (`{"cell": ID, "yieldAfterMs"?: n}`).
pub fn wait_tool() -> CodeTool {
    CodeTool {
        name: texts::CELL_WAIT_TOOL_NAME.to_owned(),
        description: texts::CELL_WAIT_TOOL_DESCRIPTION.to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": { "cell": cell_parameter(), "yieldAfterMs": yield_parameter() },
            "required": ["cell"],
            "additionalProperties": false
        }),
    }
}

/// The tool that ends a run the code tool left running (`{"cell": ID}`).
pub fn terminate_tool() -> CodeTool {
    CodeTool {
        name: texts::CELL_TERMINATE_TOOL_NAME.to_owned(),
        description: texts::CELL_TERMINATE_TOOL_DESCRIPTION.to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": { "cell": cell_parameter() },
            "required": ["cell"],
            "additionalProperties": false
        }),
    }
}
