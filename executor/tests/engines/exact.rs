//! Exact outcomes at the edges: lone surrogates, deep values, late-handled rejections,
//! and a program's own text that only looks like one of the executor's.

use std::time::{Duration, Instant};

use crate::support::{json, run};
use codemode_executor::Request;
use codemode_protocol::{OutcomeKind, ProviderDescriptor};

#[tokio::test]
async fn lone_surrogates_become_replacement_characters() {
    assert_eq!(
        json(&run(Request::new(r"async () => 'a\uD800b'")).await),
        "{\"result\":\"a\u{FFFD}b\",\"logs\":[]}"
    );
    assert_eq!(
        json(&run(Request::new(r"async () => { console.log('abc\uD800def', 'ok') }")).await),
        "{\"logs\":[\"abc\u{FFFD}def ok\"]}"
    );
    assert_eq!(
        json(&run(Request::new(r"async () => { throw new Error('bad \uD800 thing') }")).await),
        "{\"error\":\"bad \u{FFFD} thing\",\"kind\":\"thrown\",\"location\":{\"line\":1,\"column\":21},\"logs\":[]}"
    );
    assert_eq!(
        json(&run(Request::new(r"async () => Array.from(new TextEncoder().encode('a\uD800b'))")).await),
        r#"{"result":[97,239,191,189,98],"logs":[]}"#
    );
}

#[tokio::test]
async fn deep_values_come_back_as_values() {
    let outcome =
        run(Request::new("async () => { let v = []; for (let i = 0; i < 200; i++) v = [v]; return v }"))
            .await;
    let expected = format!("{{\"result\":{}{},\"logs\":[]}}", "[".repeat(201), "]".repeat(201));
    assert_eq!(json(&outcome), expected);
    let outcome = run(Request::new(
        "async () => { let v = {}; for (let i = 0; i < 1000; i++) v = { v }; let depth = 0; for (let o = v; o.v; o = o.v) depth++; return [depth, JSON.stringify(v).length] }",
    ))
    .await;
    assert_eq!(json(&outcome), r#"{"result":[1000,6002],"logs":[]}"#);
}

#[tokio::test]
async fn rejections_handled_late_cost_linear_time() {
    let started = Instant::now();
    let outcome = run(Request::new(
        "async () => { const ps = []; for (let i = 0; i < 30000; i++) ps.push(Promise.reject(i)); await null; const all = await Promise.allSettled(ps); return all.length }",
    )
    .timeout(Duration::from_secs(20)))
    .await;
    assert_eq!(json(&outcome), r#"{"result":30000,"logs":[]}"#);
    // Quadratic bookkeeping took 6 s here; linear takes a small fraction of that even in a debug build.
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_program_cannot_pass_for_a_timeout() {
    let forged = run(Request::new("async () => { throw 'Execution timed out after 30000 ms.' }")).await;
    assert_eq!(json(&forged), r#"{"error":"Execution timed out after 30000 ms.","kind":"thrown","logs":[]}"#);
    let real = run(Request::new("async () => { for (;;) {} }").timeout(Duration::from_millis(200))).await;
    assert_eq!(json(&real), r#"{"error":"Execution timed out after 200 ms.","kind":"timeout","logs":[]}"#);
    let forged_memory = run(Request::new(
        "async () => { throw new Error('Execution ran out of memory: the limit is 1 bytes.') }",
    ))
    .await;
    assert_eq!(forged_memory.kind(), OutcomeKind::Thrown);
}

#[tokio::test]
async fn an_uncaught_refusal_is_a_payload_outcome() {
    let outcome = run(Request::new("async () => { await store.put('x'.repeat(100)) }")
        .provider(codemode_protocol::ProviderDescriptor::new("store", ["put"]))
        .dispatch(|_: codemode_protocol::ToolCall| async { "{\"result\":1}".to_owned() })
        .max_payload_bytes(64))
    .await;
    assert_eq!(
        json(&outcome),
        r#"{"error":"Tool call payload is 112 bytes, over the limit of 64 bytes (provider, tool and arguments together). Send less per call.","kind":"payload","location":{"line":1,"column":27},"logs":[]}"#,
        "the refusal is placed at the call"
    );
}

#[tokio::test]
async fn a_call_past_the_payload_bound_is_refused_before_it_is_copied() {
    let started = Instant::now();
    let outcome = run(Request::new(
        "async () => { try { await __dispatch('a', 'b', 'x'.repeat(2 ** 24)) } catch (e) { return e.message } }",
    ))
    .await;
    assert_eq!(
        json(&outcome),
        r#"{"result":"Tool call payload is 16777218 bytes, over the limit of 8388608 bytes (provider, tool and arguments together). Send less per call.","logs":[]}"#
    );
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

/// `JSON.parse` reads every form as the standard says, on the paths the engines take for
/// the common case (plain keys, short integers, fresh objects and arrays) and off them
/// (repeated keys, escapes, long numbers, a reviver), in a program and in a tool's answer.
#[tokio::test]
async fn json_is_read_as_the_standard_says() {
    let program = r#"async () => {
      const out = [];
      const twice = JSON.parse('{"b":1,"a":2,"b":3}');
      out.push(JSON.stringify(twice), Object.keys(twice).join());
      const proto = JSON.parse('{"__proto__":{"x":1},"y":2}');
      out.push(Object.keys(proto).join(), Object.getPrototypeOf(proto) === Object.prototype, proto.x === undefined);
      out.push(Object.keys(JSON.parse('{"2":"a","1":"b","x":"c","0":"d"}')).join());
      const keys = JSON.parse('{"\u00e9":1,"a\\u0062":2,"":3,"a b":4,"\\"q\\"":5}');
      out.push(JSON.stringify(Object.keys(keys)));
      const n = JSON.parse('[0,-0,7,-42,123456789012345,-123456789012345,1234567890123456,12345678901234567890,9007199254740993,1.5,1e3,2E-2,-0.0,1e400,-1e400]');
      out.push(JSON.stringify(n), Object.is(n[1], -0), Object.is(n[12], -0), n[13] === Infinity, n[14] === -Infinity);
      out.push(JSON.stringify(JSON.parse(' { "a" : [ 1 , { "b" : null } ] ,\n "c" : true } ')));
      out.push(JSON.stringify(JSON.parse('{"a":[1,2],"b":{"c":3}}', (k, v) => typeof v === 'number' ? v * 10 : v)));
      const rows = Array.from({ length: 1000 }, (_, i) => ({ id: i, name: 'n' + i, tags: [i % 3, 'x'], open: i % 2 === 0 }));
      out.push(JSON.stringify(JSON.parse(JSON.stringify(rows))) === JSON.stringify(rows));
      const shared = JSON.parse('[{"a":1,"b":2},{"a":3,"b":4},{"b":5,"a":6},{"a":7},{"a":8,"b":9,"c":10},{"a":1,"a":2,"b":3},{}]');
      shared[0].c = 'x'; delete shared[1].a; Object.freeze(shared[4]); shared[3].b = 'y'; shared[6].z = 0;
      out.push(JSON.stringify(shared), Object.isFrozen(shared[0]), Object.isFrozen(shared[4]), Object.keys(shared[5]).join());
      const wide = '{' + Array.from({ length: 20 }, (_, i) => '"k' + (i % 17) + '":' + i).join() + '}';
      out.push(JSON.stringify(JSON.parse('[' + wide + ',' + wide + ']')[1]));
      // As deep as unpatched QuickJS read within the default stack limit (10,781 objects).
      const depth = (v) => { let d = 0; for (; typeof v === 'object' && v !== null; v = Array.isArray(v) ? v[0] : v.a) d++; return d };
      out.push(depth(JSON.parse('{"a":'.repeat(10000) + '1' + '}'.repeat(10000))), depth(JSON.parse('['.repeat(10000) + ']'.repeat(10000))), depth(JSON.parse('[{"a":'.repeat(5000) + '1' + '}]'.repeat(5000))));
      const sparse = JSON.parse('[[],{},[[]],{"a":{}}]');
      out.push(JSON.stringify(sparse), Array.isArray(sparse[0]), sparse.length);
      // Keywords and keys read where they are expected, and what only looks like them.
      out.push(JSON.stringify(JSON.parse('[true, null,false,"s",12,{"a":true}]', (k, v, c) => c && c.source !== undefined ? c.source : v)));
      out.push(JSON.stringify(JSON.parse(' [true ,false\n,null,{"t":true}]')), JSON.stringify(JSON.parse('[{"ab":1},{"abc":2},{"a":3},{"ab":4},{"a\\\\b":5},{"a\\\\b":6},{"a\\u0062":7},{"\u007f":8},{"\u007f":9}]')).replace(/\u007f/g, 'DEL'));
      for (const bad of ['[{"a\\"":1},{"a"":2}]', '[{"a\\u0001":1},{"a\u0001":2}]', '[{"a\\u0000":1},{"a\u0000":2}]', 'truex', '[tru]', '{"a":nul}', '[null_]', 'false$', '[{"ab":1},{"ab\u0001":2}]', '[{"ab":1},{"ab', '{"a":1,"b":2', '{"a":1 ,}', '{"a":1} ,', '[1 ,]', '{"a" 1}', '{"a":1,}', '{,}', '[1,]', '{"a":01}', '{"a\u0001":1}', '{"a', '{"a":', '{"a":1', '[1', '{"a":1}x']) {
        try { JSON.parse(bad); out.push('parsed ' + bad) } catch (e) { out.push(e.name) }
      }
      const answer = await store.x();
      out.push(Object.keys(answer).join(), answer.b, Object.getPrototypeOf(answer) === Object.prototype, Object.is(answer.n[0], -0), answer.n[1]);
      return out;
    }"#;
    let outcome = run(Request::new(program).provider(ProviderDescriptor::new("store", ["x"])).dispatch(
        |_call: codemode_protocol::ToolCall| async {
            r#"{"result":{"b":1,"a":2,"b":3,"2":0,"__proto__":5,"n":[-0,12345678901234567890]}}"#.to_owned()
        },
    ))
    .await;
    assert_eq!(
        json(&outcome),
        concat!(
            r#"{"result":["{\"b\":3,\"a\":2}","b,a","__proto__,y",true,true,"0,1,2,x","[\"é\",\"ab\",\"\",\"a b\",\"\\\"q\\\"\"]","#,
            r#""[0,0,7,-42,123456789012345,-123456789012345,1234567890123456,12345678901234567000,9007199254740992,1.5,1000,0.02,0,null,null]",true,true,true,true,"#,
            r#""{\"a\":[1,{\"b\":null}],\"c\":true}","{\"a\":[10,20],\"b\":{\"c\":30}}",true,"#,
            r#""[{\"a\":1,\"b\":2,\"c\":\"x\"},{\"b\":4},{\"b\":5,\"a\":6},{\"a\":7,\"b\":\"y\"},{\"a\":8,\"b\":9,\"c\":10},{\"a\":2,\"b\":3},{\"z\":0}]",false,true,"a,b","#,
            r#""{\"k0\":17,\"k1\":18,\"k2\":19,\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,\"k9\":9,\"k10\":10,\"k11\":11,\"k12\":12,\"k13\":13,\"k14\":14,\"k15\":15,\"k16\":16}","#,
            r#"10000,10000,10000,"[[],{},[[]],{\"a\":{}}]",true,4,"#,
            r#""[\"true\",\"null\",\"false\",\"\\\"s\\\"\",\"12\",{\"a\":\"true\"}]","[true,false,null,{\"t\":true}]","[{\"ab\":1},{\"abc\":2},{\"a\":3},{\"ab\":4},{\"a\\\\b\":5},{\"a\\\\b\":6},{\"ab\":7},{\"DEL\":8},{\"DEL\":9}]","#,
            r#""SyntaxError","SyntaxError","SyntaxError","#,
            r#""SyntaxError","SyntaxError","SyntaxError","SyntaxError","SyntaxError","SyntaxError","SyntaxError","SyntaxError","SyntaxError","SyntaxError","SyntaxError","#,
            r#""SyntaxError","SyntaxError","SyntaxError","SyntaxError","SyntaxError","SyntaxError","SyntaxError","SyntaxError","SyntaxError","SyntaxError","SyntaxError","#,
            r#""2,b,a,__proto__,n",3,true,true,12345678901234567000],"logs":[]}"#
        )
    );
}

/// On QuickJS, `JSON.parse`'s errors are QuickJS's own, to the byte: message, position
/// and the stack's first line, through the tokenizer's fast paths (punctuators, keywords,
/// keys compared where expected) as through its general one, and across lines.
#[tokio::test]
async fn json_errors_are_quickjs_own_on_quickjs() {
    if crate::support::engine() != codemode_executor::EngineKind::QuickJs {
        return;
    }
    let program = r#"async () => {
      const texts = ['{"a":1,}', '[{"ab":1},{"ab":2,"c"}]', '{"a" :\n tru}', '[true,\n  falsey]', '[{"a\\"":1},{"a"":2}]', '[{"ab":1},{"ab\u0001":2}]', '{"a":1}\n x', '[1,\r\n2,,3]', '{"a":[1,2}', 'nul', '[{"a\\u0000":1},{"a\u0000":2}]'];
      return texts.map((t) => { try { JSON.parse(t); return 'parsed' } catch (e) { return e.message + ' @' + e.stack.split('\n')[0].replace('    at', '') } });
    }"#;
    let outcome = run(Request::new(program)).await;
    let expected = serde_json::json!({ "result": [
        "Expected property name or '}' in JSON at position 7 (line 1 column 8) @ <input>:1:8",
        "Expected ':' after property name in JSON at position 21 (line 1 column 22) @ <input>:1:22",
        "unexpected token: 'tru' @ <input>:2:2",
        "unexpected token: 'falsey' @ <input>:2:3",
        "Unexpected end of JSON input @ <input>:1:16",
        "Bad control character in string literal in JSON at position 14 (line 1 column 15) @ <input>:1:12",
        "unexpected data at the end @ <input>:2:2",
        "unexpected token: ',' @ <input>:2:3",
        "Expected ',' or ']' after array element in JSON at position 9 (line 1 column 10) @ <input>:1:10",
        "unexpected token: 'nul' @ <input>:1:1",
        "Bad control character in string literal in JSON at position 18 (line 1 column 19) @ <input>:1:17",
    ], "logs": [] });
    assert_eq!(json(&outcome), expected.to_string());
}
