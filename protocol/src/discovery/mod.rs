//! Progressive discovery: a catalog of tools the model searches and reads one by one,
//! instead of every declaration up front.
//!
//! A [`Catalog`] is providers, each `{name, description, tools}` with `tools` in the MCP
//! `tools/list` shape (`name`, `description`, `inputSchema`, `outputSchema`,
//! `annotations`), so an MCP server's list, a tool spec file and a [`ToolTable`] all drop
//! in. [`Catalog::summary`] is its summary layer: each provider's name, description and
//! tool count. A [`CatalogIndex`] is built once from a catalog and answers
//! [`CatalogIndex::search`] (a lexical ranking pinned to the bit, see [`index`]) and
//! [`CatalogIndex::describe`] (one tool's declaration and schemas, or the nearest paths).
//!
//! A tool's *path* is `provider.tool` with the tool's sandbox name ([`sandbox_name`]), as a
//! program calls it. All of it is pure: the same catalog in any order gives the same
//! answers, byte for byte.

mod describe;
pub mod index;
pub mod text;
mod tools;

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

pub use describe::{DescribeError, Description, MAX_SUGGESTIONS};
pub use index::{CatalogIndex, DEFAULT_LIMIT, Hit, MAX_LIMIT, SearchAnswer, SearchError, SearchRequest};
pub use tools::{
    AUTO_DISCOVERY_BYTES, AUTO_DISCOVERY_TOOLS, describe_tool, discovery_code_tool, search_tool,
    wants_discovery,
};

use crate::tools::{ProviderSpec, ToolSpec, ToolTable, sandbox_name};

/// Providers and their tools, as discovery reads them. Unknown fields (a file's `format`,
/// a tool's `title` or `_meta`) are ignored, so an MCP `tools/list` answer drops in.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    /// The providers, in any order: answers do not depend on it.
    pub providers: Vec<CatalogProvider>,
}

/// One provider of a [`Catalog`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogProvider {
    /// The provider's name in the sandbox: the first part of its tools' paths.
    pub name: String,
    /// What the provider is, for the model.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The argument convention its declarations are rendered with (as [`ProviderSpec`]).
    #[serde(default = "positional_default", skip_serializing_if = "is_true")]
    pub positional_args: bool,
    /// Its tools.
    #[serde(default)]
    pub tools: Vec<CatalogTool>,
}

/// One tool of a [`CatalogProvider`], in the MCP `tools/list` shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogTool {
    /// The tool's own name; its path uses its sandbox name.
    pub name: String,
    /// What the tool does.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The JSON Schema of its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Json>,
    /// The JSON Schema of its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Json>,
    /// MCP tool annotations (`readOnlyHint`, `destructiveHint`, ...), carried as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Json>,
    /// The host's flag that a call of this tool waits for approval.
    #[serde(default, skip_serializing_if = "is_false")]
    pub needs_approval: bool,
}

fn positional_default() -> bool {
    true
}

fn is_true(value: &bool) -> bool {
    *value
}

fn is_false(value: &bool) -> bool {
    !*value
}

impl CatalogTool {
    /// Whether its annotations say `"destructiveHint": true` (absent reads false).
    pub fn destructive(&self) -> bool {
        let hint = self.annotations.as_ref().and_then(|a| a.get("destructiveHint"));
        hint.and_then(Json::as_bool).unwrap_or(false)
    }

    /// Whether a call waits for approval: the flag, or a destructive tool.
    pub fn needs_approval(&self) -> bool {
        self.needs_approval || self.destructive()
    }

    /// The tool as a [`ToolSpec`] (annotations left behind; the approval flag kept).
    pub fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: self.input_schema.clone(),
            output_schema: self.output_schema.clone(),
            needs_approval: self.needs_approval,
        }
    }
}

impl From<&ToolSpec> for CatalogTool {
    fn from(spec: &ToolSpec) -> CatalogTool {
        CatalogTool {
            name: spec.name.clone(),
            description: spec.description.clone(),
            input_schema: spec.input_schema.clone(),
            output_schema: spec.output_schema.clone(),
            annotations: None,
            needs_approval: spec.needs_approval,
        }
    }
}

impl From<&ProviderSpec> for CatalogProvider {
    fn from(spec: &ProviderSpec) -> CatalogProvider {
        CatalogProvider {
            name: spec.name.clone(),
            description: spec.description.clone(),
            positional_args: spec.positional_args,
            tools: spec.tools.iter().map(CatalogTool::from).collect(),
        }
    }
}

impl From<&[ProviderSpec]> for Catalog {
    fn from(specs: &[ProviderSpec]) -> Catalog {
        Catalog { providers: specs.iter().map(CatalogProvider::from).collect() }
    }
}

impl From<&ToolTable> for Catalog {
    fn from(table: &ToolTable) -> Catalog {
        Catalog::from(table.providers())
    }
}

impl CatalogProvider {
    /// The provider as a [`ProviderSpec`] with its tools' specs.
    pub fn spec(&self) -> ProviderSpec {
        ProviderSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            positional_args: self.positional_args,
            tools: self.tools.iter().map(CatalogTool::spec).collect(),
        }
    }
}

/// One provider in the summary layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderSummary {
    /// The provider's name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// How many tools it has.
    pub tools: usize,
}

impl Catalog {
    /// How many tools every provider holds together.
    pub fn tool_count(&self) -> usize {
        self.providers.iter().map(|p| p.tools.len()).sum()
    }

    /// The summary layer: each provider's name, description and tool count, by name.
    pub fn summary(&self) -> Vec<ProviderSummary> {
        let mut summary: Vec<ProviderSummary> = self
            .providers
            .iter()
            .map(|p| ProviderSummary {
                name: p.name.clone(),
                description: p.description.clone(),
                tools: p.tools.len(),
            })
            .collect();
        summary.sort_by(|a, b| a.name.cmp(&b.name));
        summary
    }

    /// The summary layer as the model reads it: one line per provider,
    /// `- name (N tools): description`.
    pub fn summary_text(&self) -> String {
        let lines: Vec<String> = self
            .summary()
            .iter()
            .map(|p| {
                let noun = if p.tools == 1 { "tool" } else { "tools" };
                let line = format!("- {} ({} {noun})", p.name, p.tools);
                if p.description.is_empty() { line } else { format!("{line}: {}", p.description) }
            })
            .collect();
        lines.join("\n")
    }
}

/// The path of `tool` of `provider`: `provider.sandboxName`.
pub fn path(provider: &str, tool: &str) -> String {
    format!("{provider}.{}", sandbox_name(tool))
}
