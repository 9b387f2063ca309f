//! Provider descriptors, and the rules a provider name must pass before a program runs.
//!
//! Every provider name becomes a `const` in the entry scope, so it must be an
//! identifier the language allows, unique, and must not shadow anything the entry
//! scope binds or the generated source reads. [`validate_providers`] applies the
//! guide's rules in the guide's order, provider by provider, and reports the first
//! failure with its pinned text.

use std::collections::HashSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::texts;

/// What the model is told about one provider, and the host's source that shapes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderDescriptor {
    /// The name the provider takes in the sandbox.
    pub name: String,
    /// The tools the model is told about. Undeclared tools still reach dispatch.
    #[serde(default)]
    pub tools: Vec<String>,
    /// `true` (the default): a call sends its arguments as an array. `false`: a call
    /// sends its one options object, `{}` when called with none.
    #[serde(default = "positional_default", skip_serializing_if = "is_positional_default")]
    pub positional_args: bool,
    /// Host source run in the entry scope after every proxy is declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prelude: Option<String>,
    /// Host source that replaces the generated proxy outright; it must declare the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_source: Option<String>,
}

fn positional_default() -> bool {
    true
}

fn is_positional_default(positional: &bool) -> bool {
    *positional
}

impl ProviderDescriptor {
    /// A provider `name` with `tools`, positional arguments, no source of its own.
    pub fn new<I, S>(name: impl Into<String>, tools: I) -> ProviderDescriptor
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ProviderDescriptor {
            name: name.into(),
            tools: tools.into_iter().map(Into::into).collect(),
            positional_args: true,
            prelude: None,
            proxy_source: None,
        }
    }

    /// Pick the argument convention: `false` sends one options object.
    pub fn positional_args(mut self, positional: bool) -> ProviderDescriptor {
        self.positional_args = positional;
        self
    }

    /// Host source run after every proxy is declared.
    pub fn prelude(mut self, source: impl Into<String>) -> ProviderDescriptor {
        self.prelude = Some(source.into());
        self
    }

    /// Host source that replaces the generated proxy.
    pub fn proxy_source(mut self, source: impl Into<String>) -> ProviderDescriptor {
        self.proxy_source = Some(source.into());
        self
    }
}

/// A name the entry scope binds or the generated source reads, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReservedName {
    /// The name.
    pub name: &'static str,
    /// Why a provider may not take it.
    pub reason: &'static str,
}

const ENTRY_BINDING: &str = "bound in the entry scope: programs and provider source address it directly";
const HOST_FUNCTION: &str = "a host function the generated codec reads";
const INTRINSIC: &str = "an intrinsic the generated source reads before the program runs";
const BINARY_KIND: &str = "a binary kind the codec rebuilds";

macro_rules! reserved {
    ($($name:literal => $reason:expr),* $(,)?) => {
        &[$(ReservedName { name: $name, reason: $reason }),*]
    };
}

/// Every name a provider may not take, each with its reason.
///
/// `tests/node_entry.rs` checks the other direction: with every global outside this
/// list made unreadable, the generated source still works.
pub const RESERVED_PROVIDER_NAMES: &[ReservedName] = reserved! {
    "console" => "the executor's console: the outcome's logs depend on it",
    "__dispatch" => "the host function every call leaves through; bound in the entry scope",
    "__stringifyForDispatch" => ENTRY_BINDING,
    "__parseForDispatch" => ENTRY_BINDING,
    "__encodeBinary" => ENTRY_BINDING,
    "__decodeBinary" => ENTRY_BINDING,
    "__providerProxy" => ENTRY_BINDING,
    "__bytesToBase64" => HOST_FUNCTION,
    "__base64ToBytes" => HOST_FUNCTION,
    "globalThis" => INTRINSIC,
    "Object" => INTRINSIC,
    "Array" => INTRINSIC,
    "Reflect" => INTRINSIC,
    "Proxy" => INTRINSIC,
    "JSON" => INTRINSIC,
    "Error" => INTRINSIC,
    "SyntaxError" => INTRINSIC,
    "Symbol" => INTRINSIC,
    "ArrayBuffer" => BINARY_KIND,
    "Uint8Array" => BINARY_KIND,
    "Uint8ClampedArray" => BINARY_KIND,
    "Int8Array" => BINARY_KIND,
    "Uint16Array" => BINARY_KIND,
    "Int16Array" => BINARY_KIND,
    "Uint32Array" => BINARY_KIND,
    "Int32Array" => BINARY_KIND,
    "Float32Array" => BINARY_KIND,
    "Float64Array" => BINARY_KIND,
    "BigInt64Array" => BINARY_KIND,
    "BigUint64Array" => BINARY_KIND,
};

/// Why a word is on the refused list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusalReason {
    /// A keyword or reserved word of ECMA-262; no binding may take it.
    ReservedWord,
    /// Reserved in strict code, and the generated source is strict.
    StrictModeReserved,
    /// Strict code may not bind it at all (`arguments`, `eval`).
    StrictModeUnbindable,
    /// The language allows it, but it also opens an async function head: too ambiguous.
    Ambiguous,
}

/// A word a provider name may not be, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefusedWord {
    /// The word.
    pub word: &'static str,
    /// Why it is refused.
    pub reason: RefusalReason,
}

macro_rules! refused {
    ($($reason:ident: [$($word:literal),* $(,)?]),* $(,)?) => {
        &[$($(RefusedWord { word: $word, reason: RefusalReason::$reason }),*),*]
    };
}

/// The refused-words list: every ECMAScript reserved word, the names strict mode
/// reserves, `arguments`, `eval` and `async`.
pub const REFUSED_WORDS: &[RefusedWord] = refused! {
    ReservedWord: [
        "await", "break", "case", "catch", "class", "const", "continue", "debugger", "default",
        "delete", "do", "else", "enum", "export", "extends", "false", "finally", "for",
        "function", "if", "import", "in", "instanceof", "new", "null", "return", "super",
        "switch", "this", "throw", "true", "try", "typeof", "var", "void", "while", "with",
    ],
    StrictModeReserved: [
        "implements", "interface", "let", "package", "private", "protected", "public", "static",
        "yield",
    ],
    StrictModeUnbindable: ["arguments", "eval"],
    Ambiguous: ["async"],
};

/// Whether `name` is in [`RESERVED_PROVIDER_NAMES`].
pub fn is_reserved(name: &str) -> bool {
    RESERVED_PROVIDER_NAMES.iter().any(|reserved| reserved.name == name)
}

/// Whether `name` is in [`REFUSED_WORDS`].
pub fn is_refused_word(name: &str) -> bool {
    REFUSED_WORDS.iter().any(|refused| refused.word == name)
}

/// Whether `name` is ASCII letters, digits, `_` and `$`, not starting with a digit.
pub fn is_provider_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|first| first.is_ascii_alphabetic() || first == '_' || first == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// Which rule a provider name broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderNameRule {
    /// Rule 1: the name is reserved.
    Reserved,
    /// Rule 2: the name is not an allowed identifier.
    NotIdentifier,
    /// Rule 3: the name is on the refused-words list.
    RefusedWord,
    /// Rule 4: the name is declared twice.
    Duplicate,
}

/// A provider name that broke a rule; its Display is the guide's text for that rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderNameError {
    rule: ProviderNameRule,
    name: String,
}

impl ProviderNameError {
    /// The rule it broke.
    pub fn rule(&self) -> ProviderNameRule {
        self.rule
    }

    /// The name as declared.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for ProviderNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let template = match self.rule {
            ProviderNameRule::Reserved => texts::PROVIDER_NAME_RESERVED,
            ProviderNameRule::NotIdentifier => texts::PROVIDER_NAME_NOT_IDENTIFIER,
            ProviderNameRule::RefusedWord => texts::PROVIDER_NAME_REFUSED,
            ProviderNameRule::Duplicate => texts::PROVIDER_NAME_DUPLICATE,
        };
        f.write_str(&template.fill(&[&self.name]))
    }
}

impl std::error::Error for ProviderNameError {}

/// Check every provider name, in declaration order, each against the rules in the
/// guide's order (reserved, identifier, refused word, declared twice).
pub fn validate_providers(providers: &[ProviderDescriptor]) -> Result<(), ProviderNameError> {
    let mut seen = HashSet::with_capacity(providers.len());
    for provider in providers {
        let name = provider.name.as_str();
        let broken = if is_reserved(name) {
            Some(ProviderNameRule::Reserved)
        } else if !is_provider_identifier(name) {
            Some(ProviderNameRule::NotIdentifier)
        } else if is_refused_word(name) {
            Some(ProviderNameRule::RefusedWord)
        } else if !seen.insert(name) {
            Some(ProviderNameRule::Duplicate)
        } else {
            None
        };
        if let Some(rule) = broken {
            return Err(ProviderNameError { rule, name: name.to_owned() });
        }
    }
    Ok(())
}
