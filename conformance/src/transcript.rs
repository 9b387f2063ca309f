//! Transcript format v1: one JSON file per case (see DESIGN.md), and its loading.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use codemode_protocol::{ExecuteRequest, Outcome, ToolCall};
use serde::{Deserialize, Serialize};

/// One golden case: a request, the calls that must reach the host and their answers,
/// and the outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Transcript {
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
    let transcript: Transcript =
        serde_json::from_str(&text).map_err(|e| fail(format!("does not match transcript format v1: {e}")))?;
    if transcript.request.events {
        return Err(fail(NO_EVENTS.to_owned()));
    }
    if transcript.request.web_assembly {
        return Err(fail(NO_WEB_ASSEMBLY.to_owned()));
    }
    Ok(transcript)
}

/// Version 4's `webAssembly` is no part of format v1: an implementation runs a column of
/// the matrix with it on (`--webassembly`), not a transcript.
const NO_WEB_ASSEMBLY: &str = "does not match transcript format v1: unknown field `webAssembly` (a transcript runs with the implementation's own setting)";

/// A transcript records outcomes, not progress, and the runner speaks wire version 1:
/// version 3's `events` is no part of format v1.
const NO_EVENTS: &str =
    "does not match transcript format v1: unknown field `events` (a transcript's request asks for no events)";

/// The JSON Schema of the transcript format, as committed in `conformance/transcript.schema.json`.
pub fn schema() -> String {
    let mut schema = serde_json::to_value(schemars::schema_for!(Transcript)).unwrap_or_default();
    // The wire's `events` (version 3) and `webAssembly` (version 4) are no part of format
    // v1: the loader refuses them.
    if let Some(properties) =
        schema.pointer_mut("/$defs/ExecuteRequest/properties").and_then(|p| p.as_object_mut())
    {
        properties.remove("events");
        properties.remove("webAssembly");
    }
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}
