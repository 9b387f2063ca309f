//! The codec: JSON with tagged binary, the form every value takes across a tool call.
//!
//! [`Value`] is a JSON value that may also hold [`Binary`]. [`stringify_for_dispatch`]
//! writes anything serializable (binary as its tag); [`parse_for_dispatch`] reads a
//! string back, rebuilding every tag and refusing a malformed one with a text that
//! names what is wrong. [`parse_dispatch_arguments`] is what a responder calls on
//! `argsJson`: always a list.

use std::cell::Cell;
use std::fmt;

use indexmap::IndexMap;
use serde::de::{self, DeserializeOwned, MapAccess, SeqAccess, Visitor};
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

/// Stack left free before a nested value is entered; below it the stack grows on the heap.
const RED_ZONE: usize = 64 * 1024;

/// The size of each stack segment added when the stack grows.
const STACK_SEGMENT: usize = 2 * 1024 * 1024;

/// Run `f`, one level deeper into a value, on a fresh stack segment when the current
/// stack is nearly spent: a program can build values of any depth.
fn deeper<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(RED_ZONE, STACK_SEGMENT, f)
}

/// A value that crosses a tool call: JSON, plus binary.
///
/// Values may be of any depth (a program can build an array nested 100,000 deep), so
/// everything recursive about them (reading, writing, cloning, comparing, formatting,
/// dropping) is done without running out of stack. One consequence: `Value` implements
/// `Drop`, so a pattern cannot move a field out of it; borrow (`Value::Array(items) =
/// &value`) or take (`Value::Array(items) = &mut value` then `std::mem::take(items)`).
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

impl Default for Value {
    /// `null`.
    fn default() -> Value {
        Value::Null
    }
}

impl Drop for Value {
    /// Takes nested arrays and objects apart one at a time, so dropping a deep value
    /// needs no deep stack.
    fn drop(&mut self) {
        let mut pending: Vec<Value> = match self {
            Value::Array(items) if !items.is_empty() => std::mem::take(items),
            Value::Object(fields) if !fields.is_empty() => std::mem::take(fields).into_values().collect(),
            _ => return,
        };
        while let Some(mut value) = pending.pop() {
            match &mut value {
                Value::Array(items) => pending.append(items),
                Value::Object(fields) => pending.extend(std::mem::take(fields).into_values()),
                _ => {}
            }
        }
    }
}

impl Clone for Value {
    fn clone(&self) -> Value {
        match self {
            Value::Null => Value::Null,
            Value::Bool(b) => Value::Bool(*b),
            Value::Number(n) => Value::Number(n.clone()),
            Value::String(s) => Value::String(s.clone()),
            Value::Array(items) => deeper(|| Value::Array(items.clone())),
            Value::Object(fields) => deeper(|| Value::Object(fields.clone())),
            Value::Binary(binary) => Value::Binary(binary.clone()),
        }
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Number(a), Value::Number(b)) => a == b,
            (Value::String(a), Value::String(b)) => a == b,
            (Value::Array(a), Value::Array(b)) => deeper(|| a == b),
            (Value::Object(a), Value::Object(b)) => deeper(|| a == b),
            (Value::Binary(a), Value::Binary(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("Null"),
            Value::Bool(b) => f.debug_tuple("Bool").field(b).finish(),
            Value::Number(n) => f.debug_tuple("Number").field(n).finish(),
            Value::String(s) => f.debug_tuple("String").field(s).finish(),
            Value::Array(items) => deeper(|| f.debug_tuple("Array").field(items).finish()),
            Value::Object(fields) => deeper(|| f.debug_tuple("Object").field(fields).finish()),
            Value::Binary(binary) => f.debug_tuple("Binary").field(binary).finish(),
        }
    }
}

/// An object's fields as a value: a binary tag becomes [`Value::Binary`], and an object
/// holding the tag key that is not a well-formed tag is an error naming what is wrong.
fn object_or_binary(fields: Object) -> Result<Value, CodecError> {
    if !fields.contains_key(BINARY_TAG) {
        return Ok(Value::Object(fields));
    }
    let field = |name| fields.get(name).and_then(Value::as_str);
    match (fields.len(), field(BINARY_TAG), field(BINARY_DATA)) {
        (2, Some(kind), Some(data)) => Ok(Value::Binary(Binary::from_tag(kind, data)?)),
        _ => Err(CodecError::new(texts::BINARY_TAG_SHAPE)),
    }
}

/// A plain JSON array or object being converted, with the children still to convert.
enum Converting {
    Array(Vec<Value>, std::vec::IntoIter<serde_json::Value>),
    Object(Object, serde_json::map::IntoIter, String),
}

/// Take a plain JSON value apart one level at a time: `serde_json::Value`'s own drop
/// recurses, and a deep one would run out of stack.
fn dismantle(json: serde_json::Value) {
    let mut pending = vec![json];
    while let Some(mut json) = pending.pop() {
        match &mut json {
            serde_json::Value::Array(items) => pending.append(items),
            serde_json::Value::Object(fields) => {
                pending.extend(std::mem::take(fields).into_iter().map(|(_, v)| v))
            }
            _ => {}
        }
    }
}

impl Value {
    /// Rebuild a value from plain JSON, turning every binary tag into [`Value::Binary`].
    ///
    /// An object holding the tag key must be a well-formed tag; anything else is an
    /// error naming what is wrong, never silently a plain object. Works at any depth,
    /// with an explicit stack.
    pub fn from_json(json: serde_json::Value) -> Result<Value, CodecError> {
        let mut open: Vec<Converting> = Vec::new();
        let mut next = json;
        loop {
            // Convert `next`: a scalar is done at once; an array or object opens a level.
            let mut done = match next {
                serde_json::Value::Null => Some(Value::Null),
                serde_json::Value::Bool(b) => Some(Value::Bool(b)),
                serde_json::Value::Number(n) => Some(Value::Number(n)),
                serde_json::Value::String(s) => Some(Value::String(s)),
                serde_json::Value::Array(items) => {
                    open.push(Converting::Array(Vec::with_capacity(items.len()), items.into_iter()));
                    None
                }
                serde_json::Value::Object(fields) => {
                    open.push(Converting::Object(
                        Object::with_capacity(fields.len()),
                        fields.into_iter(),
                        String::new(),
                    ));
                    None
                }
            };
            // Hand what is done to its parent and find the next child to convert.
            loop {
                let Some(level) = open.last_mut() else {
                    return Ok(done.unwrap_or_default());
                };
                let child = match level {
                    Converting::Array(items, rest) => {
                        items.extend(done.take());
                        rest.next()
                    }
                    Converting::Object(fields, rest, key) => {
                        if let Some(value) = done.take() {
                            fields.insert(std::mem::take(key), value);
                        }
                        rest.next().map(|(name, json)| {
                            *key = name;
                            json
                        })
                    }
                };
                if let Some(child) = child {
                    next = child;
                    break;
                }
                let finished = match open.pop() {
                    Some(Converting::Array(items, _)) => Ok(Value::Array(items)),
                    Some(Converting::Object(fields, _, _)) => object_or_binary(fields),
                    None => unreachable!("a level was open"),
                };
                match finished {
                    Ok(value) => done = Some(value),
                    Err(error) => {
                        for level in open {
                            match level {
                                Converting::Array(_, rest) => rest.for_each(dismantle),
                                Converting::Object(_, rest, _) => rest.for_each(|(_, json)| dismantle(json)),
                            }
                        }
                        return Err(error);
                    }
                }
            }
        }
    }

    /// The plain JSON form, every binary value written as its tag.
    ///
    /// `serde_json::Value`'s own drop recurses: a very deep result can overflow the stack
    /// when it is dropped. Prefer [`stringify_for_dispatch`] for deep values.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => serde_json::Value::Number(n.clone()),
            Value::String(s) => serde_json::Value::String(s.clone()),
            Value::Array(items) => {
                deeper(|| serde_json::Value::Array(items.iter().map(Value::to_json).collect()))
            }
            Value::Object(fields) => deeper(|| {
                serde_json::Value::Object(
                    fields.iter().map(|(key, value)| (key.clone(), value.to_json())).collect(),
                )
            }),
            Value::Binary(binary) => serde_json::json!({
                BINARY_TAG: binary.kind().name(),
                BINARY_DATA: binary.to_base64(),
            }),
        }
    }

    /// Read this value as a `T`, binary fields typed [`Binary`] or [`crate::Bytes`] included.
    pub fn deserialize_into<T: DeserializeOwned>(&self) -> Result<T, CodecError> {
        from_json_str(&stringify_for_dispatch(self)?)
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
            Value::Array(items) => deeper(|| items.serialize(serializer)),
            Value::Object(fields) => deeper(|| fields.serialize(serializer)),
            Value::Binary(binary) => binary.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    /// Any self-describing format; every nested level runs where the stack has room, so
    /// depth is bounded only by the deserializer (see [`from_json_str`] for JSON of any depth).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
        de::DeserializeSeed::deserialize(ValueSeed { tag_error: None }, deserializer)
    }
}

/// Reads a [`Value`]. A malformed binary tag is also kept in `tag_error`, when there is
/// one, so the codec reports its text as it is (a deserializer adds a position to a
/// custom error's text).
#[derive(Clone, Copy)]
struct ValueSeed<'a> {
    tag_error: Option<&'a Cell<Option<CodecError>>>,
}

impl<'de> de::DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        de::DeserializeSeed::deserialize(self, deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = deeper(|| seq.next_element_seed(self))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut fields = Object::with_capacity(map.size_hint().unwrap_or(0).min(1024));
        while let Some(key) = map.next_key::<String>()? {
            let value = deeper(|| map.next_value_seed(self))?;
            fields.insert(key, value);
        }
        object_or_binary(fields).map_err(|error| {
            let text = error.message().to_owned();
            if let Some(slot) = self.tag_error {
                slot.set(Some(error));
            }
            de::Error::custom(text)
        })
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

/// Read JSON text into `T` as the codec reads every text: at any depth, and with each
/// lone surrogate escape (`"\ud800"`, which `JSON.stringify` writes for a JavaScript
/// string holding one) read as U+FFFD.
///
/// serde_json alone refuses both: it stops at 128 levels and rejects lone surrogates.
/// Here its recursion limit is off and the stack grows on the heap as the nesting
/// deepens (`serde_stacker`); a text with a lone surrogate is read again with each one
/// replaced by `\ufffd`, which keeps every position the same.
pub fn from_json_str<T: DeserializeOwned>(text: &str) -> Result<T, CodecError> {
    read_json(text, |json| Ok(T::deserialize(serde_stacker::Deserializer::new(json))?))
}

/// Read one JSON text with `read`, the recursion limit off; a text refused because of a
/// lone surrogate is read again with each one replaced.
fn read_json<T>(
    text: &str,
    read: impl Fn(&mut serde_json::Deserializer<serde_json::de::StrRead<'_>>) -> Result<T, CodecError>,
) -> Result<T, CodecError> {
    let once = |text: &str| {
        let mut json = serde_json::Deserializer::from_str(text);
        json.disable_recursion_limit();
        let value = read(&mut json)?;
        json.end()?;
        Ok::<T, CodecError>(value)
    };
    match once(text) {
        Ok(value) => Ok(value),
        Err(error) => match replace_lone_surrogates(text) {
            Some(repaired) => once(&repaired),
            None => Err(error),
        },
    }
}

/// `text` with every lone surrogate escape inside a string replaced by `\ufffd`, or `None`
/// when it has none. A pair (`\ud83d\ude00`) stays; an escaped backslash (`\\ud800`) is
/// not an escape. Replacements are the same length, so positions in errors hold.
pub(crate) fn replace_lone_surrogates(text: &str) -> Option<String> {
    fn unit(bytes: &[u8], at: usize) -> Option<u16> {
        if bytes.get(at) != Some(&b'\\') || bytes.get(at + 1) != Some(&b'u') {
            return None;
        }
        let hex = std::str::from_utf8(bytes.get(at + 2..at + 6)?).ok()?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u16::from_str_radix(hex, 16).ok()
    }
    const LEADING: std::ops::Range<u16> = 0xD800..0xDC00;
    const TRAILING: std::ops::Range<u16> = 0xDC00..0xE000;
    let bytes = text.as_bytes();
    let mut repaired: Option<Vec<u8>> = None;
    let mut in_string = false;
    let mut at = 0;
    while at < bytes.len() {
        match (in_string, bytes[at]) {
            (false, b'"') => in_string = true,
            (false, _) => {}
            (true, b'"') => in_string = false,
            (true, b'\\') => {
                match unit(bytes, at) {
                    Some(lead) if LEADING.contains(&lead) => {
                        if unit(bytes, at + 6).is_some_and(|trail| TRAILING.contains(&trail)) {
                            at += 12;
                            continue;
                        }
                        repaired.get_or_insert_with(|| bytes.to_vec())[at..at + 6]
                            .copy_from_slice(b"\\ufffd");
                        at += 6;
                        continue;
                    }
                    Some(trail) if TRAILING.contains(&trail) => {
                        repaired.get_or_insert_with(|| bytes.to_vec())[at..at + 6]
                            .copy_from_slice(b"\\ufffd");
                        at += 6;
                        continue;
                    }
                    Some(_) => {
                        at += 6;
                        continue;
                    }
                    // Any other escape: skip the escaped character (a backslash or a quote included).
                    None => at += 1,
                }
            }
            (true, _) => {}
        }
        at += 1;
    }
    repaired.map(|bytes| String::from_utf8(bytes).unwrap_or_else(|_| unreachable!("ASCII replaced by ASCII")))
}

/// Read the codec's JSON, rebuilding every binary tag. Any depth; a lone surrogate
/// escape reads as U+FFFD (see [`from_json_str`]).
pub fn parse_for_dispatch(text: &str) -> Result<Value, CodecError> {
    let tag_error = Cell::new(None);
    read_json(text, |json| {
        de::DeserializeSeed::deserialize(ValueSeed { tag_error: Some(&tag_error) }, json)
            .map_err(|error| tag_error.take().unwrap_or_else(|| error.into()))
    })
}

/// Read a call's `argsJson` as a list of arguments, binary rebuilt.
///
/// Positional calls send an array, which is the list. A payload that is not an array
/// (the options-object convention) comes back as one argument: `{"id":7}` gives
/// `[{"id":7}]`. Any depth; a lone surrogate escape reads as U+FFFD.
pub fn parse_dispatch_arguments(args_json: &str) -> Result<Vec<Value>, CodecError> {
    let mut value = parse_for_dispatch(args_json)?;
    Ok(match &mut value {
        Value::Array(items) => std::mem::take(items),
        _ => vec![value],
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
    let is_array = args_json.trim_start_matches([' ', '\t', '\n', '\r']).starts_with('[');
    read_json(args_json, |json| {
        let json = serde_stacker::Deserializer::new(json);
        if is_array {
            return Ok(T::deserialize(json)?);
        }
        let mut single = Some(json);
        let value = T::deserialize(OneArgument(&mut single))?;
        // A `T` that took no element still reads (and so checks) the payload.
        if let Some(json) = single {
            de::IgnoredAny::deserialize(json)?;
        }
        Ok(value)
    })
}

/// One JSON value presented as a list of one argument, read in place.
struct OneArgument<'a, D>(&'a mut Option<D>);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for OneArgument<'_, D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        visitor.visit_seq(self)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de, D: Deserializer<'de>> SeqAccess<'de> for OneArgument<'_, D> {
    type Error = D::Error;

    fn next_element_seed<S: de::DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, D::Error> {
        match self.0.take() {
            Some(json) => seed.deserialize(json).map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(usize::from(self.0.is_some()))
    }
}
