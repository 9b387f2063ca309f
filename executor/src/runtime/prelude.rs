//! The prelude's source: `prelude.js` wrapped with the texts it shows, built once per process.

use codemode_protocol::texts;

const PRELUDE: &str = include_str!("prelude.js");
const WEB: &str = include_str!("web.js");

/// The globals the prelude builds on first touch; most programs use none of them.
pub(super) const WEB_GLOBALS: &[&str] = &[
    "queueMicrotask",
    "TextEncoder",
    "TextDecoder",
    "atob",
    "btoa",
    "structuredClone",
    "Headers",
    "Response",
    "fetch",
];

/// The web globals' script, evaluated on first touch of one of them (`web.js`).
pub(super) fn web_source() -> String {
    WEB.to_owned()
}

/// A script evaluating to `(ops) => [configure, [receive, start, finish, describe,
/// refusalText, stackOf]]`: the boot runs on an idle thread before any execution is known,
/// and `configure(maxLogBytes, maxResultBytes, hasOutbound, maxPayloadBytes)` gives it the
/// execution's limits once one is.
pub(super) fn source() -> String {
    let texts = serde_json::json!({
        "unprintable": texts::UNPRINTABLE_THROWN_VALUE,
        "networkClosed": texts::NETWORK_CLOSED,
        "webGlobals": WEB_GLOBALS,
    });
    format!(
        "((texts) => (ops) => {{\n\
         'use strict';\n\
         let maxLogBytes = 0, maxResultBytes = 0, hasOutbound = false, maxPayloadBytes = 0;\n\
         const configure = (log, result, outbound, payload) => {{\n\
           maxLogBytes = log; maxResultBytes = result; hasOutbound = outbound; maxPayloadBytes = payload;\n\
         }};\n\
         return [configure, (() => {{\n{PRELUDE}\n}})()];\n\
         }})({texts})"
    )
}
