//! The envelope: the one JSON string a dispatch answers with, `{"result": v}` or `{"error": text}`.
//!
//! [`read_answer`] reads an answer exactly as the proxy inside the sandbox does: a
//! JSON object is the envelope; a non-null `error` makes a rejection carrying that
//! text; otherwise `result` is the value (absent: undefined). Anything that is not a
//! JSON object is outside the envelope.

use std::fmt;

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use crate::codec::{
    CodecError, Value, from_json_str, parse_for_dispatch, replace_lone_surrogates, stringify_for_dispatch,
};
use crate::texts;

/// The envelope field carrying a call's value.
pub const RESULT_FIELD: &str = "result";

/// The envelope field carrying a call's failure text.
pub const ERROR_FIELD: &str = "error";

/// `{"result": value}`, binary tagged.
pub fn result_envelope<T: Serialize + ?Sized>(value: &T) -> Result<String, CodecError> {
    #[derive(Serialize)]
    struct Envelope<'a, T: ?Sized> {
        result: &'a T,
    }
    stringify_for_dispatch(&Envelope { result: value })
}

/// `{}`: the envelope whose result is undefined.
pub const UNDEFINED_RESULT_ENVELOPE: &str = "{}";

/// `{"error": text}`, the text as written.
pub fn error_envelope(text: &str) -> String {
    #[derive(Serialize)]
    struct Envelope<'a> {
        error: &'a str,
    }
    serde_json::to_string(&Envelope { error: text })
        .unwrap_or_else(|_| unreachable!("a struct of one string always serializes"))
}

/// What an answer means to the program that made the call.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// The call returns this value; `None` is undefined.
    Result(Option<Value>),
    /// The call rejects with an Error carrying this message.
    Error(String),
}

/// An answer the program cannot read; its Display is the message the call rejects with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerError {
    message: String,
}

impl AnswerError {
    /// The message the call rejects with.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for AnswerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for AnswerError {}

/// Read a dispatch's answer as the program sees it.
///
/// Not JSON, or JSON that is not an object (arrays, strings, null included): the
/// pinned outside-envelope text. A malformed binary tag inside: the codec's text.
/// A non-string `error` is carried as its JSON text. Any depth; a lone surrogate
/// escape reads as U+FFFD, as the codec reads it.
pub fn read_answer(answer: &str) -> Result<Answer, AnswerError> {
    match serde_json::from_str::<Fields<'_>>(answer) {
        Ok(envelope) => read_envelope(envelope),
        Err(_) => match replace_lone_surrogates(answer) {
            Some(repaired) => {
                serde_json::from_str::<Fields<'_>>(&repaired).map_err(|_| outside()).and_then(read_envelope)
            }
            None => Err(outside()),
        },
    }
}

fn outside() -> AnswerError {
    AnswerError { message: texts::OUTSIDE_ENVELOPE.to_owned() }
}

fn read_envelope(envelope: Fields<'_>) -> Result<Answer, AnswerError> {
    match envelope.error.map(RawValue::get) {
        None | Some("null") => {}
        Some(text) if text.starts_with('"') => {
            return from_json_str::<String>(text).map(Answer::Error).map_err(|_| outside());
        }
        Some(other) => {
            // Compact JSON text; a value too deep for that is carried as it was written.
            let compact = serde_json::from_str::<serde_json::Value>(other).map(|json| json.to_string());
            return Ok(Answer::Error(compact.unwrap_or_else(|_| other.to_owned())));
        }
    }
    match envelope.result {
        None => Ok(Answer::Result(None)),
        Some(json) => parse_for_dispatch(json.get())
            .map(|value| Answer::Result(Some(value)))
            .map_err(|error| AnswerError { message: error.message().to_owned() }),
    }
}

/// The two fields of an envelope object, as written (the last of a repeated field wins,
/// as in `JSON.parse`); other fields are skipped.
struct Fields<'a> {
    error: Option<&'a RawValue>,
    result: Option<&'a RawValue>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Fields<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Fields<'a>, D::Error> {
        struct Envelope<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Envelope<'a> {
            type Value = Fields<'a>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an envelope object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'a>, A::Error> {
                let mut fields = Fields { error: None, result: None };
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match &*key {
                        ERROR_FIELD => fields.error = Some(map.next_value()?),
                        RESULT_FIELD => fields.result = Some(map.next_value()?),
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(fields)
            }
        }
        deserializer.deserialize_map(Envelope(std::marker::PhantomData))
    }
}
