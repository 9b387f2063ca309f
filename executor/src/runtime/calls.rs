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
use codemode_protocol::{ToolCall, ToolNotFoundError, error_envelope, texts};

use super::State;
use crate::engine::{BuiltinScript, HostValue, Op};
use crate::host::{CallAnswer, Host};
use crate::outbound::OutboundRequest;

/// What the host budget is charged for a call in flight beyond its payload, and for a timer.
const CALL_HOST_COST: usize = 128;
const TIMER_HOST_COST: usize = 96;

/// Calls awaiting the host, with what each holds of the budget.
#[derive(Default)]
pub(super) struct Calls {
    next: u64,
    open: HashMap<u64, usize>,
}

impl Calls {
    pub(super) fn len(&self) -> usize {
        self.open.len()
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

    /// Open a call holding `payload` bytes; `None` when the budget has no room for it.
    fn open_call(&mut self, payload: usize) -> Option<u64> {
        let cost = payload + CALL_HOST_COST;
        if !self.budget.charge(cost) {
            return None;
        }
        self.calls.next += 1;
        self.calls.open.insert(self.calls.next, cost);
        Some(self.calls.next)
    }

    /// Close a call; `false` when it was not open (already answered, or never was).
    pub(super) fn finish_call(&mut self, id: u64) -> bool {
        match self.calls.open.remove(&id) {
            Some(cost) => {
                self.budget.refund(cost);
                true
            }
            None => false,
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

fn fetch_answer(answer: Result<crate::outbound::OutboundResponse, String>) -> HostValue {
    match answer {
        Ok(response) => HostValue::List(vec![
            HostValue::Number(f64::from(response.status)),
            HostValue::String(headers_json(&response.headers)),
            HostValue::Bytes(response.body),
        ]),
        Err(text) => HostValue::List(vec![HostValue::Bool(false), HostValue::String(text)]),
    }
}

/// Let a call leave: refused by a bound (as `[text]`), answered at once (`ready` of the
/// answer), or under way (its id).
fn leave(
    shared: &Rc<RefCell<State>>,
    payload: usize,
    start: impl FnOnce(&Host, u64) -> Option<CallAnswer>,
    ready: impl FnOnce(CallAnswer) -> HostValue,
) -> Result<HostValue, String> {
    let mut state = shared.borrow_mut();
    if let Some(text) = state.refusal(payload) {
        return Ok(refused(text));
    }
    let Some(id) = state.open_call(payload) else { return Ok(refused(state.memory_text())) };
    let host = state.host.clone();
    drop(state);
    match start(&host, id) {
        Some(answer) => {
            shared.borrow_mut().finish_call(id);
            Ok(ready(answer))
        }
        None => Ok(HostValue::Number(id as f64)),
    }
}

/// The ops the prelude receives, each closing over the execution's state.
pub(super) fn ops(state: &Rc<RefCell<State>>) -> Vec<(&'static str, Op)> {
    let call: Op = {
        let shared = state.clone();
        Rc::new(move |mut args| {
            let call = ToolCall::new(
                take_string(&mut args, 0),
                take_string(&mut args, 1),
                take_string(&mut args, 2),
            );
            let payload = call.provider.len() + call.tool.len() + call.args_json.len();
            if shared.borrow().host.dispatch.is_none() && shared.borrow().refusal(payload).is_none() {
                return Ok(HostValue::String(error_envelope(&ToolNotFoundError::new(call.tool).to_string())));
            }
            leave(
                &shared,
                payload,
                |host, id| host.tool_call(id, call),
                |answer| match answer {
                    CallAnswer::Tool(text) => HostValue::String(text),
                    CallAnswer::Fetch(_) => HostValue::Undefined,
                },
            )
        })
    };
    // A call whose text is past the payload bound in UTF-16 units: refused with that count,
    // which is at most its bytes, without copying it out of the engine.
    let refuse_large: Op = {
        let shared = state.clone();
        Rc::new(move |args| {
            let units = number(&args, 0);
            let units = if units.is_finite() && units > 0.0 { units as usize } else { 0 };
            let state = shared.borrow();
            Ok(HostValue::String(state.refusal(units).unwrap_or_else(|| {
                let limit = state.limits.max_payload_bytes;
                texts::PAYLOAD_TOO_LARGE.fill(&[&units.to_string(), &limit.to_string()])
            })))
        })
    };
    let fetch: Op = {
        let shared = state.clone();
        Rc::new(move |mut args| {
            let headers: Vec<(String, String)> = serde_json::from_str(&string(&args, 2)).unwrap_or_default();
            let request = OutboundRequest {
                method: take_string(&mut args, 0),
                url: take_string(&mut args, 1),
                headers,
                body: take_bytes(&mut args, 3),
            };
            let payload = request.url.len() + request.body.len();
            if shared.borrow().host.outbound.is_none() && shared.borrow().refusal(payload).is_none() {
                return Ok(refused(texts::NETWORK_CLOSED.to_owned()));
            }
            leave(
                &shared,
                payload,
                |host, id| host.fetch(id, request),
                |answer| match answer {
                    CallAnswer::Fetch(answer) => fetch_answer(answer),
                    CallAnswer::Tool(_) => HostValue::Undefined,
                },
            )
        })
    };
    let timer: Op = {
        let shared = state.clone();
        Rc::new(move |args| {
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
        let shared = state.clone();
        Rc::new(move |args| {
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
        let shared = state.clone();
        Rc::new(move |mut args| {
            let line = match args.get_mut(0) {
                Some(HostValue::String(line)) => Some(std::mem::take(line)),
                _ => None,
            };
            Ok(HostValue::Bool(shared.borrow_mut().log(line)))
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
