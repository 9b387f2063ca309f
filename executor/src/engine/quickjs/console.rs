//! The sandbox's console: one log line per call, formatted by the outcome rules.
//!
//! Arguments are joined by one space. A string is written as it is; other primitives
//! as `String` gives them; an Error as `Name: message`; a function as `String` gives
//! it; any other object as `JSON.stringify` gives it, or `String(value)` where that
//! throws. `log`, `info` and `debug` add no prefix; `warn` adds `[warn] `, `error`
//! adds `[error] `.

use std::rc::Rc;

use rquickjs::convert::Coerced;
use rquickjs::function::Rest;
use rquickjs::{Ctx, FromJs, Function, Object, Type, Value};

/// The console methods and their prefixes.
pub(crate) const METHODS: &[(&str, &str)] =
    &[("log", ""), ("info", ""), ("debug", ""), ("warn", "[warn] "), ("error", "[error] ")];

/// A `console` object whose methods hand each formatted line to `sink`.
pub(crate) fn console_object<'js>(ctx: &Ctx<'js>, sink: Rc<dyn Fn(String)>) -> rquickjs::Result<Object<'js>> {
    let console = Object::new(ctx.clone())?;
    for &(method, prefix) in METHODS {
        let sink = sink.clone();
        let log = Function::new(ctx.clone(), move |ctx: Ctx<'js>, args: Rest<Value<'js>>| {
            let mut line = String::from(prefix);
            for (i, arg) in args.0.iter().enumerate() {
                if i > 0 {
                    line.push(' ');
                }
                line.push_str(&format_argument(&ctx, arg));
            }
            sink(line);
        })?;
        console.set(method, log)?;
    }
    Ok(console)
}

/// One console argument, by the outcome rules.
pub(crate) fn format_argument<'js>(ctx: &Ctx<'js>, value: &Value<'js>) -> String {
    match value.type_of() {
        Type::String => value.as_string().and_then(|s| s.to_string().ok()).unwrap_or_default(),
        Type::Exception => error_line(ctx, value),
        Type::Function | Type::Constructor => to_js_string(ctx, value).unwrap_or_default(),
        Type::Object | Type::Array | Type::Promise | Type::Proxy => match ctx.json_stringify(value.clone()) {
            Ok(Some(json)) => json.to_string().unwrap_or_default(),
            _ => {
                let _ = ctx.catch();
                to_js_string(ctx, value).unwrap_or_default()
            }
        },
        _ if value.is_error() => error_line(ctx, value),
        _ => to_js_string(ctx, value).unwrap_or_default(),
    }
}

fn error_line<'js>(ctx: &Ctx<'js>, value: &Value<'js>) -> String {
    let Some(object) = value.as_object() else { return to_js_string(ctx, value).unwrap_or_default() };
    let field = |name: &str| object.get::<_, Coerced<String>>(name).map(|c| c.0).unwrap_or_default();
    format!("{}: {}", field("name"), field("message"))
}

/// `String(value)`, or `None` where that throws.
pub(crate) fn to_js_string<'js>(ctx: &Ctx<'js>, value: &Value<'js>) -> Option<String> {
    if let Some(symbol) = value.as_symbol() {
        let description = symbol.description().ok()?;
        let description = if description.is_undefined() {
            String::new()
        } else {
            Coerced::<String>::from_js(ctx, description).ok()?.0
        };
        return Some(format!("Symbol({description})"));
    }
    match Coerced::<String>::from_js(ctx, value.clone()) {
        Ok(text) => Some(text.0),
        Err(_) => {
            let _ = ctx.catch();
            None
        }
    }
}
