//! The JSON Schemas of the wire types, as committed under `protocol/schema/`.
//!
//! `cargo xtask schema` writes them; `tests/schema.rs` fails when the committed files
//! drift from these.

use crate::wire::{ClientMessage, ExecuteRequest, Outcome, ServerMessage};

/// Every committed schema: its file name under `protocol/schema/` and its text.
pub fn schemas() -> Vec<(&'static str, String)> {
    fn text(schema: schemars::Schema) -> String {
        let mut text =
            serde_json::to_string_pretty(&schema).unwrap_or_else(|_| unreachable!("a schema is JSON"));
        text.push('\n');
        text
    }
    vec![
        ("execute-request.schema.json", text(schemars::schema_for!(ExecuteRequest))),
        ("outcome.schema.json", text(schemars::schema_for!(Outcome))),
        ("client-message.schema.json", text(schemars::schema_for!(ClientMessage))),
        ("server-message.schema.json", text(schemars::schema_for!(ServerMessage))),
    ]
}
