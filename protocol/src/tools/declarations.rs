//! TypeScript declarations of a tool table, for the model to read.

use super::ToolTable;

/// The declarations of every provider of `table`.
pub fn render(table: &ToolTable) -> String {
    let _ = table;
    String::new()
}
