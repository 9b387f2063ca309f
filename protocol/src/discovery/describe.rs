//! `describe`: one tool by its path, as the model reads it before calling it; an unknown
//! path answers the nearest paths instead.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use super::index::{CatalogIndex, SearchRequest};
use super::text;
use crate::texts;
use crate::tools::ToolTable;

/// The most paths an unknown path's answer suggests.
pub const MAX_SUGGESTIONS: usize = 5;

/// One tool, described: what `describe` answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Description {
    /// `provider.tool`, with the tool's sandbox name.
    pub path: String,
    /// The provider's name.
    pub provider: String,
    /// The tool's own name.
    pub name: String,
    /// Its whole description.
    pub description: String,
    /// Whether a call waits for approval.
    pub needs_approval: bool,
    /// Whether its annotations say it is destructive.
    pub destructive: bool,
    /// Its TypeScript declaration, as `declarations::render` writes the provider holding
    /// this one tool; empty where the provider cannot be declared (a name the sandbox refuses).
    pub declaration: String,
    /// The JSON Schema of its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Json>,
    /// The JSON Schema of its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Json>,
    /// Its MCP annotations, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Json>,
}

impl Description {
    /// What a model reads: the path with its marks, then the declaration in a code block.
    pub fn text(&self) -> String {
        let marks = super::tools::marks(self.needs_approval, self.destructive);
        format!("{}{marks}\n\n```ts\n{}\n```", self.path, self.declaration.trim_end())
    }
}

/// A path `describe` does not know; its Display is the pinned text with the suggestions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DescribeError {
    /// No tool has this path.
    UnknownTool {
        /// The path asked.
        path: String,
        /// Up to [`MAX_SUGGESTIONS`] paths near it, nearest first.
        suggestions: Vec<String>,
    },
}

impl std::fmt::Display for DescribeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DescribeError::UnknownTool { path, suggestions } if suggestions.is_empty() => {
                f.write_str(&texts::DESCRIBE_UNKNOWN_NOTHING_NEAR.fill(&[path]))
            }
            DescribeError::UnknownTool { path, suggestions } => {
                f.write_str(&texts::DESCRIBE_UNKNOWN.fill(&[path, &suggestions.join(", ")]))
            }
        }
    }
}

impl std::error::Error for DescribeError {}

impl CatalogIndex {
    /// The tool at `path` (`provider.tool` by its sandbox name or its own name), or the
    /// nearest paths: those within a few edits (by distance, then path), then the best
    /// hits of `path` searched as words.
    pub fn describe(&self, path: &str) -> Result<Description, DescribeError> {
        let Some(&doc) = self.by_path.get(path) else {
            return Err(DescribeError::UnknownTool {
                path: path.to_owned(),
                suggestions: self.suggestions(path),
            });
        };
        let tool = self.tool(doc);
        let provider = &self.catalog.providers[self.docs[doc].provider];
        let mut spec = provider.spec();
        spec.tools = vec![tool.spec()];
        let declaration = ToolTable::new(vec![spec]).map(|table| table.declarations()).unwrap_or_default();
        Ok(Description {
            path: self.docs[doc].path.clone(),
            provider: provider.name.clone(),
            name: tool.name.clone(),
            description: tool.description.clone(),
            needs_approval: tool.needs_approval(),
            destructive: tool.destructive(),
            declaration,
            input_schema: tool.input_schema.clone(),
            output_schema: tool.output_schema.clone(),
            annotations: tool.annotations.clone(),
        })
    }

    /// Up to [`MAX_SUGGESTIONS`] paths near `path`.
    fn suggestions(&self, path: &str) -> Vec<String> {
        let asked = path.to_ascii_lowercase();
        let most = (asked.chars().count() / 4).max(2);
        let mut near: Vec<(usize, &str)> = self
            .docs
            .iter()
            .map(|d| (text::edit_distance(&asked, &d.path.to_ascii_lowercase()), d.path.as_str()))
            .filter(|(distance, _)| *distance <= most)
            .collect();
        near.sort_unstable();
        let mut suggestions: Vec<String> = near.into_iter().map(|(_, p)| p.to_owned()).collect();
        suggestions.dedup();
        suggestions.truncate(MAX_SUGGESTIONS);
        let request = SearchRequest { limit: Some(MAX_SUGGESTIONS), ..SearchRequest::new(path) };
        for hit in self.search(&request).map(|a| a.hits).unwrap_or_default() {
            if suggestions.len() < MAX_SUGGESTIONS && !suggestions.contains(&hit.path) {
                suggestions.push(hit.path);
            }
        }
        suggestions
    }
}
