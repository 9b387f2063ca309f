//! The envelope: the one JSON string a dispatch answers with, `{"result": v}` or `{"error": text}`.
//!
//! [`read_answer`] reads an answer exactly as the proxy inside the sandbox does: a
//! JSON object is the envelope; a non-null `error` makes a rejection carrying that
//! text; otherwise `result` is the value (absent: undefined). Anything that is not a
//! JSON object is outside the envelope.

use std::fmt;

use serde::Serialize;

use crate::codec::{CodecError, Value, stringify_for_dispatch};
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
/// A non-string `error` is carried as its JSON text.
pub fn read_answer(answer: &str) -> Result<Answer, AnswerError> {
    let outside = || AnswerError { message: texts::OUTSIDE_ENVELOPE.to_owned() };
    let json: serde_json::Value = serde_json::from_str(answer).map_err(|_| outside())?;
    let serde_json::Value::Object(mut fields) = json else {
        return Err(outside());
    };
    match fields.shift_remove(ERROR_FIELD) {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::String(text)) => return Ok(Answer::Error(text)),
        Some(other) => return Ok(Answer::Error(other.to_string())),
    }
    match fields.shift_remove(RESULT_FIELD) {
        None => Ok(Answer::Result(None)),
        Some(json) => Value::from_json(json)
            .map(|value| Answer::Result(Some(value)))
            .map_err(|error| AnswerError { message: error.message().to_owned() }),
    }
}
