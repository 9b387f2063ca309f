//! The entry scope as source text: what an engine evaluates to run one program.
//!
//! [`entry_source`] is a pure function from (code, providers) to a strict classic
//! script. Evaluating it yields a two-element array: the promise of the program's
//! result, and the codec's `__stringifyForDispatch`, with which the engine writes that
//! result in the codec's form (`undefined` aside). Before the program
//! runs it captures its intrinsics, declares one `const` per provider (the generated
//! proxy, or the provider's `proxySource`), then runs every prelude. An engine needs
//! only three host functions on its global object:
//!
//! - `__dispatch(provider, tool, argsJson)`: returns a promise of the answer string;
//! - `__bytesToBase64(uint8Array)`: the standard padded base64 of its bytes;
//! - `__base64ToBytes(text)`: a fresh `ArrayBuffer`, or `undefined` when `text` is not
//!   standard padded base64.
//!
//! The base64 pair keeps per-byte work out of JavaScript: a 1 MiB array costs one
//! native call each way.

use std::fmt;

use crate::binary::{BINARY_TAG, BinaryKind};
use crate::locate::ProgramMap;
use crate::normalize::{CodeSyntaxError, normalize_mapped};
use crate::provider::{ProviderDescriptor, ProviderNameError, validate_providers};
use crate::texts::{self, Template, TemplatePart};

/// The names the entry scope binds, in the order the codec returns them.
pub const ENTRY_BINDINGS: &[&str] = &[
    "__dispatch",
    "__stringifyForDispatch",
    "__parseForDispatch",
    "__encodeBinary",
    "__decodeBinary",
    "__providerProxy",
];

/// The host functions an engine installs on its global object before evaluating.
pub const HOST_FUNCTIONS: &[&str] = &["__dispatch", "__bytesToBase64", "__base64ToBytes"];

const CODEC_SOURCE: &str = include_str!("entry/codec.js");

/// Why no entry source could be built; its Display is the outcome's error text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryError {
    /// A provider name broke a rule.
    ProviderName(ProviderNameError),
    /// The code fits no accepted form.
    Syntax(CodeSyntaxError),
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryError::ProviderName(error) => error.fmt(f),
            EntryError::Syntax(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for EntryError {}

/// Build the script an engine evaluates for `code` with `providers`.
///
/// Provider names are checked first (the guide's rules and texts), then the code is
/// normalized. Provider source (`prelude`, `proxySource`) is the host's and goes in as
/// written; the engine reports its syntax errors.
///
/// The script is [`scope_source`] applied to [`codec_source`]'s bindings. An engine
/// may evaluate the two parts apart, for instance to compile the codec (the same for
/// every execution) once.
pub fn entry_source(code: &str, providers: &[ProviderDescriptor]) -> Result<String, EntryError> {
    let scope = scope_source(code, providers)?;
    let codec = codec_source();
    let mut source = String::with_capacity(scope.len() + codec.len() + 64);
    source.push_str("\"use strict\";\n(");
    source.push_str(&scope);
    source.push_str(").apply(void 0, ");
    source.push_str(&codec);
    source.push_str(");\n");
    Ok(source)
}

/// The entry scope alone: a strict function expression whose parameters are
/// [`ENTRY_BINDINGS`], declaring the providers, running the preludes, and returning
/// `[promise of the program's result, __stringifyForDispatch]`.
pub fn scope_source(code: &str, providers: &[ProviderDescriptor]) -> Result<String, EntryError> {
    entry_scope(code, providers).map(|scope| scope.source)
}

/// The entry scope ([`scope_source`]) with the way from a place in it back to the code as sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EntryScope {
    /// What [`scope_source`] gives.
    pub source: String,
    /// Where the program is in `source`, and where each of its bytes came from.
    pub map: ProgramMap,
}

/// [`scope_source`] with its [`ProgramMap`].
pub fn entry_scope(code: &str, providers: &[ProviderDescriptor]) -> Result<EntryScope, EntryError> {
    validate_providers(providers).map_err(EntryError::ProviderName)?;
    let normalized = normalize_mapped(code).map_err(EntryError::Syntax)?;
    let program = &normalized.source;

    let mut source = String::with_capacity(program.len() + 256);
    source.push_str("function (");
    source.push_str(&ENTRY_BINDINGS.join(", "));
    source.push_str(") {\n\"use strict\";\n");
    for provider in providers {
        match &provider.proxy_source {
            Some(proxy) => {
                source.push_str(proxy);
                source.push_str("\n;\n");
            }
            None => {
                let name = &provider.name;
                let positional = provider.positional_args;
                source.push_str(&format!(
                    "const {name} = __providerProxy({}, {positional});\n",
                    js_string(name)
                ));
            }
        }
    }
    for prelude in providers.iter().filter_map(|p| p.prelude.as_deref()) {
        source.push_str("{\n");
        source.push_str(prelude);
        source.push_str("\n;}\n");
    }
    source.push_str("return [(async () => await (\n");
    // The program begins a line of its own, so its columns are the scope's.
    let first_line = u32::try_from(source.matches('\n').count() + 1).unwrap_or(u32::MAX);
    source.push_str(program);
    source.push_str("\n)())(), __stringifyForDispatch];\n}");
    Ok(EntryScope { source, map: ProgramMap::new(code, normalized, first_line) })
}

/// The sandbox-side codec: an expression that, evaluated before any program or provider
/// source, captures its intrinsics and yields the values of [`ENTRY_BINDINGS`] as an array.
///
/// It is the same for every execution; it reads [`HOST_FUNCTIONS`] from the global object.
pub fn codec_source() -> String {
    let mut source = String::with_capacity(CODEC_SOURCE.len() + 1024);
    source.push_str("((texts, kinds) => {\n");
    source.push_str(CODEC_SOURCE);
    source.push_str("})(");
    source.push_str(&codec_texts());
    source.push_str(", ");
    source.push_str(&codec_kinds());
    source.push(')');
    source
}

fn js_string(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// A template as the codec's `fill` reads it: literal strings and hole indices.
/// A hole's index is its name's place in [`Template::holes`], as [`Template::fill`] counts.
fn js_template(template: Template) -> serde_json::Value {
    let holes = template.holes();
    let pieces = template.parts().into_iter().map(|part| match part {
        TemplatePart::Literal(literal) => serde_json::Value::from(literal),
        TemplatePart::Hole(name) => serde_json::Value::from(holes.iter().position(|hole| *hole == name)),
    });
    serde_json::Value::Array(pieces.collect())
}

fn codec_texts() -> String {
    serde_json::json!({
        "tag": BINARY_TAG,
        "outside": texts::OUTSIDE_ENVELOPE,
        "shape": texts::BINARY_TAG_SHAPE,
        "unknownKind": js_template(texts::BINARY_TAG_UNKNOWN_KIND),
        "badBase64": js_template(texts::BINARY_TAG_BAD_BASE64),
        "badLength": js_template(texts::BINARY_TAG_BAD_LENGTH),
    })
    .to_string()
}

fn codec_kinds() -> String {
    let entries: Vec<String> = BinaryKind::ALL
        .iter()
        .map(|kind| format!("[{}, {}, {}]", js_string(kind.name()), kind.name(), kind.element_size()))
        .collect();
    format!("[{}]", entries.join(", "))
}
