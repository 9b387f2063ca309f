//! The codec: JSON with tagged binary, the form every value takes across a tool call.
//!
//! [`Value`] is a JSON value that may also hold [`Binary`]. [`stringify_for_dispatch`]
//! writes anything serializable (binary as its tag); [`parse_for_dispatch`] reads a
//! string back, rebuilding every tag and refusing a malformed one with a text that
//! names what is wrong. [`parse_dispatch_arguments`] is what a responder calls on
//! `argsJson`: always a list.

use std::fmt;

use indexmap::IndexMap;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::binary::{BINARY_DATA, BINARY_TAG, Binary};
use crate::texts;

/// A failure of the codec; its Display is the whole message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodecError {
    message: String,
}

impl CodecError {
    pub(crate) fn new(message: impl Into<String>) -> CodecError {
        CodecError { message: message.into() }
    }

    /// The message, as a program or a host reads it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CodecError {}

impl From<serde_json::Error> for CodecError {
    fn from(error: serde_json::Error) -> CodecError {
        CodecError::new(error.to_string())
    }
}

/// An object's fields, in the order they were written (as JavaScript keeps them).
pub type Object = IndexMap<String, Value>;

/// A value that crosses a tool call: JSON, plus binary.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as JSON writes it.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Value>),
    /// An object; a binary tag is never one, it is [`Value::Binary`].
    Object(Object),
    /// An ArrayBuffer or typed array.
    Binary(Binary),
}

impl Value {
    /// Rebuild a value from plain JSON, turning every binary tag into [`Value::Binary`].
    ///
    /// An object holding the tag key must be a well-formed tag; anything else is an
    /// error naming what is wrong, never silently a plain object.
    pub fn from_json(json: serde_json::Value) -> Result<Value, CodecError> {
        Ok(match json {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(b),
            serde_json::Value::Number(n) => Value::Number(n),
            serde_json::Value::String(s) => Value::String(s),
            serde_json::Value::Array(items) => {
                Value::Array(items.into_iter().map(Value::from_json).collect::<Result<_, _>>()?)
            }
            serde_json::Value::Object(fields) if fields.contains_key(BINARY_TAG) => {
                let field = |name| fields.get(name).and_then(serde_json::Value::as_str);
                match (fields.len(), field(BINARY_TAG), field(BINARY_DATA)) {
                    (2, Some(kind), Some(data)) => Value::Binary(Binary::from_tag(kind, data)?),
                    _ => return Err(CodecError::new(texts::BINARY_TAG_SHAPE)),
                }
            }
            serde_json::Value::Object(fields) => Value::Object(
                fields.into_iter().map(|(key, value)| Ok((key, Value::from_json(value)?))).collect::<Result<
                    _,
                    CodecError,
                >>(
                )?,
            ),
        })
    }

    /// The plain JSON form, every binary value written as its tag.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => serde_json::Value::Number(n.clone()),
            Value::String(s) => serde_json::Value::String(s.clone()),
            Value::Array(items) => serde_json::Value::Array(items.iter().map(Value::to_json).collect()),
            Value::Object(fields) => serde_json::Value::Object(
                fields.iter().map(|(key, value)| (key.clone(), value.to_json())).collect(),
            ),
            Value::Binary(binary) => serde_json::json!({
                BINARY_TAG: binary.kind().name(),
                BINARY_DATA: binary.to_base64(),
            }),
        }
    }

    /// Read this value as a `T`, binary fields typed [`Binary`] or [`crate::Bytes`] included.
    pub fn deserialize_into<T: DeserializeOwned>(&self) -> Result<T, CodecError> {
        Ok(serde_json::from_value(self.to_json())?)
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The binary value, if this is one.
    pub fn as_binary(&self) -> Option<&Binary> {
        match self {
            Value::Binary(b) => Some(b),
            _ => None,
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Null => serializer.serialize_unit(),
            Value::Bool(b) => serializer.serialize_bool(*b),
            Value::Number(n) => n.serialize(serializer),
            Value::String(s) => serializer.serialize_str(s),
            Value::Array(items) => items.serialize(serializer),
            Value::Object(fields) => fields.serialize(serializer),
            Value::Binary(binary) => binary.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
        let json = serde_json::Value::deserialize(deserializer)?;
        Value::from_json(json).map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Value {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "CodecValue".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Any JSON value in the codec's form: binary values are objects {\"__executor_binary_v1__\": kind, \"data\": base64}."
        })
    }
}

impl From<Binary> for Value {
    fn from(binary: Binary) -> Value {
        Value::Binary(binary)
    }
}

impl From<crate::Bytes> for Value {
    fn from(bytes: crate::Bytes) -> Value {
        Value::Binary(bytes.into())
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::String(s)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Value {
        Value::Number(n.into())
    }
}

impl From<Vec<Value>> for Value {
    fn from(items: Vec<Value>) -> Value {
        Value::Array(items)
    }
}

/// Write `value` as the codec's JSON: binary values ([`Binary`], [`crate::Bytes`]) as tags.
///
/// A `Vec<u8>` is written as an array of numbers, as serde writes it; wrap it in
/// [`crate::Bytes`] to send bytes.
pub fn stringify_for_dispatch<T: Serialize + ?Sized>(value: &T) -> Result<String, CodecError> {
    Ok(serde_json::to_string(value)?)
}

/// Read the codec's JSON, rebuilding every binary tag.
pub fn parse_for_dispatch(text: &str) -> Result<Value, CodecError> {
    Value::from_json(serde_json::from_str(text)?)
}

/// Read a call's `argsJson` as a list of arguments, binary rebuilt.
///
/// Positional calls send an array, which is the list. A payload that is not an array
/// (the options-object convention) comes back as one argument: `{"id":7}` gives
/// `[{"id":7}]`.
pub fn parse_dispatch_arguments(args_json: &str) -> Result<Vec<Value>, CodecError> {
    Ok(match parse_for_dispatch(args_json)? {
        Value::Array(items) => items,
        single => vec![single],
    })
}

/// Read a call's `argsJson` straight into `T`, with the same list rule as
/// [`parse_dispatch_arguments`]: `T` is the list, a tuple or a `Vec`.
///
/// ```
/// # use codemode_protocol::{parse_dispatch_arguments_as, Bytes};
/// #[derive(serde::Deserialize)]
/// struct Upload { name: String, avatar: Bytes }
/// let (upload,): (Upload,) = parse_dispatch_arguments_as(
///     r#"{"name":"ada","avatar":{"__executor_binary_v1__":"Uint8Array","data":"AQID"}}"#,
/// ).unwrap();
/// assert_eq!(upload.avatar.as_slice(), &[1, 2, 3]);
/// ```
pub fn parse_dispatch_arguments_as<T: DeserializeOwned>(args_json: &str) -> Result<T, CodecError> {
    let json: serde_json::Value = serde_json::from_str(args_json)?;
    let list = match json {
        serde_json::Value::Array(_) => json,
        single => serde_json::Value::Array(vec![single]),
    };
    Ok(serde_json::from_value(list)?)
}
