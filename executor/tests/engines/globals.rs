//! The sandbox's globals: what a program has, and that nothing of the host is there.

use crate::support::*;
use codemode_executor::Request;
use codemode_protocol::{ProviderDescriptor, ToolCall};

async fn outcome(code: &str) -> String {
    json(&run(Request::new(code)).await)
}

#[tokio::test]
async fn the_web_globals_are_present() {
    let code = "async () => ['console', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'queueMicrotask',
      'TextEncoder', 'TextDecoder', 'atob', 'btoa', 'structuredClone', 'fetch'].map((n) => n + ':' + typeof globalThis[n])";
    assert_eq!(
        outcome(code).await,
        r#"{"result":["console:object","setTimeout:function","clearTimeout:function","setInterval:function","clearInterval:function","queueMicrotask:function","TextEncoder:function","TextDecoder:function","atob:function","btoa:function","structuredClone:function","fetch:function"],"logs":[]}"#
    );
}

#[tokio::test]
async fn text_encoding_and_base64() {
    let code = "async () => {
      const bytes = new TextEncoder().encode('héllo ✓');
      return [Array.from(bytes), new TextDecoder().decode(bytes), btoa('hello'), atob('aGVsbG8='), atob('aGk')];
    }";
    assert_eq!(
        outcome(code).await,
        r#"{"result":[[104,195,169,108,108,111,32,226,156,147],"héllo ✓","aGVsbG8=","hello","hi"],"logs":[]}"#
    );
    assert_eq!(
        outcome("async () => { try { btoa('✓') } catch (e) { return e.message } }").await,
        r#"{"result":"btoa: the string contains a character outside Latin-1","logs":[]}"#
    );
}

#[tokio::test]
async fn structured_clone_copies_deeply() {
    let code = "async () => {
      const original = { list: [1, { deep: true }], when: new Date(0), map: new Map([['k', 1]]), bytes: new Uint8Array([5]) };
      original.self = original;
      const copy = structuredClone(original);
      copy.list[1].deep = false;
      return [original.list[1].deep, copy.self === copy, copy.when.getTime(), copy.map.get('k'), copy.bytes[0], copy.bytes !== original.bytes];
    }";
    assert_eq!(outcome(code).await, r#"{"result":[true,true,0,1,5,true],"logs":[]}"#);
}

#[tokio::test]
async fn timers_and_microtasks_run_in_order() {
    let code = "async () => {
      const order = [];
      setTimeout(() => order.push('timeout 20'), 20);
      setTimeout((a, b) => order.push('timeout 0 ' + a + b), 0, 'x', 'y');
      const cleared = setTimeout(() => order.push('cleared'), 5);
      clearTimeout(cleared);
      queueMicrotask(() => order.push('microtask'));
      let ticks = 0;
      await new Promise((done) => { const i = setInterval(() => { if (++ticks === 3) { clearInterval(i); done() } }, 1) });
      await new Promise((done) => setTimeout(done, 30));
      order.push('ticks ' + ticks);
      return order;
    }";
    assert_eq!(
        outcome(code).await,
        r#"{"result":["microtask","timeout 0 xy","timeout 20","ticks 3"],"logs":[]}"#
    );
}

#[tokio::test]
async fn nothing_of_the_host_is_reachable() {
    let code =
        "async () => ['process', 'require', 'module', 'std', 'os', 'Deno', 'Bun', 'scriptArgs', 'print']
      .filter((name) => typeof globalThis[name] !== 'undefined')";
    assert_eq!(outcome(code).await, r#"{"result":[],"logs":[]}"#);
    let import = outcome(
        "async () => { try { await import('os'); return 'loaded' } catch (e) { return e.constructor.name } }",
    )
    .await;
    assert!(!import.contains("loaded"), "{import}");
}

#[tokio::test]
async fn the_function_constructor_reaches_only_the_sandbox_global() {
    let outcome = run(Request::new(
        "async () => { const g = store.get.constructor.constructor('return this')(); return [g === globalThis, typeof g.process, typeof g.store] }",
    )
    .provider(ProviderDescriptor::new("store", ["get"]))
    .dispatch(|_: ToolCall| async { "{}".to_owned() }))
    .await;
    assert_eq!(json(&outcome), r#"{"result":[true,"undefined","undefined"],"logs":[]}"#);
}

#[tokio::test]
async fn a_global_written_by_one_execution_is_absent_in_the_next() {
    assert_eq!(
        outcome("async () => { globalThis.leak = 'secret'; Array.prototype.poisoned = 1; return 1 }").await,
        r#"{"result":1,"logs":[]}"#
    );
    assert_eq!(
        outcome("async () => [typeof leak, typeof [].poisoned]").await,
        r#"{"result":["undefined","undefined"],"logs":[]}"#
    );
}

/// What a program sees of the global object on QuickJS, pinned whole: every own name in
/// order, its `typeof`, whether it is `in` the global, and its attributes (`d` data or `a`
/// accessor, then writable, enumerable, configurable). A change to how the engine or the
/// prelude builds the global (intrinsics added late, say) must leave this line unchanged.
#[tokio::test]
async fn the_global_object_is_pinned_on_quickjs() {
    if engine() != codemode_executor::EngineKind::QuickJs {
        return;
    }
    // Every descriptor is read before any value: reading a web global installs them all.
    let code = "async () => {
      const names = Object.getOwnPropertyNames(globalThis);
      const flags = names.map((n) => {
        const d = Object.getOwnPropertyDescriptor(globalThis, n);
        return ('value' in d ? 'd' : 'a') + (d.writable ? 'w' : '-') + (d.enumerable ? 'e' : '-') + (d.configurable ? 'c' : '-');
      });
      const symbols = Object.getOwnPropertySymbols(globalThis).map(String).join(' ');
      const keys = Object.keys(globalThis).join(' ');
      const seen = names.map((n, i) => n + ':' + flags[i] + ':' + (n in globalThis ? '' : 'absent:') + typeof globalThis[n]);
      const same = Object.getOwnPropertyNames(globalThis).join(' ') === names.join(' ');
      return seen.join(' ') + ' | ' + symbols + ' | ' + keys + ' | names unchanged by touch: ' + same;
    }";
    assert_eq!(outcome(code).await, PINNED_GLOBALS);
}

const PINNED_GLOBALS: &str = concat!(
    r#"{"result":""#,
    "Object:dw-c:function Function:dw-c:function Error:dw-c:function ",
    "EvalError:dw-c:function RangeError:dw-c:function ReferenceError:dw-c:function ",
    "SyntaxError:dw-c:function TypeError:dw-c:function URIError:dw-c:function ",
    "InternalError:dw-c:function AggregateError:dw-c:function ",
    "SuppressedError:dw-c:function Iterator:dw-c:function Array:dw-c:function ",
    "parseInt:dw-c:function parseFloat:dw-c:function isNaN:dw-c:function ",
    "isFinite:dw-c:function queueMicrotask:a--c:function decodeURI:dw-c:function ",
    "decodeURIComponent:dw-c:function encodeURI:dw-c:function ",
    "encodeURIComponent:dw-c:function escape:dw-c:function unescape:dw-c:function ",
    "Infinity:d---:number NaN:d---:number undefined:d---:undefined eval:dw-c:function ",
    "Number:dw-c:function Boolean:dw-c:function String:dw-c:function Math:dw-c:object ",
    "Reflect:dw-c:object Symbol:dw-c:function DisposableStack:dw-c:function ",
    "globalThis:dw-c:object BigInt:dw-c:function Date:dw-c:function RegExp:dw-c:function ",
    "JSON:dw-c:object Proxy:dw-c:function Map:dw-c:function Set:dw-c:function ",
    "WeakMap:dw-c:function WeakSet:dw-c:function ArrayBuffer:dw-c:function ",
    "SharedArrayBuffer:dw-c:function Uint8ClampedArray:dw-c:function ",
    "Int8Array:dw-c:function Uint8Array:dw-c:function Int16Array:dw-c:function ",
    "Uint16Array:dw-c:function Int32Array:dw-c:function Uint32Array:dw-c:function ",
    "BigInt64Array:dw-c:function BigUint64Array:dw-c:function Float16Array:dw-c:function ",
    "Float32Array:dw-c:function Float64Array:dw-c:function DataView:dw-c:function ",
    "Atomics:dw-c:object Promise:dw-c:function AsyncDisposableStack:dw-c:function ",
    "WeakRef:dw-c:function FinalizationRegistry:dw-c:function DOMException:dw-c:function ",
    "btoa:a--c:function atob:a--c:function performance:dwec:object ",
    "__dispatch:dwec:function __bytesToBase64:dwec:function __base64ToBytes:dwec:function ",
    "console:dwec:object setTimeout:dwec:function setInterval:dwec:function ",
    "clearTimeout:dwec:function clearInterval:dwec:function TextEncoder:a--c:function ",
    "TextDecoder:a--c:function structuredClone:a--c:function Headers:a--c:function ",
    "Response:a--c:function fetch:a--c:function | Symbol(Symbol.toStringTag) | ",
    "performance __dispatch __bytesToBase64 __base64ToBytes console setTimeout ",
    "setInterval clearTimeout clearInterval | names unchanged by touch: true",
    r#"","logs":[]}"#
);
