//! Every example of the tools guide, run through the executor, with the outcome it prints.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::*;
use codemode_executor::Request;
use codemode_protocol::{
    Binary, BinaryKind, Bytes, Latch, ProviderDescriptor, ToolCall, ToolNotFoundError,
    create_envelope_dispatch, parse_dispatch_arguments, parse_dispatch_arguments_as,
};
use serde_json::json;

fn store(tools: &[&str]) -> ProviderDescriptor {
    ProviderDescriptor::new("store", tools.iter().copied())
}

fn echo(call: &ToolCall) -> String {
    json!({ "result": { "provider": call.provider, "tool": call.tool, "argsJson": call.args_json } })
        .to_string()
}

// ---- Declaration and dispatch ----

#[tokio::test]
async fn awaiting_the_provider_yields_the_proxy_and_calls_nothing() {
    let recorder = Recorder::default();
    let outcome = run(Request::new("async () => { const v = await store; return typeof v }")
        .provider(store(&["x"]))
        .dispatch(recorder.dispatch(echo)))
    .await;
    assert_eq!(json(&outcome), r#"{"result":"object","logs":[]}"#);
    assert_eq!(recorder.calls(), vec![]);
}

#[tokio::test]
async fn a_call_sends_three_strings_and_the_envelope_comes_back() {
    let recorder = Recorder::default();
    let outcome = run(Request::new("async () => store.findUser('ada')")
        .provider(store(&["listUsers", "findUser"]))
        .dispatch(recorder.dispatch(|_| r#"{"result":{"id":"ada","admin":false}}"#.to_owned())))
    .await;
    assert_eq!(json(&outcome), r#"{"result":{"id":"ada","admin":false},"logs":[]}"#);
    assert_eq!(recorder.calls(), vec![triple("store", "findUser", r#"["ada"]"#)]);
}

// ---- Values that cross a tool call ----

#[tokio::test]
async fn positional_arguments_as_the_guide_prints_them() {
    let recorder = Recorder::default();
    let outcome = run(Request::new(
        "async () => {
    await store.noArgs()
    await store.two('ada', 7)
    await store.obj({ id: 1, deep: { a: [1, 2] } })
    await store.bytes(new Uint8Array([1, 2, 3]))
    return 'sent'
  }",
    )
    .provider(store(&["noArgs"]))
    .dispatch(recorder.dispatch(|_| r#"{"result":null}"#.to_owned())))
    .await;
    assert_eq!(json(&outcome), r#"{"result":"sent","logs":[]}"#);
    assert_eq!(
        recorder.calls(),
        vec![
            triple("store", "noArgs", "[]"),
            triple("store", "two", r#"["ada",7]"#),
            triple("store", "obj", r#"[{"id":1,"deep":{"a":[1,2]}}]"#),
            triple("store", "bytes", r#"[{"__executor_binary_v1__":"Uint8Array","data":"AQID"}]"#),
        ]
    );
}

#[tokio::test]
async fn the_options_object_convention() {
    let recorder = Recorder::default();
    let outcome =
        run(Request::new("async () => { await store.find({ id: 7 }); await store.all(); return 'ok' }")
            .provider(store(&["find"]).positional_args(false))
            .dispatch(recorder.dispatch(|_| "{}".to_owned())))
        .await;
    assert_eq!(json(&outcome), r#"{"result":"ok","logs":[]}"#);
    assert_eq!(recorder.calls(), vec![triple("store", "find", r#"{"id":7}"#), triple("store", "all", "{}")]);
    assert_eq!(
        parse_dispatch_arguments(r#"{"id":7}"#).unwrap(),
        vec![codemode_protocol::parse_for_dispatch(r#"{"id":7}"#).unwrap()]
    );
}

#[tokio::test]
async fn bytes_cross_both_ways_through_the_envelope_dispatch() {
    let latch = Latch::open();
    let dispatch = create_envelope_dispatch(latch.clone(), |call: ToolCall| async move {
        let (bytes,): (Bytes,) = parse_dispatch_arguments_as(&call.args_json).map_err(|e| e.to_string())?;
        let mut reversed = bytes.into_vec();
        reversed.reverse();
        Ok::<_, String>(Bytes::from(reversed))
    });
    let outcome = run(Request::new(
        "async () => { const r = await store.reverse(new Uint8Array([1, 2, 3])); return [r instanceof Uint8Array, Array.from(r)] }",
    )
    .provider(store(&["reverse"]))
    .dispatch(dispatch))
    .await;
    latch.close();
    assert_eq!(json(&outcome), r#"{"result":[true,[3,2,1]],"logs":[]}"#);
}

#[tokio::test]
async fn a_view_sends_only_its_visible_bytes_and_nested_bytes_cross() {
    let recorder = Recorder::default();
    let outcome = run(Request::new(
        "async () => {
          const r = await store.put({ deep: [new Uint8Array([9, 1, 2, 9]).subarray(1, 3)] });
          return r.rows[0].avatar;
        }",
    )
    .provider(store(&["put"]))
    .dispatch(recorder.dispatch(|_| {
        r#"{"result":{"rows":[{"avatar":{"__executor_binary_v1__":"Uint8Array","data":"AQID"}}]}}"#.to_owned()
    })))
    .await;
    assert_eq!(
        recorder.calls(),
        vec![triple("store", "put", r#"[{"deep":[{"__executor_binary_v1__":"Uint8Array","data":"AQI="}]}]"#)]
    );
    assert_eq!(
        json(&outcome),
        r#"{"result":{"__executor_binary_v1__":"Uint8Array","data":"AQID"},"logs":[]}"#
    );
}

#[tokio::test]
async fn every_binary_kind_crosses_both_ways_as_the_same_kind() {
    for &kind in BinaryKind::ALL {
        let recorder = Recorder::default();
        let code = format!(
            "async () => {{
              const bytes = new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]).buffer;
              const value = {kind} === ArrayBuffer ? bytes : new {kind}(bytes);
              const back = await store.echo(value);
              return [back.constructor.name, back];
            }}"
        );
        let outcome =
            run(Request::new(code).provider(store(&["echo"])).dispatch(recorder.dispatch(move |_| {
                format!(r#"{{"result":{{"__executor_binary_v1__":"{kind}","data":"CAcGBQQDAgE="}}}}"#)
            })))
            .await;
        assert_eq!(
            recorder.calls(),
            vec![triple(
                "store",
                "echo",
                &format!(r#"[{{"__executor_binary_v1__":"{kind}","data":"AQIDBAUGBwg="}}]"#)
            )]
        );
        let rebuilt = Binary::new(kind, vec![8, 7, 6, 5, 4, 3, 2, 1]).unwrap();
        assert_eq!(
            json(&outcome),
            json!({ "result": [kind.name(), rebuilt], "logs": [] }).to_string(),
            "{kind}"
        );
    }
}

#[tokio::test]
async fn the_vec_u8_trap_hands_the_program_numbers_and_bytes_hands_it_bytes() {
    #[derive(serde::Serialize)]
    struct Row {
        avatar: Vec<u8>,
    }
    #[derive(serde::Serialize)]
    struct FixedRow {
        avatar: Bytes,
    }
    let latch = Latch::open();
    let dispatch = create_envelope_dispatch(latch, |call: ToolCall| async move {
        Ok::<_, String>(match call.tool.as_str() {
            "trap" => serde_json::to_value(Row { avatar: vec![1, 2, 3] }).unwrap(),
            _ => serde_json::to_value(FixedRow { avatar: vec![1, 2, 3].into() }).unwrap(),
        })
    });
    let outcome = run(Request::new(
        "async () => {
          const trap = (await store.trap()).avatar, fixed = (await store.fixed()).avatar;
          return [Array.isArray(trap), trap instanceof Uint8Array, fixed instanceof Uint8Array, fixed.length];
        }",
    )
    .provider(store(&["trap", "fixed"]))
    .dispatch(dispatch))
    .await;
    assert_eq!(json(&outcome), r#"{"result":[true,false,true,3],"logs":[]}"#);
}

// ---- Dispatch worth copying ----

fn copied_dispatch(latch: Latch) -> impl codemode_protocol::Dispatch {
    create_envelope_dispatch(latch, |call: ToolCall| async move {
        if call.provider != "store" {
            return Err(ToolNotFoundError::new(call.tool));
        }
        let args =
            parse_dispatch_arguments(&call.args_json).map_err(|_| ToolNotFoundError::new(&call.tool))?;
        match call.tool.as_str() {
            "listUsers" => Ok(json!([{ "id": "ada" }, { "id": "grace" }])),
            "findUser" => Ok(json!({ "id": args[0].as_str().unwrap_or_default() })),
            _ => Err(ToolNotFoundError::new(call.tool)),
        }
    })
}

#[tokio::test]
async fn the_dispatch_worth_copying_routes_only_what_it_grants() {
    let latch = Latch::open();
    let outcome = {
        let _finally = latch.close_on_drop();
        run(Request::new(
            "async () => {
              const users = await store.listUsers();
              const one = await store.findUser('grace');
              const refused = [];
              for (const attempt of [() => store.dropTables(), () => __dispatch('secrets', 'read', '[]').then(JSON.parse)]) {
                try { const r = await attempt(); refused.push(r.error ?? r) } catch (e) { refused.push(e.message) }
              }
              return { users: users.length, one: one.id, refused };
            }",
        )
        .provider(store(&["listUsers", "findUser"]))
        .dispatch(copied_dispatch(latch.clone())))
        .await
    };
    assert_eq!(
        json(&outcome),
        r#"{"result":{"users":2,"one":"grace","refused":["Tool \"dropTables\" not found","Tool \"read\" not found"]},"logs":[]}"#
    );
    assert!(!latch.is_open(), "the finally closed the latch");
}

#[tokio::test]
async fn fire_and_forget_leaves_before_the_arrow_returns() {
    let started = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let (s, f) = (started.clone(), finished.clone());
    let dispatch = create_envelope_dispatch(Latch::open(), move |_call: ToolCall| {
        let (s, f) = (s.clone(), f.clone());
        async move {
            s.store(true, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(300)).await;
            f.store(true, Ordering::SeqCst);
            Ok::<_, String>(json!("written"))
        }
    });
    let outcome = run(Request::new("async () => { store.fireAndForget(); return 'returned early' }")
        .provider(store(&["fireAndForget"]))
        .dispatch(dispatch))
    .await;
    assert_eq!(json(&outcome), r#"{"result":"returned early","logs":[]}"#);
    assert!(started.load(Ordering::SeqCst), "the responder started before execute resolved");
    assert!(!finished.load(Ordering::SeqCst), "nothing waited for the answer");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(finished.load(Ordering::SeqCst), "the write went on after the run ended");
}

#[tokio::test]
async fn without_retain_handles_a_timer_after_the_return_never_fires() {
    let recorder = Recorder::default();
    let before = executor().live_engines();
    let outcome = run(Request::new("async () => { setTimeout(() => store.late(), 20); return 'done' }")
        .provider(store(&["late"]))
        .dispatch(recorder.dispatch(echo)))
    .await;
    assert_eq!(json(&outcome), r#"{"result":"done","logs":[]}"#);
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(recorder.calls(), vec![], "the engine was disposed at the end of the run");
    assert!(executor().live_engines() <= before);
}

#[tokio::test]
async fn a_retained_run_keeps_firing_timers_whose_calls_meet_the_completion_text() {
    let executor = codemode_executor::Executor::new(crate::support::config().workers(1));
    let recorder = Recorder::default();
    let (outcome, mut retained) = executor
        .execute_retained(
            Request::new(
                "async () => {
                  let ticks = 0;
                  const timer = setInterval(() => {
                    ticks++;
                    store.late(ticks).then(() => console.log('reached'), (e) => console.log(ticks + ' ' + e.message));
                    if (ticks === 2) clearInterval(timer);
                  }, 20);
                  return 'returned';
                }",
            )
            .provider(store(&["late"]))
            .dispatch(recorder.dispatch(echo)),
        )
        .await;
    assert_eq!(json(&outcome), r#"{"result":"returned","logs":[]}"#);
    assert_eq!(executor.live_engines(), 1, "the engine stays");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        retained.late_logs(),
        vec![
            "1 Execution has already completed.".to_owned(),
            "2 Execution has already completed.".to_owned()
        ]
    );
    assert_eq!(recorder.calls(), vec![], "late calls never entered dispatch");
    retained.release();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(executor.live_engines(), 0, "releasing disposed the engine");
}

#[tokio::test]
async fn dropping_a_retained_execution_releases_it() {
    let executor = codemode_executor::Executor::new(crate::support::config().workers(1));
    let (_, retained) =
        executor.execute_retained(Request::new("async () => { setInterval(() => {}, 5); return 1 }")).await;
    assert_eq!(executor.live_engines(), 1);
    drop(retained);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(executor.live_engines(), 0);
}

// ---- Undeclared names reach your dispatch ----

#[tokio::test]
async fn an_undeclared_provider_reaches_dispatch() {
    let outcome = run(Request::new("async () => await __dispatch('secrets', 'read', '[]')")
        .provider(store(&["listOrders"]))
        .dispatch(|call: ToolCall| async move {
            json!({ "result": { "provider": call.provider, "tool": call.tool, "argsJson": call.args_json } })
                .to_string()
        }))
    .await;
    assert_eq!(
        json(&outcome),
        r#"{"result":"{\"result\":{\"provider\":\"secrets\",\"tool\":\"read\",\"argsJson\":\"[]\"}}","logs":[]}"#
    );
}

#[tokio::test]
async fn an_undeclared_tool_reaches_dispatch_under_its_name() {
    let recorder = Recorder::default();
    let outcome = run(Request::new("async () => (await store.neverListed(1)).tool")
        .provider(store(&["listOrders"]))
        .dispatch(recorder.dispatch(echo)))
    .await;
    assert_eq!(json(&outcome), r#"{"result":"neverListed","logs":[]}"#);
    assert_eq!(recorder.calls(), vec![triple("store", "neverListed", "[1]")]);
}

#[tokio::test]
async fn without_a_dispatch_every_call_is_tool_not_found() {
    let outcome = run(Request::new(
        "async () => { try { await store.listUsers() } catch (e) { return [e.name, e.message] } }",
    )
    .provider(store(&["listUsers"])))
    .await;
    assert_eq!(json(&outcome), r#"{"result":["Error","Tool \"listUsers\" not found"],"logs":[]}"#);
}

// ---- How a failure reads on both sides ----

#[tokio::test]
async fn a_refused_tool_is_an_ordinary_error_in_the_program() {
    let dispatch = create_envelope_dispatch(Latch::open(), |call: ToolCall| async move {
        Err::<(), _>(ToolNotFoundError::new(call.tool))
    });
    let outcome = run(Request::new(
        "async () => {
    try {
      return await store.nope()
    } catch (failure) {
      return { name: failure.name, message: failure.message }
    }
  }",
    )
    .provider(store(&["listUsers"]))
    .dispatch(dispatch))
    .await;
    assert_eq!(
        json(&outcome),
        r#"{"result":{"name":"Error","message":"Tool \"nope\" not found"},"logs":[]}"#
    );
}

#[tokio::test]
async fn an_answer_outside_the_envelope() {
    let outcome = run(Request::new(
        "async () => { try { return await store.x() } catch (failure) { return failure.message } }",
    )
    .provider(store(&["x"]))
    .dispatch(|_call: ToolCall| async { serde_json::to_string("just a string").unwrap() }))
    .await;
    assert_eq!(
        json(&outcome),
        r#"{"result":"The dispatch answered outside the result envelope.","logs":[]}"#
    );
}

/// Answers parsed natively (an object with no tag and no `\u` escape) and answers read by
/// the codec from their text come out alike, late or at once, whatever a program did to
/// Array.prototype.
#[tokio::test]
async fn answers_read_alike_whichever_path_parses_them() {
    let answers = [
        (r#"{"result":{"a":[1,"x",null],"b":true}}"#, r#"{"a":[1,"x",null],"b":true}"#),
        (r#" {"result":"\u00e9t\u00e9"}"#, r#""été""#),
        (r#"{"result":{"k\u00e9":"\ud83d\ude00\u001f","n":-0}}"#, r#"{"ké":"😀\u001f","n":0}"#),
        (r#"{"result":{"\u005f_executor_binary_v1__":"Uint8Array","data":"AQI="}}"#, r#"[1,2]"#),
        (r#"{"result":{"__executor_binary_v1__":"Uint8Array","data":"AQI="}}"#, r#"[1,2]"#),
        (r#"{"error":"no such order"}"#, r#""no such order""#),
        (r#"{"error":{"code":7}}"#, r#""{\"code\":7}""#),
        (r#"{"nothing":1}"#, "null"),
        (r#"{"result":1"#, r#""The dispatch answered outside the result envelope.""#),
        ("[1]", r#""The dispatch answered outside the result envelope.""#),
        // A NUL byte is not JSON, inside a string or after the envelope.
        ("{\"result\":\"a\u{0}b\"}", r#""The dispatch answered outside the result envelope.""#),
        ("{\"result\":1}\u{0}", r#""The dispatch answered outside the result envelope.""#),
    ];
    for late in [false, true] {
        for (answer, expected) in answers {
            let outcome = run(Request::new(
                "async () => { Array.prototype.then = (ok) => ok('hijacked'); try { const v = await store.x(); return v instanceof Uint8Array ? Array.from(v) : v ?? null } catch (failure) { return failure.message } finally { delete Array.prototype.then } }",
            )
            .provider(store(&["x"]))
            .dispatch(move |_call: ToolCall| async move {
                if late {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                answer.to_owned()
            }))
            .await;
            assert_eq!(
                json(&outcome),
                format!(r#"{{"result":{expected},"logs":[]}}"#),
                "{answer} (late: {late})"
            );
        }
    }
}

#[tokio::test]
async fn a_tools_own_message_reaches_the_program_unchanged() {
    let dispatch = create_envelope_dispatch(Latch::open(), |_call: ToolCall| async {
        Err::<(), _>("Order 7 is already shipped; cancel it with store.refund(7) instead.")
    });
    let outcome =
        run(Request::new("async () => { try { await store.cancel(7) } catch (e) { return e.message } }")
            .provider(store(&["cancel"]))
            .dispatch(dispatch))
        .await;
    assert_eq!(
        json(&outcome),
        r#"{"result":"Order 7 is already shipped; cancel it with store.refund(7) instead.","logs":[]}"#
    );
}

#[tokio::test]
async fn a_thrown_tool_failure_does_not_end_the_run_uncaught_it_does() {
    let dispatch = create_envelope_dispatch(Latch::open(), |_call: ToolCall| async {
        Err::<(), _>("the database is down")
    });
    let outcome = run(Request::new("async () => { await store.x(); return 'unreached' }")
        .provider(store(&["x"]))
        .dispatch(dispatch))
    .await;
    // Placed at the call that failed.
    assert_eq!(
        json(&outcome),
        r#"{"error":"the database is down","kind":"thrown","location":{"line":1,"column":27},"logs":[]}"#
    );
}

// ---- Provider source ----

#[tokio::test]
async fn a_prelude_hangs_helpers_on_the_namespace() {
    let recorder = Recorder::default();
    let outcome = run(Request::new("async () => store.helpers.twice(21)")
        .provider(store(&["listUsers"]).prelude("store.helpers = { twice: (n) => n * 2 }"))
        .dispatch(recorder.dispatch(echo)))
    .await;
    assert_eq!(json(&outcome), r#"{"result":42,"logs":[]}"#);
    assert_eq!(recorder.calls(), vec![]);
}

#[tokio::test]
async fn proxy_source_replaces_the_proxy() {
    let outcome = run(Request::new("async () => await api.v1.users.list()")
        .provider(ProviderDescriptor::new("api", ["v1.users.list"]).proxy_source(
            "const api = { v1: { users: { list: async () => {
        const json = await __dispatch('api', 'v1.users.list', __stringifyForDispatch([]))
        const data = __parseForDispatch(json)
        if (data.error) throw new Error(data.error)
        return data.result
      } } } };",
        ))
        .dispatch(|call: ToolCall| async move {
            json!({ "result": format!("{}.{} served", call.provider, call.tool) }).to_string()
        }))
    .await;
    assert_eq!(json(&outcome), r#"{"result":"api.v1.users.list served","logs":[]}"#);
}

#[tokio::test]
async fn proxy_source_without_the_then_guard_hands_awaiting_programs_a_call_named_then() {
    let recorder = Recorder::default();
    let outcome = run(Request::new("async () => { await Promise.race([api, new Promise(r => setTimeout(r, 50))]); return 'awaited' }")
        .provider(ProviderDescriptor::new("api", ["x"]).proxy_source(
            "const api = new Proxy({}, { get: (t, key) => typeof key === 'symbol' ? undefined : (...args) => __dispatch('api', key, __stringifyForDispatch(args)) });",
        ))
        .dispatch(recorder.dispatch(echo)))
    .await;
    assert_eq!(json(&outcome), r#"{"result":"awaited","logs":[]}"#);
    assert_eq!(recorder.calls().first().map(|c| c.1.clone()), Some("then".to_owned()));
}

// ---- Names a provider may not take ----

#[tokio::test]
async fn the_four_provider_name_refusals_before_the_program_runs() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["console"],
            "Provider name \"console\" is reserved. Give the provider a name the entry scope does not bind.",
        ),
        (
            &["my-store"],
            "Provider name \"my-store\" must be ASCII letters, digits, underscore and dollar, and must not start with a digit.",
        ),
        (
            &["class"],
            "Provider name \"class\" is on the list this executor refuses: every ECMAScript reserved word, the names strict mode reserves, and async. Pick a name outside it.",
        ),
        (&["store", "store"], "Provider name \"store\" is declared twice. Give each provider its own name."),
    ];
    for (names, text) in cases {
        let recorder = Recorder::default();
        let providers = names.iter().map(|n| ProviderDescriptor::new(*n, ["x"]));
        let outcome = run(Request::new("async () => { console.log('ran'); await store.x() }")
            .providers(providers)
            .dispatch(recorder.dispatch(echo)))
        .await;
        assert_eq!(json(&outcome), json!({ "error": text, "kind": "invalid", "logs": [] }).to_string());
        assert_eq!(recorder.calls(), vec![]);
    }
}

/// The guide prints V8's `fetch is not a function`; QuickJS words it its own way
/// (docs/failures.md lists the difference).
#[tokio::test]
async fn a_provider_named_fetch_breaks_only_the_program() {
    const V8_TEXT: &str = "fetch is not a function";
    const QUICKJS_TEXT: &str = "not a function";
    let outcome = run(Request::new(
        "async () => { try { const r = await fetch('https://example.com'); return 'reached ' + r.status } catch (failure) { return failure.message } }",
    )
    .provider(ProviderDescriptor::new("fetch", ["x"]))
    .dispatch(|call: ToolCall| async move { echo(&call) }))
    .await;
    assert_ne!(QUICKJS_TEXT, V8_TEXT);
    let text = if crate::support::engine().name() == "v8" { V8_TEXT } else { QUICKJS_TEXT };
    assert_eq!(json(&outcome), json!({ "result": text, "logs": [] }).to_string());
    let typeof_fetch =
        run(Request::new("async () => typeof fetch").provider(ProviderDescriptor::new("fetch", ["x"]))).await;
    assert_eq!(json(&typeof_fetch), r#"{"result":"object","logs":[]}"#);
}

#[tokio::test]
async fn binary_among_look_alike_data_crosses_exactly() {
    let recorder = Recorder::default();
    let outcome = run(Request::new(
        r#"async () => {
          await store.mixed([{ data: 0 }, new Uint8Array([1]), { x: '{"__executor_binary_v1__":"' }, new Uint16Array([2]), '}']);
          await store.own({ __executor_binary_v1__: 'Uint8Array', data: 'AQID' }, new Uint8Array([9]));
          return 'sent';
        }"#,
    )
    .provider(store(&["mixed", "own"]))
    .dispatch(recorder.dispatch(|_| "{}".to_owned())))
    .await;
    assert_eq!(json(&outcome), r#"{"result":"sent","logs":[]}"#);
    assert_eq!(
        recorder.calls(),
        vec![
            triple(
                "store",
                "mixed",
                r#"[[{"data":0},{"__executor_binary_v1__":"Uint8Array","data":"AQ=="},{"x":"{\"__executor_binary_v1__\":\""},{"__executor_binary_v1__":"Uint16Array","data":"AgA="},"}"]]"#
            ),
            triple(
                "store",
                "own",
                r#"[{"__executor_binary_v1__":"Uint8Array","data":"AQID"},{"__executor_binary_v1__":"Uint8Array","data":"CQ=="}]"#
            ),
        ]
    );
}

#[tokio::test]
async fn large_answers_read_the_same_spliced_or_not() {
    let pad = "p".repeat(70000);
    let big = move |fields: &str| format!(r#"{{"result":{{{fields},"pad":"{pad}"}}}}"#);
    let answers = [
        ("big", big(r#""bytes":{"__executor_binary_v1__":"Uint8Array","data":"BwcH"}"#)),
        ("bigQuote", big(r#""bytes":{"__executor_binary_v1__":"Uint8Array","data":"BwcH"},"note":"=x""#)),
        ("bigBad", big(r#""bytes":{"__executor_binary_v1__":"Uint8Array","data":"B!cH"}"#)),
        (
            "bigError",
            format!(
                r#"{{"error":{{"tag":{{"__executor_binary_v1__":"Uint8Array","data":"BwcH"}}}},"pad":"{}"}}"#,
                "q".repeat(70000)
            ),
        ),
        ("bigLoose", big(r#""bytes":{ "__executor_binary_v1__": "Uint16Array", "data": "BwcH" }"#)),
    ];
    let outcome = run(Request::new(
        "async () => {
          const out = [];
          for (const tool of ['big', 'bigQuote', 'bigBad', 'bigError', 'bigLoose']) {
            try { const r = await store[tool](); out.push([tool, r.bytes.constructor.name, Array.from(r.bytes)]) }
            catch (e) { out.push([tool, e.message.slice(0, 100)]) }
          }
          return out;
        }",
    )
    .provider(store(&["big"]))
    .dispatch(move |call: ToolCall| {
        let answer = answers.iter().find(|(tool, _)| *tool == call.tool).map(|(_, a)| a.clone()).unwrap_or_default();
        async move { answer }
    }))
    .await;
    assert_eq!(
        json(&outcome),
        json!({ "result": [
            ["big", "Uint8Array", [7, 7, 7]],
            ["bigQuote", "Uint8Array", [7, 7, 7]],
            ["bigBad", "Binary tag \"Uint8Array\" carries data that is not standard padded base64."],
            ["bigError", r#"{"tag":{"__executor_binary_v1__":"Uint8Array","data":"BwcH"}}"#],
            ["bigLoose", "Binary tag \"Uint16Array\" carries 3 bytes, which is not a whole number of 2-byte elements."],
        ], "logs": [] })
        .to_string()
    );
}
