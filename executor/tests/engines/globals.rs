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
