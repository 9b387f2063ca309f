//! The ops: the native functions the prelude calls, with the call table and its bounds.
//!
//! A call leaves the moment the program makes it. The op checks the bounds first
//! (completion, payload, calls in flight, the memory budget), starts the host's
//! dispatch or outbound handler, and answers with the answer itself when it was ready at
//! once, or an id the runtime delivers the answer under later.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use codemode_protocol::{BINARY_TAG, ToolCall, ToolNotFoundError, error_envelope, texts};

use super::State;
use crate::api::outbound::OutboundRequest;
use crate::api::watch::{
    ARGUMENTS_PREVIEW_BYTES as ARGUMENTS_BOUND, FETCH_PROVIDER, StartedCall, TEXT_PREVIEW_BYTES,
    answer_error, fetch_arguments, preview,
};
use crate::engine::{BuiltinScript, HostValue, Op};
use crate::in_process::host::{CallAnswer, Host};

/// What the host budget is charged for a call in flight beyond its payload, and for a timer.
const CALL_HOST_COST: usize = 128;
const TIMER_HOST_COST: usize = 96;

/// Calls awaiting the host, with what each holds of the budget and whether its answer
/// may be handed over parsed.
#[derive(Default)]
pub(super) struct Calls {
    next: u64,
    /// Calls that left so far (the call budget counts them).
    left: usize,
    open: HashMap<u64, Open>,
}

struct Open {
    cost: usize,
    /// What its end event repeats, when the run is watched.
    watched: Option<StartedCall>,
    /// Its answer may be handed over parsed (the codec asked).
    parsed: bool,
}

/// What a call is, for its events: provider, tool, arguments.
struct Named<'a>(&'a str, &'a str, &'a str);

impl Calls {
    pub(super) fn len(&self) -> usize {
        self.open.len()
    }

    /// Call ids given out so far: it grows with each call that goes out (and with each
    /// one refused while the run is watched, which only lets the thread wait awake again).
    pub(super) fn opened(&self) -> u64 {
        self.next
    }
}

impl State {
    /// Why a call may not leave, if it may not.
    fn refusal(&self, payload_bytes: usize) -> Option<String> {
        if self.over {
            return Some(texts::EXECUTION_COMPLETED.to_owned());
        }
        let limit = self.limits.max_payload_bytes;
        if payload_bytes > limit {
            return Some(texts::PAYLOAD_TOO_LARGE.fill(&[&payload_bytes.to_string(), &limit.to_string()]));
        }
        let in_flight = self.limits.max_calls_in_flight;
        if self.calls.len() >= in_flight {
            return Some(texts::TOO_MANY_CALLS_IN_FLIGHT.fill(&[&in_flight.to_string()]));
        }
        None
    }

    /// Whether the call budget lets one more call leave. The call over it stops the run
    /// (kind `callLimit`, which the program cannot catch) and never reaches the host.
    fn within_call_budget(&mut self, named: &Named<'_>) -> Result<(), String> {
        let Some(limit) = self.limits.max_calls else { return Ok(()) };
        if self.calls.left < limit {
            self.calls.left += 1;
            return Ok(());
        }
        let text = texts::CALL_LIMIT.fill(&[&limit.to_string()]);
        self.refused_call(named, &text);
        self.control.stop_for(super::Limit::Calls);
        Err(text)
    }

    /// Open a call holding `payload` bytes; `None` when the budget has no room for it.
    fn open_call(&mut self, payload: usize, named: &Named<'_>, parsed: bool) -> Option<u64> {
        let cost = payload + CALL_HOST_COST;
        if !self.budget.charge(cost) {
            return None;
        }
        self.calls.next += 1;
        let id = self.calls.next;
        let watched = self.watch.as_ref().map(|watcher| {
            watcher.call_started(id, named.0, named.1, named.2);
            StartedCall::new(id, named.0, named.1)
        });
        self.calls.open.insert(id, Open { cost, watched, parsed });
        Some(id)
    }

    /// A call that never left, reported (when watched) as started and ended with `error`.
    fn refused_call(&mut self, named: &Named<'_>, error: &str) {
        let Some(watcher) = &self.watch else { return };
        self.calls.next += 1;
        let started = StartedCall::new(self.calls.next, named.0, named.1);
        watcher.call_started(started.call, named.0, named.1, named.2);
        watcher.call_ended(&started, Some(preview(error, TEXT_PREVIEW_BYTES)));
    }

    /// Close a call with its answer: whether the answer may be handed over parsed; `None`
    /// when it was not open (already answered, or never was).
    pub(super) fn finish_call(&mut self, id: u64, answer: &CallAnswer) -> Option<bool> {
        match self.calls.open.remove(&id) {
            Some(open) => {
                self.budget.refund(open.cost);
                if let (Some(watcher), Some(started)) = (&self.watch, &open.watched) {
                    let error = match answer {
                        CallAnswer::Tool(text) => answer_error(text),
                        CallAnswer::Fetch(Ok(_)) => None,
                        CallAnswer::Fetch(Err(text)) => Some(preview(text, TEXT_PREVIEW_BYTES)),
                    };
                    watcher.call_ended(started, error);
                }
                Some(open.parsed)
            }
            None => None,
        }
    }

    /// Tell the watcher what the run waits on.
    pub(super) fn watch_waiting(&self) {
        if let Some(watcher) = &self.watch {
            watcher.waiting(self.calls.len(), self.timers.len());
        }
    }

    pub(super) fn rearm_timer(&mut self, id: u64) {
        if self.timers.rearm(id) {
            self.budget.refund(TIMER_HOST_COST);
        }
    }

    fn memory_text(&self) -> String {
        texts::MEMORY_LIMIT.fill(&[&self.budget.limit().to_string()])
    }
}

fn string(args: &[HostValue], index: usize) -> String {
    match args.get(index) {
        Some(HostValue::String(text)) => text.clone(),
        _ => String::new(),
    }
}

fn take_string(args: &mut [HostValue], index: usize) -> String {
    match args.get_mut(index) {
        Some(HostValue::String(text)) => std::mem::take(text),
        _ => String::new(),
    }
}

fn take_bytes(args: &mut [HostValue], index: usize) -> Vec<u8> {
    match args.get_mut(index) {
        Some(HostValue::Bytes(bytes)) => std::mem::take(bytes),
        _ => Vec::new(),
    }
}

fn number(args: &[HostValue], index: usize) -> f64 {
    match args.get(index) {
        Some(HostValue::Number(n)) => *n,
        _ => 0.0,
    }
}

fn refused(text: String) -> HostValue {
    HostValue::List(vec![HostValue::String(text)])
}

/// A fetch response's headers as the prelude reads them.
pub(super) fn headers_json(headers: &[(String, String)]) -> String {
    serde_json::to_string(headers).unwrap_or_else(|_| "[]".to_owned())
}

fn fetch_answer(answer: Result<crate::api::outbound::OutboundResponse, String>) -> HostValue {
    match answer {
        Ok(response) => HostValue::List(vec![
            HostValue::Number(f64::from(response.status)),
            HostValue::String(headers_json(&response.headers)),
            HostValue::Bytes(response.body),
        ]),
        Err(text) => HostValue::List(vec![HostValue::Bool(false), HostValue::String(text)]),
    }
}

/// A tool's answer as the prelude receives it: parsed natively (`[envelope]`) when the
/// codec asked for that and its text can hold no binary tag (not even one written with
/// `\u` escapes), else the text. Only an object is parsed, so `[envelope]` is never
/// taken for a refusal's `[text]`.
pub(super) fn tool_answer(text: String, parsed: bool) -> HostValue {
    let object = text.trim_start_matches([' ', '\t', '\n', '\r']).starts_with('{');
    if parsed && object && !text.contains(BINARY_TAG) && !escapes_printable_ascii(&text) {
        HostValue::Json(text)
    } else {
        HostValue::String(text)
    }
}

/// Whether a `\u` escape in `text` may stand for printable ASCII, the only characters the
/// binary tag is made of: only then could a tag be in the text without being spelled out.
/// Serializers escape control characters, and non-ASCII when asked (Python's `json.dumps`
/// by default), so answers holding those are still parsed natively. Conservative: an
/// escaped backslash followed by `u` and four digits counts too, as does a malformed
/// escape (which the codec's path then reports).
fn escapes_printable_ascii(text: &str) -> bool {
    text.match_indices("\\u").any(|(at, _)| {
        let digits = text.get(at + 2..at + 6).unwrap_or_default();
        u32::from_str_radix(digits, 16).map_or(true, |code| (0x20..0x7f).contains(&code))
    })
}

/// Let a call leave: refused by a bound (as `[text]`), answered at once (`ready` of the
/// answer, and whether it may be parsed), or under way (its id).
fn leave(
    shared: &Rc<RefCell<State>>,
    payload: usize,
    named: Named<'_>,
    parsed: bool,
    start: impl FnOnce(&Host, u64) -> Option<CallAnswer>,
    ready: impl FnOnce(CallAnswer, bool) -> HostValue,
) -> Result<HostValue, String> {
    let mut state = shared.borrow_mut();
    if let Some(text) = state.refusal(payload) {
        state.refused_call(&named, &text);
        return Ok(refused(text));
    }
    if let Err(text) = state.within_call_budget(&named) {
        return Ok(refused(text));
    }
    let Some(id) = state.open_call(payload, &named, parsed) else {
        let text = state.memory_text();
        state.refused_call(&named, &text);
        return Ok(refused(text));
    };
    let host = state.host.clone();
    drop(state);
    match start(&host, id) {
        Some(answer) => {
            shared.borrow_mut().finish_call(id, &answer);
            Ok(ready(answer, parsed))
        }
        None => Ok(HostValue::Number(id as f64)),
    }
}

/// Where the ops find their execution's state: the ops are made with the warm engine,
/// before the execution they serve is known. It is filled when the execution starts and
/// emptied when the engine is renewed for the next.
#[derive(Clone, Default)]
pub(super) struct StateSlot(Rc<RefCell<Option<Rc<RefCell<State>>>>>);

impl StateSlot {
    /// Give the ops this execution's state; false when the slot already holds one (an
    /// engine serves one execution at a time).
    pub(super) fn fill(&self, state: Rc<RefCell<State>>) -> bool {
        let mut slot = self.0.borrow_mut();
        if slot.is_some() {
            return false;
        }
        *slot = Some(state);
        true
    }

    pub(super) fn empty(&self) {
        self.0.borrow_mut().take();
    }
}

/// The state of the execution an op serves.
fn started(slot: &StateSlot) -> Result<Rc<RefCell<State>>, String> {
    slot.0
        .borrow()
        .clone()
        .ok_or_else(|| "codemode: a host function was called before its execution started".to_owned())
}

/// The `call` op: a tool call the program made, refused here when no dispatch or a bound
/// says so, else sent to the host.
fn call_op(slot: &StateSlot) -> Op {
    let slot = slot.clone();
    Rc::new(move |mut args| {
        let shared = started(&slot)?;
        let call =
            ToolCall::new(take_string(&mut args, 0), take_string(&mut args, 1), take_string(&mut args, 2));
        let parsed = matches!(args.get(3), Some(HostValue::Bool(true)));
        let payload = call.provider.len() + call.tool.len() + call.args_json.len();
        if shared.borrow().host.dispatch.is_none() && shared.borrow().refusal(payload).is_none() {
            let text = ToolNotFoundError::new(call.tool.clone()).to_string();
            shared.borrow_mut().refused_call(&Named(&call.provider, &call.tool, &call.args_json), &text);
            return Ok(HostValue::String(error_envelope(&text)));
        }
        // The names are copied for the events only when the run is watched.
        let watched = shared.borrow().watch.is_some();
        let (provider, tool, arguments) = if watched {
            (
                preview(&call.provider, TEXT_PREVIEW_BYTES),
                preview(&call.tool, TEXT_PREVIEW_BYTES),
                preview(&call.args_json, ARGUMENTS_BOUND),
            )
        } else {
            Default::default()
        };
        leave(
            &shared,
            payload,
            Named(&provider, &tool, &arguments),
            parsed,
            |host, id| host.tool_call(id, call),
            |answer, parsed| match answer {
                CallAnswer::Tool(text) => tool_answer(text, parsed),
                CallAnswer::Fetch(_) => HostValue::Undefined,
            },
        )
    })
}

/// The `fetch` op: a `fetch` the program made, refused when the network is closed or a
/// bound says so, else sent to the outbound handler.
fn fetch_op(slot: &StateSlot) -> Op {
    let slot = slot.clone();
    Rc::new(move |mut args| {
        let shared = started(&slot)?;
        let headers: Vec<(String, String)> = serde_json::from_str(&string(&args, 2)).unwrap_or_default();
        let request = OutboundRequest {
            method: take_string(&mut args, 0),
            url: take_string(&mut args, 1),
            headers,
            body: take_bytes(&mut args, 3),
        };
        let payload = request.url.len() + request.body.len();
        let watched = shared.borrow().watch.is_some();
        let (method, arguments) = if watched {
            (request.method.clone(), fetch_arguments(&request.url))
        } else {
            Default::default()
        };
        let named = Named(FETCH_PROVIDER, &method, &arguments);
        if shared.borrow().host.outbound.is_none() && shared.borrow().refusal(payload).is_none() {
            shared.borrow_mut().refused_call(&named, texts::NETWORK_CLOSED);
            return Ok(refused(texts::NETWORK_CLOSED.to_owned()));
        }
        leave(
            &shared,
            payload,
            named,
            false,
            |host, id| host.fetch(id, request),
            |answer, _| match answer {
                CallAnswer::Fetch(answer) => fetch_answer(answer),
                CallAnswer::Tool(_) => HostValue::Undefined,
            },
        )
    })
}

/// The ops the prelude receives, each reading its execution's state from `slot`.
pub(super) fn ops(slot: &StateSlot) -> Vec<(&'static str, Op)> {
    let call = call_op(slot);
    // A call whose text is past the payload bound in UTF-16 units: refused with that count,
    // which is at most its bytes, without copying it out of the engine.
    let refuse_large: Op = {
        let slot = slot.clone();
        Rc::new(move |mut args| {
            let shared = started(&slot)?;
            let units = number(&args, 0);
            let units = if units.is_finite() && units > 0.0 { units as usize } else { 0 };
            let mut state = shared.borrow_mut();
            let text = state.refusal(units).unwrap_or_else(|| {
                let limit = state.limits.max_payload_bytes;
                texts::PAYLOAD_TOO_LARGE.fill(&[&units.to_string(), &limit.to_string()])
            });
            let (provider, tool, arguments) =
                (take_string(&mut args, 1), take_string(&mut args, 2), take_string(&mut args, 3));
            state.refused_call(&Named(&provider, &tool, &arguments), &text);
            Ok(HostValue::String(text))
        })
    };
    let fetch = fetch_op(slot);
    let timer: Op = {
        let slot = slot.clone();
        Rc::new(move |args| {
            let shared = started(&slot)?;
            let mut state = shared.borrow_mut();
            if !state.budget.charge(TIMER_HOST_COST) {
                return Err(state.memory_text());
            }
            let ms = number(&args, 0);
            let delay = Duration::from_secs_f64(if ms.is_finite() && ms > 0.0 { ms / 1000.0 } else { 0.0 });
            let repeat = matches!(args.get(1), Some(HostValue::Bool(true)));
            Ok(HostValue::Number(state.timers.add(delay, repeat) as f64))
        })
    };
    let clear_timer: Op = {
        let slot = slot.clone();
        Rc::new(move |args| {
            let shared = started(&slot)?;
            let id = number(&args, 0);
            if id.is_finite() && id >= 1.0 {
                let mut state = shared.borrow_mut();
                if state.timers.clear(id as u64) {
                    state.budget.refund(TIMER_HOST_COST);
                }
            }
            Ok(HostValue::Undefined)
        })
    };
    let log: Op = {
        let slot = slot.clone();
        Rc::new(move |mut args| {
            let shared = started(&slot)?;
            let line = match args.get_mut(0) {
                Some(HostValue::String(line)) => Some(std::mem::take(line)),
                _ => None,
            };
            let level = crate::api::watch::level_from_number(number(&args, 2));
            Ok(HostValue::Bool(shared.borrow_mut().log(line, level)))
        })
    };
    let utf8_encode: Op = Rc::new(|mut args| Ok(HostValue::Bytes(take_string(&mut args, 0).into_bytes())));
    let utf8_decode: Op = Rc::new(|mut args| {
        Ok(HostValue::String(String::from_utf8_lossy(&take_bytes(&mut args, 0)).into_owned()))
    });
    let latin1_decode: Op = Rc::new(|mut args| {
        Ok(HostValue::String(take_bytes(&mut args, 0).iter().map(|&b| char::from(b)).collect()))
    });
    let bytes_to_base64: Op =
        Rc::new(|mut args| Ok(HostValue::String(STANDARD.encode(take_bytes(&mut args, 0)))));
    let base64_to_bytes: Op = Rc::new(|mut args| {
        Ok(match STANDARD.decode(take_string(&mut args, 0).as_bytes()) {
            Ok(bytes) => HostValue::Bytes(bytes),
            Err(_) => HostValue::Undefined,
        })
    });
    let web_globals: Op = Rc::new(|_| {
        Ok(HostValue::Builtin(BuiltinScript { name: "codemode:web", source: super::prelude::web_source }))
    });
    vec![
        ("webGlobals", web_globals),
        ("call", call),
        ("refuseLarge", refuse_large),
        ("fetch", fetch),
        ("timer", timer),
        ("clearTimer", clear_timer),
        ("log", log),
        ("utf8Encode", utf8_encode),
        ("utf8Decode", utf8_decode),
        ("latin1Decode", latin1_decode),
        ("bytesToBase64", bytes_to_base64),
        ("base64ToBytes", base64_to_bytes),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn natively(text: &str) -> bool {
        matches!(tool_answer(text.to_owned(), true), HostValue::Json(_))
    }

    /// Which answers are parsed natively: escapes of control characters and of non-ASCII
    /// (as Python's `json.dumps` writes them) are; anything that could spell the binary
    /// tag, or is no object, or was not asked for parsed, goes to the codec as text.
    #[test]
    fn an_answer_is_parsed_natively_unless_it_could_hold_a_tag() {
        assert!(natively(r#"{"result":"caf\u00e9 \u001f \ud83d\ude00 \u2028"}"#));
        assert!(natively(" \n{\"result\":[1,2]}"));
        assert!(!natively(r#"{"result":{"\u005f_executor_binary_v1__":"Uint8Array","data":"AQI="}}"#));
        assert!(!natively(r#"{"result":{"__executor_binary_v1__":"Uint8Array","data":"AQI="}}"#));
        assert!(!natively(r#"{"result":"\u0041"}"#));
        assert!(!natively(r#"{"result":"\\u0041"}"#));
        assert!(!natively(r#"{"result":"\u00"}"#));
        assert!(!natively(r#"{"result":"\u"}"#));
        assert!(!natively(r#"["result"]"#));
        assert!(!matches!(tool_answer(r#"{"result":1}"#.to_owned(), false), HostValue::Json(_)));
    }
}
