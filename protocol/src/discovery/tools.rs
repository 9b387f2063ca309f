//! Discovery as tools a model calls: the code tool carrying the summary layer instead of
//! every declaration, `search` and `describe`, and the readable texts of their answers.

use serde_json::json;

use super::index::SearchAnswer;
use super::{Catalog, CatalogIndex};
use crate::texts;
use crate::tools::code_tool::code_input_schema;
use crate::tools::{CodeTool, ToolTable};

/// Discovery turns on by itself above this many tools.
pub const AUTO_DISCOVERY_TOOLS: usize = 100;

/// Discovery turns on by itself when every declaration together is over this many bytes
/// (about 10,000 tokens at 4 bytes a token).
pub const AUTO_DISCOVERY_BYTES: usize = 40_000;

/// Whether `table` is large enough that discovery turns on by itself: more than
/// [`AUTO_DISCOVERY_TOOLS`] tools, or declarations over [`AUTO_DISCOVERY_BYTES`] bytes.
pub fn wants_discovery(table: &ToolTable) -> bool {
    table.tools().count() > AUTO_DISCOVERY_TOOLS || table.declarations().len() > AUTO_DISCOVERY_BYTES
}

/// The code tool with discovery: [`texts::CODE_TOOL_DESCRIPTION`], then
/// [`texts::DISCOVERY_CODE_TOOL_PARAGRAPH`] and the summary layer
/// ([`Catalog::summary_text`]) where [`crate::tools::code_tool()`] puts every declaration.
pub fn discovery_code_tool(catalog: &Catalog) -> CodeTool {
    CodeTool {
        name: texts::CODE_TOOL_NAME.to_owned(),
        description: format!(
            "{}\n\n{}\n\nProviders ({} tools):\n{}",
            texts::CODE_TOOL_DESCRIPTION,
            texts::DISCOVERY_CODE_TOOL_PARAGRAPH,
            catalog.tool_count(),
            catalog.summary_text()
        ),
        input_schema: code_input_schema(),
    }
}

/// The tool `search` (`{query, provider?, limit?, offset?}`).
pub fn search_tool() -> CodeTool {
    CodeTool {
        name: texts::SEARCH_TOOL_NAME.to_owned(),
        description: texts::SEARCH_TOOL_DESCRIPTION.to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "query": { "type": "string", "description": "Plain words for what the tool does." },
                "provider": { "type": "string", "description": "Search only this provider's tools." },
                "limit": { "type": "integer", "minimum": 0, "description": "How many hits: default 8, at most 50." },
                "offset": { "type": "integer", "minimum": 0, "description": "How many of the best hits to skip." }
            },
            "required": ["query"],
            "additionalProperties": false
        }),
    }
}

/// The tool `describe` (`{path}`).
pub fn describe_tool() -> CodeTool {
    CodeTool {
        name: texts::DESCRIBE_TOOL_NAME.to_owned(),
        description: texts::DESCRIBE_TOOL_DESCRIPTION.to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "The tool's path, provider.tool, as `search` answers it." }
            },
            "required": ["path"],
            "additionalProperties": false
        }),
    }
}

/// ` (needs approval, destructive)`, the parts that hold, or nothing.
pub(super) fn marks(needs_approval: bool, destructive: bool) -> String {
    let marks: Vec<&str> = [(needs_approval, "needs approval"), (destructive, "destructive")]
        .iter()
        .filter(|m| m.0)
        .map(|m| m.1)
        .collect();
    if marks.is_empty() { String::new() } else { format!(" ({})", marks.join(", ")) }
}

impl SearchAnswer {
    /// What a model or a person reads: a line saying what was found, then one line per
    /// hit (`path (marks): first sentence`), then the note if any.
    pub fn text(&self) -> String {
        let first = self.offset + 1;
        let last = self.offset + self.hits.len();
        let scope = self.provider.as_ref().map(|p| format!(" of {p}")).unwrap_or_default();
        let mut text = if self.hits.is_empty() {
            format!("{} of {} tools{scope} match {:?}.", self.matches, self.tools, self.query)
        } else {
            format!(
                "Hits {first} to {last} of {} matching {:?} among {} tools{scope}:",
                self.matches, self.query, self.tools
            )
        };
        for hit in &self.hits {
            let marks = marks(hit.needs_approval, hit.destructive);
            text.push_str(&format!("\n{}{marks}: {}", hit.path, hit.description));
        }
        if let Some(note) = &self.note {
            text.push_str(&format!("\n{note}"));
        }
        text
    }
}

impl CatalogIndex {
    /// The code tool of this catalog with discovery ([`discovery_code_tool`]).
    pub fn code_tool(&self) -> CodeTool {
        discovery_code_tool(&self.catalog)
    }
}
