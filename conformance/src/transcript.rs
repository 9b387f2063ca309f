//! Transcript formats v1 and v2: one JSON file per case (see DESIGN.md), and their loading.
//!
//! Format v2 (a file saying `"format": 2`) adds what runs that wait and count need: the
//! request's `cpuTimeLimitMs` and `maxCalls` (wire version 5, which the runner then
//! speaks to a process), the outcome kinds `cpuTime` and `callLimit`, and an exchange's
//! `afterMs` (the host answers that call after a while). A file without `format` is v1
//! and is read as before; one using a v2 field is refused with the field named.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use codemode_protocol::{ExecuteRequest, Outcome, OutcomeKind, ToolCall};
use serde::{Deserialize, Serialize};

/// One golden case: a request, the calls that must reach the host and their answers,
/// and the outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Transcript {
    /// The format: absent for v1, `2` for v2 (the only values read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<u32>,
    /// What the case shows.
    pub name: String,
    /// The section of the tools guide it comes from.
    pub section: String,
    /// The execute request as the wire carries it.
    pub request: ExecuteRequest,
    /// Every call that must reach the host, in arrival order, with the host's raw answer.
    #[serde(default)]
    pub exchanges: Vec<Exchange>,
    /// The outcome in the codec's JSON form.
    pub outcome: Outcome,
    /// Where an engine's own message differs from `outcome`: the outcome on that engine
    /// (`quickjs`, `v8`), each with the reason in `engineNote`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outcome_by_engine: BTreeMap<String, Outcome>,
    /// Why the outcome differs by engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_note: Option<String>,
}

impl Transcript {
    /// The first field of format v2 this transcript uses, if any.
    fn v2_field(&self) -> Option<&'static str> {
        let kinds = std::iter::once(&self.outcome).chain(self.outcome_by_engine.values());
        if self.request.cpu_time_limit_ms.is_some() {
            Some("cpuTimeLimitMs")
        } else if self.request.max_calls.is_some() {
            Some("maxCalls")
        } else if self.exchanges.iter().any(|e| e.after_ms.is_some()) {
            Some("afterMs")
        } else if kinds.clone().any(|o| o.kind() == OutcomeKind::CpuTime) {
            Some("cpuTime")
        } else if kinds.clone().any(|o| o.kind() == OutcomeKind::CallLimit) {
            Some("callLimit")
        } else {
            None
        }
    }

    /// The outcome expected of an implementation on `engine`.
    pub fn expected_outcome(&self, engine: &str) -> &Outcome {
        self.outcome_by_engine.get(engine).unwrap_or(&self.outcome)
    }
}

/// One call and the raw string the host answers it with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Exchange {
    /// The call that must arrive: provider, tool and argsJson to the byte.
    pub call: ToolCall,
    /// The host's answer, as the dispatch returns it.
    pub answer: String,
    /// Format v2: the host answers this many milliseconds after the call arrives.
    #[serde(default, rename = "afterMs", skip_serializing_if = "Option::is_none")]
    pub after_ms: Option<u64>,
}

/// A transcript that could not be read; says which file and which field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong, the field at fault included.
    pub message: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

/// Read every `*.json` transcript in `dir`, sorted by file name.
pub fn load_dir(dir: &Path) -> Result<Vec<(PathBuf, Transcript)>, LoadError> {
    let unreadable = |message: String| LoadError { path: dir.to_path_buf(), message };
    let entries =
        std::fs::read_dir(dir).map_err(|e| unreadable(format!("cannot read the directory: {e}")))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths.into_iter().map(|path| load(&path).map(|t| (path, t))).collect()
}

/// Read one transcript; a field that does not match the format is named with its line.
pub fn load(path: &Path) -> Result<Transcript, LoadError> {
    let fail = |message: String| LoadError { path: path.to_path_buf(), message };
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let transcript: Transcript = serde_json::from_str(&text)
        .map_err(|e| fail(format!("does not match transcript format v1 or v2: {e}")))?;
    match (transcript.format, transcript.v2_field()) {
        (None, Some(field)) => {
            return Err(fail(format!("{V1_REFUSES} `{field}` (format v2: add \"format\": 2)")));
        }
        (None | Some(2), _) => {}
        (Some(other), _) => {
            return Err(fail(format!("is in transcript format {other}; this runner reads formats 1 and 2")));
        }
    }
    if transcript.request.events {
        return Err(fail(NO_EVENTS.to_owned()));
    }
    if transcript.request.web_assembly {
        return Err(fail(NO_WEB_ASSEMBLY.to_owned()));
    }
    Ok(transcript)
}

/// What a v1 file using a field of v2 is told, before the field.
const V1_REFUSES: &str = "does not match transcript format v1: unknown field";

/// Version 4's `webAssembly` is no part of format v1: an implementation runs a column of
/// the matrix with it on (`--webassembly`), not a transcript.
const NO_WEB_ASSEMBLY: &str = "does not match transcript format v1: unknown field `webAssembly` (a transcript runs with the implementation's own setting)";

/// A transcript records outcomes, not progress, and the runner speaks wire version 1:
/// version 3's `events` is no part of format v1.
const NO_EVENTS: &str =
    "does not match transcript format v1: unknown field `events` (a transcript's request asks for no events)";

/// The JSON Schema of transcript format v1, as committed in `conformance/transcript.schema.json`.
pub fn schema() -> String {
    let mut schema = base_schema();
    // Format v2's fields and kinds are no part of v1: the loader refuses them there.
    remove_properties(&mut schema, "/properties", &["format"]);
    remove_properties(&mut schema, "/$defs/Exchange/properties", &["afterMs"]);
    remove_properties(&mut schema, "/$defs/ExecuteRequest/properties", &["cpuTimeLimitMs", "maxCalls"]);
    if let Some(kinds) = schema.pointer_mut("/$defs/OutcomeKind/oneOf").and_then(|k| k.as_array_mut()) {
        kinds.retain(|kind| !matches!(kind["const"].as_str(), Some("cpuTime" | "callLimit")));
    }
    pretty(&schema)
}

/// The JSON Schema of transcript format v2, as committed in `conformance/transcript-v2.schema.json`.
pub fn schema_v2() -> String {
    let mut schema = base_schema();
    if let Some(format) = schema.pointer_mut("/properties/format") {
        *format = serde_json::json!({ "description": "The format: 2.", "const": 2 });
    }
    if let Some(required) = schema.pointer_mut("/required").and_then(|r| r.as_array_mut()) {
        required.insert(0, "format".into());
    }
    pretty(&schema)
}

/// The schema of [`Transcript`] less the wire's `events` (version 3) and `webAssembly`
/// (version 4), which no format has: the loader refuses them.
fn base_schema() -> serde_json::Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(Transcript)).unwrap_or_default();
    remove_properties(&mut schema, "/$defs/ExecuteRequest/properties", &["events", "webAssembly"]);
    schema
}

fn remove_properties(schema: &mut serde_json::Value, pointer: &str, names: &[&str]) {
    if let Some(properties) = schema.pointer_mut(pointer).and_then(|p| p.as_object_mut()) {
        for name in names {
            properties.shift_remove(*name);
        }
    }
}

fn pretty(schema: &serde_json::Value) -> String {
    let mut text = serde_json::to_string_pretty(schema).unwrap_or_default();
    text.push('\n');
    text
}
