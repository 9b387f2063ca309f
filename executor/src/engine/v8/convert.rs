//! Values between the host and V8: what an op receives, what it answers, as QuickJS does.

use crate::engine::HostValue;

use super::alloc::Account;

/// A value as the host reads it: strings lossy (a lone surrogate is one U+FFFD), numbers,
/// booleans, bytes from a Uint8Array (its own window) or an ArrayBuffer; anything else undefined.
pub(super) fn to_host(scope: &v8::PinScope<'_, '_>, value: v8::Local<'_, v8::Value>) -> HostValue {
    if let Ok(string) = v8::Local::<v8::String>::try_from(value) {
        return HostValue::String(string.to_rust_string_lossy(scope));
    }
    if let Ok(number) = v8::Local::<v8::Number>::try_from(value) {
        return HostValue::Number(number.value());
    }
    if value.is_boolean() {
        return HostValue::Bool(value.is_true());
    }
    if let Ok(view) = v8::Local::<v8::Uint8Array>::try_from(value) {
        let mut bytes = vec![0; view.byte_length()];
        let copied = view.copy_contents(&mut bytes);
        bytes.truncate(copied);
        return HostValue::Bytes(bytes);
    }
    if let Ok(buffer) = v8::Local::<v8::ArrayBuffer>::try_from(value) {
        let length = buffer.byte_length();
        let store = buffer.get_backing_store();
        return HostValue::Bytes(store.iter().take(length).map(std::cell::Cell::get).collect());
    }
    HostValue::Undefined
}

/// A host value as a fresh JavaScript value; `None` with an exception thrown when V8 or the
/// budget has no room for it. Bytes become an ArrayBuffer made by the isolate's allocator,
/// so the budget counts them.
pub(super) fn from_host<'s>(
    scope: &mut v8::PinScope<'s, '_>,
    account: &Account,
    value: HostValue,
) -> Option<v8::Local<'s, v8::Value>> {
    Some(match value {
        HostValue::Undefined => v8::undefined(scope).into(),
        HostValue::Bool(flag) => v8::Boolean::new(scope, flag).into(),
        HostValue::Number(number) => v8::Number::new(scope, number).into(),
        HostValue::String(text) => string(scope, &text)?.into(),
        HostValue::Json(text) => {
            let source = string(scope, &text)?;
            match parse_json(scope, source) {
                // No prototype: the array goes through Promise.resolve, which must find no
                // `then` a program put on Array.prototype (a string never had one).
                Parsed::Value(value) => {
                    let array = v8::Array::new_with_elements(scope, &[value]);
                    let null = v8::null(scope).into();
                    array.set_prototype(scope, null)?;
                    array.into()
                }
                // A syntax error leaves the text to the codec's own path, which says what is
                // wrong as it always did.
                Parsed::NotJson => source.into(),
                // Given up as for any stop, rather than go on with the text.
                Parsed::Stopped => return None,
            }
        }
        HostValue::Bytes(bytes) => {
            // V8 ends the process when the allocator refuses `ArrayBuffer::New`: ask first.
            if !account.charge(bytes.len()) {
                return throw_range_error(scope, "Array buffer allocation failed");
            }
            account.release(bytes.len());
            let buffer = v8::ArrayBuffer::new(scope, bytes.len());
            let store = buffer.get_backing_store();
            for (cell, byte) in store.iter().zip(bytes) {
                cell.set(byte);
            }
            buffer.into()
        }
        HostValue::Builtin(script) => {
            // Compiled lazily by V8 itself: only the functions a program calls are compiled.
            let source = super::builtins::builtin(script.name, script.source);
            let text = string(scope, &source.source)?;
            v8::Script::compile(scope, text, None)?.run(scope)?
        }
        HostValue::List(values) => {
            let mut elements = Vec::with_capacity(values.len());
            for value in values {
                elements.push(from_host(scope, account, value)?);
            }
            v8::Array::new_with_elements(scope, &elements).into()
        }
    })
}

/// What V8's own JSON parser made of a text.
enum Parsed<'s> {
    Value(v8::Local<'s, v8::Value>),
    /// Not JSON; nothing is thrown.
    NotJson,
    /// The parse was stopped (the deadline, the heap limit).
    Stopped,
}

fn parse_json<'s>(scope: &mut v8::PinScope<'s, '_>, text: v8::Local<'s, v8::String>) -> Parsed<'s> {
    v8::tc_scope!(let scope, scope);
    match v8::json::parse(scope, text) {
        Some(value) => Parsed::Value(value),
        None if scope.has_terminated() || scope.is_execution_terminating() => Parsed::Stopped,
        None => Parsed::NotJson,
    }
}

/// A JavaScript string; `None` with V8's own RangeError thrown when it is past V8's longest.
pub(super) fn string<'s>(scope: &v8::PinScope<'s, '_>, text: &str) -> Option<v8::Local<'s, v8::String>> {
    match v8::String::new(scope, text) {
        Some(string) => Some(string),
        None => throw_range_error(scope, "Invalid string length"),
    }
}

fn throw_range_error<'s, T>(scope: &v8::PinScope<'s, '_>, message: &str) -> Option<T> {
    if let Some(message) = v8::String::new(scope, message) {
        let error = v8::Exception::range_error(scope, message);
        scope.throw_exception(error);
    }
    None
}
